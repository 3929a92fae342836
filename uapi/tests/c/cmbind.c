/* rdma_cm binds on /dev/infiniband/rdma_cm, with the write ABI of
 * rdma/rdma_user_cm.h (run under `ferroverbs run --device sim:IP`, IP given as the
 * first argument): the NIC's own address and a loopback address bind (the loopback
 * one to this device, with the device's GID, as Linux's cma_bind_loopback: rsocket
 * datagram sockets bind to 127.0.0.1), another address is EADDRNOTAVAIL, IPv6
 * EAFNOSUPPORT, a port bound twice for listening EADDRINUSE. Prints "PASS name" /
 * "FAIL name ..." and exits 1 on failure. */
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

static int failures;

static void check(const char *name, int ok, const char *detail)
{
	if (ok) {
		printf("PASS %s\n", name);
	} else {
		printf("FAIL %s: %s\n", name, detail);
		failures++;
	}
}

struct msg {
	struct rdma_ucm_cmd_hdr hdr;
	union {
		struct rdma_ucm_create_id create;
		struct rdma_ucm_bind_ip bind;
		struct rdma_ucm_query query;
		struct rdma_ucm_listen listen;
	} u;
};

static int command(int fd, __u32 cmd, struct msg *m, size_t len)
{
	m->hdr.cmd = cmd;
	m->hdr.in = len;
	m->hdr.out = 0;
	return write(fd, m, sizeof(m->hdr) + len) == (ssize_t)(sizeof(m->hdr) + len) ? 0 : errno;
}

static __u32 create(int fd)
{
	struct rdma_ucm_create_id_resp r = {0};
	struct msg m = {0};
	m.u.create.response = (uintptr_t)&r;
	m.u.create.ps = RDMA_PS_TCP;
	m.u.create.qp_type = 2; /* IBV_QPT_RC */
	if (command(fd, RDMA_USER_CM_CMD_CREATE_ID, &m, sizeof(m.u.create)))
		return ~0u;
	return r.id;
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

	close(fd);
	printf("\n%d failures\n", failures);
	return failures ? 1 : 0;
}
