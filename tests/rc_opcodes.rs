//! Every RC opcode end to end through the verbs API, between two simulated NICs on an
//! in-process fabric (deterministic mode): data verified byte for byte at sizes 0, 1,
//! MTU-1, MTU, MTU+1 and 1 MiB; inline sends up to `max_inline_data`; gather and
//! scatter lists; the work completions' fields.

mod verbs_support;
use verbs_support::*;

use ferroverbs::verbs::{
    AccessFlags as A, MemoryRegion, Mtu, QpCap, QpInitAttr, RecvWr, SendWr, WcFlags, WcOpcode,
    WcStatus,
};
use ferroverbs_sim::SimBus;

const MTU: usize = 1024;
const SIZES: [usize; 6] = [0, 1, MTU - 1, MTU, MTU + 1, 1 << 20];
const BIG: usize = (1 << 20) + 64;

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 4,
        max_recv_sge: 4,
        max_inline_data: 256,
    }
}

fn sgl(mr: &MemoryRegion<'_, SimBus>, off: usize, n: usize) -> Vec<ferroverbs::verbs::Sge> {
    if n == 0 {
        vec![]
    } else {
        vec![mr.sge(off, n as u32).unwrap()]
    }
}

/// Sets up two connected QPs (one CQ per side) and runs `body`.
macro_rules! pair {
    (|$net:ident, $pa:ident, $pb:ident, $qa:ident, $qb:ident, $cqa:ident, $cqb:ident| $body:block) => {{
        let $net = Net::new(false);
        let (ca, ga) = open_nic(&$net.a, 1);
        let (cb, gb) = open_nic(&$net.b, 2);
        let $pa = ca.alloc_pd().unwrap();
        let $pb = cb.alloc_pd().unwrap();
        #[allow(unused_mut)]
        let mut $cqa = ca.create_cq(256).unwrap();
        #[allow(unused_mut)]
        let mut $cqb = cb.create_cq(256).unwrap();
        let mut $qa = $pa.create_qp(&QpInitAttr::new(&$cqa, &$cqa, cap())).unwrap();
        let mut $qb = $pb.create_qp(&QpInitAttr::new(&$cqb, &$cqb, cap())).unwrap();
        connect(&mut $qa, &ga, &mut $qb, &gb, Mtu::Mtu1024);
        $body
        let s = $net.b.stats().data_path;
        assert_eq!(s.rx_bad_icrc + s.rx_malformed, 0, "{s:?}");
    }};
}

#[test]
fn send_and_send_with_immediate_at_every_size() {
    pair!(|net, pa, pb, qa, qb, cqa, cqb| {
        let src = pa.alloc_mr(BIG, A::empty()).unwrap();
        let dst = pb.alloc_mr(BIG, A::LOCAL_WRITE).unwrap();
        let mut id = 0u64;
        for (k, &n) in SIZES.iter().enumerate() {
            for imm in [None, Some(0xdead_0000 | k as u32)] {
                id += 1;
                let data = pattern(n, id as u8);
                src.write(0, &data);
                dst.fill(0, n + 8, 0xee);
                qb.post_recv(&[RecvWr::new(id, &[dst.sge(0, BIG as u32).unwrap()])])
                    .unwrap();
                let sg = sgl(&src, 0, n);
                let wr = match imm {
                    None => SendWr::send(id, &sg),
                    Some(i) => SendWr::send_with_imm(id, &sg, i),
                };
                qa.post_send(&[wr.signaled()]).unwrap();
                let r = wait(&net, &mut cqb, 1)[0];
                assert_eq!(r.status, WcStatus::Success, "size {n}: {r:?}");
                assert_eq!(r.opcode, WcOpcode::Recv);
                assert_eq!(r.wr_id, id);
                assert_eq!(r.byte_len as usize, n);
                assert_eq!(r.qp_num, qb.qp_num());
                assert_eq!(r.src_qp, qa.qp_num());
                assert_eq!(r.wc_flags.contains(WcFlags::WITH_IMM), imm.is_some());
                if let Some(i) = imm {
                    assert_eq!(r.imm_data, i);
                }
                let mut got = vec![0; n + 8];
                dst.read(0, &mut got);
                assert_eq!(&got[..n], &data[..], "size {n}");
                assert_eq!(&got[n..], &[0xee; 8], "no byte past the message");
                let s = wait(&net, &mut cqa, 1)[0];
                assert_eq!(
                    (s.status, s.opcode, s.wr_id, s.qp_num),
                    (WcStatus::Success, WcOpcode::Send, id, qa.qp_num())
                );
                assert_eq!(s.wc_flags.contains(WcFlags::WITH_IMM), imm.is_some());
            }
        }
    });
}

