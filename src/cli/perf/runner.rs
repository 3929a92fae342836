//! The measurements. They need the verbs data path (PD, MR, CQ, QP, post and poll) and
//! the simulator's fabric.

use ferroverbs::DeviceSpec;

use super::config::PerfConfig;
use crate::cli::device::open_vfio;
use crate::cli::error::CliError;

/// Runs the test.
pub fn run(cfg: &PerfConfig) -> Result<(), CliError> {
    if let DeviceSpec::Vfio(bdf) = cfg.device {
        let nic = open_vfio(&bdf)?;
        drop(nic);
    }
    Err(CliError::unsupported(
        format!("perf {}", cfg.test.name()),
        "it needs the verbs data path on the simulator (PD, MR, CQ, QP and the fabric)",
    ))
}
