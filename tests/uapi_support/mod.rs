//! Running unmodified programs under `ferroverbs run` (rdma-core's own libibverbs and
//! libmlx5 with `libferroverbs_uapi.so` preloaded), alone or as a server/client pair
//! on two simulated NICs of this process's loopback /24 (`net`), each under a time
//! limit after which it is killed.
//!
//! A tool that is not installed skips its test with a notice, unless
//! `FERROVERBS_REQUIRE_IBVERBS_UTILS=1` (CI) makes that a failure.

#![allow(dead_code)]

#[path = "../common/net.rs"]
pub mod net;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Set to 1 to make a missing tool a failure.
pub const REQUIRE_ENV: &str = "FERROVERBS_REQUIRE_IBVERBS_UTILS";

/// The preload library cargo built for this test run (a dev-dependency's cdylib, in
/// `target/<profile>/deps` next to the test executable).
pub fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps directory");
    for dir in [deps, deps.parent().unwrap_or(deps)] {
        let p = dir.join("libferroverbs_uapi.so");
        if p.exists() {
            return p;
        }
    }
    panic!("libferroverbs_uapi.so not found next to {}", exe.display());
}

/// Whether `tool` can run; otherwise prints a notice or, with the CI variable, fails.
pub fn have(tool: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !found {
        assert!(
            std::env::var(REQUIRE_ENV).as_deref() != Ok("1"),
            "{tool} is not installed and {REQUIRE_ENV}=1"
        );
        println!("{tool} is not installed: test skipped");
    }
    found
}

/// A program running under `ferroverbs run`, killed when dropped. Its output is
/// read while it runs (a program that prints more than a pipe holds would otherwise
/// block on its write, rping `-v` of 1000 pings does).
pub struct Proc {
    name: String,
    child: Option<Child>,
    out: Option<std::thread::JoinHandle<String>>,
    err: Option<std::thread::JoinHandle<String>>,
}

/// A thread that reads `r` to its end.
fn drain(r: Option<impl Read + Send + 'static>) -> Option<std::thread::JoinHandle<String>> {
    let mut r = r?;
    Some(std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = r.read_to_end(&mut b);
        String::from_utf8_lossy(&b).into_owned()
    }))
}

impl Proc {
    /// Starts `cmd` on the simulated NIC `device` with `envs` set.
    pub fn spawn(name: &str, device: &str, cmd: &[&str], envs: &[(&str, &str)]) -> Proc {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ferroverbs"));
        // A process group of its own: `ferroverbs run` starts the program as its
        // child, and a kill must reach both (an orphan would keep its NIC's address
        // and the output pipes open).
        std::os::unix::process::CommandExt::process_group(&mut c, 0);
        c.args(["run", "--device", device, "--"])
            .args(cmd)
            .env("FERROVERBS_UAPI_LIB", library())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in envs {
            c.env(k, v);
        }
        let mut child = c.spawn().unwrap_or_else(|e| panic!("{name}: {e}"));
        let (out, err) = (drain(child.stdout.take()), drain(child.stderr.take()));
        Proc {
            name: name.to_string(),
            child: Some(child),
            out,
            err,
        }
    }

    /// The threads of its process group (`ps`: state, kernel wait channel, name),
    /// for a report of where it is stuck.
    pub fn threads(&self) -> String {
        let Some(pid) = self.child.as_ref().map(Child::id) else {
            return String::new();
        };
        Command::new("ps")
            .args([
                "-L",
                "-o",
                "pid,tid,stat,wchan:32,comm",
                "-g",
                &pid.to_string(),
            ])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_else(|e| format!("ps: {e}"))
    }

    /// Whether it still runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// Waits up to `limit`, killing it then; (status or `None` if killed, stdout,
    /// stderr).
    pub fn finish(mut self, limit: Duration) -> (Option<ExitStatus>, String, String) {
        let mut child = self.child.take().expect("not finished yet");
        let start = Instant::now();
        let status = loop {
            if let Ok(Some(s)) = child.try_wait() {
                break Some(s);
            }
            if start.elapsed() > limit {
                kill_group(&mut child);
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // What the program may have left behind holds the pipes open.
        kill_group(&mut child);
        let take = |h: Option<std::thread::JoinHandle<String>>| {
            h.and_then(|h| h.join().ok()).unwrap_or_default()
        };
        (status, take(self.out.take()), take(self.err.take()))
    }
}

/// Kills `child` and its process group (the program `ferroverbs run` started).
fn kill_group(child: &mut Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        // SAFETY: a signal to the process group this module made for the child.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
    let _ = child.kill();
    let _ = child.wait();
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            kill_group(c);
        }
        let _ = &self.name;
    }
}

