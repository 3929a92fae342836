//! `ferroverbs perf`: perftest's tests (`ib_send_lat`, `ib_write_bw`, ...) with its
//! options, its statistics and its output layout.
//!
//! * [`baseline`]: the same-run baselines of `--baseline`,
//! * [`config`]: the options, perftest's defaults and its checks,
//! * [`stats`]: latency and bandwidth figures as perftest computes them,
//! * [`report`]: perftest's headers, columns and lines,
//! * [`events`]: `-e`, completions by event,
//! * [`histogram`]: the table of `--report-histogram`,
//! * [`progress`]: progress lines on long runs,
//! * [`runner`]: the measurements, on two simulated NICs (or two QPs of one device),
//! * [`remote`]: the cross-process tests (`--server`, `--client`) over the UDP link.

pub mod baseline;
pub mod config;
pub mod events;
pub mod histogram;
pub mod progress;
pub mod remote;
pub mod report;
pub mod runner;
pub mod stats;

use config::{PerfConfig, Role};

use super::error::CliError;

/// Runs a validated test.
pub fn run(cfg: &PerfConfig) -> Result<(), CliError> {
    if let Some(cpu) = cfg.cpu {
        super::affinity::pin_current_thread(cpu).map_err(|e| {
            CliError::setup(format!("cannot pin the polling thread to CPU {cpu}"), e)
        })?;
    }
    match &cfg.role {
        Role::Local => runner::run(cfg),
        Role::Server { .. } | Role::Client { .. } => remote::run(cfg),
    }
}
