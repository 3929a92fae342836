//! UD traffic over the UDP link (real sockets on 127.0.x.y) between two threaded
//! simulated NICs: the application only posts and polls; every datagram's payload,
//! its GRH area (IPv4 addresses of the sockets) and the completion's source QPN are
//! checked, and a wrong Q_Key is dropped and counted by the receiving device.

#[path = "common/net.rs"]
mod net;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use ferroverbs::verbs::{
    AccessFlags as A, AddressVector, CompletionQueue, QpCap, QpInitAttr, RecvWr, SendWr,
    UdInitAttr, WcFlags, WcStatus, WorkCompletion,
};
use ferroverbs::{Context, Device, DeviceConfig, GidEntry};
use ferroverbs_sim::link::udp::{mac_for, UdpConfig, UdpLink};
use ferroverbs_sim::{Sim, SimBus};

const QKEY: u32 = 0x00dd_ba11;

struct Nic {
    sim: Sim,
    _link: UdpLink,
    gid: GidEntry,
}

fn nic(addr: Ipv4Addr) -> Nic {
    let cfg = UdpConfig::new(addr);
    let sim = Sim::new(cfg.sim_config(true));
    let link = UdpLink::attach(&sim, cfg).expect("bind");
    let gid = GidEntry::ipv4(0, addr.octets(), mac_for(addr));
    Nic {
        sim,
        _link: link,
        gid,
    }
}

fn open(n: &Nic) -> Context<SimBus> {
    let clock = n.sim.clock().clone();
    let cfg = DeviceConfig::default()
        .with_clock(std::sync::Arc::new(ferroverbs::SteppedClock::new(
            {
                let c = clock.clone();
                move || c.now()
            },
            move |d| clock.advance(d),
        )))
        .with_gid(n.gid);
    Device::open(n.sim.bus(), cfg).expect("bring-up")
}

fn wait(cq: &mut CompletionQueue<'_, SimBus>) -> WorkCompletion {
    let mut wc = [WorkCompletion::default(); 1];
    let start = Instant::now();
    loop {
        if cq.poll(&mut wc) == 1 {
            return wc[0];
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no completion");
        std::thread::yield_now();
    }
}

#[test]
fn ud_over_the_udp_link() {
    let (ia, ib) = (net::host(1), net::host(2));
    let (a, b) = (nic(ia), nic(ib));
    let (ca, cb) = (open(&a), open(&b));
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut cqa = ca.create_cq(64).unwrap();
    let mut cqb = cb.create_cq(64).unwrap();
    let mut qa = pa
        .create_qp(&QpInitAttr::ud(&cqa, &cqa, QpCap::default()))
        .unwrap();
    let mut qb = pb
        .create_qp(&QpInitAttr::ud(&cqb, &cqb, QpCap::default()))
        .unwrap();
    for q in [&mut qa, &mut qb] {
        q.to_init_ud(&UdInitAttr::new(1, QKEY)).unwrap();
        q.to_rtr_ud().unwrap();
        q.to_rts_ud(0).unwrap();
    }
    let ah = pa
        .create_ah(1, &AddressVector::new(b.gid.gid, b.gid.mac, 0))
        .unwrap();
    let la = pa.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let lb = pb.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    for i in 0..50u32 {
        let n = [0usize, 1, 17, 512, 1024][i as usize % 5];
        let data: Vec<u8> = (0..n).map(|k| (k as u32 * 7 + i) as u8).collect();
        la.write(0, &data);
        qb.post_recv(&[RecvWr::new(u64::from(i), &[lb.sge(0, 1064).unwrap()])])
            .unwrap();
        let sg = if n == 0 {
            vec![]
        } else {
            vec![la.sge(0, n as u32).unwrap()]
        };
        let wr = if i % 2 == 0 {
            SendWr::send(u64::from(i), &sg)
        } else {
            SendWr::send_with_imm(u64::from(i), &sg, i)
        };
        qa.post_send(&[wr.ud(&ah, qb.qp_num(), QKEY).signaled()])
            .unwrap();
        assert_eq!(wait(&mut cqa).status, WcStatus::Success);
        let r = wait(&mut cqb);
        assert_eq!(r.status, WcStatus::Success, "{r:?}");
        assert_eq!(
            (r.wr_id, r.byte_len as usize, r.src_qp),
            (u64::from(i), 40 + n, qa.qp_num())
        );
        assert!(r.wc_flags.contains(WcFlags::GRH));
        if i % 2 == 1 {
            assert_eq!(r.imm_data, i);
        }
        let mut buf = vec![0u8; 40 + n];
        lb.read(0, &mut buf);
        assert_eq!(&buf[..20], &[0u8; 20][..]);
        assert_eq!(buf[20], 0x45);
        assert_eq!(&buf[32..36], &ia.octets(), "source address in the GRH");
        assert_eq!(&buf[36..40], &ib.octets(), "destination address in the GRH");
        assert_eq!(&buf[40..], &data[..]);
    }
    // A wrong Q_Key: sent, dropped and counted by the receiver.
    qb.post_recv(&[RecvWr::new(99, &[lb.sge(0, 1064).unwrap()])])
        .unwrap();
    let sg = [la.sge(0, 8).unwrap()];
    qa.post_send(&[SendWr::send(99, &sg)
        .ud(&ah, qb.qp_num(), QKEY + 1)
        .signaled()])
        .unwrap();
    assert_eq!(wait(&mut cqa).status, WcStatus::Success);
    let start = Instant::now();
    while b.sim.stats().data_path.rx_bad_qkey == 0 {
        assert!(start.elapsed() < Duration::from_secs(20), "never dropped");
        std::thread::yield_now();
    }
    let mut wc = [WorkCompletion::default(); 1];
    assert_eq!(cqb.poll(&mut wc), 0);
}
