//! An open `/dev/infiniband/uverbs0` (Linux's `ib_uverbs_file`) and the write()
//! commands on it, as `drivers/infiniband/core/uverbs_main.c: ib_uverbs_write`
//! checks them and `uverbs_cmd.c` with `hw/mlx5` executes them: the header rules,
//! the response copies, and one object table per file.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ferroverbs_hw::datapath::uar::uar_bar_offset;

use crate::abi::{self, cmd, Req};
use crate::nic::Nic;
use crate::user;
use crate::verbs::Ucontext;
use crate::Errno;

/// The largest command accepted (a legacy command's `in_words` is 16 bits of 4-byte
/// words; an extended one has two 16-bit counts of 8-byte words).
const MAX_COMMAND: usize = 24 + 2 * 0xffff * 8;

/// A decoded command: its core and driver (udata) parts and where the responses go.
pub struct Cmd<'a> {
    /// The command number (without flags).
    pub number: u32,
    /// Whether it came as an extended command.
    pub ex: bool,
    /// The core request (for legacy commands, starting with the `response` field).
    pub core: Req<'a>,
    /// The driver's request data (mlx5_ib's struct), possibly empty.
    pub udata: Req<'a>,
    /// Length of `udata`.
    pub udata_len: usize,
    /// Where the core response goes, and its length.
    pub resp: (u64, usize),
    /// Where the driver response goes, and its length.
    pub uresp: (u64, usize),
}

impl Cmd<'_> {
    /// Copies the core response: at most the length the caller gave (current kernels
    /// copy `min(out_len, sizeof resp)` and zero the rest, `uverbs_response`).
    pub fn respond(&self, core: &abi::Resp) -> Result<(), Errno> {
        let (addr, len) = self.resp;
        let mut out = core.0.clone();
        out.resize(len, 0);
        user::copy_out(addr, &out)
    }

    /// Copies the driver response (`ib_copy_to_udata` of at most the room given).
    pub fn respond_udata(&self, drv: &abi::Resp) -> Result<(), Errno> {
        let (addr, len) = self.uresp;
        let n = len.min(drv.0.len());
        user::copy_out(addr, &drv.0[..n])
    }
}

/// The response sizes of the legacy commands that have one (`has_resp`), and each
/// core request's size (`req_size`), from `rdma/ib_user_verbs.h`.
fn legacy_sizes(number: u32) -> Option<(usize, Option<usize>)> {
    use abi::*;
    Some(match number {
        cmd::GET_CONTEXT => (get_context::SIZE, Some(get_context_resp::SIZE)),
        cmd::QUERY_DEVICE => (query_device::SIZE, Some(query_device_resp::SIZE)),
        cmd::QUERY_PORT => (query_port::SIZE, Some(query_port_resp::SIZE)),
        cmd::ALLOC_PD => (alloc_pd::SIZE, Some(alloc_pd_resp::SIZE)),
        cmd::DEALLOC_PD => (dealloc_pd::SIZE, None),
        cmd::CREATE_AH => (create_ah::SIZE, Some(create_ah_resp::SIZE)),
        cmd::DESTROY_AH => (destroy_ah::SIZE, None),
        cmd::REG_MR => (reg_mr::SIZE, Some(reg_mr_resp::SIZE)),
        cmd::DEREG_MR => (dereg_mr::SIZE, None),
        cmd::REREG_MR => (rereg_mr::SIZE, Some(rereg_mr_resp::SIZE)),
        cmd::ALLOC_MW => (alloc_mw::SIZE, Some(alloc_mw_resp::SIZE)),
        cmd::DEALLOC_MW => (dealloc_mw::SIZE, None),
        cmd::CREATE_COMP_CHANNEL => (
            create_comp_channel::SIZE,
            Some(create_comp_channel_resp::SIZE),
        ),
        cmd::CREATE_CQ => (create_cq::SIZE, Some(create_cq_resp::SIZE)),
        cmd::RESIZE_CQ => (resize_cq::SIZE, Some(resize_cq_resp::SIZE)),
        cmd::DESTROY_CQ => (destroy_cq::SIZE, Some(destroy_cq_resp::SIZE)),
        cmd::CREATE_QP => (create_qp::SIZE, Some(create_qp_resp::SIZE)),
        cmd::QUERY_QP => (query_qp::SIZE, Some(query_qp_resp::SIZE)),
        cmd::MODIFY_QP => (modify_qp::SIZE, None),
        cmd::DESTROY_QP => (destroy_qp::SIZE, Some(destroy_qp_resp::SIZE)),
        cmd::CREATE_SRQ => (create_srq::SIZE, Some(create_srq_resp::SIZE)),
        cmd::MODIFY_SRQ => (modify_srq::SIZE, None),
        cmd::QUERY_SRQ => (query_srq::SIZE, Some(query_srq_resp::SIZE)),
        cmd::DESTROY_SRQ => (destroy_srq::SIZE, Some(destroy_srq_resp::SIZE)),
        _ => return None,
    })
}

