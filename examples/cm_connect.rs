//! Connection set-up time between two processes: an RC connection by the CM (the
//! client's REQ to ESTABLISHED on both sides: REQ, REP, RTU as MADs on QP1 of
//! simulated NICs over UDP, both QPs taken to RTS) against a TCP connect between the
//! same two processes (the client's `connect` to the server's `accept` returning),
//! alternated, `--rounds` times each; prints the medians and 90th percentiles.
//!
//! Each side's "up" time is read from the real-time clock, which both processes of
//! one host share: the server sends its times to the client over a TCP control
//! connection after the rounds. Each CM round uses fresh QPs and ends with DREQ and
//! DREP. The time the QPs' modify commands took (the server's accept, the client's
//! establish: INIT, RTR, RTS through the device's command interface) is printed too,
//! the rest being the MADs and their processing.
//!
//! ```text
//! cargo run --release --example cm_connect -- --server --ip 127.0.0.1
//! cargo run --release --example cm_connect -- --ip 127.0.0.2 --connect 127.0.0.1
//! ```

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ferroverbs::verbs::{QpCap, QpInitAttr};
use ferroverbs::{Device, DeviceConfig, GidEntry, SteppedClock};
use ferroverbs_cm::service::{CmEvent, ConnParam, Service};
use ferroverbs_sim::link::udp::{mac_for, UdpConfig, UdpLink};
use ferroverbs_sim::{Sim, SimBus};

/// Connection set-up by the CM against a TCP connect.
#[derive(Clone, Debug, clap::Parser)]
#[command(name = "cm_connect")]
pub struct Args {
    /// Listen (server) instead of connecting.
    #[arg(long)]
    pub server: bool,
    /// This NIC's IPv4 address (the server's TCP listeners bind to it too).
    #[arg(long, default_value = "127.0.0.1")]
    pub ip: Ipv4Addr,
    /// Client: the server's IPv4 address.
    #[arg(long)]
    pub connect: Option<Ipv4Addr>,
    /// The CM port; the TCP connect port is the same number, the control port the
    /// next one.
    #[arg(long, default_value_t = 7174)]
    pub port: u16,
    /// Connections of each kind.
    #[arg(long, default_value_t = 100)]
    pub rounds: usize,
}

impl Args {
    /// Parses command-line style arguments (without the program name).
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
        let argv = std::iter::once("cm_connect".to_string()).chain(args);
        <Args as clap::Parser>::try_parse_from(argv).map_err(|e| e.to_string())
    }
}

/// How long any wait may take.
const LIMIT: Duration = Duration::from_secs(60);

/// The real-time clock in nanoseconds (shared by the processes of a host).
fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// The next CM event but the time-wait exits (at most [`LIMIT`]).
fn event(svc: &mut Service<'_, SimBus>) -> Result<CmEvent, String> {
    let start = Instant::now();
    loop {
        svc.poll();
        match svc.next_event() {
            // An earlier connection leaving its time-wait.
            Some(CmEvent::TimewaitExit { .. }) => continue,
            Some(e) => return Ok(e),
            None => {}
        }
        if start.elapsed() > LIMIT {
            return Err("no CM event in 60 s".into());
        }
        std::thread::yield_now();
    }
}

/// The median and 90th percentile of `v` (microseconds).
fn stats(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.9))
}

