//! UD queue pairs end to end through the verbs API between two simulated NICs on an
//! in-process fabric, in deterministic and threaded mode: ping-pong with the data and
//! the 40-byte GRH area verified (20 zero bytes, then the IPv4 header with both
//! addresses, TTL and TOS), SEND with immediate, `src_qp` and the GRH flag in the
//! completions, the Q_Key check (a mismatch is dropped and counted; a controlled Q_Key
//! takes the sender QP's own), messages longer than the port MTU refused at post, a
//! receive buffer smaller than message + 40 completing with a local length error,
//! drops for an unknown QPN, a wrong P_Key and a missing receive WQE, and the typed
//! attribute errors of the UD transitions.

mod verbs_support;
use verbs_support::*;

use ferroverbs::verbs::{
    AccessFlags as A, AddressVector, Attribute, BadWr, CompletionQueue, Error, MemoryRegion,
    PostError, QpAttr, QpCap, QpInitAttr, QpState, QpType, QueuePair, RecvWr, SendWr, Transition,
    UdInitAttr, WcFlags, WcOpcode, WcStatus, WorkCompletion,
};
use ferroverbs_sim::SimBus;

const QKEY: u32 = 0x1111_2222;
/// The port MTU of the simulated NICs (vport MTU 1500).
const MTU: usize = 1024;
const GRH: usize = 40;
const BUF: usize = 8192;

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 32,
        max_recv_wr: 32,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 128,
    }
}

fn ud_qp<'a>(
    pd: &'a ferroverbs::verbs::Pd<'a, SimBus>,
    cq: &CompletionQueue<'a, SimBus>,
    qkey: u32,
) -> QueuePair<'a, SimBus> {
    let mut qp = pd.create_qp(&QpInitAttr::ud(cq, cq, cap())).unwrap();
    assert_eq!(qp.qp_type(), QpType::Ud);
    qp.to_init_ud(&UdInitAttr::new(1, qkey)).unwrap();
    qp.to_rtr_ud().unwrap();
    qp.to_rts_ud(0x42).unwrap();
    assert_eq!(qp.state(), QpState::Rts);
    assert_eq!(qp.max_message() as usize, MTU);
    qp
}

/// Polls `cq` until `n` completions arrived (the fabric stepped in between).
fn poll_n(net: &Net, cq: &mut CompletionQueue<'_, SimBus>, n: usize) -> Vec<WorkCompletion> {
    wait(net, cq, n)
}

/// Nothing more arrives on `cq` once the fabric is idle.
fn assert_quiet(net: &Net, cq: &mut CompletionQueue<'_, SimBus>) {
    net.settle();
    let mut wc = [WorkCompletion::default(); 4];
    assert_eq!(cq.poll(&mut wc), 0, "{:?}", &wc[..1]);
}

/// Checks the GRH area of a receive buffer: 20 zero bytes, then an IPv4 header from
/// 10.0.0.`from` to 10.0.0.`to` with this TTL and TOS, protocol UDP.
fn check_grh(
    mr: &MemoryRegion<'_, SimBus>,
    off: usize,
    from: u8,
    to: u8,
    ttl: u8,
    tos: u8,
    len: usize,
) {
    let mut g = [0u8; GRH];
    mr.read(off, &mut g);
    assert_eq!(&g[..20], &[0u8; 20][..], "reserved part of the GRH area");
    let ip = &g[20..];
    assert_eq!(ip[0], 0x45, "IPv4, IHL 5");
    assert_eq!(ip[1], tos, "TOS = traffic class");
    let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
    // IPv4 20 + UDP 8 + BTH 12 + DETH 8 (+ ImmDt 4) + payload + pad + ICRC 4.
    assert!(total >= 20 + 8 + 12 + 8 + len + 4, "total length {total}");
    assert_eq!(ip[8], ttl, "TTL = hop limit");
    assert_eq!(ip[9], 17, "UDP");
    assert_eq!(&ip[12..16], &[10, 0, 0, from], "source address");
    assert_eq!(&ip[16..20], &[10, 0, 0, to], "destination address");
    // The header checksum is valid.
    let sum = ip
        .chunks(2)
        .fold(0u32, |s, w| s + u32::from(u16::from_be_bytes([w[0], w[1]])));
    let sum = (sum & 0xffff) + (sum >> 16);
    assert_eq!((sum & 0xffff) + (sum >> 16), 0xffff, "IPv4 header checksum");
}