/// The core request and response sizes of the extended commands implemented.
fn ex_sizes(number: u32) -> Option<(usize, usize)> {
    use abi::*;
    Some(match number {
        cmd::QUERY_DEVICE => (ex_query_device::SIZE, ex_query_device_resp::SIZE),
        cmd::CREATE_CQ => (ex_create_cq::SIZE, ex_create_cq_resp::SIZE),
        cmd::CREATE_QP => (ex_create_qp::SIZE, ex_create_qp_resp::SIZE),
        cmd::MODIFY_QP => (ex_modify_qp::SIZE, 8),
        _ => return None,
    })
}

/// Whether a legacy command number exists in `ib_user_verbs.h` (known but not
/// implemented here: EOPNOTSUPP; unknown: EINVAL).
fn known_legacy(number: u32) -> bool {
    number <= cmd::OPEN_QP && !matches!(number, 6 | 7 | 10 | 12 | 15 | 22)
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The size of the memfd behind a uverbs descriptor: every page offset `mlx5_ib`
/// hands out, the static encodings (`command << 8 | index`, commands below 256) and
/// the allocated UAR pages from [`crate::verbs::MMAP_OFFSET_START`] on. Sparse: only
/// the pages mapped and touched take memory.
pub const BACKING_SIZE: u64 =
    (crate::verbs::MMAP_OFFSET_START + crate::verbs::MAX_BFREGS as u64) * user::PAGE;

/// Creates the memfd that backs a uverbs descriptor ([`BACKING_SIZE`] long), with
/// `O_CLOEXEC` if `flags` has it.
pub fn create_backing(flags: i32) -> Result<i32, Errno> {
    let mfd = if flags & libc::O_CLOEXEC != 0 {
        libc::MFD_CLOEXEC
    } else {
        0
    };
    // SAFETY: a NUL-terminated name; no memory is passed otherwise.
    let fd = unsafe { libc::memfd_create(c"ferroverbs-uverbs0".as_ptr(), mfd) };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: the descriptor just made.
    if unsafe { libc::ftruncate(fd, BACKING_SIZE as libc::off_t) } != 0 {
        let e = Errno::last();
        // SAFETY: as above.
        unsafe { crate::real::close(fd) };
        return Err(e);
    }
    Ok(fd)
}

/// A shadow mapping: the layer's own view of one UAR page file offset.
struct Shadow {
    pgoff: u64,
    addr: usize,
}

/// An open uverbs file.
pub struct UFile {
    /// Unique in the process (the doorbell watch's key).
    pub id: u64,
    /// The ucontext, after GET_CONTEXT.
    pub ctx: Option<Ucontext>,
    /// Descriptors naming the file (`dup` gives another: Linux's `struct file`
    /// reference count); the last close releases it.
    fds: u32,
    /// The layer's own mappings of the context's UAR pages ([`UFile::sync_uars`]).
    shadows: Vec<Shadow>,
}

impl UFile {
    fn new() -> UFile {
        UFile {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            ctx: None,
            fds: 1,
            shadows: Vec::new(),
        }
    }

    /// The page offsets of the context's UAR pages: each static page at its
    /// regular, WC and NC offsets (`mlx5_ib_mmap`), and each allocated one.
    fn uar_pgoffs(&self) -> Vec<u64> {
        let Some(ctx) = self.ctx.as_ref() else {
            return Vec::new();
        };
        let mut v: Vec<u64> = (0..u64::from(ctx.uar_pages()))
            .flat_map(|i| [0u64, 2, 3].map(|c| (c << 8) | i))
            .collect();
        v.extend(ctx.uar_pgoffs());
        v
    }

    /// Maps, through descriptor `fd` of this file, every UAR page of the context
    /// that has no shadow yet, and unmaps the shadows of pages that are gone, after
    /// a command that may have made or destroyed one (GET_CONTEXT, UAR_OBJ_ALLOC,
    /// UAR_OBJ_DESTROY). A program whose `mmap` bypasses this library maps the same
    /// memfd pages; the watcher reads them through these ([`crate::doorbell`]).
    ///
    /// Over VFIO there are none: the application's UAR pages are the BAR's, and a
    /// memfd page mapped behind the library's back is not one (see docs/uapi.md).
    pub fn sync_uars(&mut self, fd: i32) {
        let on_sim = self.ctx.as_ref().is_some_and(|c| c.nic().sim.is_some());
        let want = if on_sim {
            self.uar_pgoffs()
        } else {
            Vec::new()
        };
        let gone: Vec<usize> = self
            .shadows
            .iter()
            .filter(|s| !want.contains(&s.pgoff))
            .map(|s| s.addr)
            .collect();
        for addr in gone {
            crate::doorbell::remove_shadow(addr);
            // SAFETY: the layer's own one-page mapping, no longer watched.
            unsafe { libc::syscall(libc::SYS_munmap, addr, user::PAGE as usize) };
            self.shadows.retain(|s| s.addr != addr);
        }
        for pgoff in want {
            if self.shadows.iter().any(|s| s.pgoff == pgoff) {
                continue;
            }
            // SAFETY: a new shared mapping of the memfd (the raw system call: the
            // layer's private view need not pass through anyone's mmap hooks).
            let p = unsafe {
                libc::syscall(
                    libc::SYS_mmap,
                    std::ptr::null_mut::<libc::c_void>(),
                    user::PAGE as usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    (pgoff * user::PAGE) as libc::off_t,
                )
            };
            if p < 0 {
                if crate::trace() {
                    eprintln!(
                        "uapi: no shadow of UAR offset {pgoff:#x}: {:?}",
                        Errno::last()
                    );
                }
                continue;
            }
            let addr = p as usize;
            self.shadows.push(Shadow { pgoff, addr });
            crate::doorbell::add_shadow(self.id, addr, crate::doorbell::uar_key(pgoff));
        }
    }

    /// `write(2)` of `count` bytes at the application's `buf`.
    pub fn write(&mut self, nic: &'static Nic, buf: u64, count: usize) -> Result<usize, Errno> {
        if count < abi::cmd_hdr::SIZE {
            return Err(Errno::EINVAL);
        }
        if count > MAX_COMMAND {
            return Err(Errno::EINVAL);
        }
        let bytes = user::copy_in(buf, count)?;
        let hdr = Req(&bytes);
        let command = hdr.u32(abi::cmd_hdr::command);
        let in_words = usize::from(hdr.u16(abi::cmd_hdr::in_words));
        let out_words = usize::from(hdr.u16(abi::cmd_hdr::out_words));
        let flags = command & cmd::FLAGS_MASK;
        let number = command & cmd::COMMAND_MASK;
        if flags & !cmd::FLAG_EXTENDED != 0 || command & !(cmd::FLAGS_MASK | cmd::COMMAND_MASK) != 0
        {
            return Err(Errno::EINVAL);
        }
        let ex = flags == cmd::FLAG_EXTENDED;
        let mut ex_core: Vec<u8>;
        // Linux `verify_hdr`, then `uverbs_request_start`-like splitting.
        let c = if ex {
            if count < abi::cmd_hdr::SIZE + abi::ex_cmd_hdr::SIZE {
                return Err(Errno::EINVAL);
            }
            let x = Req(&bytes[abi::cmd_hdr::SIZE..]);
            let response = x.u64(abi::ex_cmd_hdr::response);
            let pin = usize::from(x.u16(abi::ex_cmd_hdr::provider_in_words));
            let pout = usize::from(x.u16(abi::ex_cmd_hdr::provider_out_words));
            if x.u32(abi::ex_cmd_hdr::cmd_hdr_reserved) != 0 {
                return Err(Errno::EINVAL);
            }
            if (response != 0) != (out_words != 0 || pout != 0) {
                return Err(Errno::EINVAL);
            }
            if (in_words + pin) * 8 + 24 != count {
                return Err(Errno::EINVAL);
            }
            let Some((req_size, resp_size)) = ex_sizes(number) else {
                return Err(if known_legacy(number) || number >= 50 {
                    Errno::EOPNOTSUPP
                } else {
                    Errno::EINVAL
                });
            };
            if out_words * 8 < resp_size && number != cmd::MODIFY_QP {
                return Err(Errno::ENOSPC);
            }
            let core_end = 24 + in_words * 8;
            // A shorter core request reads as zero-extended (`uverbs_request`).
            ex_core = bytes[24..core_end].to_vec();
            if ex_core.len() < req_size {
                ex_core.resize(req_size, 0);
            }
            Cmd {
                number,
                ex,
                core: Req(&ex_core),
                udata: Req(&bytes[core_end..]),
                udata_len: pin * 8,
                resp: (response, out_words * 8),
                uresp: (response.wrapping_add((out_words * 8) as u64), pout * 8),
            }
        } else {
            if in_words * 4 != count {
                return Err(Errno::EINVAL);
            }
            let Some((req_size, resp_size)) = legacy_sizes(number) else {
                return Err(if known_legacy(number) {
                    Errno::EOPNOTSUPP
                } else {
                    Errno::EINVAL
                });
            };
            let body = &bytes[abi::cmd_hdr::SIZE..];
            if body.len() < req_size {
                return Err(Errno::ENOSPC);
            }
            let out_len = out_words * 4;
            let (resp, uresp) = match resp_size {
                Some(rs) => {
                    if out_len < rs {
                        return Err(Errno::ENOSPC);
                    }
                    let response = Req(body).u64(0);
                    (
                        (response, rs),
                        (response.wrapping_add(rs as u64), out_len - rs),
                    )
                }
                None => ((0, 0), (0, 0)),
            };
            Cmd {
                number,
                ex,
                core: Req(&body[..req_size]),
                udata: Req(&body[req_size..]),
                udata_len: body.len() - req_size,
                resp,
                uresp,
            }
        };
        if c.number == cmd::GET_CONTEXT && !ex {
            if self.ctx.is_some() {
                return Err(Errno::EINVAL);
            }
            self.ctx = Some(Ucontext::create(nic, self.id, &c)?);
            return Ok(count);
        }
        let Some(ctx) = self.ctx.as_mut() else {
            return Err(Errno::EINVAL);
        };
        let r = ctx.execute(&c);
        if crate::trace() {
            eprintln!("uapi: command {} ex {} -> {r:?}", c.number, c.ex);
        }
        r.map(|()| count)
    }

    /// `mmap(2)` of the file (descriptor `fd`) at `offset` (UAR pages): the memfd's
    /// page at that offset, which the layer's shadow of the UAR page shares.
    pub fn mmap(&mut self, fd: i32, len: usize, prot: i32, offset: i64) -> Result<usize, Errno> {
        let ctx = self.ctx.as_ref().ok_or(Errno::EINVAL)?;
        let page = user::PAGE as i64;
        if offset < 0 || offset % page != 0 {
            return Err(Errno::EINVAL);
        }
        let pgoff = (offset / page) as u64;
        // A UAR page the library allocated (`mlx5_ib_mmap_offset`), else the
        // static pages' encoding.
        let dynamic = pgoff >= crate::verbs::MMAP_OFFSET_START;
        if dynamic && (len != user::PAGE as usize || !ctx.uar_offset(pgoff)) {
            return Err(Errno::EINVAL);
        }
        let (command, index) = if dynamic { (0, 0) } else { mmap_command(pgoff) };
        let vfio = ctx.nic().vfio();
        match command {
            // MLX5_IB_MMAP_WC_PAGE without write-combining: Linux `uar_mmap` answers
            // EPERM (`!dev->wc_support`), and libmlx5 maps the NC page instead.
            2 if vfio.is_some() => return Err(Errno::EPERM),
            // MLX5_IB_MMAP_REGULAR_PAGE, MLX5_IB_MMAP_WC_PAGE, MLX5_IB_MMAP_NC_PAGE.
            0 | 2 | 3 => {}
            // MLX5_IB_MMAP_CORE_CLOCK over VFIO: the init segment's page itself,
            // read-only (Linux maps it uncached and refuses VM_WRITE).
            5 if vfio.is_some() => {
                if len != user::PAGE as usize {
                    return Err(Errno::EINVAL);
                }
                if prot & (libc::PROT_WRITE | libc::PROT_EXEC) != 0 {
                    return Err(Errno::EPERM);
                }
                return map_bar_page(vfio, crate::clock::CORE_CLOCK_PAGE, false);
            }
            // MLX5_IB_MMAP_CORE_CLOCK, MLX5_IB_MMAP_CLOCK_INFO.
            5 => return crate::clock::map_core_clock(len, prot),
            7 => return crate::clock::map_clock_info(index, len, prot),
            // MLX5_IB_MMAP_GET_CONTIGUOUS_PAGES: Linux answers ENOSYS.
            1 => return Err(Errno::ENOSYS),
            _ => return Err(Errno::EINVAL),
        }
        if !dynamic && (len != user::PAGE as usize || index >= u64::from(ctx.uar_pages())) {
            return Err(Errno::EINVAL);
        }
        if prot & libc::PROT_EXEC != 0 {
            return Err(Errno::EPERM);
        }
        if vfio.is_some() {
            // Every UAR page of every context is the NIC's one UAR (the one the QPs
            // and CQs name): its BAR page, where libmlx5's stores are the device's
            // MMIO writes, as from Linux's `mlx5_ib_mmap`.
            return map_bar_page(vfio, uar_bar_offset(ctx.nic().uar), true);
        }
        // SAFETY: a new shared mapping of the memfd page; no existing memory is
        // touched.
        let p = unsafe {
            crate::real::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        crate::doorbell::add_page(self.id, p as usize, crate::doorbell::uar_key(pgoff));
        Ok(p as usize)
    }

    /// The file's last close: every object is destroyed (Linux
    /// `ib_uverbs_cleanup_ucontext`) and the shadows unmapped.
    pub fn release(&mut self) {
        crate::doorbell::remove_file(self.id);
        for s in self.shadows.drain(..) {
            // SAFETY: the layer's own one-page mapping, no longer watched.
            unsafe { libc::syscall(libc::SYS_munmap, s.addr, user::PAGE as usize) };
        }
        if let Some(mut c) = self.ctx.take() {
            c.destroy_all();
        }
    }
}

/// A BAR page mapped into the program (over VFIO), its errno Linux's `mlx5_ib_mmap`
/// would give when the mapping fails (`io_remap_pfn_range`: EAGAIN, ENOMEM).
fn map_bar_page(
    vfio: Option<&ferroverbs::vfio::VfioBus>,
    off: usize,
    writable: bool,
) -> Result<usize, Errno> {
    let bus = vfio.ok_or(Errno::ENODEV)?;
    bus.map_bar0_page(off, writable)
        .map(|p| p.as_ptr() as usize)
        .map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::ENOMEM)))
}