#[test]
fn rdma_write_and_write_with_immediate_at_every_size() {
    pair!(|net, pa, pb, qa, qb, cqa, cqb| {
        let src = pa.alloc_mr(BIG, A::empty()).unwrap();
        let dst = pb.alloc_mr(BIG, A::LOCAL_WRITE | A::REMOTE_WRITE).unwrap();
        let mut id = 0u64;
        for &n in &SIZES {
            for imm in [None, Some(0x1234_5678u32)] {
                id += 1;
                let data = pattern(n, id as u8);
                src.write(0, &data);
                dst.fill(0, n + 16, 0xee);
                if imm.is_some() {
                    qb.post_recv(&[RecvWr::new(id, &[])]).unwrap();
                }
                let sg = sgl(&src, 0, n);
                let remote = dst.remote(8);
                let wr = match imm {
                    None => SendWr::rdma_write(id, &sg, remote),
                    Some(i) => SendWr::rdma_write_with_imm(id, &sg, remote, i),
                };
                qa.post_send(&[wr.signaled()]).unwrap();
                let s = wait(&net, &mut cqa, 1)[0];
                assert_eq!(
                    (s.status, s.opcode, s.wr_id),
                    (WcStatus::Success, WcOpcode::RdmaWrite, id),
                    "size {n}"
                );
                if let Some(i) = imm {
                    let r = wait(&net, &mut cqb, 1)[0];
                    assert_eq!(r.status, WcStatus::Success);
                    assert_eq!(r.opcode, WcOpcode::RecvRdmaWithImm);
                    assert_eq!((r.wr_id, r.imm_data), (id, i));
                    assert!(r.wc_flags.contains(WcFlags::WITH_IMM));
                    assert_eq!(r.byte_len as usize, n);
                }
                let mut got = vec![0; n + 16];
                dst.read(0, &mut got);
                assert_eq!(&got[..8], &[0xee; 8]);
                assert_eq!(&got[8..8 + n], &data[..], "size {n}");
                assert_eq!(&got[8 + n..], &[0xee; 8]);
            }
        }
    });
}

#[test]
fn rdma_read_at_every_size() {
    pair!(|net, pa, pb, qa, _qb, cqa, _cqb| {
        let local = pa.alloc_mr(BIG, A::LOCAL_WRITE).unwrap();
        let remote = pb.alloc_mr(BIG, A::REMOTE_READ).unwrap();
        for (k, &n) in SIZES.iter().enumerate() {
            let data = pattern(n, 100 + k as u8);
            remote.write(16, &data);
            local.fill(0, n + 8, 0xee);
            let sg = sgl(&local, 0, n);
            qa.post_send(&[SendWr::rdma_read(k as u64, &sg, remote.remote(16)).signaled()])
                .unwrap();
            let s = wait(&net, &mut cqa, 1)[0];
            assert_eq!(
                (s.status, s.opcode, s.wr_id),
                (WcStatus::Success, WcOpcode::RdmaRead, k as u64),
                "size {n}"
            );
            assert_eq!(s.byte_len as usize, n);
            let mut got = vec![0; n + 8];
            local.read(0, &mut got);
            assert_eq!(&got[..n], &data[..], "size {n}");
            assert_eq!(&got[n..], &[0xee; 8]);
        }
    });
}

