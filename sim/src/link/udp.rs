//! A RoCEv2 link over real UDP sockets: simulated NICs in different processes, or on
//! different hosts, exchange RoCEv2 datagrams as a RoCE NIC would.
//!
//! * **Addressing.** A NIC attached with [`UdpLink::attach`] binds one IPv4 address
//!   ([`UdpConfig::addr`]: `127.0.0.x` on one machine, a real address across hosts) and
//!   UDP port [`UdpConfig::port`] (4791 by default). Its GID index 0 is the IPv4-mapped
//!   address `::ffff:a.b.c.d` (`rocev2-wire.md` §1.3); its MAC, by convention of this
//!   link, is [`mac_for`] of that address, so that a peer derives the MAC from the GID
//!   (as ARP would) and captures are coherent ([`UdpConfig::sim_config`]).
//! * **Datagrams** carry exactly what RoCEv2 puts after the UDP header: BTH, extension
//!   headers, payload, pad and ICRC (§1.1). A frame the device transmits goes to the
//!   address in its IPv4 destination, at the peers' port (`UdpConfig::peer_port`).
//! * **The ICRC** (§2.4) covers the masked IPv4 and UDP headers, which the kernel owns
//!   on a socket. Both ends therefore agree on the *canonical* headers a receiver
//!   reconstructs from what `recvfrom` tells it: IPv4 version 4, IHL 5, total length
//!   from the datagram, identification 0, DF, protocol 17, the real source and
//!   destination addresses (TOS, TTL and checksum are masked); UDP from the datagram's
//!   real source port to 4791, length from the datagram (checksum masked). This is
//!   exactly the header the simulator's transport emits (identification 0, DF), so a
//!   frame built by the device goes out unchanged when it leaves from its own source
//!   port. With a configured port other than 4791 the real destination port differs
//!   from the canonical 4791; both ends use the canonical value.
//! * **Source ports** follow the entropy rule (`rdma_get_udp_sport`, §1.1): the
//!   transport puts the QP's port (0xC000-0xFFFF) in each frame, and the link sends it
//!   from a socket bound to that port on the NIC's address (made on first use, at most
//!   [`MAX_SOURCE_PORTS`]), connected to the first destination it sends to (`send`
//!   skips `sendto`'s route lookup; other destinations get `sendto`, and a send
//!   refused for an earlier datagram's ICMP error is made again). If such a socket
//!   cannot be bound (the port is taken, or the limit is reached, or
//!   [`UdpConfig::entropy_ports`] is off), the datagram leaves from the main socket
//!   and the link rewrites the frame's source port and ICRC to match (counted as
//!   `tx_port_fallback`).
//! * **Receive.** The link has no thread of its own: it is the device's
//!   [`Ingress`]. Whoever services the device reads the socket
//!   first, without blocking (`recvmmsg` with `MSG_DONTWAIT`, bursts of [`RX_BURST`],
//!   at most [`RX_POLL_MAX`] datagrams per service), rebuilds each datagram's full
//!   Ethernet frame in a pooled buffer (destination MAC = the NIC's port 1, source MAC
//!   = [`mac_for`] the sender, the canonical IPv4 and UDP headers) and queues it for
//!   the device, which then processes it in the same service and checks it like any
//!   frame (structure, checksums, ICRC, QP, addresses, P_Key), counting drops by
//!   reason ([`crate::DataPathStats`]). The link itself drops, and counts, what cannot
//!   be a RoCEv2 packet before it reaches the device: datagrams too short for a BTH
//!   and an ICRC, too long for a frame buffer, with a transport version other than 0,
//!   or with an opcode outside the table. Nothing in this path panics on any input
//!   ([`UdpLink::deliver`] is the receive function, usable by tests without a socket;
//!   [`UdpLink::poll`] reads the socket without processing).
//! * **Who reads.** In deterministic mode, the thread that steps the device
//!   ([`Sim::step`]): an application that busy-polls its CQ and steps while it finds
//!   nothing receives each datagram on its own thread, as a busy-polling application
//!   on a real NIC does, with no thread hand-off (`docs/performance.md`). In
//!   threaded mode, the device thread: it reads the socket on every iteration and,
//!   once it finds nothing, blocks in `ppoll` on the socket until a datagram arrives,
//!   a timer is due, or it is woken (it neither spins nor yields: each iteration is a
//!   system call anyway, spinning threads starve the application's on a machine with
//!   few CPUs, and a yielding one gets the CPU back only after the other runnable
//!   threads' time slices, where a woken one runs at once). The application thread only posts and
//!   polls. One reader at a time (a lock taken with `try_lock`) keeps the datagrams in
//!   their order.
//! * **ACKs off the critical path.** With the link attached, the ACKs a service of the
//!   device owes are sent at the start of the next service instead of its end (one ACK
//!   per QP acknowledges every packet received before it, as RC allows), so the
//!   receive completion of a SEND is visible before the `sendto` of its ACK: a
//!   ping-pong application posts its answer first. The delay is one service (the
//!   device thread, or the application's next poll), never a timer: the requester's
//!   ACK timeout does not fire for it.
//! * **Capture.** [`UdpConfig::pcap`] or `FERROVERBS_PCAP` ([`super::pcap`]) writes
//!   every transmitted frame (as sent) and every received frame (as rebuilt).
//!
//! Only port 1 of a device is carried. The kernel's socket buffer is the link's queue
//! ([`SOCKET_RECEIVE_BUFFER`] asked for): datagrams it drops are lost (the transport
//! recovers through NAKs; see `docs/simulator.md`).

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::time::Duration;

