//! The measurements, as perftest makes them, on two endpoints: two simulated NICs on
//! an in-process fabric (`--device sim`), or two QPs of one ConnectX looped back
//! through its own port (`--device vfio:BDF`).
//!
//! perftest runs the two sides in two processes (so does `--server`/`--client`, see
//! [`super::remote`], which reuses the measuring loops here); in one process one
//! thread runs both: it posts
//! the client's requests and plays the server (answering pings, reposting receives)
//! between polls. What is measured is perftest's: the client's post stamps (latency)
//! and its post and completion stamps (bandwidth).
//!
//! How the simulated NICs make progress (`--sim-mode`):
//!
//! * `deterministic` (the default): no device thread; a send doorbell is serviced on
//!   the posting thread, and the tool steps the fabric whenever a poll finds nothing,
//!   so the devices process the frames waiting for them on the same thread. One core,
//!   no hand-off between threads.
//! * `threaded`: each NIC has its own device thread that processes received frames
//!   and timers; the tool only posts and polls, as an application on hardware does.
//!   With the tool's thread and two device threads, this needs three cores to shine;
//!   on two cores the threads take turns.
//!
//! Measured on the development machine (2 cores shared with builds, load average
//! about 6; `cargo run --release -- perf <test> --sim-mode <mode>`, defaults
//! otherwise), deterministic against threaded:
//!
//! | test | deterministic | threaded |
//! |---|---|---|
//! | send-lat, 2 B, t_typical | 1.76 us | 14.1 us |
//! | write-lat, 2 B, t_typical | 1.58 us | 5989 us |
//! | read-lat, 2 B, t_typical | 1.74 us | 3930 us |
//! | write-bw, 64 KiB, BW average | 807 MiB/s | 113 MiB/s |
//! | write-bw, 64 B (`-n 200000`), MsgRate | 0.51 Mpps | 0.025 Mpps |
//!
//! With more threads than cores, the device threads' back-off (spin, yield, park for
//! up to 10 ms) dominates the threaded figures; the deterministic mode is the default.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use ferroverbs::verbs::{
    AccessFlags, AddressVector, CompletionChannel, CompletionQueue, MemoryRegion, Pd, QpCap,
    QpInitAttr, QueuePair, RecvWr, RemoteAddr, RtrAttr, RtsAttr, SendWr, Sge, WcOpcode,
    WorkCompletion,
};
use ferroverbs::{Context, DeviceSpec, GidEntry, LinkLayer, Mtu};
use ferroverbs_hw::Bus;
use ferroverbs_sim::{Fabric, SimConfig};

use super::baseline;
use super::config::{Inline, Mode, PerfConfig, SimMode, Verb};
use super::events::{wait_readable, EventChannel, EVENT_WAIT};
use super::histogram::Histogram;
use super::progress::Progress;
use super::report::{self, Address, TestInfo, RESULT_LINE};
use super::stats::{bw_report, rtt_factor, BwReport, LatencyReport, LatencySamples};
use crate::cli::args::AtomicType;
use crate::cli::device::{
    link_local, open_sim_with, open_vfio, sim_config, sim_udp_unsupported, SIM_IPV4_GID_INDEX,
};
use crate::cli::error::CliError;

/// A test that makes no progress for this long fails (exit code 1), on top of the
/// time the transport may take to recover a lost packet or give up ([`stall_limit`]).
pub const STALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a test may make no progress before it fails: [`STALL_TIMEOUT`] beyond the
/// whole retry budget of the QPs' ACK timer, (`retry_cnt` + 1) expiries of 4.096 µs ×
/// 2^`qp_timeout` (none with `qp_timeout` 0, no timer). A lost packet that nothing
/// follows is recovered by the timer alone, and a QP that runs the budget out
/// completes its request with a retry error, which is reported as such: the stall
/// detector never fails a test that the transport may still recover, nor hides the
/// transport's own verdict. (14: 10.5 s; 23: 285 s.)
pub fn stall_limit(qp_timeout: u8) -> Duration {
    let expiries = u32::from(RtsAttr::new(0).retry_cnt) + 1;
    let timer = match qp_timeout {
        0 => Duration::ZERO,
        t => Duration::from_nanos(4096 << t.min(31)),
    };
    STALL_TIMEOUT + timer * expiries
}

/// Empty polls between two looks at the clock for the stall timeout.
const STALL_CHECK_MASK: u64 = 0xffff;

/// Completions taken per poll.
pub(super) const POLL_BATCH: usize = 16;

/// Bits of a `wr_id` below the QP index.
pub(super) const WR_QP_SHIFT: u32 = 40;

/// What the peer needs to reach one endpoint.
#[derive(Clone, Copy, Debug)]
pub struct Endpoint {
    /// Its GID.
    pub gid: [u8; 16],
    /// Its MAC address.
    pub mac: [u8; 6],
    /// The index of that GID in its table.
    pub gid_index: u8,
    /// The port's active MTU.
    pub mtu: Mtu,
    /// Link layer.
    pub link: LinkLayer,
}

/// What the test-information block shows about the setup.
#[derive(Clone, Debug)]
pub(super) struct Setup {
    /// The device name shown.
    pub(super) device: String,
    /// How the sides are connected (perftest's "Data ex. method").
    pub(super) exchange: String,
}

/// Runs the test on the device of `cfg`.
pub fn run(cfg: &PerfConfig) -> Result<(), CliError> {
    match cfg.device {
        DeviceSpec::Sim => run_sim(cfg),
        DeviceSpec::SimUdp(a) => Err(sim_udp_unsupported(a)),
        DeviceSpec::Vfio(bdf) => {
            let nic = open_vfio(&bdf)?;
            let port = nic
                .ctx
                .query_port(1)
                .map_err(|e| CliError::setup("querying port 1", e))?;
            // A link-local RoCE v2 GID of the port's MAC, both QPs looped back.
            nic.ctx
                .set_gid(1, GidEntry::ipv6(0, link_local(port.mac), port.mac))
                .map_err(|e| CliError::setup("programming GID 0 of port 1", e))?;
            let ep = Endpoint {
                gid: link_local(port.mac),
                mac: port.mac,
                gid_index: 0,
                mtu: port.active_mtu,
                link: port.link_layer,
            };
            let setup = Setup {
                device: bdf.to_string(),
                exchange: "loopback through port 1 (both QPs in this process)".into(),
            };
            let r = bench(cfg, &setup, (&nic.ctx, ep), (&nic.ctx, ep), &|| {});
            let c = nic
                .ctx
                .close()
                .map_err(|e| CliError::runtime("closing the device", e));
            r.and(c)
        }
    }
}

fn sim_cfg(index: u8, mode: SimMode) -> SimConfig {
    SimConfig {
        // Real time: the transport's timers run on the clock the tool measures with.
        virtual_time: false,
        mode: match mode {
            SimMode::Deterministic => ferroverbs_sim::Mode::Deterministic,
            SimMode::Threaded => ferroverbs_sim::Mode::Threaded,
        },
        ..sim_config(index)
    }
}

fn sim_endpoint<B: Bus>(ctx: &Context<B>, name: &str) -> Result<Endpoint, CliError> {
    let port = ctx
        .query_port(1)
        .map_err(|e| CliError::setup(format!("querying port 1 of {name}"), e))?;
    let gid = ctx
        .query_gid(1, SIM_IPV4_GID_INDEX)
        .map_err(|e| CliError::setup(format!("reading the GID table of {name}"), e))?;
    Ok(Endpoint {
        gid: gid.gid,
        mac: port.mac,
        gid_index: SIM_IPV4_GID_INDEX as u8,
        mtu: port.active_mtu,
        link: port.link_layer,
    })
}

