//! The command line, as clap parses it. Range checks that perftest makes on each
//! option alone are clap value parsers here (a violation is a usage error, exit code
//! 2); the checks that involve several options or the test are in
//! [`perf::config`](super::perf::config).

use clap::{value_parser, Args, Parser, Subcommand, ValueEnum};
use ferroverbs::DeviceSpec;

use super::perf::config::{Mode, TestId, Verb, DEF_QP_TIME, MAX_QP_TIME};

/// What `--help` says about exit codes.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  success
  1  runtime failure (a work completion with an error status, a measurement that
     could not finish)
  2  usage error (an unknown or malformed option, a combination of options the test
     does not accept)
  3  device or setup error (the device cannot be opened or brought up, a resource
     cannot be created, a CPU cannot be pinned, a feature that is not available yet)";

/// ferroverbs: a userspace RDMA verbs driver for ConnectX (mlx5) NICs and a simulated
/// ConnectX.
#[derive(Debug, Parser)]
#[command(
    name = "ferroverbs",
    version,
    about = "ferroverbs: device attributes and perftest-style benchmarks for ConnectX (mlx5) \
             NICs, on hardware through VFIO or on the embedded simulator",
    after_help = EXIT_CODES_HELP,
    propagate_version = true
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print device and port attributes (like `ibv_devinfo`; `-v` like `ibv_devinfo -v`).
    Devinfo(DevinfoArgs),
    /// Run a perftest-style benchmark (`ib_send_lat`, `ib_write_bw`, ...).
    Perf {
        /// The test.
        #[command(subcommand)]
        test: PerfCommand,
    },
    /// Run a program on the system's rdma-core (libibverbs + libmlx5, unmodified) with
    /// the userspace RDMA interface in front of it, on a simulated ConnectX
    /// (`ferroverbs run -- ibv_devinfo -v`).
    Run(RunArgs),
}

/// `ferroverbs run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The simulated NIC: `sim` (127.0.0.1), `sim:A.B.C.D` or `sim:A.B.C.D:PORT` (the
    /// UDP port of the RoCE v2 link; both sides of a pair use the same).
    #[arg(short = 'd', long, value_name = "DEV", default_value = "sim")]
    pub device: DeviceSpec,
    /// Seeded impairments of every frame the NIC sends, in order: `loss=P`,
    /// `duplicate=P`, `reorder=P`, `corrupt=P`, `delay=D[:JITTER]`, `drop=FROM:COUNT`,
    /// `down=AT:FOR` (the port's link down for a while), `rate=BYTES_PER_SEC:BACKLOG`, `seed=N` (`--impair loss=0.01,seed=7`; the
    /// program sees `FERROVERBS_IMPAIR`).
    #[arg(long, value_name = "SPEC", value_parser = impairment_spec)]
    pub impair: Option<String>,
    /// The program and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM"
    )]
    pub program: Vec<std::ffi::OsString>,
}

/// An impairment spec, checked by parsing it as the NIC will.
fn impairment_spec(s: &str) -> Result<String, String> {
    s.parse::<ferroverbs_sim::link::Impairments>()
        .map(|_| s.to_string())
}

/// `ferroverbs devinfo`.
#[derive(Debug, Args)]
#[command(after_help = EXIT_CODES_HELP)]
pub struct DevinfoArgs {
    /// The device: `sim` (the embedded simulator) or `vfio:DDDD:BB:DD.F` (a ConnectX
    /// function bound to vfio-pci).
    #[arg(short = 'd', long, value_name = "DEV", default_value = "sim")]
    pub device: DeviceSpec,
    /// Only this port (1-based).
    #[arg(short = 'i', long = "ib-port", value_name = "PORT",
          value_parser = value_parser!(u8).range(1..))]
    pub port: Option<u8>,
    /// Print all attributes, the GID table included (`ibv_devinfo -v`).
    #[arg(short = 'v', long)]
    pub verbose: bool,
}