use super::faults::{self, Faults};
use super::{lock, FaultStats, FramePool, Impairments, PcapWriter, RxQueue, Uplink, MAX_FRAME};
use crate::device::{Sim, SimConfig, WeakSim};
use crate::mode::Ingress;
use crate::wire::{bth, ethernet, frame, ipv4, roce, udp, Opcode};

/// The RoCEv2 UDP port (IANA).
pub const ROCEV2_PORT: u16 = udp::ROCEV2_PORT;

/// Most per-source-port sending sockets a link opens.
pub const MAX_SOURCE_PORTS: usize = 256;

/// The receive buffer a link asks for on its socket: room for the full PSN window
/// (256 packets of up to 4 KiB, with the kernel's per-datagram overhead) of a few
/// QPs sending at once, where the default (`net.core.rmem_default`, usually 208 KiB,
/// about 90 datagrams on loopback) drops the tail of every burst.
pub const SOCKET_RECEIVE_BUFFER: usize = 8 << 20;

/// Asks for a receive buffer of `bytes` on `sock`: `SO_RCVBUFFORCE` (privileged; it
/// ignores `net.core.rmem_max`), else `SO_RCVBUF` (capped by `net.core.rmem_max`).
/// Best effort: a smaller buffer only means more drops under load, which the
/// transport recovers from.
#[allow(unsafe_code)]
pub fn set_receive_buffer(sock: &UdpSocket, bytes: usize) {
    use std::os::fd::AsRawFd;
    let v: libc::c_int = bytes.min(libc::c_int::MAX as usize) as libc::c_int;
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: setsockopt(2) reads `size_of::<c_int>()` bytes from a pointer to a
        // live local `c_int`; the descriptor is the open socket `sock` borrows.
        let r = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r == 0 {
            return;
        }
    }
}

/// Datagrams one `recvmmsg` reads at most.
pub const RX_BURST: usize = 32;

/// Datagrams one poll of the link reads at most (in bursts of [`RX_BURST`]) before the
/// device processes them. One burst: the device then processes and acknowledges them
/// before it reads more, which keeps the ACKs flowing to a bulk sender (one ACK per
/// burst; reading 256 datagrams before processing halved the ACKs and cost the
/// 64 KiB WRITE test ~20 % of its throughput).
pub const RX_POLL_MAX: usize = RX_BURST;

/// The MAC address this link gives the NIC at `addr`: `02:00:a:b:c:d` (locally
/// administered, unicast).
pub const fn mac_for(addr: Ipv4Addr) -> [u8; 6] {
    let o = addr.octets();
    [0x02, 0x00, o[0], o[1], o[2], o[3]]
}

/// The RoCEv2 GID of an IPv4 address: `::ffff:a.b.c.d`.
pub const fn gid_for(addr: Ipv4Addr) -> [u8; 16] {
    let o = addr.octets();
    [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, o[0], o[1], o[2], o[3],
    ]
}

/// The IPv4 address of an IPv4-mapped GID, if it is one.
pub fn addr_of_gid(gid: &[u8; 16]) -> Option<Ipv4Addr> {
    (gid[..10] == [0; 10] && gid[10..12] == [0xff, 0xff])
        .then(|| Ipv4Addr::new(gid[12], gid[13], gid[14], gid[15]))
}

