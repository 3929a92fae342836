//! Byte-exact tests of the rings. Expected WQEs are written out by hand from the
//! layouts of `mlx5-datapath.md` §2 (not produced by the code under test); buffers start
//! filled with `0xEE` so that bytes the writer must leave alone stay visible.

use super::*;
use core::sync::atomic::{AtomicU32, Ordering};
use ferroverbs_hw::datapath::cqe::{
    hw_owner_bit, make_op_own, Cqe64, MLX5_CQE_REQ, MLX5_CQE_REQ_ERR, MLX5_CQE_RESP_SEND,
};
use ferroverbs_hw::datapath::dbr::CqArmCmd;
use ferroverbs_hw::datapath::wqe::{WqeAv, WqeCtrlSeg};
use ferroverbs_hw::MemBus;

const QPN: u32 = 0x000123;
/// UAR page 1; its first BlueFlame register (bfreg 1 of the context) at +0x800.
const BF_REG: usize = 0x1800;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn ee(n: usize) -> Vec<u8> {
    vec![0xee; n]
}

fn cat(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.concat()
}

/// Queue memory of `len` bytes, every byte `fill`.
fn words(len: usize, fill: u8) -> Box<[AtomicU32]> {
    (0..len.div_ceil(4))
        .map(|_| AtomicU32::new(u32::from_ne_bytes([fill; 4])))
        .collect()
}

fn snapshot<M: QueueMem + ?Sized>(m: &M, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    m.read(0, &mut v);
    v
}

/// The bytes of a queue's ring, as the device would read them.
trait Ring {
    fn ring(&self) -> Vec<u8>;
}

impl<M: QueueMem, D: DoorbellWord> Ring for SendQueue<M, D> {
    fn ring(&self) -> Vec<u8> {
        snapshot(self.mem(), self.ring_len())
    }
}

impl<M: QueueMem, D: DoorbellWord> Ring for ReceiveQueue<M, D> {
    fn ring(&self) -> Vec<u8> {
        snapshot(self.mem(), self.ring_len())
    }
}

fn dbr() -> &'static [AtomicU32; 2] {
    Box::leak(Box::new([AtomicU32::new(0), AtomicU32::new(0)]))
}

fn be(w: &AtomicU32) -> u32 {
    u32::from_be(w.load(Ordering::Relaxed))
}

fn cfg(qp_type: QpType, wqe_cnt: u32) -> SqConfig {
    SqConfig {
        qp_type,
        qpn: QPN,
        wqe_cnt,
        max_sge: 64,
        max_inline: 256,
        sig_all: false,
        bf: BlueFlameReg {
            reg: BF_REG,
            buf_size: 256,
            index: 1,
        },
        shut_up_bf: false,
        prefer_bf: true,
    }
}

type Sq = SendQueue<Box<[AtomicU32]>, &'static AtomicU32>;

fn sq(c: SqConfig) -> (Sq, &'static [AtomicU32; 2]) {
    let d = dbr();
    let q = SendQueue::new(words(c.wqe_cnt as usize * 64, 0xee), &d[1], c).unwrap();
    (q, d)
}

fn sge(addr: u64, length: u32, lkey: u32) -> Sge {
    Sge { addr, length, lkey }
}

fn wr<'a>(op: SendOp, data: SendData<'a>, flags: SendFlags) -> SendWr<'a> {
    SendWr {
        wr_id: 0,
        op,
        data,
        flags,
        ud: None,
    }
}

const SGE_A: Sge = Sge {
    addr: 0x1122_3344_5566_7788,
    length: 0x100,
    lkey: 0x1234,
};
const DSEG_A: &str = "00000100 00001234 1122334455667788";

// ---------------------------------------------------------------- send queue

#[test]
fn send_with_one_sge() {
    let (mut q, d) = sq(cfg(QpType::Rc, 4));
    let p = q
        .post(&wr(
            SendOp::Send,
            SendData::Gather(&[SGE_A]),
            SendFlags::SIGNALED,
        ))
        .unwrap();
    assert_eq!(
        p,
        PostedWqe {
            index: 0,
            ds: 2,
            wqebbs: 1,
            inline: false
        }
    );
    let want = cat(&[
        hex("0000000a 00012302 00000008 00000000"),
        hex(DSEG_A),
        ee(32),
    ]);
    assert_eq!(&q.ring()[..64], &want[..]);
    assert_eq!(&q.ring()[64..], &ee(192)[..], "other WQEBBs untouched");
    assert_eq!(q.cur_post(), 1);
    // Nothing reaches the device before the doorbell.
    assert_eq!(be(&d[1]), 0);
}

#[test]
fn send_imm_inv_flags_and_zero_length_sges() {
    let (mut q, _) = sq(cfg(QpType::Rc, 4));
    let sges = [sge(1, 0, 9), SGE_A, sge(2, 0, 9)];
    q.post(&wr(
        SendOp::SendImm { imm: 0xdead_beef },
        SendData::Gather(&sges),
        SendFlags::SOLICITED | SendFlags::FENCE,
    ))
    .unwrap();
    q.post(&wr(
        SendOp::SendInv { rkey: 0x42 },
        SendData::Gather(&[]),
        SendFlags::NONE,
    ))
    .unwrap();
    let want = cat(&[
        // SEND_IMM: zero-length SGEs add no segment and no DS.
        hex("0000000b 00012302 00000082 deadbeef"),
        hex(DSEG_A),
        ee(32),
        // SEND_INV without data: just the control segment; imm = the rkey.
        hex("00000101 00012301 00000000 00000042"),
        ee(48),
    ]);
    assert_eq!(&q.ring()[..128], &want[..]);
}