fn run_sim(cfg: &PerfConfig) -> Result<(), CliError> {
    let a = open_sim_with(0, sim_cfg(0, cfg.sim_mode))?;
    let b = open_sim_with(1, sim_cfg(1, cfg.sim_mode))?;
    let fabric = Fabric::new(0xfe77);
    fabric.attach(&a.sim);
    fabric.attach(&b.sim);
    let ea = sim_endpoint(&a.ctx, &a.name)?;
    let eb = sim_endpoint(&b.ctx, &b.name)?;
    let setup = Setup {
        device: format!("{} <-> {}", a.name, b.name),
        exchange: match cfg.sim_mode {
            SimMode::Deterministic => "in-process fabric, deterministic (stepped by the tool)",
            SimMode::Threaded => "in-process fabric, threaded (a thread per NIC)",
        }
        .into(),
    };
    let r = match cfg.sim_mode {
        SimMode::Deterministic => bench(cfg, &setup, (&a.ctx, ea), (&b.ctx, eb), &|| {
            fabric.step();
        }),
        SimMode::Threaded => bench(cfg, &setup, (&a.ctx, ea), (&b.ctx, eb), &|| {
            std::hint::spin_loop();
        }),
    };
    let ca = a
        .ctx
        .close()
        .map_err(|e| CliError::runtime("closing sim0", e));
    let cb = b
        .ctx
        .close()
        .map_err(|e| CliError::runtime("closing sim1", e));
    r.and(ca).and(cb)
}

pub(super) fn setup_err<E: std::error::Error + Send + Sync + 'static>(
    what: &str,
) -> impl FnOnce(E) -> CliError + '_ {
    move |e| CliError::setup(what.to_string(), e)
}

/// One side's objects.
pub(super) struct Side<'s, 'c, 'p, B: Bus> {
    pub(super) name: &'static str,
    pub(super) qps: &'s mut [QueuePair<'p, B>],
    pub(super) cq: &'s mut CompletionQueue<'c, B>,
    /// The memory regions: one for every QP, or one per QP (`--mr_per_qp`, QP `q`'s
    /// at index `q`). Never empty.
    pub(super) mrs: &'s [MemoryRegion<'p, B>],
    /// Bytes of each half of a region: `[0, half)` is sent from, `[half, 2 half)`
    /// is received into and is the peer's RDMA target.
    pub(super) half: usize,
    /// The peer's receive halves: the targets of this side's RDMA requests, one for
    /// every QP or one per QP (QP `q`'s at index `q`). Never empty.
    pub(super) peers: Vec<RemoteAddr>,
    /// The completion channel of the CQ (`-e`).
    pub(super) events: Option<&'s dyn EventChannel<B>>,
    /// How long to sleep for an event: [`EVENT_WAIT`] when device threads make
    /// progress, zero when only `pump` does (deterministic simulator).
    pub(super) event_wait: Duration,
}

/// The event sleep of a side whose devices run `threaded` or not.
pub(super) fn event_wait(threaded: bool) -> Duration {
    if threaded {
        EVENT_WAIT
    } else {
        Duration::ZERO
    }
}

/// Nothing moved: with polling, let the devices progress (`pump`); with events, arm
/// the CQs, let the devices progress, and sleep until a completion event (see
/// [`super::events`]).
fn wait<B: Bus>(
    a: &mut Side<'_, '_, '_, B>,
    mut b: Option<&mut Side<'_, '_, '_, B>>,
    pump: &dyn Fn(),
) {
    let Some(ea) = a.events else {
        pump();
        return;
    };
    let eb = b.as_deref().and_then(|b| b.events);
    a.cq.req_notify(false);
    if let (Some(b), Some(_)) = (b.as_deref_mut(), eb) {
        b.cq.req_notify(false);
    }
    pump();
    let mut fds = vec![ea.event_fd()];
    fds.extend(eb.map(|e| e.event_fd()));
    wait_readable(&fds, a.event_wait);
    ea.take_events(a.cq);
    if let (Some(b), Some(eb)) = (b, eb) {
        eb.take_events(b.cq);
    }
}

/// Entry `q` of a list with one entry per QP, or its only entry when all QPs share it.
#[inline]
pub(super) fn of_qp<T>(v: &[T], q: usize) -> &T {
    v.get(q).unwrap_or(&v[0])
}

impl<'p, B: Bus> Side<'_, '_, 'p, B> {
    /// The memory region of QP 0 (the latency tests' only QP).
    pub(super) fn mr(&self) -> &MemoryRegion<'p, B> {
        &self.mrs[0]
    }

    /// The RDMA target of QP 0.
    pub(super) fn peer(&self) -> RemoteAddr {
        self.peers[0]
    }

    pub(super) fn send_sge(&self, size: u64) -> Sge {
        self.send_sge_of(0, size)
    }

    pub(super) fn recv_sge(&self) -> Sge {
        self.recv_sge_of(0)
    }

    /// The send buffer of QP `q`.
    pub(super) fn send_sge_of(&self, q: usize, size: u64) -> Sge {
        of_qp(self.mrs, q)
            .sge(0, size as u32)
            .expect("the send half holds the largest message")
    }

    /// The receive buffer of QP `q`.
    pub(super) fn recv_sge_of(&self, q: usize) -> Sge {
        of_qp(self.mrs, q)
            .sge(self.half, self.half as u32)
            .expect("the receive half is in the region")
    }

    /// The receive buffers, one per memory region (for [`poll_side`]).
    pub(super) fn recv_sges(&self) -> Vec<[Sge; 1]> {
        (0..self.mrs.len()).map(|i| [self.recv_sge_of(i)]).collect()
    }
}

/// A clock in nanoseconds since the start of the test.
struct Stamp(Instant);

impl Stamp {
    #[inline]
    fn ns(&self) -> u64 {
        self.0.elapsed().as_nanos() as u64
    }
}

/// Fails a test that stops making progress.
struct Stall {
    empty: u64,
    since: Option<Instant>,
    /// Empty rounds between two looks at the clock, minus one.
    mask: u64,
    /// How long without progress fails the test ([`stall_limit`]).
    limit: Duration,
}

impl Stall {
    /// The stall detector of a test with `cfg`; in event mode each empty round
    /// sleeps, so the clock is read every time.
    fn new(cfg: &PerfConfig) -> Self {
        Stall {
            empty: 0,
            since: None,
            mask: if cfg.events { 0 } else { STALL_CHECK_MASK },
            limit: stall_limit(cfg.qp_timeout),
        }
    }

    #[inline]
    fn progress(&mut self) {
        self.empty = 0;
        self.since = None;
    }

    #[inline]
    fn idle(&mut self, what: &dyn Fn() -> String) -> Result<(), CliError> {
        self.empty += 1;
        if self.empty & self.mask != 0 {
            return Ok(());
        }
        let now = Instant::now();
        match self.since {
            None => self.since = Some(now),
            Some(t) if now.duration_since(t) > self.limit => {
                return Err(CliError::runtime_msg(format!(
                    "no progress for {:.1} s: {}",
                    self.limit.as_secs_f64(),
                    what()
                )))
            }
            Some(_) => {}
        }
        Ok(())
    }
}

fn wc_error(side: &str, wc: &WorkCompletion) -> CliError {
    CliError::runtime_msg(format!(
        "{side}: work request {:#x} on QP {:#x} completed with {:?} (opcode {:?}, vendor \
         syndrome {:#04x})",
        wc.wr_id, wc.qp_num, wc.status, wc.opcode, wc.vendor_err
    ))
}

pub(super) fn post_error(
    side: &str,
    what: &str,
    e: impl std::error::Error + Send + Sync + 'static,
) -> CliError {
    CliError::runtime(format!("{side}: posting {what}"), e)
}

/// An empty vector with room for `n` clock stamps whose memory is written once
/// before the test starts, as perftest clears its `tposted` and `tcompleted` arrays
/// (`memset` in `alloc_ctx`): stamps taken during the test would otherwise pay a
/// page fault for each new page of the array, a cost that belongs to no message and
/// that grows with the number of messages, not with the work done for each.
pub(super) fn stamp_array(n: usize) -> Vec<u64> {
    let mut v = vec![u64::MAX; n];
    // The pages stay mapped when the vector is emptied: its capacity is kept.
    std::hint::black_box(&mut v).clear();
    v
}

