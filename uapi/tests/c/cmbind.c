/* rdma_cm binds, routes and multicast refusals on /dev/infiniband/rdma_cm, with the
 * write ABI of rdma/rdma_user_cm.h (run under `ferroverbs run --device sim:IP`, IP
 * given as the first argument): the NIC's own address and a loopback address bind
 * (the loopback one to this device, with the device's GID, as Linux's
 * cma_bind_loopback: rsocket datagram sockets bind to 127.0.0.1), another address is
 * EADDRNOTAVAIL, IPv6 EAFNOSUPPORT, a port bound twice for listening EADDRINUSE.
 * An id bound to port 0 takes a free port of the ephemeral range, which QUERY_ROUTE
 * reports before and after LISTEN (Linux cma_alloc_any_port; ofi_rxm's listener is
 * such an id, and its address is what the peer's fi_av_insert takes).
 * A resolved route's path record is the one Linux's cma_resolve_iboe_route makes
 * (hop limit 64, so that rsocket's datagram service makes global address handles;
 * reversible, MTU, selectors, packet lifetime, RoCEv2 flow label), none before.
 * LEAVE_MCAST of a group never joined is ENOENT (ENOSPC without room for its
 * response), a join with bad flags, size or on an RC id EINVAL, as ucma and
 * rdma_join_multicast check them. Prints "PASS name" / "FAIL name ..." and exits 1
 * on failure. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_user_cm.h>

#include "checker.h"

struct msg {
	struct rdma_ucm_cmd_hdr hdr;
	union {
		struct rdma_ucm_create_id create;
		struct rdma_ucm_bind_ip bind;
		struct rdma_ucm_query query;
		struct rdma_ucm_listen listen;
		struct rdma_ucm_resolve_ip resolve;
		struct rdma_ucm_resolve_route route;
		struct rdma_ucm_destroy_id leave;
		struct rdma_ucm_join_ip_mcast join_ip;
		struct rdma_ucm_join_mcast join;
	} u;
};

static int command_out(int fd, __u32 cmd, struct msg *m, size_t len, __u16 out)
{
	m->hdr.cmd = cmd;
	m->hdr.in = len;
	m->hdr.out = out;
	return write(fd, m, sizeof(m->hdr) + len) == (ssize_t)(sizeof(m->hdr) + len) ? 0 : errno;
}

static int command(int fd, __u32 cmd, struct msg *m, size_t len)
{
	return command_out(fd, cmd, m, len, 0);
}

static __u32 create_ps(int fd, __u16 ps, __u8 qp_type)
{
	struct rdma_ucm_create_id_resp r = {0};
	struct msg m = {0};
	m.u.create.response = (uintptr_t)&r;
	m.u.create.ps = ps;
	m.u.create.qp_type = qp_type;
	if (command(fd, RDMA_USER_CM_CMD_CREATE_ID, &m, sizeof(m.u.create)))
		return ~0u;
	return r.id;
}

static __u32 create(int fd)
{
	return create_ps(fd, RDMA_PS_TCP, 2 /* IBV_QPT_RC */);
}

static int query_route(int fd, __u32 id, struct rdma_ucm_query_route_resp *r)
{
	struct msg m = {0};
	memset(r, 0, sizeof *r);
	m.u.query.id = id;
	m.u.query.response = (uintptr_t)r;
	return command(fd, RDMA_USER_CM_CMD_QUERY_ROUTE, &m, sizeof(m.u.query));
}

/* The checks of a resolved route and of the multicast commands; `src` is the NIC's
 * address. */