fn pingpong(threaded: bool) {
    let (net, (ca, ga), (cb, gb)) = two_nics(threaded);
    let pa = ca.alloc_pd().unwrap();
    let pb = cb.alloc_pd().unwrap();
    let mut cqa = ca.create_cq(128).unwrap();
    let mut cqb = cb.create_cq(128).unwrap();
    let mut qa = ud_qp(&pa, &cqa, QKEY);
    let mut qb = ud_qp(&pb, &cqb, QKEY);
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    let to_b = AddressVector {
        hop_limit: 17,
        traffic_class: 0x28,
        ..AddressVector::new(gb.gid, gb.mac, 0)
    };
    let ah_b = pa.create_ah(1, &to_b).unwrap();
    let ah_a = pb
        .create_ah(1, &AddressVector::new(ga.gid, ga.mac, 0))
        .unwrap();
    let ma = pa.alloc_mr(BUF, A::LOCAL_WRITE).unwrap();
    let mb = pb.alloc_mr(BUF, A::LOCAL_WRITE).unwrap();
    // Receive buffers at 4096.. of each region; sends from 0.
    let rbuf = 4096;
    let sizes = [0usize, 1, 5, 63, 64, 100, 512, MTU - 1, MTU];
    for (round, &n) in sizes.iter().cycle().take(40).enumerate() {
        let id = round as u64 + 1;
        let imm = (round % 3 == 1).then_some(0xc0de_0000 | round as u32);
        // Ping: A -> B.
        let data = pattern(n, id as u8);
        ma.write(0, &data);
        mb.fill(rbuf, GRH + MTU + 8, 0xee);
        qb.post_recv(&[RecvWr::new(
            id,
            &[mb.sge(rbuf, (GRH + MTU) as u32).unwrap()],
        )])
        .unwrap();
        let sg = if n == 0 {
            vec![]
        } else {
            vec![ma.sge(0, n as u32).unwrap()]
        };
        let wr = match imm {
            Some(i) => SendWr::send_with_imm(id, &sg, i),
            None => SendWr::send(id, &sg),
        };
        qa.post_send(&[wr.ud(&ah_b, nb, QKEY).signaled()]).unwrap();
        let s = poll_n(&net, &mut cqa, 1)[0];
        assert_eq!(
            (s.status, s.opcode, s.wr_id),
            (WcStatus::Success, WcOpcode::Send, id),
            "{s:?}"
        );
        let r = poll_n(&net, &mut cqb, 1)[0];
        assert_eq!(r.status, WcStatus::Success, "size {n}: {r:?}");
        assert_eq!(r.opcode, WcOpcode::Recv);
        assert_eq!(r.wr_id, id);
        assert_eq!(r.byte_len as usize, GRH + n, "byte_len counts the GRH");
        assert_eq!(r.src_qp, na, "src_qp = the sender's QPN");
        assert_eq!(r.qp_num, nb);
        assert!(r.wc_flags.contains(WcFlags::GRH), "{r:?}");
        match imm {
            Some(i) => {
                assert!(r.wc_flags.contains(WcFlags::WITH_IMM));
                assert_eq!(r.imm_data, i);
            }
            None => assert!(!r.wc_flags.contains(WcFlags::WITH_IMM)),
        }
        let mut got = vec![0u8; n];
        mb.read(rbuf + GRH, &mut got);
        assert_eq!(got, data, "payload of {n} bytes after the GRH");
        let mut after = [0u8; 4];
        mb.read(rbuf + GRH + n, &mut after);
        assert_eq!(after, [0xee; 4], "nothing written past the message");
        check_grh(&mb, rbuf, 1, 2, 17, 0x28, n);

        // Pong: B -> A, inline, echoing the bytes received.
        let echo = got[..n.min(100)].to_vec();
        ma.fill(rbuf, GRH + MTU, 0);
        qa.post_recv(&[RecvWr::new(
            id,
            &[ma.sge(rbuf, (GRH + MTU) as u32).unwrap()],
        )])
        .unwrap();
        let parts: &[&[u8]] = &[&echo];
        qb.post_send(&[SendWr::send_inline(id, parts)
            .ud(&ah_a, na, QKEY)
            .signaled()])
            .unwrap();
        let s = poll_n(&net, &mut cqb, 1)[0];
        assert!(s.is_ok(), "{s:?}");
        let r = poll_n(&net, &mut cqa, 1)[0];
        assert!(r.is_ok(), "{r:?}");
        assert_eq!((r.src_qp, r.byte_len as usize), (nb, GRH + echo.len()));
        let mut back = vec![0u8; echo.len()];
        ma.read(rbuf + GRH, &mut back);
        assert_eq!(back, echo);
        check_grh(&ma, rbuf, 2, 1, 64, 0, echo.len());
    }
    let (sa, sb) = (net.a.stats().data_path, net.b.stats().data_path);
    assert_eq!(
        sa.rx_bad_icrc + sa.rx_malformed + sb.rx_bad_icrc + sb.rx_malformed,
        0
    );
    assert_eq!(sa.acks + sb.acks, 0, "UD sends no ACK");
    assert_eq!(sa.tx_frames, 40);
    assert_eq!(sb.tx_frames, 40);
    drop((qa, qb, ah_a, ah_b, ma, mb));
    drop((cqa, cqb, pa, pb));
    drop((ca, cb));
    assert_nothing_left(&net.a);
    assert_nothing_left(&net.b);
}

