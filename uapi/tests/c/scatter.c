/* Scatter to CQE through rdma-core's libibverbs + libmlx5 (run under
 * `ferroverbs run`): libmlx5 asks for it at QP creation (MLX5_QP_FLAG_SCATTER_CQE,
 * unless MLX5_SCATTER_TO_CQE=0), the kernel side sets qpc.cs_res (32 bytes with
 * 64-byte CQEs, 64 with 128-byte ones: MLX5_CQE_SIZE=128), the simulated device puts
 * a small SEND in its CQE and leaves the receive buffer alone, and libmlx5's poll
 * copies it across the receive's two scatter entries. Two RC QPs of one process; for
 * each size the sender's completion comes first (the responder is done), then the
 * receive buffer is checked untouched (message in the CQE) or written (in the
 * buffer), then the receive is polled and the bytes checked. argv[1]: the largest
 * message expected in the CQE (0: none). Prints "PASS name" / "FAIL name ..." and
 * exits 1 on failure. Then requester scatter to CQE (READs and atomics of a QP that
 * signals every WQE: `requester`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

#include "checker.h"

/* The remote access of every QP, and its local ACK timeout exponent. */
#define ACCESS (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)
#define ACK_TIMEOUT 23

/* Polls `cq` for one completion (at most ~60 s of tries). */
static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	for (long i = 0; i < 60000000L; i++) {
		int got = ibv_poll_cq(cq, 1, wc);
		if (got)
			return got;
	}
	return 0;
}

/* Waits (blocking) for the completion event of `cq` on `ch`: the device has written
 * the CQE. */
static int wait_event(struct ibv_comp_channel *ch, struct ibv_cq *cq)
{
	struct ibv_cq *ev;
	void *evctx;
	if (ibv_get_cq_event(ch, &ev, &evctx) || ev != cq)
		return 1;
	ibv_ack_cq_events(cq, 1);
	return 0;
}

/* Whether `got` (`m` bytes) is what libmlx5 v44 copies out of a requester CQE of a
 * 128-byte CQ: it takes the data from the wrong address (rdma-core `cq.c`
 * `mlx5_parse_cqe` passes the entry's start for MLX5_INLINE_SCATTER_32, where the
 * lower half holds nothing (zero in a CQ libmlx5 allocated), and one byte before
 * the entry for MLX5_INLINE_SCATTER_64; fixed upstream by rdma-core commit
 * 45184d2c8, "mlx5: Fix inline-scatter source address on 128B CQE REQ
 * completions"): the device placed the data where a ConnectX places it. */
static int libmlx5_v44_128(const unsigned char *got, const unsigned char *src, int m)
{
	if (m <= 32) {
		for (int i = 0; i < m; i++)
			if (got[i])
				return 0;
		return 1;
	}
	return memcmp(got + 1, src, m - 1) == 0;
}

/* Requester scatter to CQE: an RC QP that signals every WQE (sq_sig_all: mlx5_ib then
 * sets qpc.cs_req, DATA32 for 64-byte send CQEs, DATA64 for 128-byte ones) READs
 * into two entries and runs atomics; the completion event shows the device wrote the
 * CQE, the local buffer is then untouched (data in the CQE, up to `limit` bytes) or
 * written, and libmlx5's poll copies the data there (`mlx5_copy_to_send_wqe`). */
