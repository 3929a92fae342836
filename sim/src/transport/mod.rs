//! The transports: RC (the requester that turns send WQEs into packets, the responder
//! that executes requests, and the completer that turns responses into completions)
//! and UD ([`ud`]: one packet per message, no acknowledgement).
//!
//! Facts from `shared/reference/rocev2-wire.md` §3-4 (Linux rxe/rdmavt behaviour and
//! the IBTA rules they implement):
//!
//! * A message of `len` bytes uses `max(1, ceil(len / PMTU))` packets (a READ request
//!   uses that many PSNs, one per response); FIRST and MIDDLE carry exactly one PMTU,
//!   LAST 1..PMTU, ONLY 0..PMTU. WRITE FIRST/ONLY carry the RETH (the whole message's
//!   length); the immediate rides on the LAST/ONLY packet.
//! * The requester sets AckReq on the last packet of each message and every
//!   [`requester::ACK_EVERY`] packets inside long ones; the responder acknowledges
//!   packets that ask, with the PSN of the packet and its MSN (messages completed).
//!   READ responses and atomic ACKs acknowledge everything before them.
//! * The responder classifies each PSN against the expected one: expected → execute;
//!   duplicate → re-ACK (SEND/WRITE), replay the READ or the saved atomic result;
//!   ahead → one NAK "PSN sequence error" with the expected PSN, then silence until it
//!   arrives. Class C errors (opcode out of sequence, operation not enabled on the QP,
//!   bad length, misaligned atomic → NAK invalid request; rkey/PD/access/bounds → NAK
//!   remote access error) move the responder QP to the error state; errors tied to a
//!   receive WQE complete it in error first (too small: local length error; unusable
//!   scatter entry: local protection error, with NAK remote operational error).
//! * No receive WQE → RNR NAK with the QP's `min_rnr_nak` timer code; the requester
//!   waits the time that code stands for and retransmits from that PSN (`rnr_retry`
//!   times, 7 meaning forever). A sequence NAK makes the requester go back to the
//!   NAK's PSN (`retry_count` times).
//!
//! * Local ACK timeout: 4.096 µs × 2^`ack_timeout` (0: none) of device time after the
//!   oldest unacknowledged packet was sent (restarted on progress); on expiry the
//!   requester goes back to the oldest unacknowledged PSN (`retry_count` times, then
//!   `TRANSPORT_RETRY_EXC_ERR`). An ACK or response past a READ/atomic still missing
//!   responses is an implied NAK (the same go-back-N). Stale and ghost responses (a PSN
//!   never sent) are ignored and counted; a repeated NAK for a go-back-N already under
//!   way does not cost a second retry.
//!
//! Virtual time makes long timeouts instant to test: in deterministic mode the test
//! moves time ([`crate::Fabric::run_timers`], [`crate::Fabric::advance`]).

pub mod completer;
pub mod requester;
pub mod responder;
pub mod uc;
pub mod ud;
pub mod umr;

use crate::engine::mem::KeyError;
use crate::engine::qp::Path;
use crate::engine::Ctx;
use crate::firmware::Firmware;
use crate::iommu::Iommu;
use crate::wire::encap::{self, Encap};
use crate::wire::{self, ethernet, ipv4, udp, RoceRepr};

/// Why a packet was not sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxError {
    /// The payload could not be read from host memory.
    Memory(KeyError),
    /// The packet could not be built (path not IPv4, header out of range).
    Build,
}

/// The encapsulations ([`Encap`]) of the paths a device sent on lately: a small
/// direct-mapped cache (by UDP source port and destination address), so that a frame on
/// a known path copies its Ethernet, IPv4 and UDP headers instead of building them.
/// Entries are keyed by the whole [`Path`] (a modified path misses and is rebuilt).
#[derive(Debug, Default)]
pub struct EncapCache {
    slots: [Option<(Path, Encap)>; ENCAP_SLOTS],
}

/// Entries of an [`EncapCache`].
const ENCAP_SLOTS: usize = 8;

