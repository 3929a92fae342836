/* A send rung just before its QP is destroyed reaches the wire (run under `ferroverbs
 * run`, rdma-core's libibverbs + libmlx5): two RC QPs of one process, connected to
 * each other. A few hundred RDMA WRITEs, each polled busily, make the UAR page hot
 * (libmlx5's doorbell stores then land in memory and are forwarded by the layer, no
 * trap per store); then one more WRITE is posted and its QP destroyed at once, with
 * no poll in between. A ConnectX has seen that doorbell long before the DESTROY_QP
 * command that follows it (PCIe posted writes are not passed by later ones), so the
 * bytes must arrive at the responder. Prints "PASS name" / "FAIL name ..." and exits
 * 1 on failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#include "checker.h"

#define ACCESS (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
#define ACK_TIMEOUT 14
#define WARM 300

int main(void)
{
	struct ibv_device **list;
	struct ibv_context *ctx = open_first_device(&list);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	size_t len = 1 << 16;
	char *buf = aligned_alloc(4096, len);
	memset(buf, 0, len);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE | ACCESS) : NULL;
	struct ibv_cq *cqa = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_cq *cqb = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	check("objects", pd && mr && cqa && cqb, "creation failed");
	if (!(pd && mr && cqa && cqb))
		return 1;
	struct ibv_qp *qa = rc_qp(pd, cqa);
	struct ibv_qp *qb = rc_qp(pd, cqb);
	union ibv_gid gid;
	check("qps", qa && qb && !ibv_query_gid(ctx, 1, 0, &gid), "creation failed");
	if (!qa || !qb)
		return 1;
	int r1 = qp_to_rts(qa, ACCESS, qb->qp_num, &gid, ACK_TIMEOUT);
	int r2 = qp_to_rts(qb, ACCESS, qa->qp_num, &gid, ACK_TIMEOUT);
	check("connect", !r1 && !r2, "modify failed");

	/* Busy-polled WRITEs: the page goes hot. */
	int done = 0;
	for (int i = 0; i < WARM; i++) {
		buf[0] = (char)i;
		if (post_write(qa, mr, buf, (uintptr_t)(buf + 4096), mr->rkey, 64, 1))
			break;
		struct ibv_wc wc;
		int got = 0;
		for (long k = 0; k < 400000000L && !got; k++)
			got = ibv_poll_cq(cqa, 1, &wc);
		if (got != 1 || wc.status != IBV_WC_SUCCESS)
			break;
		done++;
	}
	char d[96];
	snprintf(d, sizeof d, "%d of %d completed", done, WARM);
	check("warm_writes", done == WARM, d);

	/* The last WRITE, then DESTROY_QP with no poll between. */
	for (int i = 0; i < 256; i++)
		buf[8192 + i] = (char)(i * 13 + 5);
	check("post_last", post_write(qa, mr, buf + 8192, (uintptr_t)(buf + 16384), mr->rkey, 256, 2) == 0,
	      "failed");
	check("destroy_qp_a", ibv_destroy_qp(qa) == 0, "failed");
	int arrived = 0;
	for (int t = 0; t < 2000 && !arrived; t++) {
		arrived = memcmp(buf + 8192, buf + 16384, 256) == 0;
		if (!arrived)
			usleep(1000);
	}
	check("last_write_arrived", arrived, "the bytes of the WRITE rung before DESTROY_QP "
					     "did not arrive in 2 s");
	check("destroy_qp_b", ibv_destroy_qp(qb) == 0, "failed");
	check("destroy_cqs", !ibv_destroy_cq(cqa) && !ibv_destroy_cq(cqb), "failed");
	check("dereg_mr", ibv_dereg_mr(mr) == 0, "failed");
	check("dealloc_pd", ibv_dealloc_pd(pd) == 0, "failed");
	check("close_device", ibv_close_device(ctx) == 0, "failed");
	ibv_free_device_list(list);
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