static int requester(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_mr *mr,
		     unsigned char *buf, int limit, struct ibv_cq *rcq, union ibv_gid *gid)
{
	const char *sz = getenv("MLX5_CQE_SIZE");
	int cqe128 = sz && !strcmp(sz, "128");
	char d[200], name[64];
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *ccq = ch ? ibv_create_cq(ctx, 16, NULL, ch, 0) : NULL;
	struct ibv_qp_init_attr ia = {0};
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 8;
	ia.cap.max_recv_wr = 8;
	ia.cap.max_send_sge = 2;
	ia.cap.max_recv_sge = 1;
	ia.send_cq = ccq;
	ia.recv_cq = rcq;
	ia.sq_sig_all = 1;
	struct ibv_qp *qc = ccq ? ibv_create_qp(pd, &ia) : NULL;
	ia.sq_sig_all = 0;
	ia.send_cq = rcq;
	struct ibv_qp *qd = ibv_create_qp(pd, &ia);
	check("req_objects", ch && ccq && qc && qd, "creation failed");
	if (!qc || !qd)
		return 1;
	int r1 = qp_to_rts(qc, ACCESS, qd->qp_num, gid, ACK_TIMEOUT);
	int r2 = qp_to_rts(qd, ACCESS, qc->qp_num, gid, ACK_TIMEOUT);
	snprintf(d, sizeof d, "modify steps %d %d", r1, r2);
	check("req_connect", !r1 && !r2, d);
	unsigned char *dst = buf + 32768, *remote = buf + 16384;
	for (int i = 0; i < 4096; i++)
		remote[i] = (unsigned char)(i * 29 + 7);
	int sizes[] = {1, 8, 31, 32, 33, 64, 65};
	for (unsigned k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
		int m = sizes[k];
		unsigned char *src = remote + 64 * k;
		memset(dst, 0xee, 1024);
		/* 5 bytes at dst, the rest at dst + 256. */
		int first = m < 5 ? m : 5, rest = m - first;
		struct ibv_sge sg[2] = {
			{.addr = (uintptr_t)dst, .length = first, .lkey = mr->lkey},
			{.addr = (uintptr_t)(dst + 256), .length = rest, .lkey = mr->lkey},
		};
		struct ibv_send_wr wr = {0}, *bad;
		wr.wr_id = 500 + k;
		wr.sg_list = sg;
		wr.num_sge = rest ? 2 : 1;
		wr.opcode = IBV_WR_RDMA_READ;
		wr.wr.rdma.remote_addr = (uintptr_t)src;
		wr.wr.rdma.rkey = mr->rkey;
		snprintf(name, sizeof name, "read_post_%d", m);
		check(name, !ibv_req_notify_cq(ccq, 0) && !ibv_post_send(qc, &wr, &bad), "failed");
		snprintf(name, sizeof name, "read_event_%d", m);
		check(name, !wait_event(ch, ccq), "no completion event");
		int untouched = dst[0] == 0xee;
		snprintf(name, sizeof name, "read_placed_%d", m);
		snprintf(d, sizeof d, "%s before the READ was polled (limit %d)",
			 untouched ? "buffer untouched" : "buffer written", limit);
		check(name, untouched == (m <= limit), d);
		struct ibv_wc wc;
		int got = poll_one(ccq, &wc);
		snprintf(name, sizeof name, "read_%d", m);
		snprintf(d, sizeof d, "got %d status %d len %u wr_id %lu opcode %d", got,
			 got ? wc.status : -1, got ? wc.byte_len : 0,
			 got ? (unsigned long)wc.wr_id : 0, got ? wc.opcode : -1);
		check(name,
		      got == 1 && wc.status == IBV_WC_SUCCESS && wc.byte_len == (unsigned)m &&
			      wc.wr_id == 500 + k && wc.opcode == IBV_WC_RDMA_READ,
		      d);
		unsigned char placed[80];
		memcpy(placed, dst, first);
		memcpy(placed + first, dst + 256, rest);
		int exact = memcmp(placed, src, m) == 0;
		int v44 = cqe128 && m <= limit && !exact && libmlx5_v44_128(placed, src, m);
		int edges = dst[first] == 0xee && dst[256 + rest] == 0xee;
		snprintf(name, sizeof name, "read_bytes_%d", m);
		check(name, (exact || v44) && edges, "bytes differ");
		if (v44)
			printf("NOTE read_bytes_%d: libmlx5 copied from the wrong place of the "
			       "128-byte CQE (rdma-core before 45184d2c8)\n",
			       m);
	}
	/* Atomics on 8 bytes of `remote`: fetch and add 5, a compare and swap that fails,
	 * one that succeeds; the original value in host order (the device's 8-byte
	 * atomic responses set to host endianness, as mlx5_core sets them). */
	uint64_t *target = (uint64_t *)(remote + 2048);
	*target = 100;
	struct {
		enum ibv_wr_opcode op;
		uint64_t compare, swap_add, orig, after;
	} ops[] = {
		{IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 5, 100, 105},
		{IBV_WR_ATOMIC_CMP_AND_SWP, 7, 9, 105, 105},
		{IBV_WR_ATOMIC_CMP_AND_SWP, 105, 9, 105, 9},
	};
	for (unsigned k = 0; k < sizeof ops / sizeof ops[0]; k++) {
		memset(dst, 0xee, 64);
		struct ibv_sge sg = {.addr = (uintptr_t)(dst + 16), .length = 8, .lkey = mr->lkey};
		struct ibv_send_wr wr = {0}, *bad;
		wr.wr_id = 600 + k;
		wr.sg_list = &sg;
		wr.num_sge = 1;
		wr.opcode = ops[k].op;
		wr.wr.atomic.remote_addr = (uintptr_t)target;
		wr.wr.atomic.rkey = mr->rkey;
		wr.wr.atomic.compare_add =
			ops[k].op == IBV_WR_ATOMIC_FETCH_AND_ADD ? ops[k].swap_add : ops[k].compare;
		wr.wr.atomic.swap = ops[k].swap_add;
		snprintf(name, sizeof name, "atomic_post_%u", k);
		check(name, !ibv_req_notify_cq(ccq, 0) && !ibv_post_send(qc, &wr, &bad), "failed");
		snprintf(name, sizeof name, "atomic_event_%u", k);
		check(name, !wait_event(ch, ccq), "no completion event");
		int untouched = dst[16] == 0xee;
		snprintf(name, sizeof name, "atomic_placed_%u", k);
		snprintf(d, sizeof d, "%s before the atomic was polled (limit %d)",
			 untouched ? "buffer untouched" : "buffer written", limit);
		check(name, untouched == (limit >= 8), d);
		struct ibv_wc wc;
		int got = poll_one(ccq, &wc);
		snprintf(name, sizeof name, "atomic_%u", k);
		snprintf(d, sizeof d, "got %d status %d len %u wr_id %lu", got,
			 got ? wc.status : -1, got ? wc.byte_len : 0,
			 got ? (unsigned long)wc.wr_id : 0);
		check(name,
		      got == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 600 + k &&
			      wc.byte_len == 8,
		      d);
		uint64_t res;
		memcpy(&res, dst + 16, 8);
		int exact = res == ops[k].orig;
		int v44 = cqe128 && limit && !exact && libmlx5_v44_128(dst + 16, NULL, 8);
		snprintf(name, sizeof name, "atomic_bytes_%u", k);
		snprintf(d, sizeof d, "result %#llx, remote %#llx", (unsigned long long)res,
			 (unsigned long long)*target);
		check(name,
		      (exact || v44) && *target == ops[k].after && dst[15] == 0xee &&
			      dst[24] == 0xee,
		      d);
		if (v44)
			printf("NOTE atomic_bytes_%u: libmlx5 copied from the wrong place of the "
			       "128-byte CQE (rdma-core before 45184d2c8)\n",
			       k);
	}
	check("req_destroy",
	      !ibv_destroy_qp(qc) && !ibv_destroy_qp(qd) && !ibv_destroy_cq(ccq) &&
		      !ibv_destroy_comp_channel(ch),
	      "failed");
	return 0;
}

