/* CQ resize through rdma-core's libibverbs + libmlx5 (run under `ferroverbs run`):
 * ibv_resize_cq is libmlx5's mlx5_resize_cq, which allocates the new buffer, sends
 * RESIZE_CQ with its address, and copies the completions it had not polled from the
 * old buffer up to the device's resize CQE (mlx5_cq_resize_copy_cqes). Completions
 * are waiting before each resize (receives flushed by moving a QP to ERR, then
 * SENDs received from another QP), and more arrive after; every one is polled once,
 * in order, with its data. Sizes out of range and below the waiting completions are
 * EINVAL, and cq->cqe is the size rounded up. Prints "PASS name" / "FAIL name ..."
 * and exits 1 on failure. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#include "checker.h"

/* The remote access of every QP, and its local ACK timeout exponent. */
#define ACCESS (IBV_ACCESS_REMOTE_WRITE)
#define ACK_TIMEOUT 18

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static int post_recv(struct ibv_qp *qp, uint64_t id, struct ibv_mr *mr, void *at, uint32_t len)
{
	struct ibv_sge sge = {.addr = (uintptr_t)at, .length = len, .lkey = mr ? mr->lkey : 0};
	struct ibv_recv_wr wr = {0}, *bad;
	wr.wr_id = id;
	wr.sg_list = mr ? &sge : NULL;
	wr.num_sge = mr ? 1 : 0;
	return ibv_post_recv(qp, &wr, &bad);
}

/* SEND `id` from `qp`: 16 bytes, the id and its complement. */
static int send_one(struct ibv_qp *qp, struct ibv_mr *mr, uint64_t *src, uint64_t id)
{
	src[0] = id;
	src[1] = ~id;
	struct ibv_sge sge = {.addr = (uintptr_t)src, .length = 16, .lkey = mr->lkey};
	struct ibv_send_wr wr = {0}, *bad;
	wr.wr_id = id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	return ibv_post_send(qp, &wr, &bad);
}

/* Polls `n` completions of `cq` within 20 s into `wc`; returns how many came. */
static int poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int n)
{
	int got = 0;
	double t0 = now();
	while (got < n && now() - t0 < 20) {
		int r = ibv_poll_cq(cq, n - got, wc + got);
		if (r < 0)
			return got;
		got += r;
	}
	return got;
}

/* `k` SENDs `first` .. from `qc` to `qb` (whose receives land in the resized CQ):
 * waits for their send completions on `cq2`; by then the receiver wrote its CQEs
 * (a responder acknowledges a SEND after its completion is written). */
static int sends(struct ibv_qp *qb, struct ibv_qp *qc, struct ibv_cq *cq2, struct ibv_mr *mr,
		 char *buf, uint64_t first, int k)
{
	struct ibv_wc wc[32];
	for (int i = 0; i < k; i++) {
		uint64_t id = first + i;
		if (post_recv(qb, id, mr, buf + 16 * (id % 64), 16))
			return -1;
		if (send_one(qc, mr, (uint64_t *)(buf + 2048 + 16 * (id % 64)), id))
			return -2;
	}
	int got = poll_n(cq2, wc, k);
	for (int i = 0; i < got; i++)
		if (wc[i].status != IBV_WC_SUCCESS || wc[i].wr_id != first + i)
			return -3;
	/* The device writes the responder's CQE before the ACK goes out; a little slack
	 * for the device thread all the same. */
	struct timespec t = {0, 20 * 1000 * 1000};
	nanosleep(&t, NULL);
	return got;
}

