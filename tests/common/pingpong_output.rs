//! Checks of what rdma-core's example programs print, shared by the runs on the uAPI
//! layer (`tests/uapi_tools.rs`) and on the drop-in (`ibverbs/tests/tools.rs`).
//! Included with `#[path]`.

/// The receive-completion clock figures `ibv_rc_pingpong -t` prints (rdma-core
/// `libibverbs/examples/rc_pingpong.c`: the deltas of successive receive CQE
/// timestamps, `ibv_wc_read_completion_ts`, in device clock cycles), checked against
/// its own wall-clock time per iteration: each iteration completes one receive, so
/// the average delta is about `usec/iter` times the device clock (156.25 MHz,
/// `device_frequency_khz` as `hca_core_clock`). Timestamps that did not move (or did
/// not come from the CQE) give a minimum of 0.
pub fn check_completion_clock(out: &str) {
    let figure = |label: &str| -> f64 {
        let l = out
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no {label:?} in:\n{out}"));
        l.rsplit(' ').next().unwrap().trim().parse().unwrap()
    };
    let max = figure("Max receive completion clock cycles =");
    let min = figure("Min receive completion clock cycles =");
    let avg = figure("Average receive completion clock cycles =");
    assert!(min > 0.0 && min <= avg && avg <= max, "{out}");
    let usec_per_iter: f64 = out
        .lines()
        .find(|l| l.contains(" iters in ") && l.ends_with("usec/iter"))
        .and_then(|l| l.split(" = ").nth(1))
        .and_then(|v| v.trim_end_matches(" usec/iter").parse().ok())
        .unwrap_or_else(|| panic!("no usec/iter in:\n{out}"));
    let cycles_per_iter = usec_per_iter * 156.25;
    assert!(
        avg > 0.5 * cycles_per_iter && avg < 2.0 * cycles_per_iter,
        "average {avg} cycles vs {usec_per_iter} usec/iter at 156.25 MHz:\n{out}"
    );
}