impl EncapCache {
    /// The encapsulation of `path` (built and kept on a miss); `None` if the path's
    /// headers cannot be emitted.
    pub fn get(&mut self, path: &Path) -> Option<&Encap> {
        let i = (usize::from(path.sport) ^ usize::from(path.dip.octets()[3])) % ENCAP_SLOTS;
        let hit = matches!(&self.slots[i], Some((p, _)) if p == path);
        if !hit {
            self.slots[i] = Some((*path, encap_of(path).ok()?));
        }
        self.slots[i].as_ref().map(|(_, e)| e)
    }
}

/// The Ethernet, IPv4 and UDP headers of frames on `path`.
pub(crate) fn encap_of(path: &Path) -> Result<Encap, wire::Error> {
    let mut ip = ipv4::Repr::rocev2(path.sip, path.dip);
    ip.dscp = path.tos >> 2;
    ip.ecn = ipv4::Ecn::from_bits(path.tos & 3);
    ip.ttl = path.ttl;
    Encap::new(
        &ethernet::Repr {
            src_addr: ethernet::Address(path.smac),
            dst_addr: ethernet::Address(path.dmac),
            ethertype: ethernet::EtherType::IPV4,
        },
        &ip,
        &udp::Repr::rocev2(path.sport),
    )
}

/// Builds a frame on `path` with transport headers `roce` and a payload of `len` bytes
/// written by `fill`, and sends it. Allocates nothing: the buffer comes from the pool,
/// the path's outer headers from the device's [`EncapCache`].
pub fn send_packet(
    cx: &mut Ctx,
    path: &Path,
    roce: &RoceRepr,
    len: usize,
    fill: impl FnOnce(&Firmware, &Iommu, &mut [u8]) -> Result<(), KeyError>,
) -> Result<(), TxError> {
    let Some(encap) = cx.net.encaps.get(path) else {
        return Err(TxError::Build);
    };
    let encap = *encap;
    send_frame(cx, &encap, roce, len, fill)
}

/// [`send_packet`] on a path whose encapsulation the caller has (an RC QP keeps its
/// path's in its [`crate::engine::qp::QpCfg`]).
pub fn send_frame(
    cx: &mut Ctx,
    encap: &Encap,
    roce: &RoceRepr,
    len: usize,
    fill: impl FnOnce(&Firmware, &Iommu, &mut [u8]) -> Result<(), KeyError>,
) -> Result<(), TxError> {
    let n = Encap::frame_len(roce, len);
    let mut buf = cx.net.buffer();
    buf.resize(n, 0);
    let range = match encap.emit_headers(roce, len, &mut buf) {
        Ok(r) => r,
        Err(_) => {
            cx.net.pool.put(buf);
            return Err(TxError::Build);
        }
    };
    if let Err(e) = fill(cx.fw, cx.io, &mut buf[range]) {
        cx.net.pool.put(buf);
        return Err(TxError::Memory(e));
    }
    encap::fill_icrc(&mut buf);
    cx.net.send(buf, cx.stats);
    Ok(())
}

/// Fetches and transmits what QP `qp` may send now: the RC requester, the UC one
/// ([`uc::pump`]) or the UD one ([`ud::pump`]); or executes the WQEs of a UMR QP
/// ([`umr::pump`]).
pub fn pump(qp: &mut crate::engine::QpRt, cx: &mut Ctx) {
    match qp.cfg.st {
        crate::firmware::ServiceType::Ud => ud::pump(qp, cx),
        crate::firmware::ServiceType::Uc => uc::pump(qp, cx),
        crate::firmware::ServiceType::RegUmr => umr::pump(qp, cx),
        _ => requester::pump(qp, cx),
    }
}

/// A BTH for `opcode` to `dest_qp` at `psn`.
pub fn bth(opcode: wire::Opcode, dest_qp: u32, psn: wire::Psn) -> wire::bth::Repr {
    wire::bth::Repr::new(opcode, dest_qp & wire::MAX_U24, psn)
}
