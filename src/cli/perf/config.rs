//! A perf test's configuration: perftest's defaults and the checks it makes on
//! combinations of options (`force_dependecies` and the option parser in perftest's
//! `src/perftest_parameters.c`), each violation a usage error naming the option.

use std::net::{IpAddr, Ipv4Addr};

use ferroverbs::DeviceSpec;

pub use crate::cli::args::SimMode;
use crate::cli::args::{AtomicType, PerfArgs};

/// perftest's `DEF_SIZE_LAT`.
pub const DEF_SIZE_LAT: u64 = 2;
/// perftest's `DEF_SIZE_BW`.
pub const DEF_SIZE_BW: u64 = 65536;
/// The size of an atomic operation (`DEF_SIZE_ATOMIC`).
pub const ATOMIC_SIZE: u64 = 8;
/// perftest's `DEF_ITERS`.
pub const DEF_ITERS: u64 = 1000;
/// perftest's `DEF_ITERS_WB` (write-bw).
pub const DEF_ITERS_WB: u64 = 5000;
/// perftest's `DEF_TX_LAT`.
pub const DEF_TX_LAT: u32 = 1;
/// perftest's `DEF_TX_BW`.
pub const DEF_TX_BW: u32 = 128;
/// perftest's `DEF_CQ_MOD`.
pub const DEF_CQ_MOD: u32 = 100;
/// perftest's `DEF_RX_SEND`: receive requests kept posted in SEND tests.
pub const DEF_RX_SEND: u32 = 512;
/// perftest's `DEF_INLINE_SEND_RC_UC_XRC` (send-lat on mlx5).
pub const DEF_INLINE_SEND: u32 = 236;
/// perftest's `DEF_INLINE_WRITE` (write-lat on mlx5).
pub const DEF_INLINE_WRITE: u32 = 220;
/// Above this size CQ moderation is turned off unless asked (`MSG_SIZE_CQ_MOD_LIMIT`).
pub const MSG_SIZE_CQ_MOD_LIMIT: u64 = 8192;
/// The largest size of `-a` (`MAX_SIZE`, 2^23).
pub const MAX_SIZE: u64 = 1 << 23;
/// perftest's `DEF_QP_TIME`: the local ACK timeout exponent of `-u`/`--qp-timeout`,
/// 4.096 µs × 2^14 ≈ 67 ms.
pub const DEF_QP_TIME: u8 = 14;
/// The largest local ACK timeout exponent: the QP context's `ack_timeout` is 5 bits
/// (IBTA 9.7.6.1.3; `ads.ack_timeout` in `mlx5_ifc.h`), 4.096 µs × 2^31 ≈ 2.4 hours.
pub const MAX_QP_TIME: u8 = 31;

/// The operation measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verb {
    /// SEND / RECV.
    Send,
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// Atomic fetch-and-add or compare-and-swap.
    Atomic,
}

/// Latency or bandwidth.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Ping-pong (SEND, WRITE) or one request at a time (READ, atomic).
    Lat,
    /// Streams of requests.
    Bw,
}

/// One of the eight tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TestId {
    /// The operation.
    pub verb: Verb,
    /// Latency or bandwidth.
    pub mode: Mode,
}

impl TestId {
    /// Every test.
    pub const ALL: [TestId; 8] = {
        use Mode::*;
        use Verb::*;
        [
            TestId {
                verb: Send,
                mode: Lat,
            },
            TestId {
                verb: Send,
                mode: Bw,
            },
            TestId {
                verb: Write,
                mode: Lat,
            },
            TestId {
                verb: Write,
                mode: Bw,
            },
            TestId {
                verb: Read,
                mode: Lat,
            },
            TestId {
                verb: Read,
                mode: Bw,
            },
            TestId {
                verb: Atomic,
                mode: Lat,
            },
            TestId {
                verb: Atomic,
                mode: Bw,
            },
        ]
    };