/// Configuration of a UDP link.
#[derive(Clone, Debug)]
pub struct UdpConfig {
    /// The NIC's IPv4 address (bound; its GID index 0 is the mapped address).
    pub addr: Ipv4Addr,
    /// The local UDP port (default 4791; 0 lets the kernel choose, see
    /// [`UdpLink::local_addr`]).
    pub port: u16,
    /// The port peers listen on (default: the same as [`UdpConfig::port`], or 4791
    /// when that is 0).
    pub peer_port: Option<u16>,
    /// Send from per-source-port sockets (the entropy rule); on by default.
    pub entropy_ports: bool,
    /// Capture every frame to this pcap file (shared with other links of the process
    /// capturing there). `None`: `FERROVERBS_PCAP` decides.
    pub pcap: Option<PathBuf>,
    /// Seeded impairments of every frame the link sends (the fabric's middleware,
    /// [`super::faults`], on each destination: loss, duplication, reordering,
    /// corruption, delay, ...); the capture shows the frames that leave. `None`: the
    /// spec in `FERROVERBS_IMPAIR` ([`super::faults::ENV_VAR`]), if set.
    pub impairments: Option<Impairments>,
}

impl UdpConfig {
    /// A link on `addr`, port 4791.
    pub fn new(addr: Ipv4Addr) -> UdpConfig {
        UdpConfig {
            addr,
            port: ROCEV2_PORT,
            peer_port: None,
            entropy_ports: true,
            pcap: None,
            impairments: None,
        }
    }

    /// Impairs the frames the link sends (see [`UdpConfig::impairments`]).
    pub fn impair(mut self, imp: Impairments) -> UdpConfig {
        self.impairments = Some(imp);
        self
    }

    /// Sets the local port (and, unless set, the peers' port).
    pub fn port(mut self, port: u16) -> UdpConfig {
        self.port = port;
        self
    }

    /// A one-port device configuration whose MAC is [`mac_for`] this address
    /// (deterministic or threaded mode; real time in both, since the peer is real).
    pub fn sim_config(&self, threaded: bool) -> SimConfig {
        let seed = u64::from(u32::from(self.addr));
        let mut c = if threaded {
            SimConfig::threaded(seed, 1)
        } else {
            SimConfig {
                virtual_time: false,
                ..SimConfig::deterministic(seed, 1)
            }
        };
        c.fw.macs = vec![mac_for(self.addr)];
        c
    }

    fn peer_port(&self) -> u16 {
        match (self.peer_port, self.port) {
            (Some(p), _) => p,
            (None, 0) => ROCEV2_PORT,
            (None, p) => p,
        }
    }
}

/// Counters of a UDP link (the device counts what it drops in
/// [`crate::DataPathStats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Datagrams sent.
    pub tx_datagrams: u64,
    /// Frames the device handed over that were not RoCEv2 over IPv4 from this link's
    /// address (dropped).
    pub tx_bad_frame: u64,
    /// Datagrams sent from the main socket with the frame's source port and ICRC
    /// rewritten (no socket for the entropy port).
    pub tx_port_fallback: u64,
    /// `sendto` failures (the datagram is lost).
    pub tx_errors: u64,
    /// Datagrams received (before any check).
    pub rx_datagrams: u64,
    /// Dropped: shorter than a BTH and an ICRC.
    pub rx_too_short: u64,
    /// Dropped: longer than a frame buffer holds.
    pub rx_too_long: u64,
    /// Dropped: BTH transport version other than 0.
    pub rx_bad_version: u64,
    /// Dropped: opcode not in the RoCEv2 table.
    pub rx_unknown_opcode: u64,
    /// Dropped: from an IPv6 address.
    pub rx_not_ipv4: u64,
    /// Dropped: the device's receive queue was full.
    pub rx_queue_full: u64,
    /// Frames queued for the device.
    pub rx_delivered: u64,
    /// `recvmmsg` failures other than "nothing there".
    pub rx_errors: u64,
    /// `recvmmsg` calls that returned datagrams (made by whoever services the device:
    /// its thread, or the thread that steps it).
    pub rx_bursts: u64,
    /// Times an idle device thread blocked waiting for a datagram.
    pub rx_waits: u64,
}

