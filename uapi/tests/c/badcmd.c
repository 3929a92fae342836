/* Malformed uverbs commands, written raw on /dev/infiniband/uverbs0 (run under
 * `ferroverbs run`): each must fail with the errno Linux's uverbs/mlx5_ib gives it,
 * never crash, and leave the file usable. Prints "PASS name" or "FAIL name ..." per
 * case and exits 1 if any failed. Layouts from <rdma/ib_user_verbs.h> and
 * <rdma/mlx5-abi.h>. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/mlx5-abi.h>

static int failures;

static int wr(int fd, const void *buf, size_t len)
{
	ssize_t n = write(fd, buf, len);
	if (n == (ssize_t)len)
		return 0;
	if (n < 0)
		return errno;
	return -1; /* short write: never expected */
}

static void expect(const char *name, int got, int want)
{
	if (got == want) {
		printf("PASS %s\n", name);
	} else {
		printf("FAIL %s: errno %d (%s), want %d (%s)\n", name, got,
		       got > 0 ? strerror(got) : "-", want, strerror(want));
		failures++;
	}
}

#define HDR(h, cmd, inb, outb)                                                  \
	do {                                                                    \
		(h).command = (cmd);                                            \
		(h).in_words = (inb) / 4;                                       \
		(h).out_words = (outb) / 4;                                     \
	} while (0)

struct get_ctx {
	struct ib_uverbs_cmd_hdr hdr;
	struct ib_uverbs_get_context core;
	struct mlx5_ib_alloc_ucontext_req_v2 drv;
};
struct get_ctx_resp {
	struct ib_uverbs_get_context_resp core;
	struct mlx5_ib_alloc_ucontext_resp drv;
};
struct alloc_pd {
	struct ib_uverbs_cmd_hdr hdr;
	struct ib_uverbs_alloc_pd core;
};
struct alloc_pd_resp {
	struct ib_uverbs_alloc_pd_resp core;
	struct mlx5_ib_alloc_pd_resp drv;
};
struct dealloc_pd {
	struct ib_uverbs_cmd_hdr hdr;
	struct ib_uverbs_dealloc_pd core;
};
struct reg_mr {
	struct ib_uverbs_cmd_hdr hdr;
	struct ib_uverbs_reg_mr core;
};
struct dereg_mr {
	struct ib_uverbs_cmd_hdr hdr;
	struct ib_uverbs_dereg_mr core;
};
struct rereg_mr {
	struct ib_uverbs_cmd_hdr hdr;
	struct ib_uverbs_rereg_mr core;
};
struct alloc_mw {
	struct ib_uverbs_cmd_hdr hdr;
	struct ib_uverbs_alloc_mw core;
	struct mlx5_ib_alloc_mw drv;
};
struct dealloc_mw {
	struct ib_uverbs_cmd_hdr hdr;
	struct ib_uverbs_dealloc_mw core;
};
struct create_cq {
	struct ib_uverbs_cmd_hdr hdr;
	struct ib_uverbs_create_cq core;
	struct mlx5_ib_create_cq drv;
};
struct create_cq_resp {
	struct ib_uverbs_create_cq_resp core;
	struct mlx5_ib_create_cq_resp drv;
};
struct destroy_cq {
	struct ib_uverbs_cmd_hdr hdr;
	struct ib_uverbs_destroy_cq core;
};
struct create_qp {
	struct ib_uverbs_cmd_hdr hdr;
	struct ib_uverbs_create_qp core;
	struct mlx5_ib_create_qp drv;
};
struct create_qp_resp {
	struct ib_uverbs_create_qp_resp core;
	struct mlx5_ib_create_qp_resp drv;
};
struct query_port {
	struct ib_uverbs_cmd_hdr hdr;
	struct ib_uverbs_query_port core;
};
struct comp_channel {
	struct ib_uverbs_cmd_hdr hdr;
	struct ib_uverbs_create_comp_channel core;
};
struct ex_query_device {
	struct ib_uverbs_cmd_hdr hdr;
	struct ib_uverbs_ex_cmd_hdr ex;
	struct ib_uverbs_ex_query_device core;
};

