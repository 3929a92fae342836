//! `Bus::blueflame`: a bus that says BlueFlame does not pay (VFIO's uncached BAR0,
//! `VfioConfig::blueflame` off) gets the 8-byte doorbell for every post, through both
//! the general post path and the typed single-request path; the default (the
//! simulator) gets the BlueFlame copy of a single small inline WQE. Either way the
//! SEND arrives. A bus in front of the simulator counts the MMIO writes of each kind.

mod verbs_support;
use verbs_support::*;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use ferroverbs::verbs::{AccessFlags as A, Mtu, QpCap, QpInitAttr, RecvWr, SendFlags, SendWr};
use ferroverbs::{Device, DeviceConfig};
use ferroverbs_hw::bus::Block64;
use ferroverbs_hw::control::qp::qpc;
use ferroverbs_hw::{Bus, BusError, DmaPerm};
use ferroverbs_sim::SimBus;

/// The simulator's bus, with `blueflame()` as configured and the 64-bit writes and
/// 64-byte block writes counted, their BAR0 offsets recorded.
struct Counted {
    bus: SimBus,
    blueflame: bool,
    write64: AtomicU64,
    blocks: AtomicU64,
    /// `(block write?, BAR0 offset)` of every doorbell-page write.
    writes: Mutex<Vec<(bool, usize)>>,
}

impl Bus for Counted {
    fn bar0_len(&self) -> usize {
        self.bus.bar0_len()
    }
    fn read32(&self, off: usize) -> u32 {
        self.bus.read32(off)
    }
    fn write32(&self, off: usize, value: u32) {
        self.bus.write32(off, value)
    }
    fn write64(&self, off: usize, value: u64) {
        self.write64.fetch_add(1, Ordering::Relaxed);
        self.writes.lock().unwrap().push((false, off));
        self.bus.write64(off, value)
    }
    fn write_block64(&self, off: usize, block: &Block64) {
        self.blocks.fetch_add(1, Ordering::Relaxed);
        self.writes.lock().unwrap().push((true, off));
        self.bus.write_block64(off, block)
    }
    fn blueflame(&self) -> bool {
        self.blueflame
    }
    fn dma_map(&self, vaddr: usize, len: usize, perm: DmaPerm) -> Result<u64, BusError> {
        self.bus.dma_map(vaddr, len, perm)
    }
    fn dma_unmap(&self, iova: u64, len: usize) -> Result<(), BusError> {
        self.bus.dma_unmap(iova, len)
    }
    fn irq_eventfd(&self, vector: u16) -> Option<i32> {
        self.bus.irq_eventfd(vector)
    }
}

impl Counted {
    /// (64-bit writes, block writes) so far.
    fn counts(&self) -> (u64, u64) {
        (
            self.write64.load(Ordering::Relaxed),
            self.blocks.load(Ordering::Relaxed),
        )
    }
}

/// Posts two single inline SENDs from NIC 1 (over `Counted` with `blueflame`) to NIC 2,
/// one through `post_send` and one through `send_inline`, and returns the MMIO writes
/// each post made: `[(write64, blocks); 2]`.
fn two_sends(blueflame: bool) -> [(u64, u64); 2] {
    two_sends_at(blueflame).0
}

/// A doorbell-page write: `(block write?, offset)`.
type Write = (bool, usize);

