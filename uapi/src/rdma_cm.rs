//! `/dev/infiniband/rdma_cm` (Linux's `ucma`): librdmacm's event channel and the
//! rdma_cm write() commands on it ([`crate::abi::ucma`]), executed on the process's
//! CM service ([`ferroverbs_cm::service`]) over QP1 of the simulated NIC, as
//! `drivers/infiniband/core/ucma.c` executes them on `rdma_cm`.
//!
//! Each open file is an eventfd: readable while events wait (`poll`, epoll), and the
//! descriptor the application writes its commands to (this layer intercepts the
//! writes). A thread polls the CM service and queues its events on the file that owns
//! the connection. The QPs are libmlx5's, known by number: librdmacm moves them
//! itself with the attributes INIT_QP_ATTR returns, and tells the CM when to send the
//! REP (ACCEPT on the passive side) or the RTU (ACCEPT after CONNECT_RESPONSE).

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::nic::NicBus;
use ferroverbs::verbs::{Pd, QpState};
use ferroverbs::{Clock, GidEntry, MonotonicClock};
use ferroverbs_cm::engine::ConnId;
use ferroverbs_cm::service::{CmEvent, ConnParam, QpTransitionAttr, Service};

use crate::abi::qp_mask as m;
use crate::abi::ucma::*;
use crate::abi::{ah_attr, global_route};
use crate::nic::Nic;
use crate::{real, user, Errno};

/// `RDMA_PS_TCP`.
const PS_TCP: u16 = 0x0106;
/// `RDMA_PS_UDP`: UD services resolved by SIDR.
const PS_UDP: u16 = 0x0111;
/// `RDMA_UDP_QKEY`: the Q_Key of rdma_cm's UD QPs.
const UDP_QKEY: u32 = 0x0123_4567;
/// Linux's default `ip_local_port_range`: where `cma_alloc_any_port` picks the port
/// of an id bound to port 0.
const EPHEMERAL: (u16, u16) = (32768, 60999);
/// `AF_INET` as a `sockaddr`'s family.
const AF_INET: u16 = libc::AF_INET as u16;
/// `IBV_QPS_*`.
const QPS_INIT: u32 = 1;
const QPS_RTR: u32 = 2;
const QPS_RTS: u32 = 3;
/// `-ETIMEDOUT`, the status of UNREACHABLE.
const ETIMEDOUT: i32 = -libc::ETIMEDOUT;

/// An rdma_cm id.
#[derive(Default)]
struct Id {
    /// librdmacm's `cma_id_private *`, echoed in events.
    uid: u64,
    ps: u16,
    src: Option<SocketAddrV4>,
    dst: Option<SocketAddrV4>,
    route: bool,
    conn: Option<ConnId>,
    /// Events handed to the application (DESTROY_ID reports them).
    events_reported: u32,
}

/// An open rdma_cm file.
struct File {
    ids: HashMap<u32, Id>,
    /// Events waiting: the id they are counted to (the listener's for a connection
    /// request, as Linux's `ucma_get_event` counts them) and the response bytes.
    events: VecDeque<(u32, Vec<u8>)>,
    /// Which opening of the descriptor number this is (a GET_EVENT that waits tells
    /// its file from a later one given the same number).
    serial: u64,
}

/// The process's CM over the NIC.
struct Device {
    svc: Service<'static, NicBus>,
    /// The service's clock (its time-outs' time base).
    clock: Arc<MonotonicClock>,
    nic: &'static Nic,
    files: HashMap<i32, File>,
    by_conn: HashMap<ConnId, (i32, u32)>,
    /// (port space, port) → the listening id.
    listeners: HashMap<(u16, u16), (i32, u32)>,
    next_handle: u32,
    /// Where the search for the next ephemeral port starts.
    next_port: u16,
    /// The serial of the next file opened.
    next_serial: u64,
    /// Active connections whose RTU librdmacm asked for (ACCEPT after
    /// CONNECT_RESPONSE): librdmacm reports their ESTABLISHED itself
    /// (`ucma_process_conn_resp`), so the CM's is not queued.
    lib_established: std::collections::HashSet<ConnId>,
}

static DEVICE: OnceLock<Result<Arc<Mutex<Device>>, String>> = OnceLock::new();

fn device(nic: &'static Nic) -> Result<Arc<Mutex<Device>>, Errno> {
    DEVICE
        .get_or_init(|| {
            let pd: &'static Pd<'static, NicBus> =
                Box::leak(Box::new(nic.ctx.alloc_pd().map_err(|e| e.to_string())?));
            let gid = GidEntry::ipv4(0, nic.ipv4.octets(), nic.mac);
            // On the UDP link a peer's MAC follows from its IPv4 address; over VFIO
            // it is the host's neighbour table's.
            let resolve = move |ip: IpAddr| match ip {
                IpAddr::V4(v4) => nic.dmac(v4).ok(),
                IpAddr::V6(_) => None,
            };
            // QP1's completions on a channel: the CM thread sleeps on its
            // descriptor until a MAD arrives or the next time-out is due.
            let chan: &'static ferroverbs::verbs::CompletionChannel<'static, NicBus> = Box::leak(
                Box::new(nic.ctx.create_comp_channel().map_err(|e| e.to_string())?),
            );
            let clock = Arc::new(MonotonicClock::new());
            let svc = Service::with_channel(
                pd,
                chan,
                1,
                gid,
                clock.clone(),
                resolve,
                u64::from(std::process::id()),
            )
            .map_err(|e| e.to_string())?;
            let d = Arc::new(Mutex::new(Device {
                svc,
                clock,
                nic,
                files: HashMap::new(),
                by_conn: HashMap::new(),
                listeners: HashMap::new(),
                next_handle: 1,
                next_port: EPHEMERAL.0 + (std::process::id() % 4096) as u16,
                next_serial: 1,
                lib_established: Default::default(),
            }));
            let w = Arc::downgrade(&d);
            // SAFETY: registers a function of this library, which stays loaded.
            unsafe { libc::atexit(release_at_exit) };
            std::thread::Builder::new()
                .name("ferroverbs-rdma-cm".into())
                .spawn(move || progress(w))
                .map_err(|e| e.to_string())?;
            Ok(d)
        })
        .clone()
        .map_err(|_| Errno::ENODEV)
}