/// The perftest tests.
#[derive(Debug, Subcommand)]
pub enum PerfCommand {
    /// SEND ping-pong latency (ib_send_lat).
    SendLat(PerfArgs),
    /// SEND bandwidth and message rate (ib_send_bw).
    SendBw(PerfArgs),
    /// RDMA WRITE ping-pong latency, polling memory (ib_write_lat).
    WriteLat(PerfArgs),
    /// RDMA WRITE bandwidth and message rate (ib_write_bw).
    WriteBw(PerfArgs),
    /// RDMA READ latency (ib_read_lat).
    ReadLat(PerfArgs),
    /// RDMA READ bandwidth and message rate (ib_read_bw).
    ReadBw(PerfArgs),
    /// Atomic (fetch-and-add or compare-and-swap) latency (ib_atomic_lat).
    AtomicLat(PerfArgs),
    /// Atomic bandwidth and message rate (ib_atomic_bw).
    AtomicBw(PerfArgs),
}

impl PerfCommand {
    /// The test and its arguments.
    pub fn split(&self) -> (TestId, &PerfArgs) {
        use PerfCommand::*;
        let (verb, mode, a) = match self {
            SendLat(a) => (Verb::Send, Mode::Lat, a),
            SendBw(a) => (Verb::Send, Mode::Bw, a),
            WriteLat(a) => (Verb::Write, Mode::Lat, a),
            WriteBw(a) => (Verb::Write, Mode::Bw, a),
            ReadLat(a) => (Verb::Read, Mode::Lat, a),
            ReadBw(a) => (Verb::Read, Mode::Bw, a),
            AtomicLat(a) => (Verb::Atomic, Mode::Lat, a),
            AtomicBw(a) => (Verb::Atomic, Mode::Bw, a),
        };
        (TestId { verb, mode }, a)
    }
}

/// The atomic operation of the atomic tests (perftest `-A`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AtomicType {
    /// Fetch and add (perftest's default).
    #[default]
    FetchAndAdd,
    /// Compare and swap.
    CmpAndSwap,
}

impl AtomicType {
    /// perftest's name.
    pub fn name(self) -> &'static str {
        match self {
            AtomicType::FetchAndAdd => "FETCH_AND_ADD",
            AtomicType::CmpAndSwap => "CMP_AND_SWAP",
        }
    }
}

/// How the two simulated NICs of `--device sim` make progress.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum SimMode {
    /// No device threads: the tool steps the fabric whenever a poll finds nothing
    /// (everything on one thread).
    #[default]
    Deterministic,
    /// Each NIC runs its own device thread; the tool only posts and polls.
    Threaded,
}

