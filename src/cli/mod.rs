//! The `ferroverbs` command-line tool (`src/bin/ferroverbs.rs` is its `main`).
//!
//! ```text
//! ferroverbs devinfo [-d DEV] [-i PORT] [-v]
//! ferroverbs perf {send,write,read,atomic}-{lat,bw} [perftest options] [--baseline]
//!     [--server [--bind ADDR] | --client HOST] [--ip ADDR] [-p PORT] [--udp-port PORT]
//! ferroverbs run [--device sim[:IPv4[:PORT]]] -- PROGRAM [ARGS]
//! ```
//!
//! The device is `sim` (the embedded simulator, the default) or `vfio:DDDD:BB:DD.F`.
//! Exit codes: [`EXIT_OK`] 0, [`EXIT_RUNTIME`] 1, [`EXIT_USAGE`] 2, [`EXIT_SETUP`] 3
//! (see [`args::EXIT_CODES_HELP`]).

pub mod affinity;
pub mod args;
pub mod device;
pub mod devinfo;
pub mod error;
pub mod perf;
pub mod run;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};

pub use error::{CliError, EXIT_OK, EXIT_RUNTIME, EXIT_SETUP, EXIT_USAGE};

use args::{Cli, Command};
use perf::config::{PerfConfig, UsageError};

/// Prints a usage error for `perf <test>` the way clap prints its own (with the
/// subcommand's usage line) and returns exit code 2.
fn usage_error(test: &str, e: &UsageError) -> ExitCode {
    let mut cmd = Cli::command();
    cmd.build();
    let err = match cmd
        .find_subcommand_mut("perf")
        .and_then(|p| p.find_subcommand_mut(test))
    {
        Some(sub) => sub.error(ErrorKind::ArgumentConflict, &e.0),
        None => cmd.error(ErrorKind::ArgumentConflict, &e.0),
    };
    let _ = err.print();
    ExitCode::from(EXIT_USAGE)
}

/// Runs the tool on `args` (the first is the program name) and returns its exit code.
pub fn main_with<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            // --help and --version are "errors" with exit code 0.
            let code = e.exit_code();
            let _ = e.print();
            return ExitCode::from(u8::try_from(code).unwrap_or(EXIT_USAGE));
        }
    };
    let result = match &cli.command {
        Command::Devinfo(a) => devinfo::run(a),
        Command::Run(a) => {
            return match run::run(a) {
                Ok(code) => code,
                Err(e) => e.report(),
            }
        }
        Command::Perf { test } => {
            let (id, a) = test.split();
            match PerfConfig::new(id, a) {
                Ok(cfg) => perf::run(&cfg),
                Err(e) => return usage_error(id.name(), &e),
            }
        }
    };
    match result {
        Ok(()) => ExitCode::from(EXIT_OK),
        Err(e) => e.report(),
    }
}
