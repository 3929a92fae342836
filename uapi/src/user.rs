//! The application's memory as a kernel sees it: copies in and out that fail with
//! EFAULT on an address the process has not mapped (`copy_from_user`/`copy_to_user`),
//! through `process_vm_readv`/`process_vm_writev` on this process, and the check that
//! a range the device will access is mapped (`get_user_pages` failing is EFAULT).

use crate::Errno;

/// Copies `len` bytes from the application's address `addr`.
pub fn copy_in(addr: u64, len: usize) -> Result<Vec<u8>, Errno> {
    let mut v = vec![0u8; len];
    if len == 0 {
        return Ok(v);
    }
    let local = libc::iovec {
        iov_base: v.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: `local` is our own buffer of `len` bytes; the kernel checks `remote`.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n == len as isize {
        Ok(v)
    } else {
        Err(Errno::EFAULT)
    }
}

/// Copies `data` to the application's address `addr`.
pub fn copy_out(addr: u64, data: &[u8]) -> Result<(), Errno> {
    if data.is_empty() {
        return Ok(());
    }
    let local = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: `local` is our own buffer; the kernel checks `remote`.
    let n = unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n == data.len() as isize {
        Ok(())
    } else {
        Err(Errno::EFAULT)
    }
}

/// 4 KiB, the page size of every mapping this layer gives the device.
pub const PAGE: u64 = 4096;

/// The most pages one range may span (64 GiB): a larger registration is ENOMEM.
pub const MAX_PAGES: u64 = 1 << 24;

/// Checks that `[addr, addr + len)` is mapped in the process (`mincore` fails with
/// ENOMEM on a hole), as pinning it would: EFAULT otherwise, EINVAL for an empty or
/// wrapping range, ENOMEM past [`MAX_PAGES`].
pub fn check_mapped(addr: u64, len: u64) -> Result<(), Errno> {
    let end = addr
        .checked_add(len)
        .filter(|_| len > 0)
        .ok_or(Errno::EINVAL)?;
    if addr == 0 {
        return Err(Errno::EFAULT);
    }
    let first = addr & !(PAGE - 1);
    let pages = (end - first).div_ceil(PAGE);
    if pages > MAX_PAGES {
        return Err(Errno::ENOMEM);
    }
    let pages = pages as usize;
    let mut vec = vec![0u8; pages];
    // SAFETY: `vec` holds one byte per page of the range; mincore only reads the page
    // tables.
    let r = unsafe {
        libc::mincore(
            first as usize as *mut libc::c_void,
            pages * PAGE as usize,
            vec.as_mut_ptr(),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(Errno::EFAULT)
    }
}

/// Checks that every byte of `[addr, addr + len)` is readable by the process (what
/// faulting the pages in needs; a `PROT_NONE` page is mapped to `mincore` but not
/// readable): EFAULT otherwise. Reads the range through the kernel 64 KiB at a time
/// into a scratch buffer, so nothing of the process is touched.
pub fn check_readable(addr: u64, len: u64) -> Result<(), Errno> {
    const CHUNK: u64 = 64 << 10;
    let end = addr.checked_add(len).ok_or(Errno::EFAULT)?;
    let mut at = addr;
    while at < end {
        let n = (end - at).min(CHUNK);
        copy_in(at, n as usize)?;
        at += n;
    }
    Ok(())
}