static int alloc_pd(int fd, uint32_t *handle)
{
	struct alloc_pd c = {0};
	struct alloc_pd_resp r = {0};
	HDR(c.hdr, IB_USER_VERBS_CMD_ALLOC_PD, sizeof c, sizeof r);
	c.core.response = (uintptr_t)&r;
	int e = wr(fd, &c, sizeof c);
	*handle = r.core.pd_handle;
	return e;
}

static int dealloc_pd(int fd, uint32_t handle)
{
	struct dealloc_pd c = {0};
	HDR(c.hdr, IB_USER_VERBS_CMD_DEALLOC_PD, sizeof c, 0);
	c.core.pd_handle = handle;
	return wr(fd, &c, sizeof c);
}

static int reg_mr(int fd, uint32_t pd, void *addr, uint64_t len, uint32_t access,
		  uint32_t *handle)
{
	struct reg_mr c = {0};
	struct ib_uverbs_reg_mr_resp r = {0};
	HDR(c.hdr, IB_USER_VERBS_CMD_REG_MR, sizeof c, sizeof r);
	c.core.response = (uintptr_t)&r;
	c.core.start = (uintptr_t)addr;
	c.core.length = len;
	c.core.hca_va = (uintptr_t)addr;
	c.core.pd_handle = pd;
	c.core.access_flags = access;
	int e = wr(fd, &c, sizeof c);
	*handle = r.mr_handle;
	return e;
}

/* ALLOC_MW of `type` in `pd`, with mlx5_ib's request (its comp_mask as given). */
static int alloc_mw(int fd, uint32_t pd, uint8_t type, uint32_t comp_mask, uint32_t *handle,
		    uint32_t *rkey)
{
	struct alloc_mw c = {0};
	struct ib_uverbs_alloc_mw_resp r = {0};
	HDR(c.hdr, IB_USER_VERBS_CMD_ALLOC_MW, sizeof c, sizeof r);
	c.core.response = (uintptr_t)&r;
	c.core.pd_handle = pd;
	c.core.mw_type = type;
	c.drv.comp_mask = comp_mask;
	int e = wr(fd, &c, sizeof c);
	*handle = r.mw_handle;
	*rkey = r.rkey;
	return e;
}

static int dealloc_mw(int fd, uint32_t handle)
{
	struct dealloc_mw c = {0};
	HDR(c.hdr, IB_USER_VERBS_CMD_DEALLOC_MW, sizeof c, 0);
	c.core.mw_handle = handle;
	return wr(fd, &c, sizeof c);
}

/* REREG_MR of `mr`; the new keys in `keys` (lkey, rkey). */
static int rereg_mr(int fd, uint32_t mr, uint32_t flags, void *addr, uint64_t len,
		    uint64_t hca_va, uint32_t pd, uint32_t access, uint32_t keys[2])
{
	struct rereg_mr c = {0};
	struct ib_uverbs_rereg_mr_resp r = {0};
	HDR(c.hdr, IB_USER_VERBS_CMD_REREG_MR, sizeof c, sizeof r);
	c.core.response = (uintptr_t)&r;
	c.core.mr_handle = mr;
	c.core.flags = flags;
	c.core.start = (uintptr_t)addr;
	c.core.length = len;
	c.core.hca_va = hca_va;
	c.core.pd_handle = pd;
	c.core.access_flags = access;
	int e = wr(fd, &c, sizeof c);
	keys[0] = r.lkey;
	keys[1] = r.rkey;
	return e;
}

static int create_cq(int fd, void *buf, void *db, int channel, uint32_t cqe_size,
		     uint32_t *handle)
{
	struct create_cq c = {0};
	struct create_cq_resp r = {0};
	HDR(c.hdr, IB_USER_VERBS_CMD_CREATE_CQ, sizeof c, sizeof r);
	c.core.response = (uintptr_t)&r;
	c.core.user_handle = 0x1234;
	c.core.cqe = 63;
	c.core.comp_channel = channel;
	c.drv.buf_addr = (uintptr_t)buf;
	c.drv.db_addr = (uintptr_t)db;
	c.drv.cqe_size = cqe_size;
	int e = wr(fd, &c, sizeof c);
	*handle = r.core.cq_handle;
	if (e == 0 && r.core.cqe != 63) {
		printf("FAIL create_cq: cqe %u, want 63\n", r.core.cqe);
		failures++;
	}
	return e;
}

