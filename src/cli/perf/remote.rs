//! The cross-process tests: `--server` and `--client HOST`, as perftest runs them.
//!
//! Each process brings up one simulated ConnectX on the UDP link
//! (`ferroverbs_sim::link::udp`): the NIC binds its own IPv4 address (`--ip`;
//! 127.0.0.1 for the server and 127.0.0.2 for the client by default) and UDP port
//! `--udp-port` (4791), its GID 0 is the IPv4-mapped address, and the RoCEv2 datagrams
//! between the two NICs are real ones on the host's loopback (or network).
//!
//! The connection is perftest's: the server listens on TCP port `-p` (18515) of
//! `--bind` (every address by default); the client connects (retrying for
//! [`CONNECT_TIMEOUT`] while the server starts). Over that connection:
//!
//! 1. the client sends its test and options (one line); the server checks they are its
//!    own, as both sides of perftest must be run with the same options, and answers
//!    `ok` or what differs (both sides then fail with a setup error, exit code 3);
//! 2. each side sends one line per QP in perftest's `KEY_MSG` layout,
//!    `LID:QPN:PSN:RKEY:VADDR:GID` (hex, the GID as 32 digits), and connects its QPs
//!    to the peer's;
//! 3. before and after each message size both sides exchange `start` / `end` lines,
//!    so that the receive areas are ready before the first message and a size ends on
//!    both sides before the next begins.
//!
//! The devices run threaded by default (`--sim-mode threaded`): the passive side of
//! an RDMA WRITE, READ or atomic test makes progress with no help from its
//! application, as a NIC does. With `--sim-mode deterministic` each process steps its
//! own device whenever it has nothing else to do, the passive server included; a step
//! reads the UDP socket itself, so the polling thread receives each datagram with no
//! other thread involved: the fastest round trip (`docs/performance.md`, across
//! processes).
//!
//! The client prints what the in-process mode prints. The server prints the
//! information block and the addresses, and for the ping-pong tests (send-lat,
//! write-lat) its own latency lines, as perftest's server does.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferroverbs::verbs::RemoteAddr;
use ferroverbs::{Device, DeviceConfig, DeviceSpec, GidEntry, LinkLayer};
use ferroverbs_sim::link::udp::{addr_of_gid, gid_for, mac_for, UdpConfig, UdpLink};
use ferroverbs_sim::{Sim, SimBus};

use super::baseline;
use super::config::{Mode, PerfConfig, Role, SimMode, Verb};
use super::events::EventChannel;
use super::report::{self, Address};
use super::runner::{
    alloc_mrs, connect_qp, create_channel, create_cq, create_qps, event_wait, flush, initial_psn,
    lat_report, lat_result, mr_time_line, of_qp, post_initial_recvs, print_baseline, print_footer,
    print_header, rd_atom_depth, run_sizes, serve_send_bw, serve_send_lat, serve_write_lat,
    setup_err, Dims, Endpoint, Figure, PeerQp, Setup, Side, SyncPoint,
};
use crate::cli::error::CliError;

/// How long a client keeps trying to reach a server that is not listening yet.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The first word of the options line (a version of this protocol).
const HELLO: &str = "ferroverbs-perf/1";

/// The rendezvous connection: lines of text each way.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    /// Block in `read` (threaded devices) or poll and step the device (deterministic).
    blocking: bool,
    peer: SocketAddr,
}

impl Conn {
    fn new(stream: TcpStream, blocking: bool) -> Result<Conn, CliError> {
        let peer = stream
            .peer_addr()
            .map_err(setup_err("reading the peer's address"))?;
        let _ = stream.set_nodelay(true);
        stream
            .set_nonblocking(!blocking)
            .map_err(setup_err("configuring the rendezvous connection"))?;
        Ok(Conn {
            stream,
            buf: Vec::new(),
            blocking,
            peer,
        })
    }

