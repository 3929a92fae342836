//! RDMA WRITE and RDMA WRITE with immediate between two simulated NICs: A writes into
//! B's registered buffer with B's rkey; the immediate variant also consumes a receive
//! request at B and tells it where the data is.
//!
//! `cargo run --example rc_write`

#[path = "common/mod.rs"]
mod common;

use ferroverbs::verbs::{AccessFlags, QpCap, QpInitAttr, RecvWr, SendWr, WcOpcode};

fn main() {
    let net = common::net();
    let (ca, ga) = common::open(&net.a, 1);
    let (cb, gb) = common::open(&net.b, 2);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let (mut cqa, mut cqb) = (ca.create_cq(16).unwrap(), cb.create_cq(16).unwrap());
    let mut qa = pa
        .create_qp(&QpInitAttr::new(&cqa, &cqa, QpCap::default()))
        .unwrap();
    let mut qb = pb
        .create_qp(&QpInitAttr::new(&cqb, &cqb, QpCap::default()))
        .unwrap();
    common::connect(&mut qa, &ga, &mut qb, &gb, AccessFlags::REMOTE_WRITE);

    let src = pa.alloc_mr(4096, AccessFlags::empty()).unwrap();
    let dst = pb
        .alloc_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
        .unwrap();
    src.write(0, b"written by RDMA WRITE");
    // B hands its address and rkey to A out of band; A writes at offset 100.
    let remote = dst.remote(100);
    let sg = [src.sge(0, 21).unwrap()];
    qa.post_send(&[SendWr::rdma_write(1, &sg, remote).signaled()])
        .unwrap();
    let c = common::wait(&net, &mut cqa);
    assert!(c.is_ok() && c.opcode == WcOpcode::RdmaWrite, "{c:?}");
    let mut got = [0u8; 21];
    dst.read(100, &mut got);
    println!("B's buffer at 100: {:?}", String::from_utf8_lossy(&got));

    // With immediate: B needs a receive request; the immediate carries the offset.
    qb.post_recv(&[RecvWr::new(7, &[])]).unwrap();
    src.write(0, b"second write");
    let sg = [src.sge(0, 12).unwrap()];
    qa.post_send(&[SendWr::rdma_write_with_imm(2, &sg, dst.remote(2000), 2000).signaled()])
        .unwrap();
    let r = common::wait(&net, &mut cqb);
    assert_eq!(r.opcode, WcOpcode::RecvRdmaWithImm);
    let mut got = vec![0u8; r.byte_len as usize];
    dst.read(r.imm_data as usize, &mut got);
    println!(
        "B was told: {} bytes at {}: {:?}",
        r.byte_len,
        r.imm_data,
        String::from_utf8_lossy(&got)
    );
    assert!(common::wait(&net, &mut cqa).is_ok());
}