/// The command and index of an mmap page offset (rdma-core `providers/mlx5/mlx5.h:
/// set_command, set_index, set_extended_index`; Linux `hw/mlx5/main.c: get_command,
/// get_index, get_extended_index`): command in bits 8..16, index in bits 0..8 with
/// its higher bits from 16 up.
pub fn mmap_command(pgoff: u64) -> (u64, u64) {
    ((pgoff >> 8) & 0xff, (pgoff & 0xff) | ((pgoff >> 16) << 8))
}

static FILES: Mutex<Option<HashMap<i32, Arc<Mutex<UFile>>>>> = Mutex::new(None);

/// Registers a new uverbs file under descriptor `fd`.
pub fn open(fd: i32) {
    let mut g = FILES.lock().unwrap_or_else(|e| e.into_inner());
    g.get_or_insert_with(HashMap::new)
        .insert(fd, Arc::new(Mutex::new(UFile::new())));
}

/// The uverbs file of descriptor `fd`.
pub fn get(fd: i32) -> Option<Arc<Mutex<UFile>>> {
    let g = FILES.lock().unwrap_or_else(|e| e.into_inner());
    g.as_ref()?.get(&fd).cloned()
}

/// Descriptor `new` names the file of `old` too (`dup`, `dup2`, `fcntl(F_DUPFD)`);
/// false if `old` is not a uverbs file.
pub fn dup(old: i32, new: i32) -> bool {
    let mut g = FILES.lock().unwrap_or_else(|e| e.into_inner());
    let Some(m) = g.as_mut() else {
        return false;
    };
    let Some(f) = m.get(&old).cloned() else {
        return false;
    };
    f.lock().unwrap_or_else(|e| e.into_inner()).fds += 1;
    m.insert(new, f);
    true
}

