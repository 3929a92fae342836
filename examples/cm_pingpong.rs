//! RC SEND ping-pong between two processes connected by the CM: the client connects
//! to the server's IP address and port as an rdma_cm program does (REQ, REP, RTU as
//! MADs on QP1, in the same RoCEv2/UDP datagrams as the data), both QPs are taken to
//! RTS with the attributes the exchange negotiated, the messages go both ways and are
//! checked, and the client disconnects (DREQ, DREP). No QP number or PSN is exchanged
//! by hand.
//!
//! ```text
//! cargo run --release --example cm_pingpong -- --server --ip 127.0.0.1
//! cargo run --release --example cm_pingpong -- --ip 127.0.0.2 --connect 127.0.0.1
//! ```

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferroverbs::verbs::{AccessFlags, QpCap, QpInitAttr, RecvWr, SendWr, WcOpcode};
use ferroverbs::{Device, DeviceConfig, GidEntry, SteppedClock};
use ferroverbs_cm::service::{CmEvent, ConnParam, Service};
use ferroverbs_sim::link::udp::{mac_for, UdpConfig, UdpLink};
use ferroverbs_sim::{Sim, SimBus};

/// A ping-pong between two processes connected by the CM over simulated NICs on UDP.
#[derive(Clone, Debug, clap::Parser)]
#[command(name = "cm_pingpong")]
pub struct Args {
    /// Listen (server) instead of connecting.
    #[arg(long)]
    pub server: bool,
    /// This NIC's IPv4 address.
    #[arg(long, default_value = "127.0.0.1")]
    pub ip: Ipv4Addr,
    /// Client: the server's IPv4 address.
    #[arg(long)]
    pub connect: Option<Ipv4Addr>,
    /// The CM port the server listens on (rping's 7174).
    #[arg(long, default_value_t = 7174)]
    pub port: u16,
    /// Round trips.
    #[arg(long, default_value_t = 1000)]
    pub iters: u64,
    /// Message size in bytes.
    #[arg(long, default_value_t = 64)]
    pub size: usize,
}

impl Args {
    /// Parses command-line style arguments (without the program name).
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
        let argv = std::iter::once("cm_pingpong".to_string()).chain(args);
        <Args as clap::Parser>::try_parse_from(argv).map_err(|e| e.to_string())
    }
}

/// How long any wait may take.
const LIMIT: Duration = Duration::from_secs(60);

/// Polls `svc` until it reports an event (at most [`LIMIT`]).
fn event(svc: &mut Service<'_, SimBus>) -> Result<CmEvent, String> {
    let start = Instant::now();
    loop {
        svc.poll();
        if let Some(e) = svc.next_event() {
            return Ok(e);
        }
        if start.elapsed() > LIMIT {
            return Err("no CM event in 60 s".into());
        }
        std::thread::yield_now();
    }
}

/// The payload of message `i` (0 ping, 1 pong).
fn payload(i: u64, dir: u8, out: &mut [u8]) {
    for (k, b) in out.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31) ^ (k as u8) ^ dir;
    }
}