    fn send(&mut self, line: &str) -> Result<(), CliError> {
        let mut data = line.as_bytes();
        let mut msg = Vec::with_capacity(data.len() + 1);
        msg.extend_from_slice(data);
        msg.push(b'\n');
        data = &msg;
        while !data.is_empty() {
            match self.stream.write(data) {
                Ok(0) => return Err(lost(self.peer)),
                Ok(n) => data = &data[n..],
                Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(CliError::runtime(
                        format!("writing to the peer at {}", self.peer),
                        e,
                    ))
                }
            }
        }
        Ok(())
    }

    /// The next line from the peer; `idle` runs while none is there (non-blocking
    /// connection).
    fn recv(&mut self, idle: &dyn Fn()) -> Result<String, CliError> {
        let mut chunk = [0u8; 1024];
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Ok(String::from_utf8_lossy(&line[..i]).into_owned());
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(lost(self.peer)),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock && !self.blocking => idle(),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(CliError::runtime(
                        format!("reading from the peer at {}", self.peer),
                        e,
                    ))
                }
            }
        }
    }

    /// Runs `f` on the stream in blocking mode, for a baseline that uses it directly:
    /// `f` reads what was already buffered first, then the stream.
    fn with_stream<T>(
        &mut self,
        f: impl FnOnce(&mut dyn Read, &mut dyn Write) -> Result<T, CliError>,
    ) -> Result<T, CliError> {
        self.stream
            .set_nonblocking(false)
            .map_err(|e| CliError::runtime("configuring the rendezvous connection", e))?;
        let pre = std::mem::take(&mut self.buf);
        let s: &TcpStream = &self.stream;
        let mut r = std::io::Cursor::new(pre).chain(s);
        let mut w = s;
        let out = f(&mut r, &mut w);
        let (rest, _) = r.into_inner();
        let pos = rest.position() as usize;
        self.buf = rest.into_inner().split_off(pos);
        self.restore()?;
        out
    }

    /// Back to the mode of [`Conn::new`] after [`Conn::blocking_stream`].
    fn restore(&mut self) -> Result<(), CliError> {
        self.stream
            .set_nonblocking(!self.blocking)
            .map_err(|e| CliError::runtime("configuring the rendezvous connection", e))
    }

    /// Sends `word` and waits for the peer's same word.
    fn sync(&mut self, word: &str, idle: &dyn Fn()) -> Result<(), CliError> {
        self.send(word)?;
        let got = self.recv(idle)?;
        if got != word {
            return Err(CliError::runtime_msg(format!(
                "the peer at {} is out of step: expected {word:?}, got {got:?}",
                self.peer
            )));
        }
        Ok(())
    }
}

fn lost(peer: SocketAddr) -> CliError {
    CliError::runtime_msg(format!(
        "the peer at {peer} closed the connection (it failed or was stopped; see its output)"
    ))
}

/// The options both sides must share, as one line.
fn options_line(cfg: &PerfConfig) -> String {
    let sizes: Vec<String> = cfg.sizes.iter().map(|s| s.to_string()).collect();
    format!(
        "{HELLO} test={} sizes={} iters={} qps={} tx_depth={} rx_depth={} post_list={} \
         cq_mod={} inline={} atomic={} events={} udp_port={} baseline={} qp_timeout={}",
        cfg.test.name(),
        sizes.join(","),
        cfg.iters,
        cfg.qps,
        cfg.tx_depth,
        cfg.rx_depth,
        cfg.post_list,
        cfg.cq_mod,
        cfg.inline.bytes(),
        cfg.atomic.name(),
        u8::from(cfg.events),
        cfg.net.udp_port,
        u8::from(cfg.baseline),
        cfg.qp_timeout,
    )
}

