//! RDMA WRITE and RDMA WRITE with immediate between two simulated NICs: A writes into
//! B's registered buffer with B's rkey; the immediate variant also consumes a receive
//! request at B and tells it where the data is.
//!
//! `cargo run --example rc_write`

use std::time::Duration;

use ferroverbs::verbs::{RecvWr, SendWr, WcOpcode};
use ferroverbs_testbed::Bed;

fn main() {
    let bed = Bed::new(1);
    let mut p = bed.rc_pair().unwrap();
    let second = Duration::from_secs(1);

    p.a.mr.write(0, b"written by RDMA WRITE");
    // B hands its address and rkey to A out of band; A writes at offset 100.
    let remote = p.b.remote(100);
    let sg = [p.a.mr.sge(0, 21).unwrap()];
    p.a.qp
        .post_send(&[SendWr::rdma_write(1, &sg, remote).signaled()])
        .unwrap();
    let c = bed.run_until(second, || p.a.cq.poll_one()).unwrap();
    assert!(c.is_ok() && c.opcode == WcOpcode::RdmaWrite, "{c:?}");
    let mut got = [0u8; 21];
    p.b.mr.read(100, &mut got);
    assert_eq!(&got, b"written by RDMA WRITE");
    println!("B's buffer at 100: {:?}", String::from_utf8_lossy(&got));

    // With immediate: B needs a receive request; the immediate carries the offset.
    p.b.qp.post_recv(&[RecvWr::new(7, &[])]).unwrap();
    p.a.mr.write(0, b"second write");
    let sg = [p.a.mr.sge(0, 12).unwrap()];
    let remote = p.b.remote(2000);
    p.a.qp
        .post_send(&[SendWr::rdma_write_with_imm(2, &sg, remote, 2000).signaled()])
        .unwrap();
    let r = bed.run_until(second, || p.b.cq.poll_one()).unwrap();
    assert_eq!(r.opcode, WcOpcode::RecvRdmaWithImm);
    let mut got = vec![0u8; r.byte_len as usize];
    p.b.mr.read(r.imm_data as usize, &mut got);
    assert_eq!(got, b"second write");
    println!(
        "B was told: {} bytes at {}: {:?}",
        r.byte_len,
        r.imm_data,
        String::from_utf8_lossy(&got)
    );
    assert!(bed.run_until(second, || p.a.cq.poll_one()).unwrap().is_ok());
}