/// The PSN a QP starts with (perftest draws a random 24-bit one; any value works).
pub(super) fn initial_psn(qpn: u32) -> u32 {
    qpn.wrapping_mul(0x9e37_79b1) >> 8
}

pub(super) fn alloc_mr<'p, B: Bus>(
    pd: &'p Pd<'_, B>,
    len: usize,
    access: AccessFlags,
) -> Result<MemoryRegion<'p, B>, CliError> {
    pd.alloc_mr(len, access)
        .map_err(setup_err("registering memory"))
}

/// The memory regions of one side: one of `len` bytes for all its QPs, or one per QP
/// with `--mr_per_qp` (perftest's `create_mr`: a buffer and a region per QP). Returns
/// them with the time their allocation and registration took.
pub(super) fn alloc_mrs<'p, B: Bus>(
    cfg: &PerfConfig,
    pd: &'p Pd<'_, B>,
    len: usize,
) -> Result<(Vec<MemoryRegion<'p, B>>, Duration), CliError> {
    let n = if cfg.mr_per_qp { cfg.qps as usize } else { 1 };
    let mut mrs = Vec::with_capacity(n);
    let t = Instant::now();
    for _ in 0..n {
        mrs.push(alloc_mr(pd, len, test_access())?);
    }
    Ok((mrs, t.elapsed()))
}

/// The stderr line of `--mr_per_qp`: how long registering the regions took, in all
/// and per region (`benches/scale.sh` reads it).
pub(super) fn mr_time_line(side: &str, n: usize, len: usize, took: Duration) -> String {
    format!(
        "ferroverbs: {side}: registered {n} memory regions of {len} bytes in {:.3} ms ({:.2} \
         us each)",
        took.as_secs_f64() * 1e3,
        took.as_secs_f64() * 1e6 / n.max(1) as f64
    )
}

fn create_qp<'p, 'c, B: Bus>(
    pd: &'p Pd<'c, B>,
    cq: &CompletionQueue<'c, B>,
    cap: QpCap,
) -> ferroverbs::verbs::Result<QueuePair<'p, B>> {
    let a = QpInitAttr::new(cq, cq, cap);
    // `MLX5_SCATTER_TO_CQE`, for comparisons: "0" as libmlx5 reads it (no scatter to
    // CQE), any other value scatter to CQE whatever the bus's default (off on the
    // simulator, on over VFIO: `Bus::scatter_to_cqe_pays`); unset, the default.
    let a = match std::env::var_os("MLX5_SCATTER_TO_CQE") {
        Some(v) if v == "0" => a.without_scatter_to_cqe(),
        Some(_) => a.with_scatter_to_cqe(),
        None => a,
    };
    pd.create_qp(&a)
}

/// The RDMA READ/atomic depth both sides of a connection use (`max_rd_atomic`).
pub(super) fn rd_atom_depth(dev: &ferroverbs::DeviceAttr) -> u8 {
    dev.max_qp_rd_atom
        .min(dev.max_qp_init_rd_atom)
        .clamp(1, 255) as u8
}

/// The access rights of every test's memory region and QPs.
pub(super) fn test_access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
}

/// Sizes of one side's queues and buffers, the same on both sides of a test.
#[derive(Clone, Copy, Debug)]
pub(super) struct Dims {
    /// Receive requests kept posted per QP.
    pub(super) recv_depth: u32,
    /// Send queue depth per QP.
    pub(super) send_depth: u32,
    /// CQ entries.
    pub(super) cqe: u32,
    /// Bytes of each half of the memory region.
    pub(super) half: usize,
}

impl Dims {
    /// The sizes for `cfg` on a device with attributes `dev`; fails if a message
    /// cannot fit.
    pub(super) fn new(cfg: &PerfConfig, dev: &ferroverbs::DeviceAttr) -> Result<Dims, CliError> {
        let max_size = cfg.max_size();
        if max_size > dev.max_msg_sz {
            return Err(CliError::setup_msg(format!(
                "a message of {max_size} bytes exceeds the device's max_msg_sz of {}",
                dev.max_msg_sz
            )));
        }
        let recv_depth = if cfg.test.has_recv() { cfg.rx_depth } else { 1 };
        // The SQ holds the TX depth plus room for completions not yet polled.
        let send_depth = cfg.tx_depth.max(16);
        let cqe = (cfg.qps as u64 * u64::from(send_depth + recv_depth) + 64)
            .min(u64::from(dev.max_cqe)) as u32;
        Ok(Dims {
            recv_depth,
            send_depth,
            cqe,
            half: (max_size as usize).max(64).next_multiple_of(64),
        })
    }

    /// The QP capabilities asked for (the inline size before the device's answer).
    pub(super) fn cap(&self, cfg: &PerfConfig) -> QpCap {
        QpCap {
            max_send_wr: self.send_depth,
            max_recv_wr: self.recv_depth,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: cfg.inline.bytes(),
        }
    }
}

/// Creates `cfg.qps` QPs on `pd` and `cq`; perftest's default inline size is turned
/// off where the device has none. Returns the QPs and the inline size granted.
pub(super) fn create_qps<'p, 'c, B: Bus>(
    cfg: &PerfConfig,
    pd: &'p Pd<'c, B>,
    cq: &CompletionQueue<'c, B>,
    mut cap: QpCap,
) -> Result<(Vec<QueuePair<'p, B>>, u32), CliError> {
    let mut qps = Vec::with_capacity(cfg.qps as usize);
    for _ in 0..cfg.qps {
        let q = match create_qp(pd, cq, cap) {
            Ok(q) => q,
            Err(_) if matches!(cfg.inline, Inline::Default(n) if n > 0) && qps.is_empty() => {
                cap.max_inline_data = 0;
                create_qp(pd, cq, cap).map_err(setup_err("creating a QP"))?
            }
            Err(e) => {
                return Err(CliError::setup(
                    format!(
                        "creating QP {} of {} (TX depth {}, inline {})",
                        qps.len() + 1,
                        cfg.qps,
                        cap.max_send_wr,
                        cap.max_inline_data
                    ),
                    e,
                ))
            }
        };
        qps.push(q);
    }
    Ok((qps, cap.max_inline_data))
}

/// What one QP needs to know about its peer QP.
#[derive(Clone, Copy, Debug)]
pub(super) struct PeerQp {
    /// The peer's endpoint (GID, MAC).
    pub(super) ep: Endpoint,
    /// Its QP number.
    pub(super) qpn: u32,
    /// Its first PSN.
    pub(super) psn: u32,
}

/// Moves `q` (first PSN `my_psn`) through INIT, RTR and RTS towards `peer`, with the
/// local ACK timeout exponent `qp_timeout` (`--qp-timeout`).
pub(super) fn connect_qp<B: Bus>(
    q: &mut QueuePair<'_, B>,
    me: &Endpoint,
    peer: &PeerQp,
    my_psn: u32,
    mtu: Mtu,
    (rd_atom, qp_timeout): (u8, u8),
) -> Result<(), CliError> {
    q.to_init(1, test_access())
        .map_err(setup_err("QP RESET->INIT"))?;
    q.to_rtr(&RtrAttr {
        av: AddressVector::new(peer.ep.gid, peer.ep.mac, me.gid_index),
        path_mtu: mtu,
        dest_qpn: peer.qpn,
        rq_psn: peer.psn,
        max_dest_rd_atomic: rd_atom,
        min_rnr_timer: 12,
    })
    .map_err(setup_err("QP INIT->RTR"))?;
    q.to_rts(&RtsAttr {
        max_rd_atomic: rd_atom,
        timeout: qp_timeout,
        ..RtsAttr::new(my_psn)
    })
    .map_err(setup_err("QP RTR->RTS"))?;
    Ok(())
}