#[derive(Default)]
struct Counters {
    tx_datagrams: AtomicU64,
    tx_bad_frame: AtomicU64,
    tx_port_fallback: AtomicU64,
    tx_errors: AtomicU64,
    rx_datagrams: AtomicU64,
    rx_too_short: AtomicU64,
    rx_too_long: AtomicU64,
    rx_bad_version: AtomicU64,
    rx_unknown_opcode: AtomicU64,
    rx_not_ipv4: AtomicU64,
    rx_queue_full: AtomicU64,
    rx_delivered: AtomicU64,
    rx_errors: AtomicU64,
    rx_bursts: AtomicU64,
    rx_waits: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// A sending socket bound to one source port.
struct Sender {
    port: u16,
    /// `None`: binding failed; use the main socket.
    sock: Option<UdpSocket>,
    /// The address it is connected to, if any.
    peer: Option<SocketAddr>,
}

struct Inner {
    sock: UdpSocket,
    addr: Ipv4Addr,
    port: u16,
    peer_port: u16,
    entropy: bool,
    /// Sending sockets by source port.
    senders: Mutex<Vec<Sender>>,
    pool: Arc<FramePool>,
    rx: Arc<RxQueue>,
    mac: [u8; 6],
    pcap: Option<Arc<PcapWriter>>,
    /// The buffers of one receive burst, held by whoever reads the socket (one reader
    /// at a time keeps the datagrams in their order).
    rx_bufs: Mutex<Vec<Vec<u8>>>,
    /// Ends a device thread's [`Ingress::wait`]: one byte to `wake_rx`.
    wake_tx: UnixDatagram,
    wake_rx: UnixDatagram,
    /// A device thread is (about to be) blocked in [`Ingress::wait`].
    waiting: AtomicBool,
    c: Counters,
    /// The egress impairments, if any.
    faults: Option<Faults>,
}

/// The largest datagram a frame buffer holds.
const MAX_DATAGRAM: usize = MAX_FRAME - frame::ENCAP_LEN;

impl Inner {
    fn send(&self, mut f: Vec<u8>) {
        let ok = f.len() >= frame::ENCAP_LEN + roce::MIN_LEN
            && f[12..14] == [0x08, 0x00]
            && f[frame::IPV4_OFFSET] == 0x45
            && f[frame::IPV4_OFFSET + 9] == ipv4::PROTOCOL_UDP
            && Ipv4Addr::new(f[26], f[27], f[28], f[29]) == self.addr;
        if !ok {
            bump(&self.c.tx_bad_frame);
            self.pool.put(f);
            return;
        }
        let dst = Ipv4Addr::new(f[30], f[31], f[32], f[33]);
        let sport = u16::from_be_bytes([f[34], f[35]]);
        let to = SocketAddr::V4(SocketAddrV4::new(dst, self.peer_port));
        let r = {
            let mut senders = lock(&self.senders);
            let sock = self.sender(&mut senders, sport, to);
            let (sock, connected) = match sock {
                Some(s) => s,
                None => {
                    // Leave from the main socket: the receiver sees its port.
                    let port = self.port;
                    f[34..36].copy_from_slice(&port.to_be_bytes());
                    frame::Frame::new_unchecked(&mut f[..]).fill_icrc();
                    bump(&self.c.tx_port_fallback);
                    (&self.sock, false)
                }
            };
            if let Some(p) = &self.pcap {
                p.write(&f);
            }
            let d = &f[frame::ENCAP_LEN..];
            let send = || {
                if connected {
                    sock.send(d)
                } else {
                    sock.send_to(d, to)
                }
            };
            match send() {
                // A connected socket reports an earlier datagram's ICMP error (the
                // peer's port was closed) on this send, which did not go: again.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => send(),
                r => r,
            }
        };
        match r {
            Ok(_) => bump(&self.c.tx_datagrams),
            Err(_) => bump(&self.c.tx_errors),
        }
        self.pool.put(f);
    }

    /// The socket bound to source port `sport`, made on first use, and whether it is
    /// connected to `to`; `None` if the datagram must leave from the main socket.
    fn sender<'a>(
        &'a self,
        senders: &'a mut Vec<Sender>,
        sport: u16,
        to: SocketAddr,
    ) -> Option<(&'a UdpSocket, bool)> {
        if !self.entropy || sport == self.port {
            return None;
        }
        let i = match senders.iter().position(|s| s.port == sport) {
            Some(i) => i,
            None => {
                if senders.len() >= MAX_SOURCE_PORTS {
                    return None;
                }
                let sock = UdpSocket::bind(SocketAddrV4::new(self.addr, sport)).ok();
                // Connected to its first destination (an RC QP's only one): `send`
                // skips the route lookup of `sendto`. Others get `sendto`.
                let peer = sock.as_ref().and_then(|s| s.connect(to).ok()).map(|()| to);
                senders.push(Sender {
                    port: sport,
                    sock,
                    peer,
                });
                senders.len() - 1
            }
        };
        let s = &senders[i];
        s.sock.as_ref().map(|k| (k, s.peer == Some(to)))
    }