#[test]
fn ud_pingpong_deterministic() {
    pingpong(false);
}

#[test]
fn ud_pingpong_threaded() {
    pingpong(true);
}

/// Two UD QPs on two NICs, with everything the error tests need.
macro_rules! ud_pair {
    (|$net:ident, $pa:ident, $pb:ident, $qa:ident, $qb:ident, $cqa:ident, $cqb:ident, $ah:ident, $ma:ident, $mb:ident| $body:block) => {{
        let $net = Net::new(false);
        let (ca, _ga) = open_nic(&$net.a, 1);
        let (cb, gb) = open_nic(&$net.b, 2);
        let $pa = ca.alloc_pd().unwrap();
        let $pb = cb.alloc_pd().unwrap();
        #[allow(unused_mut)]
        let mut $cqa = ca.create_cq(128).unwrap();
        #[allow(unused_mut)]
        let mut $cqb = cb.create_cq(128).unwrap();
        #[allow(unused_mut)]
        let mut $qa = ud_qp(&$pa, &$cqa, QKEY);
        #[allow(unused_mut)]
        let mut $qb = ud_qp(&$pb, &$cqb, QKEY);
        let $ah = $pa
            .create_ah(1, &AddressVector::new(gb.gid, gb.mac, 0))
            .unwrap();
        let $ma = $pa.alloc_mr(BUF, A::LOCAL_WRITE).unwrap();
        let $mb = $pb.alloc_mr(BUF, A::LOCAL_WRITE).unwrap();
        $body
    }};
}