/// Prints perftest's notes, the test-information block, the address lines and (with
/// `columns`) the column header.
#[allow(clippy::too_many_arguments)]
pub(super) fn print_header(
    cfg: &PerfConfig,
    setup: &Setup,
    ep: &Endpoint,
    mtu: Mtu,
    inline: u32,
    rd_atom: u8,
    addrs: &str,
    columns: bool,
) {
    for n in &cfg.notes {
        println!("{RESULT_LINE}");
        println!("{n}");
    }
    let info = TestInfo {
        device: setup.device.clone(),
        link_type: match ep.link {
            LinkLayer::Ethernet => "Ethernet".into(),
            LinkLayer::InfiniBand => "IB".into(),
        },
        mtu: mtu.bytes(),
        inline,
        gid_index: u16::from(ep.gid_index),
        out_reads: u32::from(rd_atom),
        exchange: setup.exchange.clone(),
    };
    print!("{}", report::test_info(cfg, &info));
    print!("{addrs}");
    println!("{RESULT_LINE}");
    if columns {
        print!("{}", report::header(cfg.test.mode));
    }
    flush();
}

/// Posts the receive requests every QP of `side` keeps (SEND tests).
pub(super) fn post_initial_recvs<B: Bus>(
    cfg: &PerfConfig,
    side: &mut Side<'_, '_, '_, B>,
    depth: u32,
) -> Result<(), CliError> {
    if !cfg.test.has_recv() {
        return Ok(());
    }
    let sges = side.recv_sges();
    for (q, qp) in side.qps.iter_mut().enumerate() {
        let sge = of_qp::<[Sge; 1]>(&sges, q);
        for _ in 0..depth {
            qp.post_recv(&[RecvWr::new((q as u64) << WR_QP_SHIFT, sge)])
                .map_err(|e| CliError::setup("posting receive requests", e))?;
        }
    }
    Ok(())
}

/// Creates a completion channel (`-e`).
pub(super) fn create_channel<B: Bus>(
    ctx: &Context<B>,
) -> Result<CompletionChannel<'_, B>, CliError> {
    ctx.create_comp_channel()
        .map_err(setup_err("creating a completion channel (-e)"))
}

/// Creates the test's CQ, on `channel` if there is one (`-e`).
pub(super) fn create_cq<'c, B: Bus>(
    ctx: &'c Context<B>,
    channel: Option<&'c CompletionChannel<'c, B>>,
    cqe: u32,
) -> Result<CompletionQueue<'c, B>, CliError> {
    match channel {
        Some(ch) => ch.create_cq(cqe),
        None => ctx.create_cq(cqe),
    }
    .map_err(setup_err("creating a CQ"))
}

/// Creates both sides, connects the QP pairs, prints the header and runs every size.
fn bench<B: Bus>(
    cfg: &PerfConfig,
    setup: &Setup,
    (ctx_a, ep_a): (&Context<B>, Endpoint),
    (ctx_b, ep_b): (&Context<B>, Endpoint),
    pump: &dyn Fn(),
) -> Result<(), CliError> {
    // Whether devices progress without `pump` (hardware, threaded simulator).
    let threaded = !(cfg.device == DeviceSpec::Sim && cfg.sim_mode == SimMode::Deterministic);
    let dev = ctx_a
        .query_device()
        .map_err(setup_err("querying the device"))?;
    let rd_atom = rd_atom_depth(&dev);
    let mtu = ep_a.mtu.min(ep_b.mtu);
    let dims = Dims::new(cfg, &dev)?;
    let half = dims.half;

    let pd_a = ctx_a.alloc_pd().map_err(setup_err("allocating a PD"))?;
    let pd_b = ctx_b.alloc_pd().map_err(setup_err("allocating a PD"))?;
    let (ch_a, ch_b) = if cfg.events {
        (Some(create_channel(ctx_a)?), Some(create_channel(ctx_b)?))
    } else {
        (None, None)
    };
    let mut cq_a = create_cq(ctx_a, ch_a.as_ref(), dims.cqe)?;
    let mut cq_b = create_cq(ctx_b, ch_b.as_ref(), dims.cqe)?;
    let (mrs_a, took_a) = alloc_mrs(cfg, &pd_a, 2 * half)?;
    let (mrs_b, took_b) = alloc_mrs(cfg, &pd_b, 2 * half)?;
    if cfg.mr_per_qp {
        eprintln!("{}", mr_time_line("client", mrs_a.len(), 2 * half, took_a));
        eprintln!("{}", mr_time_line("server", mrs_b.len(), 2 * half, took_b));
    }

    let (mut qps_a, inline) = create_qps(cfg, &pd_a, &cq_a, dims.cap(cfg))?;
    let cap_b = QpCap {
        max_inline_data: inline,
        ..dims.cap(cfg)
    };
    let (mut qps_b, _) = create_qps(cfg, &pd_b, &cq_b, cap_b)?;
    let mut addrs = String::new();
    for (q, (qa, qb)) in qps_a.iter_mut().zip(qps_b.iter_mut()).enumerate() {
        let (mr_a, mr_b) = (of_qp(&mrs_a, q), of_qp(&mrs_b, q));
        let (na, nb) = (qa.qp_num(), qb.qp_num());
        let (pa, pb) = (initial_psn(na), initial_psn(nb));
        let peer_a = PeerQp {
            ep: ep_a,
            qpn: na,
            psn: pa,
        };
        let peer_b = PeerQp {
            ep: ep_b,
            qpn: nb,
            psn: pb,
        };
        let limits = (rd_atom, cfg.qp_timeout);
        connect_qp(qa, &ep_a, &peer_b, pa, mtu, limits)?;
        connect_qp(qb, &ep_b, &peer_a, pb, mtu, limits)?;
        let rdma = cfg.test.verb != Verb::Send;
        let out = cfg.test.one_sided_request().then_some(u32::from(rd_atom));
        let la = Address {
            qpn: na,
            psn: pa,
            gid: ep_a.gid,
            remote: rdma.then(|| (mr_a.rkey(), mr_a.remote(half).addr)),
        };
        let lb = Address {
            qpn: nb,
            psn: pb,
            gid: ep_b.gid,
            remote: rdma.then(|| (mr_b.rkey(), mr_b.remote(half).addr)),
        };
        addrs.push_str(&report::addresses(&la, &lb, out));
    }
    print_header(cfg, setup, &ep_a, mtu, inline, rd_atom, &addrs, true);

    let mut a = Side {
        name: "client",
        qps: &mut qps_a,
        cq: &mut cq_a,
        mrs: &mrs_a,
        half,
        peers: mrs_b.iter().map(|m| m.remote(half)).collect(),
        events: ch_a.as_ref().map(|c| c as &dyn EventChannel<B>),
        event_wait: event_wait(threaded),
    };
    let mut b = Side {
        name: "server",
        qps: &mut qps_b,
        cq: &mut cq_b,
        mrs: &mrs_b,
        half,
        peers: mrs_a.iter().map(|m| m.remote(half)).collect(),
        events: ch_b.as_ref().map(|c| c as &dyn EventChannel<B>),
        event_wait: event_wait(threaded),
    };
    // Receive requests stay posted across sizes (each the size of the largest).
    post_initial_recvs(cfg, &mut a, dims.recv_depth)?;
    post_initial_recvs(cfg, &mut b, dims.recv_depth)?;
    let figures = run_sizes(cfg, inline, &mut a, Some(&mut b), pump, &mut |_| Ok(()))?;
    if cfg.baseline {
        local_baseline(cfg, &figures)?;
    }
    Ok(())
}

/// Where a measurement stands, for the other process of a cross-process test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SyncPoint {
    /// Both sides are ready for the next size (receive areas cleared).
    Start,
    /// The side has finished the size.
    End,
}

