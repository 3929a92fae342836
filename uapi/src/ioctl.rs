//! `RDMA_VERBS_IOCTL` on a uverbs file (Linux `uverbs_ioctl.c: ib_uverbs_ioctl`): the
//! header and attribute rules, and the methods that have no write() command and that
//! libibverbs and libmlx5 need to share a context between descriptors
//! (`ibv_import_device`, `ibv_import_pd`, `ibv_import_mr`): QUERY_CONTEXT,
//! ASYNC_EVENT_ALLOC, QUERY_MR and mlx5_ib's PD_QUERY; and mlx5_ib's UAR_OBJ_ALLOC
//! and UAR_OBJ_DESTROY, with which libmlx5 allocates its UAR pages. Every other method answers
//! EPROTONOSUPPORT, as a kernel without it does, and libibverbs then speaks that
//! command's write() form (`libibverbs/cmd_fallback.c`).

use std::sync::Mutex;

use crate::abi::ioctl::{self as io, attr, ioctl_hdr};
use crate::abi::{Req, Resp};
use crate::events::{self, EventFile};
use crate::file::UFile;
use crate::{fdtab, user, Errno};

/// One attribute as the caller gave it, and where it sits in its memory.
struct Attr {
    id: u16,
    len: u16,
    flags: u16,
    data: u64,
    /// Address of the attribute in the caller's array.
    at: u64,
}

/// The attributes of one call.
struct Attrs(Vec<Attr>);

impl Attrs {
    fn get(&self, id: u16) -> Option<&Attr> {
        self.0.iter().find(|a| a.id == id)
    }

    /// Linux rejects an unknown attribute only when the caller marked it mandatory
    /// (`uverbs_process_attr`: EPROTONOSUPPORT); the others are ignored.
    fn only(&self, known: &[u16]) -> Result<(), Errno> {
        match self
            .0
            .iter()
            .any(|a| !known.contains(&a.id) && a.flags & io::ATTR_F_MANDATORY != 0)
        {
            true => Err(Errno::EPROTONOSUPPORT),
            false => Ok(()),
        }
    }

    /// A mandatory object handle (`UVERBS_ATTR_IDR`): EINVAL when missing.
    fn handle(&self, id: u16) -> Result<u32, Errno> {
        let a = self.get(id).ok_or(Errno::EINVAL)?;
        u32::try_from(a.data).map_err(|_| Errno::EINVAL)
    }

    /// Writes `bytes` to output attribute `id` (`uverbs_copy_to`: at most the room
    /// the caller gave, which must hold `min`) and marks it written
    /// (`UVERBS_ATTR_F_VALID_OUTPUT`); an absent optional attribute is skipped, an
    /// absent mandatory one is EINVAL.
    fn put(&self, id: u16, bytes: &[u8], min: usize, mandatory: bool) -> Result<(), Errno> {
        let Some(a) = self.get(id) else {
            return if mandatory {
                Err(Errno::EINVAL)
            } else {
                Ok(())
            };
        };
        if usize::from(a.len) < min {
            return Err(Errno::EINVAL);
        }
        let n = usize::from(a.len).min(bytes.len());
        user::copy_out(a.data, &bytes[..n])?;
        let flags = a.flags | io::ATTR_F_VALID_OUTPUT;
        user::copy_out(a.at + attr::flags as u64, &flags.to_ne_bytes())
    }
}