#[test]
fn qkey_mismatch_is_dropped_and_counted() {
    ud_pair!(|net, pa, pb, qa, qb, cqa, cqb, ah, ma, mb| {
        let nb = qb.qp_num();
        qb.post_recv(&[RecvWr::new(1, &[mb.sge(0, 2048).unwrap()])])
            .unwrap();
        ma.write(0, b"wrong key");
        let sg = [ma.sge(0, 9).unwrap()];
        qa.post_send(&[SendWr::send(1, &sg).ud(&ah, nb, QKEY ^ 1).signaled()])
            .unwrap();
        // The sender completes as soon as the packet left; the receiver sees nothing.
        assert!(poll_n(&net, &mut cqa, 1)[0].is_ok());
        assert_quiet(&net, &mut cqb);
        assert_eq!(net.b.stats().data_path.rx_bad_qkey, 1);
        // The right key reaches the same receive request: the QP is unharmed.
        qa.post_send(&[SendWr::send(2, &sg).ud(&ah, nb, QKEY).signaled()])
            .unwrap();
        assert!(poll_n(&net, &mut cqa, 1)[0].is_ok());
        let r = poll_n(&net, &mut cqb, 1)[0];
        assert_eq!((r.status, r.wr_id, r.byte_len), (WcStatus::Success, 1, 49));
        // A controlled Q_Key (high bit set) sends the sender QP's own Q_Key instead.
        qb.post_recv(&[RecvWr::new(3, &[mb.sge(0, 2048).unwrap()])])
            .unwrap();
        qa.post_send(&[SendWr::send(3, &sg).ud(&ah, nb, 0x8000_0000).signaled()])
            .unwrap();
        assert!(poll_n(&net, &mut cqa, 1)[0].is_ok());
        let r = poll_n(&net, &mut cqb, 1)[0];
        assert_eq!((r.status, r.wr_id), (WcStatus::Success, 3), "{r:?}");
        assert_eq!(net.b.stats().data_path.rx_bad_qkey, 1);
        let _ = (&pa, &pb);
    });
}

#[test]
fn message_longer_than_the_mtu_is_refused() {
    ud_pair!(|net, pa, pb, qa, qb, cqa, cqb, ah, ma, mb| {
        let nb = qb.qp_num();
        let big = [ma.sge(0, MTU as u32 + 1).unwrap()];
        let e = qa
            .post_send(&[SendWr::send(1, &big).ud(&ah, nb, QKEY).signaled()])
            .unwrap_err();
        assert_eq!(
            e,
            BadWr {
                index: 0,
                error: PostError::MessageTooLong {
                    len: MTU as u64 + 1,
                    max: MTU as u32
                }
            }
        );
        // Split across two entries: still one message.
        let two = [ma.sge(0, 600).unwrap(), ma.sge(600, 600).unwrap()];
        let e = qa
            .post_send(&[SendWr::send(2, &two).ud(&ah, nb, QKEY)])
            .unwrap_err();
        assert!(
            matches!(e.error, PostError::MessageTooLong { len: 1200, .. }),
            "{e:?}"
        );
        // Exactly the MTU goes, and a UD send needs its address.
        let full = [ma.sge(0, MTU as u32).unwrap()];
        let e = qa.post_send(&[SendWr::send(3, &full)]).unwrap_err();
        assert_eq!(e.error, PostError::AddressMismatch);
        qb.post_recv(&[RecvWr::new(4, &[mb.sge(0, (GRH + MTU) as u32).unwrap()])])
            .unwrap();
        qa.post_send(&[SendWr::send(4, &full).ud(&ah, nb, QKEY).signaled()])
            .unwrap();
        assert!(poll_n(&net, &mut cqa, 1)[0].is_ok());
        let r = poll_n(&net, &mut cqb, 1)[0];
        assert_eq!(
            (r.status, r.byte_len as usize),
            (WcStatus::Success, GRH + MTU)
        );
        assert_eq!(
            net.a.stats().data_path.tx_frames,
            1,
            "nothing else was sent"
        );
        let _ = (&pa, &pb);
    });
}