/// Runs every size of the test with `a` measuring and `b` (if in this process)
/// answering, prints one result line per size, the closing line and the histograms.
/// `sync` keeps a peer in another process in step (called before and after each size).
pub(super) fn run_sizes<B: Bus>(
    cfg: &PerfConfig,
    inline: u32,
    a: &mut Side<'_, '_, '_, B>,
    mut b: Option<&mut Side<'_, '_, '_, B>>,
    pump: &dyn Fn(),
    sync: &mut dyn FnMut(SyncPoint) -> Result<(), CliError>,
) -> Result<Vec<Figure>, CliError> {
    let mut histograms = Vec::new();
    let mut figures = Vec::new();
    for &size in &cfg.sizes {
        if cfg.test.verb == Verb::Write && cfg.test.mode == Mode::Lat {
            // Fresh receive areas: the byte polled starts at 0, and every value sent
            // is not.
            let last = size as usize - 1;
            a.mr().fill(a.half + last, 1, 0);
            if let Some(b) = b.as_deref() {
                b.mr().fill(b.half + last, 1, 0);
            }
        }
        sync(SyncPoint::Start)?;
        let line = match cfg.test.mode {
            Mode::Lat => {
                let stamps = match cfg.test.verb {
                    Verb::Send => send_lat(cfg, size, inline, a, b.as_deref_mut(), pump)?,
                    Verb::Write => write_lat(cfg, size, inline, a, b.as_deref_mut(), pump)?,
                    Verb::Read | Verb::Atomic => one_sided_lat(cfg, size, a, pump)?,
                };
                let (line, h) = lat_result(cfg, size, &stamps)?;
                if let Some(h) = h {
                    histograms.push((size, h));
                }
                figures.push(Figure::Lat(lat_report(cfg, size, &stamps)?));
                line
            }
            Mode::Bw => {
                let (p, c) = bw(cfg, size, inline, a, b.as_deref_mut(), pump)?;
                let r = bw_report(size, &p, &c, cfg.post_list as usize, cfg.cq_mod as usize)
                    .map_err(|e| CliError::runtime("computing the bandwidth", e))?;
                figures.push(Figure::Bw(r));
                report::bw_line(&r)
            }
        };
        sync(SyncPoint::End)?;
        print!("{line}");
        flush();
    }
    print_footer(cfg, histograms);
    Ok(figures)
}

/// The headline result of one size, for the baseline comparison.
#[derive(Clone, Copy, Debug)]
pub(super) enum Figure {
    /// A latency test's statistics.
    Lat(LatencyReport),
    /// A bandwidth test's line.
    Bw(BwReport),
}

/// The latency statistics of `stamps`.
pub(super) fn lat_report(
    cfg: &PerfConfig,
    size: u64,
    stamps: &[u64],
) -> Result<LatencyReport, CliError> {
    LatencySamples::from_stamps(stamps, rtt_factor(cfg.test.one_sided_request()))
        .and_then(|s| s.report(size, cfg.iters))
        .map_err(|e| CliError::runtime("computing the latency", e))
}

/// Prints the baseline block: its title, the column header, its lines, and one line
/// per size setting the test's figure beside the baseline's.
pub(super) fn print_baseline(cfg: &PerfConfig, title: &str, figures: &[Figure], base: &[Figure]) {
    println!(" Baseline (same run): {title}");
    print!("{}", report::header(cfg.test.mode));
    for b in base {
        match b {
            Figure::Lat(r) => print!("{}", report::lat_line(r)),
            Figure::Bw(r) => print!("{}", report::bw_line(r)),
        }
    }
    println!("{RESULT_LINE}");
    for (f, b) in figures.iter().zip(base) {
        let line = match (f, b) {
            (Figure::Lat(f), Figure::Lat(b)) => baseline::ratio_line(
                &format!("{} B t_typical", f.bytes),
                f.t_typical,
                b.t_typical,
                "usec",
                true,
            ),
            (Figure::Bw(f), Figure::Bw(b)) => baseline::ratio_line(
                &format!("{} B BW average", f.bytes),
                f.bw_avg,
                b.bw_avg,
                "MiB/sec",
                false,
            ),
            _ => continue,
        };
        print!("{line}");
    }
    println!("{RESULT_LINE}");
    flush();
}

/// The in-process baselines: a TCP ping-pong over loopback with an echo thread
/// (latency), `memcpy` (bandwidth).
fn local_baseline(cfg: &PerfConfig, figures: &[Figure]) -> Result<(), CliError> {
    let mut base = Vec::new();
    for f in figures {
        base.push(match f {
            Figure::Lat(r) => {
                let stamps = baseline::tcp_loopback(r.bytes as usize, cfg.iters)?;
                Figure::Lat(lat_report(cfg, r.bytes, &stamps)?)
            }
            Figure::Bw(r) => Figure::Bw(baseline::memcpy(r.bytes as usize, r.iterations)?),
        });
    }
    let title = match cfg.test.mode {
        Mode::Lat => {
            "TCP ping-pong over 127.0.0.1 (TCP_NODELAY, echo thread in this process), same \
             sizes and iterations"
        }
        Mode::Bw => "memcpy of each message between two buffers, same sizes and count",
    };
    print_baseline(cfg, title, figures, &base);
    Ok(())
}

/// The latency line of `stamps` (and its histogram with `-H`).
pub(super) fn lat_result(
    cfg: &PerfConfig,
    size: u64,
    stamps: &[u64],
) -> Result<(String, Option<Histogram>), CliError> {
    let samples = LatencySamples::from_stamps(stamps, rtt_factor(cfg.test.one_sided_request()))
        .map_err(|e| CliError::runtime("computing the latency", e))?;
    let r = samples
        .report(size, cfg.iters)
        .map_err(|e| CliError::runtime("computing the latency", e))?;
    let h = cfg.histogram.then(|| {
        let mut h = Histogram::new();
        for &s in &samples.sorted_us {
            h.record_us(s);
        }
        h
    });
    Ok((report::lat_line(&r), h))
}

/// The closing line and the histograms.
pub(super) fn print_footer(cfg: &PerfConfig, histograms: Vec<(u64, Histogram)>) {
    println!("{RESULT_LINE}");
    let title = if cfg.test.one_sided_request() {
        "round trip"
    } else {
        "half round trip"
    };
    for (size, h) in histograms {
        print!(
            "{}",
            h.render(&format!("Histogram of t[usec] ({title}), {size} bytes"))
        );
        println!("{RESULT_LINE}");
    }
    flush();
}

pub(super) fn flush() {
    use std::io::Write;
    let _ = std::io::stdout().flush();
}

/// Polls `side`'s CQ once: checks every completion, reposts a receive request for each
/// receive (QP `q`'s into `recv_sge[q]`, or into the only entry), and calls `f` with
/// each (successful) completion.
#[inline]
pub(super) fn poll_side<B: Bus>(
    side: &mut Side<'_, '_, '_, B>,
    wc: &mut [WorkCompletion; POLL_BATCH],
    recv_sge: &[[Sge; 1]],
    mut f: impl FnMut(&WorkCompletion),
) -> Result<usize, CliError> {
    let n = side.cq.poll(wc);
    for c in &wc[..n] {
        if !c.is_ok() {
            return Err(wc_error(side.name, c));
        }
        if c.opcode == WcOpcode::Recv {
            let q = (c.wr_id >> WR_QP_SHIFT) as usize;
            if let Some(qp) = side.qps.get_mut(q) {
                qp.post_recv(&[RecvWr::new(c.wr_id, of_qp::<[Sge; 1]>(recv_sge, q))])
                    .map_err(|e| post_error(side.name, "a receive request", e))?;
            }
        }
        f(c);
    }
    Ok(n)
}

/// Polls the receiver `side` until its CQ is empty (reposting each receive, as
/// [`poll_side`]); returns the completions taken.
fn drain<B: Bus>(
    side: &mut Side<'_, '_, '_, B>,
    wc: &mut [WorkCompletion; POLL_BATCH],
    recv_sge: &[[Sge; 1]],
) -> Result<usize, CliError> {
    let mut moved = 0;
    loop {
        let k = poll_side(side, wc, recv_sge, |_| {})?;
        moved += k;
        if k < POLL_BATCH {
            return Ok(moved);
        }
    }
}