    /// Rebuilds the frame of a datagram from `src` that `recv` wrote at
    /// `buf[ENCAP_LEN..ENCAP_LEN + n]` and queues it (or drops and counts it).
    fn accept(&self, mut buf: Vec<u8>, n: usize, src: SocketAddr) {
        bump(&self.c.rx_datagrams);
        let SocketAddr::V4(src) = src else {
            bump(&self.c.rx_not_ipv4);
            self.pool.put(buf);
            return;
        };
        if n < roce::MIN_LEN {
            bump(&self.c.rx_too_short);
            self.pool.put(buf);
            return;
        }
        if n >= MAX_DATAGRAM {
            // recvfrom filled the buffer: the datagram may have been cut.
            bump(&self.c.rx_too_long);
            self.pool.put(buf);
            return;
        }
        let b = frame::ENCAP_LEN;
        let bt = bth::Packet::new_unchecked(&buf[b..b + bth::HEADER_LEN]);
        if bt.transport_version() != 0 {
            bump(&self.c.rx_bad_version);
            self.pool.put(buf);
            return;
        }
        if Opcode::from_u8(bt.opcode_raw()).is_none() {
            bump(&self.c.rx_unknown_opcode);
            self.pool.put(buf);
            return;
        }
        buf.truncate(b + n);
        self.encapsulate(&mut buf, *src.ip(), src.port());
        if let Some(p) = &self.pcap {
            p.write(&buf);
        }
        match self.rx.push(buf) {
            Ok(()) => bump(&self.c.rx_delivered),
            Err(f) => {
                bump(&self.c.rx_queue_full);
                self.pool.put(f);
            }
        }
    }

    /// Writes the Ethernet header and the canonical IPv4 and UDP headers in front of
    /// the datagram at `buf[ENCAP_LEN..]`.
    fn encapsulate(&self, buf: &mut [u8], src: Ipv4Addr, sport: u16) {
        let n = buf.len() - frame::ENCAP_LEN;
        let eth = ethernet::Repr {
            src_addr: ethernet::Address(mac_for(src)),
            dst_addr: ethernet::Address(self.mac),
            ethertype: ethernet::EtherType::IPV4,
        };
        // Lengths fit: n < MAX_DATAGRAM; the headers fit the buffer.
        let _ = eth.emit(&mut ethernet::Packet::new_unchecked(
            &mut buf[..frame::IPV4_OFFSET],
        ));
        let _ = ipv4::Repr::rocev2(src, self.addr).emit(
            &mut ipv4::Packet::new_unchecked(&mut buf[frame::IPV4_OFFSET..frame::UDP_OFFSET]),
            udp::HEADER_LEN + n,
        );
        let _ = udp::Repr::rocev2(sport).emit(
            &mut udp::Packet::new_unchecked(&mut buf[frame::UDP_OFFSET..frame::BTH_OFFSET]),
            n,
        );
    }

    fn stats(&self) -> UdpStats {
        let c = &self.c;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        UdpStats {
            tx_datagrams: g(&c.tx_datagrams),
            tx_bad_frame: g(&c.tx_bad_frame),
            tx_port_fallback: g(&c.tx_port_fallback),
            tx_errors: g(&c.tx_errors),
            rx_datagrams: g(&c.rx_datagrams),
            rx_too_short: g(&c.rx_too_short),
            rx_too_long: g(&c.rx_too_long),
            rx_bad_version: g(&c.rx_bad_version),
            rx_unknown_opcode: g(&c.rx_unknown_opcode),
            rx_not_ipv4: g(&c.rx_not_ipv4),
            rx_queue_full: g(&c.rx_queue_full),
            rx_delivered: g(&c.rx_delivered),
            rx_errors: g(&c.rx_errors),
            rx_bursts: g(&c.rx_bursts),
            rx_waits: g(&c.rx_waits),
        }
    }

    /// Reads the datagrams waiting on the socket (at most [`RX_POLL_MAX`]) without
    /// blocking and queues their frames for the device. Returns how many datagrams were
    /// read. If another thread is reading, returns 0 at once: it queues them in order.
    fn read_socket(&self) -> usize {
        let mut bufs = match self.rx_bufs.try_lock() {
            Ok(b) => b,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return 0,
        };
        let mut total = 0;
        let mut got = [(
            0usize,
            false,
            SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)),
        ); RX_BURST];
        while total < RX_POLL_MAX {
            for b in bufs.iter_mut() {
                if b.len() != MAX_FRAME {
                    b.resize(MAX_FRAME, 0);
                }
            }
            let n = match recv_burst(&self.sock, &mut bufs, &mut got) {
                Ok(n) => n,
                Err(e) => {
                    if !matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) {
                        bump(&self.c.rx_errors);
                    }
                    break;
                }
            };
            bump(&self.c.rx_bursts);
            for (b, &(len, truncated, src)) in bufs.iter_mut().zip(&got[..n]) {
                let buf = std::mem::replace(b, self.pool.get());
                // A cut datagram is too long for a frame buffer.
                let len = if truncated { MAX_DATAGRAM } else { len };
                self.accept(buf, len, src);
            }
            total += n;
            if n < bufs.len() {
                break;
            }
        }
        total
    }
}

