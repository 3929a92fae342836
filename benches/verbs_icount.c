/*
 * Instruction counts of the drop-in libibverbs' post and poll entries, called as a C
 * program calls them (the static inline ibv_post_send / ibv_poll_cq of
 * <infiniband/verbs.h>, through the context's ops). Run under callgrind by
 * benches/icount.sh (cases c_post, c_poll, c_list16), against the built libibverbs.so.1 on a
 * simulated NIC of this process; the measured functions are icount_c_post_send and
 * icount_c_poll_cq (never inlined), and the script leaves out what the simulated
 * device does behind the doorbell (its Bus::write64), which on a ConnectX is one
 * store to BAR0.
 *
 * verbs_icount <c_post|c_poll|c_list16> <iterations>: two RC QPs of one NIC
 * connected to each other; each iteration posts a receive on the second, a signaled
 * 64-byte inline SEND on the first, and takes both completions. c_post measures the
 * SEND's ibv_post_send; c_poll arms the send CQ, waits for its event (so the
 * completion is there), and measures the ibv_poll_cq of one entry that takes it.
 * c_list16 posts 16 receives, then measures one ibv_post_send of a list of 16
 * SENDs of one 64-byte gather entry (the last signaled), and takes the 17
 * completions.
 */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void die(const char *what)
{
	fprintf(stderr, "verbs_icount: %s failed\n", what);
	exit(1);
}

__attribute__((noinline)) int icount_c_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	return ibv_post_send(qp, wr, &bad);
}

__attribute__((noinline)) int icount_c_poll_cq(struct ibv_cq *cq, struct ibv_wc *wc)
{
	return ibv_poll_cq(cq, 1, wc);
}

/* Polls `cq` until it gives one completion (bounded), which must be a success. */
static void wait_one(struct ibv_cq *cq, const char *what)
{
	struct ibv_wc wc;
	for (long spins = 0; spins < 100000000L; spins++) {
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			die("ibv_poll_cq");
		if (n == 1) {
			if (wc.status != IBV_WC_SUCCESS) {
				fprintf(stderr, "verbs_icount: %s completion status %d\n", what, wc.status);
				exit(1);
			}
			return;
		}
	}
	die(what);
}

static void connect_qp(struct ibv_qp *qp, uint32_t dest, union ibv_gid *gid)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("INIT");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 18;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("RTS");
}

int main(int argc, char **argv)
{
	if (argc != 3 || (strcmp(argv[1], "c_post") && strcmp(argv[1], "c_poll") &&
			  strcmp(argv[1], "c_list16"))) {
		fprintf(stderr, "usage: verbs_icount <c_post|c_poll|c_list16> <iterations>\n");
		return 2;
	}
	int poll_case = !strcmp(argv[1], "c_poll");
	int list_case = !strcmp(argv[1], "c_list16");
	long iters = atol(argv[2]);
	int num;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list || num < 1)
		die("ibv_get_device_list");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx)
		die("ibv_open_device");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!pd)
		die("ibv_alloc_pd");
	static char buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		die("ibv_reg_mr");
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	if (!ch)
		die("ibv_create_comp_channel");
	struct ibv_cq *scq = ibv_create_cq(ctx, 64, NULL, ch, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!scq || !rcq)
		die("ibv_create_cq");
	struct ibv_qp_init_attr ia;
	memset(&ia, 0, sizeof ia);
	ia.send_cq = scq;
	ia.recv_cq = rcq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 64;
	ia.cap.max_recv_wr = 64;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	ia.cap.max_inline_data = 64;
	struct ibv_qp *a = ibv_create_qp(pd, &ia);
	ia.send_cq = rcq;
	struct ibv_qp *b = ibv_create_qp(pd, &ia);
	if (!a || !b)
		die("ibv_create_qp");
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, 0, &gid))
		die("ibv_query_gid");
	connect_qp(a, b->qp_num, &gid);
	connect_qp(b, a->qp_num, &gid);

	struct ibv_sge rsge = {.addr = (uintptr_t)buf, .length = 1024, .lkey = mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 2, .sg_list = &rsge, .num_sge = 1};
	struct ibv_sge ssge = {.addr = (uintptr_t)(buf + 2048), .length = 64, .lkey = mr->lkey};
	struct ibv_send_wr swr;
	memset(&swr, 0, sizeof swr);
	swr.wr_id = 1;
	swr.sg_list = &ssge;
	swr.num_sge = 1;
	swr.opcode = IBV_WR_SEND;
	swr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	/* c_list16: 16 SENDs of one gather entry each, the last signaled, and 16
	 * receives, each a chained list. */
	struct ibv_sge lsge[16];
	struct ibv_send_wr lwr[16];
	struct ibv_recv_wr lrwr[16];
	memset(lwr, 0, sizeof lwr);
	memset(lrwr, 0, sizeof lrwr);
	for (int k = 0; k < 16; k++) {
		lsge[k] = (struct ibv_sge){.addr = (uintptr_t)(buf + 2048), .length = 64, .lkey = mr->lkey};
		lwr[k].wr_id = 100 + k;
		lwr[k].sg_list = &lsge[k];
		lwr[k].num_sge = 1;
		lwr[k].opcode = IBV_WR_SEND;
		lwr[k].next = k < 15 ? &lwr[k + 1] : NULL;
		lrwr[k] = rwr;
		lrwr[k].next = k < 15 ? &lrwr[k + 1] : NULL;
	}
	lwr[15].send_flags = IBV_SEND_SIGNALED;
	for (long i = 0; list_case && i < iters; i++) {
		struct ibv_recv_wr *rbad;
		if (ibv_post_recv(b, lrwr, &rbad))
			die("ibv_post_recv");
		if (icount_c_post_send(a, lwr))
			die("ibv_post_send");
		wait_one(scq, "send");
		for (int k = 0; k < 16; k++)
			wait_one(rcq, "receive");
	}
	for (long i = 0; !list_case && i < iters; i++) {
		struct ibv_recv_wr *rbad;
		if (ibv_post_recv(b, &rwr, &rbad))
			die("ibv_post_recv");
		if (poll_case) {
			struct ibv_send_wr *bad;
			struct ibv_cq *ev_cq;
			void *ev_ctx;
			struct ibv_wc wc;
			if (ibv_req_notify_cq(scq, 0))
				die("ibv_req_notify_cq");
			if (ibv_post_send(a, &swr, &bad))
				die("ibv_post_send");
			if (ibv_get_cq_event(ch, &ev_cq, &ev_ctx))
				die("ibv_get_cq_event");
			ibv_ack_cq_events(ev_cq, 1);
			if (icount_c_poll_cq(scq, &wc) != 1 || wc.status != IBV_WC_SUCCESS || wc.wr_id != 1) {
				fprintf(stderr, "verbs_icount: iteration %ld: no completion after the event\n", i);
				return 1;
			}
		} else {
			if (icount_c_post_send(a, &swr))
				die("ibv_post_send");
			wait_one(scq, "send");
		}
		wait_one(rcq, "receive");
	}
	printf("%s %ld\n", argv[1], iters);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_cq(scq);
	ibv_destroy_cq(rcq);
	ibv_destroy_comp_channel(ch);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