int main(int argc, char **argv)
{
	int limit = argc > 1 ? atoi(argv[1]) : 32;
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1) {
		perror("ibv_get_device_list");
		return 2;
	}
	struct ibv_context *ctx = ibv_open_device(list[0]);
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	size_t len = 1 << 16;
	unsigned char *buf = aligned_alloc(4096, len);
	memset(buf, 0, len);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, len,
					    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
						    IBV_ACCESS_REMOTE_ATOMIC)
			       : NULL;
	struct ibv_cq *scq = ctx ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
	struct ibv_cq *rcq = ctx ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
	check("objects", pd && mr && scq && rcq, "creation failed");
	if (!(pd && mr && scq && rcq))
		return 1;
	struct ibv_qp_init_attr ia = {0};
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 8;
	ia.cap.max_recv_wr = 8;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 2;
	ia.send_cq = scq;
	ia.recv_cq = scq;
	struct ibv_qp *qa = ibv_create_qp(pd, &ia);
	ia.recv_cq = rcq;
	struct ibv_qp *qb = ibv_create_qp(pd, &ia);
	union ibv_gid gid;
	check("qps", qa && qb && !ibv_query_gid(ctx, 1, 0, &gid), "creation failed");
	if (!qa || !qb)
		return 1;
	int r1 = qp_to_rts(qa, ACCESS, qb->qp_num, &gid, ACK_TIMEOUT);
	int r2 = qp_to_rts(qb, ACCESS, qa->qp_num, &gid, ACK_TIMEOUT);
	char d[160];
	snprintf(d, sizeof d, "modify steps %d %d", r1, r2);
	check("connect", !r1 && !r2, d);

	unsigned char *src = buf, *dst = buf + 8192;
	int sizes[] = {1, 31, 32, 33, 64, 65};
	for (unsigned k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
		int m = sizes[k];
		char name[64];
		memset(dst, 0xee, 1024);
		for (int i = 0; i < m; i++)
			src[i] = (unsigned char)(i * 13 + k + 1);
		/* Two entries: 5 bytes at dst, 200 at dst + 256. */
		struct ibv_sge rs[2] = {
			{.addr = (uintptr_t)dst, .length = 5, .lkey = mr->lkey},
			{.addr = (uintptr_t)(dst + 256), .length = 200, .lkey = mr->lkey},
		};
		struct ibv_recv_wr rw = {.wr_id = 100 + k, .sg_list = rs, .num_sge = 2}, *rbad;
		struct ibv_sge ss = {.addr = (uintptr_t)src, .length = m, .lkey = mr->lkey};
		struct ibv_send_wr sw = {0}, *sbad;
		sw.wr_id = 7;
		sw.sg_list = &ss;
		sw.num_sge = 1;
		sw.opcode = IBV_WR_SEND;
		sw.send_flags = IBV_SEND_SIGNALED;
		snprintf(name, sizeof name, "post_%d", m);
		check(name, !ibv_post_recv(qb, &rw, &rbad) && !ibv_post_send(qa, &sw, &sbad),
		      "failed");
		struct ibv_wc wc;
		int got = poll_one(scq, &wc);
		snprintf(name, sizeof name, "sent_%d", m);
		snprintf(d, sizeof d, "got %d status %d", got, got ? wc.status : -1);
		check(name, got == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 7, d);
		/* The responder is done: its buffer shows where the message went. */
		int untouched = dst[0] == 0xee;
		snprintf(name, sizeof name, "placed_%d", m);
		snprintf(d, sizeof d, "%s before the receive was polled (limit %d)",
			 untouched ? "buffer untouched" : "buffer written", limit);
		check(name, untouched == (m <= limit), d);
		got = poll_one(rcq, &wc);
		snprintf(name, sizeof name, "recv_%d", m);
		snprintf(d, sizeof d, "got %d status %d len %u wr_id %lu", got,
			 got ? wc.status : -1, got ? wc.byte_len : 0,
			 got ? (unsigned long)wc.wr_id : 0);
		check(name,
		      got == 1 && wc.status == IBV_WC_SUCCESS && wc.byte_len == (unsigned)m &&
			      wc.wr_id == 100 + k && wc.opcode == IBV_WC_RECV,
		      d);
		int first = m < 5 ? m : 5, rest = m - first;
		int ok = memcmp(dst, src, first) == 0 && memcmp(dst + 256, src + 5, rest) == 0 &&
			 dst[first] == 0xee && dst[256 + rest] == 0xee;
		snprintf(name, sizeof name, "bytes_%d", m);
		check(name, ok, "bytes differ");
	}
	if (requester(ctx, pd, mr, buf, limit, rcq, &gid))
		return 1;
	check("destroy",
	      !ibv_destroy_qp(qa) && !ibv_destroy_qp(qb) && !ibv_destroy_cq(scq) &&
		      !ibv_destroy_cq(rcq) && !ibv_dereg_mr(mr) && !ibv_dealloc_pd(pd) &&
		      !ibv_close_device(ctx),
	      "failed");
	ibv_free_device_list(list);
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
