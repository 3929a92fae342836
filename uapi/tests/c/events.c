/* Completion channel and async events through rdma-core's libibverbs + libmlx5 (run
 * under `ferroverbs run`): two RC QPs of one process connected to each other on the
 * simulated NIC. An RDMA WRITE raises a completion event on the armed CQ (the
 * channel's descriptor polls readable, the written bytes arrive); a non-blocking
 * channel with nothing queued is EAGAIN; a WRITE with a wrong rkey completes with
 * IBV_WC_REM_ACCESS_ERR at the requester and raises IBV_EVENT_QP_ACCESS_ERR for the
 * responder QP on the async file; every object is destroyed (destroy waits for the
 * acknowledged events). Prints "PASS name" / "FAIL name ..." and exits 1 on failure. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

#include "checker.h"

/* The remote access of every QP, and its local ACK timeout exponent. */
#define ACCESS (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
#define ACK_TIMEOUT 14

static int readable(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

int main(void)
{
	struct ibv_device **list;
	struct ibv_context *ctx = open_first_device(&list);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	size_t len = 1 << 16;
	char *buf = aligned_alloc(4096, len);
	memset(buf, 0, len);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, len,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					       IBV_ACCESS_REMOTE_READ);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *cqa = ibv_create_cq(ctx, 16, NULL, ch, 0);
	struct ibv_cq *cqb = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	check("objects", pd && mr && ch && cqa && cqb, "creation failed");
	if (!(pd && mr && ch && cqa && cqb))
		return 1;
	struct ibv_qp *qa = rc_qp(pd, cqa);
	struct ibv_qp *qb = rc_qp(pd, cqb);
	union ibv_gid gid;
	check("qps", qa && qb && !ibv_query_gid(ctx, 1, 0, &gid), "creation failed");
	if (!qa || !qb)
		return 1;
	int r1 = qp_to_rts(qa, ACCESS, qb->qp_num, &gid, ACK_TIMEOUT);
	int r2 = qp_to_rts(qb, ACCESS, qa->qp_num, &gid, ACK_TIMEOUT);
	char d[64];
	snprintf(d, sizeof d, "modify steps %d %d", r1, r2);
	check("connect", !r1 && !r2, d);

	/* A completion event. */
	for (int i = 0; i < 4096; i++)
		buf[i] = (char)(i * 7 + 3);
	check("req_notify", ibv_req_notify_cq(cqa, 0) == 0, "failed");
	check("post_write", post_write(qa, mr, buf, (uintptr_t)(buf + 32768), mr->rkey, 4096, 7) == 0,
	      "failed");
	check("channel_readable", readable(ch->fd, 20000), "no POLLIN within 20 s");
	struct ibv_cq *ecq;
	void *ectx;
	check("get_cq_event", ibv_get_cq_event(ch, &ecq, &ectx) == 0 && ecq == cqa,
	      "wrong CQ or failure");
	ibv_ack_cq_events(cqa, 1);
	struct ibv_wc wc;
	int got = 0;
	for (int k = 0; k < 1000000 && !got; k++)
		got = ibv_poll_cq(cqa, 1, &wc);
	snprintf(d, sizeof d, "got %d status %d wr_id %llu", got, got ? wc.status : -1,
		 got ? (unsigned long long)wc.wr_id : 0ULL);
	check("write_completion", got == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 7, d);
	check("write_data", memcmp(buf, buf + 32768, 4096) == 0, "bytes differ");
	check("channel_drained", !readable(ch->fd, 0), "still readable");
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	errno = 0;
	check("get_cq_event_nonblocking_empty",
	      ibv_get_cq_event(ch, &ecq, &ectx) != 0 && errno == EAGAIN, "not EAGAIN");

	/* A remote access error: CQE at the requester, async event at the responder. */
	check("post_bad_rkey",
	      post_write(qa, mr, buf, (uintptr_t)(buf + 32768), mr->rkey ^ 0x5500, 64, 7) == 0,
	      "failed");
	got = 0;
	for (int k = 0; k < 200000000 && !got; k++)
		got = ibv_poll_cq(cqa, 1, &wc);
	snprintf(d, sizeof d, "got %d status %d", got, got ? wc.status : -1);
	check("remote_access_error_completion", got == 1 && wc.status == IBV_WC_REM_ACCESS_ERR, d);
	check("async_readable", readable(ctx->async_fd, 20000), "no POLLIN within 20 s");
	struct ibv_async_event ev;
	int r = ibv_get_async_event(ctx, &ev);
	snprintf(d, sizeof d, "r %d type %d qp %p (qb %p)", r, r ? -1 : (int)ev.event_type,
		 r ? NULL : (void *)ev.element.qp, (void *)qb);
	check("qp_access_error_event",
	      r == 0 && ev.event_type == IBV_EVENT_QP_ACCESS_ERR && ev.element.qp == qb, d);
	if (r == 0)
		ibv_ack_async_event(&ev);

	check("destroy_qp_a", ibv_destroy_qp(qa) == 0, "failed");
	check("destroy_qp_b", ibv_destroy_qp(qb) == 0, "failed");
	check("destroy_cq_a", ibv_destroy_cq(cqa) == 0, "failed");
	check("destroy_cq_b", ibv_destroy_cq(cqb) == 0, "failed");
	check("destroy_channel", ibv_destroy_comp_channel(ch) == 0, "failed");
	check("dereg_mr", ibv_dereg_mr(mr) == 0, "failed");
	check("dealloc_pd", ibv_dealloc_pd(pd) == 0, "failed");
	check("close_device", ibv_close_device(ctx) == 0, "failed");
	ibv_free_device_list(list);
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