#[test]
fn sig_all_signals_every_wqe() {
    let mut c = cfg(QpType::Rc, 4);
    c.sig_all = true;
    let (mut q, _) = sq(c);
    q.post(&wr(SendOp::Send, SendData::Gather(&[]), SendFlags::NONE))
        .unwrap();
    assert_eq!(q.ring()[11], 0x08);
}

#[test]
fn rdma_write_read_and_write_imm() {
    let (mut q, _) = sq(cfg(QpType::Rc, 4));
    let remote = RemoteAddr {
        addr: 0x0102_0304_0506_0708,
        rkey: 0xaabb_ccdd,
    };
    let g = [SGE_A];
    q.post(&wr(
        SendOp::RdmaWrite { remote },
        SendData::Gather(&g),
        SendFlags::SIGNALED,
    ))
    .unwrap();
    q.post(&wr(
        SendOp::RdmaRead { remote },
        SendData::Gather(&g),
        SendFlags::NONE,
    ))
    .unwrap();
    let p = q
        .post(&wr(
            SendOp::RdmaWriteImm {
                remote,
                imm: 0x0a0b_0c0d,
            },
            SendData::Gather(&g),
            SendFlags::NONE,
        ))
        .unwrap();
    assert_eq!((p.index, p.ds, p.wqebbs), (2, 3, 1));
    let raddr = "0102030405060708 aabbccdd 00000000";
    let want = cat(&[
        hex("00000008 00012303 00000008 00000000"),
        hex(raddr),
        hex(DSEG_A),
        ee(16),
        hex("00000110 00012303 00000000 00000000"),
        hex(raddr),
        hex(DSEG_A),
        ee(16),
        hex("00000209 00012303 00000000 0a0b0c0d"),
        hex(raddr),
        hex(DSEG_A),
        ee(16),
    ]);
    assert_eq!(&q.ring()[..192], &want[..]);
}

#[test]
fn atomics_cas_and_fetch_add() {
    let (mut q, _) = sq(cfg(QpType::Rc, 4));
    let remote = RemoteAddr {
        addr: 0x1000,
        rkey: 0x77,
    };
    // The local buffer's length is forced to 8.
    let g = [sge(0x2000, 16, 0x55)];
    q.post(&wr(
        SendOp::AtomicCas {
            remote,
            compare: 0x1111_1111_1111_1111,
            swap: 0x2222_2222_2222_2222,
        },
        SendData::Gather(&g),
        SendFlags::SIGNALED,
    ))
    .unwrap();
    let p = q
        .post(&wr(
            SendOp::AtomicFa { remote, add: 5 },
            SendData::Gather(&g),
            SendFlags::SIGNALED,
        ))
        .unwrap();
    assert_eq!((p.ds, p.wqebbs), (4, 1));
    let raddr = "0000000000001000 00000077 00000000";
    let dseg = "00000008 00000055 0000000000002000";
    let want = cat(&[
        hex("00000011 00012304 00000008 00000000"),
        hex(raddr),
        hex("2222222222222222 1111111111111111"),
        hex(dseg),
        hex("00000112 00012304 00000008 00000000"),
        hex(raddr),
        // FETCH_ADD writes swap_add only; compare keeps its old bytes (rdma-core).
        hex("0000000000000005"),
        ee(8),
        hex(dseg),
    ]);
    assert_eq!(&q.ring()[..128], &want[..]);
    // Inline data cannot feed an operation that writes local memory.
    let parts: [&[u8]; 1] = [&[1, 2, 3]];
    assert_eq!(
        q.post(&wr(
            SendOp::AtomicFa { remote, add: 1 },
            SendData::Inline(&parts),
            SendFlags::NONE
        )),
        Err(PostError::InlineNotAllowed { opcode: 0x12 })
    );
}

fn test_av() -> WqeAv {
    let mut b = hex("00000000 00000000 00000000 0000c000 00000000 02030405 06070040 00300000");
    b.extend_from_slice(&hex("fe800000000000000000000000000001"));
    WqeAv::read_from(&b).unwrap()
}

#[test]
fn ud_send_data_starts_in_the_second_wqebb() {
    let (mut q, _) = sq(cfg(QpType::Ud, 4));
    let av = test_av();
    let mut w = wr(
        SendOp::Send,
        SendData::Gather(&[SGE_A]),
        SendFlags::SIGNALED,
    );
    w.ud = Some(UdAddress {
        av: &av,
        remote_qpn: 0x000456,
        remote_qkey: 0x1111_1111,
    });
    let p = q.post(&w).unwrap();
    assert_eq!((p.index, p.ds, p.wqebbs), (0, 5, 2));
    let want = cat(&[
        hex("0000000a 00012305 00000008 00000000"),
        // The AV as prebuilt, with the Q_Key and destination QPN (extended bit) set.
        hex("11111111 00000000 80000456 0000c000 00000000 02030405 06070040 00300000"),
        hex("fe800000000000000000000000000001"),
        hex(DSEG_A),
        ee(48),
    ]);
    assert_eq!(&q.ring()[..128], &want[..]);
    assert_eq!(q.cur_post(), 2);
}

