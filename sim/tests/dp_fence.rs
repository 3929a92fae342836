//! The PRM's fence modes (`fm_ce_se` bits 7..5) on the RC requester: what goes on the
//! wire at the doorbell, before any response, and after. Mode 2 (fence) and 4 (small
//! and fence, rdma-core's `IBV_SEND_FENCE`) hold a WQE until every earlier READ and
//! atomic has completed; mode 3 (strong ordering) until every earlier WQE has; mode 1
//! (initiator small fence) only waits for local operations, of which the simulator
//! executes none, so it holds nothing.

mod common;
mod dp;

use dp::*;
use ferroverbs_hw::datapath::cqe::MLX5_CQE_REQ;
use ferroverbs_hw::datapath::wqe::MLX5_OPCODE_RDMA_WRITE;
use ferroverbs_sim::wire::{frame, Opcode};

/// The request opcodes on the wire since the last call (ACKs and READ responses left
/// out when `requests_only`).
fn wire(p: &Pair, requests_only: bool) -> Vec<Opcode> {
    p.fabric
        .take_captured()
        .iter()
        .filter_map(|f| frame::parse(f).ok())
        .map(|(r, _)| r.roce.bth.opcode)
        .filter(|op| {
            !requests_only || !matches!(op, Opcode::RcAcknowledge | Opcode::RcRdmaReadResponseOnly)
        })
        .collect()
}

/// Posts `first` (a READ when `read`, else a WRITE) and then a WRITE with fence mode
/// `mode` under one doorbell; returns the requests on the wire at the doorbell and
/// the whole exchange once the fabric is idle.
fn run(read: bool, mode: u8) -> (Vec<Opcode>, Vec<Opcode>) {
    let mut p = Pair::deterministic(Conn::default());
    p.fabric.capture(Some(1 << 20));
    let local = p.a.reg_mr(4096, ALL);
    let remote = p.b.reg_mr(4096, ALL);
    let qpn = p.qa.qpn;
    let first = rdma_wqe(
        qpn,
        read,
        remote.va,
        remote.key,
        &[sge(&local, 0, 64)],
        None,
        SIG,
    );
    let second = mixed_wqe(
        qpn,
        MLX5_OPCODE_RDMA_WRITE,
        &raddr_seg(remote.va + 1024, remote.key),
        &[Seg::Inline(vec![7; 16])],
        None,
        SIG | (mode << 5),
    );
    let (_, db) = p.a.write_wqe(&mut p.qa, &first);
    p.a.write_wqe(&mut p.qa, &second);
    p.a.ring(&p.qa, db);
    let at_doorbell = wire(&p, true);
    p.settle();
    let mut all = at_doorbell.clone();
    all.extend(wire(&p, false));
    for _ in 0..2 {
        assert_eq!(
            wait_cqe(&p.fabric, &p.a, &mut p.acq.0).opcode(),
            MLX5_CQE_REQ
        );
    }
    assert_eq!(p.b.mr_read(&remote, 1024, 16), [7; 16]);
    (at_doorbell, all)
}

#[test]
fn fence_modes_hold_a_wqe_for_what_the_prm_says() {
    use Opcode::*;
    // No fence, or only the initiator small fence: both requests go at once.
    for mode in [0, 1] {
        assert_eq!(
            run(true, mode).0,
            [RcRdmaReadRequest, RcRdmaWriteOnly],
            "mode {mode}"
        );
        assert_eq!(
            run(false, mode).0,
            [RcRdmaWriteOnly, RcRdmaWriteOnly],
            "mode {mode}"
        );
    }
    // Fence and small-and-fence: the WRITE waits for the READ's response, not for an
    // earlier WRITE.
    for mode in [2, 4] {
        let (now, all) = run(true, mode);
        assert_eq!(now, [RcRdmaReadRequest], "mode {mode}");
        assert_eq!(
            all,
            [
                RcRdmaReadRequest,
                RcRdmaReadResponseOnly,
                RcRdmaWriteOnly,
                RcAcknowledge
            ],
            "mode {mode}"
        );
        assert_eq!(
            run(false, mode).0,
            [RcRdmaWriteOnly, RcRdmaWriteOnly],
            "mode {mode}"
        );
    }
    // Strong ordering: the WRITE waits for every earlier WQE, a WRITE's ACK included.
    let (now, all) = run(false, 3);
    assert_eq!(now, [RcRdmaWriteOnly]);
    assert_eq!(
        all,
        [
            RcRdmaWriteOnly,
            RcAcknowledge,
            RcRdmaWriteOnly,
            RcAcknowledge
        ]
    );
    assert_eq!(run(true, 3).0, [RcRdmaReadRequest]);
}
