//! Instruction-count harness of the verbs fast path (run under valgrind by
//! `benches/icount.sh`; `docs/performance.md` has the method and the numbers).
//!
//! `fastpath_icount <case> <iterations>` runs one case over `MemBus` with the harness
//! playing the device (`verbs::fastpath`). Each measured operation is one call of an
//! `icount_*` function (never inlined), so callgrind's `--toggle-collect=*icount_*`
//! counts exactly the operation (plus a call and a return) and nothing of the device
//! emulation around it. Cases:
//!
//! * `inline`: `post_send` of one signaled 64-byte inline SEND with its doorbell
//!   (BlueFlame);
//! * `inline_db`: the same on a QP without BlueFlame (`MLX5_SHUT_UP_BF`): the 8-byte
//!   doorbell;
//! * `send`: `post_send` of one signaled one-SGE SEND (BlueFlame, 64 bytes);
//! * `send_db`: the same with the 8-byte doorbell;
//! * `list16`: `post_send` of a list of 16 one-SGE SENDs with one doorbell;
//! * `recv`: `post_recv` of one one-SGE receive request (doorbell record only);
//! * `poll`: `poll` of one CQE into a one-entry array;
//! * `poll16`: `poll` of 16 CQEs (of 16 signaled SENDs) into a 16-entry array;
//! * `empty`: `poll` of an empty CQ.
//!
//! The typed entries ([`SendBatch`](ferroverbs::verbs::SendBatch) and
//! `CompletionQueue::poll_one`), same requests:
//!
//! * `t_inline`, `t_inline_db`: `qp.post()`, `send_inline` of 64 bytes (signaled),
//!   `ring()` (BlueFlame; 8-byte doorbell);
//! * `t_send`, `t_send_db`: the same with one gather entry;
//! * `t_list16`: one batch of 16 `send`s (the last signaled), one doorbell;
//! * `o_inline`, `o_inline_db`, `o_send`, `o_send_db`: the one-request entries
//!   `qp.send_inline(...)` / `qp.send(...)` (a batch of one, rung), same requests;
//! * `t_poll`: `poll_one` taking one CQE;
//! * `t_empty`: `poll_one` of an empty CQ.
//!
//! Receive completions: `rpoll`, `poll` of one received SEND's CQE into a one-entry
//! array (the receive posted before, not measured).
//!
//! CQs of 128-byte CQEs: `poll128`, `empty128`, `t_poll128`, `t_empty128` and
//! `rpoll128` are the cases without the suffix on a CQ of 128-byte CQEs.
use std::hint::black_box;
use std::sync::Arc;

use ferroverbs::verbs::fastpath::{DetachedCq, DetachedQp};
use ferroverbs::verbs::{
    BadWr, CqeSize, PostError, QpCap, QpState, RecvWr, SendFlags, SendWr, Sge, WorkCompletion,
};
use ferroverbs_hw::datapath::wqe::MLX5_OPCODE_SEND;
use ferroverbs_hw::MemBus;

