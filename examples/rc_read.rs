//! RDMA READ between two simulated NICs: A reads B's registered buffer with B's rkey,
//! scattering the data into two places of its own memory.
//!
//! `cargo run --example rc_read`

use std::time::Duration;

use ferroverbs::verbs::{QpCap, SendWr, WcOpcode};
use ferroverbs_testbed::{Bed, PairConfig};

fn main() {
    let bed = Bed::new(1);
    let cap = QpCap {
        max_send_sge: 2,
        ..QpCap::default()
    };
    let mut p = bed.pair(0, 1, &PairConfig::rc().cap(cap)).unwrap();

    let text = b"RDMA READ: the responder's CPU never sees this request.";
    p.b.mr.write(0, text);
    let sg = [
        p.a.mr.sge(0, 10).unwrap(),
        p.a.mr.sge(1000, text.len() as u32 - 10).unwrap(),
    ];
    let remote = p.b.remote(0);
    p.a.qp
        .post_send(&[SendWr::rdma_read(1, &sg, remote).signaled()])
        .unwrap();
    let c = bed
        .run_until(Duration::from_secs(1), || p.a.cq.poll_one())
        .unwrap();
    assert!(c.is_ok() && c.opcode == WcOpcode::RdmaRead, "{c:?}");
    let mut a = [0u8; 10];
    let mut b = vec![0u8; text.len() - 10];
    p.a.mr.read(0, &mut a);
    p.a.mr.read(1000, &mut b);
    assert_eq!([&a[..], &b[..]].concat(), text);
    println!(
        "read {} bytes: {:?} + {:?}",
        c.byte_len,
        String::from_utf8_lossy(&a),
        String::from_utf8_lossy(&b)
    );
}
