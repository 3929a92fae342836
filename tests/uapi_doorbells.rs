//! How libmlx5's doorbells reach the simulated device under `ferroverbs run`
//! (`uapi/src/mmio_trap.rs`, `uapi/src/doorbell.rs`): a busy-polling program's
//! doorbells become plain stores to a hot UAR page after the first few (forwarded by
//! the poll wrapper, no fault per post), while a program that waits for completion
//! events keeps every doorbell trapped (forwarded at once, before it blocks). Counted
//! by each process's `FERROVERBS_DOORBELL_STATS` line.

mod uapi_support;

use std::time::Duration;

use uapi_support::have;

const LIMIT: Duration = Duration::from_secs(300);

/// The counts of the stats file at `path`: one `[trapped, forwarded, hot, polls]`
/// per process that wrote one.
fn stats(path: &std::path::Path) -> Vec<[u64; 4]> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(w.len(), 9, "stats line {l:?}");
            let n = |i: usize| w[i].parse::<u64>().unwrap_or_else(|_| panic!("{l:?}"));
            [n(2), n(4), n(6), n(8)]
        })
        .collect()
}

/// Runs `ib_send_lat` with `extra` between two processes with the stats file set;
/// the counts of both.
fn send_lat(extra: &[&str], iters: u64, slot: u16, hosts: (u8, u8)) -> Vec<[u64; 4]> {
    let dir = std::env::temp_dir().join(format!(
        "ferroverbs-doorbells-{}-{slot}",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&dir);
    let path = dir.to_string_lossy().into_owned();
    let n = iters.to_string();
    let mut args = vec!["-n", &n];
    args.extend_from_slice(extra);
    let envs = [("FERROVERBS_DOORBELL_STATS", path.as_str())];
    let (_, c) = uapi_support::pair("ib_send_lat", &args, &envs, hosts.0, hosts.1, slot, LIMIT);
    assert!(
        c.lines()
            .any(|l| l.split_whitespace().take(2).eq(["2", n.as_str()])),
        "no result line of {iters} iterations:\n{c}"
    );
    let s = stats(&dir);
    let _ = std::fs::remove_file(&dir);
    assert_eq!(s.len(), 2, "one stats line per process: {s:?}");
    s
}

/// Busy polling: each side posts `iters` sends (a doorbell each), and all but the
/// first few are plain stores to a page gone hot, forwarded from memory: far fewer
/// traps than doorbells, and every doorbell forwarded.
#[test]
fn busy_polling_rings_without_a_fault_per_post() {
    if !have("ib_send_lat") {
        return;
    }
    let iters = 2000;
    for [trapped, forwarded, hot, polls] in send_lat(&[], iters, 0, (101, 102)) {
        assert!(
            hot >= 1,
            "a page went hot: {trapped} {forwarded} {hot} {polls}"
        );
        assert!(
            trapped < iters / 10,
            "{trapped} traps for {iters} posts (forwarded {forwarded})"
        );
        assert!(
            forwarded >= iters,
            "{forwarded} doorbells forwarded for {iters} posts"
        );
        assert!(polls > 0, "empty polls assisted: {polls}");
    }
}

/// Completion events (`-e`): the program arms its CQ and blocks after each post, so
/// no page goes hot and every doorbell is trapped and forwarded at once.
#[test]
fn completion_events_keep_every_doorbell_trapped() {
    if !have("ib_send_lat") {
        return;
    }
    let iters = 300;
    for [trapped, forwarded, hot, _] in send_lat(&["-e"], iters, 1, (103, 104)) {
        assert_eq!(hot, 0, "no page goes hot with events ({trapped} trapped)");
        assert!(trapped >= iters, "{trapped} traps for {iters} posts");
        assert!(
            forwarded >= trapped,
            "{forwarded} forwarded, {trapped} trapped"
        );
    }
}