static void route_and_multicast(int fd, struct in_addr src)
{
	char detail[256];
	struct rdma_ucm_query_route_resp r;
	__u32 id = create(fd);
	struct msg m = {0};
	struct sockaddr_in *s = (struct sockaddr_in *)&m.u.resolve.src_addr;
	struct sockaddr_in *d = (struct sockaddr_in *)&m.u.resolve.dst_addr;
	s->sin_family = AF_INET;
	s->sin_addr = src;
	s->sin_port = htons(7411);
	d->sin_family = AF_INET;
	d->sin_addr.s_addr = htonl(ntohl(src.s_addr) + 1);
	d->sin_port = htons(7412);
	m.u.resolve.id = id;
	m.u.resolve.timeout_ms = 2000;
	unsigned char dgid[16] = {0};
	dgid[10] = dgid[11] = 0xff;
	memcpy(&dgid[12], &d->sin_addr, 4);
	int e = command(fd, RDMA_USER_CM_CMD_RESOLVE_IP, &m, sizeof(m.u.resolve));
	int q = query_route(fd, id, &r);
	snprintf(detail, sizeof detail, "resolve %d, query %d, num_paths %u", e, q, r.num_paths);
	check("no path before RESOLVE_ROUTE", e == 0 && q == 0 && r.num_paths == 0, detail);

	memset(&m, 0, sizeof m);
	m.u.route.id = id;
	m.u.route.timeout_ms = 2000;
	e = command(fd, RDMA_USER_CM_CMD_RESOLVE_ROUTE, &m, sizeof(m.u.route));
	q = query_route(fd, id, &r);
	struct ib_user_path_rec *p = &r.ib_route[0];
	__u32 fl = (7411u * 31 + 7412u) & 0xfffff;
	snprintf(detail, sizeof detail,
		 "resolve %d, query %d, num_paths %u, hop_limit %u, reversible %u, mtu %u, "
		 "selectors %u/%u/%u, lifetime %u, pkey %#x, flow label %#x, dlid %u",
		 e, q, r.num_paths, p->hop_limit, p->reversible, p->mtu, p->mtu_selector,
		 p->rate_selector, p->packet_life_time_selector, p->packet_life_time,
		 ntohs(p->pkey), ntohl(p->flow_label), ntohs(p->dlid));
	check("a resolved route's path record is Linux's RoCE one",
	      e == 0 && q == 0 && r.num_paths == 1 && p->hop_limit == 64 &&
		      p->reversible == 1 && p->mtu >= 1 && p->mtu <= 5 &&
		      p->mtu_selector == 2 && p->rate_selector == 2 &&
		      p->packet_life_time_selector == 2 && p->packet_life_time == 16 &&
		      ntohs(p->pkey) == 0xffff && ntohl(p->flow_label) == fl &&
		      p->dlid == 0 && p->traffic_class == 0 && p->sl == 0 &&
		      memcmp(p->dgid, dgid, 16) == 0,
	      detail);

	/* LEAVE_MCAST: its command is rdma_ucm_destroy_id (the group's id). */
	__u32 resp = 0;
	memset(&m, 0, sizeof m);
	m.u.leave.id = 12345;
	m.u.leave.response = (uintptr_t)&resp;
	e = command_out(fd, RDMA_USER_CM_CMD_LEAVE_MCAST, &m, sizeof(m.u.leave), sizeof resp);
	snprintf(detail, sizeof detail, "errno %d", e);
	check("LEAVE_MCAST of a group not joined: ENOENT", e == ENOENT, detail);
	e = command_out(fd, RDMA_USER_CM_CMD_LEAVE_MCAST, &m, sizeof(m.u.leave), 0);
	snprintf(detail, sizeof detail, "errno %d", e);
	check("LEAVE_MCAST without room for its response: ENOSPC", e == ENOSPC, detail);

	/* Joins: an RC id, bad flags, a wrong address size are EINVAL. */
	__u32 ud = create_ps(fd, RDMA_PS_UDP, 4 /* IBV_QPT_UD */);
	memset(&m, 0, sizeof m);
	s = (struct sockaddr_in *)&m.u.bind.addr;
	s->sin_family = AF_INET;
	s->sin_addr = src;
	m.u.bind.id = ud;
	int b = command(fd, RDMA_USER_CM_CMD_BIND_IP, &m, sizeof(m.u.bind));
	struct rdma_ucm_create_id_resp jr = {0};
	struct msg j = {0};
	struct sockaddr_in *g = (struct sockaddr_in *)&j.u.join.addr;
	g->sin_family = AF_INET;
	inet_pton(AF_INET, "224.0.0.9", &g->sin_addr);
	j.u.join.response = (uintptr_t)&jr;
	j.u.join.id = id;
	j.u.join.addr_size = sizeof(struct sockaddr_in);
	j.u.join.join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER;
	int rc = command_out(fd, RDMA_USER_CM_CMD_JOIN_MCAST, &j, sizeof(j.u.join), sizeof jr);
	j.u.join.id = ud;
	j.u.join.join_flags = RDMA_MC_JOIN_FLAG_RESERVED;
	int flags = command_out(fd, RDMA_USER_CM_CMD_JOIN_MCAST, &j, sizeof(j.u.join), sizeof jr);
	j.u.join.join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER;
	j.u.join.addr_size = sizeof(struct sockaddr_in6);
	int size = command_out(fd, RDMA_USER_CM_CMD_JOIN_MCAST, &j, sizeof(j.u.join), sizeof jr);
	j.u.join.addr_size = sizeof(struct sockaddr_in);
	j.u.join.id = 54321;
	int none = command_out(fd, RDMA_USER_CM_CMD_JOIN_MCAST, &j, sizeof(j.u.join), sizeof jr);
	snprintf(detail, sizeof detail, "bind %d; RC id %d, flags %d, size %d, no id %d", b, rc,
		 flags, size, none);
	check("bad joins: EINVAL (RC id, flags, address size), ENOENT (no id)",
	      b == 0 && rc == EINVAL && flags == EINVAL && size == EINVAL && none == ENOENT,
	      detail);
}

static int bind_ip(int fd, __u32 id, int family, const char *ip, int port)
{
	struct msg m = {0};
	m.u.bind.id = id;
	if (family == AF_INET) {
		struct sockaddr_in *a = (struct sockaddr_in *)&m.u.bind.addr;
		a->sin_family = AF_INET;
		a->sin_port = htons(port);
		inet_pton(AF_INET, ip, &a->sin_addr);
	} else {
		m.u.bind.addr.sin6_family = AF_INET6;
		inet_pton(AF_INET6, ip, &m.u.bind.addr.sin6_addr);
	}
	return command(fd, RDMA_USER_CM_CMD_BIND_IP, &m, sizeof(m.u.bind));
}