#[test]
fn ud_send_wraps_between_av_and_data() {
    let (mut q, _) = sq(cfg(QpType::Ud, 4));
    let av = test_av();
    let ud = Some(UdAddress {
        av: &av,
        remote_qpn: 7,
        remote_qkey: 9,
    });
    // Three UD sends without data: ctrl + AV, DS 4, one WQEBB each.
    for i in 0..3 {
        let mut w = wr(SendOp::Send, SendData::Gather(&[]), SendFlags::NONE);
        w.ud = ud;
        let p = q.post(&w).unwrap();
        assert_eq!((p.index, p.ds, p.wqebbs), (i, 4, 1));
    }
    assert_eq!(q.complete(2), Some(0));
    let mut w = wr(SendOp::Send, SendData::Gather(&[SGE_A]), SendFlags::NONE);
    w.ud = ud;
    let p = q.post(&w).unwrap();
    assert_eq!((p.index, p.ds, p.wqebbs), (3, 5, 2));
    assert_eq!(
        &q.ring()[192..208],
        &hex("0000030a 00012305 00000000 00000000")[..]
    );
    // The AV (from 208): Q_Key, then the prebuilt reserved word, then dqp_dct.
    assert_eq!(&q.ring()[208..220], &hex("00000009 00000000 80000007")[..]);
    // The data segment continues at the start of the ring.
    assert_eq!(&q.ring()[..16], &hex(DSEG_A)[..]);
    assert_eq!(q.cur_post(), 5);
}

#[test]
fn connected_and_datagram_rules() {
    let (mut q, _) = sq(cfg(QpType::Ud, 4));
    let remote = RemoteAddr { addr: 0, rkey: 0 };
    assert_eq!(
        q.post(&wr(
            SendOp::RdmaWrite { remote },
            SendData::Gather(&[]),
            SendFlags::NONE
        )),
        Err(PostError::UnsupportedOp {
            opcode: 0x08,
            qp_type: QpType::Ud
        })
    );
    assert_eq!(
        q.post(&wr(SendOp::Send, SendData::Gather(&[]), SendFlags::NONE)),
        Err(PostError::AddressMismatch)
    );
    let (mut q, _) = sq(cfg(QpType::Uc, 4));
    assert!(matches!(
        q.post(&wr(
            SendOp::RdmaRead { remote },
            SendData::Gather(&[]),
            SendFlags::NONE
        )),
        Err(PostError::UnsupportedOp { .. })
    ));
    q.post(&wr(
        SendOp::RdmaWrite { remote },
        SendData::Gather(&[]),
        SendFlags::NONE,
    ))
    .unwrap();
    assert_eq!(q.ring()[..8], hex("00000008 00012302")[..]);
}

#[test]
fn inline_send_splits_the_payload_at_the_ring_end() {
    let bus = MemBus::new(0x4000);
    let (mut q, d) = sq(cfg(QpType::Rc, 4));
    // Three one-WQEBB SENDs take slots 0..2; completing the last retires all three.
    for id in 0..3 {
        let mut w = wr(SendOp::Send, SendData::Gather(&[SGE_A]), SendFlags::NONE);
        w.wr_id = 100 + id;
        q.post(&w).unwrap();
    }
    q.ring_doorbell(&bus);
    assert_eq!(q.complete(2), Some(102));
    let before = q.ring().to_vec();

    // 100 bytes in two parts: DS = 1 + ceil((4 + 100) / 16) = 8, two WQEBBs from slot 3.
    let a: Vec<u8> = (0..30).collect();
    let b: Vec<u8> = (30..100).collect();
    let parts: [&[u8]; 2] = [&a, &b];
    let p = q
        .post(&wr(
            SendOp::Send,
            SendData::Inline(&parts),
            SendFlags::SIGNALED,
        ))
        .unwrap();
    assert_eq!(
        p,
        PostedWqe {
            index: 3,
            ds: 8,
            wqebbs: 2,
            inline: true
        }
    );
    let payload: Vec<u8> = (0..100).collect();
    let mut want = before.clone();
    want[192..208].copy_from_slice(&hex("0000030a 00012308 00000008 00000000"));
    want[208..212].copy_from_slice(&hex("80000064"));
    // 44 payload bytes fit before the ring end, the other 56 continue at offset 0 ...
    want[212..256].copy_from_slice(&payload[..44]);
    want[..56].copy_from_slice(&payload[44..]);
    // ... and the padding up to the 16-byte boundary (56..64) keeps its old bytes.
    assert_eq!(q.ring(), &want[..]);
    assert_eq!(&q.ring()[56..64], &before[56..64]);

    // One inline WR of 8 DS: BlueFlame, 128 bytes, the source wrapping at the ring end.
    assert_eq!(
        q.ring_doorbell(&bus),
        Some(Doorbell::BlueFlame {
            offset: BF_REG + 256,
            len: 128
        })
    );
    assert_eq!(bus.bar_bytes(BF_REG + 256, 64), &want[192..256]);
    assert_eq!(bus.bar_bytes(BF_REG + 256 + 64, 64), &want[..64]);
    assert_eq!(be(&d[1]), 5);
    assert_eq!(q.cur_post(), 5);
}

#[test]
fn inline_ds_rounding_and_limits() {
    let mut c = cfg(QpType::Rc, 64);
    c.max_inline = 60;
    let (mut q, _) = sq(c);
    let data = [0x5au8; 61];
    for (len, ds) in [(12, 2), (13, 3), (28, 3), (29, 4), (60, 5)] {
        let parts: [&[u8]; 1] = [&data[..len]];
        let p = q
            .post(&wr(SendOp::Send, SendData::Inline(&parts), SendFlags::NONE))
            .unwrap();
        assert_eq!(p.ds, ds, "inline {len}");
    }
    // Empty inline parts: no segment at all.
    let empty: [&[u8]; 2] = [&[], &[]];
    let p = q
        .post(&wr(SendOp::Send, SendData::Inline(&empty), SendFlags::NONE))
        .unwrap();
    assert_eq!((p.ds, p.inline), (1, true));
    let parts: [&[u8]; 1] = [&data];
    assert_eq!(
        q.post(&wr(SendOp::Send, SendData::Inline(&parts), SendFlags::NONE)),
        Err(PostError::InlineTooLarge { len: 61, max: 60 })
    );
}