/// `ioctl(fd, RDMA_VERBS_IOCTL, arg)` on the uverbs file `file`.
pub fn ioctl(file: &Mutex<UFile>, arg: u64) -> Result<(), Errno> {
    let hdr = user::copy_in(arg, ioctl_hdr::SIZE)?;
    let h = Req(&hdr);
    let length = usize::from(h.u16(ioctl_hdr::length));
    let num = usize::from(h.u16(ioctl_hdr::num_attrs));
    if length > user::PAGE as usize || length != ioctl_hdr::SIZE + num * attr::SIZE {
        return Err(Errno::EINVAL);
    }
    if h.u64(ioctl_hdr::reserved1) != 0 || h.u32(ioctl_hdr::reserved2) != 0 {
        return Err(Errno::EPROTONOSUPPORT);
    }
    let base = arg + ioctl_hdr::SIZE as u64;
    let raw = user::copy_in(base, num * attr::SIZE)?;
    let mut attrs = Vec::with_capacity(num);
    for i in 0..num {
        let r = Req(&raw[i * attr::SIZE..(i + 1) * attr::SIZE]);
        let a = Attr {
            id: r.u16(attr::attr_id),
            len: r.u16(attr::len),
            flags: r.u16(attr::flags),
            data: r.u64(attr::data),
            at: base + (i * attr::SIZE) as u64,
        };
        // Only the mandatory flag is the caller's (`uverbs_set_attr`); an attribute
        // given twice is refused.
        if a.flags & !io::ATTR_F_MANDATORY != 0 || attrs.iter().any(|b: &Attr| b.id == a.id) {
            return Err(Errno::EINVAL);
        }
        attrs.push(a);
    }
    let attrs = Attrs(attrs);
    let object = h.u16(ioctl_hdr::object_id);
    let method = h.u16(ioctl_hdr::method_id);
    let mut f = file.lock().unwrap_or_else(|e| e.into_inner());
    let r = dispatch(&mut f, object, method, &attrs);
    if crate::trace() {
        eprintln!("uapi: ioctl object {object:#x} method {method:#x} -> {r:?}");
    }
    r
}

