/* Extended CQs through rdma-core's libibverbs + libmlx5 (run under `ferroverbs run`),
 * with the layer's busy-poll assistance: ibv_create_cq_ex gives CQs whose
 * start_poll/next_poll/end_poll entries libmlx5 sets per CQ (mlx5_cq_fill_pfns);
 * the layer wraps start_poll at CREATE_CQ (unless FERROVERBS_POLL_ASSIST=0), so an
 * empty ibv_start_poll services the simulated device on the polling thread, as an
 * empty ibv_poll_cq does. Two RC QPs of one context, one with a locked CQ and one
 * with a single-threaded CQ (two of libmlx5's start_poll variants), ping-pong
 * SENDs; every completion is checked (status, opcode, wr_id, byte_len, QP number,
 * the payload), and the round trip is timed.
 *
 * usage: cqex [ex|poll] [ITERS]   (poll: the same ping-pong on ibv_create_cq CQs
 * with ibv_poll_cq, for comparison), or between two processes, each with one QP
 * and one CQ (the QP number and GID exchanged over TCP, as ibv_rc_pingpong does):
 *   cqex -p PORT ex|poll ITERS          (server)
 *   cqex -p PORT ex|poll ITERS HOST     (client; it times the round trips)
 * Prints "PASS name" / "FAIL name ...", the round trip as "rtt_us X",
 * "N failures", and exits 1 on failure. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#include "checker.h"

/* No remote access (SENDs only), and the local ACK timeout exponent. */
#define ACCESS 0
#define ACK_TIMEOUT 18

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* The file name of the object holding code address `f` ("?" if none). */
static const char *object_of(const void *f)
{
	Dl_info i;
	if (!f || !dladdr(f, &i) || !i.dli_fname)
		return "?";
	return i.dli_fname;
}

#define MSG 64

struct side {
	struct ibv_qp *qp;
	struct ibv_cq *cq;     /* ibv_cq_ex_to_cq(cqx) in ex mode */
	struct ibv_cq_ex *cqx; /* NULL in poll mode */
	char *rbuf, *sbuf;
};

static struct ibv_mr *mr;

static int post_recv(struct side *s, uint64_t id)
{
	struct ibv_sge sge = {.addr = (uintptr_t)s->rbuf, .length = MSG, .lkey = mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &sge, .num_sge = 1}, *bad;
	return ibv_post_recv(s->qp, &wr, &bad);
}

static int post_send(struct side *s, uint64_t id)
{
	memset(s->sbuf, (int)(id & 0xff), MSG);
	memcpy(s->sbuf, &id, sizeof id);
	struct ibv_sge sge = {.addr = (uintptr_t)s->sbuf, .length = MSG, .lkey = mr->lkey};
	struct ibv_send_wr wr = {0}, *bad;
	wr.wr_id = id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	return ibv_post_send(s->qp, &wr, &bad);
}

/* One completion. */
struct comp {
	uint64_t wr_id;
	int status, opcode;
	uint32_t byte_len, qp_num;
};

/* Waits (at most 20 s) for the completions of `s`'s CQ until both a SEND and a
 * receive of `id` came; checks each. Returns 0 or a reason. */
static const char *await(struct side *s, uint64_t id)
{
	int got_send = 0, got_recv = 0;
	double t0 = now();
	while (!(got_send && got_recv)) {
		struct comp c[2];
		int n = 0;
		if (now() - t0 > 20)
			return "no completion within 20 s";
		if (s->cqx) {
			struct ibv_poll_cq_attr attr = {0};
			int r = ibv_start_poll(s->cqx, &attr);
			if (r == ENOENT)
				continue;
			if (r)
				return "ibv_start_poll failed";
			do {
				if (n == 2) {
					ibv_end_poll(s->cqx);
					return "more than two completions";
				}
				c[n].wr_id = s->cqx->wr_id;
				c[n].status = s->cqx->status;
				c[n].opcode = ibv_wc_read_opcode(s->cqx);
				c[n].byte_len = ibv_wc_read_byte_len(s->cqx);
				c[n].qp_num = ibv_wc_read_qp_num(s->cqx);
				n++;
				r = ibv_next_poll(s->cqx);
			} while (r == 0);
			ibv_end_poll(s->cqx);
			if (r != ENOENT)
				return "ibv_next_poll failed";
		} else {
			struct ibv_wc wc[2];
			n = ibv_poll_cq(s->cq, 2, wc);
			if (n < 0)
				return "ibv_poll_cq failed";
			for (int i = 0; i < n; i++)
				c[i] = (struct comp){wc[i].wr_id, wc[i].status, wc[i].opcode,
						     wc[i].byte_len, wc[i].qp_num};
		}
		for (int i = 0; i < n; i++) {
			if (c[i].status != IBV_WC_SUCCESS)
				return "completion in error";
			if (c[i].wr_id != id || c[i].qp_num != s->qp->qp_num)
				return "wr_id or QP number not the one posted";
			if (c[i].opcode == IBV_WC_SEND && !got_send) {
				got_send = 1;
			} else if (c[i].opcode == IBV_WC_RECV && !got_recv) {
				uint64_t first;
				memcpy(&first, s->rbuf, sizeof first);
				if (c[i].byte_len != MSG || first != id ||
				    (unsigned char)s->rbuf[MSG - 1] != (id & 0xff))
					return "received length or bytes wrong";
				got_recv = 1;
			} else {
				return "unexpected opcode or a completion twice";
			}
		}
	}
	return NULL;
}