#[test]
fn ds_limit_and_sge_limit() {
    let (mut q, _) = sq(cfg(QpType::Rc, 64));
    let sges = [SGE_A; 64];
    // 1 + 62 = 63 DS is the largest WQE; 16 WQEBBs.
    let p = q
        .post(&wr(
            SendOp::Send,
            SendData::Gather(&sges[..62]),
            SendFlags::NONE,
        ))
        .unwrap();
    assert_eq!((p.ds, p.wqebbs), (63, 16));
    assert_eq!(q.ring()[7], 63);
    assert_eq!(
        q.post(&wr(
            SendOp::Send,
            SendData::Gather(&sges[..63]),
            SendFlags::NONE
        )),
        Err(PostError::WqeTooLarge { ds: 64 })
    );
    let mut c = cfg(QpType::Rc, 4);
    c.max_sge = 2;
    let (mut q, _) = sq(c);
    assert_eq!(
        q.post(&wr(
            SendOp::Send,
            SendData::Gather(&sges[..3]),
            SendFlags::NONE
        )),
        Err(PostError::TooManySges { count: 3, max: 2 })
    );
}

#[test]
fn queue_full_writes_nothing() {
    let (mut q, _) = sq(cfg(QpType::Rc, 4));
    let sges = [SGE_A; 5];
    // DS 6: two WQEBBs.
    q.post(&wr(SendOp::Send, SendData::Gather(&sges), SendFlags::NONE))
        .unwrap();
    q.post(&wr(
        SendOp::Send,
        SendData::Gather(&sges[..1]),
        SendFlags::NONE,
    ))
    .unwrap();
    assert_eq!(q.free(), 1);
    let before = q.ring().to_vec();
    assert_eq!(
        q.post(&wr(SendOp::Send, SendData::Gather(&sges), SendFlags::NONE)),
        Err(PostError::QueueFull { needed: 2, free: 1 })
    );
    assert_eq!(q.ring(), &before[..]);
    assert_eq!(q.cur_post(), 3);
}

#[test]
fn doorbells_alternate_blueflame_halves() {
    let bus = MemBus::new(0x4000);
    let mut c = cfg(QpType::Rc, 8);
    c.prefer_bf = false;
    let (mut q, d) = sq(c);
    let g = [SGE_A];
    // Not inline and BlueFlame not preferred: an 8-byte doorbell of the ctrl's first
    // 8 bytes, alternating 0x800 / 0x900 of the UAR.
    q.post(&wr(SendOp::Send, SendData::Gather(&g), SendFlags::NONE))
        .unwrap();
    let db = q.ring_doorbell(&bus).unwrap();
    assert_eq!(
        db,
        Doorbell::Db {
            offset: BF_REG,
            value: 0x0000_000a_0001_2302
        }
    );
    assert_eq!(bus.bar_bytes(BF_REG, 8), hex("0000000a 00012302"));
    assert_eq!(be(&d[1]), 1);
    assert_eq!(q.ring_doorbell(&bus), None, "nothing pending");

    // Two WRs in one doorbell: the doorbell carries the last WQE (index 2).
    q.post(&wr(SendOp::Send, SendData::Gather(&g), SendFlags::NONE))
        .unwrap();
    q.post(&wr(SendOp::Send, SendData::Gather(&g), SendFlags::NONE))
        .unwrap();
    assert_eq!(
        q.ring_doorbell(&bus),
        Some(Doorbell::Db {
            offset: BF_REG + 256,
            value: 0x0000_020a_0001_2302
        })
    );
    assert_eq!(be(&d[1]), 3);
    assert_eq!(q.bf_offset(), 0);

    // With BlueFlame preferred, a single WR of DS > 1 is copied; a DS 1 WQE is not.
    let mut c = cfg(QpType::Rc, 8);
    c.bf.reg = 0x2800;
    let (mut q, _) = sq(c);
    q.post(&wr(SendOp::Send, SendData::Gather(&g), SendFlags::NONE))
        .unwrap();
    assert_eq!(
        q.ring_doorbell(&bus),
        Some(Doorbell::BlueFlame {
            offset: 0x2800,
            len: 64
        })
    );
    assert_eq!(bus.bar_bytes(0x2800, 64), q.ring()[..64].to_vec());
    q.post(&wr(SendOp::Send, SendData::Gather(&[]), SendFlags::NONE))
        .unwrap();
    assert!(matches!(
        q.ring_doorbell(&bus),
        Some(Doorbell::Db { offset: 0x2900, .. })
    ));
}

#[test]
fn bfreg_zero_never_blueflames_or_toggles() {
    let bus = MemBus::new(0x4000);
    let mut c = cfg(QpType::Rc, 8);
    c.bf = BlueFlameReg {
        reg: 0x800,
        buf_size: 0,
        index: 0,
    };
    let (mut q, _) = sq(c);
    let parts: [&[u8]; 1] = [&[1; 20]];
    for i in 0..3u16 {
        q.post(&wr(SendOp::Send, SendData::Inline(&parts), SendFlags::NONE))
            .unwrap();
        let want = (u64::from(i) << 40) | 0x0a_0001_2303;
        assert_eq!(
            q.ring_doorbell(&bus),
            Some(Doorbell::Db {
                offset: 0x800,
                value: want
            })
        );
    }
}