#[test]
fn atomics_fetch_add_and_compare_swap() {
    pair!(|net, pa, pb, qa, _qb, cqa, _cqb| {
        let local = pa.alloc_mr(64, A::LOCAL_WRITE).unwrap();
        let remote = pb.alloc_mr(64, A::LOCAL_WRITE | A::REMOTE_ATOMIC).unwrap();
        // The simulator keeps the operand in host order and returns the original value
        // in host order, as a ConnectX whose driver selected host-endian atomic
        // responses does (`atomic_req_8B_endianness_mode`).
        remote.write(8, &100u64.to_le_bytes());
        let res = [local.sge(0, 8).unwrap()];
        qa.post_send(&[SendWr::atomic_fetch_add(1, &res, remote.remote(8), 5).signaled()])
            .unwrap();
        let s = wait(&net, &mut cqa, 1)[0];
        assert_eq!(
            (s.status, s.opcode, s.byte_len, s.wr_id),
            (WcStatus::Success, WcOpcode::FetchAdd, 8, 1)
        );
        let mut v = [0u8; 8];
        local.read(0, &mut v);
        assert_eq!(v, 100u64.to_ne_bytes());
        remote.read(8, &mut v);
        assert_eq!(u64::from_le_bytes(v), 105);
        // A compare that fails, then one that succeeds.
        for (id, compare, swap, orig, after) in
            [(2, 7u64, 9u64, 105u64, 105u64), (3, 105, 9, 105, 9)]
        {
            let res = [local.sge(16, 8).unwrap()];
            qa.post_send(&[
                SendWr::atomic_cmp_swp(id, &res, remote.remote(8), compare, swap).signaled(),
            ])
            .unwrap();
            let s = wait(&net, &mut cqa, 1)[0];
            assert_eq!(
                (s.status, s.opcode, s.byte_len, s.wr_id),
                (WcStatus::Success, WcOpcode::CompSwap, 8, id)
            );
            // The fetched value in host byte order: the driver set the device's
            // atomic responses to host endianness, as Linux does.
            local.read(16, &mut v);
            assert_eq!(v, orig.to_ne_bytes());
            remote.read(8, &mut v);
            assert_eq!(u64::from_le_bytes(v), after);
        }
    });
}

#[test]
fn inline_sends_and_writes_up_to_max_inline_data() {
    pair!(|net, _pa, pb, qa, qb, cqa, cqb| {
        let max = qa.cap().max_inline_data as usize;
        assert!(max >= 256, "granted {max}");
        let dst = pb.alloc_mr(4096, A::LOCAL_WRITE | A::REMOTE_WRITE).unwrap();
        for (k, n) in [1usize, 12, 60, 61, 64, 200, max].into_iter().enumerate() {
            let data = pattern(n, k as u8);
            // Two parts, packed back to back in the WQE.
            let (x, y) = data.split_at(n / 3);
            let parts: [&[u8]; 2] = [x, y];
            dst.fill(0, 4096, 0);
            qb.post_recv(&[RecvWr::new(k as u64, &[dst.sge(0, 4096).unwrap()])])
                .unwrap();
            qa.post_send(&[SendWr::send_inline(k as u64, &parts).signaled()])
                .unwrap();
            let r = wait(&net, &mut cqb, 1)[0];
            assert_eq!((r.status, r.byte_len as usize), (WcStatus::Success, n));
            let mut got = vec![0; n];
            dst.read(0, &mut got);
            assert_eq!(got, data, "inline SEND of {n}");
            assert!(wait(&net, &mut cqa, 1)[0].is_ok());
            // The same as an inline RDMA WRITE at offset 2048.
            qa.post_send(&[
                SendWr::rdma_write_inline(k as u64, &parts, dst.remote(2048)).signaled(),
            ])
            .unwrap();
            assert!(wait(&net, &mut cqa, 1)[0].is_ok());
            dst.read(2048, &mut got);
            assert_eq!(got, data, "inline WRITE of {n}");
        }
    });
}

