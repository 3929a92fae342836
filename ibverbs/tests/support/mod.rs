//! Shared by the integration tests: where the built `libibverbs.so` is, a directory
//! that offers it as `libibverbs.so.1`, whether the Debian tools are installed, and
//! child processes that are killed when a test fails.

#![allow(dead_code)]

#[path = "../../../tests/common/net.rs"]
pub mod net;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Set to 1 (CI does) to make a missing tool a failure instead of a skipped test.
pub const REQUIRE_ENV: &str = "FERROVERBS_REQUIRE_IBVERBS_UTILS";

/// The `libibverbs.so` cargo built for this test run (the test executable lives in
/// `target/<profile>/deps`, next to it).
pub fn built_library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps directory");
    for dir in [deps, deps.parent().unwrap_or(deps)] {
        let p = dir.join("libibverbs.so");
        if p.exists() {
            return p;
        }
    }
    panic!("libibverbs.so not found next to {}", exe.display());
}

/// A directory holding the built library as `libibverbs.so.1` (for
/// `LD_LIBRARY_PATH`), private to `name` and this process: a symbolic link to the
/// library cargo built (not a copy: the library is ~30 MB and a test run creates one
/// directory per tool test), removed with its directory when dropped.
pub fn library_dir(name: &str) -> LibDir {
    let dir =
        std::env::temp_dir().join(format!("ferroverbs-ibverbs-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dst = dir.join("libibverbs.so.1");
    let _ = std::fs::remove_file(&dst);
    std::os::unix::fs::symlink(built_library(), &dst).unwrap();
    LibDir(dir)
}

/// The directory [`library_dir`] made; it dereferences to its path and is removed
/// (with the link in it) when dropped, so test runs leave nothing in the temporary
/// directory.
pub struct LibDir(PathBuf);

impl std::ops::Deref for LibDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for LibDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether `tool` can run; otherwise prints a notice (the test then returns early) or,
/// with `FERROVERBS_REQUIRE_IBVERBS_UTILS=1`, fails.
pub fn have(tool: &str) -> bool {
    let found = have_quiet(tool);
    if !found {
        if std::env::var(REQUIRE_ENV).as_deref() == Ok("1") {
            panic!("{tool} is not installed and {REQUIRE_ENV}=1 (apt-get install ibverbs-utils perftest)");
        }
        println!("SKIPPED: {tool} is not installed (apt-get install ibverbs-utils perftest; {REQUIRE_ENV}=1 makes this a failure)");
    }
    found
}

/// Whether `tool` is on the `PATH` (no notice either way).
pub fn have_quiet(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// A child process that is killed (with its output kept) if the test ends without
/// waiting for it.
pub struct Proc {
    pub name: String,
    child: Option<Child>,
    out: std::thread::JoinHandle<String>,
    err: std::thread::JoinHandle<String>,
}

impl Proc {
    /// Starts `cmd` (a tool and its arguments) on the simulated NIC `device` with the
    /// library in `lib`.
    pub fn spawn(name: &str, lib: &Path, device: &str, cmd: &[&str]) -> Proc {
        Proc::spawn_env(name, lib, device, cmd, &[])
    }

    /// [`Proc::spawn`] with the environment variables `envs` set as well.
    pub fn spawn_env(
        name: &str,
        lib: &Path,
        device: &str,
        cmd: &[&str],
        envs: &[(&str, &str)],
    ) -> Proc {
        let mut child = Command::new(cmd[0])
            .args(&cmd[1..])
            .env("LD_LIBRARY_PATH", lib)
            .env("FERROVERBS_DEVICE", device)
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: cannot start {}: {e}", cmd[0]));
        let mut so = child.stdout.take().unwrap();
        let mut se = child.stderr.take().unwrap();
        let out = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = so.read_to_string(&mut s);
            s
        });
        let err = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = se.read_to_string(&mut s);
            s
        });
        Proc {
            name: name.to_string(),
            child: Some(child),
            out,
            err,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// The exit status, if it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Waits up to `limit` for the exit; kills it after that. Returns the status (None
    /// when it had to be killed), stdout and stderr.
    pub fn finish(mut self, limit: Duration) -> (Option<ExitStatus>, String, String) {
        let mut child = self.child.take().unwrap();
        let start = Instant::now();
        let status = loop {
            if let Ok(Some(s)) = child.try_wait() {
                break Some(s);
            }
            if start.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // Swap in finished handles so that Drop has nothing left to do.
        let out = std::mem::replace(&mut self.out, std::thread::spawn(String::new));
        let err = std::mem::replace(&mut self.err, std::thread::spawn(String::new));
        (
            status,
            out.join().unwrap_or_default(),
            err.join().unwrap_or_default(),
        )
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs `cmd` to completion (at most `limit`) and asserts exit status 0; returns stdout.
pub fn run_ok(name: &str, lib: &Path, device: &str, cmd: &[&str], limit: Duration) -> String {
    let p = Proc::spawn(name, lib, device, cmd);
    let (status, out, err) = p.finish(limit);
    println!("--- {name} ---\n{out}{err}");
    match status {
        Some(s) if s.success() => out,
        Some(s) => panic!("{name} failed: {s}\n{out}\n{err}"),
        None => panic!("{name} did not finish in {limit:?}\n{out}\n{err}"),
    }
}

/// Runs a server/client pair of `tool` (the server on host `server` of this process's
/// loopback /24, the client on host `client` connecting to it over TCP port slot
/// `slot`, see [`net`]), both with `args`; asserts both exit 0 within `limit`; returns
/// (server stdout, client stdout).
#[allow(clippy::too_many_arguments)]
pub fn pair(
    name: &str,
    lib: &Path,
    tool: &str,
    args: &[&str],
    server: u8,
    client: u8,
    slot: u16,
    limit: Duration,
) -> (String, String) {
    pair_env(name, lib, tool, args, &[], server, client, slot, limit)
}

/// What perftest prints when its clock calibration fails: `get_cpu_mhz` fits the
/// cycle counter against `gettimeofday` over 200 busy-wait samples and gives up below
/// r^2 = 0.9, returning 0 (perftest `src/get_clock.c`). A bandwidth report then exits
/// with "Can't produce a report" (`print_report_bw`); a latency report goes on and
/// divides by the zero rate (`print_report_lat`: infinite latencies, exit status 0).
/// Being descheduled between a sample's clock reads (a loaded 2-core machine) is
/// enough; it says nothing about the device, and the run's numbers are void.
pub const PERFTEST_CALIBRATION_FAILED: &str = "Correlation coefficient r^2";

/// How many times [`pair_env`] runs a pair in which a perftest calibration failed
/// ([`PERFTEST_CALIBRATION_FAILED`]): each run calibrates afresh, so three
/// independent calibration failures in a row are needed to fail the test; a run
/// without one is judged (and a failure fails the test) at once.
const CALIBRATION_ATTEMPTS: usize = 3;

/// [`pair`] with the environment variables `envs` set in both processes.
#[allow(clippy::too_many_arguments)]
pub fn pair_env(
    name: &str,
    lib: &Path,
    tool: &str,
    args: &[&str],
    envs: &[(&str, &str)],
    server: u8,
    client: u8,
    slot: u16,
    limit: Duration,
) -> (String, String) {
    for attempt in 1.. {
        let runs = pair_once(name, lib, tool, args, envs, server, client, slot, limit);
        let calibration = runs
            .iter()
            .any(|(_, _, out, err)| calibration_failed(out, err));
        if calibration && attempt < CALIBRATION_ATTEMPTS {
            println!(
                "{name}: perftest's clock calibration failed (r^2 < 0.9), the run's \
                 numbers are void: attempt {} of {CALIBRATION_ATTEMPTS}",
                attempt + 1
            );
            continue;
        }
        for (who, st, out, err) in &runs {
            match st {
                Some(s) if s.success() => {}
                Some(s) => panic!("{name} {who} failed: {s}\n{out}\n{err}"),
                None => panic!("{name} {who} did not finish in {limit:?} (killed)\n{out}\n{err}"),
            }
        }
        let [(_, _, co, _), (_, _, so, _)] = runs;
        return (so, co);
    }
    unreachable!("the attempts loop returns or panics")
}

/// Whether a tool that printed `out` and `err` says perftest's clock calibration
/// failed ([`PERFTEST_CALIBRATION_FAILED`]), whatever its exit status.
pub fn calibration_failed(out: &str, err: &str) -> bool {
    out.contains(PERFTEST_CALIBRATION_FAILED) || err.contains(PERFTEST_CALIBRATION_FAILED)
}

/// One run of a [`pair_env`] pair: (who, exit status or `None` if killed, stdout,
/// stderr) of the client, then of the server.
#[allow(clippy::too_many_arguments)]
fn pair_once(
    name: &str,
    lib: &Path,
    tool: &str,
    args: &[&str],
    envs: &[(&str, &str)],
    server: u8,
    client: u8,
    slot: u16,
    limit: Duration,
) -> [(&'static str, Option<ExitStatus>, String, String); 2] {
    let (server_ip, client_ip) = (net::host(server).to_string(), net::host(client).to_string());
    let port = net::tcp_port(slot);
    let port_s = port.to_string();
    let mut scmd = vec![tool, "-p", &port_s];
    scmd.extend_from_slice(args);
    let mut ccmd = scmd.clone();
    ccmd.push(&server_ip);
    let mut server = Proc::spawn_env(
        &format!("{name} server"),
        lib,
        &format!("sim:{server_ip}"),
        &scmd,
        envs,
    );
    let start = Instant::now();
    while !net::tcp_listening(port) {
        if !server.running() {
            let (s, o, e) = server.finish(Duration::from_secs(5));
            panic!("{name} server exited ({s:?}) before listening on {port}\n{o}\n{e}");
        }
        if start.elapsed() > Duration::from_secs(60) {
            panic!("{name} server does not listen on {port} after 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut client = Proc::spawn_env(
        &format!("{name} client"),
        lib,
        &format!("sim:{client_ip}"),
        &ccmd,
        envs,
    );
    // Wait for both; when one fails, the other would wait for it forever: stop it.
    let t0 = Instant::now();
    loop {
        let (c, s) = (client.exited(), server.exited());
        let failed = [c, s]
            .iter()
            .any(|x| matches!(x, Some(st) if !st.success()));
        if (c.is_some() && s.is_some()) || failed || t0.elapsed() > limit {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let grace = Duration::from_secs(10);
    let (cs, co, ce) = client.finish(grace);
    let (ss, so, se) = server.finish(grace);
    println!("--- {name} server ---\n{so}{se}\n--- {name} client ---\n{co}{ce}");
    [("client", cs, co, ce), ("server", ss, so, se)]
}