#[test]
fn blueflame_rule() {
    let bf = BlueFlameReg {
        reg: 0,
        buf_size: 256,
        index: 1,
    };
    assert!(use_blueflame(false, 1, &bf, false, true, 2));
    assert!(use_blueflame(false, 1, &bf, true, false, 16));
    assert!(
        !use_blueflame(false, 1, &bf, true, true, 17),
        "more than 256 bytes"
    );
    assert!(!use_blueflame(false, 1, &bf, true, true, 1), "DS 1");
    assert!(!use_blueflame(false, 2, &bf, true, true, 4), "two WRs");
    assert!(
        !use_blueflame(false, 1, &bf, false, false, 4),
        "not inline, not preferred"
    );
    assert!(!use_blueflame(true, 1, &bf, true, true, 4), "shut up");
    let bf0 = BlueFlameReg { index: 0, ..bf };
    assert!(!use_blueflame(false, 1, &bf0, true, true, 4), "bfreg 0");
}

#[test]
fn wrap_around_many_laps_and_16_bit_index() {
    let bus = MemBus::new(0x4000);
    let (mut q, d) = sq(cfg(QpType::Rc, 8));
    let g = [SGE_A];
    let sges3 = [SGE_A; 3]; // DS 4: one WQEBB
    let sges4 = [SGE_A; 4]; // DS 5: two WQEBBs
    let dseg = hex(DSEG_A);
    let mut counter: u32 = 0;
    for n in 0..60_000u32 {
        let list: &[Sge] = match n % 3 {
            0 => &g,
            1 => &sges3,
            _ => &sges4,
        };
        let mut w = wr(SendOp::Send, SendData::Gather(list), SendFlags::SIGNALED);
        w.wr_id = u64::from(n);
        let p = q.post(&w).unwrap();
        assert_eq!(u32::from(p.index), counter & 0xffff);
        let slot = (counter & 7) as usize;
        let ring = q.ring();
        let ctrl = WqeCtrlSeg::ref_from(&ring[slot * 64..]).unwrap();
        assert_eq!(ctrl.wqe_index(), p.index);
        assert_eq!(ctrl.ds(), p.ds);
        // The data segments follow the ctrl with modular arithmetic.
        for k in 0..list.len() {
            let off = (slot * 64 + 16 * (k + 1)) % 512;
            assert_eq!(&ring[off..off + 16], &dseg[..]);
        }
        counter += u32::from(p.wqebbs);
        q.ring_doorbell(&bus);
        assert_eq!(be(&d[1]), counter & 0xffff);
        assert_eq!(q.complete(p.index), Some(u64::from(n)));
    }
    assert!(counter > 0x1_0000, "the 16-bit index wrapped");
}

#[test]
fn completion_retires_unsignaled_predecessors_and_rejects_bogus_counters() {
    let (mut q, _) = sq(cfg(QpType::Rc, 8));
    let sges4 = [SGE_A; 4];
    for id in 0..3 {
        let mut w = wr(SendOp::Send, SendData::Gather(&sges4), SendFlags::NONE);
        w.wr_id = id;
        q.post(&w).unwrap(); // indexes 0, 2, 4
    }
    assert_eq!(q.outstanding(), 6);
    assert_eq!(q.complete(6), None, "not posted");
    assert_eq!(q.complete(0xfff0), None, "not posted");
    assert_eq!(q.complete(2), Some(1));
    assert_eq!(q.outstanding(), 2);
    assert_eq!(q.complete(0), None, "already retired");
    assert_eq!(q.complete(4), Some(2));
    assert_eq!(q.outstanding(), 0);
}

#[test]
fn post_list_rings_once_and_reports_the_failing_wr() {
    let bus = MemBus::new(0x4000);
    let mut c = cfg(QpType::Rc, 8);
    c.max_sge = 1;
    let (mut q, d) = sq(c);
    let g = [SGE_A];
    let two = [SGE_A; 2];
    let wrs = [
        wr(SendOp::Send, SendData::Gather(&g), SendFlags::NONE),
        wr(SendOp::Send, SendData::Gather(&g), SendFlags::NONE),
        wr(SendOp::Send, SendData::Gather(&two), SendFlags::NONE),
        wr(SendOp::Send, SendData::Gather(&g), SendFlags::NONE),
    ];
    assert_eq!(
        q.post_list(&bus, &wrs),
        Err((2, PostError::TooManySges { count: 2, max: 1 }))
    );
    assert_eq!(be(&d[1]), 2, "the two good WRs were published");
    assert_eq!(bus.bar_bytes(BF_REG, 8), hex("0000010a 00012302"));
    assert_eq!(q.post_list(&bus, &wrs[..1]), Ok(1));
}

#[test]
fn bad_geometry() {
    let d = dbr();
    let c = cfg(QpType::Rc, 3);
    assert!(matches!(
        SendQueue::new(words(192, 0), &d[1], c),
        Err(GeometryError::BadCount { .. })
    ));
    let c = cfg(QpType::Rc, 4);
    assert_eq!(
        SendQueue::new(words(252, 0), &d[1], c).err(),
        Some(GeometryError::BufferTooShort {
            len: 252,
            need: 256
        })
    );
    let mut c = cfg(QpType::Rc, 4);
    c.bf.buf_size = 100;
    assert!(SendQueue::new(words(256, 0), &d[1], c).is_err());
    // A longer buffer is fine; only its prefix is used.
    assert!(SendQueue::new(words(4096, 0), &d[1], cfg(QpType::Rc, 4)).is_ok());
}