static int destroy_cq(int fd, uint32_t handle)
{
	struct destroy_cq c = {0};
	struct ib_uverbs_destroy_cq_resp r = {0};
	HDR(c.hdr, IB_USER_VERBS_CMD_DESTROY_CQ, sizeof c, sizeof r);
	c.core.response = (uintptr_t)&r;
	c.core.cq_handle = handle;
	return wr(fd, &c, sizeof c);
}

static int create_qp(int fd, uint32_t pd, uint32_t cq, void *buf, void *db)
{
	struct create_qp c = {0};
	struct create_qp_resp r = {0};
	HDR(c.hdr, IB_USER_VERBS_CMD_CREATE_QP, sizeof c, sizeof r);
	c.core.response = (uintptr_t)&r;
	c.core.user_handle = 0x5678;
	c.core.pd_handle = pd;
	c.core.send_cq_handle = cq;
	c.core.recv_cq_handle = cq;
	c.core.max_send_wr = 16;
	c.core.max_recv_wr = 16;
	c.core.max_send_sge = 1;
	c.core.max_recv_sge = 1;
	c.core.qp_type = 2; /* IBV_QPT_RC */
	c.drv.buf_addr = (uintptr_t)buf;
	c.drv.db_addr = (uintptr_t)db;
	c.drv.sq_wqe_count = 16;
	c.drv.rq_wqe_count = 16;
	c.drv.rq_wqe_shift = 4;
	return wr(fd, &c, sizeof c);
}

