//! Memory windows through the Rust verbs API on the simulator: `Pd::alloc_mw`,
//! `QueuePair::bind_mw` (type 1), `SendBatch::bind_mw` / `local_inv` (type 2) and a
//! peer's SEND with Invalidate; the bytes written through a window, the completion
//! opcodes and statuses, and the errors refused before posting.

use std::time::Duration;

use ferroverbs::verbs::{
    AccessFlags, MwBind, MwBindError, MwType, PostError, RemoteAddr, SendFlags, SendWr, WcOpcode,
    WcStatus, WorkCompletion,
};
use ferroverbs_testbed::{Bed, Pair, PairConfig};

const T: Duration = Duration::from_secs(5);

fn pair(seed: u64) -> (Bed, Pair) {
    let bed = Bed::new(seed);
    let p = bed.pair(0, 1, &PairConfig::rc()).unwrap();
    (bed, p)
}

/// A signaled inline WRITE from A: its completion.
fn write(bed: &Bed, p: &mut Pair, addr: u64, rkey: u32, data: &[u8]) -> WorkCompletion {
    let parts = [data];
    let wr = SendWr::rdma_write_inline(9, &parts, RemoteAddr { addr, rkey }).signaled();
    p.a.qp.post_send(&[wr]).unwrap();
    bed.run_until(T, || p.a.cq.poll_one()).unwrap()
}

#[test]
fn a_type2_window_grants_its_range_until_invalidated() {
    let (bed, mut p) = pair(1);
    let pd = bed.nic(1).pd;
    // B's region for windows: local write only (a window gives the remote rights).
    let mr = pd.alloc_mr(8192, AccessFlags::LOCAL_WRITE).unwrap();
    let mw = pd.alloc_mw(MwType::Type2).unwrap();
    let base = mr.addr();
    // Unbound: no access (and the A side's QP goes to the error state: a new pair).
    let wc = write(&bed, &mut p, base, mw.rkey(), b"x");
    assert_eq!(wc.status, WcStatus::RemAccessErr);

    let (bed, mut p) = pair(2);
    let pd = bed.nic(1).pd;
    // B's region for windows: local write only (a window gives the remote rights).
    let mr = pd.alloc_mr(8192, AccessFlags::LOCAL_WRITE).unwrap();
    let mut mw = pd.alloc_mw(MwType::Type2).unwrap();
    let base = mr.addr();
    let key = mw.next_rkey();
    assert_ne!(key, mw.rkey());
    let bind = MwBind::of(&mr, 4096, 1024, AccessFlags::REMOTE_WRITE).unwrap();
    let mut b = p.b.qp.post().unwrap();
    b.bind_mw(21, &mw, key, &bind, SendFlags::SIGNALED).unwrap();
    b.ring();
    mw.set_rkey(key);
    let wc = bed.run_until(T, || p.b.cq.poll_one()).unwrap();
    assert_eq!(
        (wc.status, wc.opcode, wc.wr_id),
        (WcStatus::Success, WcOpcode::BindMw, 21)
    );
    let wc = write(&bed, &mut p, base + 4096 + 8, key, b"through a window");
    assert_eq!(wc.status, WcStatus::Success);
    let mut got = [0u8; 16];
    mr.read(4096 + 8, &mut got);
    assert_eq!(&got, b"through a window");
    // LOCAL_INV: the key stops working.
    let mut b = p.b.qp.post().unwrap();
    b.local_inv(22, key, SendFlags::SIGNALED).unwrap();
    b.ring();
    let wc = bed.run_until(T, || p.b.cq.poll_one()).unwrap();
    assert_eq!(
        (wc.status, wc.opcode, wc.wr_id),
        (WcStatus::Success, WcOpcode::LocalInv, 22)
    );
    let wc = write(&bed, &mut p, base + 4096, key, b"late");
    assert_eq!(wc.status, WcStatus::RemAccessErr);
    mr.read(4096, &mut got[..4]);
    assert_eq!(&got[..4], &[0; 4]);
    mw.dealloc().unwrap();
}

#[test]
fn a_type1_window_is_bound_with_bind_mw_and_unbound_with_length_zero() {
    let (bed, mut p) = pair(3);
    let pd = bed.nic(1).pd;
    // B's region for windows: local write only (a window gives the remote rights).
    let mr = pd.alloc_mr(8192, AccessFlags::LOCAL_WRITE).unwrap();
    let mut mw = pd.alloc_mw(MwType::Type1).unwrap();
    let first = mw.rkey();
    let bind = MwBind::of(&mr, 0, 8192, AccessFlags::REMOTE_WRITE).unwrap();
    let key =
        p.b.qp
            .bind_mw(5, &mut mw, &bind, SendFlags::SIGNALED)
            .unwrap();
    assert_eq!((key, mw.rkey()), (ferroverbs::verbs::inc_rkey(first), key));
    let wc = bed.run_until(T, || p.b.cq.poll_one()).unwrap();
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::Success, WcOpcode::BindMw)
    );
    let base = mr.addr();
    assert!(write(&bed, &mut p, base + 100, key, b"type 1").is_ok());
    let mut got = [0u8; 6];
    mr.read(100, &mut got);
    assert_eq!(&got, b"type 1");
    let unbind = MwBind { len: 0, ..bind };
    let k2 =
        p.b.qp
            .bind_mw(6, &mut mw, &unbind, SendFlags::SIGNALED)
            .unwrap();
    assert!(bed.run_until(T, || p.b.cq.poll_one()).unwrap().is_ok());
    assert_eq!(
        write(&bed, &mut p, base, k2, b"no").status,
        WcStatus::RemAccessErr
    );
    // A type 2 window is not bound by `bind_mw`.
    let mut t2 = pd.alloc_mw(MwType::Type2).unwrap();
    assert_eq!(
        p.b.qp.bind_mw(7, &mut t2, &bind, SendFlags::SIGNALED),
        Err(PostError::MwBind(MwBindError::WrongType(MwType::Type2)))
    );
}