int main(void)
{
	char d[160];
	struct ibv_device **list;
	struct ibv_context *ctx = open_first_device(&list);
	struct ibv_device_attr attr;
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	size_t len = 1 << 16;
	char *buf = aligned_alloc(4096, len);
	memset(buf, 0, len);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE);
	int (*provider_poll)(struct ibv_cq *, int, struct ibv_wc *) = ctx->ops.poll_cq;
	struct ibv_cq *cq = ibv_create_cq(ctx, 3, NULL, NULL, 0);
	struct ibv_cq *cq2 = ibv_create_cq(ctx, 63, NULL, NULL, 0);
	int ok = pd && mr && cq && cq2 && !ibv_query_device(ctx, &attr);
	check("objects", ok, "creation failed");
	if (!ok)
		return 1;
	/* The layer's busy-poll assistance wraps the context's poll entry when a CQ is
	 * created, unless FERROVERBS_POLL_ASSIST=0; every completion below goes through it
	 * (or through libmlx5's entry alone). */
	const char *assist = getenv("FERROVERBS_POLL_ASSIST");
	int want_wrapped = !(assist && !strcmp(assist, "0"));
	snprintf(d, sizeof d, "poll_cq entry %s (assistance %s)",
		 ctx->ops.poll_cq == provider_poll ? "libmlx5's" : "wrapped",
		 want_wrapped ? "on" : "off");
	check("poll_assist", (ctx->ops.poll_cq != provider_poll) == want_wrapped, d);
	check("created_cqe", cq->cqe == 3, "cqe of a CQ of 3");

	struct ibv_qp_init_attr ia = {0};
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 32;
	ia.cap.max_recv_wr = 32;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	ia.send_cq = cq;
	ia.recv_cq = cq;
	struct ibv_qp *qa = ibv_create_qp(pd, &ia);
	struct ibv_qp *qb = ibv_create_qp(pd, &ia);
	ia.send_cq = cq2;
	ia.recv_cq = cq2;
	struct ibv_qp *qc = ibv_create_qp(pd, &ia);
	union ibv_gid gid;
	ok = qa && qb && qc && !ibv_query_gid(ctx, 1, 0, &gid);
	check("qps", ok, "creation failed");
	if (!ok)
		return 1;
	int r1 = qp_to_rts(qb, ACCESS, qc->qp_num, &gid, ACK_TIMEOUT);
	int r2 = qp_to_rts(qc, ACCESS, qb->qp_num, &gid, ACK_TIMEOUT);
	snprintf(d, sizeof d, "modify steps %d %d", r1, r2);
	check("connect", !r1 && !r2, d);

	/* Three receives of qa flushed: three completions waiting in a ring of 4. */
	int e = qp_to_init(qa, ACCESS);
	for (int i = 0; i < 3; i++)
		e |= post_recv(qa, i, NULL, NULL, 0);
	struct ibv_qp_attr err = {.qp_state = IBV_QPS_ERR};
	e |= ibv_modify_qp(qa, &err, IBV_QP_STATE);
	check("flushed", e == 0, "INIT, post_recv or ERR failed");

	int bad[] = {1, 0, -1, attr.max_cqe + 1};
	for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		errno = 0;
		int r = ibv_resize_cq(cq, bad[i]);
		snprintf(d, sizeof d, "resize to %d: %d (errno %d), cqe %d", bad[i], r, errno,
			 cq->cqe);
		check("refused", r == EINVAL && cq->cqe == 3, d);
	}
	check("same_size", ibv_resize_cq(cq, 2) == 0 && cq->cqe == 3, "resize to 2 of 3");

	struct ibv_wc wc[64];
	int got = ibv_poll_cq(cq, 1, wc);
	check("poll_before", got == 1 && wc[0].wr_id == 0 && wc[0].status == IBV_WC_WR_FLUSH_ERR,
	      "the first flushed receive");

	/* Grow with two waiting. */
	int r = ibv_resize_cq(cq, 40);
	snprintf(d, sizeof d, "resize to 40: %d, cqe %d", r, cq->cqe);
	check("grow", r == 0 && cq->cqe == 63, d);

	/* Ten SENDs received after the resize: twelve waiting. */
	got = sends(qb, qc, cq2, mr, buf, 100, 10);
	snprintf(d, sizeof d, "%d of 10", got);
	check("sends_after_grow", got == 10, d);

	/* Shrink: a ring of 8 cannot hold twelve, one of 16 can. */
	r = ibv_resize_cq(cq, 4);
	snprintf(d, sizeof d, "resize to 4: %d, cqe %d", r, cq->cqe);
	check("shrink_refused", r == EINVAL && cq->cqe == 63, d);
	r = ibv_resize_cq(cq, 15);
	snprintf(d, sizeof d, "resize to 15: %d, cqe %d", r, cq->cqe);
	check("shrink", r == 0 && cq->cqe == 15, d);

	/* Two more after the shrink. */
	got = sends(qb, qc, cq2, mr, buf, 110, 2);
	snprintf(d, sizeof d, "%d of 2", got);
	check("sends_after_shrink", got == 2, d);

	/* Every completion once, in order: qa's two flushed receives, then qb's twelve
	 * receives with their data. */
	got = poll_n(cq, wc, 14);
	int in_order = got == 14;
	for (int i = 0; in_order && i < 2; i++)
		in_order = wc[i].wr_id == (uint64_t)(i + 1) && wc[i].qp_num == qa->qp_num &&
			   wc[i].status == IBV_WC_WR_FLUSH_ERR;
	for (int i = 2; in_order && i < 14; i++) {
		uint64_t id = 100 + (i - 2);
		uint64_t *m = (uint64_t *)(buf + 16 * (id % 64));
		in_order = wc[i].wr_id == id && wc[i].qp_num == qb->qp_num &&
			   wc[i].status == IBV_WC_SUCCESS && wc[i].opcode == IBV_WC_RECV &&
			   wc[i].byte_len == 16 && m[0] == id && m[1] == ~id;
		if (!in_order)
			snprintf(d, sizeof d, "entry %d: wr_id %llu qp %u status %d len %u", i,
				 (unsigned long long)wc[i].wr_id, wc[i].qp_num, wc[i].status,
				 wc[i].byte_len);
	}
	if (got != 14)
		snprintf(d, sizeof d, "%d of 14 completions", got);
	check("every_completion_once_in_order", in_order, d);
	check("then_empty", ibv_poll_cq(cq, 64, wc) == 0, "a completion twice or from nowhere");

	/* The resized ring goes on working across its wraps. */
	int rounds_ok = 1;
	for (int round = 0; round < 8 && rounds_ok; round++) {
		uint64_t first = 200 + 10 * round;
		rounds_ok = sends(qb, qc, cq2, mr, buf, first, 10) == 10 && poll_n(cq, wc, 10) == 10;
		for (int i = 0; rounds_ok && i < 10; i++)
			rounds_ok = wc[i].wr_id == first + i && wc[i].status == IBV_WC_SUCCESS;
	}
	check("wraps", rounds_ok, "a round of 10 SENDs after the resizes");

	int destroyed = !ibv_destroy_qp(qa) && !ibv_destroy_qp(qb) && !ibv_destroy_qp(qc) &&
			!ibv_destroy_cq(cq) && !ibv_destroy_cq(cq2) && !ibv_dereg_mr(mr) &&
			!ibv_dealloc_pd(pd);
	check("destroy", destroyed, "a destroy failed");
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	printf("\n%d failures\n", failures);
	return failures ? 1 : 0;
}