fn dispatch(f: &mut UFile, object: u16, method: u16, a: &Attrs) -> Result<(), Errno> {
    let known = matches!(
        (object, method),
        (io::OBJECT_DEVICE, io::METHOD_QUERY_CONTEXT)
            | (io::OBJECT_ASYNC_EVENT, io::METHOD_ASYNC_EVENT_ALLOC)
            | (io::OBJECT_MR, io::METHOD_QUERY_MR)
            | (io::OBJECT_PD, io::MLX5_METHOD_PD_QUERY)
            | (io::MLX5_OBJECT_UAR, io::MLX5_METHOD_UAR_OBJ_ALLOC)
            | (io::MLX5_OBJECT_UAR, io::MLX5_METHOD_UAR_OBJ_DESTROY)
    );
    if !known {
        return Err(Errno::EPROTONOSUPPORT);
    }
    // Every method needs the file's ucontext (`ib_uverbs_get_ucontext`).
    let ctx = f.ctx.as_mut().ok_or(Errno::EINVAL)?;
    match (object, method) {
        (io::OBJECT_DEVICE, io::METHOD_QUERY_CONTEXT) => {
            use io::QUERY_CONTEXT_NUM_COMP_VECTORS as VECTORS;
            use io::{MLX5_QUERY_CONTEXT_RESP_UCTX as UCTX, QUERY_CONTEXT_CORE_SUPPORT as CORE};
            a.only(&[VECTORS, CORE, UCTX])?;
            a.put(VECTORS, &1u32.to_ne_bytes(), 4, true)?;
            let core = u64::from(io::CORE_SUPPORT_OPTIONAL_MR_ACCESS);
            a.put(CORE, &core.to_ne_bytes(), 8, true)?;
            // mlx5_ib's `query_ucontext`: the ucontext response as GET_CONTEXT gave it.
            let room = a.get(UCTX).map_or(0, |x| usize::from(x.len));
            let d = ctx.query_context(room);
            a.put(UCTX, &d.0, 0, false)
        }
        (io::OBJECT_ASYNC_EVENT, io::METHOD_ASYNC_EVENT_ALLOC) => {
            let id = io::ASYNC_EVENT_ALLOC_FD_HANDLE;
            a.only(&[id])?;
            let at = a.get(id).ok_or(Errno::EINVAL)?.at;
            // Another async event file of the ucontext. Linux delivers the
            // context's events to its first one (`default_async_file`, the one
            // GET_CONTEXT made), so this one reports none.
            let ev = EventFile::new(crate::abi::async_event_desc::SIZE)?;
            let fd = ev.fd();
            if !fdtab::set(fd, fdtab::Kind::Async) {
                ev.close();
                return Err(Errno::EMFILE);
            }
            events::register(&ev);
            // An FD attribute of a new object: the descriptor goes in `data`.
            if let Err(e) = user::copy_out(at + attr::data as u64, &i64::from(fd).to_ne_bytes()) {
                crate::close_event_fd(fd);
                return Err(e);
            }
            Ok(())
        }
        (io::OBJECT_MR, io::METHOD_QUERY_MR) => {
            use io::{QUERY_MR_HANDLE, QUERY_MR_RESP_IOVA, QUERY_MR_RESP_LENGTH};
            use io::{QUERY_MR_RESP_LKEY, QUERY_MR_RESP_RKEY};
            a.only(&[
                QUERY_MR_HANDLE,
                QUERY_MR_RESP_LKEY,
                QUERY_MR_RESP_RKEY,
                QUERY_MR_RESP_LENGTH,
                QUERY_MR_RESP_IOVA,
            ])?;
            let (lkey, rkey, length, iova) = ctx.mr_attrs(a.handle(QUERY_MR_HANDLE)?)?;
            a.put(QUERY_MR_RESP_LKEY, &lkey.to_ne_bytes(), 4, true)?;
            a.put(QUERY_MR_RESP_RKEY, &rkey.to_ne_bytes(), 4, true)?;
            a.put(QUERY_MR_RESP_LENGTH, &length.to_ne_bytes(), 8, true)?;
            a.put(QUERY_MR_RESP_IOVA, &iova.to_ne_bytes(), 8, false)
        }
        (io::OBJECT_PD, io::MLX5_METHOD_PD_QUERY) => {
            use io::{MLX5_QUERY_PD_HANDLE as HANDLE, MLX5_QUERY_PD_RESP_PDN as PDN};
            a.only(&[HANDLE, PDN])?;
            let pdn = ctx.pd_number(a.handle(HANDLE)?)?;
            let mut r = Resp::new(4);
            r.u32(0, pdn);
            a.put(PDN, &r.0, 4, true)
        }
        (io::MLX5_OBJECT_UAR, io::MLX5_METHOD_UAR_OBJ_ALLOC) => {
            use io::MLX5_UAR_OBJ_ALLOC_MMAP_OFFSET as OFFSET;
            use io::{MLX5_UAR_OBJ_ALLOC_HANDLE as HANDLE, MLX5_UAR_OBJ_ALLOC_TYPE as TYPE};
            use io::{MLX5_UAR_OBJ_ALLOC_MMAP_LENGTH as LENGTH, MLX5_UAR_OBJ_ALLOC_PAGE_ID as ID};
            a.only(&[HANDLE, TYPE, OFFSET, LENGTH, ID])?;
            let at = a.get(HANDLE).ok_or(Errno::EINVAL)?.at;
            // A constant attribute: inline (Linux `uverbs_get_const`).
            let ty = a.get(TYPE).ok_or(Errno::EINVAL)?.data;
            if ty != u64::from(io::MLX5_UAR_ALLOC_TYPE_BF)
                && ty != u64::from(io::MLX5_UAR_ALLOC_TYPE_NC)
            {
                return Err(Errno::EOPNOTSUPP);
            }
            for id in [OFFSET, LENGTH, ID] {
                if a.get(id).is_none() {
                    return Err(Errno::EINVAL);
                }
            }
            let (h, offset, page_id) = ctx.alloc_uar()?;
            let out = user::copy_out(at + attr::data as u64, &i64::from(h).to_ne_bytes())
                .and_then(|_| a.put(OFFSET, &offset.to_ne_bytes(), 8, true))
                .and_then(|_| a.put(LENGTH, &(user::PAGE as u32).to_ne_bytes(), 4, true))
                .and_then(|_| a.put(ID, &page_id.to_ne_bytes(), 4, true));
            if let Err(e) = out {
                let _ = ctx.destroy_uar(h);
                return Err(e);
            }
            Ok(())
        }
        (io::MLX5_OBJECT_UAR, io::MLX5_METHOD_UAR_OBJ_DESTROY) => {
            let id = io::MLX5_UAR_OBJ_DESTROY_HANDLE;
            a.only(&[id])?;
            ctx.destroy_uar(a.handle(id)?)
        }
        _ => Err(Errno::EPROTONOSUPPORT),
    }
}