/* Up to `max` completions of `s`'s CQ into `c` (0: none yet); -1 on a poll error. */
static int poll_some(struct side *s, struct comp *c, int max)
{
	int n = 0;
	if (s->cqx) {
		struct ibv_poll_cq_attr attr = {0};
		int r = ibv_start_poll(s->cqx, &attr);
		if (r == ENOENT)
			return 0;
		if (r)
			return -1;
		do {
			c[n].wr_id = s->cqx->wr_id;
			c[n].status = s->cqx->status;
			c[n].opcode = ibv_wc_read_opcode(s->cqx);
			c[n].byte_len = ibv_wc_read_byte_len(s->cqx);
			c[n].qp_num = ibv_wc_read_qp_num(s->cqx);
			n++;
		} while (n < max && (r = ibv_next_poll(s->cqx)) == 0);
		ibv_end_poll(s->cqx);
		return (n < max && r != ENOENT) ? -1 : n;
	}
	struct ibv_wc wc[4];
	n = ibv_poll_cq(s->cq, max < 4 ? max : 4, wc);
	for (int i = 0; i < n; i++)
		c[i] = (struct comp){wc[i].wr_id, wc[i].status, wc[i].opcode, wc[i].byte_len,
				     wc[i].qp_num};
	return n;
}

/* What the two processes exchange over TCP. */
struct peer {
	uint32_t qpn;
	uint8_t gid[16];
};

static int tcp_exchange(const char *host, int port, struct peer *mine, struct peer *theirs)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	int fd = socket(AF_INET, SOCK_STREAM, 0), c = -1;
	if (fd < 0)
		return -1;
	if (host) {
		inet_pton(AF_INET, host, &a.sin_addr);
		double t0 = now();
		while (connect(fd, (struct sockaddr *)&a, sizeof a)) {
			/* not listening yet: again, on a new socket */
			struct timespec t = {0, 50 * 1000 * 1000};
			close(fd);
			if (now() - t0 > 20 || (fd = socket(AF_INET, SOCK_STREAM, 0)) < 0)
				return -1;
			nanosleep(&t, NULL);
		}
		c = fd;
		if (write(c, mine, sizeof *mine) != sizeof *mine ||
		    read(c, theirs, sizeof *theirs) != sizeof *theirs)
			return -1;
	} else {
		int one = 1;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 1))
			return -1;
		c = accept(fd, NULL, NULL);
		if (c < 0 || read(c, theirs, sizeof *theirs) != sizeof *theirs)
			return -1;
	}
	return c;
}