// ---------------------------------------------------------------- receive queue

type Rq = ReceiveQueue<Box<[AtomicU32]>, &'static AtomicU32>;

fn rq(wqe_cnt: u32, wqe_shift: u32) -> (Rq, &'static [AtomicU32; 2]) {
    let d = dbr();
    let q = ReceiveQueue::new(
        words((wqe_cnt as usize) << wqe_shift, 0xee),
        &d[0],
        RqConfig { wqe_cnt, wqe_shift },
    )
    .unwrap();
    (q, d)
}

const TERMINATOR: &str = "00000000 00000100 0000000000000000";

/// `post_list` writes the bytes `post` writes request by request, over thousands of
/// requests in random lists, with ring wraps, for WQEs of 1, 2 and 4 entries: random
/// scatter lists (empty, zero-length entries, one entry, the WQE's maximum, one too
/// many), each list stopping where `post` one by one first fails (the full ring:
/// `QueueFull`, leaving the ring and its counters intact; too many entries:
/// `TooManySges`) with that request's index; the `wr_id`s come back at completion;
/// `retire(n)` moves the ring as `n` completions in order do.
#[test]
fn post_list_writes_the_bytes_of_post() {
    let mut x = 0x853c_49e6_748f_ea9bu64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for (wqe_cnt, wqe_shift) in [(8, 4), (16, 5), (64, 6), (4, 6)] {
        let (mut one, d1) = rq(wqe_cnt, wqe_shift);
        let (mut list, d2) = rq(wqe_cnt, wqe_shift);
        let max_gs = one.max_gs() as usize;
        let ring_len = one.ring_len();
        let mut wr_id = 0u64;
        let mut oldest = 0u16;
        let mut full = 0;
        for it in 0..1_500 {
            // A list of 0..=12 requests, mostly one-entry ones (the common shape).
            let n = (next() % 13) as usize;
            let mut sgls: Vec<Vec<Sge>> = Vec::new();
            for _ in 0..n {
                let r = next();
                let count = match r % 8 {
                    0 => 0,
                    1 => max_gs,
                    2 => max_gs + 1,
                    3 => 1 + (r >> 8) as usize % max_gs,
                    _ => 1,
                };
                sgls.push(
                    (0..count)
                        .map(|k| Sge {
                            addr: next(),
                            length: if (r >> (16 + k)) & 7 == 0 {
                                0
                            } else {
                                next() as u32
                            },
                            lkey: next() as u32,
                        })
                        .collect(),
                );
            }
            let reqs: Vec<(u64, &[Sge])> = sgls
                .iter()
                .map(|s| {
                    wr_id += 1;
                    (wr_id, s.as_slice())
                })
                .collect();
            let mut want = Ok(());
            for (i, r) in reqs.iter().enumerate() {
                if let Err(e) = one.post(r.0, r.1) {
                    want = Err((i, e));
                    break;
                }
            }
            if let Err((_, PostError::QueueFull { .. })) = want {
                full += 1;
            }
            assert_eq!(list.post_list(&reqs), want);
            assert_eq!(list.head(), one.head());
            assert_eq!(list.outstanding(), one.outstanding());
            assert_eq!(
                snapshot(list.mem(), ring_len),
                snapshot(one.mem(), ring_len),
                "lists of {n}, {wqe_cnt} x {} B",
                1 << wqe_shift
            );
            assert_eq!(
                one.ring_doorbell(&MemBus::new(64)),
                list.ring_doorbell(&MemBus::new(64))
            );
            assert_eq!(be(&d1[0]), be(&d2[0]));
            // Complete some of the outstanding WQEs, in order: `complete` on both
            // (the same `wr_id`s) or `retire` on the list's ring.
            // None in the first 40 of every 100 lists (40 lists post far more than
            // the 64 WQEs of the largest ring: the ring fills in each such phase).
            let k = if it % 100 < 40 {
                0
            } else {
                (next() % (u64::from(one.outstanding()) + 1)) as u32
            };
            if next() % 2 == 0 {
                for _ in 0..k {
                    assert_eq!(list.complete(oldest), one.complete(oldest));
                    oldest = oldest.wrapping_add(1);
                }
            } else {
                for _ in 0..k {
                    one.complete(oldest);
                    oldest = oldest.wrapping_add(1);
                }
                assert_eq!(list.retire(k), k);
            }
            assert_eq!(list.outstanding(), one.outstanding());
        }
        assert!(
            full >= 15,
            "the ring was full {full} times (once per phase)"
        );
        // `retire` takes at most the outstanding WQEs.
        let o = list.outstanding();
        assert_eq!(list.retire(o + 5), o);
        assert_eq!(list.outstanding(), 0);
        assert!(u32::from(one.head()) > 4 * wqe_cnt, "the ring wrapped");
    }
}