int main(int argc, char **argv)
{
	char detail[128];
	struct in_addr own;
	if (argc < 2 || inet_pton(AF_INET, argv[1], &own) != 1) {
		fprintf(stderr, "usage: cmbind NIC-IPv4\n");
		return 2;
	}
	int fd = open("/dev/infiniband/rdma_cm", O_RDWR | O_CLOEXEC);
	check("open rdma_cm", fd >= 0, strerror(errno));
	if (fd < 0)
		return 1;

	__u32 a = create(fd), b = create(fd), c = create(fd), d = create(fd);
	check("create ids", a != ~0u && b != ~0u && c != ~0u && d != ~0u, "CREATE_ID");

	int e = bind_ip(fd, a, AF_INET, argv[1], 7400);
	snprintf(detail, sizeof detail, "errno %d", e);
	check("bind the NIC's address", e == 0, detail);

	e = bind_ip(fd, b, AF_INET, "127.0.0.1", 0);
	snprintf(detail, sizeof detail, "errno %d", e);
	check("bind 127.0.0.1 (loopback: this device)", e == 0, detail);

	/* QUERY_ROUTE of the loopback-bound id: the device's GID, the IPv4-mapped
	 * address of the NIC. */
	struct rdma_ucm_query_route_resp r;
	memset(&r, 0, sizeof r);
	struct msg m = {0};
	m.u.query.id = b;
	m.u.query.response = (uintptr_t)&r;
	e = command(fd, RDMA_USER_CM_CMD_QUERY_ROUTE, &m, sizeof(m.u.query));
	unsigned char want[16] = {0};
	want[10] = want[11] = 0xff;
	memcpy(&want[12], &own, 4);
	check("the loopback-bound id takes the device's GID",
	      e == 0 && memcmp(r.ib_route[0].sgid, want, 16) == 0, "sgid differs");

	e = bind_ip(fd, c, AF_INET, "10.9.9.9", 0);
	snprintf(detail, sizeof detail, "errno %d", e);
	check("bind another address: EADDRNOTAVAIL", e == EADDRNOTAVAIL, detail);

	e = bind_ip(fd, d, AF_INET6, "::1", 0);
	snprintf(detail, sizeof detail, "errno %d", e);
	check("bind IPv6: EAFNOSUPPORT", e == EAFNOSUPPORT, detail);

	/* Two listeners on one port: the second EADDRINUSE. */
	e = bind_ip(fd, c, AF_INET, argv[1], 7400);
	struct msg l = {0};
	l.u.listen.id = a;
	l.u.listen.backlog = 4;
	int e1 = command(fd, RDMA_USER_CM_CMD_LISTEN, &l, sizeof(l.u.listen));
	l.u.listen.id = c;
	int e2 = command(fd, RDMA_USER_CM_CMD_LISTEN, &l, sizeof(l.u.listen));
	snprintf(detail, sizeof detail, "bind %d, listen %d then %d", e, e1, e2);
	check("a port listened on twice: EADDRINUSE", e == 0 && e1 == 0 && e2 == EADDRINUSE,
	      detail);

	/* Port 0: a free ephemeral port, another for a second id, kept by LISTEN. */
	__u32 f = create(fd), g = create(fd);
	struct rdma_ucm_query_route_resp rf, rg, rl;
	int bf = bind_ip(fd, f, AF_INET, argv[1], 0);
	int bg = bind_ip(fd, g, AF_INET, argv[1], 0);
	int qf = query_route(fd, f, &rf), qg = query_route(fd, g, &rg);
	unsigned pf = ntohs(((struct sockaddr_in *)&rf.src_addr)->sin_port);
	unsigned pg = ntohs(((struct sockaddr_in *)&rg.src_addr)->sin_port);
	snprintf(detail, sizeof detail, "bind %d %d, query %d %d, ports %u %u", bf, bg, qf, qg,
		 pf, pg);
	check("ids bound to port 0 take distinct ephemeral ports",
	      bf == 0 && bg == 0 && qf == 0 && qg == 0 && pf >= 32768 && pf <= 60999 &&
		      pg >= 32768 && pg <= 60999 && pf != pg,
	      detail);
	struct msg lf = {0};
	lf.u.listen.id = f;
	lf.u.listen.backlog = 4;
	int el = command(fd, RDMA_USER_CM_CMD_LISTEN, &lf, sizeof(lf.u.listen));
	int ql = query_route(fd, f, &rl);
	struct sockaddr_in *sl = (struct sockaddr_in *)&rl.src_addr;
	snprintf(detail, sizeof detail, "listen %d, query %d, port %u", el, ql,
		 ntohs(sl->sin_port));
	check("a listener bound to port 0 reports its port and address",
	      el == 0 && ql == 0 && sl->sin_family == AF_INET && ntohs(sl->sin_port) == pf &&
		      sl->sin_addr.s_addr == own.s_addr,
	      detail);

	route_and_multicast(fd, own);

	close(fd);
	printf("\n%d failures\n", failures);
	return failures ? 1 : 0;
}