/// The CM's own thread: runs the service (received MADs, time-outs) and queues its
/// events; between runs it waits on the QP1 channel's descriptor until a MAD arrives
/// or the service's next time-out is due (at most 20 ms: a command of the
/// application may have sent a MAD whose answer it waits for).
fn progress(d: std::sync::Weak<Mutex<Device>>) {
    while let Some(d) = d.upgrade() {
        let (fd, wait) = {
            let mut d = d.lock().unwrap_or_else(|e| e.into_inner());
            d.pump();
            let now = d.clock.now();
            let wait = d
                .svc
                .next_deadline()
                .map_or(MAX_WAIT, |t| t.saturating_sub(now).min(MAX_WAIT));
            (d.svc.fd(), wait)
        };
        drop(d);
        match fd {
            Some(fd) => {
                let mut p = libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                let ms = wait.as_millis().max(1) as i32;
                // SAFETY: one pollfd on the stack for the channel's descriptor.
                unsafe { libc::poll(&mut p, 1, ms) };
            }
            None => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

/// The longest the CM thread sleeps.
const MAX_WAIT: Duration = Duration::from_millis(20);

/// Opens an rdma_cm file: an eventfd, marked as this layer's.
pub fn open(nic: &'static Nic, flags: i32) -> Result<i32, Errno> {
    let d = device(nic)?;
    // SAFETY: plain eventfd creation.
    let cloexec = if flags & libc::O_CLOEXEC != 0 {
        libc::EFD_CLOEXEC
    } else {
        0
    };
    // Blocking unless the application sets O_NONBLOCK (GET_EVENT reads the flag);
    // this layer's own reads of the counter happen only while it is 1.
    let fd = unsafe { libc::eventfd(0, cloexec) };
    if fd < 0 {
        return Err(Errno::last());
    }
    let mut d = d.lock().unwrap_or_else(|e| e.into_inner());
    let serial = d.next_serial;
    d.next_serial += 1;
    d.files.insert(
        fd,
        File {
            ids: HashMap::new(),
            events: VecDeque::new(),
            serial,
        },
    );
    Ok(fd)
}

/// Closes an rdma_cm file: its ids are destroyed.
pub fn close(fd: i32) {
    if let Some(Ok(d)) = DEVICE.get() {
        d.lock().unwrap_or_else(|e| e.into_inner()).release(fd);
    }
}

/// At process exit the files still open are released, as the kernel releases them
/// when the process's descriptors go (`ucma_close`): a connected id sends its DREQ
/// (Linux `cm_destroy_id`), a pending one its REJ, so the peer learns of the exit
/// at once instead of after its own timeouts (perftest's `ib_atomic_lat -R` server
/// returns from `main` without disconnecting; its client waits for DISCONNECTED).
extern "C" fn release_at_exit() {
    let Some(Ok(d)) = DEVICE.get() else {
        return;
    };
    // Bounded: another thread may hold the lock while the process exits.
    for _ in 0..200 {
        if let Ok(mut d) = d.try_lock() {
            let fds: Vec<i32> = d.files.keys().copied().collect();
            for fd in fds {
                d.release(fd);
            }
            // The MADs leave QP1 while the NIC still runs.
            for _ in 0..20 {
                d.svc.poll();
                if d.svc.sends_done() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A `write(2)` of a command on rdma_cm file `fd` (`ucma_write`): returns the length
/// written or the errno Linux gives.
pub fn write(fd: i32, buf: u64, len: usize) -> Result<usize, Errno> {
    if len < ucm_cmd_hdr::SIZE {
        return Err(Errno::EINVAL);
    }
    let hdr = user::copy_in(buf, ucm_cmd_hdr::SIZE)?;
    let cmd = u32::from_ne_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
    let inlen = usize::from(u16::from_ne_bytes([hdr[4], hdr[5]]));
    if inlen + ucm_cmd_hdr::SIZE > len {
        return Err(Errno::EINVAL);
    }
    let body = user::copy_in(buf + ucm_cmd_hdr::SIZE as u64, inlen)?;
    let Some(Ok(dev)) = DEVICE.get() else {
        return Err(Errno::ENODEV);
    };
    if cmd == cmd::GET_EVENT {
        get_event(dev, fd, &body)?;
        return Ok(len);
    }
    // LEAVE_MCAST answers the events reported of the group, a join the group's id
    // (Linux `ucma_leave_multicast`, `ucma_process_join`: ENOSPC before anything
    // else without room for them).
    let outlen = usize::from(u16::from_ne_bytes([hdr[6], hdr[7]]));
    let mc = [cmd::LEAVE_MCAST, cmd::JOIN_IP_MCAST, cmd::JOIN_MCAST];
    if mc.contains(&cmd) && outlen < ucm_destroy_id_resp::SIZE {
        return Err(Errno(libc::ENOSPC));
    }
    let mut d = dev.lock().unwrap_or_else(|e| e.into_inner());
    let r = d.command(fd, cmd, &body);
    if crate::trace() {
        eprintln!("uapi: rdma_cm fd {fd} command {cmd} ({inlen} bytes): {r:?}");
    }
    r?;
    Ok(len)
}

/// The errno of a CM refusal, as Linux's `rdma_cm`/`ib_cm` return them: a call in
/// the wrong state, on an id without a connection, or with too much private data is
/// EINVAL (`cma_*`, `ib_send_cm_*`); a port listened on already EADDRINUSE
/// (`cma_alloc_port`); no neighbour for the destination EHOSTUNREACH
/// (`addr_resolve`); an IPv6 or AF_IB address EAFNOSUPPORT; no MAD send buffer
/// ENOMEM (`ib_create_send_mad`).
fn cm_errno(e: ferroverbs_cm::service::ServiceError) -> Errno {
    use ferroverbs_cm::engine::CmError;
    use ferroverbs_cm::service::ServiceError as S;
    match e {
        S::Cm(CmError::AddrInUse(_)) => Errno(libc::EADDRINUSE),
        S::NoRoute(_) => Errno(libc::EHOSTUNREACH),
        S::NotIpv4(_) => Errno(libc::EAFNOSUPPORT),
        S::Post(_) => Errno(libc::ENOMEM),
        _ => Errno::EINVAL,
    }
}

/// Fields of a command body (missing bytes read as zero).
struct B<'a>(&'a [u8]);

impl B<'_> {
    fn bytes(&self, off: usize, n: usize) -> &[u8] {
        self.0.get(off..off + n).unwrap_or(&[])
    }
    fn u8(&self, off: usize) -> u8 {
        self.0.get(off).copied().unwrap_or(0)
    }
    fn u16(&self, off: usize) -> u16 {
        let b = self.bytes(off, 2);
        if b.len() == 2 {
            u16::from_ne_bytes([b[0], b[1]])
        } else {
            0
        }
    }
    fn u32(&self, off: usize) -> u32 {
        let b = self.bytes(off, 4);
        if b.len() == 4 {
            u32::from_ne_bytes([b[0], b[1], b[2], b[3]])
        } else {
            0
        }
    }
    fn u64(&self, off: usize) -> u64 {
        let b = self.bytes(off, 8);
        if b.len() == 8 {
            u64::from_ne_bytes(b.try_into().unwrap_or([0; 8]))
        } else {
            0
        }
    }
    /// A `sockaddr` (IPv4 only; IPv6 is EAFNOSUPPORT, another family EINVAL).
    fn sockaddr(&self, off: usize) -> Result<Option<SocketAddrV4>, Errno> {
        match self.u16(off) {
            0 => Ok(None),
            AF_INET => {
                let p = self.bytes(off + 2, 2);
                let a = self.bytes(off + 4, 4);
                if p.len() < 2 || a.len() < 4 {
                    return Err(Errno::EINVAL);
                }
                Ok(Some(SocketAddrV4::new(
                    Ipv4Addr::new(a[0], a[1], a[2], a[3]),
                    u16::from_be_bytes([p[0], p[1]]),
                )))
            }
            f if f == libc::AF_INET6 as u16 || f == libc::AF_IB as u16 => {
                Err(Errno(libc::EAFNOSUPPORT))
            }
            _ => Err(Errno::EINVAL),
        }
    }
}

/// Writes an IPv4 `sockaddr_in` at `off` of `out`.
fn put_sockaddr(out: &mut [u8], off: usize, a: Option<SocketAddrV4>) {
    if let Some(a) = a {
        out[off..off + 2].copy_from_slice(&AF_INET.to_ne_bytes());
        out[off + 2..off + 4].copy_from_slice(&a.port().to_be_bytes());
        out[off + 4..off + 8].copy_from_slice(&a.ip().octets());
    }
}

fn respond(addr: u64, out: &[u8]) -> Result<(), Errno> {
    user::copy_out(addr, out)
}

/// Makes the file's descriptor readable (events wait) or not.
fn readiness(fd: i32, ready: bool) {
    let one = 1u64.to_ne_bytes();
    let mut sink = [0u8; 8];
    // SAFETY: an eventfd of this layer; 8-byte reads and writes.
    unsafe {
        if ready {
            real::write(fd, one.as_ptr().cast(), 8);
        } else {
            real::read(fd, sink.as_mut_ptr().cast(), 8);
        }
    }
}

fn conn_param(b: &B<'_>, base: usize) -> (u32, ConnParam) {
    let len = usize::from(b.u8(base + ucm_conn_param::private_data_len)).min(MAX_PRIVATE_DATA);
    (
        b.u32(base + ucm_conn_param::qp_num),
        ConnParam {
            responder_resources: b.u8(base + ucm_conn_param::responder_resources),
            initiator_depth: b.u8(base + ucm_conn_param::initiator_depth),
            retry_count: b.u8(base + ucm_conn_param::retry_count),
            rnr_retry_count: b.u8(base + ucm_conn_param::rnr_retry_count),
            private_data: b.bytes(base + ucm_conn_param::private_data, len).to_vec(),
        },
    )
}

impl Device {
    /// Releases file `fd`: its ids are destroyed (DREQ or REJ for their
    /// connections) and its listeners stopped.
    fn release(&mut self, fd: i32) {
        if let Some(f) = self.files.remove(&fd) {
            for id in f.ids.values() {
                if let Some(c) = id.conn {
                    let _ = self.svc.destroy(c);
                    self.by_conn.remove(&c);
                }
            }
            self.drop_listeners(fd, None);
        }
    }

    fn id(&mut self, fd: i32, h: u32) -> Result<&mut Id, Errno> {
        self.files
            .get_mut(&fd)
            .ok_or(Errno::EBADF)?
            .ids
            .get_mut(&h)
            .ok_or(Errno::ENOENT)
    }

    /// Stops the listeners of id `h` of file `fd` (all of the file's when `h` is
    /// `None`): the CM no longer answers their port.
    fn drop_listeners(&mut self, fd: i32, h: Option<u32>) {
        let gone: Vec<(u16, u16)> = self
            .listeners
            .iter()
            .filter(|(_, &(f, id))| f == fd && h.is_none_or(|h| h == id))
            .map(|(k, _)| *k)
            .collect();
        for (ps, port) in gone {
            self.listeners.remove(&(ps, port));
            let a = SocketAddr::V4(SocketAddrV4::new(self.local(), port));
            if ps == PS_UDP {
                self.svc.unlisten_ud(a);
            } else {
                self.svc.unlisten(a);
            }
        }
    }

    /// A port of port space `ps` no id holds, for an id bound to port 0 (Linux
    /// `cma_alloc_any_port`: every bound id has a port, which its address reports).
    fn any_port(&mut self, ps: u16) -> u16 {
        let span = EPHEMERAL.1 - EPHEMERAL.0 + 1;
        for _ in 0..span {
            let p = self.next_port;
            self.next_port = if p >= EPHEMERAL.1 { EPHEMERAL.0 } else { p + 1 };
            let taken = self.listeners.contains_key(&(ps, p))
                || self.files.values().any(|f| {
                    f.ids
                        .values()
                        .any(|i| i.ps == ps && i.src.is_some_and(|a| a.port() == p))
                });
            if !taken {
                return p;
            }
        }
        0
    }

    fn local(&self) -> Ipv4Addr {
        self.nic.ipv4
    }

    fn command(&mut self, fd: i32, cmd: u32, body: &[u8]) -> Result<(), Errno> {
        let b = B(body);
        let cm_err = cm_errno;
        match cmd {
            cmd::CREATE_ID => {
                let h = self.next_handle;
                self.next_handle += 1;
                let id = Id {
                    uid: b.u64(ucm_create_id::uid),
                    ps: b.u16(ucm_create_id::ps),
                    ..Id::default()
                };
                if id.ps != PS_TCP && id.ps != PS_UDP {
                    // RDMA_PS_IB (AF_IB addressing) and IPoIB are not offered:
                    // librdmacm then uses IP addressing.
                    return Err(Errno(libc::EPROTONOSUPPORT));
                }
                self.files
                    .get_mut(&fd)
                    .ok_or(Errno::EBADF)?
                    .ids
                    .insert(h, id);
                respond(b.u64(ucm_create_id::response), &h.to_ne_bytes())
            }
            cmd::DESTROY_ID => {
                let h = b.u32(ucm_destroy_id::id);
                let f = self.files.get_mut(&fd).ok_or(Errno::EBADF)?;
                let id = f.ids.remove(&h).ok_or(Errno::ENOENT)?;
                // Its events not yet read go with it (Linux `ucma_cleanup_ctx_events`):
                // librdmacm frees the id, and an event naming it would be a use after
                // free in the application.
                let had = !f.events.is_empty();
                let handle_of = |ev: &[u8]| {
                    u32::from_ne_bytes(ev[ucm_event_resp::id..][..4].try_into().unwrap_or([0; 4]))
                };
                f.events
                    .retain(|(acct, ev)| *acct != h && handle_of(ev) != h);
                if had && f.events.is_empty() {
                    readiness(fd, false);
                }
                if let Some(c) = id.conn {
                    let _ = self.svc.destroy(c);
                    self.by_conn.remove(&c);
                }
                self.drop_listeners(fd, Some(h));
                respond(
                    b.u64(ucm_destroy_id::response),
                    &id.events_reported.to_ne_bytes(),
                )
            }
            cmd::BIND_IP | cmd::BIND => {
                let (h, a) = if cmd == cmd::BIND_IP {
                    (b.u32(ucm_bind_ip::id), b.sockaddr(ucm_bind_ip::addr)?)
                } else {
                    (b.u32(ucm_bind::id), b.sockaddr(ucm_bind::addr)?)
                };
                let local = self.local();
                let a = a.ok_or(Errno::EINVAL)?;
                // A loopback address binds to the local device and takes its GID
                // (Linux `cma_bind_loopback`: the first active port's GID 0): rsocket
                // datagram sockets bind to the source the kernel picks for a UDP
                // socket connected to the peer, 127.0.0.1 on `lo`. Another address
                // not the device's has no RDMA device (`rdma_translate_ip`).
                if !a.ip().is_unspecified() && !a.ip().is_loopback() && *a.ip() != local {
                    return Err(Errno(libc::EADDRNOTAVAIL));
                }
                let ps = self.id(fd, h)?.ps;
                let port = match a.port() {
                    0 => self.any_port(ps),
                    p => p,
                };
                self.id(fd, h)?.src = Some(SocketAddrV4::new(local, port));
                Ok(())
            }
            cmd::RESOLVE_IP | cmd::RESOLVE_ADDR => {
                let (h, src, dst) = if cmd == cmd::RESOLVE_IP {
                    (
                        b.u32(ucm_resolve_ip::id),
                        b.sockaddr(ucm_resolve_ip::src_addr)?,
                        b.sockaddr(ucm_resolve_ip::dst_addr)?,
                    )
                } else {
                    (
                        b.u32(ucm_resolve_addr::id),
                        b.sockaddr(ucm_resolve_addr::src_addr)?,
                        b.sockaddr(ucm_resolve_addr::dst_addr)?,
                    )
                };
                let local = self.local();
                // A source address given binds an id not bound yet (Linux
                // `rdma_resolve_addr` → `cma_bind_addr`), by the rules of BIND.
                if let Some(a) = src {
                    if !a.ip().is_unspecified() && !a.ip().is_loopback() && *a.ip() != local {
                        return Err(Errno(libc::EADDRNOTAVAIL));
                    }
                }
                let (ps, bound) = {
                    let id = self.id(fd, h)?;
                    (id.ps, id.src.is_some())
                };
                let port = match src.map_or(0, |a| a.port()) {
                    0 if !bound => self.any_port(ps),
                    p => p,
                };
                let id = self.id(fd, h)?;
                id.dst = Some(dst.ok_or(Errno::EINVAL)?);
                if id.src.is_none() {
                    id.src = Some(SocketAddrV4::new(local, port));
                }
                // RoCEv2 over IPv4 on the UDP link: the MAC follows from the address.
                self.queue(fd, h, event::ADDR_RESOLVED, 0, &[]);
                Ok(())
            }
            cmd::RESOLVE_ROUTE => {
                let h = b.u32(ucm_resolve_route::id);
                let id = self.id(fd, h)?;
                if id.dst.is_none() {
                    return Err(Errno::EINVAL);
                }
                id.route = true;
                self.queue(fd, h, event::ROUTE_RESOLVED, 0, &[]);
                Ok(())
            }
            cmd::QUERY_ROUTE => {
                let h = b.u32(ucm_query::id);
                let guid = self.nic.dev.node_guid;
                let mtu = self.svc.path_mtu();
                let id = self.id(fd, h)?;
                let mut out = vec![0u8; ucm_query_route_resp::SIZE];
                out[..8].copy_from_slice(&guid.to_be_bytes());
                let gid =
                    |a: &Option<SocketAddrV4>| a.map(|a| ipv4_gid(*a.ip())).unwrap_or([0; 16]);
                let r = ucm_query_route_resp::ib_route;
                if id.dst.is_some() {
                    out[r + user_path_rec::dgid..r + user_path_rec::dgid + 16]
                        .copy_from_slice(&gid(&id.dst));
                }
                out[r + user_path_rec::sgid..r + user_path_rec::sgid + 16]
                    .copy_from_slice(&gid(&id.src));
                out[r + user_path_rec::pkey..r + user_path_rec::pkey + 2]
                    .copy_from_slice(&0xffffu16.to_be_bytes());
                if id.route {
                    let (sport, dport) = (
                        id.src.map_or(0, |a| a.port()),
                        id.dst.map_or(0, |a| a.port()),
                    );
                    iboe_path(&mut out[r..r + user_path_rec::SIZE], mtu, sport, dport);
                }
                put_sockaddr(&mut out, ucm_query_route_resp::src_addr, id.src);
                put_sockaddr(&mut out, ucm_query_route_resp::dst_addr, id.dst);
                let n = u32::from(id.route);
                out[ucm_query_route_resp::num_paths..][..4].copy_from_slice(&n.to_ne_bytes());
                out[ucm_query_route_resp::port_num] = 1;
                // No device index: librdmacm then matches the device by its GUID.
                out[ucm_query_route_resp::ibdev_index..][..4]
                    .copy_from_slice(&u32::MAX.to_ne_bytes());
                respond(b.u64(ucm_query::response), &out)
            }
            cmd::LISTEN => {
                let h = b.u32(ucm_listen::id);
                let (src, ps) = {
                    let id = self.id(fd, h)?;
                    (id.src.ok_or(Errno::EINVAL)?, id.ps)
                };
                if self.listeners.contains_key(&(ps, src.port())) {
                    return Err(Errno(libc::EADDRINUSE));
                }
                // The backlog bounds the requests not yet answered (Linux
                // `ucma_listen`; 0 or too large: the maximum).
                let backlog = b.u32(ucm_listen::backlog) as usize;
                let r = if ps == PS_UDP {
                    self.svc.listen_ud(SocketAddr::V4(src))
                } else {
                    self.svc.listen_backlog(SocketAddr::V4(src), backlog)
                };
                r.map_err(|_| Errno(libc::EADDRINUSE))?;
                self.listeners.insert((ps, src.port()), (fd, h));
                Ok(())
            }
            cmd::CONNECT => {
                let h = b.u32(ucm_connect::id);
                let (qpn, p) = conn_param(&b, ucm_connect::conn_param);
                let (dst, ps, sport) = {
                    let id = self.id(fd, h)?;
                    (
                        id.dst.ok_or(Errno::EINVAL)?,
                        id.ps,
                        id.src.map_or(0, |a| a.port()),
                    )
                };
                // The IP CM header carries the id's own port (its address).
                self.svc.set_next_src_port(sport);
                let c = if ps == PS_UDP {
                    // A UD id resolves the service by SIDR (Linux `cma_resolve_ib_udp`).
                    self.svc.resolve_ud(SocketAddr::V4(dst), &p.private_data)
                } else {
                    self.svc.connect_qpn(qpn, SocketAddr::V4(dst), &p)
                }
                .map_err(cm_err)?;
                self.id(fd, h)?.conn = Some(c);
                self.by_conn.insert(c, (fd, h));
                Ok(())
            }
            cmd::ACCEPT => {
                let h = b.u32(ucm_accept::id);
                let (qpn, p) = conn_param(&b, ucm_accept::conn_param);
                let (c, ps) = {
                    let id = self.id(fd, h)?;
                    (id.conn.ok_or(Errno::EINVAL)?, id.ps)
                };
                if ps == PS_UDP {
                    // The SIDR_REP with the service's QP and Q_Key (`cma_send_sidr_rep`).
                    let qkey = match b.u32(ucm_accept::conn_param + ucm_conn_param::qkey) {
                        0 => UDP_QKEY,
                        k => k,
                    };
                    self.by_conn.remove(&c);
                    return self
                        .svc
                        .sidr_accept(c, qpn, qkey, &p.private_data)
                        .map_err(cm_err);
                }
                if let Some(uid) = Some(b.u64(ucm_accept::uid)).filter(|&u| u != 0) {
                    self.id(fd, h)?.uid = uid;
                }
                // After CONNECT_RESPONSE (the active side's QP in RTS): the RTU;
                // after CONNECT_REQUEST: the REP.
                let active = self.svc.engine().qp_params(c).is_some_and(|_| {
                    self.svc.engine().state(c) == Some(ferroverbs_cm::engine::State::RepRcvd)
                });
                if active {
                    self.lib_established.insert(c);
                    self.svc.establish_rtu(c).map_err(cm_err)
                } else {
                    self.svc.accept_qpn(c, qpn, &p).map_err(cm_err)
                }
            }
            cmd::REJECT => {
                let h = b.u32(ucm_reject::id);
                let (c, ps) = {
                    let id = self.id(fd, h)?;
                    (id.conn.ok_or(Errno::EINVAL)?, id.ps)
                };
                if ps == PS_UDP {
                    self.by_conn.remove(&c);
                    return self.svc.reject_sidr(c).map_err(cm_err);
                }
                let n = usize::from(b.u8(ucm_reject::private_data_len));
                let pd = b
                    .bytes(ucm_reject::private_data, n.min(MAX_PRIVATE_DATA))
                    .to_vec();
                self.svc.reject(c, &pd).map_err(cm_err)
            }
            cmd::DISCONNECT => {
                let h = b.u32(ucm_disconnect::id);
                let c = self.id(fd, h)?.conn.ok_or(Errno::EINVAL)?;
                self.svc.disconnect(c, None).map_err(cm_err)
            }
            cmd::INIT_QP_ATTR => {
                let h = b.u32(ucm_init_qp_attr::id);
                let state = b.u32(ucm_init_qp_attr::qp_state);
                let (conn, ps) = {
                    let id = self.id(fd, h)?;
                    (id.conn, id.ps)
                };
                let out = if ps == PS_UDP {
                    ud_qp_attr(state)?
                } else {
                    self.init_qp_attr(conn, state)?
                };
                respond(b.u64(ucm_init_qp_attr::response), &out)
            }
            cmd::SET_OPTION | cmd::NOTIFY => Ok(()),
            cmd::MIGRATE_ID => {
                // Written to the file the id moves to, naming the file it is on (Linux
                // `ucma_migrate_id`; librdmacm's synchronous ids each have a channel
                // of their own, and `rdma_get_request` moves the new id to one).
                let h = b.u32(ucm_migrate_id::id);
                let from = b.u32(ucm_migrate_id::fd) as i32;
                if !self.files.contains_key(&fd) {
                    return Err(Errno::EBADF);
                }
                let old = self.files.get_mut(&from).ok_or(Errno::EBADF)?;
                let id = old.ids.remove(&h).ok_or(Errno::ENOENT)?;
                let handle_of = |ev: &[u8]| {
                    u32::from_ne_bytes(ev[ucm_event_resp::id..][..4].try_into().unwrap_or([0; 4]))
                };
                let had = !old.events.is_empty();
                let (moved, kept): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut old.events)
                    .into_iter()
                    .partition(|(acct, ev)| *acct == h || handle_of(ev) == h);
                old.events = kept;
                if had && old.events.is_empty() {
                    readiness(from, false);
                }
                let reported = id.events_reported;
                let new = self.files.get_mut(&fd).ok_or(Errno::EBADF)?;
                new.ids.insert(h, id);
                let was_empty = new.events.is_empty();
                new.events.extend(moved);
                if was_empty && !new.events.is_empty() {
                    readiness(fd, true);
                }
                for v in self.by_conn.values_mut().chain(self.listeners.values_mut()) {
                    if *v == (from, h) {
                        *v = (fd, h);
                    }
                }
                respond(b.u64(ucm_migrate_id::response), &reported.to_ne_bytes())
            }
            cmd::JOIN_IP_MCAST | cmd::JOIN_MCAST => self.join(fd, cmd, &b),
            // No group is ever joined: the group's id is not found (Linux
            // `ucma_leave_multicast`: ENOENT from its multicast table).
            cmd::LEAVE_MCAST => Err(Errno::ENOENT),
            cmd::GET_OPTION | cmd::QUERY => Err(Errno::ENOSYS),
            _ => Err(Errno::EINVAL),
        }
    }

    /// JOIN_IP_MCAST / JOIN_MCAST: the checks of Linux's `ucma_process_join` and
    /// `rdma_join_multicast` (the address size and join flags EINVAL, an unknown id
    /// ENOENT, an id not yet bound to the device ENODEV, one not of the UDP port
    /// space EINVAL), then ENOSYS, what `rdma_join_multicast` answers for a port that
    /// offers no multicast: the simulated NIC forwards no multicast. (On a ConnectX's
    /// RoCE port Linux joins in software, `cma_iboe_join_multicast`.)
    fn join(&mut self, fd: i32, cmd: u32, b: &B<'_>) -> Result<(), Errno> {
        let (h, addr_off, size, flags) = if cmd == cmd::JOIN_IP_MCAST {
            // `ucma_join_ip_multicast`: the size of the address's family, full member.
            let size = match b.u16(ucm_join_ip_mcast::addr) {
                AF_INET => 16,
                f if f == libc::AF_INET6 as u16 => 28,
                _ => 0,
            };
            (
                b.u32(ucm_join_ip_mcast::id),
                ucm_join_ip_mcast::addr,
                size,
                0,
            )
        } else {
            (
                b.u32(ucm_join_mcast::id),
                ucm_join_mcast::addr,
                b.u16(ucm_join_mcast::addr_size),
                b.u16(ucm_join_mcast::join_flags),
            )
        };
        // `rdma_addr_size` of the address given: 0 for an unknown family.
        let want = match b.u16(addr_off) {
            AF_INET => 16,
            f if f == libc::AF_INET6 as u16 => 28,
            f if f == libc::AF_IB as u16 => 48,
            _ => 0,
        };
        if size != want || want == 0 {
            return Err(Errno::EINVAL);
        }
        // RDMA_MC_JOIN_FLAG_FULLMEMBER or _SENDONLY_FULLMEMBER.
        if flags > 1 {
            return Err(Errno::EINVAL);
        }
        let id = self.id(fd, h)?;
        if id.src.is_none() {
            return Err(Errno::ENODEV);
        }
        if id.ps != PS_UDP {
            return Err(Errno::EINVAL);
        }
        Err(Errno::ENOSYS)
    }

    /// The INIT_QP_ATTR response (`ib_uverbs_qp_attr`) for a transition to `state`.
    fn init_qp_attr(&self, conn: Option<ConnId>, state: u32) -> Result<Vec<u8>, Errno> {
        let mut o = vec![0u8; uverbs_qp_attr::SIZE];
        let put32 =
            |o: &mut Vec<u8>, off: usize, v: u32| o[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        let st = match state {
            QPS_INIT => QpState::Init,
            QPS_RTR => QpState::Rtr,
            QPS_RTS => QpState::Rts,
            _ => return Err(Errno::EINVAL),
        };
        put32(&mut o, uverbs_qp_attr::qp_state, state);
        let attr = match conn {
            Some(c) => self
                .svc
                .init_qp_attr(c, st, &ConnParam::default())
                .map_err(|_| Errno::EINVAL)?,
            // Before the connection (rdma_create_qp on an id with a route): INIT
            // with no remote access yet (Linux `cma_ib_init_qp_attr`).
            None if st == QpState::Init => QpTransitionAttr::Init {
                port: 1,
                access: ferroverbs::verbs::AccessFlags::empty(),
            },
            None => return Err(Errno::EINVAL),
        };
        let mask = match attr {
            QpTransitionAttr::Init { port, access } => {
                put32(&mut o, uverbs_qp_attr::qp_access_flags, access.bits());
                o[uverbs_qp_attr::port_num] = port;
                m::STATE | m::PKEY_INDEX | m::PORT | m::ACCESS_FLAGS
            }
            QpTransitionAttr::Rtr {
                peer,
                sgid_index,
                path_mtu,
                dest_qpn,
                rq_psn,
                max_dest_rd_atomic,
                min_rnr_timer,
            } => {
                put32(&mut o, uverbs_qp_attr::path_mtu, path_mtu.into());
                put32(&mut o, uverbs_qp_attr::dest_qp_num, dest_qpn);
                put32(&mut o, uverbs_qp_attr::rq_psn, rq_psn);
                o[uverbs_qp_attr::max_dest_rd_atomic] = max_dest_rd_atomic;
                o[uverbs_qp_attr::min_rnr_timer] = min_rnr_timer;
                let a = uverbs_qp_attr::ah_attr;
                o[a + ah_attr::grh + global_route::dgid..][..16].copy_from_slice(&peer.gid);
                o[a + ah_attr::grh + global_route::sgid_index] = sgid_index;
                o[a + ah_attr::grh + global_route::hop_limit] = 64;
                o[a + ah_attr::is_global] = 1;
                o[a + ah_attr::port_num] = 1;
                m::STATE
                    | m::AV
                    | m::PATH_MTU
                    | m::DEST_QPN
                    | m::RQ_PSN
                    | m::MAX_DEST_RD_ATOMIC
                    | m::MIN_RNR_TIMER
            }
            QpTransitionAttr::Rts {
                sq_psn,
                timeout,
                retry_cnt,
                rnr_retry,
                max_rd_atomic,
            } => {
                put32(&mut o, uverbs_qp_attr::sq_psn, sq_psn);
                o[uverbs_qp_attr::timeout] = timeout;
                o[uverbs_qp_attr::retry_cnt] = retry_cnt;
                o[uverbs_qp_attr::rnr_retry] = rnr_retry;
                o[uverbs_qp_attr::max_rd_atomic] = max_rd_atomic;
                m::STATE
                    | m::TIMEOUT
                    | m::RETRY_CNT
                    | m::RNR_RETRY
                    | m::SQ_PSN
                    | m::MAX_QP_RD_ATOMIC
            }
        };
        put32(&mut o, uverbs_qp_attr::qp_attr_mask, mask);
        Ok(o)
    }

    /// Queues an event for id `h` of file `fd` (`param`: the conn param bytes).
    fn queue(&mut self, fd: i32, h: u32, ev: u32, status: i32, param: &[u8]) {
        let Some(f) = self.files.get_mut(&fd) else {
            return;
        };
        let uid = f.ids.get(&h).map(|i| i.uid).unwrap_or(0);
        self.queue_uid(fd, uid, h, h, ev, status, param);
    }

    #[allow(clippy::too_many_arguments)]
    fn queue_uid(
        &mut self,
        fd: i32,
        uid: u64,
        h: u32,
        account: u32,
        ev: u32,
        status: i32,
        param: &[u8],
    ) {
        let Some(f) = self.files.get_mut(&fd) else {
            return;
        };
        let mut r = vec![0u8; ucm_event_resp::SIZE];
        r[ucm_event_resp::uid..][..8].copy_from_slice(&uid.to_ne_bytes());
        r[ucm_event_resp::id..][..4].copy_from_slice(&h.to_ne_bytes());
        r[ucm_event_resp::event..][..4].copy_from_slice(&ev.to_ne_bytes());
        r[ucm_event_resp::status..][..4].copy_from_slice(&status.to_ne_bytes());
        let n = param.len().min(ucm_ud_param::SIZE);
        r[ucm_event_resp::param..ucm_event_resp::param + n].copy_from_slice(&param[..n]);
        let was_empty = f.events.is_empty();
        f.events.push_back((account, r));
        if was_empty {
            readiness(fd, true);
        }
    }

    /// Runs the service and turns its events into the files' events.
    fn pump(&mut self) {
        self.svc.poll();
        while let Some(e) = self.svc.next_event() {
            let conn_pd = |pd: &[u8]| {
                let mut p = vec![0u8; ucm_conn_param::SIZE];
                let n = pd.len().min(MAX_PRIVATE_DATA);
                p[ucm_conn_param::private_data..][..n].copy_from_slice(&pd[..n]);
                p[ucm_conn_param::private_data_len] = n as u8;
                p
            };
            match e {
                CmEvent::ConnectRequest {
                    id,
                    peer,
                    local,
                    private_data,
                    responder_resources,
                    initiator_depth,
                } => {
                    let Some(&(fd, lh)) = self.listeners.get(&(PS_TCP, local.port())) else {
                        let _ = self.svc.reject(id, &[]);
                        continue;
                    };
                    let (SocketAddr::V4(peer), SocketAddr::V4(local)) = (peer, local) else {
                        continue;
                    };
                    let (h, luid) = self.request_id(fd, lh, PS_TCP, local, peer, id);
                    let mut p = conn_pd(&private_data);
                    p[ucm_conn_param::responder_resources] = responder_resources;
                    p[ucm_conn_param::initiator_depth] = initiator_depth;
                    p[ucm_conn_param::retry_count] = 7;
                    p[ucm_conn_param::rnr_retry_count] = 7;
                    // For CONNECT_REQUEST the uid is the listener's (librdmacm makes
                    // the new id from it).
                    self.queue_uid(fd, luid, h, lh, event::CONNECT_REQUEST, 0, &p);
                }
                CmEvent::ConnectResponse { id, private_data } => {
                    if let Some(&(fd, h)) = self.by_conn.get(&id) {
                        self.queue(fd, h, event::CONNECT_RESPONSE, 0, &conn_pd(&private_data));
                    }
                }
                CmEvent::Established { id } => {
                    if !self.lib_established.remove(&id) {
                        self.simple(id, event::ESTABLISHED, 0);
                    }
                }
                CmEvent::Rejected {
                    id,
                    reason,
                    private_data,
                } => {
                    if let Some(&(fd, h)) = self.by_conn.get(&id) {
                        self.queue(
                            fd,
                            h,
                            event::REJECTED,
                            reason.into(),
                            &conn_pd(&private_data),
                        );
                    }
                }
                CmEvent::Unreachable { id } => self.simple(id, event::UNREACHABLE, ETIMEDOUT),
                CmEvent::Disconnected { id } => self.simple(id, event::DISCONNECTED, 0),
                CmEvent::TimewaitExit { id } => self.simple(id, event::TIMEWAIT_EXIT, 0),
                CmEvent::SidrRequest {
                    id,
                    peer,
                    local,
                    private_data,
                } => {
                    let Some(&(fd, lh)) = self.listeners.get(&(PS_UDP, local.port())) else {
                        let _ = self.svc.reject_sidr(id);
                        continue;
                    };
                    let (SocketAddr::V4(peer), SocketAddr::V4(local)) = (peer, local) else {
                        continue;
                    };
                    let (h, luid) = self.request_id(fd, lh, PS_UDP, local, peer, id);
                    // The UD form of the event: the private data after the IP header.
                    let mut p = vec![0u8; ucm_ud_param::SIZE];
                    let n = private_data.len().min(MAX_PRIVATE_DATA);
                    p[ucm_ud_param::private_data..][..n].copy_from_slice(&private_data[..n]);
                    p[ucm_ud_param::private_data_len] = n as u8;
                    self.queue_uid(fd, luid, h, lh, event::CONNECT_REQUEST, 0, &p);
                }
                CmEvent::SidrResolved {
                    id,
                    status,
                    qpn,
                    qkey,
                    peer,
                } => {
                    let Some(&(fd, h)) = self.by_conn.get(&id) else {
                        continue;
                    };
                    self.by_conn.remove(&id);
                    if status != 0 {
                        // Linux `cma_sidr_rep_handler`: UNREACHABLE with the SIDR status.
                        self.queue(fd, h, event::UNREACHABLE, status.into(), &[]);
                        continue;
                    }
                    // ESTABLISHED on a UD id: the service's QP, its Q_Key, and the
                    // address handle attributes of the peer.
                    let mut p = vec![0u8; ucm_ud_param::SIZE];
                    p[ucm_ud_param::qp_num..][..4].copy_from_slice(&qpn.to_ne_bytes());
                    p[ucm_ud_param::qkey..][..4].copy_from_slice(&qkey.to_ne_bytes());
                    let a = ucm_ud_param::ah_attr;
                    p[a + ah_attr::grh + global_route::dgid..][..16].copy_from_slice(&peer.gid);
                    p[a + ah_attr::grh + global_route::hop_limit] = 64;
                    p[a + ah_attr::is_global] = 1;
                    p[a + ah_attr::port_num] = 1;
                    self.queue(fd, h, event::ESTABLISHED, 0, &p);
                }
            }
        }
    }

    /// The id a request to listener `lh` of file `fd` makes (Linux `ucma_connect_event_handler`):
    /// its handle, and the listener's uid the CONNECT_REQUEST event carries.
    fn request_id(
        &mut self,
        fd: i32,
        lh: u32,
        ps: u16,
        local: SocketAddrV4,
        peer: SocketAddrV4,
        conn: ConnId,
    ) -> (u32, u64) {
        let h = self.next_handle;
        self.next_handle += 1;
        let mut luid = 0;
        if let Some(f) = self.files.get_mut(&fd) {
            luid = f.ids.get(&lh).map_or(0, |i| i.uid);
            f.ids.insert(
                h,
                Id {
                    uid: 0,
                    ps,
                    src: Some(local),
                    dst: Some(peer),
                    route: true,
                    conn: Some(conn),
                    events_reported: 0,
                },
            );
        }
        self.by_conn.insert(conn, (fd, h));
        (h, luid)
    }

    fn simple(&mut self, c: ConnId, ev: u32, status: i32) {
        if let Some(&(fd, h)) = self.by_conn.get(&c) {
            self.queue(fd, h, ev, status, &[]);
        }
    }
}

/// The INIT_QP_ATTR response of a UD id's QP (Linux `cma_init_ud_qp`): INIT with
/// the P_Key index, port and rdma_cm's Q_Key; RTR with the state alone; RTS from PSN 0.
fn ud_qp_attr(state: u32) -> Result<Vec<u8>, Errno> {
    let mut o = vec![0u8; uverbs_qp_attr::SIZE];
    let put32 =
        |o: &mut Vec<u8>, off: usize, v: u32| o[off..off + 4].copy_from_slice(&v.to_ne_bytes());
    put32(&mut o, uverbs_qp_attr::qp_state, state);
    let mask = match state {
        QPS_INIT => {
            put32(&mut o, uverbs_qp_attr::qkey, UDP_QKEY);
            o[uverbs_qp_attr::port_num] = 1;
            m::STATE | m::PKEY_INDEX | m::PORT | m::QKEY
        }
        QPS_RTR => m::STATE,
        QPS_RTS => m::STATE | m::SQ_PSN,
        _ => return Err(Errno::EINVAL),
    };
    put32(&mut o, uverbs_qp_attr::qp_attr_mask, mask);
    Ok(o)
}

/// `IB_SA_EQ`: a path record's selector meaning "exactly".
const SA_EQ: u8 = 2;
/// `CMA_IBOE_PACKET_LIFETIME`: the packet lifetime of a RoCE path (4.096 us × 2^16).
const IBOE_PACKET_LIFETIME: u8 = 16;

/// The rest of a resolved RoCE route's path record (`ib_user_path_rec`; its GIDs and
/// P_Key are written by the caller), as Linux's `cma_resolve_iboe_route` fills it and
/// `ib_copy_path_rec_to_user` copies it out: the route's hop limit (64, the IPv4
/// default; above 1, so that rsocket's datagram service makes its address handles
/// global), reversible, the MTU and rate "exactly" selected (the port's MTU, the
/// port's current rate), traffic class and SL 0 (no TOS set), the packet lifetime,
/// and RoCEv2's flow label from the ports (`cma_get_roce_udp_flow_label`). No LIDs
/// on RoCE.
fn iboe_path(rec: &mut [u8], mtu: ferroverbs::Mtu, sport: u16, dport: u16) {
    use user_path_rec as p;
    let fl = ferroverbs_cm::ipcm::roce_flow_label(sport, dport);
    rec[p::flow_label..p::flow_label + 4].copy_from_slice(&fl.to_be_bytes());
    rec[p::reversible..p::reversible + 4].copy_from_slice(&1u32.to_ne_bytes());
    rec[p::mtu..p::mtu + 4].copy_from_slice(&(mtu as u32).to_ne_bytes());
    rec[p::hop_limit] = ferroverbs_cm::service::HOP_LIMIT;
    rec[p::traffic_class] = 0;
    rec[p::sl] = 0;
    rec[p::mtu_selector] = SA_EQ;
    rec[p::rate_selector] = SA_EQ;
    rec[p::rate] = 0; // IB_RATE_PORT_CURRENT
    rec[p::packet_life_time_selector] = SA_EQ;
    rec[p::packet_life_time] = IBOE_PACKET_LIFETIME;
}

/// The IPv4-mapped GID of `ip`.
fn ipv4_gid(ip: Ipv4Addr) -> [u8; 16] {
    ip.to_ipv6_mapped().octets()
}

/// GET_EVENT: the next event of file `fd` into the response buffer; blocks while none
/// waits, unless the descriptor is non-blocking (EAGAIN), as `ucma_get_event` does.
///
/// A wait outlives a `close` of its descriptor by another thread: Linux's read holds
/// the file, whose release (`ucma_close`) comes only after the read returns, and with
/// no event to come the read stays blocked; programs rely on it (rping of rdma-core
/// 44 closes its channel while its CM thread waits in `rdma_get_cm_event`, and exits
/// 0 from `main`). Such a wait blocks until the process exits, never answering EBADF
/// for a file it found open.
fn get_event(dev: &Arc<Mutex<Device>>, fd: i32, body: &[u8]) -> Result<(), Errno> {
    let resp = B(body).u64(ucm_get_event::response);
    let mut mine = None;
    loop {
        {
            let mut d = dev.lock().unwrap_or_else(|e| e.into_inner());
            d.pump();
            match (d.files.get_mut(&fd), mine) {
                (Some(f), None) => mine = Some(f.serial),
                (Some(f), Some(s)) if f.serial == s => {}
                (None, None) => return Err(Errno::EBADF),
                // Closed while waiting (the number maybe reused since).
                _ => {
                    drop(d);
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            }
            let Some(f) = d.files.get_mut(&fd) else {
                continue;
            };
            if let Some((account, ev)) = f.events.pop_front() {
                if f.events.is_empty() {
                    readiness(fd, false);
                }
                if let Some(id) = f.ids.get_mut(&account) {
                    id.events_reported += 1;
                }
                return respond(resp, &ev);
            }
        }
        // SAFETY: F_GETFL of the caller's descriptor.
        let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if fl >= 0 && fl & libc::O_NONBLOCK != 0 {
            return Err(Errno::EAGAIN);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