/// A signaled SEND of `parts` inline, or of `sge`.
fn send_wr<'a>(use_inline: bool, parts: &'a [&'a [u8]; 1], sge: &'a [Sge; 1]) -> SendWr<'a> {
    if use_inline {
        SendWr::send_inline(0, parts).signaled()
    } else {
        SendWr::send(0, sge).signaled()
    }
}

/// The server's half of send-lat: polls `b` once and answers each message received
/// with a SEND of `size` bytes, stamping each answer. Returns the completions seen
/// and the messages answered.
#[allow(clippy::too_many_arguments)]
#[inline]
fn send_lat_answer<B: Bus>(
    b: &mut Side<'_, '_, '_, B>,
    wc: &mut [WorkCompletion; POLL_BATCH],
    rb: &[Sge; 1],
    sb: &[Sge; 1],
    use_inline: bool,
    parts: &[&[u8]; 1],
    clock: Option<(&Stamp, &mut Vec<u64>)>,
) -> Result<(usize, u64), CliError> {
    let mut pongs = 0u64;
    let nb = poll_side(b, wc, std::slice::from_ref(rb), |c| {
        if c.opcode == WcOpcode::Recv {
            pongs += 1;
        }
    })?;
    if pongs > 0 {
        if let Some((clock, stamps)) = clock {
            stamps.push(clock.ns());
        }
    }
    for _ in 0..pongs {
        b.qps[0]
            .post_send(&[send_wr(use_inline, parts, sb)])
            .map_err(|e| post_error(b.name, "a SEND", e))?;
    }
    Ok((nb, pongs))
}

/// SEND ping-pong (ib_send_lat): the client sends, the server answers each message it
/// receives with one of the same size; the client stamps each send. `b` is the
/// server when it runs in this process.
fn send_lat<B: Bus>(
    cfg: &PerfConfig,
    size: u64,
    inline: u32,
    a: &mut Side<'_, '_, '_, B>,
    mut b: Option<&mut Side<'_, '_, '_, B>>,
    pump: &dyn Fn(),
) -> Result<Vec<u64>, CliError> {
    let iters = cfg.iters;
    let mut stamps = stamp_array(iters as usize);
    let payload = vec![0u8; size as usize];
    let parts: [&[u8]; 1] = [&payload];
    let use_inline = size <= u64::from(inline);
    let sa = [a.send_sge(size)];
    let ra = [a.recv_sge()];
    let server_sges = b.as_deref().map(|b| ([b.send_sge(size)], [b.recv_sge()]));
    let clock = Stamp(Instant::now());
    let mut progress = Progress::stderr(format!("{} {size} B", cfg.test.name()), iters);
    let mut wc = [WorkCompletion::default(); POLL_BATCH];
    let mut stall = Stall::new(cfg);
    let mut received = 0u64;
    for i in 0..iters {
        stamps.push(clock.ns());
        a.qps[0]
            .post_send(&[send_wr(use_inline, &parts, &sa)])
            .map_err(|e| post_error(a.name, "a SEND", e))?;
        loop {
            let nb = match (b.as_deref_mut(), &server_sges) {
                (Some(b), Some((sb, rb))) => {
                    send_lat_answer(b, &mut wc, rb, sb, use_inline, &parts, None)?.0
                }
                _ => 0,
            };
            let na = poll_side(a, &mut wc, std::slice::from_ref(&ra), |c| {
                if c.opcode == WcOpcode::Recv {
                    received += 1;
                }
            })?;
            if received > i {
                stall.progress();
                break;
            }
            if na + nb == 0 {
                wait(a, b.as_deref_mut(), pump);
                stall.idle(&|| format!("{i} of {iters} SEND round trips completed"))?;
            } else {
                stall.progress();
            }
        }
        progress.update(i + 1);
    }
    progress.finish();
    Ok(stamps)
}

/// The server of send-lat in its own process: answers `cfg.iters` messages and
/// returns the stamps of its answers.
pub(super) fn serve_send_lat<B: Bus>(
    cfg: &PerfConfig,
    size: u64,
    inline: u32,
    b: &mut Side<'_, '_, '_, B>,
    pump: &dyn Fn(),
) -> Result<Vec<u64>, CliError> {
    let iters = cfg.iters;
    let mut stamps = stamp_array(iters as usize);
    let payload = vec![0u8; size as usize];
    let parts: [&[u8]; 1] = [&payload];
    let use_inline = size <= u64::from(inline);
    let (sb, rb) = ([b.send_sge(size)], [b.recv_sge()]);
    let clock = Stamp(Instant::now());
    let mut wc = [WorkCompletion::default(); POLL_BATCH];
    let mut stall = Stall::new(cfg);
    let mut answered = 0u64;
    let mut sends = 0u64;
    // Until every message is answered and every answer's completion reaped.
    while answered < iters || sends > 0 {
        let mut pongs = 0;
        let n = {
            let (n, p) = send_lat_answer(
                b,
                &mut wc,
                &rb,
                &sb,
                use_inline,
                &parts,
                Some((&clock, &mut stamps)),
            )?;
            pongs += p;
            n
        };
        answered += pongs;
        sends += pongs;
        sends -= wc[..n]
            .iter()
            .filter(|c| c.opcode != WcOpcode::Recv)
            .count() as u64;
        if n == 0 {
            wait(b, None, pump);
            stall.idle(&|| format!("{answered} of {iters} SEND messages answered"))?;
        } else {
            stall.progress();
        }
    }
    Ok(stamps)
}

/// The server's half of write-lat: if ping `seen` has arrived in `b`'s receive area,
/// answers it with an RDMA WRITE of its own (and stamps the answer). Returns whether
/// it answered.
#[allow(clippy::too_many_arguments)]
#[inline]
fn write_lat_answer<B: Bus>(
    b: &mut Side<'_, '_, '_, B>,
    seen: u64,
    size: u64,
    use_inline: bool,
    payload: &mut [u8],
    sb: &[Sge; 1],
    clock: Option<(&Stamp, &mut Vec<u64>)>,
) -> Result<bool, CliError> {
    let last = size as usize - 1;
    let mut byte = [0u8; 1];
    b.mr().read(b.half + last, &mut byte);
    let w = write_lat_value(seen);
    if byte[0] != w {
        return Ok(false);
    }
    if let Some((clock, stamps)) = clock {
        stamps.push(clock.ns());
    }
    let target = b.peer();
    if use_inline {
        payload[last] = w;
        let parts: [&[u8]; 1] = [payload];
        b.qps[0].post_send(&[SendWr::rdma_write_inline(0, &parts, target).signaled()])
    } else {
        b.mr().write(last, &[w]);
        b.qps[0].post_send(&[SendWr::rdma_write(0, sb, target).signaled()])
    }
    .map_err(|e| post_error(b.name, "an RDMA WRITE", e))?;
    Ok(true)
}

/// The value write-lat's message `i` puts in the last byte (never 0).
fn write_lat_value(i: u64) -> u8 {
    (i % 255) as u8 + 1
}