    /// The subcommand name (`send-lat`).
    pub fn name(self) -> &'static str {
        use Mode::*;
        use Verb::*;
        match (self.verb, self.mode) {
            (Send, Lat) => "send-lat",
            (Send, Bw) => "send-bw",
            (Write, Lat) => "write-lat",
            (Write, Bw) => "write-bw",
            (Read, Lat) => "read-lat",
            (Read, Bw) => "read-bw",
            (Atomic, Lat) => "atomic-lat",
            (Atomic, Bw) => "atomic-bw",
        }
    }

    /// perftest's name of the verb (`testsStr`).
    pub fn verb_title(self) -> &'static str {
        match self.verb {
            Verb::Send => "Send",
            Verb::Write => "RDMA_Write",
            Verb::Read => "RDMA_Read",
            Verb::Atomic => "Atomic",
        }
    }

    /// Whether one request is a whole round trip (READ, atomic): perftest's RTT factor
    /// is 1 for these and 2 for the ping-pong tests.
    pub fn one_sided_request(self) -> bool {
        matches!(self.verb, Verb::Read | Verb::Atomic)
    }

    /// Whether the responder consumes receive requests (SEND).
    pub fn has_recv(self) -> bool {
        self.verb == Verb::Send
    }
}

/// Where the two sides of the test run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// Both sides in this process, on two NICs of the simulator (or two QPs of one
    /// device on hardware).
    Local,
    /// The server side, waiting on `port`.
    Server {
        /// Port.
        port: u16,
    },
    /// The client side, connecting to `host:port`.
    Client {
        /// Server host.
        host: String,
        /// Port.
        port: u16,
    },
}

/// The addresses of a cross-process test (`--server`, `--client`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetConfig {
    /// Where the server's rendezvous listens.
    pub bind: IpAddr,
    /// The IPv4 address of this process's simulated NIC.
    pub ip: Ipv4Addr,
    /// The UDP port of both NICs.
    pub udp_port: u16,
}

/// The default NIC address of a cross-process server.
pub const DEFAULT_SERVER_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
/// The default NIC address of a cross-process client.
pub const DEFAULT_CLIENT_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// The inline size: perftest's default (capped by what the QP grants) or a value the
/// user asked for (an error if the QP cannot grant it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inline {
    /// The default for the test; lowered to the QP's limit if needed.
    Default(u32),
    /// Asked with `-I`.
    Asked(u32),
}

impl Inline {
    /// The number of bytes.
    pub fn bytes(self) -> u32 {
        match self {
            Inline::Default(n) | Inline::Asked(n) => n,
        }
    }
}

/// A validated test configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct PerfConfig {
    /// The test.
    pub test: TestId,
    /// The device.
    pub device: DeviceSpec,
    /// Message sizes to run, in order (one, or 2..2^23 with `-a`).
    pub sizes: Vec<u64>,
    /// Whether `-a` was given.
    pub all_sizes: bool,
    /// Iterations per size (per QP in bandwidth tests).
    pub iters: u64,
    /// Inline threshold.
    pub inline: Inline,
    /// Send queue depth per QP.
    pub tx_depth: u32,
    /// Receive requests kept posted per QP (SEND tests; 1 otherwise).
    pub rx_depth: u32,
    /// Work requests per post list.
    pub post_list: u32,
    /// One signaled work request in this many.
    pub cq_mod: u32,
    /// Queue pairs.
    pub qps: u32,
    /// One memory region per QP (`--mr_per_qp`).
    pub mr_per_qp: bool,
    /// Completions by event.
    pub events: bool,
    /// CPU to pin the polling thread to.
    pub cpu: Option<usize>,
    /// Print a histogram.
    pub histogram: bool,
    /// Measure and print the baseline after the test.
    pub baseline: bool,
    /// Atomic operation.
    pub atomic: AtomicType,
    /// Where the sides run.
    pub role: Role,
    /// How the simulated NICs make progress.
    pub sim_mode: SimMode,
    /// The QPs' local ACK timeout exponent (`-u`/`--qp-timeout`): 4.096 µs × 2^n,
    /// 0 for no timer.
    pub qp_timeout: u8,
    /// The cross-process test's addresses.
    pub net: NetConfig,
    /// perftest's notices about adjusted options, printed before the test.
    pub notes: Vec<String>,
}

/// A combination of options the test does not accept (exit code 2).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