/// Runs one side; the client returns its printed table.
pub fn run(a: &Args) -> Result<String, String> {
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
    let resolve = |ip: std::net::IpAddr| match ip {
        std::net::IpAddr::V4(v4) => Some(mac_for(v4)),
        _ => None,
    };
    let seed = u64::from(std::process::id());
    let mut svc = Service::new(&pd, 1, gid, clock, resolve, seed).map_err(|e| e.to_string())?;
    let cq = ctx.create_cq(64).map_err(|e| e.to_string())?;
    let e = |e: std::io::Error| e.to_string();

    if a.server {
        let tcp = TcpListener::bind((a.ip, a.port)).map_err(e)?;
        let ctl = TcpListener::bind((a.ip, a.port + 1)).map_err(e)?;
        svc.listen(SocketAddr::new(a.ip.into(), a.port))
            .map_err(|e| e.to_string())?;
        println!("listening on {}:{} (CM and TCP)", a.ip, a.port);
        let (mut c, _) = ctl.accept().map_err(e)?;
        // Per round: ESTABLISHED, the accept's QP transitions (ns), TCP accept.
        let mut times = Vec::with_capacity(3 * a.rounds);
        for _ in 0..a.rounds {
            // CM: the request, the accept (REP), ESTABLISHED when the RTU comes.
            let mut qp = pd
                .create_qp(&QpInitAttr::new(&cq, &cq, QpCap::default()))
                .map_err(|e| e.to_string())?;
            let CmEvent::ConnectRequest { id, .. } = event(&mut svc)? else {
                return Err("expected a connection request".into());
            };
            let t = wall_ns();
            svc.accept(id, &mut qp, &ConnParam::default())
                .map_err(|e| e.to_string())?;
            let accept = wall_ns() - t;
            let CmEvent::Established { .. } = event(&mut svc)? else {
                return Err("expected ESTABLISHED".into());
            };
            times.push(wall_ns());
            times.push(accept);
            let CmEvent::Disconnected { .. } = event(&mut svc)? else {
                return Err("expected DISCONNECTED".into());
            };
            svc.disconnect(id, Some(&mut qp))
                .map_err(|e| e.to_string())?;
            // TCP: accept returns once the handshake's last ACK is in.
            let (s, _) = tcp.accept().map_err(e)?;
            times.push(wall_ns());
            drop(s);
        }
        for t in times {
            c.write_all(&t.to_le_bytes()).map_err(e)?;
        }
        // Until the client has read them all.
        let mut end = [0u8; 1];
        let _ = c.read(&mut end);
        return Ok(String::new());
    }

    let server = a.connect.ok_or("--connect IP is needed")?;
    let dst = SocketAddr::new(server.into(), a.port);
    // The server starts listening (CM and TCP) before its control port accepts.
    let start = Instant::now();
    let mut c = loop {
        match TcpStream::connect((server, a.port + 1)) {
            Ok(c) => break c,
            Err(_) if start.elapsed() < LIMIT => std::thread::sleep(Duration::from_millis(20)),
            Err(x) => return Err(format!("control connection: {x}")),
        }
    };
    let (mut cm_client, mut tcp_client, mut establish) = (Vec::new(), Vec::new(), Vec::new());
    let mut starts = Vec::new();
    for _ in 0..a.rounds {
        let mut qp = pd
            .create_qp(&QpInitAttr::new(&cq, &cq, QpCap::default()))
            .map_err(|e| e.to_string())?;
        let t0 = wall_ns();
        let id = svc
            .connect(&qp, dst, &ConnParam::default())
            .map_err(|e| e.to_string())?;
        let CmEvent::ConnectResponse { .. } = event(&mut svc)? else {
            return Err("expected the REP".into());
        };
        let t = wall_ns();
        svc.establish(id, &mut qp).map_err(|e| e.to_string())?;
        establish.push(wall_ns() - t);
        let CmEvent::Established { .. } = event(&mut svc)? else {
            return Err("expected ESTABLISHED".into());
        };
        cm_client.push(wall_ns());
        starts.push(t0);
        svc.disconnect(id, Some(&mut qp))
            .map_err(|e| e.to_string())?;
        let CmEvent::Disconnected { .. } = event(&mut svc)? else {
            return Err("expected DISCONNECTED".into());
        };
        let t0 = wall_ns();
        let s = TcpStream::connect(dst).map_err(e)?;
        tcp_client.push(wall_ns());
        starts.push(t0);
        drop(s);
    }
    let mut server_up = vec![0u64; 3 * a.rounds];
    for t in server_up.iter_mut() {
        let mut b = [0u8; 8];
        c.read_exact(&mut b).map_err(e)?;
        *t = u64::from_le_bytes(b);
    }
    let _ = c.write_all(b"x");
    let us = |a: u64, b: u64| a.saturating_sub(b) as f64 / 1e3;
    let (mut cm_c, mut cm_both, mut tcp_c, mut tcp_both, mut qp_mods) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for r in 0..a.rounds {
        let (t_cm, t_tcp) = (starts[2 * r], starts[2 * r + 1]);
        let (s_up, s_accept, s_tcp) =
            (server_up[3 * r], server_up[3 * r + 1], server_up[3 * r + 2]);
        cm_c.push(us(cm_client[r], t_cm));
        cm_both.push(us(cm_client[r].max(s_up), t_cm));
        tcp_c.push(us(tcp_client[r], t_tcp));
        tcp_both.push(us(tcp_client[r].max(s_tcp), t_tcp));
        qp_mods.push((s_accept + establish[r]) as f64 / 1e3);
    }
    let mut out = format!(
        "{} connections of each kind, alternated (us)\n\
         | connection | client up, median | p90 | both sides up, median | p90 |\n\
         |---|---|---|---|---|\n",
        a.rounds
    );
    for (name, c, b) in [
        ("CM (REQ, REP, RTU)", &mut cm_c, &mut cm_both),
        ("TCP connect", &mut tcp_c, &mut tcp_both),
    ] {
        let ((c50, c90), (b50, b90)) = (stats(c), stats(b));
        out += &format!("| {name} | {c50:.1} | {c90:.1} | {b50:.1} | {b90:.1} |\n");
    }
    let (q50, q90) = stats(&mut qp_mods);
    out += &format!(
        "of the CM's, the QPs' INIT, RTR and RTS commands on both sides: median {q50:.1}, p90 {q90:.1}\n"
    );
    let (cm50, _) = stats(&mut cm_both);
    let (tcp50, _) = stats(&mut tcp_both);
    out += &format!(
        "CM connect / TCP connect, both sides up, medians: {:.1}x\n",
        cm50 / tcp50.max(1e-3)
    );
    print!("{out}");
    Ok(out)
}

#[allow(dead_code)]
fn main() {
    let a = <Args as clap::Parser>::parse();
    if let Err(e) = run(&a) {
        eprintln!("cm_connect: {e}");
        std::process::exit(1);
    }
}