/// As [`two_sends`], with the doorbell writes of the two posts as `(block write?,
/// offset in the QP's UAR page)`.
fn two_sends_at(blueflame: bool) -> ([(u64, u64); 2], Vec<Write>) {
    let net = Net::new(false);
    let ga = nic_gid(&net.a, 1);
    let cfg = DeviceConfig {
        cmd_timeout: Duration::from_secs(5),
        init_timeout: Duration::from_secs(5),
        health_period: Duration::from_secs(1),
        ..DeviceConfig::default()
    }
    .with_clock(vclock(&net.a))
    .with_gid(ga);
    let bus = Counted {
        bus: net.a.bus(),
        blueflame,
        write64: AtomicU64::new(0),
        blocks: AtomicU64::new(0),
        writes: Mutex::new(Vec::new()),
    };
    let ca = Device::open(bus, cfg).expect("bring-up");
    let (cb, gb) = open_nic(&net.b, 2);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let (mut cqa, mut cqb) = (ca.create_cq(64).unwrap(), cb.create_cq(64).unwrap());
    let cap = QpCap::default();
    let mut qa = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap)).unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap)).unwrap();
    // `connect` with two bus types: each side to RTS towards the other.
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    let all = A::REMOTE_READ | A::REMOTE_WRITE | A::REMOTE_ATOMIC;
    to_rts(&mut qa, &gb, nb, 0x200, 0x100, Mtu::Mtu1024, all);
    to_rts(&mut qb, &ga, na, 0x100, 0x200, Mtu::Mtu1024, all);
    let rbuf = pb.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    qb.post_recv(&[
        RecvWr::new(1, &[rbuf.sge(0, 64).unwrap()]),
        RecvWr::new(2, &[rbuf.sge(64, 64).unwrap()]),
    ])
    .unwrap();

    let bus = ca.bus();
    let uar = net.a.with_firmware(|fw| {
        let q = fw.qp(na).unwrap();
        qpc::uar_page.get(&q.qpc) as usize
    });
    bus.writes.lock().unwrap().clear();
    let before = bus.counts();
    qa.post_send(&[SendWr::send_inline(10, &[b"general path"]).signaled()])
        .unwrap();
    let mid = bus.counts();
    qa.send_inline(11, b"typed path", SendFlags::SIGNALED)
        .unwrap();
    let after = bus.counts();

    let sent = wait(&net, &mut cqa, 2);
    assert_eq!([sent[0].wr_id, sent[1].wr_id], [10, 11]);
    let got = wait(&net, &mut cqb, 2);
    assert_eq!([got[0].byte_len, got[1].byte_len], [12, 10]);
    let mut b = [0u8; 12];
    rbuf.read(0, &mut b);
    assert_eq!(&b, b"general path");
    let mut b = [0u8; 10];
    rbuf.read(64, &mut b);
    assert_eq!(&b, b"typed path");
    let at = bus
        .writes
        .lock()
        .unwrap()
        .iter()
        .filter(|&&(_, off)| off / 4096 == uar)
        .map(|&(block, off)| (block, off % 4096))
        .collect();
    (
        [
            (mid.0 - before.0, mid.1 - before.1),
            (after.0 - mid.0, after.1 - mid.1),
        ],
        at,
    )
}

#[test]
fn no_blueflame_rings_the_8_byte_doorbell() {
    // One WQE each, so one doorbell each: one 64-bit write, no block.
    assert_eq!(two_sends(false), [(1, 0); 2]);
}

#[test]
fn blueflame_copies_a_single_small_inline_wqe() {
    // An inline SEND of at most 12 bytes is 3 DS, one WQEBB: one 64-byte block and no
    // separate doorbell (the block's first 8 bytes are the doorbell).
    assert_eq!(two_sends(true), [(0, 1); 2]);
}

#[test]
fn blueflame_goes_through_bfreg_1_and_doorbells_through_bfreg_0() {
    // rdma-core's mlx5 never BlueFlames through register 0 (`mlx5_init_context` gives
    // it no buffer); Linux mlx5_ib hands it out only as the doorbell-only register.
    // Register k of a UAR is at 0x800 + k * 512 (bf_reg_size 512), each of its halves
    // 256 bytes, used alternately.
    let (counts, at) = two_sends_at(true);
    assert_eq!(counts, [(0, 1); 2]);
    assert_eq!(at, vec![(true, 0xa00), (true, 0xb00)]);
    // Without BlueFlame: the 8-byte doorbell at register 0, no halves.
    let (counts, at) = two_sends_at(false);
    assert_eq!(counts, [(1, 0); 2]);
    assert_eq!(at, vec![(false, 0x800), (false, 0x800)]);
}