/// Forgets descriptor `fd`, and releases its file when no other descriptor names it.
pub fn close(fd: i32) {
    let f = {
        let mut g = FILES.lock().unwrap_or_else(|e| e.into_inner());
        g.as_mut().and_then(|m| m.remove(&fd))
    };
    if let Some(f) = f {
        let mut f = f.lock().unwrap_or_else(|e| e.into_inner());
        f.fds = f.fds.saturating_sub(1);
        if f.fds == 0 {
            f.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mmap_offsets_decode_as_mlx5_ib_encodes_them() {
        // UAR page 5, regular: offset 5 pages.
        assert_eq!(mmap_command(5), (0, 5));
        // MLX5_SHUT_UP_BF's NC page 2: (3 << 8 | 2).
        assert_eq!(mmap_command((3 << 8) | 2), (3, 2));
        // The core clock: 5 << 8.
        assert_eq!(mmap_command(5 << 8), (5, 0));
        // ALLOC_WC with index 0x1ff: low byte in 0..8, the rest from bit 16.
        assert_eq!(mmap_command((6 << 8) | 0xff | (1 << 16)), (6, 0x1ff));
    }

    #[test]
    fn legacy_and_extended_command_tables() {
        assert_eq!(legacy_sizes(cmd::GET_CONTEXT), Some((8, Some(8))));
        assert_eq!(legacy_sizes(cmd::MODIFY_QP), Some((112, None)));
        assert_eq!(legacy_sizes(cmd::ALLOC_MW), Some((16, Some(8))));
        assert_eq!(legacy_sizes(cmd::OPEN_XRCD), None);
        assert!(known_legacy(cmd::OPEN_XRCD) && known_legacy(cmd::OPEN_QP));
        assert!(!known_legacy(6) && !known_legacy(41) && !known_legacy(200));
        assert_eq!(ex_sizes(cmd::QUERY_DEVICE), Some((8, 304)));
        assert_eq!(ex_sizes(50), None);
    }
}