#[test]
fn receive_smaller_than_message_plus_grh_is_a_local_length_error() {
    ud_pair!(|net, pa, pb, qa, qb, cqa, cqb, ah, ma, mb| {
        let nb = qb.qp_num();
        // 100 bytes need 140; 139 are posted.
        qb.post_recv(&[RecvWr::new(7, &[mb.sge(0, 139).unwrap()])])
            .unwrap();
        qb.post_recv(&[RecvWr::new(8, &[mb.sge(1024, 1024).unwrap()])])
            .unwrap();
        let sg = [ma.sge(0, 100).unwrap()];
        qa.post_send(&[SendWr::send(1, &sg).ud(&ah, nb, QKEY).signaled()])
            .unwrap();
        // The requester does not know: success.
        let s = poll_n(&net, &mut cqa, 1)[0];
        assert_eq!(s.status, WcStatus::Success);
        let r = poll_n(&net, &mut cqb, 2);
        assert_eq!((r[0].wr_id, r[0].status), (7, WcStatus::LocLenErr), "{r:?}");
        // The error completion put the receiving QP in error: the rest is flushed.
        assert_eq!(
            (r[1].wr_id, r[1].status),
            (8, WcStatus::WrFlushErr),
            "{r:?}"
        );
        assert_eq!(qb.query().unwrap().state, QpState::Err);
        // The sender's QP is untouched.
        assert_eq!(qa.query().unwrap().state, QpState::Rts);
        let _ = (&pa, &pb);
    });
}

#[test]
fn unknown_qpn_and_missing_receive_are_dropped_and_counted() {
    ud_pair!(|net, pa, pb, qa, qb, cqa, cqb, ah, ma, mb| {
        let nb = qb.qp_num();
        let sg = [ma.sge(0, 10).unwrap()];
        // No receive posted: dropped silently (no RNR on UD).
        qa.post_send(&[SendWr::send(1, &sg).ud(&ah, nb, QKEY).signaled()])
            .unwrap();
        assert!(poll_n(&net, &mut cqa, 1)[0].is_ok());
        assert_quiet(&net, &mut cqb);
        let s = net.b.stats().data_path;
        assert_eq!((s.rx_no_recv_wqe, s.rnr_naks), (1, 0));
        // No such QP.
        qa.post_send(&[SendWr::send(2, &sg).ud(&ah, 0xab_cdef, QKEY).signaled()])
            .unwrap();
        assert!(poll_n(&net, &mut cqa, 1)[0].is_ok());
        assert_quiet(&net, &mut cqb);
        assert_eq!(net.b.stats().data_path.rx_no_qp, 1);
        // Unsignaled sends complete silently; a later signaled one reports.
        qb.post_recv(&[RecvWr::new(9, &[mb.sge(0, 1024).unwrap()])])
            .unwrap();
        qa.post_send(&[
            SendWr::send(3, &sg).ud(&ah, 0xab_cdef, QKEY),
            SendWr::send(4, &sg).ud(&ah, nb, QKEY).signaled(),
        ])
        .unwrap();
        let s = poll_n(&net, &mut cqa, 1)[0];
        assert_eq!((s.wr_id, s.status), (4, WcStatus::Success));
        let r = poll_n(&net, &mut cqb, 1)[0];
        assert_eq!((r.wr_id, r.src_qp), (9, qa.qp_num()));
        let _ = (&pa, &pb);
    });
}