fn usage<T>(msg: impl Into<String>) -> Result<T, UsageError> {
    Err(UsageError(msg.into()))
}

/// The sizes of `-a`: 2, 4, ..., 2^23.
pub fn all_sizes() -> Vec<u64> {
    (1..=23).map(|k| 1u64 << k).collect()
}

impl PerfConfig {
    /// Applies perftest's defaults and checks to the options of `test`.
    pub fn new(test: TestId, a: &PerfArgs) -> Result<Self, UsageError> {
        let lat = test.mode == Mode::Lat;
        let name = test.name();
        let mut notes = Vec::new();

        // Options that only some tests take.
        if test.one_sided_request() && a.inline_size.is_some_and(|i| i > 0) {
            return usage(format!(
                "-I/--inline-size: inline data is not available on {name} (READ and atomic \
                 requests carry no payload)"
            ));
        }
        if test.verb == Verb::Atomic {
            if a.size.is_some_and(|s| s != ATOMIC_SIZE) {
                return usage(format!(
                    "-s/--size: atomic operations are {ATOMIC_SIZE} bytes; the message size \
                     cannot be changed for atomic tests"
                ));
            }
            if a.all {
                return usage("-a/--all: atomic operations have one size (8 bytes)");
            }
        } else if a.atomic_type.is_some() {
            return usage(format!(
                "-A/--atomic-type: {name} is not an atomic test (use atomic-lat or atomic-bw)"
            ));
        }
        if lat {
            if a.qps.is_some_and(|q| q > 1) {
                return usage("-q/--qp: multiple QPs are only available in bandwidth tests");
            }
            if a.post_list.is_some_and(|l| l > 1) {
                return usage("-l/--post-list: post lists are only available in bandwidth tests");
            }
            if a.cq_mod.is_some() {
                return usage("-Q/--cq-mod: completion moderation applies to bandwidth tests only");
            }
        } else if a.report_histogram {
            return usage("-H/--report-histogram: available only in latency tests");
        }
        if a.events
            && test
                == (TestId {
                    verb: Verb::Write,
                    mode: Mode::Lat,
                })
        {
            return usage(
                "-e/--events: write-lat detects arrivals by polling memory, not completions; \
                 events do not apply",
            );
        }

        // Sizes.
        let sizes = if a.all {
            all_sizes()
        } else {
            vec![a.size.unwrap_or(match (test.verb, test.mode) {
                (Verb::Atomic, _) => ATOMIC_SIZE,
                (_, Mode::Lat) => DEF_SIZE_LAT,
                (_, Mode::Bw) => DEF_SIZE_BW,
            })]
        };

        let iters = a.iters.unwrap_or(match (test.verb, test.mode) {
            (Verb::Write, Mode::Bw) => DEF_ITERS_WB,
            _ => DEF_ITERS,
        });

        let mut tx_depth = a
            .tx_depth
            .unwrap_or(if lat { DEF_TX_LAT } else { DEF_TX_BW });
        if u64::from(tx_depth) > iters {
            tx_depth = iters as u32;
        }
        let rx_depth = if test.has_recv() {
            DEF_RX_SEND.min(iters.min(u64::from(u32::MAX)) as u32)
        } else {
            1
        };

        let post_list = a.post_list.unwrap_or(1);
        let mut cq_mod = a.cq_mod.unwrap_or(DEF_CQ_MOD);
        let req_cq_mod = a.cq_mod.is_some();
        // Large messages: no moderation unless asked (not with -a, not with events).
        if sizes.len() == 1 && sizes[0] > MSG_SIZE_CQ_MOD_LIMIT && !a.events {
            if !req_cq_mod {
                cq_mod = 1;
            } else if cq_mod > 1 {
                notes.push(
                    "Warning: Large message requested and CQ moderation enabled; it can lead \
                     to inaccurate results"
                        .into(),
                );
            }
        }
        if post_list > 1 {
            if !iters.is_multiple_of(u64::from(post_list)) {
                return usage(format!(
                    "-l/--post-list: the number of iterations ({iters}) must be a multiple of \
                     the post list size ({post_list})"
                ));
            }
            if !req_cq_mod {
                cq_mod = post_list;
                notes.push(
                    "Post List requested - CQ moderation will be the size of the post list".into(),
                );
            } else if !post_list.is_multiple_of(cq_mod) {
                return usage(format!(
                    "-l/--post-list: the post list size ({post_list}) must be a multiple of \
                     the CQ moderation (-Q {cq_mod})"
                ));
            }
            if post_list > tx_depth {
                return usage(format!(
                    "-l/--post-list: a post list of {post_list} does not fit a TX depth of \
                     {tx_depth} (-t)"
                ));
            }
        }
        if cq_mod > tx_depth {
            cq_mod = tx_depth;
        }

        let inline = match a.inline_size {
            Some(n) => Inline::Asked(n),
            None => Inline::Default(match (test.verb, test.mode) {
                (Verb::Send, Mode::Lat) => DEF_INLINE_SEND,
                (Verb::Write, Mode::Lat) => DEF_INLINE_WRITE,
                _ => 0,
            }),
        };

        let role = match (&a.client, a.server) {
            (Some(host), _) => Role::Client {
                host: host.clone(),
                port: a.port,
            },
            (None, true) => Role::Server { port: a.port },
            (None, false) => Role::Local,
        };
        if a.bind.is_some() && !matches!(role, Role::Server { .. }) {
            return usage("--bind: only the server (--server) listens");
        }
        if role == Role::Local && (a.ip.is_some() || a.udp_port != 4791) {
            return usage(
                "--ip and --udp-port set up a cross-process test; add --server or --client HOST",
            );
        }
        let net = NetConfig {
            bind: a.bind.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            ip: a.ip.unwrap_or(match role {
                Role::Client { .. } => DEFAULT_CLIENT_IP,
                _ => DEFAULT_SERVER_IP,
            }),
            udp_port: a.udp_port,
        };

        Ok(PerfConfig {
            test,
            device: a.device,
            sizes,
            all_sizes: a.all,
            iters,
            inline,
            tx_depth,
            rx_depth,
            post_list,
            cq_mod,
            qps: a.qps.unwrap_or(1),
            mr_per_qp: a.mr_per_qp,
            events: a.events,
            cpu: a.cpu,
            histogram: a.report_histogram,
            baseline: a.baseline,
            atomic: a.atomic_type.unwrap_or_default(),
            role: role.clone(),
            sim_mode: a.sim_mode.unwrap_or(if role == Role::Local {
                SimMode::Deterministic
            } else {
                SimMode::Threaded
            }),
            qp_timeout: a.qp_timeout,
            net,
            notes,
        })
    }