/// Runs `cmd` to completion within `limit` and asserts exit status 0; its stdout.
pub fn run_ok(device: &str, cmd: &[&str], limit: Duration) -> String {
    let (st, out, err) = Proc::spawn(cmd[0], device, cmd, &[]).finish(limit);
    println!("--- {} ---\n{out}{err}", cmd.join(" "));
    match st {
        Some(s) if s.success() => out,
        Some(s) => panic!("{} failed: {s}\n{out}\n{err}", cmd.join(" ")),
        None => panic!(
            "{} did not finish in {limit:?}\n{out}\n{err}",
            cmd.join(" ")
        ),
    }
}

/// What perftest prints when its clock calibration fails (`get_cpu_mhz`: a fit of
/// the cycle counter against `gettimeofday` below r^2 = 0.9, which a descheduled
/// sample on a loaded 2-core machine causes); the run's numbers are void.
pub const PERFTEST_CALIBRATION_FAILED: &str = "Correlation coefficient r^2";

/// Runs `tool args` as a server on host `server` and a client on host `client` of
/// this process's loopback /24 (TCP port slot `slot`), each on its own simulated
/// NIC, both within `limit`; asserts both exit 0 and returns (server, client) stdout.
/// A run in which perftest's clock calibration failed is run again, up to three
/// times.
pub fn pair(
    tool: &str,
    args: &[&str],
    envs: &[(&str, &str)],
    server: u8,
    client: u8,
    slot: u16,
    limit: Duration,
) -> (String, String) {
    for attempt in 1..=3 {
        let (s, c) = pair_once(tool, args, envs, server, client, slot, limit, attempt == 3);
        let void = [&s, &c].iter().any(|(o, e)| {
            o.contains(PERFTEST_CALIBRATION_FAILED) || e.contains(PERFTEST_CALIBRATION_FAILED)
        });
        if void && attempt < 3 {
            println!(
                "{tool}: perftest's clock calibration failed, attempt {}",
                attempt + 1
            );
            continue;
        }
        return (s.0, c.0);
    }
    unreachable!("the third attempt returns")
}

/// [`pair`] once, with both outputs: ((stdout, stderr) of the server, of the
/// client). Fails the test unless both exit 0.
#[allow(dead_code)]
pub fn pair_outputs(
    tool: &str,
    args: &[&str],
    envs: &[(&str, &str)],
    hosts: (u8, u8),
    slot: u16,
    limit: Duration,
) -> ((String, String), (String, String)) {
    pair_once(tool, args, envs, hosts.0, hosts.1, slot, limit, true)
}

/// One run of [`pair`]: ((stdout, stderr) of the server, of the client). Fails
/// the test unless both exit 0, except for a calibration failure when not `last`.
#[allow(clippy::too_many_arguments)]
fn pair_once(
    tool: &str,
    args: &[&str],
    envs: &[(&str, &str)],
    server: u8,
    client: u8,
    slot: u16,
    limit: Duration,
    last: bool,
) -> ((String, String), (String, String)) {
    let (sip, cip) = (net::host(server).to_string(), net::host(client).to_string());
    let port = net::tcp_port(slot).to_string();
    let mut scmd = vec![tool, "-p", &port];
    scmd.extend_from_slice(args);
    let mut ccmd = scmd.clone();
    ccmd.push(&sip);
    let mut s = Proc::spawn(
        &format!("{tool} server"),
        &format!("sim:{sip}"),
        &scmd,
        envs,
    );
    let start = Instant::now();
    let p: u16 = port.parse().unwrap();
    while !net::tcp_listening(p) {
        if !s.running() {
            let (st, o, e) = s.finish(Duration::from_secs(5));
            panic!("{tool} server exited ({st:?}) before listening\n{o}\n{e}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{tool} server does not listen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let c = Proc::spawn(
        &format!("{tool} client"),
        &format!("sim:{cip}"),
        &ccmd,
        envs,
    );
    let (cs, co, ce) = c.finish(limit);
    let left = limit
        .saturating_sub(start.elapsed())
        .max(Duration::from_secs(10));
    let (ss, so, se) = s.finish(left);
    println!(
        "--- {tool} {} server ---\n{so}{se}\n--- client ---\n{co}{ce}",
        args.join(" ")
    );
    let calibration = [&so, &se, &co, &ce]
        .iter()
        .any(|t| t.contains(PERFTEST_CALIBRATION_FAILED));
    for (who, st, o, e) in [("client", cs, &co, &ce), ("server", ss, &so, &se)] {
        match st {
            Some(x) if x.success() => {}
            _ if calibration && !last => {}
            Some(x) => panic!("{tool} {who} failed: {x}\n{o}\n{e}"),
            None => panic!("{tool} {who} did not finish in {limit:?} (killed)\n{o}\n{e}"),
        }
    }
    ((so, se), (co, ce))
}
