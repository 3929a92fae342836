//! RC SEND ping-pong between two processes, each with one simulated ConnectX on the UDP
//! link (real RoCEv2 datagrams on port 4791), connected as `ibv_rc_pingpong` connects:
//! the two sides exchange their QP number, first PSN and GID over TCP, then run RC
//! traffic over UDP. Every message is checked: the server verifies each ping, the
//! client each pong.
//!
//! ```text
//! # terminal 1 (server: NIC 127.0.0.1, TCP rendezvous on 127.0.0.1:18515)
//! cargo run --release --example rc_udp -- --server --ip 127.0.0.1
//! # terminal 2
//! cargo run --release --example rc_udp -- --ip 127.0.0.2 --connect 127.0.0.1:18515
//! ```
//!
//! Options: `--iters N` (round trips, default 10000), `--size BYTES` (default 64),
//! `--tcp ADDR` (server: where to listen; port 0 picks one, printed as `tcp: ADDR`),
//! `--port P` (UDP port of both NICs, default 4791), `--deterministic` (the
//! application steps its device instead of the device thread working alone),
//! `--timeout EXP` (the QP's local ACK timeout, 4.096 µs × 2^EXP, default 14 as
//! `ibv_rc_pingpong` sets it).
//! `FERROVERBS_PCAP=file-{pid}.pcap` captures the traffic.
//!
//! The connection message is `ibv_rc_pingpong`'s: `LLLL:QQQQQQ:PPPPPP:GGGG…` (LID 0, QPN,
//! PSN in hex, the GID as 32 hex digits); the peer's MAC follows from its GID by the UDP
//! link's convention (`mac_for`).

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use ferroverbs::verbs::{
    AccessFlags, AddressVector, CompletionQueue, MemoryRegion, Mtu, QpCap, QpInitAttr, QueuePair,
    RecvWr, RtrAttr, RtsAttr, SendWr, WcOpcode, WorkCompletion,
};
use ferroverbs::{Device, DeviceConfig, GidEntry};
use ferroverbs_sim::link::udp::{addr_of_gid, mac_for, UdpConfig, UdpLink};
use ferroverbs_sim::{Sim, SimBus};

/// An RC ping-pong between two processes, each with a simulated NIC speaking RoCEv2
/// over UDP, meeting over TCP to exchange QP numbers as `ibv_rc_pingpong` does.
#[derive(Clone, Debug, clap::Parser)]
#[command(name = "rc_udp")]
pub struct Args {
    /// Server (listens for the TCP rendezvous) or client.
    #[arg(long)]
    pub server: bool,
    /// This NIC's IPv4 address.
    #[arg(long, default_value = "127.0.0.1")]
    pub ip: Ipv4Addr,
    /// Server: the TCP address to listen on; client: the server's.
    #[arg(long, alias = "connect", default_value = "127.0.0.1:18515")]
    pub tcp: String,
    /// Round trips.
    #[arg(long, default_value_t = 10_000)]
    pub iters: u64,
    /// Message size.
    #[arg(long, default_value_t = 64)]
    pub size: usize,
    /// UDP port of both NICs.
    #[arg(long, default_value_t = 4791)]
    pub port: u16,
    /// Step the device from the application (no device thread).
    #[arg(long)]
    pub deterministic: bool,
    /// The QP's local ACK timeout exponent (`ibv_qp_attr.timeout`).
    #[arg(long, default_value_t = 14)]
    pub timeout: u8,
}

impl Args {
    /// Parses command-line style arguments (without the program name).
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
        let argv = std::iter::once("rc_udp".to_string()).chain(args);
        <Args as clap::Parser>::try_parse_from(argv).map_err(|e| e.to_string())
    }
}

/// What one side reports.
#[derive(Clone, Debug)]
pub struct Report {
    /// Messages received and verified.
    pub verified: u64,
    /// Wall time of the ping-pong.
    pub elapsed: Duration,
}

/// `ibv_rc_pingpong`'s connection message.
fn message(qpn: u32, psn: u32, gid: &[u8; 16]) -> String {
    let g: String = gid.iter().map(|b| format!("{b:02x}")).collect();
    format!("0000:{qpn:06x}:{psn:06x}:{g}\n")
}

