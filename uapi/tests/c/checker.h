/* What the C checkers of the uAPI layer share: the PASS/FAIL report and the
 * RESET -> INIT -> RTR -> RTS sequence of an RC QP connected to a QP of the same
 * simulated NIC (port 1, GID index 0, 1024-byte MTU, PSNs 0). Each checker prints
 * "PASS name" / "FAIL name: detail" per case and exits 1 when `failures` is not 0. */
#ifndef FERROVERBS_CHECKER_H
#define FERROVERBS_CHECKER_H

#include <stdint.h>
#include <stdio.h>
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

#endif