#[test]
fn wrong_pkey_is_dropped_and_counted() {
    use ferroverbs_sim::wire::{bth, deth, ethernet, frame, ipv4, udp, Opcode, Psn, RoceRepr};
    ud_pair!(|net, pa, pb, qa, qb, cqa, cqb, ah, ma, mb| {
        let nb = qb.qp_num();
        qb.post_recv(&[RecvWr::new(1, &[mb.sge(0, 1024).unwrap()])])
            .unwrap();
        let ga = nic_gid(&net.a, 1);
        let gb = nic_gid(&net.b, 2);
        let mk = |pkey: u16| {
            let mut b = bth::Repr::new(Opcode::UdSendOnly, nb, Psn::new(5));
            b.pkey = pkey;
            let mut roce = RoceRepr::new(b);
            roce.deth = Some(deth::Repr {
                qkey: QKEY,
                src_qp: qa.qp_num(),
            });
            let repr = frame::Repr {
                ethernet: ethernet::Repr {
                    src_addr: ethernet::Address(ga.mac),
                    dst_addr: ethernet::Address(gb.mac),
                    ethertype: ethernet::EtherType::IPV4,
                },
                ipv4: ipv4::Repr::rocev2([10, 0, 0, 1].into(), [10, 0, 0, 2].into()),
                udp: udp::Repr::rocev2(0xc001),
                roce,
            };
            let mut f = vec![0u8; repr.buffer_len(4)];
            let range = repr.emit_headers(4, &mut f).unwrap();
            f[range].copy_from_slice(b"pkey");
            frame::Frame::new_unchecked(&mut f[..]).fill_icrc();
            f
        };
        net.fabric.inject(&mk(0x1234));
        assert_quiet(&net, &mut cqb);
        assert_eq!(net.b.stats().data_path.rx_bad_pkey, 1);
        // The same frame with the default P_Key is received (a hand-built UD frame).
        net.fabric.inject(&mk(0xffff));
        let r = poll_n(&net, &mut cqb, 1)[0];
        assert_eq!(
            (r.status, r.byte_len, r.src_qp),
            (WcStatus::Success, 44, qa.qp_num())
        );
        let mut got = [0u8; 4];
        mb.read(GRH, &mut got);
        assert_eq!(&got, b"pkey");
        let _ = (&pa, &pb, &ah, &ma, &mut cqa);
    });
}

#[test]
fn ud_transitions_name_missing_and_unexpected_attributes() {
    let net = Net::new(false);
    let (ca, _) = open_nic(&net.a, 1);
    let pd = ca.alloc_pd().unwrap();
    let cq = ca.create_cq(16).unwrap();
    let mut qp = pd.create_qp(&QpInitAttr::ud(&cq, &cq, cap())).unwrap();
    let e = qp
        .modify(QpState::Init, &QpAttr::new().port(1).pkey_index(0))
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::MissingAttribute {
                transition: Transition::ResetToInit,
                attribute: Attribute::Qkey
            }
        ),
        "{e}"
    );
    // RC's access flags are not a UD attribute.
    let e = qp
        .modify(
            QpState::Init,
            &QpAttr::new()
                .port(1)
                .pkey_index(0)
                .qkey(QKEY)
                .access(A::REMOTE_WRITE),
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::UnexpectedAttribute {
                attribute: Attribute::AccessFlags,
                ..
            }
        ),
        "{e}"
    );
    qp.to_init_ud(&UdInitAttr::new(1, QKEY)).unwrap();
    // Posting sends before RTS is refused.
    qp.to_rtr_ud().unwrap();
    let e = qp.modify(QpState::Rts, &QpAttr::new()).unwrap_err();
    assert!(
        matches!(
            e,
            Error::MissingAttribute {
                transition: Transition::RtrToRts,
                attribute: Attribute::SqPsn
            }
        ),
        "{e}"
    );
    // The Q_Key may change on the way.
    qp.modify(QpState::Rts, &QpAttr::new().sq_psn(1).qkey(7))
        .unwrap();
    let info = qp.query().unwrap();
    assert_eq!((info.state, info.sq_psn, info.qkey), (QpState::Rts, 1, 7));
    // An RC QP still refuses the Q_Key.
    let mut rc = pd.create_qp(&QpInitAttr::new(&cq, &cq, cap())).unwrap();
    let e = rc
        .modify(
            QpState::Init,
            &QpAttr::new()
                .port(1)
                .pkey_index(0)
                .access(A::empty())
                .qkey(1),
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::UnexpectedAttribute {
                attribute: Attribute::Qkey,
                ..
            }
        ),
        "{e}"
    );
    // An address handle needs a GID table entry.
    let e = pd
        .create_ah(1, &AddressVector::new([1; 16], [2; 6], 9))
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    drop((qp, rc));
}