/// One `recvmmsg(2)` with `MSG_DONTWAIT`: up to `bufs.len()` datagrams, each written at
/// `buf[ENCAP_LEN..]` of one buffer (each `MAX_FRAME` bytes long); `got[i]` is the
/// length of datagram `i`, whether it was cut (`MSG_TRUNC`) and its source. Returns how
/// many datagrams were read (`WouldBlock` when none was waiting).
#[allow(unsafe_code)]
fn recv_burst(
    sock: &UdpSocket,
    bufs: &mut [Vec<u8>],
    got: &mut [(usize, bool, SocketAddr); RX_BURST],
) -> io::Result<usize> {
    let n = bufs.len().min(RX_BURST);
    // SAFETY: `iovec`, `sockaddr_storage` and `mmsghdr` are plain C structures for
    // which all-zero bytes are a valid value (null pointers, zero lengths).
    let mut iov: [libc::iovec; RX_BURST] = unsafe { std::mem::zeroed() };
    let mut names: [libc::sockaddr_storage; RX_BURST] = unsafe { std::mem::zeroed() };
    let mut msgs: [libc::mmsghdr; RX_BURST] = unsafe { std::mem::zeroed() };
    for (i, b) in bufs[..n].iter_mut().enumerate() {
        let data = b.get_mut(frame::ENCAP_LEN..).unwrap_or_default();
        iov[i] = libc::iovec {
            iov_base: data.as_mut_ptr().cast(),
            iov_len: data.len(),
        };
    }
    for i in 0..n {
        let h = &mut msgs[i].msg_hdr;
        h.msg_name = (&mut names[i] as *mut libc::sockaddr_storage).cast();
        h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        h.msg_iov = &mut iov[i];
        h.msg_iovlen = 1;
    }
    // SAFETY: `msgs[..n]` are valid `mmsghdr`s: each names one live `sockaddr_storage`
    // of the size given in `msg_namelen` and one `iovec` that points into a distinct
    // live buffer of `iov_len` bytes (`bufs[i][ENCAP_LEN..]`, borrowed mutably for
    // this call); no control buffer. The kernel writes at most those bytes, and at
    // most `n` entries. The descriptor is the open socket `sock` borrows.
    let r = unsafe {
        libc::recvmmsg(
            sock.as_raw_fd(),
            msgs.as_mut_ptr(),
            n as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let k = (r as usize).min(n);
    for i in 0..k {
        let m = &msgs[i];
        let truncated = m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        got[i] = (
            m.msg_len as usize,
            truncated,
            sockaddr(&names[i], m.msg_hdr.msg_namelen),
        );
    }
    Ok(k)
}

/// The address `recvmmsg` wrote (an IPv6 placeholder for anything but IPv4).
fn sockaddr(s: &libc::sockaddr_storage, len: libc::socklen_t) -> SocketAddr {
    if s.ss_family == libc::AF_INET as libc::sa_family_t
        && len as usize >= std::mem::size_of::<libc::sockaddr_in>()
    {
        // SAFETY: the family is AF_INET and the kernel wrote a whole `sockaddr_in`;
        // `sockaddr_storage` is larger and suitably aligned for it.
        #[allow(unsafe_code)]
        let a = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
        SocketAddr::V4(SocketAddrV4::new(
            Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
            u16::from_be(a.sin_port),
        ))
    } else {
        SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 0, 0, 0))
    }
}

impl Ingress for Inner {
    fn poll(&self) -> usize {
        self.read_socket()
    }