/// Parses a peer's connection message: (QPN, PSN, GID).
fn parse_message(m: &str) -> Result<(u32, u32, [u8; 16]), String> {
    let p: Vec<&str> = m.trim().split(':').collect();
    if p.len() != 4 || p[3].len() != 32 {
        return Err(format!("bad connection message {m:?}"));
    }
    let hex = |s: &str| u32::from_str_radix(s, 16).map_err(|e| format!("{s}: {e}"));
    let mut gid = [0u8; 16];
    for (i, g) in gid.iter_mut().enumerate() {
        *g = u8::from_str_radix(&p[3][2 * i..2 * i + 2], 16).map_err(|e| e.to_string())?;
    }
    Ok((hex(p[1])?, hex(p[2])?, gid))
}

/// The payload of message `i` in direction `dir` (0 ping, 1 pong).
fn payload(i: u64, dir: u8, out: &mut [u8]) {
    let mut x = i
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(u64::from(dir));
    for b in out.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
}

struct Side<'a> {
    sim: &'a Sim,
    step: bool,
    qp: QueuePair<'a, SimBus>,
    cq: CompletionQueue<'a, SimBus>,
    mr: MemoryRegion<'a, SimBus>,
    size: usize,
    sends: u32,
}

impl Side<'_> {
    fn post_recv(&mut self) {
        let sg = [self.mr.sge(0, self.size.max(1) as u32).expect("sge")];
        self.qp
            .post_recv(&[RecvWr::new(1, &sg)])
            .expect("post_recv");
    }

    fn send(&mut self, i: u64, dir: u8, scratch: &mut [u8]) {
        // Keep the send queue from filling: collect send completions first.
        while self.sends >= 32 {
            self.poll(false);
        }
        payload(i, dir, scratch);
        self.mr.write(self.size, scratch);
        let sg = [self.mr.sge(self.size, self.size as u32).expect("sge")];
        let sg: &[_] = if self.size == 0 { &[] } else { &sg };
        self.qp
            .post_send(&[SendWr::send(i, sg).signaled()])
            .expect("post_send");
        self.sends += 1;
    }

    /// Polls once; returns whether a receive completed.
    fn poll(&mut self, want_recv: bool) -> bool {
        if self.step {
            self.sim.step();
        }
        let mut wc = [WorkCompletion::default(); 8];
        let n = self.cq.poll(&mut wc);
        let mut got = false;
        for c in &wc[..n] {
            assert!(c.is_ok(), "completion error: {c:?}");
            match c.opcode {
                WcOpcode::Recv => {
                    assert!(want_recv, "unexpected receive");
                    assert_eq!(c.byte_len as usize, self.size);
                    got = true;
                }
                _ => self.sends -= 1,
            }
        }
        if n == 0 {
            // Leave the cores to the device and link threads (this machine may have
            // fewer cores than busy threads).
            std::thread::yield_now();
        }
        got
    }

    /// Waits for the next receive and checks its payload against message `i`.
    fn recv(&mut self, i: u64, dir: u8, scratch: &mut [u8], got: &mut [u8]) {
        let start = Instant::now();
        while !self.poll(true) {
            if start.elapsed() > Duration::from_secs(30) {
                panic!("no message {i} after 30 s");
            }
        }
        payload(i, dir, scratch);
        self.mr.read(0, got);
        assert_eq!(got, scratch, "message {i} corrupted");
    }
}

