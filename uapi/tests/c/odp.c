/* On-demand paging through rdma-core's libibverbs + libmlx5 (run under `ferroverbs
 * run`): the ODP capabilities ibv_query_device_ex reports; an ODP region registered
 * over memory with a hole (a pinned registration of one is EFAULT) and never touched;
 * RDMA WRITEs into it and READs from it by a connected RC QP of the same NIC, the
 * device following the process's page tables (a page unmapped and mapped again with
 * new bytes is read with the new bytes); ibv_advise_mr's errnos; the implicit region
 * refused; a WRITE into a page the process may not access completes in error. Prints "PASS name" /
 * "FAIL name: detail" and exits 1 on failure. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#include "checker.h"

#define PAGE 4096
#define ACCESS (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

/* Polls `cq` for one completion (bounded); its status, or -1 when none came. */
static int poll_one(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	for (long k = 0; k < 400000000L; k++) {
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			return -1;
		if (n == 1)
			return wc.status;
	}
	return -1;
}

int main(void)
{
	struct ibv_device **list;
	struct ibv_context *ctx = open_first_device(&list);
	char d[160];

	struct ibv_device_attr_ex ax;
	memset(&ax, 0, sizeof ax);
	int q = ibv_query_device_ex(ctx, NULL, &ax);
	uint32_t rc_all = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
			  IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
	snprintf(d, sizeof d, "rc=%d general %#llx rc %#x uc %#x ud %#x", q,
		 (unsigned long long)ax.odp_caps.general_caps, ax.odp_caps.per_transport_caps.rc_odp_caps,
		 ax.odp_caps.per_transport_caps.uc_odp_caps, ax.odp_caps.per_transport_caps.ud_odp_caps);
	check("odp_caps", q == 0 && ax.odp_caps.general_caps == IBV_ODP_SUPPORT &&
				  ax.odp_caps.per_transport_caps.rc_odp_caps == rc_all &&
				  ax.odp_caps.per_transport_caps.uc_odp_caps == 0 &&
				  ax.odp_caps.per_transport_caps.ud_odp_caps == IBV_ODP_SUPPORT_SEND &&
				  ax.xrc_odp_caps == 0,
	      d);

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char *local = aligned_alloc(PAGE, 4 * PAGE);
	memset(local, 0, 4 * PAGE);
	struct ibv_mr *lmr = pd ? ibv_reg_mr(pd, local, 4 * PAGE, IBV_ACCESS_LOCAL_WRITE) : NULL;
	/* Four pages never written by the process: the third unmapped (a hole; a later
	 * mapping of the process may take it), the fourth inaccessible. */
	char *odp = mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	check("setup", pd && lmr && odp != MAP_FAILED && munmap(odp + 2 * PAGE, PAGE) == 0 &&
			       mprotect(odp + 3 * PAGE, PAGE, PROT_NONE) == 0,
	      "allocation failed");
	if (!pd || !lmr || odp == MAP_FAILED)
		return 1;

	errno = 0;
	struct ibv_mr *pinned = ibv_reg_mr(pd, odp, 3 * PAGE, IBV_ACCESS_LOCAL_WRITE | ACCESS);
	snprintf(d, sizeof d, "mr %p errno %d", (void *)pinned, errno);
	check("pinned_registration_of_a_hole_is_efault", !pinned && errno == EFAULT, d);

	struct ibv_mr *mr =
		ibv_reg_mr(pd, odp, 4 * PAGE, IBV_ACCESS_LOCAL_WRITE | ACCESS | IBV_ACCESS_ON_DEMAND);
	snprintf(d, sizeof d, "errno %d", errno);
	check("odp_registration_over_a_hole", mr != NULL, d);

	errno = 0;
	struct ibv_mr *implicit = ibv_reg_mr(pd, NULL, SIZE_MAX,
					     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
	snprintf(d, sizeof d, "mr %p errno %d", (void *)implicit, errno);
	check("implicit_odp_is_einval", !implicit && errno == EINVAL, d);
	if (!mr)
		return 1;

	struct ibv_cq *cqa = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_cq *cqb = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_qp *qa = cqa ? rc_qp(pd, cqa) : NULL;
	struct ibv_qp *qb = cqb ? rc_qp(pd, cqb) : NULL;
	union ibv_gid gid;
	check("qps", qa && qb && !ibv_query_gid(ctx, 1, 0, &gid), "creation failed");
	if (!qa || !qb)
		return 1;
	int r1 = qp_to_rts(qa, ACCESS, qb->qp_num, &gid, 14);
	int r2 = qp_to_rts(qb, ACCESS, qa->qp_num, &gid, 14);
	check("connect", !r1 && !r2, "modify failed");

	/* A WRITE into the untouched first page, across into the second. */
	for (int i = 0; i < 512; i++)
		local[i] = (char)(i * 7 + 1);
	int st = post_write(qa, lmr, local, (uintptr_t)(odp + PAGE - 256), mr->rkey, 512, 1) ? -2
											      : poll_one(cqa);
	snprintf(d, sizeof d, "status %d", st);
	check("write_into_untouched_odp_pages", st == IBV_WC_SUCCESS &&
						    memcmp(odp + PAGE - 256, local, 512) == 0,
	      d);

	/* The second page replaced under the region by a new mapping with new bytes. */
	char *again = mmap(odp + PAGE, PAGE, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	check("remap", again == odp + PAGE, "mmap failed");
	memset(odp + PAGE, 0x5a, PAGE);
	st = post_rdma(qa, IBV_WR_RDMA_READ, lmr, local + PAGE, (uintptr_t)(odp + PAGE), mr->rkey,
		       128, 3)
		     ? -2
		     : poll_one(cqa);
	int same = 1;
	for (int i = 0; i < 128; i++)
		same &= local[PAGE + i] == 0x5a;
	snprintf(d, sizeof d, "status %d, first byte %#x", st, (unsigned char)local[PAGE]);
	check("read_follows_the_page_tables", st == IBV_WC_SUCCESS && same, d);

	/* ibv_advise_mr. */
	struct ibv_sge sge = {.addr = (uintptr_t)odp, .length = PAGE, .lkey = mr->lkey};
	int a = ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1);
	snprintf(d, sizeof d, "returned %d", a);
	check("advise_sync_prefetch", a == 0, d);
	struct ibv_sge hole = {.addr = (uintptr_t)(odp + 3 * PAGE), .length = 64, .lkey = mr->lkey};
	a = ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, &hole, 1);
	snprintf(d, sizeof d, "returned %d", a);
	check("advise_sync_prefetch_of_an_inaccessible_page_is_efault", a == EFAULT, d);
	a = ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, IBV_ADVISE_MR_FLAG_FLUSH, &hole, 1);
	snprintf(d, sizeof d, "returned %d", a);
	check("advise_no_fault_of_an_inaccessible_page", a == 0, d);
	struct ibv_sge outside = {.addr = (uintptr_t)(odp + 4 * PAGE), .length = 8, .lkey = mr->lkey};
	a = ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, &outside, 1);
	snprintf(d, sizeof d, "returned %d", a);
	check("advise_outside_the_region_is_efault", a == EFAULT, d);
	struct ibv_sge pinned_sge = {.addr = (uintptr_t)local, .length = 64, .lkey = lmr->lkey};
	a = ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &pinned_sge, 1);
	snprintf(d, sizeof d, "returned %d", a);
	check("advise_of_a_pinned_region_is_enoent", a == ENOENT, d);
	a = ibv_advise_mr(pd, (enum ibv_advise_mr_advice)7, 0, &sge, 1);
	snprintf(d, sizeof d, "returned %d", a);
	check("unknown_advice_is_eopnotsupp", a == EOPNOTSUPP, d);
	a = ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 1u << 5, &sge, 1);
	snprintf(d, sizeof d, "returned %d", a);
	check("unknown_advise_flag_is_einval", a == EINVAL, d);

	/* A WRITE into the inaccessible page: the device's page fault cannot be
	 * resolved. */
	st = post_write(qa, lmr, local, (uintptr_t)(odp + 3 * PAGE), mr->rkey, 64, 2) ? -2
										  : poll_one(cqa);
	snprintf(d, sizeof d, "status %d (%s)", st, st >= 0 ? ibv_wc_status_str(st) : "none");
	check("write_into_an_inaccessible_page_completes_in_error", st > 0, d);

	check("destroy", !ibv_destroy_qp(qa) && !ibv_destroy_qp(qb) && !ibv_destroy_cq(cqa) &&
				 !ibv_destroy_cq(cqb),
	      "failed");
	check("dereg", !ibv_dereg_mr(mr) && !ibv_dereg_mr(lmr) && !ibv_dealloc_pd(pd), "failed");
	check("close_device", ibv_close_device(ctx) == 0, "failed");
	ibv_free_device_list(list);
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