/// The options of every perf test (perftest's, with its letters).
#[derive(Clone, Debug, Args)]
#[command(after_help = EXIT_CODES_HELP)]
pub struct PerfArgs {
    /// The device: `sim` (two simulated NICs in this process, connected by an
    /// in-process fabric) or `vfio:DDDD:BB:DD.F` (a ConnectX bound to vfio-pci).
    #[arg(short = 'd', long, value_name = "DEV", default_value = "sim")]
    pub device: DeviceSpec,
    /// Message size in bytes; K and M suffixes multiply by 1024 and 1024^2 (1 to
    /// 2^31-1) [default: 2 for latency, 65536 for bandwidth, 8 for atomics].
    #[arg(short = 's', long, value_name = "SIZE", value_parser = parse_size,
          conflicts_with = "all")]
    pub size: Option<u64>,
    /// Run every size from 2 to 2^23 bytes (powers of two).
    #[arg(short = 'a', long)]
    pub all: bool,
    /// Number of iterations (at least 5) [default: 1000; 5000 for write-bw].
    #[arg(short = 'n', long, value_name = "N",
          value_parser = value_parser!(u64).range(5..=4_294_967_296))]
    pub iters: Option<u64>,
    /// Largest message sent inline, in the WQE (0 to 1024) [default: 236 for
    /// send-lat, 220 for write-lat, 0 otherwise; at most what the QP grants].
    #[arg(short = 'I', long = "inline-size", visible_alias = "inline_size", value_name = "BYTES",
          value_parser = value_parser!(u32).range(0..=1024))]
    pub inline_size: Option<u32>,
    /// Send queue depth: work requests in flight per QP (1 to 15000) [default: 1 for
    /// latency, 128 for bandwidth; at most the iterations].
    #[arg(short = 't', long = "tx-depth", value_name = "N",
          value_parser = value_parser!(u32).range(1..=15000))]
    pub tx_depth: Option<u32>,
    /// Post lists of this many work requests with one doorbell (bandwidth tests).
    #[arg(short = 'l', long = "post-list", visible_alias = "post_list", value_name = "N",
          value_parser = value_parser!(u32).range(1..=15000))]
    pub post_list: Option<u32>,
    /// Completion moderation: one signaled work request in N (1 to 1024; bandwidth
    /// tests) [default: 100; the post list size with -l; 1 above 8 KiB].
    #[arg(short = 'Q', long = "cq-mod", value_name = "N",
          value_parser = value_parser!(u32).range(1..=1024))]
    pub cq_mod: Option<u32>,
    /// Number of queue pairs (1 to 16384; bandwidth tests).
    #[arg(short = 'q', long = "qp", value_name = "N",
          value_parser = value_parser!(u32).range(1..=16384))]
    pub qps: Option<u32>,
    /// One memory region per QP (perftest's `--mr_per_qp`): each QP sends from, receives
    /// into and is the RDMA target of its own region, instead of all the QPs of a side
    /// sharing one. The time to register them is printed on stderr.
    #[arg(long = "mr_per_qp", visible_alias = "mr-per-qp")]
    pub mr_per_qp: bool,
    /// Wait for completions by event instead of polling.
    #[arg(short = 'e', long)]
    pub events: bool,
    /// Pin the polling thread to this CPU.
    #[arg(long, value_name = "CPU")]
    pub cpu: Option<usize>,
    /// The QPs' local ACK timeout exponent: a request not acknowledged within
    /// 4.096 µs × 2^EXP is retransmitted (7 times, then it fails with a transport
    /// retry error); 0 waits forever (0 to 31).
    #[arg(short = 'u', long = "qp-timeout", value_name = "EXP", default_value_t = DEF_QP_TIME,
          value_parser = value_parser!(u8).range(0..=MAX_QP_TIME as i64))]
    pub qp_timeout: u8,
    /// After the test, measure its baseline in the same run and print it in the same
    /// columns with the ratio: a TCP ping-pong (latency tests), `memcpy` (bandwidth
    /// tests in one process) or raw UDP between the two NIC addresses (bandwidth tests
    /// across processes).
    #[arg(long)]
    pub baseline: bool,
    /// Print a histogram of the latency samples (latency tests).
    #[arg(short = 'H', long = "report-histogram")]
    pub report_histogram: bool,
    /// Atomic operation (atomic tests) [default: FETCH_AND_ADD].
    #[arg(short = 'A', long = "atomic-type", value_name = "TYPE", value_enum)]
    pub atomic_type: Option<AtomicType>,
    /// How the simulated NICs make progress (`--device sim`): stepped by the tool on
    /// its thread, or each on a device thread [default: deterministic in one process,
    /// threaded across processes].
    #[arg(long = "sim-mode", value_name = "MODE", value_enum)]
    pub sim_mode: Option<SimMode>,
    /// Be the server side of a cross-process test (waits for a client).
    #[arg(long, conflicts_with = "client")]
    pub server: bool,
    /// Be the client side of a cross-process test, connecting to HOST.
    #[arg(long, value_name = "HOST")]
    pub client: Option<String>,
    /// TCP port of the cross-process test's rendezvous (the server listens on it).
    #[arg(short = 'p', long, value_name = "PORT", default_value_t = 18515,
          value_parser = value_parser!(u16).range(1..))]
    pub port: u16,
    /// Server: the address the rendezvous listens on [default: 0.0.0.0].
    #[arg(long, value_name = "ADDR")]
    pub bind: Option<std::net::IpAddr>,
    /// Cross-process test: the IPv4 address this process's simulated NIC binds for
    /// RoCEv2 over UDP (its GID 0) [default: 127.0.0.1 for the server, 127.0.0.2 for
    /// the client].
    #[arg(long, value_name = "ADDR")]
    pub ip: Option<std::net::Ipv4Addr>,
    /// Cross-process test: the UDP port both simulated NICs use (the same on both
    /// sides).
    #[arg(long = "udp-port", value_name = "PORT", default_value_t = 4791,
          value_parser = value_parser!(u16).range(1..))]
    pub udp_port: u16,
}

