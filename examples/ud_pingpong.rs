//! UD SEND ping-pong between two simulated ConnectX NICs on an in-process fabric,
//! through the verbs API (the `ibv_ud_pingpong` of ferroverbs): address handles,
//! Q_Keys, the 40-byte GRH at the start of every receive buffer. Every message is
//! checked (payload after the GRH, the source address in the GRH's IPv4 header, the
//! source QPN and GRH flag of the completion); prints the round-trip latency.
//!
//! ```text
//! cargo run --release --example ud_pingpong -- [--iters N] [--size BYTES] [--threaded]
//! ```
//!
//! The size is at most the port MTU (1024 bytes on the simulator's default 1500-byte
//! vport MTU): a UD message is one packet. By default both NICs run in deterministic
//! mode on this thread (the example steps the fabric); with `--threaded` each NIC has
//! its own device thread and the example only posts and polls.

#[path = "common/mod.rs"]
mod common;
use common::open;

use std::time::{Duration, Instant};

use ferroverbs::verbs::{
    AccessFlags, AddressHandle, AddressVector, CompletionQueue, MemoryRegion, QpCap, QpInitAttr,
    QueuePair, RecvWr, SendWr, UdInitAttr, WcFlags, WcOpcode, WorkCompletion,
};
use ferroverbs_sim::SimBus;

/// Bytes of the GRH area at the start of a UD receive buffer.
const GRH: usize = 40;
/// The Q_Key both QPs use.
const QKEY: u32 = 0x1234_5678;

/// A UD SEND ping-pong between two simulated NICs.
#[derive(clap::Parser)]
struct Args {
    /// Round trips.
    #[arg(long, default_value_t = 10_000)]
    iters: u64,
    /// Message size in bytes.
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Threaded NICs.
    #[arg(long)]
    threaded: bool,
}

fn args() -> Args {
    <Args as clap::Parser>::parse()
}

/// One side: its UD QP, CQ, buffer (receive area of GRH + size, then the send area),
/// the address handle of the peer and the peer's QPN and address.
struct Side<'a> {
    qp: QueuePair<'a, SimBus>,
    cq: CompletionQueue<'a, SimBus>,
    buf: MemoryRegion<'a, SimBus>,
    ah: AddressHandle<'a, SimBus>,
    peer_qpn: u32,
    peer_ip: [u8; 4],
    size: usize,
}

impl Side<'_> {
    fn post_recv(&mut self) {
        let sg = [self.buf.sge(0, (GRH + self.size) as u32).expect("sge")];
        self.qp
            .post_recv(&[RecvWr::new(1, &sg)])
            .expect("post_recv");
    }

    fn send(&mut self, payload: &[u8]) {
        let off = GRH + self.size;
        self.buf.write(off, payload);
        let sg = [self.buf.sge(off, self.size as u32).expect("sge")];
        let sg: &[_] = if self.size == 0 { &[] } else { &sg };
        self.qp
            .post_send(&[SendWr::send(2, sg)
                .ud(&self.ah, self.peer_qpn, QKEY)
                .signaled()])
            .expect("post_send");
    }

    /// Polls until a receive completed (send completions are consumed on the way),
    /// then checks it and returns the payload.
    fn wait_recv(&mut self, mut step: impl FnMut()) -> Vec<u8> {
        let mut wc = [WorkCompletion::default(); 4];
        loop {
            let n = self.cq.poll(&mut wc);
            let mut got = None;
            for c in &wc[..n] {
                assert!(c.is_ok(), "{c:?}");
                if c.opcode == WcOpcode::Recv {
                    got = Some(*c);
                }
            }
            if let Some(c) = got {
                assert_eq!(c.byte_len as usize, GRH + self.size, "{c:?}");
                assert_eq!(c.src_qp, self.peer_qpn, "{c:?}");
                assert!(c.wc_flags.contains(WcFlags::GRH), "{c:?}");
                let mut grh = [0u8; GRH];
                self.buf.read(0, &mut grh);
                assert_eq!(&grh[20 + 12..20 + 16], &self.peer_ip, "GRH source address");
                let mut data = vec![0u8; self.size];
                self.buf.read(GRH, &mut data);
                return data;
            }
            step();
        }
    }
}

