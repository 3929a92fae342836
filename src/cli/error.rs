//! The tool's errors and exit codes.

use std::error::Error as StdError;
use std::fmt;
use std::process::ExitCode;

/// Success.
pub const EXIT_OK: u8 = 0;
/// A runtime failure: the test started and could not finish (an error completion, a
/// lost message, a report that could not be computed).
pub const EXIT_RUNTIME: u8 = 1;
/// A usage error: an unknown or malformed option, or a combination the test refuses
/// (clap's own exit code for usage errors).
pub const EXIT_USAGE: u8 = 2;
/// A device or setup error: the device cannot be opened or brought up, a resource
/// cannot be created, the CPU cannot be pinned, or the feature asked for is not
/// available yet.
pub const EXIT_SETUP: u8 = 3;

type Source = Box<dyn StdError + Send + Sync + 'static>;

/// Why a command failed (after its arguments were accepted).
#[derive(Debug)]
pub enum CliError {
    /// The device or the test's resources could not be set up (exit code 3).
    Setup {
        /// What was being done.
        context: String,
        /// Why it failed.
        source: Option<Source>,
    },
    /// A feature the command needs is not available yet (exit code 3).
    Unsupported {
        /// What was asked.
        what: String,
        /// What it needs.
        needs: String,
    },
    /// The test failed while running (exit code 1).
    Runtime {
        /// What was being done.
        context: String,
        /// Why it failed.
        source: Option<Source>,
    },
}

impl CliError {
    /// A setup error with a cause.
    pub fn setup(context: impl Into<String>, source: impl Into<Source>) -> Self {
        CliError::Setup {
            context: context.into(),
            source: Some(source.into()),
        }
    }

    /// A setup error without a cause.
    pub fn setup_msg(context: impl Into<String>) -> Self {
        CliError::Setup {
            context: context.into(),
            source: None,
        }
    }

    /// A runtime error with a cause.
    pub fn runtime(context: impl Into<String>, source: impl Into<Source>) -> Self {
        CliError::Runtime {
            context: context.into(),
            source: Some(source.into()),
        }
    }

    /// A runtime error without a cause.
    pub fn runtime_msg(context: impl Into<String>) -> Self {
        CliError::Runtime {
            context: context.into(),
            source: None,
        }
    }

    /// A feature that is not there yet.
    pub fn unsupported(what: impl Into<String>, needs: impl Into<String>) -> Self {
        CliError::Unsupported {
            what: what.into(),
            needs: needs.into(),
        }
    }

    /// The process exit code.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Setup { .. } | CliError::Unsupported { .. } => EXIT_SETUP,
            CliError::Runtime { .. } => EXIT_RUNTIME,
        }
    }

    /// Prints the error and its causes to standard error and returns the exit code.
    pub fn report(&self) -> ExitCode {
        eprintln!("ferroverbs: error: {self}");
        let mut src = self.source();
        while let Some(s) = src {
            eprintln!("  caused by: {s}");
            src = s.source();
        }
        ExitCode::from(self.exit_code())
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Setup { context, source } | CliError::Runtime { context, source } => {
                match source {
                    Some(s) => write!(f, "{context}: {s}"),
                    None => f.write_str(context),
                }
            }
            CliError::Unsupported { what, needs } => {
                write!(f, "{what} is not yet supported: {needs}")
            }
        }
    }
}

impl StdError for CliError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            // The direct cause is part of the message; report its causes.
            CliError::Setup { source, .. } | CliError::Runtime { source, .. } => {
                source.as_ref().and_then(|s| s.source())
            }
            CliError::Unsupported { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_messages() {
        let e = CliError::setup("cannot open vfio:0000:3b:00.0", "no VFIO");
        assert_eq!(e.exit_code(), 3);
        assert_eq!(e.to_string(), "cannot open vfio:0000:3b:00.0: no VFIO");
        let e = CliError::unsupported("--server", "needs the UDP link");
        assert_eq!(e.exit_code(), 3);
        assert_eq!(
            e.to_string(),
            "--server is not yet supported: needs the UDP link"
        );
        let e = CliError::runtime_msg("completion error");
        assert_eq!(e.exit_code(), 1);
    }
}