/// What differs between two options lines.
fn options_diff(mine: &str, theirs: &str) -> String {
    let m: Vec<&str> = mine.split_whitespace().collect();
    let t: Vec<&str> = theirs.split_whitespace().collect();
    if m.first() != t.first() {
        return format!(
            "the peer speaks {:?}, not {HELLO}",
            t.first().unwrap_or(&"")
        );
    }
    m.iter()
        .zip(t.iter())
        .filter(|(a, b)| a != b)
        .map(|(a, b)| format!("server {a}, client {b}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// One QP's connection data in perftest's `KEY_MSG` layout.
fn qp_line(qpn: u32, psn: u32, remote: RemoteAddr, gid: &[u8; 16]) -> String {
    let g: String = gid.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{:04x}:{qpn:06x}:{psn:06x}:{:08x}:{:016x}:{g}",
        0, remote.rkey, remote.addr
    )
}

/// Parses a peer's QP line: (QPN, PSN, its buffer, GID).
fn parse_qp_line(line: &str) -> Result<(u32, u32, RemoteAddr, [u8; 16]), CliError> {
    let bad = || CliError::runtime_msg(format!("the peer sent a malformed QP line: {line:?}"));
    let p: Vec<&str> = line.trim().split(':').collect();
    if p.len() != 6 || p[5].len() != 32 {
        return Err(bad());
    }
    let hex32 = |s: &str| u32::from_str_radix(s, 16).map_err(|_| bad());
    let qpn = hex32(p[1])?;
    let psn = hex32(p[2])?;
    let rkey = hex32(p[3])?;
    let addr = u64::from_str_radix(p[4], 16).map_err(|_| bad())?;
    let mut gid = [0u8; 16];
    for (i, g) in gid.iter_mut().enumerate() {
        *g = u8::from_str_radix(&p[5][2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok((qpn, psn, RemoteAddr { addr, rkey }, gid))
}

/// Opens the rendezvous: the server waits for one client, the client connects.
fn rendezvous(cfg: &PerfConfig, blocking: bool) -> Result<Conn, CliError> {
    match &cfg.role {
        Role::Server { port } => {
            let at = SocketAddr::new(cfg.net.bind, *port);
            let l = TcpListener::bind(at).map_err(|e| {
                CliError::setup(
                    format!(
                        "cannot listen on TCP {at} (another server running? pick another port \
                         with -p)"
                    ),
                    e,
                )
            })?;
            println!("{}", "*".repeat(36));
            println!("* Waiting for client to connect... *");
            println!("{}", "*".repeat(36));
            flush();
            let (s, _) = l
                .accept()
                .map_err(setup_err("accepting the client's connection"))?;
            Conn::new(s, blocking)
        }
        Role::Client { host, port } => {
            let addrs: Vec<SocketAddr> = (host.as_str(), *port)
                .to_socket_addrs()
                .map_err(|e| CliError::setup(format!("cannot resolve {host}"), e))?
                .collect();
            let start = Instant::now();
            loop {
                let mut last = None;
                for a in &addrs {
                    match TcpStream::connect(a) {
                        Ok(s) => return Conn::new(s, blocking),
                        Err(e) => last = Some(e),
                    }
                }
                if start.elapsed() > CONNECT_TIMEOUT {
                    let e = last.unwrap_or_else(|| ErrorKind::NotFound.into());
                    return Err(CliError::setup(
                        format!(
                            "cannot connect to the server at {host}:{port} for {} s (is \
                             `ferroverbs perf {} --server` running there?)",
                            CONNECT_TIMEOUT.as_secs(),
                            cfg.test.name()
                        ),
                        e,
                    ));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Role::Local => Err(CliError::setup_msg("not a cross-process test")),
    }
}

/// Runs this process's side of a cross-process test.
pub fn run(cfg: &PerfConfig) -> Result<(), CliError> {
    match cfg.device {
        DeviceSpec::Sim => {}
        DeviceSpec::SimUdp(a) => return Err(crate::cli::device::sim_udp_unsupported(a)),
        DeviceSpec::Vfio(bdf) => {
            return Err(CliError::unsupported(
                format!("--server/--client with --device vfio:{bdf}"),
                "the cross-process modes run on simulated NICs over the UDP link; on hardware \
                 run both sides in one process (leave out --server/--client)",
            ))
        }
    }
    let server = matches!(cfg.role, Role::Server { .. });
    let threaded = cfg.sim_mode == SimMode::Threaded;
    let ip = cfg.net.ip;
    let ucfg = UdpConfig::new(ip).port(cfg.net.udp_port);
    let sim = Sim::new(ucfg.sim_config(threaded));
    let link = UdpLink::attach(&sim, ucfg).map_err(|e| {
        CliError::setup(
            format!(
                "cannot bind the simulated NIC to UDP {ip}:{} (is the address local? on \
                 one machine use 127.0.0.x, a different one per side, with --ip)",
                cfg.net.udp_port
            ),
            e,
        )
    })?;
    let mac = mac_for(ip);
    let clock = sim.clock().clone();
    let ctx = Device::open(
        sim.bus(),
        DeviceConfig::default()
            .with_clock(Arc::new(ferroverbs::SteppedClock::new(
                {
                    let c = clock.clone();
                    move || c.now()
                },
                move |d| clock.advance(d),
            )))
            .with_gid(GidEntry::ipv4(0, ip.octets(), mac)),
    )
    .map_err(|e| CliError::setup(format!("cannot bring up the simulated NIC at {ip}"), e))?;
    let port = ctx
        .query_port(1)
        .map_err(setup_err("querying port 1 of the simulated NIC"))?;
    let me = Endpoint {
        gid: gid_for(ip),
        mac,
        gid_index: 0,
        mtu: port.active_mtu,
        link: LinkLayer::Ethernet,
    };
    // Steps the device when the process has nothing to do (deterministic mode), or
    // services it unless its thread is doing so (threaded mode: NAPI-style busy
    // polling, never waiting for the device thread; the device thread naps meanwhile,
    // see `ferroverbs_sim::mode::ASSIST_NAP`). An empty poll still yields: spinning
    // halved the bandwidth of the peer's device thread on shared CPUs.
    let pump = || {
        if threaded {
            if sim.try_service().unwrap_or(0) == 0 {
                std::thread::yield_now();
            }
        } else {
            sim.step();
        }
    };
    let r = side(cfg, server, &ctx, me, &pump, threaded);
    // What the wire did, on standard error (standard output stays perftest's).
    let l = link.stats();
    let d = sim.stats().data_path;
    eprintln!(
        "ferroverbs: UDP link {ip}:{}: {} datagrams sent, {} received ({} dropped by the \
         link) in {} reads, {} waits; device: {} retransmitted packets, {} NAKs, {} RNR NAKs, \
         {} ACK timeouts",
        cfg.net.udp_port,
        l.tx_datagrams,
        l.rx_datagrams,
        l.rx_datagrams - l.rx_delivered,
        l.rx_bursts,
        l.rx_waits,
        d.retransmits,
        d.naks,
        d.rnr_naks,
        d.ack_timeouts
    );
    let c = ctx
        .close()
        .map_err(|e| CliError::runtime("closing the simulated NIC", e));
    r.and(c)
}

fn side(
    cfg: &PerfConfig,
    server: bool,
    ctx: &ferroverbs::Context<SimBus>,
    me: Endpoint,
    pump: &dyn Fn(),
    threaded: bool,
) -> Result<(), CliError> {
    let dev = ctx
        .query_device()
        .map_err(setup_err("querying the device"))?;
    let rd_atom = rd_atom_depth(&dev);
    let dims = Dims::new(cfg, &dev)?;
    let half = dims.half;
    let mut conn = rendezvous(cfg, threaded)?;

    // 1. The options.
    let mine = options_line(cfg);
    if server {
        let theirs = conn.recv(pump)?;
        if theirs == mine {
            conn.send("ok")?;
        } else {
            let diff = options_diff(&mine, &theirs);
            conn.send(&format!("mismatch {diff}"))?;
            return Err(options_error(&diff));
        }
    } else {
        conn.send(&mine)?;
        let answer = conn.recv(pump)?;
        if answer != "ok" {
            let diff = answer.strip_prefix("mismatch ").unwrap_or(&answer);
            return Err(options_error(diff));
        }
    }

    // 2. Objects, then the QP lines.
    let pd = ctx.alloc_pd().map_err(setup_err("allocating a PD"))?;
    let channel = if cfg.events {
        Some(create_channel(ctx)?)
    } else {
        None
    };
    let mut cq = create_cq(ctx, channel.as_ref(), dims.cqe)?;
    let (mrs, took) = alloc_mrs(cfg, &pd, 2 * half)?;
    if cfg.mr_per_qp {
        let name = if server { "server" } else { "client" };
        eprintln!("{}", mr_time_line(name, mrs.len(), 2 * half, took));
    }
    let (mut qps, inline) = create_qps(cfg, &pd, &cq, dims.cap(cfg))?;
    let psns: Vec<u32> = qps.iter().map(|q| initial_psn(q.qp_num())).collect();
    for (i, (q, &psn)) in qps.iter().zip(&psns).enumerate() {
        let mine_remote = of_qp(&mrs, i).remote(half);
        conn.send(&qp_line(q.qp_num(), psn, mine_remote, &me.gid))?;
    }
    let mut peers = Vec::with_capacity(qps.len());
    for _ in 0..qps.len() {
        peers.push(parse_qp_line(&conn.recv(pump)?)?);
    }
    let peer_ip = addr_of_gid(&peers[0].3).ok_or_else(|| {
        CliError::runtime_msg("the peer's GID is not an IPv4-mapped address (RoCE v2 over UDP)")
    })?;
    let mut addrs = String::new();
    let rdma = cfg.test.verb != Verb::Send;
    let out = cfg.test.one_sided_request().then_some(u32::from(rd_atom));
    for (i, ((q, &psn), &(pqpn, ppsn, premote, pgid))) in
        qps.iter_mut().zip(&psns).zip(&peers).enumerate()
    {
        let mine_remote = of_qp(&mrs, i).remote(half);
        let pip = addr_of_gid(&pgid).unwrap_or(peer_ip);
        let peer = PeerQp {
            ep: Endpoint {
                gid: pgid,
                mac: mac_for(pip),
                ..me
            },
            qpn: pqpn,
            psn: ppsn,
        };
        connect_qp(q, &me, &peer, psn, me.mtu, (rd_atom, cfg.qp_timeout))?;
        let local = Address {
            qpn: q.qp_num(),
            psn,
            gid: me.gid,
            remote: rdma.then_some((mine_remote.rkey, mine_remote.addr)),
        };
        let remote = Address {
            qpn: pqpn,
            psn: ppsn,
            gid: pgid,
            remote: rdma.then_some((premote.rkey, premote.addr)),
        };
        addrs.push_str(&report::addresses(&local, &remote, out));
    }
    let setup = Setup {
        device: format!("sim@{}", cfg.net.ip),
        exchange: format!(
            "TCP rendezvous with {}; RoCEv2 over UDP {}:{} <-> {peer_ip}, {} device",
            conn.peer,
            cfg.net.ip,
            cfg.net.udp_port,
            if threaded {
                "threaded"
            } else {
                "deterministic"
            }
        ),
    };
    let server_reports =
        server && cfg.test.mode == Mode::Lat && matches!(cfg.test.verb, Verb::Send | Verb::Write);
    print_header(
        cfg,
        &setup,
        &me,
        me.mtu,
        inline,
        rd_atom,
        &addrs,
        !server || server_reports,
    );

    let mut s = Side {
        name: if server { "server" } else { "client" },
        qps: &mut qps,
        cq: &mut cq,
        mrs: &mrs,
        half,
        // Each QP's target is the one its peer QP announced (the same for every QP
        // when the peer shares one region among them).
        peers: peers.iter().map(|p| p.2).collect(),
        events: channel.as_ref().map(|c| c as &dyn EventChannel<SimBus>),
        event_wait: event_wait(threaded),
    };
    post_initial_recvs(cfg, &mut s, dims.recv_depth)?;

    // 3. The measurements.
    let mut sync = |p: SyncPoint| match p {
        SyncPoint::Start => conn.sync("start", pump),
        SyncPoint::End => conn.sync("end", pump),
    };
    if !server {
        let figures = run_sizes(cfg, inline, &mut s, None, pump, &mut sync)?;
        if cfg.baseline {
            client_baseline(cfg, &mut conn, &figures, me.mtu.bytes(), pump)?;
        }
        return Ok(());
    }
    let mut histograms = Vec::new();
    for &size in &cfg.sizes {
        if cfg.test.verb == Verb::Write && cfg.test.mode == Mode::Lat {
            s.mr().fill(s.half + size as usize - 1, 1, 0);
        }
        sync(SyncPoint::Start)?;
        let stamps = match (cfg.test.verb, cfg.test.mode) {
            (Verb::Send, Mode::Lat) => Some(serve_send_lat(cfg, size, inline, &mut s, pump)?),
            (Verb::Write, Mode::Lat) => Some(serve_write_lat(cfg, size, inline, &mut s, pump)?),
            (Verb::Send, Mode::Bw) => {
                serve_send_bw(cfg, &mut s, pump)?;
                None
            }
            // The responder needs no application.
            _ => None,
        };
        sync(SyncPoint::End)?;
        if let Some(stamps) = stamps {
            let (line, h) = lat_result(cfg, size, &stamps)?;
            print!("{line}");
            flush();
            if let Some(h) = h {
                histograms.push((size, h));
            }
        }
    }
    if server_reports {
        print_footer(cfg, histograms);
    }
    if cfg.baseline {
        server_baseline(cfg, &mut conn, me.mtu.bytes(), pump)?;
    }
    Ok(())
}

/// The datagrams of the raw UDP baseline of one size: as many bytes as the test
/// moved, one MTU of payload per datagram.
fn udp_count(cfg: &PerfConfig, size: u64, mtu: u32) -> u64 {
    (cfg.iters * u64::from(cfg.qps) * size).div_ceil(u64::from(mtu))
}

/// The client's baselines: a TCP ping-pong with the server over the rendezvous
/// connection (latency), raw UDP to the server's NIC address (bandwidth).
fn client_baseline(
    cfg: &PerfConfig,
    conn: &mut Conn,
    figures: &[Figure],
    mtu: u32,
    pump: &dyn Fn(),
) -> Result<(), CliError> {
    let mut base = Vec::new();
    for f in figures {
        conn.sync("baseline", pump)?;
        base.push(match f {
            Figure::Lat(r) => {
                let stamps = conn.with_stream(|rd, wr| {
                    baseline::tcp_ping(rd, wr, r.bytes as usize, cfg.iters)
                })?;
                Figure::Lat(lat_report(cfg, r.bytes, &stamps)?)
            }
            Figure::Bw(r) => {
                let line = conn.recv(pump)?;
                let to: SocketAddr = line
                    .strip_prefix("udp ")
                    .and_then(|a| a.parse().ok())
                    .ok_or_else(|| {
                        CliError::runtime_msg(format!("baseline: the server sent {line:?}"))
                    })?;
                let size = baseline::roce_datagram(mtu);
                baseline::udp_send(cfg.net.ip, to, size, udp_count(cfg, r.bytes, mtu))?;
                let line = conn.recv(pump)?;
                let got: Vec<u64> = line
                    .strip_prefix("received ")
                    .unwrap_or("")
                    .split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect();
                let [datagrams, span_ns] = got[..] else {
                    return Err(CliError::runtime_msg(format!(
                        "baseline: the server sent {line:?}"
                    )));
                };
                Figure::Bw(baseline::udp_report(
                    size,
                    baseline::UdpReceived { datagrams, span_ns },
                ))
            }
        });
    }
    let title = match cfg.test.mode {
        Mode::Lat => format!(
            "TCP ping-pong between the two processes over their rendezvous connection ({}, \
             TCP_NODELAY), same sizes and iterations",
            conn.peer
        ),
        Mode::Bw => format!(
            "raw UDP from {} to the server's NIC address, {}-byte datagrams (BTH, {mtu} bytes \
             of payload, ICRC), as many bytes as the test moved, counted at the receiver",
            cfg.net.ip,
            baseline::roce_datagram(mtu)
        ),
    };
    print_baseline(cfg, &title, figures, &base);
    Ok(())
}

/// The server's side of the baselines: echoes the TCP ping-pong, or receives the raw
/// UDP stream and reports what arrived.
fn server_baseline(
    cfg: &PerfConfig,
    conn: &mut Conn,
    mtu: u32,
    pump: &dyn Fn(),
) -> Result<(), CliError> {
    for &size in &cfg.sizes {
        conn.sync("baseline", pump)?;
        match cfg.test.mode {
            Mode::Lat => {
                conn.with_stream(|rd, wr| baseline::tcp_pong(rd, wr, size as usize, cfg.iters))?;
            }
            Mode::Bw => {
                let sock = baseline::udp_receiver(cfg.net.ip)?;
                let at = sock
                    .local_addr()
                    .map_err(|e| CliError::runtime("baseline: UDP address", e))?;
                conn.send(&format!("udp {at}"))?;
                let dsize = baseline::roce_datagram(mtu);
                let r = baseline::udp_receive(&sock, dsize, udp_count(cfg, size, mtu))?;
                conn.send(&format!("received {} {}", r.datagrams, r.span_ns))?;
            }
        }
    }
    Ok(())
}

fn options_error(diff: &str) -> CliError {
    CliError::setup_msg(format!(
        "the server and the client must run the same test with the same options: {diff}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn qp_lines_round_trip() {
        let gid = gid_for(Ipv4Addr::new(127, 0, 0, 2));
        let r = RemoteAddr {
            addr: 0x7f00_1234_5000,
            rkey: 0xabcd,
        };
        let l = qp_line(0x108, 0x3e5b4c, r, &gid);
        assert_eq!(
            l,
            "0000:000108:3e5b4c:0000abcd:00007f0012345000:00000000000000000000ffff7f000002"
        );
        let (qpn, psn, rr, g) = parse_qp_line(&l).unwrap();
        assert_eq!(
            (qpn, psn, rr.addr, rr.rkey, g),
            (0x108, 0x3e5b4c, r.addr, r.rkey, gid)
        );
        assert!(parse_qp_line("0000:000108").is_err());
        assert!(parse_qp_line(
            "0000:zz0108:3e5b4c:0000abcd:00007f0012345000:00000000000000000000ffff7f000002"
        )
        .is_err());
    }

    #[test]
    fn option_differences_are_named() {
        let a = "ferroverbs-perf/1 test=send-lat sizes=2 iters=1000";
        let b = "ferroverbs-perf/1 test=send-lat sizes=2 iters=50";
        assert_eq!(options_diff(a, b), "server iters=1000, client iters=50");
        assert!(options_diff(a, "hello").contains("speaks"));
    }

    /// Both sides must use one ACK timeout: each side's stall limit
    /// (`runner::stall_limit`) then covers the peer's recoveries too.
    #[test]
    fn the_qp_timeout_is_a_shared_option() {
        use crate::cli::args::{Cli, Command};
        use clap::Parser;
        let line = |extra: &[&str]| {
            let argv = ["ferroverbs", "perf", "send-lat", "--server"]
                .iter()
                .chain(extra);
            let Command::Perf { test } = Cli::try_parse_from(argv).unwrap().command else {
                unreachable!()
            };
            let (id, a) = test.split();
            options_line(&PerfConfig::new(id, a).unwrap())
        };
        let (default, long) = (line(&[]), line(&["-u", "20"]));
        assert!(default.ends_with(" qp_timeout=14"), "{default}");
        assert_eq!(
            options_diff(&default, &long),
            "server qp_timeout=14, client qp_timeout=20"
        );
    }
}
