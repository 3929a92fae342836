//! RoCEv2 packet codecs: typed views over bytes and their high-level representations.
//!
//! Every packet the simulator puts on a link is real RoCEv2 (InfiniBand transport over
//! UDP/IPv4/Ethernet), so any capture opens in Wireshark and a real peer could read it.
//! This module reads and writes those bytes, in the style of smoltcp's `wire` module:
//!
//! * for each header a `Packet<T: AsRef<[u8]>>` view over a byte buffer, with
//!   `new_unchecked`, `new_checked` (length and basic validity, typed [`Error`], never a
//!   panic on any input), field getters and, for `T: AsMut<[u8]>`, setters;
//! * for each header a `Repr`, a plain value with `parse` (from a checked view) and
//!   `emit` (into a view). Values that follow from lengths (IPv4 total length, UDP length,
//!   BTH pad count) are not part of a `Repr`: they are arguments of `emit`, read back
//!   from the view after parsing.
//!
//! The headers, in wire order:
//!
//! | module | header | size | source |
//! |---|---|---|---|
//! | [`ethernet`] | Ethernet II | 14 | IEEE 802.3 |
//! | [`ipv4`] | IPv4 | 20 | RFC 791, RFC 1071 (checksum), RFC 2474/3168 (DSCP/ECN) |
//! | [`udp`] | UDP, dst port 4791 | 8 | RFC 768; IBTA Annex A17 (RoCEv2) |
//! | [`bth`] | Base Transport Header | 12 | IBTA Vol. 1 §9.2 |
//! | [`deth`] | Datagram ETH | 8 | IBTA Vol. 1 §9.3 |
//! | [`reth`] | RDMA ETH | 16 | IBTA Vol. 1 §9.3 |
//! | [`atomic_eth`] | Atomic ETH | 28 | IBTA Vol. 1 §9.3 |
//! | [`aeth`] | ACK ETH | 4 | IBTA Vol. 1 §9.3 |
//! | [`atomic_ack_eth`] | Atomic ACK ETH | 8 | IBTA Vol. 1 §9.3 |
//! | [`immdt`] | Immediate Data | 4 | IBTA Vol. 1 §9.3 |
//! | [`ieth`] | Invalidate ETH | 4 | IBTA Vol. 1 §9.3 |
//! | [`icrc`] | Invariant CRC | 4 | IBTA Vol. 1 §7.8 and Annex A17 |
//!
//! and on top of them:
//!
//! * [`opcode`]: the RC/UC/UD opcode table (which extension headers each opcode
//!   carries, its place in a message, its payload rule);
//! * [`psn`]: 24-bit packet sequence number arithmetic;
//! * [`roce`]: one transport packet, BTH through ICRC (the UDP payload), parsed with its
//!   header chain checked against the opcode, and emitted without allocating;
//! * [`frame`]: a whole Ethernet frame carrying one RoCEv2 packet.
//! * [`encap`]: the fast emit of frames on a fixed path (outer headers written once,
//!   lengths and the IPv4 checksum patched per frame, the ICRC computed in place).
//!
//! The facts (layouts, masks, byte orders, worked examples) come from the project's fact
//! sheet `shared/reference/rocev2-wire.md` (§1–3 and §7), itself checked against Linux
//! rxe, tshark 4.0.17 and scapy. The IBTA section numbers above are given for orientation
//! and were not checked against the specification's text.