    #[allow(unsafe_code)]
    fn wait(&self, timeout: Duration) -> bool {
        self.waiting.store(true, Ordering::SeqCst);
        let mut fds = [
            libc::pollfd {
                fd: self.sock.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.wake_rx.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
        };
        bump(&self.c.rx_waits);
        // SAFETY: `fds` is a live array of 2 `pollfd`s on open descriptors (the socket
        // and the wake socket this link owns); `ts` is a live `timespec`; no signal
        // mask.
        let ready = unsafe { libc::ppoll(fds.as_mut_ptr(), 2, &ts, std::ptr::null()) };
        self.waiting.store(false, Ordering::SeqCst);
        if fds[1].revents != 0 {
            let mut b = [0u8; 64];
            while self.wake_rx.recv(&mut b).is_ok() {}
        }
        // 0: the timeout; -1 (a signal): treated as a wake.
        ready != 0
    }

    fn wake(&self) {
        let _ = self.wake_tx.send(&[1]);
    }
}

impl Uplink for Inner {
    fn transmit(&self, frame: Vec<u8>) {
        match &self.faults {
            Some(f) if f.active() => f.forward(frame, &mut |fr| self.send(fr)),
            _ => self.send(frame),
        }
    }
}

/// Starts a thread per [`faults::Stage::LinkDown`] of `stages` that takes port 1's
/// link down and up at its times on the device clock ([`Sim::set_link`]). Each
/// thread looks at the clock at least every 10 ms and ends once its link is back up
/// or the device is gone (a virtual clock that never reaches the time ends it then).
fn link_flaps(sim: &Sim, stages: &[faults::Stage]) -> io::Result<()> {
    for st in stages {
        let faults::Stage::LinkDown { from, until } = *st else {
            continue;
        };
        let (weak, clock) = (sim.downgrade(), sim.clock().clone());
        std::thread::Builder::new()
            .name("ferroverbs-link-flap".into())
            .spawn(move || {
                for (at, up) in [(from, false), (until, true)] {
                    loop {
                        let now = clock.now();
                        if now >= at {
                            break;
                        }
                        std::thread::sleep((at - now).min(Duration::from_millis(10)));
                        if weak.upgrade().is_none() {
                            return;
                        }
                    }
                    match weak.upgrade() {
                        Some(sim) => {
                            sim.set_link(1, up);
                        }
                        None => return,
                    }
                }
            })?;
    }
    Ok(())
}

/// Releases the link's delayed frames when they are due, and frames held back for
/// reordering that no later frame released (within [`faults::WIRE_IDLE`]); ends with
/// the link.
fn release_thread(inner: std::sync::Weak<Inner>) {
    loop {
        let wait = {
            let Some(i) = inner.upgrade() else { return };
            let Some(f) = &i.faults else { return };
            f.release(&mut |fr| i.send(fr));
            match f.next_release() {
                Some(t) => Duration::from_nanos(t.saturating_sub(f.now())),
                None if f.active() => Duration::from_millis(1),
                None => faults::WIRE_IDLE,
            }
        };
        std::thread::park_timeout(wait.min(faults::WIRE_IDLE));
    }
}

/// A simulated NIC's RoCEv2 link over UDP. Dropping it disconnects the device.
pub struct UdpLink {
    inner: Arc<Inner>,
    sim: WeakSim,
}

impl core::fmt::Debug for UdpLink {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("UdpLink")
            .field("local", &self.local_addr())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl UdpLink {
    /// Binds `cfg.addr:cfg.port` and connects port 1 of `sim` to it: the device
    /// transmits into the link, and reads the socket whenever it is serviced (its
    /// [`Ingress`]: the device thread, or [`Sim::step`]).
    pub fn attach(sim: &Sim, cfg: UdpConfig) -> io::Result<UdpLink> {
        let sock = UdpSocket::bind(SocketAddrV4::new(cfg.addr, cfg.port))?;
        set_receive_buffer(&sock, SOCKET_RECEIVE_BUFFER);
        let (wake_tx, wake_rx) = UnixDatagram::pair()?;
        wake_tx.set_nonblocking(true)?;
        wake_rx.set_nonblocking(true)?;
        let pool = FramePool::new();
        let rx_bufs = (0..RX_BURST)
            .map(|_| {
                let mut b = pool.get();
                b.resize(MAX_FRAME, 0);
                b
            })
            .collect();
        let port = sock.local_addr()?.port();
        let pcap = match &cfg.pcap {
            Some(p) => Some(PcapWriter::shared(p)?),
            None => PcapWriter::from_env(),
        };
        let mac = sim
            .port_macs()
            .first()
            .copied()
            .unwrap_or(mac_for(cfg.addr));
        let impairments = match cfg.impairments.clone() {
            Some(i) => Some(i),
            None => match std::env::var(faults::ENV_VAR) {
                Ok(spec) if !spec.trim().is_empty() => Some(spec.parse().map_err(|e| {
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("{}={spec}: {e}", faults::ENV_VAR),
                    )
                })?),
                _ => None,
            },
        };
        if let Some(imp) = &impairments {
            link_flaps(sim, &imp.stages)?;
        }
        let faults = impairments.filter(|i| !i.stages.is_empty()).map(|imp| {
            let f = Faults::new();
            f.set_clock(sim.clock());
            f.impair_all(u64::from(u32::from(cfg.addr)), imp);
            f
        });
        let inner = Arc::new(Inner {
            sock,
            addr: cfg.addr,
            port,
            peer_port: cfg.peer_port(),
            entropy: cfg.entropy_ports,
            senders: Mutex::new(Vec::new()),
            pool,
            rx: sim.rx_queue(),
            mac,
            pcap,
            rx_bufs: Mutex::new(rx_bufs),
            wake_tx,
            wake_rx,
            waiting: AtomicBool::new(false),
            c: Counters::default(),
            faults,
        });
        if inner.faults.is_some() {
            let weak = Arc::downgrade(&inner);
            let t = std::thread::Builder::new()
                .name("ferroverbs-udp-faults".into())
                .spawn(move || release_thread(weak))?;
            if let Some(f) = &inner.faults {
                f.set_wire(t.thread().clone());
            }
        }
        let uplink: Arc<dyn Uplink> = inner.clone();
        sim.set_uplink(Some(uplink), inner.pool.clone());
        let ingress: Arc<dyn Ingress> = inner.clone();
        sim.set_ingress(Some(ingress));
        Ok(UdpLink {
            inner,
            sim: sim.downgrade(),
        })
    }