/* The two-process ping-pong (see the usage above). */
static int two_process(int port, int ex, int iters, const char *host)
{
	char d[256];
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *ctx = list && n > 0 ? ibv_open_device(list[0]) : NULL;
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	char *buf = aligned_alloc(4096, 4096);
	mr = pd && buf ? ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct side s = {0};
	if (mr && ex) {
		struct ibv_cq_init_attr_ex a = {0};
		a.cqe = 16;
		a.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM;
		s.cqx = ibv_create_cq_ex(ctx, &a);
		s.cq = s.cqx ? ibv_cq_ex_to_cq(s.cqx) : NULL;
	} else if (mr) {
		s.cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	}
	s.qp = s.cq ? rc_qp(pd, s.cq) : NULL;
	s.rbuf = buf;
	s.sbuf = buf + 2048;
	union ibv_gid gid;
	int ok = s.qp && !ibv_query_gid(ctx, 1, 0, &gid);
	check("objects", ok, "device, PD, MR, CQ or QP failed");
	if (!ok)
		return 1;
	if (ex) {
		const char *sp = object_of((void *)s.cqx->start_poll);
		const char *assist = getenv("FERROVERBS_POLL_ASSIST");
		int want_wrapped = !(assist && !strcmp(assist, "0"));
		snprintf(d, sizeof d, "start_poll in %s (assistance %s)", sp,
			 want_wrapped ? "on" : "off");
		check("start_poll_entry", (strstr(sp, "ferroverbs_uapi") != NULL) == want_wrapped, d);
	}
	struct peer mine = {.qpn = s.qp->qp_num}, theirs;
	memcpy(mine.gid, gid.raw, 16);
	int c = tcp_exchange(host, port, &mine, &theirs);
	union ibv_gid pg;
	memcpy(pg.raw, theirs.gid, 16);
	int rts = c >= 0 ? qp_to_rts(s.qp, ACCESS, theirs.qpn, &pg, ACK_TIMEOUT) : -1;
	/* The first receive posted before the peer can send (the barrier below). */
	ok = c >= 0 && !rts && !post_recv(&s, 0);
	if (ok && !host)
		ok = write(c, &mine, sizeof mine) == sizeof mine;
	snprintf(d, sizeof d, "TCP exchange %s, QP transitions %d (errno %d)",
		 c >= 0 ? "done" : "failed", rts, errno);
	check("connect", ok, d);
	if (!ok)
		return 1;
	if (host) {
		/* The server answers only after its QP is ready. */
		char x;
		ok = read(c, &x, 1) == 1;
	} else {
		ok = write(c, "r", 1) == 1;
	}
	const char *why = ok ? NULL : "TCP barrier failed";
	int done = 0, sends = 0;
	double t0 = now();
	for (int k = 0; !why && k < iters; k++) {
		uint64_t id = (uint64_t)k;
		/* the client sends first; the server answers each receive */
		if (host && post_send(&s, id)) {
			why = "post_send failed";
			break;
		}
		int got = 0;
		double w0 = now();
		while (!why && !got) {
			struct comp cc[4];
			int m = poll_some(&s, cc, 4);
			if (m < 0)
				why = "poll failed";
			if (now() - w0 > 20)
				why = "no receive within 20 s";
			for (int i = 0; !why && i < m; i++) {
				if (cc[i].status != IBV_WC_SUCCESS || cc[i].qp_num != s.qp->qp_num)
					why = "completion in error or of another QP";
				else if (cc[i].opcode == IBV_WC_SEND)
					sends++;
				else if (cc[i].opcode != IBV_WC_RECV || cc[i].wr_id != id)
					why = "not the receive posted";
				else {
					uint64_t first;
					memcpy(&first, s.rbuf, sizeof first);
					if (cc[i].byte_len != MSG || first != id ||
					    (unsigned char)s.rbuf[MSG - 1] != (id & 0xff))
						why = "received length or bytes wrong";
					got = 1;
				}
			}
		}
		if (why)
			break;
		if (post_recv(&s, id + 1) || (!host && post_send(&s, id))) {
			why = "post failed";
			break;
		}
		done++;
	}
	double t = now() - t0;
	/* the last SEND completions */
	double w1 = now();
	while (!why && sends < done && now() - w1 < 20) {
		struct comp cc[4];
		int m = poll_some(&s, cc, 4);
		for (int i = 0; i < m; i++)
			if (cc[i].opcode == IBV_WC_SEND && cc[i].status == IBV_WC_SUCCESS)
				sends++;
	}
	snprintf(d, sizeof d, "%d of %d round trips, %d sends completed: %s", done, iters,
		 sends, why ? why : "all");
	check("pingpong", !why && done == iters && sends == done, d);
	if (host)
		printf("rtt_us %.2f (%s CQs, two processes, %d round trips)\n",
		       done ? t / done * 1e6 : 0.0, ex ? "extended" : "ibv_create_cq", done);
	/* Neither side tears down before the other is done. */
	char x = 'e';
	if (write(c, &x, 1) != 1 || read(c, &x, 1) != 1)
		check("teardown", 0, "TCP barrier failed");
	close(c);
	ibv_destroy_qp(s.qp);
	ibv_destroy_cq(s.cq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}

/* Whether the CQ of `s` is empty. */
static int empty(struct side *s)
{
	if (s->cqx) {
		struct ibv_poll_cq_attr attr = {0};
		int r = ibv_start_poll(s->cqx, &attr);
		if (r == 0)
			ibv_end_poll(s->cqx);
		return r == ENOENT;
	}
	struct ibv_wc wc;
	return ibv_poll_cq(s->cq, 1, &wc) == 0;
}

int main(int argc, char **argv)
{
	if (argc > 4 && !strcmp(argv[1], "-p"))
		return two_process(atoi(argv[2]), strcmp(argv[3], "poll") != 0, atoi(argv[4]),
				   argc > 5 ? argv[5] : NULL);
	int ex = !(argc > 1 && !strcmp(argv[1], "poll"));
	int iters = argc > 2 ? atoi(argv[2]) : 1000;
	char d[512];
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1) {
		perror("ibv_get_device_list");
		return 2;
	}
	struct ibv_context *ctx = ibv_open_device(list[0]);
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	char *buf = aligned_alloc(4096, 4096);
	mr = pd && buf ? ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE) : NULL;
	check("objects", ctx && pd && mr, "open, PD or MR failed");
	if (!mr)
		return 1;
	const char *assist = getenv("FERROVERBS_POLL_ASSIST");
	int want_wrapped = !(assist && !strcmp(assist, "0"));

	struct side s[2] = {{0}};
	for (int i = 0; i < 2; i++) {
		if (ex) {
			struct ibv_cq_init_attr_ex a = {0};
			a.cqe = 16;
			a.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM;
			if (i == 1) {
				a.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
				a.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
			}
			s[i].cqx = ibv_create_cq_ex(ctx, &a);
			s[i].cq = s[i].cqx ? ibv_cq_ex_to_cq(s[i].cqx) : NULL;
		} else {
			s[i].cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		}
		s[i].rbuf = buf + 1024 * i;
		s[i].sbuf = buf + 2048 + 1024 * i;
	}
	check("cqs", s[0].cq && s[1].cq, "CQ creation failed");
	if (!s[0].cq || !s[1].cq)
		return 1;

	if (ex) {
		/* start_poll: the layer's wrapper (in libferroverbs_uapi) or libmlx5's own;
		 * next_poll and end_poll: libmlx5's. */
		for (int i = 0; i < 2; i++) {
			const char *sp = object_of((void *)s[i].cqx->start_poll);
			const char *np = object_of((void *)s[i].cqx->next_poll);
			const char *ep = object_of((void *)s[i].cqx->end_poll);
			int wrapped = strstr(sp, "ferroverbs_uapi") != NULL;
			snprintf(d, sizeof d,
				 "CQ %d: start_poll in %s, next_poll in %s, end_poll in %s "
				 "(assistance %s)",
				 i, sp, np, ep, want_wrapped ? "on" : "off");
			check("start_poll_entry",
			      wrapped == want_wrapped && (wrapped || strstr(sp, "mlx5")), d);
			check("next_end_poll_libmlx5", strstr(np, "mlx5") && strstr(ep, "mlx5"), d);
		}
		/* Locked and single-threaded CQs have different libmlx5 start_poll
		 * functions, so different wrappers. */
		check("variants", s[0].cqx->start_poll != s[1].cqx->start_poll,
		      "the two CQs share a start_poll");
	}
	check("empty_at_start", empty(&s[0]) && empty(&s[1]), "a completion from nowhere");

	struct ibv_qp_init_attr ia = {0};
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 8;
	ia.cap.max_recv_wr = 8;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	for (int i = 0; i < 2; i++) {
		ia.send_cq = s[i].cq;
		ia.recv_cq = s[i].cq;
		s[i].qp = ibv_create_qp(pd, &ia);
	}
	union ibv_gid gid;
	int ok = s[0].qp && s[1].qp && !ibv_query_gid(ctx, 1, 0, &gid);
	check("qps", ok, "creation failed");
	if (!ok)
		return 1;
	int r0 = qp_to_rts(s[0].qp, ACCESS, s[1].qp->qp_num, &gid, ACK_TIMEOUT);
	int r1 = qp_to_rts(s[1].qp, ACCESS, s[0].qp->qp_num, &gid, ACK_TIMEOUT);
	snprintf(d, sizeof d, "modify steps %d %d", r0, r1);
	check("connect", !r0 && !r1, d);

	/* The ping-pong: side 0 sends `id`, side 1 receives it and sends it back; each
	 * side sees its SEND's completion and its receive. */
	const char *why = NULL;
	int done = 0;
	if (post_recv(&s[0], 0) || post_recv(&s[1], 0))
		why = "post_recv failed";
	double t0 = now();
	for (int k = 0; !why && k < iters; k++) {
		uint64_t id = (uint64_t)k;
		if (post_send(&s[0], id)) {
			why = "post_send failed";
			break;
		}
		/* side 1: its receive of `id` first, then its answer and its SEND's CQE */
		double w0 = now();
		int got = 0;
		while (!got && !why) {
			if (now() - w0 > 20) {
				why = "side 1: no receive within 20 s";
				break;
			}
			if (s[1].cqx) {
				struct ibv_poll_cq_attr attr = {0};
				int r = ibv_start_poll(s[1].cqx, &attr);
				if (r == ENOENT)
					continue;
				if (r) {
					why = "ibv_start_poll failed";
					break;
				}
				uint64_t first;
				memcpy(&first, s[1].rbuf, sizeof first);
				if (s[1].cqx->status != IBV_WC_SUCCESS || s[1].cqx->wr_id != id ||
				    ibv_wc_read_opcode(s[1].cqx) != IBV_WC_RECV ||
				    ibv_wc_read_byte_len(s[1].cqx) != MSG || first != id)
					why = "side 1: receive completion or bytes wrong";
				else if (ibv_next_poll(s[1].cqx) != ENOENT)
					why = "side 1: a second completion";
				ibv_end_poll(s[1].cqx);
				got = 1;
			} else {
				struct ibv_wc wc[2];
				int r = ibv_poll_cq(s[1].cq, 2, wc);
				if (r == 0)
					continue;
				uint64_t first;
				memcpy(&first, s[1].rbuf, sizeof first);
				if (r != 1 || wc[0].status != IBV_WC_SUCCESS || wc[0].wr_id != id ||
				    wc[0].opcode != IBV_WC_RECV || wc[0].byte_len != MSG ||
				    first != id)
					why = "side 1: receive completion or bytes wrong";
				got = 1;
			}
		}
		if (why)
			break;
		if (post_recv(&s[1], id + 1) || post_send(&s[1], id)) {
			why = "side 1: post failed";
			break;
		}
		if ((why = await(&s[0], id)))
			break;
		/* side 1's SEND completion (the answer's), then side 0's next receive */
		struct side one = s[1];
		double w1 = now();
		int sent = 0;
		while (!sent && !why) {
			if (now() - w1 > 20) {
				why = "side 1: no send completion within 20 s";
				break;
			}
			if (one.cqx) {
				struct ibv_poll_cq_attr attr = {0};
				int r = ibv_start_poll(one.cqx, &attr);
				if (r == ENOENT)
					continue;
				if (r || one.cqx->status != IBV_WC_SUCCESS || one.cqx->wr_id != id ||
				    ibv_wc_read_opcode(one.cqx) != IBV_WC_SEND)
					why = "side 1: send completion wrong";
				else if (ibv_next_poll(one.cqx) != ENOENT)
					why = "side 1: a second completion";
				if (!r)
					ibv_end_poll(one.cqx);
				sent = 1;
			} else {
				struct ibv_wc wc;
				int r = ibv_poll_cq(one.cq, 1, &wc);
				if (r == 0)
					continue;
				if (r != 1 || wc.status != IBV_WC_SUCCESS || wc.wr_id != id ||
				    wc.opcode != IBV_WC_SEND)
					why = "side 1: send completion wrong";
				sent = 1;
			}
		}
		if (!why && post_recv(&s[0], id + 1))
			why = "side 0: post_recv failed";
		if (!why)
			done++;
	}
	double t = now() - t0;
	snprintf(d, sizeof d, "%d of %d round trips: %s", done, iters, why ? why : "all");
	check("pingpong", !why && done == iters, d);
	check("empty_after", empty(&s[0]) && empty(&s[1]), "a completion twice or from nowhere");
	printf("rtt_us %.2f (%s CQs, %d round trips)\n", done ? t / done * 1e6 : 0.0,
	       ex ? "extended" : "ibv_create_cq", done);

	for (int i = 0; i < 2; i++) {
		ibv_destroy_qp(s[i].qp);
		ibv_destroy_cq(s[i].cq);
	}
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