/// RDMA WRITE ping-pong (ib_write_lat): each side polls the last byte of its receive
/// area for the peer's write and answers with a write of its own; the client stamps
/// each write. Both sides reap their (signaled) send completions as they go. The
/// receive areas were cleared before (see [`run_sizes`]).
fn write_lat<B: Bus>(
    cfg: &PerfConfig,
    size: u64,
    inline: u32,
    a: &mut Side<'_, '_, '_, B>,
    mut b: Option<&mut Side<'_, '_, '_, B>>,
    pump: &dyn Fn(),
) -> Result<Vec<u64>, CliError> {
    let iters = cfg.iters;
    let last = size as usize - 1;
    let mut stamps = stamp_array(iters as usize);
    let use_inline = size <= u64::from(inline);
    let mut payload = vec![0u8; size as usize];
    let mut server_payload = vec![0u8; size as usize];
    let sa = [a.send_sge(size)];
    let sb = b.as_deref().map(|b| [b.send_sge(size)]);
    let ta = a.peer();
    let clock = Stamp(Instant::now());
    let mut progress = Progress::stderr(format!("{} {size} B", cfg.test.name()), iters);
    let mut wc = [WorkCompletion::default(); POLL_BATCH];
    let mut stall = Stall::new(cfg);
    let mut b_seen = 0u64; // pings the server has answered
    let mut byte = [0u8; 1];
    for i in 0..iters {
        let v = write_lat_value(i);
        stamps.push(clock.ns());
        if use_inline {
            payload[last] = v;
            let parts: [&[u8]; 1] = [&payload];
            a.qps[0].post_send(&[SendWr::rdma_write_inline(0, &parts, ta).signaled()])
        } else {
            a.mr().write(last, &[v]);
            a.qps[0].post_send(&[SendWr::rdma_write(0, &sa, ta).signaled()])
        }
        .map_err(|e| post_error(a.name, "an RDMA WRITE", e))?;
        loop {
            let mut moved = 0;
            if let (Some(b), Some(sb)) = (b.as_deref_mut(), &sb) {
                if b_seen <= i
                    && write_lat_answer(b, b_seen, size, use_inline, &mut server_payload, sb, None)?
                {
                    b_seen += 1;
                    moved += 1;
                }
                moved += poll_side(b, &mut wc, std::slice::from_ref(sb), |_| {})?;
            }
            moved += poll_side(a, &mut wc, std::slice::from_ref(&sa), |_| {})?;
            a.mr().read(a.half + last, &mut byte);
            if byte[0] == v {
                stall.progress();
                break;
            }
            if moved == 0 {
                pump();
                stall.idle(&|| format!("{i} of {iters} RDMA WRITE round trips completed"))?;
            } else {
                stall.progress();
            }
        }
        progress.update(i + 1);
    }
    progress.finish();
    Ok(stamps)
}

/// The server of write-lat in its own process: answers `cfg.iters` writes and returns
/// the stamps of its answers.
pub(super) fn serve_write_lat<B: Bus>(
    cfg: &PerfConfig,
    size: u64,
    inline: u32,
    b: &mut Side<'_, '_, '_, B>,
    pump: &dyn Fn(),
) -> Result<Vec<u64>, CliError> {
    let iters = cfg.iters;
    let mut stamps = stamp_array(iters as usize);
    let use_inline = size <= u64::from(inline);
    let mut payload = vec![0u8; size as usize];
    let sb = [b.send_sge(size)];
    let clock = Stamp(Instant::now());
    let mut wc = [WorkCompletion::default(); POLL_BATCH];
    let mut stall = Stall::new(cfg);
    let mut seen = 0u64;
    while seen < iters {
        let mut moved = 0;
        if write_lat_answer(
            b,
            seen,
            size,
            use_inline,
            &mut payload,
            &sb,
            Some((&clock, &mut stamps)),
        )? {
            seen += 1;
            moved += 1;
        }
        moved += poll_side(b, &mut wc, std::slice::from_ref(&sb), |_| {})?;
        if moved == 0 {
            pump();
            stall.idle(&|| format!("{seen} of {iters} RDMA WRITEs answered"))?;
        } else {
            stall.progress();
        }
    }
    Ok(stamps)
}

/// The server of send-bw in its own process: takes (and reposts) `cfg.iters`
/// receives on every QP.
pub(super) fn serve_send_bw<B: Bus>(
    cfg: &PerfConfig,
    b: &mut Side<'_, '_, '_, B>,
    pump: &dyn Fn(),
) -> Result<(), CliError> {
    let total = cfg.iters * u64::from(cfg.qps);
    let rb = b.recv_sges();
    let mut wc = [WorkCompletion::default(); POLL_BATCH];
    let mut stall = Stall::new(cfg);
    let mut got = 0u64;
    while got < total {
        let n = poll_side(b, &mut wc, &rb, |c| {
            if c.opcode == WcOpcode::Recv {
                got += 1;
            }
        })?;
        if n == 0 {
            wait(b, None, pump);
            stall.idle(&|| format!("{got} of {total} SEND messages received"))?;
        } else {
            stall.progress();
        }
    }
    Ok(())
}

/// The work request of a one-sided test: an RDMA READ of `size` bytes, or the atomic.
fn one_sided_wr<'a>(
    verb: Verb,
    atomic: AtomicType,
    wr_id: u64,
    sge: &'a [Sge; 1],
    remote: RemoteAddr,
) -> SendWr<'a> {
    match (verb, atomic) {
        (Verb::Atomic, AtomicType::FetchAndAdd) => SendWr::atomic_fetch_add(wr_id, sge, remote, 1),
        (Verb::Atomic, AtomicType::CmpAndSwap) => SendWr::atomic_cmp_swp(wr_id, sge, remote, 0, 0),
        _ => SendWr::rdma_read(wr_id, sge, remote),
    }
}

/// RDMA READ or atomic latency (ib_read_lat, ib_atomic_lat): one request at a time,
/// each stamped when posted and waited for. The responder needs no help.
fn one_sided_lat<B: Bus>(
    cfg: &PerfConfig,
    size: u64,
    a: &mut Side<'_, '_, '_, B>,
    pump: &dyn Fn(),
) -> Result<Vec<u64>, CliError> {
    let iters = cfg.iters;
    let mut stamps = stamp_array(iters as usize);
    let sge = [a.send_sge(size)];
    let target = a.peer();
    let clock = Stamp(Instant::now());
    let mut progress = Progress::stderr(format!("{} {size} B", cfg.test.name()), iters);
    let mut wc = [WorkCompletion::default(); POLL_BATCH];
    let mut stall = Stall::new(cfg);
    let what = if cfg.test.verb == Verb::Read {
        "an RDMA READ"
    } else {
        "an atomic"
    };
    for i in 0..iters {
        stamps.push(clock.ns());
        a.qps[0]
            .post_send(&[one_sided_wr(cfg.test.verb, cfg.atomic, i, &sge, target).signaled()])
            .map_err(|e| post_error(a.name, what, e))?;
        loop {
            let mut done = false;
            let n = poll_side(a, &mut wc, std::slice::from_ref(&sge), |c| {
                done |= c.wr_id == i
            })?;
            if done {
                stall.progress();
                break;
            }
            if n == 0 {
                wait(a, None, pump);
                stall.idle(&|| format!("{i} of {iters} requests completed"))?;
            }
        }
        progress.update(i + 1);
    }
    progress.finish();
    Ok(stamps)
}