int main(void)
{
	long page = sysconf(_SC_PAGESIZE);
	int fd = open("/dev/infiniband/uverbs0", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		perror("open /dev/infiniband/uverbs0");
		return 2;
	}
	uint32_t pd, pd2, mr, cq, h;
	char small[4];

	/* Before GET_CONTEXT only GET_CONTEXT is allowed. */
	expect("command_before_get_context", alloc_pd(fd, &pd), EINVAL);
	expect("read_on_the_command_file", read(fd, small, sizeof small) < 0 ? errno : 0,
	       EINVAL);

	struct get_ctx gc = {0};
	struct get_ctx_resp gr = {0};
	HDR(gc.hdr, IB_USER_VERBS_CMD_GET_CONTEXT, sizeof gc, sizeof gr);
	gc.drv.total_num_bfregs = 16;
	gc.drv.num_low_latency_bfregs = 4;
	gc.drv.max_cqe_version = 1;

	gc.core.response = 0x10; /* not mapped */
	expect("get_context_response_unmapped", wr(fd, &gc, sizeof gc), EFAULT);
	gc.core.response = (uintptr_t)&gr;
	gc.drv.num_low_latency_bfregs = 16;
	expect("get_context_too_many_low_latency", wr(fd, &gc, sizeof gc), EINVAL);
	gc.drv.num_low_latency_bfregs = 4;
	gc.drv.comp_mask = 1;
	expect("get_context_unknown_comp_mask", wr(fd, &gc, sizeof gc), EOPNOTSUPP);
	gc.drv.comp_mask = 0;
	gc.drv.flags = MLX5_IB_ALLOC_UCTX_DEVX;
	expect("get_context_devx_not_offered", wr(fd, &gc, sizeof gc), EOPNOTSUPP);
	gc.drv.flags = 0;
	expect("get_context", wr(fd, &gc, sizeof gc), 0);
	expect("get_context_twice", wr(fd, &gc, sizeof gc), EINVAL);
	if (gr.drv.tot_bfregs != 16 || gr.drv.cache_line_size != 64 ||
	    gr.drv.cqe_version != 1 || gr.drv.bf_reg_size == 0 || gr.core.async_fd < 0) {
		printf("FAIL get_context_response: tot_bfregs %u cache_line %u cqe_version %u "
		       "bf_reg_size %u async_fd %d\n",
		       gr.drv.tot_bfregs, gr.drv.cache_line_size, gr.drv.cqe_version,
		       gr.drv.bf_reg_size, gr.core.async_fd);
		failures++;
	}

	/* Header rules (Linux verify_hdr). */
	expect("count_below_header", wr(fd, &gc, 4), EINVAL);
	struct alloc_pd ap = {0};
	struct alloc_pd_resp apr = {0};
	HDR(ap.hdr, IB_USER_VERBS_CMD_ALLOC_PD, sizeof ap, sizeof apr);
	ap.core.response = (uintptr_t)&apr;
	ap.hdr.in_words = 3;
	expect("in_words_not_the_count", wr(fd, &ap, sizeof ap), EINVAL);
	ap.hdr.in_words = 2;
	expect("command_shorter_than_its_struct", wr(fd, &ap, 8), ENOSPC);
	HDR(ap.hdr, IB_USER_VERBS_CMD_ALLOC_PD, sizeof ap, 0);
	expect("response_shorter_than_its_struct", wr(fd, &ap, sizeof ap), ENOSPC);
	HDR(ap.hdr, 200, sizeof ap, sizeof apr);
	expect("unknown_command", wr(fd, &ap, sizeof ap), EINVAL);
	HDR(ap.hdr, IB_USER_VERBS_CMD_OPEN_XRCD, sizeof ap, sizeof apr);
	expect("command_not_implemented", wr(fd, &ap, sizeof ap), EOPNOTSUPP);
	HDR(ap.hdr, IB_USER_VERBS_CMD_ALLOC_PD | 0x40000000, sizeof ap, sizeof apr);
	expect("unknown_flag", wr(fd, &ap, sizeof ap), EINVAL);
	expect("buffer_unmapped", wr(fd, (void *)(uintptr_t)64, 24), EFAULT);
	{
		size_t big = 4 << 20;
		char *b = calloc(1, big);
		((struct ib_uverbs_cmd_hdr *)b)->command = IB_USER_VERBS_CMD_ALLOC_PD;
		expect("oversized_command", wr(fd, b, big), EINVAL);
		free(b);
	}

	/* Extended commands. */
	struct ex_query_device xq = {0};
	char xr[512];
	xq.hdr.command = IB_USER_VERBS_CMD_FLAG_EXTENDED | IB_USER_VERBS_EX_CMD_QUERY_DEVICE;
	xq.hdr.in_words = sizeof xq.core / 8;
	xq.hdr.out_words = sizeof(struct ib_uverbs_ex_query_device_resp) / 8;
	xq.ex.response = (uintptr_t)xr;
	expect("ex_query_device", wr(fd, &xq, sizeof xq), 0);
	xq.ex.cmd_hdr_reserved = 1;
	expect("ex_reserved_nonzero", wr(fd, &xq, sizeof xq), EINVAL);
	xq.ex.cmd_hdr_reserved = 0;
	xq.hdr.in_words = 2;
	expect("ex_words_not_the_count", wr(fd, &xq, sizeof xq), EINVAL);
	xq.hdr.in_words = 1;
	xq.ex.response = 0;
	expect("ex_out_words_without_response", wr(fd, &xq, sizeof xq), EINVAL);
	xq.ex.response = (uintptr_t)xr;
	xq.core.comp_mask = 1;
	expect("ex_query_device_comp_mask", wr(fd, &xq, sizeof xq), EINVAL);

	/* Ports. */
	struct query_port qp = {0};
	struct ib_uverbs_query_port_resp qpr = {0};
	HDR(qp.hdr, IB_USER_VERBS_CMD_QUERY_PORT, sizeof qp, sizeof qpr);
	qp.core.response = (uintptr_t)&qpr;
	qp.core.port_num = 2;
	expect("query_port_out_of_range", wr(fd, &qp, sizeof qp), EINVAL);
	qp.core.port_num = 1;
	expect("query_port", wr(fd, &qp, sizeof qp), 0);

	/* Handles. */
	expect("alloc_pd", alloc_pd(fd, &pd), 0);
	expect("dealloc_pd_unknown_handle", dealloc_pd(fd, 0xdead), ENOENT);

	/* Memory regions. */
	size_t len = 4 * page;
	char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *hole = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(hole, len);
	expect("reg_mr_unknown_pd", reg_mr(fd, 0xdead, buf, len, 1, &mr), EINVAL);
	expect("reg_mr_zero_length", reg_mr(fd, pd, buf, 0, 1, &mr), EINVAL);
	expect("reg_mr_remote_write_without_local_write", reg_mr(fd, pd, buf, len, 2, &mr),
	       EINVAL);
	expect("reg_mr_unmapped_memory", reg_mr(fd, pd, hole, len, 1, &mr), EFAULT);
	{
		char *two = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		munmap(two + page, page);
		expect("reg_mr_partly_unmapped", reg_mr(fd, pd, two, 2 * page, 1, &mr), EFAULT);
		munmap(two, page);
	}
	expect("reg_mr_unknown_access_bit", reg_mr(fd, pd, buf, len, 1u << 30, &mr), EINVAL);
	expect("reg_mr", reg_mr(fd, pd, buf, len, 7, &mr), 0);
	expect("dealloc_pd_in_use", dealloc_pd(fd, pd), EBUSY);
	{
		struct dereg_mr c = {0};
		HDR(c.hdr, IB_USER_VERBS_CMD_DEREG_MR, sizeof c, 0);
		c.core.mr_handle = 0xdead;
		expect("dereg_mr_unknown_handle", wr(fd, &c, sizeof c), ENOENT);
		c.core.mr_handle = pd; /* another object's handle */
		expect("dereg_mr_of_a_pd_handle", wr(fd, &c, sizeof c), ENOENT);
		c.core.mr_handle = mr;
		expect("dereg_mr", wr(fd, &c, sizeof c), 0);
	}

	/* Memory windows (Linux ib_uverbs_alloc_mw, mlx5_ib_alloc_mw). */
	{
		uint32_t mw1, mw2, rkey1, rkey2;
		expect("alloc_mw_type_3", alloc_mw(fd, pd, 3, 0, &mw1, &rkey1), EINVAL);
		expect("alloc_mw_unknown_pd", alloc_mw(fd, 0xdead, 1, 0, &mw1, &rkey1), EINVAL);
		expect("alloc_mw_driver_comp_mask", alloc_mw(fd, pd, 1, 1, &mw1, &rkey1),
		       EOPNOTSUPP);
		expect("alloc_mw_type_1", alloc_mw(fd, pd, 1, 0, &mw1, &rkey1), 0);
		expect("alloc_mw_type_2", alloc_mw(fd, pd, 2, 0, &mw2, &rkey2), 0);
		expect("alloc_mw_distinct_keys", rkey1 != rkey2 && mw1 != mw2 ? 0 : -1, 0);
		expect("dealloc_pd_with_a_window", dealloc_pd(fd, pd), EBUSY);
		expect("dealloc_mw_unknown_handle", dealloc_mw(fd, 0xdead), ENOENT);
		expect("dealloc_mw_of_a_pd_handle", dealloc_mw(fd, pd), ENOENT);
		expect("dealloc_mw_type_1", dealloc_mw(fd, mw1), 0);
		expect("dealloc_mw_twice", dealloc_mw(fd, mw1), ENOENT);
		expect("dealloc_mw_type_2", dealloc_mw(fd, mw2), 0);
	}

	/* REREG_MR (Linux ib_uverbs_rereg_mr): a failed one leaves the region as it was. */
	{
		uint32_t k[2], k2[2];
		expect("alloc_pd_2", alloc_pd(fd, &pd2), 0);
		expect("reg_mr_for_rereg", reg_mr(fd, pd, buf, len, 1, &mr), 0);
		expect("rereg_mr_no_flags", rereg_mr(fd, mr, 0, 0, 0, 0, 0, 0, k), EINVAL);
		expect("rereg_mr_unknown_flag", rereg_mr(fd, mr, 8, 0, 0, 0, 0, 0, k), EINVAL);
		expect("rereg_mr_unknown_handle", rereg_mr(fd, 0xdead, 4, 0, 0, 0, 0, 1, k),
		       ENOENT);
		expect("rereg_mr_remote_write_without_local_write",
		       rereg_mr(fd, mr, 4, 0, 0, 0, 0, 2, k), EINVAL);
		/* The simulated device offers ODP: the region becomes an ODP one (a new
		 * mkey, mlx5_ib's recreate path) and back. */
		expect("rereg_mr_on_demand", rereg_mr(fd, mr, 4, 0, 0, 0, 0, 1 | 64, k), 0);
		expect("rereg_mr_pinned_again", rereg_mr(fd, mr, 4, 0, 0, 0, 0, 1, k), 0);
		expect("rereg_mr_unknown_pd", rereg_mr(fd, mr, 2, 0, 0, 0, 0xdead, 0, k), EINVAL);
		expect("rereg_mr_page_offsets_differ",
		       rereg_mr(fd, mr, 1, buf, len, (uintptr_t)buf + 8, 0, 0, k), EINVAL);
		expect("rereg_mr_unmapped_memory",
		       rereg_mr(fd, mr, 1, hole, len, (uintptr_t)hole, 0, 0, k), EFAULT);
		expect("rereg_mr_zero_length", rereg_mr(fd, mr, 1, buf, 0, (uintptr_t)buf, 0, 0, k),
		       EINVAL);
		expect("rereg_mr_access", rereg_mr(fd, mr, 4, 0, 0, 0, 0, 7, k), 0);
		expect("rereg_mr_pd_and_translation",
		       rereg_mr(fd, mr, 3, buf + page, page, (uintptr_t)buf + page, pd2, 0, k2), 0);
		expect("rereg_mr_new_keys", k[0] == k[1] && k2[0] != k[0] ? 0 : -1, 0);
		/* The region moved to pd2: pd is free, pd2 is not. */
		expect("dealloc_pd_2_in_use", dealloc_pd(fd, pd2), EBUSY);
		struct dereg_mr c = {0};
		HDR(c.hdr, IB_USER_VERBS_CMD_DEREG_MR, sizeof c, 0);
		c.core.mr_handle = mr;
		expect("dereg_rereg_mr", wr(fd, &c, sizeof c), 0);
		expect("dealloc_pd_2", dealloc_pd(fd, pd2), 0);
	}

	/* CQs. */
	char *cqbuf = aligned_alloc(page, 64 * 64);
	uint64_t *db = aligned_alloc(page, page);
	memset(db, 0, page);
	expect("create_cq_buffer_unmapped", create_cq(fd, hole, db, -1, 64, &cq), EFAULT);
	expect("create_cq_doorbell_unmapped", create_cq(fd, cqbuf, hole, -1, 64, &cq), EFAULT);
	expect("create_cq_doorbell_misaligned", create_cq(fd, cqbuf, (char *)db + 2, -1, 64, &cq),
	       EINVAL);
	expect("create_cq_bad_cqe_size", create_cq(fd, cqbuf, db, -1, 32, &cq), EINVAL);
	expect("create_cq_channel_not_a_channel", create_cq(fd, cqbuf, db, 0, 64, &cq), EINVAL);
	expect("create_cq", create_cq(fd, cqbuf, db, -1, 64, &cq), 0);
	expect("dealloc_pd_of_a_cq_handle", dealloc_pd(fd, cq), ENOENT);
	expect("destroy_cq_unknown_handle", destroy_cq(fd, 0xdead), ENOENT);

	/* QPs. */
	char *qpbuf = aligned_alloc(page, 2 * page);
	expect("create_qp_pd_is_a_cq_handle", create_qp(fd, cq, cq, qpbuf, db + 16), EINVAL);
	expect("create_qp_cq_is_a_pd_handle", create_qp(fd, pd, pd, qpbuf, db + 16), EINVAL);
	expect("create_qp_buffer_unmapped", create_qp(fd, pd, cq, hole, db + 16), EFAULT);
	expect("create_qp", create_qp(fd, pd, cq, qpbuf, db + 16), 0);
	expect("destroy_cq_in_use", destroy_cq(fd, cq), EBUSY);

	/* Completion channels. */
	struct comp_channel cc = {0};
	struct ib_uverbs_create_comp_channel_resp ccr = {0};
	HDR(cc.hdr, IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL, sizeof cc, sizeof ccr);
	cc.core.response = (uintptr_t)&ccr;
	expect("create_comp_channel", wr(fd, &cc, sizeof cc), 0);
	int ch = ccr.fd;
	uint64_t ev;
	expect("channel_read_too_short", read(ch, small, sizeof small) < 0 ? errno : 0, EINVAL);
	fcntl(ch, F_SETFL, fcntl(ch, F_GETFL) | O_NONBLOCK);
	expect("channel_read_empty_nonblocking", read(ch, &ev, sizeof ev) < 0 ? errno : 0, EAGAIN);
	struct pollfd pf = {.fd = ch, .events = POLLIN};
	expect("channel_poll_empty", poll(&pf, 1, 0), 0);
	expect("channel_write", write(ch, &ev, sizeof ev) < 0 ? errno : 0, EINVAL);
	expect("channel_close", close(ch), 0);

	/* mmap of UAR pages (mlx5_ib's offsets: command << 8 | index, in pages). */
	void *u = mmap(NULL, page, PROT_WRITE, MAP_SHARED, fd, 0);
	expect("mmap_uar_page_0", u == MAP_FAILED ? errno : 0, 0);
	u = mmap(NULL, page, PROT_WRITE, MAP_SHARED, fd, 8 * page);
	expect("mmap_uar_past_the_pages", u == MAP_FAILED ? errno : 0, EINVAL);
	u = mmap(NULL, 2 * page, PROT_WRITE, MAP_SHARED, fd, 0);
	expect("mmap_uar_two_pages", u == MAP_FAILED ? errno : 0, EINVAL);
	u = mmap(NULL, page, PROT_WRITE, MAP_SHARED, fd, (off_t)(1 << 8) * page);
	expect("mmap_contiguous_pages", u == MAP_FAILED ? errno : 0, ENOSYS);
	u = mmap(NULL, page, PROT_WRITE, MAP_SHARED, fd, (off_t)(9 << 8) * page);
	expect("mmap_unknown_command", u == MAP_FAILED ? errno : 0, EINVAL);
	u = mmap(NULL, page, PROT_WRITE, MAP_PRIVATE, fd, 0);
	expect("mmap_private", u == MAP_FAILED ? errno : 0, EINVAL);

	/* Values that overflow a computation. */
	{
		struct create_cq c = {0};
		struct create_cq_resp r = {0};
		HDR(c.hdr, IB_USER_VERBS_CMD_CREATE_CQ, sizeof c, sizeof r);
		c.core.response = (uintptr_t)&r;
		c.core.cqe = 0xffffffff;
		c.core.comp_channel = -1;
		c.drv.buf_addr = (uintptr_t)cqbuf;
		c.drv.db_addr = (uintptr_t)db;
		c.drv.cqe_size = 64;
		expect("create_cq_cqe_max", wr(fd, &c, sizeof c), EINVAL);
	}
	{
		struct create_qp c = {0};
		struct create_qp_resp r = {0};
		HDR(c.hdr, IB_USER_VERBS_CMD_CREATE_QP, sizeof c, sizeof r);
		c.core.response = (uintptr_t)&r;
		c.core.pd_handle = pd;
		c.core.send_cq_handle = cq;
		c.core.recv_cq_handle = cq;
		c.core.qp_type = 2;
		c.drv.buf_addr = (uintptr_t)qpbuf;
		c.drv.db_addr = (uintptr_t)(db + 32);
		c.drv.sq_wqe_count = 16;
		c.drv.rq_wqe_count = 16;
		c.drv.rq_wqe_shift = 70;
		expect("create_qp_rq_shift_too_large", wr(fd, &c, sizeof c), EINVAL);
		c.drv.rq_wqe_shift = 4;
		c.drv.sq_wqe_count = 12;
		expect("create_qp_sq_count_not_a_power_of_two", wr(fd, &c, sizeof c), EINVAL);
	}
	expect("reg_mr_huge", reg_mr(fd, pd, buf, 1ULL << 50, 1, &mr), ENOMEM);
	{
		struct alloc_pd c = {0};
		HDR(c.hdr, IB_USER_VERBS_CMD_ALLOC_PD, sizeof c, sizeof(struct alloc_pd_resp));
		c.core.response = (uint64_t)-16;
		expect("alloc_pd_response_at_the_top", wr(fd, &c, sizeof c), EFAULT);
	}
	{
		/* An extended MODIFY_QP whose core is one word: zero-extended, so the QP
		 * handle 0 names nothing. */
		struct {
			struct ib_uverbs_cmd_hdr hdr;
			struct ib_uverbs_ex_cmd_hdr ex;
			uint64_t word;
		} m = {0};
		char mr_[64];
		m.hdr.command = IB_USER_VERBS_CMD_FLAG_EXTENDED | IB_USER_VERBS_EX_CMD_MODIFY_QP;
		m.hdr.in_words = 1;
		m.hdr.out_words = 1;
		m.ex.response = (uintptr_t)mr_;
		expect("ex_modify_qp_short_core", wr(fd, &m, sizeof m), EINVAL);
	}

	/* Still usable after all that. */
	expect("alloc_pd_after_the_errors", alloc_pd(fd, &pd2), 0);
	expect("dealloc_pd", dealloc_pd(fd, pd2), 0);
	(void)h;
	expect("close", close(fd), 0);
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