#[test]
fn receive_wqes_with_and_without_terminator() {
    let bus = MemBus::new(0x1000);
    let (mut q, d) = rq(4, 6);
    assert_eq!(q.max_gs(), 4);
    let b = sge(0xaaaa_0000, 0x40, 0x99);
    let bseg = "00000040 00000099 00000000aaaa0000";
    // A short list (the zero-length SGE skipped): entries, then the terminator.
    assert_eq!(q.post(1, &[SGE_A, sge(5, 0, 5), b]), Ok(0));
    // A full list: no terminator.
    assert_eq!(q.post(2, &[SGE_A, b, SGE_A, b]), Ok(1));
    // An empty list: only the terminator.
    assert_eq!(q.post(3, &[]), Ok(2));
    let want = cat(&[
        hex(DSEG_A),
        hex(bseg),
        hex(TERMINATOR),
        ee(16),
        hex(DSEG_A),
        hex(bseg),
        hex(DSEG_A),
        hex(bseg),
        hex(TERMINATOR),
        ee(48),
        ee(64),
    ]);
    assert_eq!(q.ring(), &want[..]);
    assert_eq!(
        q.post(4, &[b; 5]),
        Err(PostError::TooManySges { count: 5, max: 4 })
    );
    assert_eq!(be(&d[0]), 0, "not published yet");
    assert!(q.ring_doorbell(&bus));
    assert_eq!(be(&d[0]), 3);
    assert!(!q.ring_doorbell(&bus));
    assert_eq!(be(&d[1]), 0, "the send word is not touched");
}

#[test]
fn receive_ring_wraps_and_completes_by_wqe_counter() {
    let bus = MemBus::new(0x1000);
    let (mut q, d) = rq(2, 4); // one entry per WQE: never a terminator when full
    assert_eq!(q.post(10, &[SGE_A]), Ok(0));
    assert_eq!(q.post(11, &[]), Ok(1));
    assert_eq!(&q.ring()[16..32], &hex(TERMINATOR)[..]);
    assert_eq!(
        q.post(12, &[SGE_A]),
        Err(PostError::QueueFull { needed: 1, free: 0 })
    );
    assert_eq!(q.complete(1), Some(11), "out of order, by wqe_counter");
    assert_eq!(q.complete(5), None);
    assert_eq!(q.post(12, &[SGE_A]), Ok(2));
    assert_eq!(&q.ring()[..16], &hex(DSEG_A)[..]);
    q.ring_doorbell(&bus);
    assert_eq!(be(&d[0]), 3);
    for i in 3..70_000u32 {
        q.complete(q.head().wrapping_sub(2));
        assert_eq!(q.post(u64::from(i), &[SGE_A]), Ok(i as u16));
        q.ring_doorbell(&bus);
        assert_eq!(be(&d[0]), (i + 1) & 0xffff);
    }
}

// ---------------------------------------------------------------- completion queue

/// Plays the device: writes `cqe` for producer index `p` with the right owner bit,
/// body first and `op_own` last.
fn device_write(mem: &[AtomicU32], ncqe: u32, cqe_size: usize, p: u32, cqe: &Cqe64) {
    let mut c = *cqe;
    c.set_owner(hw_owner_bit(p, ncqe));
    let at = ((p & (ncqe - 1)) as usize + 1) * cqe_size - 64;
    mem.write(at, c.body());
    mem.write(at + 63, &[c.op_own]);
}

fn req_cqe(wqe_counter: u16) -> Cqe64 {
    let mut c = Cqe64::zeroed();
    c.set_op_own(MLX5_CQE_REQ, 0, false, 0);
    c.set_sop_drop_qpn(0x0a, QPN);
    c.wqe_counter = wqe_counter.into();
    c
}

fn atomic_mem(n: usize) -> Box<[AtomicU32]> {
    words(n, 0x5a)
}

#[test]
fn cq_ownership_across_wraps() {
    let bus = MemBus::new(0x2000);
    let d = dbr();
    let mem = atomic_mem(4 * 64);
    let ncqe = 4;
    let mut cq = CompletionQueue::new(
        &*mem,
        &d[0],
        &d[1],
        CqConfig {
            cqn: 0x31,
            ncqe,
            cqe_size: 64,
            uar: 0x1000,
        },
    )
    .unwrap();
    cq.init_entries();
    for i in 0..4 {
        assert_eq!(mem.load_u8(i * 64 + 63), 0xf0);
    }
    assert!(cq.poll(&bus).is_none(), "fresh entries are invalid");

    let mut p = 0u32;
    let mut out = [Cqe64::zeroed(); 8];
    for lap in 0..5u32 {
        // The device writes 3 CQEs; software takes them in order and no more.
        for _ in 0..3 {
            device_write(&mem, ncqe, 64, p, &req_cqe(p as u16));
            p += 1;
        }
        let n = cq.poll_many(&bus, &mut out);
        assert_eq!(n, 3, "lap {lap}");
        for (k, c) in out[..3].iter().enumerate() {
            assert_eq!(u32::from(c.wqe_counter()), p - 3 + k as u32);
            assert_eq!(c.owner(), hw_owner_bit(p - 3 + k as u32, ncqe));
            assert_eq!(c.qpn(), QPN);
        }
        assert_eq!(cq.consumer_index(), p);
        assert_eq!(be(&d[0]), p & 0xff_ffff, "set_ci");
        // The entries already consumed, one lap later, are stale: not taken again.
        assert!(cq.poll(&bus).is_none());
    }
    // Even an empty poll writes the consumer index.
    d[0].store(0, Ordering::Relaxed);
    assert_eq!(cq.poll_many(&bus, &mut out), 0);
    assert_eq!(be(&d[0]), p);
}

#[test]
fn cq_128_byte_entries_use_the_upper_half() {
    let bus = MemBus::new(0x2000);
    let d = dbr();
    let mem = atomic_mem(2 * 128);
    let mut cq = CompletionQueue::new(
        &*mem,
        &d[0],
        &d[1],
        CqConfig {
            cqn: 1,
            ncqe: 2,
            cqe_size: 128,
            uar: 0x1000,
        },
    )
    .unwrap();
    cq.init_entries();
    assert_eq!(mem.load_u8(127), 0xf0);
    assert_eq!(mem.load_u8(63), 0x5a, "lower half untouched");
    let mut c = Cqe64::zeroed();
    c.set_op_own(MLX5_CQE_RESP_SEND, 0, true, 0);
    c.byte_cnt = 77.into();
    device_write(&mem, 2, 128, 0, &c);
    let got = cq.poll(&bus).unwrap();
    assert_eq!(
        (got.opcode(), got.byte_cnt(), got.se()),
        (MLX5_CQE_RESP_SEND, 77, true)
    );
    assert!(cq.poll(&bus).is_none());
}