#[test]
fn gather_and_scatter_lists() {
    pair!(|net, pa, pb, qa, qb, cqa, cqb| {
        let s1 = pa.alloc_mr(4096, A::empty()).unwrap();
        let s2 = pa.alloc_mr(8192, A::empty()).unwrap();
        let d1 = pb.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
        let d2 = pb.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
        let a = pattern(1000, 1);
        let b = pattern(3000, 2);
        let c = pattern(10, 3);
        s1.write(100, &a);
        s2.write(5000, &b);
        s1.write(3000, &c);
        let gather = [
            s1.sge(100, 1000).unwrap(),
            s2.sge(5000, 3000).unwrap(),
            s1.sge(3000, 0).unwrap(), // zero length: skipped
            s1.sge(3000, 10).unwrap(),
        ];
        // Scatter: 700 bytes, then 2000, then the rest.
        let scatter = [
            d1.sge(0, 700).unwrap(),
            d2.sge(100, 2000).unwrap(),
            d1.sge(1000, 3000).unwrap(),
        ];
        qb.post_recv(&[RecvWr::new(9, &scatter)]).unwrap();
        qa.post_send(&[SendWr::send(8, &gather).signaled()])
            .unwrap();
        let r = wait(&net, &mut cqb, 1)[0];
        assert_eq!(
            (r.status, r.byte_len, r.wr_id),
            (WcStatus::Success, 4010, 9)
        );
        assert!(wait(&net, &mut cqa, 1)[0].is_ok());
        let msg: Vec<u8> = [a, b, c].concat();
        let mut got = vec![0; 4010];
        d1.read(0, &mut got[..700]);
        d2.read(100, &mut got[700..2700]);
        d1.read(1000, &mut got[2700..]);
        assert_eq!(got, msg);
        // An RDMA READ scattered into two places.
        let remote = pb.alloc_mr(4096, A::REMOTE_READ).unwrap();
        remote.write(0, &msg[..4000]);
        let l1 = pa.alloc_mr(8192, A::LOCAL_WRITE).unwrap();
        let sc = [l1.sge(0, 1500).unwrap(), l1.sge(2000, 2500).unwrap()];
        qa.post_send(&[SendWr::rdma_read(10, &sc, remote.remote(0)).signaled()])
            .unwrap();
        let s = wait(&net, &mut cqa, 1)[0];
        assert_eq!((s.status, s.byte_len), (WcStatus::Success, 4000));
        let mut x = vec![0; 1500];
        l1.read(0, &mut x);
        assert_eq!(x, &msg[..1500]);
        let mut y = vec![0; 2500];
        l1.read(2000, &mut y);
        assert_eq!(y, &msg[1500..4000]);
    });
}

/// A fetch-and-add between NIC 1 (whose device is `a`) and NIC 2; the 8 bytes the
/// original value was written back as.
fn fetched_bytes(net: &Net) -> [u8; 8] {
    let (ca, ga) = open_nic(&net.a, 1);
    let (cb, gb) = open_nic(&net.b, 2);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut cqa = ca.create_cq(16).unwrap();
    let cqb = cb.create_cq(16).unwrap();
    let mut qa = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap())).unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap())).unwrap();
    connect(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024);
    let local = pa.alloc_mr(8, A::LOCAL_WRITE).unwrap();
    let remote = pb.alloc_mr(8, A::LOCAL_WRITE | A::REMOTE_ATOMIC).unwrap();
    remote.write(0, &0x0102_0304_0506_0708u64.to_le_bytes());
    let res = [local.sge(0, 8).unwrap()];
    qa.post_send(&[SendWr::atomic_fetch_add(1, &res, remote.remote(0), 1).signaled()])
        .unwrap();
    assert_eq!(wait(net, &mut cqa, 1)[0].status, WcStatus::Success);
    let mut v = [0u8; 8];
    local.read(0, &mut v);
    v
}

#[test]
fn atomic_results_follow_the_devices_endianness_mode() {
    use ferroverbs::AtomicCap;
    use ferroverbs_hw::control::caps::atomic_caps;
    use ferroverbs_sim::firmware::CapType;
    // The default device supports host-endian responses: the driver selects them
    // (SET_HCA_CAP atomic) and reports HCA atomics, and the fetched value arrives in
    // host byte order.
    let net = Net::new(false);
    assert_eq!(
        open_nic(&net.a, 1).0.query_device().unwrap().atomic_cap,
        AtomicCap::Hca
    );
    assert_eq!(fetched_bytes(&net), 0x0102_0304_0506_0708u64.to_ne_bytes());
    // A device without mode 1 stays big-endian: atomics still execute, the value comes
    // back in network order, and the device is reported without atomics (Linux
    // `get_atomic_caps`).
    let cfg = ferroverbs_sim::SimConfig::deterministic(0xa1, 1).cap(
        CapType::Atomic,
        atomic_caps::supported_atomic_req_8B_endianness_mode_1,
        0,
    );
    let net = Net {
        fabric: ferroverbs_sim::Fabric::new(0xfab),
        a: ferroverbs_sim::Sim::new(cfg),
        b: ferroverbs_sim::Sim::new(ferroverbs_sim::SimConfig::deterministic(0xb2, 1)),
    };
    net.fabric.attach(&net.a);
    net.fabric.attach(&net.b);
    assert_eq!(
        open_nic(&net.a, 1).0.query_device().unwrap().atomic_cap,
        AtomicCap::None
    );
    assert_eq!(fetched_bytes(&net), 0x0102_0304_0506_0708u64.to_be_bytes());
}
