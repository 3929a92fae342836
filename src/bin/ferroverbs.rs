//! `ferroverbs`: device attributes and perftest-style benchmarks on the embedded
//! simulator or a ConnectX behind VFIO. See `ferroverbs --help`.

fn main() -> std::process::ExitCode {
    ferroverbs_workspace::cli::main_with(std::env::args_os())
}