fn main() {
    let a = args();
    let common::Net {
        fabric,
        a: sa,
        b: sb,
    } = common::net_with(a.threaded);
    let (ca, ga) = open(&sa, 1);
    let (cb, gb) = open(&sb, 2);
    let (pa, pb) = (ca.alloc_pd().expect("pd"), cb.alloc_pd().expect("pd"));
    let (cqa, cqb) = (ca.create_cq(64).expect("cq"), cb.create_cq(64).expect("cq"));
    let mut qa = pa
        .create_qp(&QpInitAttr::ud(&cqa, &cqa, QpCap::default()))
        .expect("qp");
    let mut qb = pb
        .create_qp(&QpInitAttr::ud(&cqb, &cqb, QpCap::default()))
        .expect("qp");
    for q in [&mut qa, &mut qb] {
        q.to_init_ud(&UdInitAttr::new(1, QKEY)).expect("INIT");
        q.to_rtr_ud().expect("RTR");
        q.to_rts_ud(0).expect("RTS");
    }
    let max = qa.max_message() as usize;
    if a.size > max {
        eprintln!("--size {} exceeds the port MTU of {max} bytes", a.size);
        std::process::exit(2);
    }
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    let ah_b = pa
        .create_ah(1, &AddressVector::new(gb.gid, gb.mac, 0))
        .expect("ah");
    let ah_a = pb
        .create_ah(1, &AddressVector::new(ga.gid, ga.mac, 0))
        .expect("ah");
    let len = GRH + 2 * a.size.max(1);
    let access = AccessFlags::LOCAL_WRITE;
    let mut ping = Side {
        qp: qa,
        cq: cqa,
        buf: pa.alloc_mr(len, access).expect("mr"),
        ah: ah_b,
        peer_qpn: nb,
        peer_ip: [10, 0, 0, 2],
        size: a.size,
    };
    let mut pong = Side {
        qp: qb,
        cq: cqb,
        buf: pb.alloc_mr(len, access).expect("mr"),
        ah: ah_a,
        peer_qpn: na,
        peer_ip: [10, 0, 0, 1],
        size: a.size,
    };
    println!(
        "ud_pingpong: QPs {na:#x} <-> {nb:#x}, {} bytes (port MTU {max}), {} iterations, {} mode",
        a.size,
        a.iters,
        if a.threaded {
            "threaded"
        } else {
            "deterministic"
        }
    );
    let warmup = (a.iters / 10).min(1000);
    let total = warmup + a.iters;
    let payload = |i: u64| -> Vec<u8> {
        (0..a.size)
            .map(|k| (k as u64).wrapping_mul(31).wrapping_add(i) as u8)
            .collect()
    };
    let mut rtts = Vec::with_capacity(a.iters as usize);
    let step = || {
        if !a.threaded {
            fabric.run_until_idle();
        } else {
            std::thread::yield_now();
        }
    };
    // The receive for the first ping, then: ping, pong echoes what it got.
    pong.post_recv();
    for i in 0..total {
        let t = Instant::now();
        let msg = payload(i);
        ping.post_recv();
        ping.send(&msg);
        let got = pong.wait_recv(step);
        assert_eq!(got, msg, "ping {i}");
        pong.post_recv();
        pong.send(&got);
        let back = ping.wait_recv(step);
        assert_eq!(back, msg, "pong {i}");
        if i >= warmup {
            rtts.push(t.elapsed());
        }
    }
    rtts.sort();
    let pct = |p: f64| rtts[((rtts.len() as f64 - 1.0) * p) as usize];
    let mean = rtts.iter().sum::<Duration>() / rtts.len().max(1) as u32;
    println!(
        "round trip: mean {:.2} us, p50 {:.2} us, p99 {:.2} us ({} messages verified)",
        mean.as_secs_f64() * 1e6,
        pct(0.5).as_secs_f64() * 1e6,
        pct(0.99).as_secs_f64() * 1e6,
        2 * total
    );
    let (s1, s2) = (sa.stats().data_path, sb.stats().data_path);
    println!(
        "frames: {} + {} sent, drops: bad Q_Key {}, no receive WQE {}",
        s1.tx_frames,
        s2.tx_frames,
        s1.rx_bad_qkey + s2.rx_bad_qkey,
        s1.rx_no_recv_wqe + s2.rx_no_recv_wqe
    );
}