/// Runs one side.
pub fn run(a: &Args) -> Result<Report, String> {
    let cfg = UdpConfig::new(a.ip).port(a.port);
    let sim = Sim::new(cfg.sim_config(!a.deterministic));
    let link = UdpLink::attach(&sim, cfg).map_err(|e| format!("UDP {}: {e}", a.ip))?;
    let gid = GidEntry::ipv4(0, a.ip.octets(), mac_for(a.ip));
    let clock = sim.clock().clone();
    let ctx = Device::open(
        sim.bus(),
        DeviceConfig::default()
            .with_clock(std::sync::Arc::new(ferroverbs::SteppedClock::new(
                {
                    let c = clock.clone();
                    move || c.now()
                },
                move |d| clock.advance(d),
            )))
            .with_gid(gid),
    )
    .map_err(|e| format!("bring-up: {e}"))?;
    let pd = ctx.alloc_pd().map_err(|e| e.to_string())?;
    let cq = ctx.create_cq(256).map_err(|e| e.to_string())?;
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        ..QpCap::default()
    };
    let mut qp = pd
        .create_qp(&QpInitAttr::new(&cq, &cq, cap))
        .map_err(|e| e.to_string())?;
    let psn = (std::process::id().wrapping_mul(2_654_435_761) ^ 0x5a5a5a) & 0xff_ffff;

    // The rendezvous: QPN, PSN and GID each way, as ibv_rc_pingpong.
    let stream = if a.server {
        let l = TcpListener::bind(&a.tcp).map_err(|e| format!("listen {}: {e}", a.tcp))?;
        println!("tcp: {}", l.local_addr().map_err(|e| e.to_string())?);
        std::io::stdout().flush().ok();
        l.accept().map_err(|e| e.to_string())?.0
    } else {
        let start = Instant::now();
        loop {
            match TcpStream::connect(&a.tcp) {
                Ok(s) => break s,
                Err(e) if start.elapsed() > Duration::from_secs(20) => {
                    return Err(format!("connect {}: {e}", a.tcp))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    };
    let mut w = stream.try_clone().map_err(|e| e.to_string())?;
    let mut r = BufReader::new(stream);
    w.write_all(message(qp.qp_num(), psn, &gid.gid).as_bytes())
        .map_err(|e| e.to_string())?;
    let mut line = String::new();
    r.read_line(&mut line).map_err(|e| e.to_string())?;
    let (rqpn, rpsn, rgid) = parse_message(&line)?;
    let rip = addr_of_gid(&rgid).ok_or("the peer's GID is not IPv4-mapped")?;
    println!(
        "  local address:  QPN {:#08x}, PSN {psn:#08x}, GID {}",
        qp.qp_num(),
        a.ip
    );
    println!("  remote address: QPN {rqpn:#08x}, PSN {rpsn:#08x}, GID {rip}");

    qp.to_init(1, AccessFlags::empty())
        .map_err(|e| e.to_string())?;
    qp.to_rtr(&RtrAttr {
        av: AddressVector::new(rgid, mac_for(rip), 0),
        path_mtu: Mtu::Mtu1024,
        dest_qpn: rqpn,
        rq_psn: rpsn,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 1,
    })
    .map_err(|e| e.to_string())?;
    qp.to_rts(&RtsAttr {
        timeout: a.timeout,
        ..RtsAttr::new(psn)
    })
    .map_err(|e| e.to_string())?;
    let mr = pd
        .alloc_mr((2 * a.size).max(2), AccessFlags::LOCAL_WRITE)
        .map_err(|e| e.to_string())?;
    let mut side = Side {
        sim: &sim,
        step: a.deterministic,
        qp,
        cq,
        mr,
        size: a.size,
        sends: 0,
    };
    // The first receive is posted before either side may send.
    side.post_recv();
    w.write_all(b"ready\n").map_err(|e| e.to_string())?;
    line.clear();
    r.read_line(&mut line).map_err(|e| e.to_string())?;
    if line.trim() != "ready" {
        return Err(format!("peer not ready: {line:?}"));
    }

    let mut scratch = vec![0u8; a.size];
    let mut got = vec![0u8; a.size];
    let start = Instant::now();
    for i in 0..a.iters {
        if a.server {
            side.recv(i, 0, &mut scratch, &mut got);
            side.post_recv();
            side.send(i, 1, &mut scratch);
        } else {
            side.send(i, 0, &mut scratch);
            side.recv(i, 1, &mut scratch, &mut got);
            side.post_recv();
        }
    }
    let elapsed = start.elapsed();
    while side.sends > 0 {
        side.poll(false);
    }
    // Both sides done before either tears down (the last ACKs are delivered).
    w.write_all(b"done\n").map_err(|e| e.to_string())?;
    line.clear();
    r.read_line(&mut line).map_err(|e| e.to_string())?;
    let report = Report {
        verified: a.iters,
        elapsed,
    };
    let us = elapsed.as_secs_f64() * 1e6 / a.iters.max(1) as f64;
    println!(
        "{} bytes, {} round trips in {:.3} s: {us:.2} us per round trip; verified {} messages",
        a.size,
        a.iters,
        elapsed.as_secs_f64(),
        report.verified
    );
    println!("  link: {:?}", link.stats());
    let d = sim.stats().data_path;
    println!(
        "  device: rx {} (bad ICRC {}, malformed {}), naks {}, rnr naks {}, retransmits {}",
        d.rx_frames, d.rx_bad_icrc, d.rx_malformed, d.naks, d.rnr_naks, d.retransmits
    );
    Ok(report)
}

#[allow(dead_code)]
fn main() {
    let a = <Args as clap::Parser>::parse();
    if let Err(e) = run(&a) {
        eprintln!("rc_udp: {e}");
        std::process::exit(1);
    }
}
