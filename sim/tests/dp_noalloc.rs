//! The simulator's packet path allocates nothing in steady state: after a warm-up, a
//! thousand rounds of SEND, RDMA WRITE, RDMA READ (several packets) and an atomic
//! between two devices (doorbells, segmentation, ICRC, fabric, responder, ACKs, CQEs)
//! are run under a counting allocator and must not allocate once.

mod common;
mod dp;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use dp::*;
use ferroverbs_hw::datapath::cqe::MLX5_CQE_REQ;
use ferroverbs_hw::datapath::{dbr, uar};
use ferroverbs_hw::Bus;

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract is passed through.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Writes a pre-built WQE at the producer index and rings, without allocating.
fn post(n: &Node, qp: &mut Qp, wqe: &[u8]) {
    let mem = &n.h.mapped[qp.m].mem;
    let idx = qp.sq_pi as u16;
    let bbs = wqe.len().div_ceil(64) as u32;
    for k in 0..bbs {
        let slot = (qp.sq_pi.wrapping_add(k) & (qp.sq_size - 1)) as usize;
        let chunk = &wqe[k as usize * 64..((k as usize + 1) * 64).min(wqe.len())];
        mem.write(qp.sq_off + slot * 64, chunk);
    }
    let at = qp.sq_off + (qp.sq_pi & (qp.sq_size - 1)) as usize * 64;
    mem.write(at + 1, &idx.to_be_bytes());
    qp.sq_pi = qp.sq_pi.wrapping_add(bbs);
    n.h.bus.wmb();
    mem.write(qp.dbr_off + 4, &dbr::sq_counter(qp.sq_pi).to_be_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&wqe[..8]);
    first[1..3].copy_from_slice(&idx.to_be_bytes());
    n.h.bus.write64(
        uar::uar_bar_offset(qp.uar) + uar::MLX5_BF_OFFSET,
        u64::from_be_bytes(first),
    );
}

/// Posts a one-entry receive without allocating.
fn post_recv(n: &Node, qp: &mut Qp, seg: &[u8; 32]) {
    let mem = &n.h.mapped[qp.m].mem;
    let slot = (qp.rq_pi & (qp.rq_size - 1)) as usize;
    mem.write(slot * qp.rq_stride, seg);
    qp.rq_pi = qp.rq_pi.wrapping_add(1);
    n.h.bus.wmb();
    mem.write(qp.dbr_off, &dbr::rq_counter(qp.rq_pi).to_be_bytes());
}

#[test]
fn steady_state_packet_path_allocates_nothing() {
    let mut p = Pair::deterministic(Conn::default());
    let qpn = p.qa.qpn;
    let a = p.a.reg_mr(8192, ALL);
    let b = p.b.reg_mr(8192, ALL);
    let send = send_wqe(qpn, &[sge(&a, 0, 64)], Some(5), SIG);
    let write = rdma_wqe(
        qpn,
        false,
        b.va + 1024,
        b.key,
        &[sge(&a, 0, 3000)],
        None,
        SIG,
    );
    let read = rdma_wqe(qpn, true, b.va, b.key, &[sge(&a, 4096, 4000)], None, SIG);
    let fa = atomic_wqe(qpn, b.va + 8000, b.key, sge(&a, 8100, 8), 1, None, SIG);
    let mut recv = [0u8; 32];
    recv[..16].copy_from_slice(&{
        let mut v = [0u8; 16];
        v[0..4].copy_from_slice(&64u32.to_be_bytes());
        v[4..8].copy_from_slice(&b.key.to_be_bytes());
        v[8..16].copy_from_slice(&b.va.to_be_bytes());
        v
    });
    recv[16..32].copy_from_slice(&{
        let mut v = [0u8; 16];
        v[4..8].copy_from_slice(&0x100u32.to_be_bytes());
        v
    });
    let round = |p: &mut Pair| {
        post_recv(&p.b, &mut p.qb, &recv);
        for w in [&send, &write, &read, &fa] {
            post(&p.a, &mut p.qa, w);
        }
        p.fabric.run_until_idle();
        for _ in 0..4 {
            let c = p.a.poll(&mut p.acq.0).expect("requester CQE");
            assert_eq!(c.opcode(), MLX5_CQE_REQ);
        }
        assert!(p.b.poll(&mut p.bcq.1).is_some());
    };
    for _ in 0..300 {
        round(&mut p);
    }
    let pool_before = p.fabric.pool().allocated();
    COUNTING.with(|c| c.set(true));
    for _ in 0..1000 {
        round(&mut p);
    }
    COUNTING.with(|c| c.set(false));
    let n = ALLOCS.load(Ordering::Relaxed);
    assert_eq!(n, 0, "allocations in steady state");
    assert_eq!(p.fabric.pool().allocated(), pool_before);
    let s = p.a.h.sim.stats().data_path;
    // SEND 1 packet, WRITE 3 (MTU 1024), READ request 1, atomic 1.
    assert_eq!(s.tx_frames, 1300 * 6, "{s:?}");
}
