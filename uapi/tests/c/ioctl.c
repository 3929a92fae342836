/* The uverbs ioctl methods (RDMA_VERBS_IOCTL) and descriptor duplication, raw on
 * /dev/infiniband/uverbs0 (run under `ferroverbs run`): header and attribute rules
 * with Linux's errnos, mlx5_ib's UAR_OBJ_ALLOC/DESTROY and the mmap of the page it
 * gives, QUERY_CONTEXT, mlx5_ib's QUERY_PORT, PD_QUERY, QUERY_MR, ASYNC_EVENT_ALLOC,
 * and a dup'd descriptor
 * naming the same ucontext. Prints "PASS name" or "FAIL name ..." per case and exits
 * 1 if any failed. Layouts and ids from the installed <rdma/...> headers. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/mlx5-abi.h>
#include <rdma/rdma_user_ioctl.h>
#include <rdma/ib_user_ioctl_cmds.h>
#include <rdma/ib_user_ioctl_verbs.h>
#include <rdma/mlx5_user_ioctl_cmds.h>
#include <rdma/mlx5_user_ioctl_verbs.h>

static int failures;

static void expect(const char *name, int got, int want)
{
	if (got == want) {
		printf("PASS %s\n", name);
	} else {
		printf("FAIL %s: got %d (%s), want %d (%s)\n", name, got,
		       got > 0 ? strerror(got) : "-", want, strerror(want));
		failures++;
	}
}

static int wr(int fd, const void *buf, size_t len)
{
	ssize_t n = write(fd, buf, len);
	return n == (ssize_t)len ? 0 : n < 0 ? errno : -1;
}

struct cmd {
	struct ib_uverbs_ioctl_hdr hdr;
	struct ib_uverbs_attr attrs[8];
};

static void start(struct cmd *c, uint16_t object, uint16_t method)
{
	memset(c, 0, sizeof *c);
	c->hdr.object_id = object;
	c->hdr.method_id = method;
}

static struct ib_uverbs_attr *add(struct cmd *c, uint16_t id, uint16_t len, uint64_t data,
				  uint16_t flags)
{
	struct ib_uverbs_attr *a = &c->attrs[c->hdr.num_attrs++];
	a->attr_id = id;
	a->len = len;
	a->data = data;
	a->flags = flags;
	return a;
}

/* Sends the command; clears the output marks of an earlier call, so that the command can be sent again. */
static int run(int fd, struct cmd *c)
{
	for (int i = 0; i < c->hdr.num_attrs; i++)
		c->attrs[i].flags &= ~UVERBS_ATTR_F_VALID_OUTPUT;
	c->hdr.length = sizeof c->hdr + c->hdr.num_attrs * sizeof c->attrs[0];
	return ioctl(fd, RDMA_VERBS_IOCTL, c) ? errno : 0;
}