#[test]
fn cq_error_cqe_and_arm_doorbell() {
    let bus = MemBus::new(0x2000);
    let d = dbr();
    let mem = atomic_mem(8 * 64);
    let mut cq = CompletionQueue::new(
        &*mem,
        &d[0],
        &d[1],
        CqConfig {
            cqn: 0x000abc,
            ncqe: 8,
            cqe_size: 64,
            uar: 0x1000,
        },
    )
    .unwrap();
    cq.init_entries();
    let mut e = req_cqe(3);
    e.op_own = make_op_own(MLX5_CQE_REQ_ERR, 0, false, 0);
    let mut raw = e.as_bytes().to_vec();
    raw[55] = 0x05; // WR_FLUSH_ERR
    raw[54] = 0x79;
    let e = Cqe64::read_from(&raw).unwrap();
    device_write(&mem, 8, 64, 0, &e);
    let got = cq.poll(&bus).unwrap();
    let err = got.as_err();
    assert_eq!(
        (err.opcode(), err.syndrome(), err.vendor_err_synd()),
        (13, 5, 0x79)
    );
    assert_eq!((err.wqe_counter(), err.qpn()), (3, QPN));

    cq.arm(&bus, CqArmCmd::NextCompletion);
    // sn 0, cmd 0, ci 1; then the CQN.
    assert_eq!(bus.bar_bytes(0x1020, 8), hex("00000001 00000abc"));
    assert_eq!(be(&d[1]), 0x0000_0001);
    cq.ack_event();
    cq.arm(&bus, CqArmCmd::Solicited);
    assert_eq!(bus.bar_bytes(0x1020, 8), hex("11000001 00000abc"));
    assert_eq!(be(&d[1]), 0x1100_0001);
}

#[test]
fn cq_bad_geometry() {
    let d = dbr();
    let mem = atomic_mem(64);
    let c = CqConfig {
        cqn: 0,
        ncqe: 2,
        cqe_size: 64,
        uar: 0,
    };
    assert!(matches!(
        CompletionQueue::new(&*mem, &d[0], &d[1], c),
        Err(GeometryError::BufferTooShort { len: 64, need: 128 })
    ));
    let c = CqConfig { cqe_size: 96, ..c };
    assert!(CompletionQueue::new(&*mem, &d[0], &d[1], c).is_err());
    let c = CqConfig { ncqe: 0, ..c };
    assert!(CompletionQueue::new(&*mem, &d[0], &d[1], c).is_err());
}

// ---------------------------------------------------------------- over DMA memory

/// The layout a QP gets from rdma-core: one buffer with the RQ at offset 0 and the SQ
/// right after it, and the doorbell record (RQ word, SQ word) in a separate page.
#[test]
fn a_qp_over_dma_buffers() {
    use crate::dma::DmaBuf;
    use ferroverbs_hw::datapath::dbr::{MLX5_RCV_DBR, MLX5_SND_DBR};
    use ferroverbs_hw::DmaPerm;
    use std::sync::Arc;

    let bus = Arc::new(MemBus::new(0x4000));
    let qp_buf = DmaBuf::new(&bus, 4 * 64 + 8 * 64, DmaPerm::RW).unwrap();
    let dbr_page = DmaBuf::new(&bus, 64, DmaPerm::RW).unwrap();
    let rq_bytes = 4 * 64;
    let sq_mem = Region::new(&qp_buf, rq_bytes, 8 * 64).unwrap();
    let mut sq = SendQueue::new(
        sq_mem,
        Word {
            mem: &dbr_page,
            off: 4 * MLX5_SND_DBR,
        },
        cfg(QpType::Rc, 8),
    )
    .unwrap();
    let mut rq = ReceiveQueue::new(
        Region::new(&qp_buf, 0, rq_bytes).unwrap(),
        Word {
            mem: &dbr_page,
            off: 4 * MLX5_RCV_DBR,
        },
        RqConfig {
            wqe_cnt: 4,
            wqe_shift: 6,
        },
    )
    .unwrap();

    rq.post(1, &[SGE_A]).unwrap();
    rq.ring_doorbell(&*bus);
    sq.post(&wr(
        SendOp::Send,
        SendData::Gather(&[SGE_A]),
        SendFlags::SIGNALED,
    ))
    .unwrap();
    sq.ring_doorbell(&*bus);

    let mut b = [0u8; 32];
    qp_buf.read_bytes(0, &mut b);
    assert_eq!(b.to_vec(), cat(&[hex(DSEG_A), hex(TERMINATOR)]));
    qp_buf.read_bytes(rq_bytes, &mut b);
    assert_eq!(
        b.to_vec(),
        cat(&[hex("0000000a 00012302 00000008 00000000"), hex(DSEG_A)])
    );
    // The record: RQ counter 1 at +0, SQ counter 1 at +4, big-endian.
    assert_eq!((dbr_page.read_be32(0), dbr_page.read_be32(4)), (1, 1));
    // One WR of DS 2 with BlueFlame preferred: the WQEBB was copied to the register.
    assert_eq!(bus.bar_bytes(BF_REG, 32), b.to_vec());
}
