//! `RDMA_VERBS_IOCTL` on a uverbs file (Linux `uverbs_ioctl.c: ib_uverbs_ioctl`): the
//! header and attribute rules, and the methods that have no write() command and that
//! libibverbs and libmlx5 need to share a context between descriptors
//! (`ibv_import_device`, `ibv_import_pd`, `ibv_import_mr`): QUERY_CONTEXT,
//! ASYNC_EVENT_ALLOC, QUERY_MR and mlx5_ib's PD_QUERY; and mlx5_ib's UAR_OBJ_ALLOC
//! and UAR_OBJ_DESTROY, with which libmlx5 allocates its UAR pages; and CQ_CREATE and
//! QP_CREATE, the only way an imported context makes those objects (they run the
//! same code as the write() commands). Every other method answers
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

    /// An inline value (`len` ≤ 8), or `default` when absent.
    fn value(&self, id: u16, default: u64) -> Result<u64, Errno> {
        match self.get(id) {
            None => Ok(default),
            Some(a) if a.len <= 8 => Ok(a.data),
            Some(_) => Err(Errno::EINVAL),
        }
    }

    /// The bytes of input attribute `id` (inline up to 8 bytes, else at `data`);
    /// empty when absent.
    fn bytes(&self, id: u16) -> Result<Vec<u8>, Errno> {
        match self.get(id) {
            None => Ok(Vec::new()),
            Some(a) if a.len <= 8 => Ok(a.data.to_ne_bytes()[..usize::from(a.len)].to_vec()),
            Some(a) => user::copy_in(a.data, usize::from(a.len)),
        }
    }

    /// The caller's buffer of output attribute `id`: (address, length), (0, 0) when
    /// absent.
    fn out(&self, id: u16) -> (u64, usize) {
        self.get(id)
            .map_or((0, 0), |a| (a.data, usize::from(a.len)))
    }

    /// Writes the handle of a new object into IDR attribute `id` (Linux puts the id
    /// in the attribute's `data`).
    fn new_handle(&self, id: u16, h: u32) -> Result<(), Errno> {
        let a = self.get(id).ok_or(Errno::EINVAL)?;
        user::copy_out(a.at + attr::data as u64, &i64::from(h).to_ne_bytes())
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
            | (io::OBJECT_DEVICE, io::MLX5_METHOD_QUERY_PORT)
            | (io::OBJECT_ASYNC_EVENT, io::METHOD_ASYNC_EVENT_ALLOC)
            | (io::OBJECT_MR, io::METHOD_QUERY_MR)
            | (io::OBJECT_MR, io::METHOD_ADVISE_MR)
            | (io::OBJECT_PD, io::MLX5_METHOD_PD_QUERY)
            | (io::MLX5_OBJECT_UAR, io::MLX5_METHOD_UAR_OBJ_ALLOC)
            | (io::MLX5_OBJECT_UAR, io::MLX5_METHOD_UAR_OBJ_DESTROY)
            | (io::OBJECT_CQ, io::METHOD_CQ_CREATE)
            | (io::OBJECT_QP, io::METHOD_QP_CREATE)
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
        (io::OBJECT_DEVICE, io::MLX5_METHOD_QUERY_PORT) => {
            use io::{MLX5_QUERY_PORT as INFO, MLX5_QUERY_PORT_PORT_NUM as PORT};
            a.only(&[PORT, INFO])?;
            // Linux `MLX5_IB_METHOD_QUERY_PORT`: a u32 port number, which must be a
            // port of the device; the answer fills vport, vhca ids, steering ICM
            // addresses and reg_c0 only for an e-switch representor (switchdev
            // mode) or a multi-port device. This NIC is neither: every flag is
            // clear and the structure is zeros (`uverbs_copy_to_struct_or_zero`:
            // the caller's room beyond the structure is zeroed too).
            let port = a.bytes(PORT)?;
            let port = <[u8; 4]>::try_from(port.as_slice()).map_err(|_| Errno::EINVAL)?;
            if u32::from_ne_bytes(port) != 1 {
                return Err(Errno::EINVAL);
            }
            let room = a.get(INFO).map_or(0, |x| usize::from(x.len));
            let info = vec![0u8; room.max(crate::abi::ioctl::mlx5_query_port::SIZE)];
            a.put(INFO, &info, crate::abi::ioctl::mlx5_query_port::SIZE, true)
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
        (io::OBJECT_MR, io::METHOD_ADVISE_MR) => {
            use io::{ADVISE_MR_ADVICE, ADVISE_MR_FLAGS, ADVISE_MR_PD_HANDLE, ADVISE_MR_SGE_LIST};
            a.only(&[
                ADVISE_MR_PD_HANDLE,
                ADVISE_MR_ADVICE,
                ADVISE_MR_FLAGS,
                ADVISE_MR_SGE_LIST,
            ])?;
            let pd = a.handle(ADVISE_MR_PD_HANDLE)?;
            // A constant attribute, inline (`uverbs_get_const`); the flags a 32-bit
            // flags attribute (`uverbs_get_flags32`: absent is 0).
            let advice = a.get(ADVISE_MR_ADVICE).ok_or(Errno::EINVAL)?.data;
            let flags = a.get(ADVISE_MR_FLAGS).map_or(0, |x| x.data);
            let sges = crate::verbs::odp::parse_sges(&a.bytes(ADVISE_MR_SGE_LIST)?)?;
            ctx.advise_mr(pd, advice, flags, &sges)
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
        (io::OBJECT_CQ, io::METHOD_CQ_CREATE) => create_cq(ctx, a),
        (io::OBJECT_QP, io::METHOD_QP_CREATE) => create_qp(ctx, a),
        (io::MLX5_OBJECT_UAR, io::MLX5_METHOD_UAR_OBJ_DESTROY) => {
            let id = io::MLX5_UAR_OBJ_DESTROY_HANDLE;
            a.only(&[id])?;
            ctx.destroy_uar(a.handle(id)?)
        }
        _ => Err(Errno::EPROTONOSUPPORT),
    }
}

/// Runs a write() command built from a method's attributes: `core` as the extended
/// command's core request, the driver data from `UVERBS_ATTR_UHW_IN` and its response
/// to `UVERBS_ATTR_UHW_OUT`; the core response comes back in a local buffer of
/// `resp_size` bytes.
fn run_as_write(
    ctx: &mut crate::verbs::Ucontext,
    a: &Attrs,
    number: u32,
    core: &[u8],
    resp_size: usize,
) -> Result<Vec<u8>, Errno> {
    let uhw = a.bytes(io::UHW_IN)?;
    let mut resp = vec![0u8; resp_size];
    let c = crate::file::Cmd {
        number,
        ex: true,
        core: Req(core),
        udata: Req(&uhw),
        udata_len: uhw.len(),
        resp: (resp.as_mut_ptr() as u64, resp_size),
        uresp: a.out(io::UHW_OUT),
    };
    ctx.execute(&c)?;
    // `resp` was written through `copy_out` at the address taken mutably above.
    Ok(resp)
}

/// UVERBS_METHOD_CQ_CREATE (Linux `uverbs_std_types_cq.c`) as the extended
/// CREATE_CQ. The event file attribute is taken but the CQ's async events go to the
/// context's first async file.
fn create_cq(ctx: &mut crate::verbs::Ucontext, a: &Attrs) -> Result<(), Errno> {
    use crate::abi::{ex_create_cq as q, ex_create_cq_resp as p};
    a.only(&[
        io::CREATE_CQ_HANDLE,
        io::CREATE_CQ_CQE,
        io::CREATE_CQ_USER_HANDLE,
        io::CREATE_CQ_COMP_CHANNEL,
        io::CREATE_CQ_COMP_VECTOR,
        io::CREATE_CQ_FLAGS,
        io::CREATE_CQ_RESP_CQE,
        io::CREATE_CQ_EVENT_FD,
        io::UHW_IN,
        io::UHW_OUT,
    ])?;
    for id in [
        io::CREATE_CQ_HANDLE,
        io::CREATE_CQ_CQE,
        io::CREATE_CQ_USER_HANDLE,
        io::CREATE_CQ_COMP_VECTOR,
        io::CREATE_CQ_RESP_CQE,
    ] {
        if a.get(id).is_none() {
            return Err(Errno::EINVAL);
        }
    }
    let mut core = Resp::new(q::SIZE);
    core.u64(q::user_handle, a.value(io::CREATE_CQ_USER_HANDLE, 0)?);
    core.u32(q::cqe, a.value(io::CREATE_CQ_CQE, 0)? as u32);
    core.u32(
        q::comp_vector,
        a.value(io::CREATE_CQ_COMP_VECTOR, 0)? as u32,
    );
    let channel = a.value(io::CREATE_CQ_COMP_CHANNEL, u64::MAX)? as i64 as i32;
    core.u32(q::comp_channel, channel as u32);
    core.u32(q::flags, a.value(io::CREATE_CQ_FLAGS, 0)? as u32);
    let resp = run_as_write(ctx, a, crate::abi::cmd::CREATE_CQ, &core.0, p::SIZE)?;
    let r = Req(&resp);
    let h = r.u32(p::base + crate::abi::create_cq_resp::cq_handle);
    let cqe = r.u32(p::base + crate::abi::create_cq_resp::cqe);
    a.new_handle(io::CREATE_CQ_HANDLE, h)?;
    a.put(io::CREATE_CQ_RESP_CQE, &cqe.to_ne_bytes(), 4, true)
}

/// UVERBS_METHOD_QP_CREATE (Linux `uverbs_std_types_qp.c`) as the extended
/// CREATE_QP: RC, UC and UD QPs of a PD (no XRC, RSS or source QPN:
/// EOPNOTSUPP); `IB_UVERBS_QP_CREATE_SQ_SIG_ALL` is `sq_sig_all`. The event file
/// attribute is taken but the QP's async events go to the context's first async
/// file.
fn create_qp(ctx: &mut crate::verbs::Ucontext, a: &Attrs) -> Result<(), Errno> {
    use crate::abi::{create_qp_resp as b, ex_create_qp as q, ex_create_qp_resp as p};
    use io::qp_cap as cap;
    a.only(&[
        io::CREATE_QP_HANDLE,
        io::CREATE_QP_XRCD_HANDLE,
        io::CREATE_QP_PD_HANDLE,
        io::CREATE_QP_SRQ_HANDLE,
        io::CREATE_QP_SEND_CQ_HANDLE,
        io::CREATE_QP_RECV_CQ_HANDLE,
        io::CREATE_QP_IND_TABLE_HANDLE,
        io::CREATE_QP_USER_HANDLE,
        io::CREATE_QP_CAP,
        io::CREATE_QP_TYPE,
        io::CREATE_QP_FLAGS,
        io::CREATE_QP_SOURCE_QPN,
        io::CREATE_QP_EVENT_FD,
        io::CREATE_QP_RESP_CAP,
        io::CREATE_QP_RESP_QP_NUM,
        io::UHW_IN,
        io::UHW_OUT,
    ])?;
    for id in [
        io::CREATE_QP_XRCD_HANDLE,
        io::CREATE_QP_IND_TABLE_HANDLE,
        io::CREATE_QP_SOURCE_QPN,
    ] {
        if a.get(id).is_some() {
            return Err(Errno::EOPNOTSUPP);
        }
    }
    for id in [
        io::CREATE_QP_HANDLE,
        io::CREATE_QP_CAP,
        io::CREATE_QP_TYPE,
        io::CREATE_QP_RESP_CAP,
        io::CREATE_QP_RESP_QP_NUM,
    ] {
        if a.get(id).is_none() {
            return Err(Errno::EINVAL);
        }
    }
    let caps = a.bytes(io::CREATE_QP_CAP)?;
    if caps.len() < cap::SIZE {
        return Err(Errno::EINVAL);
    }
    let caps = Req(&caps);
    let flags = a.value(io::CREATE_QP_FLAGS, 0)? as u32;
    let mut core = Resp::new(q::SIZE);
    core.u64(q::user_handle, a.value(io::CREATE_QP_USER_HANDLE, 0)?);
    core.u32(q::pd_handle, a.handle(io::CREATE_QP_PD_HANDLE)?);
    core.u32(
        q::send_cq_handle,
        a.value(io::CREATE_QP_SEND_CQ_HANDLE, 0)? as u32,
    );
    core.u32(
        q::recv_cq_handle,
        a.value(io::CREATE_QP_RECV_CQ_HANDLE, 0)? as u32,
    );
    if let Some(srq) = a.get(io::CREATE_QP_SRQ_HANDLE) {
        core.u32(q::srq_handle, srq.data as u32);
        core.u8(q::is_srq, 1);
    }
    for (to, from) in [
        (q::max_send_wr, cap::max_send_wr),
        (q::max_recv_wr, cap::max_recv_wr),
        (q::max_send_sge, cap::max_send_sge),
        (q::max_recv_sge, cap::max_recv_sge),
        (q::max_inline_data, cap::max_inline_data),
    ] {
        core.u32(to, caps.u32(from));
    }
    core.u8(
        q::sq_sig_all,
        u8::from(flags & io::QP_CREATE_SQ_SIG_ALL != 0),
    );
    core.u8(q::qp_type, a.value(io::CREATE_QP_TYPE, 0)? as u8);
    core.u32(q::create_flags, flags & !io::QP_CREATE_SQ_SIG_ALL);
    let resp = run_as_write(ctx, a, crate::abi::cmd::CREATE_QP, &core.0, p::SIZE)?;
    let r = Req(&resp);
    a.new_handle(io::CREATE_QP_HANDLE, r.u32(p::base + b::qp_handle))?;
    let mut out = Resp::new(cap::SIZE);
    for (to, from) in [
        (cap::max_send_wr, b::max_send_wr),
        (cap::max_recv_wr, b::max_recv_wr),
        (cap::max_send_sge, b::max_send_sge),
        (cap::max_recv_sge, b::max_recv_sge),
        (cap::max_inline_data, b::max_inline_data),
    ] {
        out.u32(to, r.u32(p::base + from));
    }
    a.put(io::CREATE_QP_RESP_CAP, &out.0, cap::SIZE, true)?;
    let qpn = r.u32(p::base + b::qpn);
    a.put(io::CREATE_QP_RESP_QP_NUM, &qpn.to_ne_bytes(), 4, true)
}
