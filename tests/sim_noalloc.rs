//! The simulator's packet path allocates nothing in steady state: a counting global
//! allocator watches whole rounds of RC traffic between two simulated NICs on an
//! in-process fabric in deterministic mode, the posts, the doorbells (serviced on the
//! posting thread: WQE fetch, packet building), the fabric's forwarding, the
//! receiving device's parsing, ICRC check, responder, ACKs, the completer and both
//! CQs, and the polls. Frame buffers come from the fabric's pool and go back to it;
//! every per-QP list keeps its capacity. Counting is per thread and only switched on
//! around the measured rounds (after a warm-up that fills the pool).

mod counting_alloc;
use counting_alloc::allocations;
use ferroverbs::verbs::{
    AccessFlags as A, Mtu, QpCap, QpInitAttr, RecvWr, RemoteAddr, SendWr, WcOpcode, WcStatus,
    WorkCompletion,
};

mod verbs_support;
use verbs_support::{connect, two_nics};

#[global_allocator]
static ALLOC: counting_alloc::Counting = counting_alloc::Counting;

#[test]
fn rc_traffic_through_the_simulator_allocates_nothing_in_steady_state() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let (mut cqa, mut cqb) = (ca.create_cq(255).unwrap(), cb.create_cq(255).unwrap());
    let cap = QpCap {
        max_send_wr: 128,
        max_recv_wr: 128,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let mut qa = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap)).unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap)).unwrap();
    connect(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024);
    let all = A::LOCAL_WRITE | A::REMOTE_READ | A::REMOTE_WRITE | A::REMOTE_ATOMIC;
    const BIG: usize = 5000; // 5 packets at PMTU 1024
    let ra = pa.alloc_mr(2 * BIG, all).unwrap();
    let rb = pb.alloc_mr(64 * 64 + 2 * BIG, all).unwrap();
    let payload = [0x5au8; 64];
    let parts: [&[u8]; 1] = [&payload];
    // 64 inline SENDs (the last signaled) into 64 receives.
    let rsg: Vec<_> = (0..64).map(|i| [rb.sge(i * 64, 64).unwrap()]).collect();
    let recvs: Vec<RecvWr<'_>> = rsg.iter().map(|s| RecvWr::new(7, s)).collect();
    let sends: Vec<SendWr<'_>> = (0..64)
        .map(|i| {
            let w = SendWr::send_inline(i, &parts);
            if i == 63 {
                w.signaled()
            } else {
                w
            }
        })
        .collect();
    // A multi-packet RDMA WRITE, a multi-packet RDMA READ and an atomic.
    let far = |off: usize| RemoteAddr {
        addr: rb.addr() + off as u64,
        rkey: rb.rkey(),
    };
    let wsg = [ra.sge(0, BIG as u32).unwrap()];
    let rdsg = [ra.sge(BIG, BIG as u32).unwrap()];
    let asg = [ra.sge(0, 8).unwrap()];
    let rdma = [
        SendWr::rdma_write(100, &wsg, far(64 * 64)).signaled(),
        SendWr::rdma_read(101, &rdsg, far(64 * 64 + BIG)).signaled(),
        SendWr::atomic_fetch_add(102, &asg, far(64 * 64), 1).signaled(),
    ];
    let mut wc = [WorkCompletion::default(); 128];
    let mut round = || {
        qb.post_recv(&recvs).unwrap();
        qa.post_send(&sends).unwrap();
        qa.post_send(&rdma).unwrap();
        let (mut rx, mut tx) = (0, 0);
        while rx < 64 || tx < 4 {
            net.fabric.run_until_idle();
            let n = cqb.poll(&mut wc);
            for c in &wc[..n] {
                assert_eq!((c.status, c.opcode), (WcStatus::Success, WcOpcode::Recv));
            }
            rx += n;
            let n = cqa.poll(&mut wc);
            assert!(wc[..n].iter().all(|c| c.status == WcStatus::Success));
            tx += n;
        }
        assert_eq!((rx, tx), (64, 4));
    };
    for _ in 0..50 {
        round();
    }
    let n = allocations(|| {
        for _ in 0..200 {
            round();
        }
    });
    assert_eq!(n, 0, "allocator calls in 200 rounds of RC traffic");
    // The rounds did go through the fabric (64 SENDs, 5+5 data packets, ACKs).
    assert!(net.fabric.stats().forwarded > 250 * 64);
}