/// Bandwidth (ib_*_bw): the client keeps up to the TX depth of requests outstanding
/// on every QP, posting post lists and signaling one request in `cq_mod`; the server
/// (SEND), when in this process, reposts receive requests. Returns the post and
/// completion stamps, indexed by the request's rank over all QPs.
fn bw<B: Bus>(
    cfg: &PerfConfig,
    size: u64,
    inline: u32,
    a: &mut Side<'_, '_, '_, B>,
    mut b: Option<&mut Side<'_, '_, '_, B>>,
    pump: &dyn Fn(),
) -> Result<(Vec<u64>, Vec<u64>), CliError> {
    let qps = a.qps.len();
    let iters = cfg.iters;
    let total = iters as usize * qps;
    let post_list = cfg.post_list as u64;
    let cq_mod = u64::from(cfg.cq_mod);
    let tx_depth = u64::from(cfg.tx_depth);
    let mut tposted = stamp_array(total);
    let mut tcompleted = stamp_array(total);
    tposted.resize(total, 0);
    tcompleted.resize(total, 0);
    let mut scnt = vec![0u64; qps];
    let mut ccnt = vec![0u64; qps];
    let (mut totscnt, mut totccnt) = (0usize, 0usize);
    let payload = vec![0u8; size as usize];
    let parts: [&[u8]; 1] = [&payload];
    let use_inline =
        cfg.test.verb != Verb::Read && cfg.test.verb != Verb::Atomic && size <= u64::from(inline);
    // Each QP's buffers and target (one for all QPs, or one per QP: `--mr_per_qp`).
    let sges: Vec<[Sge; 1]> = (0..a.mrs.len()).map(|i| [a.send_sge_of(i, size)]).collect();
    let ra = a.recv_sges();
    let rb = b.as_deref().map(|b| b.recv_sges());
    let targets = a.peers.clone();
    let make = |q: usize, wr_id: u64| {
        let (sge, target) = (of_qp(&sges, q), *of_qp(&targets, q));
        match cfg.test.verb {
            Verb::Send if use_inline => SendWr::send_inline(wr_id, &parts),
            Verb::Send => SendWr::send(wr_id, sge),
            Verb::Write if use_inline => SendWr::rdma_write_inline(wr_id, &parts, target),
            Verb::Write => SendWr::rdma_write(wr_id, sge, target),
            Verb::Read | Verb::Atomic => {
                one_sided_wr(cfg.test.verb, cfg.atomic, wr_id, sge, target)
            }
        }
    };
    let mut list = Vec::with_capacity(post_list as usize);
    let clock = Stamp(Instant::now());
    let mut progress = Progress::stderr(format!("{} {size} B", cfg.test.name()), total as u64);
    let mut wc = [WorkCompletion::default(); POLL_BATCH];
    let mut stall = Stall::new(cfg);
    // The QPs that may have room to post, each once (`listed`): all at first, then
    // each QP again when a completion of it frees room. A round visits these, not
    // every QP, so its cost follows the completions, not the number of QPs.
    let mut ready: VecDeque<usize> = (0..qps).collect();
    let mut listed = vec![true; qps];
    // Requests posted since the devices last had a chance to progress (`pump`): after
    // a TX depth's worth (perftest's default one at least) the devices progress even
    // if the CQs still hold completions, so that they never hold more unprocessed
    // requests than one QP gives them. With
    // thousands of QPs, each with its TX depth free, the test would otherwise post
    // hundreds of thousands of requests between two steps of an in-process fabric:
    // more frames than a receive queue holds (`ferroverbs_sim::link::RX_QUEUE_LIMIT`),
    // and a working set no cache holds.
    let mut unpumped = 0u64;
    let budget = tx_depth
        .max(u64::from(super::config::DEF_TX_BW))
        .max(post_list);
    while totccnt < total {
        let mut moved = 0usize;
        while let Some(q) = ready.pop_front() {
            listed[q] = false;
            while scnt[q] < iters && scnt[q] + post_list <= tx_depth + ccnt[q] {
                list.clear();
                for k in scnt[q]..scnt[q] + post_list {
                    let wr = make(q, ((q as u64) << WR_QP_SHIFT) | k);
                    list.push(if (k + 1) % cq_mod == 0 || k + 1 == iters {
                        wr.signaled()
                    } else {
                        wr
                    });
                }
                tposted[totscnt] = clock.ns();
                a.qps[q]
                    .post_send(&list)
                    .map_err(|e| post_error(a.name, "a post list", e))?;
                scnt[q] += post_list;
                totscnt += post_list as usize;
                moved += 1;
                unpumped += post_list;
                if unpumped >= budget {
                    pump();
                    unpumped = 0;
                    // A receiver in this process takes what the devices delivered
                    // meanwhile, as perftest's server process polls while the client
                    // posts: with thousands of QPs a round posts far more requests
                    // than a cache holds, and the receive CQEs (and each QP's receive
                    // queue, reposted) would be read back cold after the round.
                    if let (Some(b), Some(rb), true) = (b.as_deref_mut(), &rb, cfg.test.has_recv())
                    {
                        moved += drain(b, &mut wc, rb)?;
                    }
                }
            }
        }
        let mut retire = |c: &WorkCompletion| {
            let q = (c.wr_id >> WR_QP_SHIFT) as usize;
            let k = c.wr_id & ((1 << WR_QP_SHIFT) - 1);
            if let Some(done) = ccnt.get_mut(q) {
                let n = (k + 1).saturating_sub(*done);
                *done = k + 1;
                totccnt += n as usize;
                if totccnt > 0 {
                    tcompleted[totccnt.min(total) - 1] = clock.ns();
                }
                if !listed[q] && scnt[q] < iters {
                    listed[q] = true;
                    ready.push_back(q);
                }
            }
        };
        moved += poll_side(a, &mut wc, &ra, &mut retire)?;
        if let (Some(b), Some(rb), true) = (b.as_deref_mut(), &rb, cfg.test.has_recv()) {
            // The receiver takes every completion there is and reposts its receive
            // requests, so that its queues keep up with the devices' progress during
            // the round (with many QPs, more than one batch arrives per round).
            moved += drain(b, &mut wc, rb)?;
        }
        if moved == 0 {
            wait(a, b.as_deref_mut(), pump);
            unpumped = 0;
            stall.idle(&|| format!("{totccnt} of {total} requests completed"))?;
        } else {
            stall.progress();
        }
        progress.update(totccnt as u64);
    }
    progress.finish();
    Ok((tposted, tcompleted))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::cli::args::{Cli, Command};
    use clap::Parser;

    /// The configuration `ferroverbs perf <args>` gives (the tests of the perf
    /// modules share it).
    pub(crate) fn config(args: &[&str]) -> PerfConfig {
        let argv = ["ferroverbs", "perf"]
            .into_iter()
            .chain(args.iter().copied());
        let Command::Perf { test } = Cli::try_parse_from(argv).expect("clap accepts it").command
        else {
            unreachable!()
        };
        let (id, a) = test.split();
        PerfConfig::new(id, a).expect("a valid configuration")
    }

    /// The tool's own set-up path (configuration, QP creation, `connect_qp`) on a
    /// simulated NIC, then `QUERY_QP`: the device holds the asked exponent, and
    /// perftest's 14 without the option.
    #[test]
    fn the_qp_timeout_reaches_the_device() {
        for (args, want) in [
            (&["send-lat"][..], 14),
            (&["send-lat", "--qp-timeout", "23"], 23),
            (&["write-bw", "-u", "31"], 31),
            (&["read-lat", "-u", "0"], 0),
        ] {
            let cfg = config(args);
            assert_eq!(cfg.qp_timeout, want, "{args:?}");
            let nic = open_sim_with(0, sim_cfg(0, cfg.sim_mode)).unwrap();
            let ep = sim_endpoint(&nic.ctx, &nic.name).unwrap();
            let dev = nic.ctx.query_device().unwrap();
            let dims = Dims::new(&cfg, &dev).unwrap();
            let pd = nic.ctx.alloc_pd().unwrap();
            let cq = create_cq(&nic.ctx, None, dims.cqe).unwrap();
            let (mut qps, _) = create_qps(&cfg, &pd, &cq, dims.cap(&cfg)).unwrap();
            // A peer that need not exist: connecting only programs this QP.
            let peer = PeerQp {
                ep,
                qpn: 0x1234,
                psn: 0x42,
            };
            let limits = (rd_atom_depth(&dev), cfg.qp_timeout);
            connect_qp(&mut qps[0], &ep, &peer, 7, ep.mtu, limits).unwrap();
            let info = qps[0].query().unwrap();
            assert_eq!(info.state, ferroverbs::verbs::QpState::Rts, "{args:?}");
            assert_eq!(info.timeout, want, "{args:?}");
            assert_eq!(info.retry_cnt, 7, "{args:?}");
        }
    }

    #[test]
    fn the_stall_limit_covers_the_retry_budget() {
        // 10 s beyond 8 expiries (retry_cnt 7 + the first) of 4.096 µs × 2^n.
        assert_eq!(stall_limit(0), STALL_TIMEOUT);
        assert_eq!(
            stall_limit(14),
            STALL_TIMEOUT + Duration::from_nanos(8 * (4096 << 14))
        );
        assert_eq!(
            stall_limit(23),
            STALL_TIMEOUT + Duration::from_nanos(8 * (4096 << 23))
        );
        assert!(stall_limit(31) > Duration::from_secs(8 * 8796));
    }
}
