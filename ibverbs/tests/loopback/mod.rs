//! Connecting an RC QP of the library to another QP of the same NIC (loopback), as
//! the C API tests do it.

use std::ffi::c_int;

use ibverbs::abi;

extern "C" {
    fn ibv_modify_qp(qp: *mut abi::ibv_qp, attr: *mut abi::ibv_qp_attr, mask: c_int) -> c_int;
}

/// RESET -> INIT -> RTR -> RTS towards `dest` on this NIC (loopback), with the
/// remote `access` flags (`IBV_ACCESS_*`) and `rd_atomic` READ/atomic requests
/// outstanding each way.
///
/// # Safety
///
/// `qp` is a live QP of the library.
pub unsafe fn connect(qp: *mut abi::ibv_qp, dest: u32, gid: [u8; 16], access: u32, rd_atomic: u8) {
    let mut a = abi::ibv_qp_attr {
        qp_state: 1,
        port_num: 1,
        qp_access_flags: access,
        ..Default::default()
    };
    // SAFETY: `qp` is live (the caller's promise); `a` is a valid attribute block.
    assert_eq!(unsafe { ibv_modify_qp(qp, &mut a, 0x39) }, 0);
    let mut a = abi::ibv_qp_attr {
        qp_state: 2,
        path_mtu: 3,
        dest_qp_num: dest,
        rq_psn: 0,
        max_dest_rd_atomic: rd_atomic,
        min_rnr_timer: 12,
        ..Default::default()
    };
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = gid;
    a.ah_attr.grh.hop_limit = 1;
    a.ah_attr.port_num = 1;
    // SAFETY: as above.
    assert_eq!(unsafe { ibv_modify_qp(qp, &mut a, 0x129181) }, 0);
    // The ACK timeout: 23 (34 s). The timer runs on real time while the NIC's device
    // thread may wait for a CPU; at 14 (the library raises it to 18, 1.07 s) eight
    // expiries in a row, 8.6 s without that thread, would fail a WR although the
    // loopback link lost nothing; were one of the tests' few one-packet requests
    // lost, its expiry would still come within the time the tests wait for them.
    let mut a = abi::ibv_qp_attr {
        qp_state: 3,
        timeout: 23,
        retry_cnt: 7,
        rnr_retry: 7,
        sq_psn: 0,
        max_rd_atomic: rd_atomic,
        ..Default::default()
    };
    // SAFETY: as above.
    assert_eq!(unsafe { ibv_modify_qp(qp, &mut a, 0x12e01) }, 0);
}