#[test]
fn binds_the_device_refuses_complete_with_mw_bind_err() {
    let (bed, mut p) = pair(4);
    let pd = bed.nic(1).pd;
    // B's region for windows: local write only (a window gives the remote rights).
    let mr = pd.alloc_mr(8192, AccessFlags::LOCAL_WRITE).unwrap();
    let mw = pd.alloc_mw(MwType::Type2).unwrap();
    // A read-only region: remote write through a window needs the region's local write.
    let ro = pd.alloc_mr(4096, AccessFlags::empty()).unwrap();
    let bind = MwBind::of(&ro, 0, 64, AccessFlags::REMOTE_WRITE).unwrap();
    let mut b = p.b.qp.post().unwrap();
    b.bind_mw(1, &mw, mw.next_rkey(), &bind, SendFlags::SIGNALED)
        .unwrap();
    b.ring();
    let wc = bed.run_until(T, || p.b.cq.poll_one()).unwrap();
    assert_eq!(wc.status, WcStatus::MwBindErr);
    // Outside the region: refused before posting.
    assert_eq!(
        MwBind::of(&mr, 8000, 200, AccessFlags::REMOTE_WRITE),
        Err(MwBindError::OutOfRegion)
    );
    let big = MwBind {
        len: (1 << 31) + 1,
        ..bind
    };
    let mut b = p.b.qp.post().unwrap();
    assert_eq!(
        b.bind_mw(2, &mw, mw.next_rkey(), &big, SendFlags::SIGNALED),
        Err(PostError::MwBind(MwBindError::TooLong((1 << 31) + 1)))
    );
    b.abort();
}

#[test]
fn a_peers_send_with_invalidate_frees_a_type2_window() {
    let (bed, mut p) = pair(5);
    let pd = bed.nic(1).pd;
    // B's region for windows: local write only (a window gives the remote rights).
    let mr = pd.alloc_mr(8192, AccessFlags::LOCAL_WRITE).unwrap();
    let mut mw = pd.alloc_mw(MwType::Type2).unwrap();
    let key = mw.next_rkey();
    let bind = MwBind::of(&mr, 0, 4096, AccessFlags::REMOTE_WRITE).unwrap();
    let mut b = p.b.qp.post().unwrap();
    b.bind_mw(1, &mw, key, &bind, SendFlags::SIGNALED).unwrap();
    b.ring();
    mw.set_rkey(key);
    assert!(bed.run_until(T, || p.b.cq.poll_one()).unwrap().is_ok());
    let rsg = [p.b.mr.sge(0, 64).unwrap()];
    p.b.qp
        .post_recv(&[ferroverbs::verbs::RecvWr::new(3, &rsg)])
        .unwrap();
    p.a.mr.write(0, b"bye");
    let sg = [p.a.mr.sge(0, 3).unwrap()];
    p.a.qp
        .post_send(&[SendWr::send_with_inv(4, &sg, key).signaled()])
        .unwrap();
    let wc = bed.run_until(T, || p.b.cq.poll_one()).unwrap();
    assert_eq!(
        (wc.status, wc.opcode, wc.imm_data),
        (WcStatus::Success, WcOpcode::Recv, key)
    );
    assert!(bed.run_until(T, || p.a.cq.poll_one()).unwrap().is_ok());
    let base = mr.addr();
    assert_eq!(
        write(&bed, &mut p, base, key, b"x").status,
        WcStatus::RemAccessErr
    );
}

#[test]
fn an_aborted_batch_posts_nothing() {
    let (bed, mut p) = pair(6);
    let sg = [p.a.mr.sge(0, 8).unwrap()];
    let remote = p.b.mr.remote(0);
    let mut b = p.a.qp.post().unwrap();
    b.write(1, &sg[0], remote, SendFlags::SIGNALED).unwrap();
    b.post(&SendWr::rdma_write(2, &sg, remote).signaled())
        .unwrap();
    b.abort();
    bed.fabric().run_until_idle();
    assert!(p.a.cq.poll_one().is_none());
    // The ring continues where the aborted batch began.
    let mut b = p.a.qp.post().unwrap();
    b.send_inline(3, b"after", SendFlags::SIGNALED).unwrap();
    b.ring();
    let rsg = [p.b.mr.sge(0, 64).unwrap()];
    p.b.qp
        .post_recv(&[ferroverbs::verbs::RecvWr::new(4, &rsg)])
        .unwrap();
    let wc = bed.run_until(T, || p.a.cq.poll_one()).unwrap();
    assert_eq!((wc.status, wc.wr_id), (WcStatus::Success, 3));
}