int main(void)
{
	int fd = open("/dev/infiniband/uverbs0", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		perror("open");
		return 2;
	}
	struct cmd c;
	uint32_t u32 = 0;
	uint64_t u64 = 0;

	/* Before GET_CONTEXT a method has no ucontext. */
	start(&c, UVERBS_OBJECT_DEVICE, UVERBS_METHOD_QUERY_CONTEXT);
	add(&c, UVERBS_ATTR_QUERY_CONTEXT_NUM_COMP_VECTORS, 4, (uintptr_t)&u32, 1);
	add(&c, UVERBS_ATTR_QUERY_CONTEXT_CORE_SUPPORT, 8, (uintptr_t)&u64, 1);
	expect("method_before_get_context", run(fd, &c), EINVAL);
	expect("other_ioctl_request", ioctl(fd, FIONREAD, &u32) ? errno : 0, ENOTTY);

	/* GET_CONTEXT asking for library-allocated UARs. */
	struct {
		struct ib_uverbs_cmd_hdr hdr;
		struct ib_uverbs_get_context core;
		struct mlx5_ib_alloc_ucontext_req_v2 drv;
	} gc = {0};
	struct {
		struct ib_uverbs_get_context_resp core;
		struct mlx5_ib_alloc_ucontext_resp drv;
	} gr = {0};
	gc.hdr.command = IB_USER_VERBS_CMD_GET_CONTEXT;
	gc.hdr.in_words = sizeof gc / 4;
	gc.hdr.out_words = sizeof gr / 4;
	gc.core.response = (uintptr_t)&gr;
	gc.drv.total_num_bfregs = 16;
	gc.drv.num_low_latency_bfregs = 4;
	gc.drv.max_cqe_version = 1;
	gc.drv.lib_caps = MLX5_LIB_CAP_4K_UAR | MLX5_LIB_CAP_DYN_UAR;
	expect("get_context_dynamic_uars", wr(fd, &gc, sizeof gc), 0);
	expect("no_static_uars", gr.drv.tot_bfregs, 0);
	expect("static_uar_mmap_refused",
	       mmap(NULL, 4096, PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED ? errno : 0, EINVAL);

	/* Header rules (ib_uverbs_ioctl). */
	start(&c, UVERBS_OBJECT_DEVICE, UVERBS_METHOD_QUERY_CONTEXT);
	add(&c, UVERBS_ATTR_QUERY_CONTEXT_NUM_COMP_VECTORS, 4, (uintptr_t)&u32, 1);
	add(&c, UVERBS_ATTR_QUERY_CONTEXT_CORE_SUPPORT, 8, (uintptr_t)&u64, 1);
	c.hdr.length = sizeof c.hdr;
	expect("length_not_the_attribute_count",
	       ioctl(fd, RDMA_VERBS_IOCTL, &c) ? errno : 0, EINVAL);
	c.hdr.reserved1 = 1;
	expect("reserved_set", run(fd, &c), EPROTONOSUPPORT);
	c.hdr.reserved1 = 0;
	c.attrs[1].flags = 4;
	expect("unknown_attribute_flag", run(fd, &c), EINVAL);
	c.attrs[1].flags = 1;
	c.attrs[1].attr_id = UVERBS_ATTR_QUERY_CONTEXT_NUM_COMP_VECTORS;
	expect("attribute_twice", run(fd, &c), EINVAL);
	c.attrs[1].attr_id = UVERBS_ATTR_QUERY_CONTEXT_CORE_SUPPORT;
	add(&c, 0x77, 4, (uintptr_t)&u32, UVERBS_ATTR_F_MANDATORY);
	expect("unknown_mandatory_attribute", run(fd, &c), EPROTONOSUPPORT);
	c.hdr.num_attrs = 2;
	c.attrs[1].len = 4;
	expect("output_too_small", run(fd, &c), EINVAL);
	c.attrs[1].len = 8;
	expect("query_context", run(fd, &c), 0);
	expect("query_context_vectors", u32, 1);
	expect("query_context_core_support", (int)u64, IB_UVERBS_CORE_SUPPORT_OPTIONAL_MR_ACCESS);
	expect("query_context_output_marked",
	       c.attrs[0].flags & UVERBS_ATTR_F_VALID_OUTPUT ? 0 : -1, 0);
	start(&c, UVERBS_OBJECT_COUNTERS, UVERBS_METHOD_COUNTERS_CREATE);
	expect("method_not_offered", run(fd, &c), EPROTONOSUPPORT);
	start(&c, UVERBS_OBJECT_CQ, UVERBS_METHOD_CQ_CREATE);
	add(&c, UVERBS_ATTR_CREATE_CQ_HANDLE, 0, 0, 1);
	expect("cq_create_missing_attributes", run(fd, &c), EINVAL);

	/* mlx5_ib's UAR objects. */
	uint64_t off = 0;
	uint32_t len = 0, page = 99;
	start(&c, MLX5_IB_OBJECT_UAR, MLX5_IB_METHOD_UAR_OBJ_ALLOC);
	struct ib_uverbs_attr *h = add(&c, MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE, 0, 0, 1);
	add(&c, MLX5_IB_ATTR_UAR_OBJ_ALLOC_TYPE, 4, 7, 1);
	add(&c, MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_OFFSET, 8, (uintptr_t)&off, 1);
	add(&c, MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_LENGTH, 4, (uintptr_t)&len, 1);
	add(&c, MLX5_IB_ATTR_UAR_OBJ_ALLOC_PAGE_ID, 4, (uintptr_t)&page, 1);
	expect("uar_alloc_unknown_type", run(fd, &c), EOPNOTSUPP);
	c.attrs[1].data = MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC;
	expect("uar_alloc", run(fd, &c), 0);
	uint32_t uar = (uint32_t)h->data;
	expect("uar_alloc_length", len, 4096);
	expect("uar_alloc_first_page", page, 0);
	void *p = mmap(NULL, 4096, PROT_WRITE, MAP_SHARED, fd, off);
	expect("uar_mmap", p == MAP_FAILED ? errno : 0, 0);
	if (p != MAP_FAILED)
		munmap(p, 4096);
	expect("uar_mmap_two_pages",
	       mmap(NULL, 8192, PROT_WRITE, MAP_SHARED, fd, off) == MAP_FAILED ? errno : 0,
	       EINVAL);
	expect("uar_mmap_other_offset",
	       mmap(NULL, 4096, PROT_WRITE, MAP_SHARED, fd, off + 4096) == MAP_FAILED ? errno
										     : 0,
	       EINVAL);

	/* A duplicate names the same file: a PD made on it is the context's. */
	int fd2 = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	struct {
		struct ib_uverbs_cmd_hdr hdr;
		struct ib_uverbs_alloc_pd core;
	} ap = {0};
	struct {
		struct ib_uverbs_alloc_pd_resp core;
		struct mlx5_ib_alloc_pd_resp drv;
	} apr = {0};
	ap.hdr.command = IB_USER_VERBS_CMD_ALLOC_PD;
	ap.hdr.in_words = sizeof ap / 4;
	ap.hdr.out_words = sizeof apr / 4;
	ap.core.response = (uintptr_t)&apr;
	expect("alloc_pd_on_the_duplicate", wr(fd2, &ap, sizeof ap), 0);
	uint32_t pdn = 0;
	start(&c, UVERBS_OBJECT_PD, MLX5_IB_METHOD_PD_QUERY);
	add(&c, MLX5_IB_ATTR_QUERY_PD_HANDLE, 0, apr.core.pd_handle, 1);
	add(&c, MLX5_IB_ATTR_QUERY_PD_RESP_PDN, 4, (uintptr_t)&pdn, 1);
	expect("pd_query_on_the_original", run(fd, &c), 0);
	expect("pd_query_pdn", pdn == apr.drv.pdn ? 0 : -1, 0);
	c.attrs[0].data = 0xdead;
	expect("pd_query_unknown_handle", run(fd, &c), ENOENT);

	/* QUERY_MR of a region registered through the duplicate. */
	static char buf[8192] __attribute__((aligned(4096)));
	struct {
		struct ib_uverbs_cmd_hdr hdr;
		struct ib_uverbs_reg_mr core;
	} rm = {0};
	struct ib_uverbs_reg_mr_resp rmr = {0};
	rm.hdr.command = IB_USER_VERBS_CMD_REG_MR;
	rm.hdr.in_words = sizeof rm / 4;
	rm.hdr.out_words = sizeof rmr / 4;
	rm.core.response = (uintptr_t)&rmr;
	rm.core.start = (uintptr_t)buf;
	rm.core.length = sizeof buf;
	rm.core.hca_va = 0x10000;
	rm.core.pd_handle = apr.core.pd_handle;
	rm.core.access_flags = 1;
	expect("reg_mr_on_the_duplicate", wr(fd2, &rm, sizeof rm), 0);
	uint32_t lkey = 0, rkey = 0;
	uint64_t mlen = 0, iova = 0;
	start(&c, UVERBS_OBJECT_MR, UVERBS_METHOD_QUERY_MR);
	add(&c, UVERBS_ATTR_QUERY_MR_HANDLE, 0, rmr.mr_handle, 1);
	add(&c, UVERBS_ATTR_QUERY_MR_RESP_LKEY, 4, (uintptr_t)&lkey, 1);
	add(&c, UVERBS_ATTR_QUERY_MR_RESP_RKEY, 4, (uintptr_t)&rkey, 1);
	add(&c, UVERBS_ATTR_QUERY_MR_RESP_LENGTH, 8, (uintptr_t)&mlen, 1);
	add(&c, UVERBS_ATTR_QUERY_MR_RESP_IOVA, 8, (uintptr_t)&iova, 0);
	expect("query_mr", run(fd, &c), 0);
	expect("query_mr_keys", lkey == rmr.lkey && rkey == rmr.rkey ? 0 : -1, 0);
	expect("query_mr_length_iova", mlen == sizeof buf && iova == 0x10000 ? 0 : -1, 0);

	/* mlx5_ib's QUERY_PORT (mlx5dv_query_port): port 1 of a port that is no e-switch
	 * representor: no flag, zeros, the caller's room beyond the structure zeroed. */
	struct {
		struct mlx5_ib_uapi_query_port info;
		uint64_t extra;
	} qp;
	memset(&qp, 0xa5, sizeof qp);
	uint32_t port = 1;
	start(&c, UVERBS_OBJECT_DEVICE, MLX5_IB_METHOD_QUERY_PORT);
	add(&c, MLX5_IB_ATTR_QUERY_PORT_PORT_NUM, 4, port, 1);
	struct ib_uverbs_attr *qpa = add(&c, MLX5_IB_ATTR_QUERY_PORT, sizeof qp, (uintptr_t)&qp, 1);
	expect("mlx5_query_port", run(fd, &c), 0);
	int zeros = 1;
	for (size_t i = 0; i < sizeof qp; i++)
		zeros &= ((unsigned char *)&qp)[i] == 0;
	expect("mlx5_query_port_zeros", zeros ? 0 : -1, 0);
	expect("mlx5_query_port_written", qpa->flags & UVERBS_ATTR_F_VALID_OUTPUT ? 0 : -1, 0);
	c.attrs[0].data = 2;
	expect("mlx5_query_port_no_port_2", run(fd, &c), EINVAL);
	c.attrs[0].data = 1;
	c.attrs[1].len = sizeof qp.info - 8;
	expect("mlx5_query_port_short_output", run(fd, &c), EINVAL);
	c.hdr.num_attrs = 1;
	expect("mlx5_query_port_output_missing", run(fd, &c), EINVAL);

	/* Another async event file. */
	start(&c, UVERBS_OBJECT_ASYNC_EVENT, UVERBS_METHOD_ASYNC_EVENT_ALLOC);
	struct ib_uverbs_attr *afd = add(&c, UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE, 0, 0, 1);
	expect("async_event_alloc", run(fd, &c), 0);
	int efd = (int)afd->data_s64;
	expect("async_event_fd_nonblocking_read_empty",
	       fcntl(efd, F_SETFL, O_NONBLOCK) == 0 && read(efd, buf, 16) < 0 ? errno : 0,
	       EAGAIN);
	close(efd);

	/* Closing one descriptor keeps the file: the other still has the objects. */
	close(fd2);
	start(&c, UVERBS_OBJECT_PD, MLX5_IB_METHOD_PD_QUERY);
	add(&c, MLX5_IB_ATTR_QUERY_PD_HANDLE, 0, apr.core.pd_handle, 1);
	add(&c, MLX5_IB_ATTR_QUERY_PD_RESP_PDN, 4, (uintptr_t)&pdn, 1);
	expect("pd_survives_closing_the_duplicate", run(fd, &c), 0);

	start(&c, MLX5_IB_OBJECT_UAR, MLX5_IB_METHOD_UAR_OBJ_DESTROY);
	add(&c, MLX5_IB_ATTR_UAR_OBJ_DESTROY_HANDLE, 0, uar, 1);
	expect("uar_destroy", run(fd, &c), 0);
	expect("uar_destroy_twice", run(fd, &c), ENOENT);
	expect("uar_mmap_after_destroy",
	       mmap(NULL, 4096, PROT_WRITE, MAP_SHARED, fd, off) == MAP_FAILED ? errno : 0,
	       EINVAL);
	close(fd);
	printf("\n%d failures\n", failures);
	return failures ? 1 : 0;
}