    /// Reads the datagrams waiting on the socket, without blocking, into the device's
    /// receive queue (what servicing the device does first); returns how many. For
    /// tests that look at (or take) frames before the device processes them.
    pub fn poll(&self) -> usize {
        self.inner.read_socket()
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddrV4 {
        SocketAddrV4::new(self.inner.addr, self.inner.port)
    }

    /// Counters.
    pub fn stats(&self) -> UdpStats {
        self.inner.stats()
    }

    /// The receive function of the link: handles `datagram` as if it had arrived from
    /// `src` (checks, frame rebuilt, queued for the device, or dropped and counted).
    /// For tests that drive the receive path without sockets.
    pub fn deliver(&self, src: SocketAddrV4, datagram: &[u8]) {
        let mut buf = self.inner.pool.get();
        buf.resize(MAX_FRAME, 0);
        let n = datagram.len().min(MAX_DATAGRAM);
        buf[frame::ENCAP_LEN..frame::ENCAP_LEN + n].copy_from_slice(&datagram[..n]);
        self.inner.accept(buf, n, SocketAddr::V4(src));
        if self.inner.waiting.load(Ordering::SeqCst) {
            self.inner.wake();
        }
    }

    /// One line of the link's and `sim`'s wire counters (datagrams, drops, ICRC
    /// failures, NAKs, retransmits, and what the impairments did), for the
    /// `FERROVERBS_STATS` report of the libraries.
    pub fn summary(&self, sim: &Sim) -> String {
        let d = sim.stats().data_path;
        let mut s = format!(
            "link {:?}; device rx {} (bad ICRC {}, malformed {}), naks {}, rnr naks {}, retransmits {}",
            self.stats(),
            d.rx_frames,
            d.rx_bad_icrc,
            d.rx_malformed,
            d.naks,
            d.rnr_naks,
            d.retransmits
        );
        if d.tx_no_link + d.rx_link_down > 0 {
            s += &format!(
                "; link down: tx dropped {}, rx dropped {}",
                d.tx_no_link, d.rx_link_down
            );
        }
        if let Some(f) = self.fault_stats() {
            s += &format!("; impairments {f:?}");
        }
        s
    }

    /// What the egress impairments did (`None`: the link has none).
    pub fn fault_stats(&self) -> Option<FaultStats> {
        self.inner.faults.as_ref().map(Faults::stats)
    }

    /// The pcap writer this link captures to, if any.
    pub fn pcap(&self) -> Option<Arc<PcapWriter>> {
        self.inner.pcap.clone()
    }
}

impl Drop for UdpLink {
    fn drop(&mut self) {
        if let Some(s) = self.sim.upgrade() {
            s.set_ingress(None);
            s.set_uplink(None, FramePool::new());
        }
        if let Some(p) = &self.inner.pcap {
            let _ = p.flush();
        }
    }
}

/// The canonical headers (§ module documentation) of a datagram of `len` bytes from
/// `src` to `dst`: what both ends compute the ICRC over.
pub fn canonical_headers(
    src: SocketAddrV4,
    dst: Ipv4Addr,
    len: usize,
) -> Option<([u8; ipv4::HEADER_LEN], [u8; udp::HEADER_LEN])> {
    let ip = ipv4::Repr::rocev2(*src.ip(), dst)
        .header(udp::HEADER_LEN + len)
        .ok()?;
    let u = udp::Repr::rocev2(src.port()).header(len).ok()?;
    Some((ip, u))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        let a = Ipv4Addr::new(127, 0, 0, 9);
        assert_eq!(mac_for(a), [2, 0, 127, 0, 0, 9]);
        assert_eq!(addr_of_gid(&gid_for(a)), Some(a));
        assert_eq!(addr_of_gid(&[0; 16]), None);
        assert_eq!(UdpConfig::new(a).peer_port(), 4791);
        assert_eq!(UdpConfig::new(a).port(0).peer_port(), 4791);
        assert_eq!(UdpConfig::new(a).port(5000).peer_port(), 5000);
    }
}