/// Parses a message size as perftest does: a number with an optional `K` (1024) or
/// `M` (1024^2) suffix, from 1 to 2^31 - 1 bytes (perftest's `UINT_MAX / 2`).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (digits, factor) = match t.as_bytes().last() {
        Some(b'K' | b'k') => (&t[..t.len() - 1], 1024u64),
        Some(b'M' | b'm') => (&t[..t.len() - 1], 1024 * 1024),
        _ => (t, 1),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{s}` is not a size (a number of bytes, optionally with K or M)"))?;
    let v = n
        .checked_mul(factor)
        .filter(|v| (1..=u64::from(u32::MAX / 2)).contains(v))
        .ok_or_else(|| format!("the message size must be between 1 and {}", u32::MAX / 2))?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn sizes_with_suffixes() {
        assert_eq!(parse_size("64"), Ok(64));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("8M"), Ok(8 << 20));
        assert_eq!(parse_size("2047M"), Ok(2047 << 20));
        assert!(parse_size("0").is_err());
        assert!(parse_size("2048M").is_err());
        assert!(parse_size("x").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("").is_err());
    }

    #[test]
    fn perftest_letters_parse() {
        let cli = Cli::try_parse_from([
            "ferroverbs",
            "perf",
            "write-bw",
            "-s",
            "4K",
            "-n",
            "100",
            "-t",
            "64",
            "-l",
            "4",
            "-Q",
            "4",
            "-q",
            "2",
            "--cpu",
            "0",
            "-d",
            "sim",
        ])
        .unwrap();
        let Command::Perf { test } = cli.command else {
            panic!()
        };
        let (id, a) = test.split();
        assert_eq!(id.name(), "write-bw");
        assert_eq!(a.size, Some(4096));
        assert_eq!(a.iters, Some(100));
        assert_eq!(
            (a.tx_depth, a.post_list, a.cq_mod, a.qps),
            (Some(64), Some(4), Some(4), Some(2))
        );
        assert_eq!(a.cpu, Some(0));
        assert_eq!(a.device, DeviceSpec::Sim);
        assert_eq!(a.port, 18515);
    }

    #[test]
    fn qp_timeout_is_perftests_option() {
        let parse = |args: &[&str]| {
            let argv = ["ferroverbs", "perf", "send-bw"].iter().chain(args);
            let Command::Perf { test } = Cli::try_parse_from(argv)?.command else {
                panic!()
            };
            Ok::<u8, clap::Error>(test.split().1.qp_timeout)
        };
        // perftest's DEF_QP_TIME without the option; -u and --qp-timeout, 0 to 31.
        assert_eq!(parse(&[]).unwrap(), 14);
        assert_eq!(parse(&["-u", "20"]).unwrap(), 20);
        assert_eq!(parse(&["--qp-timeout", "0"]).unwrap(), 0);
        assert_eq!(parse(&["--qp-timeout=31"]).unwrap(), 31);
        for bad in ["32", "255", "-1", "x", ""] {
            let e = parse(&[&format!("--qp-timeout={bad}")]).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}: {e}");
            let msg = e.to_string();
            assert!(msg.contains("--qp-timeout <EXP>"), "{bad}: {msg}");
        }
        let msg = parse(&["-u", "32"]).unwrap_err().to_string();
        assert!(msg.contains("0..=31"), "{msg}");
    }

    #[test]
    fn single_option_ranges_are_usage_errors() {
        for bad in [
            &["perf", "send-lat", "-n", "4"][..],
            &["perf", "send-lat", "-t", "0"],
            &["perf", "send-lat", "-t", "15001"],
            &["perf", "send-bw", "-Q", "1025"],
            &["perf", "send-bw", "-q", "0"],
            &["perf", "send-lat", "-I", "1025"],
            &["perf", "send-lat", "-s", "0"],
            &["perf", "send-lat", "-s", "2", "-a"],
            &["perf", "send-lat", "--server", "--client", "h"],
            &["perf", "send-lat", "-d", "mlx5_0"],
            &["perf", "send-lat", "-p", "0"],
            &["perf", "send-lat", "--bogus"],
            &["perf", "atomic-lat", "-A", "SWAP"],
            &["perf", "nope-lat"],
            &["devinfo", "-d", "vfio:zz"],
            &["devinfo", "-i", "0"],
        ] {
            let args = std::iter::once("ferroverbs").chain(bad.iter().copied());
            let e = Cli::try_parse_from(args).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad:?}: {e}");
        }
    }
}
