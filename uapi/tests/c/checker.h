/* What the C checkers of the uAPI layer share: the PASS/FAIL report and the
 * RESET -> INIT -> RTR -> RTS sequence of an RC QP connected to a QP of the same
 * simulated NIC (port 1, GID index 0, 1024-byte MTU, PSNs 0), opening the device,
 * an RC QP and an RDMA WRITE. Each checker prints
 * "PASS name" / "FAIL name: detail" per case and exits 1 when `failures` is not 0. */
#ifndef FERROVERBS_CHECKER_H
#define FERROVERBS_CHECKER_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

static int failures;

static inline void check(const char *name, int ok, const char *detail)
{
	if (ok) {
		printf("PASS %s\n", name);
	} else {
		printf("FAIL %s: %s\n", name, detail);
		failures++;
	}
}

/* RESET -> INIT on port 1 with the remote access flags `access`. */
static inline int qp_to_init(struct ibv_qp *qp, unsigned int access)
{
	struct ibv_qp_attr a = {0};
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = access;
	return ibv_modify_qp(qp, &a,
			     IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

/* RESET -> RTS towards QP `dest` at `gid`, with the local ACK timeout exponent
 * `timeout`; returns 0, or the step that failed (1 INIT, 2 RTR, 3 RTS). */
static inline int qp_to_rts(struct ibv_qp *qp, unsigned int access, uint32_t dest,
			    union ibv_gid *gid, uint8_t timeout)
{
	struct ibv_qp_attr a = {0};
	if (qp_to_init(qp, access))
		return 1;
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return 2;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = timeout;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				  IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		return 3;
	return 0;
}

/* The first device's context (the list in `*list`, for ibv_free_device_list); exits
 * with 2 when there is none or it cannot be opened. */
static inline struct ibv_context *open_first_device(struct ibv_device ***list)
{
	int n;
	*list = ibv_get_device_list(&n);
	if (!*list || n < 1) {
		perror("ibv_get_device_list");
		exit(2);
	}
	struct ibv_context *ctx = ibv_open_device((*list)[0]);
	if (!ctx) {
		perror("ibv_open_device");
		exit(2);
	}
	return ctx;
}

/* An RC QP of `pd` on `cq` (send and receive), 8 WRs and one SGE each way. */
static inline struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia = {0};
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 8;
	ia.cap.max_recv_wr = 8;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	ia.send_cq = cq;
	ia.recv_cq = cq;
	return ibv_create_qp(pd, &ia);
}

/* A signaled RDMA `op` (WRITE or READ) of `len` bytes between `local` (in `mr`) and
 * `remote` under `rkey`. */
static inline int post_rdma(struct ibv_qp *qp, enum ibv_wr_opcode op, struct ibv_mr *mr,
			    void *local, uint64_t remote, uint32_t rkey, uint32_t len,
			    uint64_t wr_id)
{
	struct ibv_sge sge = {.addr = (uintptr_t)local, .length = len, .lkey = mr->lkey};
	struct ibv_send_wr wr = {0}, *bad;
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = op;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = remote;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}

/* A signaled RDMA WRITE of `len` bytes at `src` (in `mr`) to `dst` under `rkey`. */
static inline int post_write(struct ibv_qp *qp, struct ibv_mr *mr, void *src, uint64_t dst,
			     uint32_t rkey, uint32_t len, uint64_t wr_id)
{
	return post_rdma(qp, IBV_WR_RDMA_WRITE, mr, src, dst, rkey, len, wr_id);
}

#endif