/// The caller passes `wrs` through `black_box` (not measured), as for the typed
/// entries; an error goes to [`failed_wr`] (never in these cases), so that the
/// result is tested as `?` would test it.
#[inline(never)]
fn icount_post_send(qp: &mut DetachedQp<MemBus>, wrs: &[SendWr<'_>]) {
    if let Err(e) = qp.post_send(wrs) {
        failed_wr(&e);
    }
}

#[inline(never)]
fn icount_post_recv(qp: &mut DetachedQp<MemBus>, wrs: &[RecvWr<'_>]) {
    let r = qp.post_recv(black_box(wrs));
    debug_assert!(r.is_ok());
    black_box(r).ok();
}

/// A typed post failed (never in these cases): out of line, so that the measured
/// functions only test the result, as `?` would. `extern "C"`: it cannot unwind (a
/// panic in it aborts), so the measured functions need no unwinding path for it.
#[cold]
#[inline(never)]
extern "C" fn failed(e: &PostError) -> ! {
    panic!("post failed: {e}")
}

/// A `post_send` failed (never in these cases), as [`failed`].
#[cold]
#[inline(never)]
extern "C" fn failed_wr(e: &BadWr) -> ! {
    panic!("post_send failed: {e}")
}

#[inline(never)]
fn icount_post_typed_inline(qp: &mut DetachedQp<MemBus>, wr_id: u64, data: &[u8]) {
    let Ok(mut b) = qp.post() else { return };
    if let Err(e) = b.send_inline(wr_id, data, SendFlags::SIGNALED) {
        failed(&e);
    }
    b.ring();
}

#[inline(never)]
fn icount_post_typed_send(qp: &mut DetachedQp<MemBus>, wr_id: u64, sge: &Sge) {
    let Ok(mut b) = qp.post() else { return };
    if let Err(e) = b.send(wr_id, sge, SendFlags::SIGNALED) {
        failed(&e);
    }
    b.ring();
}

#[inline(never)]
fn icount_post_one_inline(qp: &mut DetachedQp<MemBus>, wr_id: u64, data: &[u8]) {
    if let Err(e) = qp.send_inline(wr_id, data, SendFlags::SIGNALED) {
        failed(&e);
    }
}

#[inline(never)]
fn icount_post_one_send(qp: &mut DetachedQp<MemBus>, wr_id: u64, sge: &Sge) {
    if let Err(e) = qp.send(wr_id, sge, SendFlags::SIGNALED) {
        failed(&e);
    }
}

#[inline(never)]
fn icount_post_typed_list(qp: &mut DetachedQp<MemBus>, sges: &[Sge; 16]) {
    let Ok(mut b) = qp.post() else { return };
    // Fifteen unsignaled SENDs, then a signaled one (the flags are the application's
    // constants, not chosen per iteration).
    let (first, last) = sges.split_at(15);
    for (i, sge) in first.iter().enumerate() {
        if let Err(e) = b.send(i as u64, sge, SendFlags::NONE) {
            failed(&e);
        }
    }
    if let Err(e) = b.send(15, &last[0], SendFlags::SIGNALED) {
        failed(&e);
    }
    b.ring();
}

#[inline(never)]
fn icount_take_one(cq: &mut DetachedCq<MemBus>) -> Option<WorkCompletion> {
    cq.poll_one()
}

/// The caller passes `wc` through `black_box` (not measured), as for the posts.
#[inline(never)]
fn icount_poll(cq: &mut DetachedCq<MemBus>, wc: &mut [WorkCompletion]) -> usize {
    cq.poll(wc)
}

/// One fast-path case run `iters` times, for `benches/icount.sh` (callgrind).
#[derive(clap::Parser)]
struct Args {
    /// The case (`inline`, `send_db`, `list16`, `poll`, ...).
    #[arg(default_value = "inline")]
    case: String,
    /// Iterations.
    #[arg(default_value_t = 100_000)]
    iters: u64,
}

fn main() {
    let Args { case: name, iters } = <Args as clap::Parser>::parse();
    let (case, size) = match name.strip_suffix("128") {
        Some(c) if matches!(c, "poll" | "empty" | "t_poll" | "t_empty" | "rpoll") => {
            (c.to_string(), CqeSize::Bytes128)
        }
        _ => (name.clone(), CqeSize::Bytes64),
    };

    let bus = Arc::new(MemBus::new(1 << 16));
    let cap = QpCap {
        max_send_wr: 256,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let mut cq = DetachedCq::with_cqe_size(&bus, 4095, size).expect("cq");
    let mut qp = if case.ends_with("_db") {
        DetachedQp::new_db_only(&bus, 0x77, &cap, false).expect("qp")
    } else {
        DetachedQp::new(&bus, 0x77, &cap, false).expect("qp")
    };
    cq.attach(&qp);
    qp.set_state(QpState::Rts);
    let mut wc = [WorkCompletion::default(); 16];
    let payload = [0x5au8; 64];
    let parts: [&[u8]; 1] = [&payload];
    let sge = [Sge {
        addr: 0x10_0000,
        length: 64,
        lkey: 0x1234,
    }];

    match case.as_str() {
        "inline" | "send" | "inline_db" | "send_db" => {
            let inline = [SendWr::send_inline(1, &parts).signaled()];
            let gather = [SendWr::send(1, &sge).signaled()];
            let wrs: &[SendWr<'_>] = if case.starts_with("inline") {
                &inline
            } else {
                &gather
            };
            for i in 0..iters {
                let idx = qp.next_send_index();
                icount_post_send(&mut qp, black_box(wrs));
                // Retire it as the device would, every time (not measured).
                cq.produce_send(0x77, idx, MLX5_OPCODE_SEND);
                let n = cq.poll(&mut wc);
                assert_eq!(n, 1, "iteration {i}");
            }
        }
        "list16" => {
            let list: Vec<SendWr<'_>> = (0..16)
                .map(|i| {
                    let w = SendWr::send(i, &sge);
                    if i == 15 {
                        w.signaled()
                    } else {
                        w
                    }
                })
                .collect();
            for _ in 0..iters {
                icount_post_send(&mut qp, black_box(&list));
                let last = qp.next_send_index().wrapping_sub(1);
                cq.produce_send(0x77, last, MLX5_OPCODE_SEND);
                assert_eq!(cq.poll(&mut wc), 1);
            }
        }
        "recv" => {
            let one = [RecvWr::new(1, &sge)];
            for _ in 0..iters {
                let idx = qp.next_recv_index();
                icount_post_recv(&mut qp, &one);
                // Retire it as the device would (not measured).
                cq.produce_recv(0x77, idx, 64);
                assert_eq!(cq.poll(&mut wc), 1);
            }
        }
        "poll" => {
            let one = [SendWr::send(1, &sge).signaled()];
            for _ in 0..iters {
                let idx = qp.next_send_index();
                qp.post_send(&one).expect("post");
                cq.produce_send(0x77, idx, MLX5_OPCODE_SEND);
                // A one-entry array: the cost of taking one CQE, without the
                // look at the next (empty) entry a larger array adds.
                let n = icount_poll(&mut cq, black_box(&mut wc[..1]));
                assert_eq!(n, 1);
            }
        }
        "poll16" => {
            let list: Vec<SendWr<'_>> = (0..16).map(|i| SendWr::send(i, &sge).signaled()).collect();
            for _ in 0..iters {
                let first = qp.next_send_index();
                qp.post_send(&list).expect("post");
                for k in 0..16 {
                    cq.produce_send(0x77, first.wrapping_add(k), MLX5_OPCODE_SEND);
                }
                let n = icount_poll(&mut cq, black_box(&mut wc));
                assert_eq!(n, 16);
                assert_eq!(wc[15].wr_id, 15);
            }
        }
        "empty" => {
            for _ in 0..iters {
                assert_eq!(icount_poll(&mut cq, black_box(&mut wc)), 0);
            }
        }
        "rpoll" => {
            let one = [RecvWr::new(9, &sge)];
            for _ in 0..iters {
                let idx = qp.next_recv_index();
                // Through the `recv` case's function (not measured here): a second
                // call site of `post_recv` would change how it is inlined there.
                icount_post_recv(&mut qp, &one);
                cq.produce_recv(0x77, idx, 64);
                let n = icount_poll(&mut cq, black_box(&mut wc[..1]));
                assert_eq!(n, 1);
                assert_eq!((wc[0].wr_id, wc[0].byte_len), (9, 64));
            }
        }
        "t_inline" | "t_send" | "t_inline_db" | "t_send_db" => {
            for i in 0..iters {
                let idx = qp.next_send_index();
                // The arguments through `black_box` here, in the caller (not measured):
                // the measured function cannot know the payload or its length.
                if case.starts_with("t_inline") {
                    icount_post_typed_inline(&mut qp, 1, black_box(&payload[..]));
                } else {
                    icount_post_typed_send(&mut qp, 1, black_box(&sge[0]));
                }
                cq.produce_send(0x77, idx, MLX5_OPCODE_SEND);
                let n = cq.poll(&mut wc);
                assert_eq!(n, 1, "iteration {i}");
                assert_eq!(wc[0].wr_id, 1);
            }
        }
        "o_inline" | "o_send" | "o_inline_db" | "o_send_db" => {
            for i in 0..iters {
                let idx = qp.next_send_index();
                if case.starts_with("o_inline") {
                    icount_post_one_inline(&mut qp, 1, black_box(&payload[..]));
                } else {
                    icount_post_one_send(&mut qp, 1, black_box(&sge[0]));
                }
                cq.produce_send(0x77, idx, MLX5_OPCODE_SEND);
                let n = cq.poll(&mut wc);
                assert_eq!(n, 1, "iteration {i}");
                assert_eq!(wc[0].wr_id, 1);
            }
        }
        "t_list16" => {
            let sges = [sge[0]; 16];
            for _ in 0..iters {
                icount_post_typed_list(&mut qp, black_box(&sges));
                let last = qp.next_send_index().wrapping_sub(1);
                cq.produce_send(0x77, last, MLX5_OPCODE_SEND);
                assert_eq!(cq.poll(&mut wc), 1);
                assert_eq!(wc[0].wr_id, 15);
            }
        }
        "t_poll" => {
            let one = [SendWr::send(1, &sge).signaled()];
            for _ in 0..iters {
                let idx = qp.next_send_index();
                qp.post_send(&one).expect("post");
                cq.produce_send(0x77, idx, MLX5_OPCODE_SEND);
                let got = icount_take_one(&mut cq).expect("a completion");
                assert_eq!(got.wr_id, 1);
            }
        }
        "t_empty" => {
            for _ in 0..iters {
                assert!(icount_take_one(&mut cq).is_none());
            }
        }
        other => {
            eprintln!(
                "unknown case {other}: inline, inline_db, send, send_db, list16, recv, poll, \
                 poll16, empty, rpoll, t_inline, t_inline_db, t_send, t_send_db, t_list16, t_poll, \
                 t_empty, o_inline, o_inline_db, o_send, o_send_db; poll128, empty128, t_poll128, \
                 t_empty128, rpoll128"
            );
            std::process::exit(2);
        }
    }
    println!("{name} {iters}");
}