/// Declares a typed view of a byte buffer: the struct (holding the buffer as `buffer`),
/// `new_unchecked`, `new_checked` (which runs the named check method and gives back its
/// error) and `into_inner`. The module documents the struct, what `new_unchecked`
/// leaves to the caller and what `new_checked` checks, and writes the check method.
macro_rules! buffer_view {
    (
        $(#[$struct_doc:meta])*
        pub struct $view:ident;
        $(#[$unchecked_doc:meta])*
        fn new_unchecked;
        $(#[$checked_doc:meta])*
        fn new_checked => $check:ident;
    ) => {
        $(#[$struct_doc])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $view<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $view<T> {
            $(#[$unchecked_doc])*
            pub const fn new_unchecked(buffer: T) -> $view<T> {
                $view { buffer }
            }

            $(#[$checked_doc])*
            pub fn new_checked(buffer: T) -> $crate::wire::Result<$view<T>> {
                let view = $view::new_unchecked(buffer);
                view.$check()?;
                Ok(view)
            }

            /// Returns the wrapped buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }
    };
}

/// Declares the `Packet<T>` view of a fixed-size header: `buffer_view!` with
/// `check_len` (length only) as the check, and `AsRef<[u8]>`.
macro_rules! fixed_header_view {
    ($header:expr, $name:literal) => {
        buffer_view! {
            #[doc = concat!("A typed view of the ", $name, " at the start of a byte buffer.")]
            pub struct Packet;
            /// Wraps a buffer without checking it.
            ///
            /// Accessors index the buffer directly and panic if it is shorter than
            /// [`HEADER_LEN`]: use this only on buffers sized by this crate, and
            /// [`Packet::new_checked`] on bytes from elsewhere.
            fn new_unchecked;
            /// Wraps a buffer after checking that it holds the whole header.
            fn new_checked => check_len;
        }

        impl<T: AsRef<[u8]>> Packet<T> {
            /// Checks that the buffer holds the whole header.
            pub fn check_len(&self) -> $crate::wire::Result<()> {
                $crate::wire::check_len($header, HEADER_LEN, self.buffer.as_ref().len())
            }
        }

        impl<T: AsRef<[u8]>> AsRef<[u8]> for Packet<T> {
            fn as_ref(&self) -> &[u8] {
                self.buffer.as_ref()
            }
        }
    };
}

/// Declares the accessors of big-endian integer fields of a module's `Packet<T>`: per
/// field a getter (in an `impl<T: AsRef<[u8]>>` block) and a setter (in an
/// `impl<T: AsRef<[u8]> + AsMut<[u8]>>` block), each with its own doc comment:
///
/// ```text
/// be_fields! {
///     /// getter doc
///     getter,
///     /// setter doc
///     setter: width = field::RANGE;
/// }
/// ```
///
/// `width` is `u16`, `u32`, `u64` or `u24` (a `u32` of which the setter writes the low
/// 24 bits); the field is a byte range of the module's `field` table. Like every
/// accessor they index the buffer directly (see `new_unchecked`).
macro_rules! be_fields {
    (@ty u24) => { u32 };
    (@ty $width:ident) => { $width };
    (@get u16, $b:expr, $at:expr) => { $crate::wire::be::u16_at($b, $at) };
    (@get u24, $b:expr, $at:expr) => { $crate::wire::be::u24_at($b, $at) };
    (@get u32, $b:expr, $at:expr) => { $crate::wire::be::u32_at($b, $at) };
    (@get u64, $b:expr, $at:expr) => { $crate::wire::be::u64_at($b, $at) };
    (@set u16, $b:expr, $at:expr, $v:expr) => { $crate::wire::be::set_u16($b, $at, $v) };
    (@set u24, $b:expr, $at:expr, $v:expr) => { $crate::wire::be::set_u24($b, $at, $v) };
    (@set u32, $b:expr, $at:expr, $v:expr) => { $crate::wire::be::set_u32($b, $at, $v) };
    (@set u64, $b:expr, $at:expr, $v:expr) => { $crate::wire::be::set_u64($b, $at, $v) };
    ($(
        $(#[$get_doc:meta])*
        $get:ident,
        $(#[$set_doc:meta])*
        $set:ident: $width:ident = $field:expr;
    )*) => {
        impl<T: AsRef<[u8]>> Packet<T> {
            $(
                $(#[$get_doc])*
                pub fn $get(&self) -> be_fields!(@ty $width) {
                    be_fields!(@get $width, self.buffer.as_ref(), $field.start)
                }
            )*
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
            $(
                $(#[$set_doc])*
                pub fn $set(&mut self, value: be_fields!(@ty $width)) {
                    be_fields!(@set $width, self.buffer.as_mut(), $field.start, value)
                }
            )*
        }
    };
}

mod error;

pub mod aeth;
pub mod atomic_ack_eth;
pub mod atomic_eth;
pub mod bth;
pub mod deth;
pub mod encap;
pub mod ethernet;
pub mod frame;
pub mod icrc;
pub mod ieth;
pub mod immdt;
pub mod ipv4;
pub mod opcode;
pub mod psn;
pub mod reth;
pub mod roce;
pub mod udp;

pub use error::{Error, Header, Result};
pub use frame::{Frame, Repr as FrameRepr};
pub use opcode::{Opcode, Transport};
pub use psn::Psn;
pub use roce::{Packet as RocePacket, Repr as RoceRepr};

/// A byte range of a header, as the `field` constants of each module declare them.
type Field = core::ops::Range<usize>;

/// Big-endian accessors shared by the header modules. Callers index within a length
/// they have checked (or that `new_unchecked` documents as the caller's promise).
mod be {
    pub(super) fn u16_at(b: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([b[at], b[at + 1]])
    }
    pub(super) fn u24_at(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
    }
    pub(super) fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }
    pub(super) fn u64_at(b: &[u8], at: usize) -> u64 {
        let mut v = [0u8; 8];
        v.copy_from_slice(&b[at..at + 8]);
        u64::from_be_bytes(v)
    }
    pub(super) fn set_u16(b: &mut [u8], at: usize, v: u16) {
        b[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }
    /// Writes the low 24 bits of `v`.
    pub(super) fn set_u24(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
    }
    pub(super) fn set_u32(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }
    pub(super) fn set_u64(b: &mut [u8], at: usize, v: u64) {
        b[at..at + 8].copy_from_slice(&v.to_be_bytes());
    }
}

/// The largest value of a 24-bit field (QPN, PSN, MSN).
pub const MAX_U24: u32 = 0x00ff_ffff;

/// Checks that a value meant for a 24-bit field fits, for `emit`.
fn check_u24(field: &'static str, value: u32) -> Result<()> {
    if value > MAX_U24 {
        Err(Error::FieldRange {
            field,
            value: u64::from(value),
        })
    } else {
        Ok(())
    }
}

/// Checks that a buffer of `have` bytes holds a header of `need` bytes.
fn check_len(header: Header, need: usize, have: usize) -> Result<()> {
    if have < need {
        Err(Error::Truncated { header, need, have })
    } else {
        Ok(())
    }
}