    /// The largest message size of the run.
    pub fn max_size(&self) -> u64 {
        self.sizes.iter().copied().max().unwrap_or(DEF_SIZE_LAT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args::{Cli, Command};
    use clap::Parser;

    fn config(args: &[&str]) -> Result<PerfConfig, UsageError> {
        let argv = ["ferroverbs", "perf"]
            .into_iter()
            .chain(args.iter().copied());
        let cli = Cli::try_parse_from(argv).expect("clap accepts it");
        let Command::Perf { test } = cli.command else {
            unreachable!()
        };
        let (id, a) = test.split();
        PerfConfig::new(id, a)
    }

    #[test]
    fn perftest_defaults() {
        let c = config(&["send-lat"]).unwrap();
        assert_eq!(c.sizes, vec![2]);
        assert_eq!((c.iters, c.tx_depth, c.rx_depth, c.qps), (1000, 1, 512, 1));
        assert_eq!(c.inline, Inline::Default(236));
        assert_eq!(c.cq_mod, 1, "clamped to the TX depth");
        assert_eq!(c.role, Role::Local);

        let c = config(&["write-bw"]).unwrap();
        assert_eq!(c.sizes, vec![65536]);
        assert_eq!((c.iters, c.tx_depth, c.rx_depth), (5000, 128, 1));
        assert_eq!(c.cq_mod, 1, "moderation off above 8 KiB");
        assert_eq!(c.inline, Inline::Default(0));

        let c = config(&["send-bw", "-s", "64"]).unwrap();
        assert_eq!((c.iters, c.cq_mod, c.tx_depth), (1000, 100, 128));

        let c = config(&["write-lat"]).unwrap();
        assert_eq!(c.inline, Inline::Default(220));
        assert_eq!(c.rx_depth, 1);

        let c = config(&["atomic-lat"]).unwrap();
        assert_eq!(c.sizes, vec![8]);
        assert_eq!(c.atomic, AtomicType::FetchAndAdd);
        let c = config(&["atomic-bw", "-A", "CMP_AND_SWAP", "-s", "8"]).unwrap();
        assert_eq!(c.atomic, AtomicType::CmpAndSwap);

        let c = config(&["read-lat", "-a"]).unwrap();
        assert_eq!(c.sizes.len(), 23);
        assert_eq!((c.sizes[0], c.sizes[22]), (2, MAX_SIZE));
        assert_eq!(c.inline, Inline::Default(0));
    }

    #[test]
    fn depths_and_moderation_are_clamped_as_perftest_does() {
        let c = config(&["send-bw", "-n", "50", "-s", "64"]).unwrap();
        assert_eq!((c.tx_depth, c.cq_mod, c.rx_depth), (50, 50, 50));
        let c = config(&["send-bw", "-s", "1M", "-Q", "16"]).unwrap();
        assert_eq!(c.cq_mod, 16);
        assert_eq!(c.notes.len(), 1);
        let c = config(&["write-bw", "-l", "8", "-s", "64"]).unwrap();
        assert_eq!((c.post_list, c.cq_mod), (8, 8));
        assert!(c.notes[0].contains("Post List requested"));
        let c = config(&["write-bw", "-l", "8", "-Q", "4"]).unwrap();
        assert_eq!((c.post_list, c.cq_mod), (8, 4));
        // -a keeps moderation (it cannot change per size).
        let c = config(&["write-bw", "-a"]).unwrap();
        assert_eq!(c.cq_mod, 100);
    }

    #[test]
    fn combinations_perftest_refuses() {
        for (args, needle) in [
            (&["read-lat", "-I", "16"][..], "-I/--inline-size"),
            (&["atomic-bw", "-I", "16"], "-I/--inline-size"),
            (&["atomic-lat", "-s", "16"], "-s/--size"),
            (&["atomic-lat", "-a"], "-a/--all"),
            (&["send-lat", "-A", "CMP_AND_SWAP"], "-A/--atomic-type"),
            (&["send-lat", "-q", "2"], "-q/--qp"),
            (&["send-lat", "-l", "2"], "-l/--post-list"),
            (&["read-lat", "-Q", "2"], "-Q/--cq-mod"),
            (&["send-bw", "-H"], "-H/--report-histogram"),
            (&["write-lat", "-e"], "-e/--events"),
            (
                &["write-bw", "-l", "3", "-n", "100"],
                "multiple of the post list",
            ),
            (
                &["write-bw", "-l", "8", "-Q", "3"],
                "multiple of the CQ moderation",
            ),
            (
                &["write-bw", "-l", "10", "-t", "8"],
                "does not fit a TX depth",
            ),
        ] {
            let e = config(args).unwrap_err();
            assert!(e.0.contains(needle), "{args:?}: {e}");
        }
        // Zero inline on READ is harmless, as is an explicit 8 for atomics.
        assert!(config(&["read-bw", "-I", "0"]).is_ok());
        assert!(config(&["atomic-lat", "-s", "8"]).is_ok());
    }

    #[test]
    fn roles() {
        let c = config(&["send-lat", "--server", "-p", "9000"]).unwrap();
        assert_eq!(c.role, Role::Server { port: 9000 });
        let c = config(&["send-lat", "--client", "peer.example"]).unwrap();
        assert_eq!(
            c.role,
            Role::Client {
                host: "peer.example".into(),
                port: 18515
            }
        );
    }

    #[test]
    fn names() {
        let names: Vec<_> = TestId::ALL.iter().map(|t| t.name()).collect();
        assert_eq!(
            names,
            [
                "send-lat",
                "send-bw",
                "write-lat",
                "write-bw",
                "read-lat",
                "read-bw",
                "atomic-lat",
                "atomic-bw"
            ]
        );
    }
}
