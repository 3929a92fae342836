//! The packet path of the wire codecs allocates nothing: emitting a frame into a
//! caller-provided buffer, parsing it and checking its ICRC, counted by a global
//! allocator wrapper on the test's own thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::Ipv4Addr;

use ferroverbs_sim::wire::ethernet::{self, Address, EtherType};
use ferroverbs_sim::wire::{aeth, bth, frame, ipv4, reth, udp};
use ferroverbs_sim::wire::{Frame, FrameRepr, Opcode, Psn, RocePacket, RoceRepr};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> usize {
    ALLOCATIONS.with(|c| c.get())
}

#[test]
fn emit_and_parse_allocate_nothing() {
    let mut write = RoceRepr::new(bth::Repr::new(Opcode::RcRdmaWriteFirst, 0x12, Psn::new(7)));
    write.reth = Some(reth::Repr {
        virtual_address: 0x1000,
        rkey: 0x55,
        dma_length: 8192,
    });
    let mut ack = RoceRepr::new(bth::Repr::new(Opcode::RcAcknowledge, 0x11, Psn::new(7)));
    ack.aeth = Some(aeth::Repr {
        syndrome: aeth::Syndrome::ACK,
        msn: 1,
    });
    let repr = |roce| FrameRepr {
        ethernet: ethernet::Repr {
            src_addr: Address([2, 0, 0, 0, 0, 1]),
            dst_addr: Address([2, 0, 0, 0, 0, 2]),
            ethertype: EtherType::IPV4,
        },
        ipv4: ipv4::Repr::rocev2(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2)),
        udp: udp::Repr::rocev2(0xc132),
        roce,
    };
    let (write, ack) = (repr(write), repr(ack));
    let payload = [0x5au8; 4096];
    let mut buf = vec![0u8; 8192];
    let mut transport = vec![0u8; 8192];

    let before = allocations();
    let mut total = 0usize;
    for _ in 0..100 {
        for (r, p) in [(&write, &payload[..]), (&ack, &[][..])] {
            let len = r.emit(p, &mut buf).unwrap();
            let f = Frame::new_checked(&buf[..len]).unwrap();
            let parsed = FrameRepr::parse(&f).unwrap();
            assert!(parsed == *r);
            let (_, data) = frame::parse(&buf[..len]).unwrap();
            total += data.len();
            let tl = r.roce.emit(&r.ipv4, &r.udp, p, &mut transport).unwrap();
            let tp = RocePacket::new_checked(&transport[..tl]).unwrap();
            assert!(RoceRepr::parse(&tp, &r.ipv4, &r.udp).unwrap() == r.roce);
        }
    }
    let after = allocations();
    assert_eq!(total, 100 * 4096);
    assert_eq!(after - before, 0, "the wire codecs allocated");
    // The counter does see this thread's allocations.
    let boxed = std::hint::black_box(Box::new(1u64));
    assert!(allocations() > after && *boxed == 1);
}