/// Runs one side; returns the messages it verified.
pub fn run(a: &Args) -> Result<u64, String> {
    let cfg = UdpConfig::new(a.ip);
    let sim = Sim::new(cfg.sim_config(true));
    let _link = UdpLink::attach(&sim, cfg).map_err(|e| format!("UDP {}: {e}", a.ip))?;
    let gid = GidEntry::ipv4(0, a.ip.octets(), mac_for(a.ip));
    let (now, adv) = (sim.clock().clone(), sim.clock().clone());
    let clock = Arc::new(SteppedClock::new(
        move || now.now(),
        move |d| adv.advance(d),
    ));
    let ctx = Device::open(
        sim.bus(),
        DeviceConfig::default()
            .with_clock(clock.clone())
            .with_gid(gid),
    )
    .map_err(|e| format!("bring-up: {e}"))?;
    let pd = ctx.alloc_pd().map_err(|e| e.to_string())?;
    // The UDP link's convention: a peer's MAC follows from its IPv4 address.
    let resolve = |ip: std::net::IpAddr| match ip {
        std::net::IpAddr::V4(v4) => Some(mac_for(v4)),
        _ => None,
    };
    let seed = u64::from(std::process::id());
    let mut svc = Service::new(&pd, 1, gid, clock, resolve, seed).map_err(|e| e.to_string())?;
    let mut cq = ctx.create_cq(64).map_err(|e| e.to_string())?;
    let mut qp = pd
        .create_qp(&QpInitAttr::new(&cq, &cq, QpCap::default()))
        .map_err(|e| e.to_string())?;
    let mr = pd
        .alloc_mr(2 * a.size.max(1), AccessFlags::LOCAL_WRITE)
        .map_err(|e| e.to_string())?;
    let rsg = [mr.sge(0, a.size as u32).map_err(|e| e.to_string())?];

    let id = if a.server {
        svc.listen(SocketAddr::new(a.ip.into(), a.port))
            .map_err(|e| e.to_string())?;
        println!("listening on {}:{}", a.ip, a.port);
        let CmEvent::ConnectRequest { id, peer, .. } = event(&mut svc)? else {
            return Err("expected a connection request".into());
        };
        println!("connection request from {peer}");
        svc.accept(id, &mut qp, &ConnParam::default())
            .map_err(|e| e.to_string())?;
        // The QP is in RTS before the REP goes out: the first receive is in place
        // before the client can send.
        qp.post_recv(&[RecvWr::new(0, &rsg)])
            .map_err(|e| e.to_string())?;
        match event(&mut svc)? {
            CmEvent::Established { .. } => id,
            e => return Err(format!("expected ESTABLISHED, got {e:?}")),
        }
    } else {
        let dst = SocketAddr::new(a.connect.ok_or("--connect IP is needed")?.into(), a.port);
        // The server may not listen yet: a REJ (no listener) is retried.
        let start = Instant::now();
        loop {
            let id = svc
                .connect(&qp, dst, &ConnParam::default())
                .map_err(|e| e.to_string())?;
            match event(&mut svc)? {
                CmEvent::ConnectResponse { .. } => {
                    svc.establish(id, &mut qp).map_err(|e| e.to_string())?;
                    qp.post_recv(&[RecvWr::new(0, &rsg)])
                        .map_err(|e| e.to_string())?;
                    let CmEvent::Established { .. } = event(&mut svc)? else {
                        return Err("expected ESTABLISHED".into());
                    };
                    break id;
                }
                CmEvent::Rejected { reason: 8, .. } if start.elapsed() < LIMIT => {
                    let _ = svc.destroy(id);
                    std::thread::sleep(Duration::from_millis(50));
                }
                e => return Err(format!("connect: {e:?}")),
            }
        }
    };
    let p = svc
        .engine()
        .qp_params(id)
        .ok_or("no negotiated attributes")?;
    println!(
        "connected: QP {:#x} to {:#x}, PSNs sent from {:#x}, expected from {:#x}",
        qp.qp_num(),
        p.dest_qpn,
        p.sq_psn,
        p.rq_psn
    );

    let (mut want, mut got) = (vec![0u8; a.size], vec![0u8; a.size]);
    let mut recv = |i: u64, dir: u8| -> Result<(), String> {
        let start = Instant::now();
        loop {
            match cq.poll_one() {
                Some(c) if c.opcode == WcOpcode::Recv => {
                    if !c.is_ok() {
                        return Err(format!("receive {i}: {c:?}"));
                    }
                    break;
                }
                Some(c) if !c.is_ok() => return Err(format!("send: {c:?}")),
                Some(_) => {}
                None if start.elapsed() > LIMIT => return Err(format!("no message {i}")),
                None => std::thread::yield_now(),
            }
        }
        mr.read(0, &mut got);
        payload(i, dir, &mut want);
        if got != want {
            return Err(format!("message {i} corrupted"));
        }
        Ok(())
    };
    let start = Instant::now();
    for i in 0..a.iters {
        let (mine, theirs) = if a.server { (1, 0) } else { (0, 1) };
        if a.server {
            recv(i, theirs)?;
        }
        // The next receive before the peer can send again.
        qp.post_recv(&[RecvWr::new(i + 1, &rsg)])
            .map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; a.size];
        payload(i, mine, &mut buf);
        mr.write(a.size, &buf);
        let sg = [mr.sge(a.size, a.size as u32).map_err(|e| e.to_string())?];
        qp.post_send(&[SendWr::send(i, &sg).signaled()])
            .map_err(|e| e.to_string())?;
        if !a.server {
            recv(i, theirs)?;
        }
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / a.iters.max(1) as f64;
    println!(
        "{} round trips of {} bytes: {us:.1} us each",
        a.iters, a.size
    );

    if a.server {
        // The client disconnects; answer its DREQ.
        let CmEvent::Disconnected { .. } = event(&mut svc)? else {
            return Err("expected DISCONNECTED".into());
        };
        svc.disconnect(id, Some(&mut qp))
            .map_err(|e| e.to_string())?;
    } else {
        // Let the last SEND's ACK arrive before the QP goes to error.
        std::thread::sleep(Duration::from_millis(100));
        svc.disconnect(id, Some(&mut qp))
            .map_err(|e| e.to_string())?;
        let CmEvent::Disconnected { .. } = event(&mut svc)? else {
            return Err("expected DISCONNECTED".into());
        };
    }
    println!("disconnected; CM counters {:?}", svc.stats());
    Ok(a.iters)
}

#[allow(dead_code)]
fn main() {
    let a = <Args as clap::Parser>::parse();
    if let Err(e) = run(&a) {
        eprintln!("cm_pingpong: {e}");
        std::process::exit(1);
    }
}
