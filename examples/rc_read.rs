//! RDMA READ between two simulated NICs: A reads B's registered buffer with B's rkey,
//! scattering the data into two places of its own memory.
//!
//! `cargo run --example rc_read`

#[path = "common/mod.rs"]
mod common;

use ferroverbs::verbs::{AccessFlags, QpCap, QpInitAttr, SendWr, WcOpcode};

fn main() {
    let net = common::net();
    let (ca, ga) = common::open(&net.a, 1);
    let (cb, gb) = common::open(&net.b, 2);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let (mut cqa, cqb) = (ca.create_cq(16).unwrap(), cb.create_cq(16).unwrap());
    let cap = QpCap {
        max_send_sge: 2,
        ..QpCap::default()
    };
    let mut qa = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap)).unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap)).unwrap();
    common::connect(&mut qa, &ga, &mut qb, &gb, AccessFlags::REMOTE_READ);

    let text = b"RDMA READ: the responder's CPU never sees this request.";
    let remote = pb.alloc_mr(4096, AccessFlags::REMOTE_READ).unwrap();
    remote.write(0, text);
    let local = pa.alloc_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let sg = [
        local.sge(0, 10).unwrap(),
        local.sge(1000, text.len() as u32 - 10).unwrap(),
    ];
    qa.post_send(&[SendWr::rdma_read(1, &sg, remote.remote(0)).signaled()])
        .unwrap();
    let c = common::wait(&net, &mut cqa);
    assert!(c.is_ok() && c.opcode == WcOpcode::RdmaRead, "{c:?}");
    let mut a = [0u8; 10];
    let mut b = vec![0u8; text.len() - 10];
    local.read(0, &mut a);
    local.read(1000, &mut b);
    println!(
        "read {} bytes: {:?} + {:?}",
        c.byte_len,
        String::from_utf8_lossy(&a),
        String::from_utf8_lossy(&b)
    );
}
