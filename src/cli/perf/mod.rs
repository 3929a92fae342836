//! `ferroverbs perf`: perftest's tests (`ib_send_lat`, `ib_write_bw`, ...) with its
//! options, its statistics and its output layout.
//!
//! * [`config`]: the options, perftest's defaults and its checks,
//! * [`stats`]: latency and bandwidth figures as perftest computes them,
//! * [`report`]: perftest's headers, columns and lines,
//! * [`histogram`]: the table of `--report-histogram`,
//! * [`progress`]: progress lines on long runs,
//! * [`runner`]: the measurements, on two simulated NICs (or two QPs of one device).

pub mod config;
pub mod histogram;
pub mod progress;
pub mod report;
pub mod runner;
pub mod stats;

use config::{PerfConfig, Role};

use super::error::CliError;

/// Runs a validated test.
pub fn run(cfg: &PerfConfig) -> Result<(), CliError> {
    match &cfg.role {
        Role::Local => {}
        Role::Server { .. } => {
            return Err(CliError::unsupported(
                "--server (the cross-process test)",
                "it needs the UDP link between processes, which is not built yet; run both \
                 sides in this process by leaving out --server/--client",
            ))
        }
        Role::Client { host, .. } => {
            return Err(CliError::unsupported(
                format!("--client {host} (the cross-process test)"),
                "it needs the UDP link between processes, which is not built yet; run both \
                 sides in this process by leaving out --server/--client",
            ))
        }
    }
    if cfg.events {
        return Err(CliError::unsupported(
            "-e/--events (completions by event)",
            "it needs completion events (CQ event channels), which the driver does not \
             offer yet; leave out -e to poll",
        ));
    }
    if let Some(cpu) = cfg.cpu {
        super::affinity::pin_current_thread(cpu).map_err(|e| {
            CliError::setup(format!("cannot pin the polling thread to CPU {cpu}"), e)
        })?;
    }
    runner::run(cfg)
}
