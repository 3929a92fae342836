//! Tests that run as several OS processes: this test binary re-executed, in the role
//! named by an environment variable, as its test `child`.
#![allow(dead_code)]

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Starts this test binary's test `child` with `env` set to `args`.
pub fn spawn(env: &str, args: &str) -> Child {
    spawn_with(env, args, &[])
}

/// [`spawn`] with the variables `extra` set too.
pub fn spawn_with(env: &str, args: &str, extra: &[(&str, &str)]) -> Child {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["child", "--exact", "--nocapture", "--test-threads=1"])
        .env(env, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in extra {
        c.env(k, v);
    }
    c.spawn().unwrap()
}

/// Waits for `c` (killed after `limit`), prints and returns its standard output
/// (after `out`, what was read of it already); fails the test on a bad exit.
pub fn finish(name: &str, mut c: Child, mut out: String, limit: Duration) -> String {
    let start = Instant::now();
    loop {
        if let Some(status) = c.try_wait().unwrap() {
            if let Some(mut so) = c.stdout.take() {
                so.read_to_string(&mut out).unwrap();
            }
            let mut err = String::new();
            c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            println!("--- {name} ---\n{out}{err}");
            assert!(status.success(), "{name} failed: {status}\n{out}\n{err}");
            return out;
        }
        if start.elapsed() > limit {
            let _ = c.kill();
            panic!("{name} did not finish in {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
