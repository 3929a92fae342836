//! Pinning the polling thread to one CPU (`--cpu`), with `sched_setaffinity(2)`.

use std::io;

/// Why a thread could not be pinned.
#[derive(Debug, thiserror::Error)]
pub enum AffinityError {
    /// The CPU is not one this process may run on.
    #[error(
        "CPU {cpu} is not available to this process (allowed: {allowed}); pick one of those, \
         or widen the set with `taskset`/cgroups"
    )]
    NotAllowed {
        /// The CPU asked for.
        cpu: usize,
        /// The allowed CPUs, as a list.
        allowed: String,
    },
    /// The system call failed.
    #[error("{call} failed: {source}")]
    Os {
        /// Which call.
        call: &'static str,
        /// The error.
        source: io::Error,
    },
}

/// The number of CPUs a `cpu_set_t` holds.
const SET_SIZE: usize = libc::CPU_SETSIZE as usize;

/// The CPUs the calling thread may run on.
pub fn allowed_cpus() -> Result<Vec<usize>, AffinityError> {
    // SAFETY: cpu_set_t is plain data; all-zero bytes are a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size passed; pid 0 is the
    // calling thread.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return Err(AffinityError::Os {
            call: "sched_getaffinity",
            source: io::Error::last_os_error(),
        });
    }
    // SAFETY: CPU_ISSET reads the initialized set; every index is below CPU_SETSIZE.
    Ok((0..SET_SIZE)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// `0-3,6` notation of a sorted CPU list.
pub fn cpu_list(cpus: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

/// Pins the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> Result<(), AffinityError> {
    let allowed = allowed_cpus()?;
    if !allowed.contains(&cpu) {
        return Err(AffinityError::NotAllowed {
            cpu,
            allowed: cpu_list(&allowed),
        });
    }
    // SAFETY: as above, an all-zero cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below CPU_SETSIZE (it is in the allowed list, which only holds
    // such indices); CPU_SET writes inside `set`.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 is this thread.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r != 0 {
        return Err(AffinityError::Os {
            call: "sched_setaffinity",
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists() {
        assert_eq!(cpu_list(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8-9");
        assert_eq!(cpu_list(&[5]), "5");
        assert_eq!(cpu_list(&[]), "");
    }

    #[test]
    fn pins_a_thread_and_refuses_a_missing_cpu() {
        std::thread::spawn(|| {
            let allowed = allowed_cpus().unwrap();
            assert!(!allowed.is_empty());
            let cpu = *allowed.last().unwrap();
            pin_current_thread(cpu).unwrap();
            assert_eq!(allowed_cpus().unwrap(), vec![cpu]);
            let e = pin_current_thread(SET_SIZE - 1).unwrap_err();
            assert!(matches!(e, AffinityError::NotAllowed { .. }), "{e}");
            assert!(e.to_string().contains("not available"));
        })
        .join()
        .unwrap();
    }
}
