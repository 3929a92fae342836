//! Capture allocates nothing per frame: after setup, writing frames to a pcap file (the
//! fabric's hook and the UDP link's receive path with capture on) runs under a
//! counting allocator without a single allocation.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::{Ipv4Addr, SocketAddrV4};

use ferroverbs_sim::link::pcap;
use ferroverbs_sim::link::udp::{UdpConfig, UdpLink};
use ferroverbs_sim::link::PcapWriter;
use ferroverbs_sim::Sim;

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    /// Allocations made by this thread while counting (per thread: the tests of this
    /// file run in parallel).
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    if COUNTING.with(Cell::get) {
        ALLOCS.with(|a| a.set(a.get() + 1));
    }
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract is passed through.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn counted(f: impl FnOnce()) -> u64 {
    ALLOCS.with(|a| a.set(0));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCS.with(Cell::get)
}

#[test]
fn writing_frames_allocates_nothing() {
    let path = std::env::temp_dir().join(format!("fv-pcap-noalloc-{}.pcap", std::process::id()));
    let w = PcapWriter::create(&path).unwrap();
    let frame = [0x5au8; 1100];
    w.write(&frame);
    let n = counted(|| {
        for i in 0..10_000 {
            w.write(&frame[..60 + i % 1000]);
        }
    });
    assert_eq!(n, 0, "allocations while writing 10,000 frames");
    w.flush().unwrap();
    assert_eq!(pcap::read(&path).unwrap().len(), 10_001);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn the_udp_receive_path_with_capture_allocates_nothing() {
    let path = std::env::temp_dir().join(format!("fv-udp-noalloc-{}.pcap", std::process::id()));
    let cfg = UdpConfig {
        pcap: Some(path.clone()),
        ..UdpConfig::new(Ipv4Addr::new(127, 0, 51, 1)).port(0)
    };
    let sim = Sim::new(cfg.sim_config(false));
    let link = UdpLink::attach(&sim, cfg).unwrap();
    let src = SocketAddrV4::new(Ipv4Addr::new(127, 0, 51, 2), 0xc123);
    // A SEND_ONLY to a QP that does not exist: rebuilt, captured, queued, dropped by
    // the device (no such QP), the buffer recycled.
    let mut d = [0u8; 28];
    d[0] = 0x04;
    d[2] = 0xff;
    d[3] = 0xff;
    d[7] = 0x42;
    // Warm-up: enough buffers in the pool for a batch of 64 plus the one the socket
    // thread holds while it waits for a datagram.
    for _ in 0..128 {
        link.deliver(src, &d);
    }
    sim.step();
    let n = counted(|| {
        for _ in 0..100 {
            for _ in 0..64 {
                link.deliver(src, &d);
            }
            sim.step();
        }
    });
    assert_eq!(n, 0, "allocations on the receive path");
    assert_eq!(link.stats().rx_delivered, 64 * 102);
    drop(link);
    assert_eq!(pcap::read(&path).unwrap().len(), 64 * 102);
    let _ = std::fs::remove_file(&path);
}
