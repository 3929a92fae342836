//! Memory keys as the data path uses them: an lkey or rkey names an MKEY (index =
//! key >> 8, the low byte must equal the key's variant byte), which must belong to the
//! QP's protection domain, allow the access, and cover the range; its translation
//! (physical-address mode: the address is the IOVA; MTT mode: per-page IOVAs with
//! read/write enables) gives the IOVAs the device reaches through the IOMMU.
//!
//! Sources: `mlx5_ifc.h` `mkc` (access bits `lr`, `lw`, `rr`, `rw`, `a`; `start_addr`,
//! `len`, `length64`, `log_page_size`, `access_mode`) and `mtt` (`ptag`, `wr_en` bit 1,
//! `rd_en` bit 0 of the big-endian entry); `mlx5-controlpath.md` §4.3.

use ferroverbs_hw::control::mkey::mkc;
use ferroverbs_hw::Field;

use crate::firmware::{Firmware, Mkey};
use crate::iommu::{CachedAccess, Iommu, Window};

/// The access a use of a key needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// The device reads local memory (send gather).
    LocalRead,
    /// The device writes local memory (receive scatter, READ response, atomic result).
    LocalWrite,
    /// A remote peer reads (RDMA READ).
    RemoteRead,
    /// A remote peer writes (RDMA WRITE).
    RemoteWrite,
    /// A remote peer performs an atomic.
    RemoteAtomic,
}

/// Why a key cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyError {
    /// No MKEY has this index, or its variant byte differs.
    Invalid,
    /// The MKEY belongs to another protection domain.
    Pd,
    /// The MKEY does not allow the access.
    Access,
    /// The range is outside the MKEY.
    Bounds,
    /// The translation or the IOMMU refused the access (unmapped page, MTT entry
    /// without the enable bit).
    Translation,
}

const ACCESS_MODE_PA: u64 = 0;
const ACCESS_MODE_MTT: u64 = 1;
/// `MLX5_MKC_ACCESS_MODE_KLMS`: a memory window.
const ACCESS_MODE_KLMS: u64 = 2;
/// `mtt.rd_en`: bit 0 of the big-endian entry.
const MTT_RD_EN: u64 = 1 << 0;
/// `mtt.wr_en`: bit 1 of the big-endian entry.
const MTT_WR_EN: u64 = 1 << 1;

fn get(img: &[u8], f: Field) -> u64 {
    if f.fits(img.len()) {
        f.get(img)
    } else {
        0
    }
}

/// The decoded parts of an MKEY context the data path needs, decoded once when the
/// MKEY is created (the context does not change while the MKEY lives; it is dropped
/// with it at DESTROY_MKEY) instead of at every translation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MkeyView {
    start: u64,
    len: u64,
    length64: bool,
    mode: u64,
    page_shift: u32,
    /// `lr`, `lw`, `rr`, `rw`, `a`.
    lr: bool,
    lw: bool,
    rr: bool,
    rw: bool,
    a: bool,
    /// `mkc.free`: the key is not usable (created free, or invalidated).
    free: bool,
    /// `mkc.en_rinval`: a SEND with Invalidate may invalidate the key.
    en_rinval: bool,
    /// `mkc.umr_en`: UMR WQEs may modify the key (memory windows).
    umr_en: bool,
    /// `mkc.qpn`: the QP a type 2 window is bound to (0xffffff for none).
    qpn: u32,
    /// Where the translation starts (the MTT's first page is this address's page):
    /// `start` for a memory region; for a bound memory window, the start of the
    /// region it was bound through (its translation is the region's).
    xlt_start: u64,
    /// A bound memory window: the key of the memory region it translates through,
    /// which must still be live at every access (0 for a memory region).
    parent: u32,
    /// Created as a memory window (KLM access mode), whatever it is bound to now.
    window: bool,
}

impl MkeyView {
    /// Decodes an `mkc` image (fields beyond a short image read as 0).
    pub fn decode(m: &[u8]) -> MkeyView {
        MkeyView {
            start: get(m, mkc::start_addr),
            len: get(m, mkc::len),
            length64: get(m, mkc::length64) != 0,
            mode: get(m, mkc::access_mode_1_0) | (get(m, mkc::access_mode_4_2) << 2),
            page_shift: get(m, mkc::log_page_size).clamp(12, 30) as u32,
            lr: get(m, mkc::lr) != 0,
            lw: get(m, mkc::lw) != 0,
            rr: get(m, mkc::rr) != 0,
            rw: get(m, mkc::rw) != 0,
            a: get(m, mkc::a) != 0,
            free: get(m, mkc::free) != 0,
            en_rinval: get(m, mkc::en_rinval) != 0,
            umr_en: get(m, mkc::umr_en) != 0,
            qpn: get(m, mkc::qpn) as u32,
            xlt_start: get(m, mkc::start_addr),
            parent: 0,
            window: get(m, mkc::access_mode_1_0) | (get(m, mkc::access_mode_4_2) << 2)
                == ACCESS_MODE_KLMS,
        }
    }

    /// Whether `[va, va + len)` lies inside the key.
    pub fn covers_range(&self, va: u64, len: u64) -> bool {
        self.covers(va, len)
    }

    /// Whether the key allows local write (`mkc.lw`).
    pub fn local_write(&self) -> bool {
        self.lw
    }

    /// Whether UMR WQEs may modify the key (`mkc.umr_en`).
    pub fn umr_enabled(&self) -> bool {
        self.umr_en
    }

    /// The QP a type 2 window is bound to (`mkc.qpn`).
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The memory region a bound window translates through (0 for none).
    pub fn parent(&self) -> u32 {
        self.parent
    }

    /// Whether the key is a memory window (KLM access mode).
    pub fn is_window(&self) -> bool {
        self.window
    }

    /// Binds a window (a UMR with a translation): `[start, start + len)` of the memory
    /// region `mr` (whose view is `region`, its translation copied into the window by
    /// the caller) with the remote rights `rr`, `rw`, `a` and local write `lw`, bound
    /// to `qpn` (0xffffff for a type 1 window).
    #[allow(clippy::too_many_arguments)]
    pub fn bind(
        &mut self,
        region: &MkeyView,
        mr: u32,
        start: u64,
        len: u64,
        lw: bool,
        rr: bool,
        rw: bool,
        a: bool,
        qpn: u32,
    ) {
        self.start = start;
        self.len = len;
        self.length64 = false;
        self.mode = region.mode;
        self.page_shift = region.page_shift;
        self.xlt_start = region.xlt_start;
        self.lw = lw;
        self.rr = rr;
        self.rw = rw;
        self.a = a;
        self.qpn = qpn;
        self.parent = mr;
        self.free = false;
    }

    /// Makes a window free again (an invalidation or a bind of length 0): no bounds,
    /// no rights, no translation.
    pub fn unbind(&mut self) {
        self.free = true;
        self.mode = ACCESS_MODE_KLMS;
        self.len = 0;
        self.parent = 0;
        self.rr = false;
        self.rw = false;
        self.a = false;
        self.lw = false;
        self.qpn = 0xff_ffff;
    }

    /// Whether the key is free (`mkc.free`): every access through it fails.
    pub fn is_free(&self) -> bool {
        self.free
    }

    /// Whether a remote SEND with Invalidate may invalidate the key (`mkc.en_rinval`).
    pub fn remote_invalidate(&self) -> bool {
        self.en_rinval
    }

    /// Marks the key free (invalidated).
    pub fn set_free(&mut self) {
        self.free = true;
    }

    fn allows(&self, need: Need) -> bool {
        match need {
            Need::LocalRead => self.lr,
            Need::LocalWrite => self.lw,
            Need::RemoteRead => self.rr,
            Need::RemoteWrite => self.rw,
            Need::RemoteAtomic => self.a,
        }
    }

    fn covers(&self, va: u64, len: u64) -> bool {
        if self.length64 {
            return va >= self.start;
        }
        let Some(end) = va.checked_add(len) else {
            return false;
        };
        va >= self.start && end <= self.start.saturating_add(self.len)
    }
}

/// Looks up `key` for an access of `len` bytes at `va` by a QP of protection domain
/// `pd`: the key must name a live MKEY with the same variant byte, in `pd`, allowing
/// `need`, covering the range.
pub fn check(
    fw: &Firmware,
    key: u32,
    pd: u32,
    need: Need,
    va: u64,
    len: u64,
) -> Result<(), KeyError> {
    checked(fw, key, pd, need, va, len).map(|_| ())
}

/// [`check`], giving the MKEY that passed it (for an access that follows at once,
/// under the same device lock, with no second table search: [`write_key_cached`]).
#[inline(always)]
pub fn checked(
    fw: &Firmware,
    key: u32,
    pd: u32,
    need: Need,
    va: u64,
    len: u64,
) -> Result<&Mkey, KeyError> {
    let k = fw
        .mkey(key >> 8)
        .filter(|k| k.key == key && !k.view.free)
        .ok_or(KeyError::Invalid)?;
    if k.view.parent != 0 && !parent_live(fw, k.view.parent) {
        return Err(KeyError::Invalid);
    }
    if k.pd != pd {
        return Err(KeyError::Pd);
    }
    if !k.view.allows(need) {
        return Err(KeyError::Access);
    }
    if !k.view.covers(va, len) {
        return Err(KeyError::Bounds);
    }
    Ok(k)
}

/// Calls `f(iova, offset, chunk)` for each translated piece of `[va, va + len)` of the
/// MKEY `key` (already checked), in order.
fn walk(
    fw: &Firmware,
    key: u32,
    va: u64,
    len: usize,
    write: bool,
    f: impl FnMut(u64, usize, usize) -> Result<(), KeyError>,
) -> Result<(), KeyError> {
    let k = fw
        .mkey(key >> 8)
        .filter(|k| k.key == key && !k.view.free)
        .ok_or(KeyError::Invalid)?;
    if k.view.parent != 0 && !parent_live(fw, k.view.parent) {
        return Err(KeyError::Invalid);
    }
    walk_key(k, va, len, write, f)
}

/// Whether the memory region a window was bound through still exists: a window
/// translates through its region's key (the KLM of the bind), so once the region is
/// deregistered every access through the window fails.
#[cold]
fn parent_live(fw: &Firmware, mr: u32) -> bool {
    fw.mkey(mr >> 8)
        .is_some_and(|p| p.key == mr && !p.view.free)
}

/// [`walk`] over the MKEY `k` already looked up.
fn walk_key(
    k: &Mkey,
    va: u64,
    len: usize,
    write: bool,
    mut f: impl FnMut(u64, usize, usize) -> Result<(), KeyError>,
) -> Result<(), KeyError> {
    let v = k.view;
    if !v.covers(va, len as u64) {
        return Err(KeyError::Bounds);
    }
    match v.mode {
        ACCESS_MODE_PA => f(va, 0, len),
        ACCESS_MODE_MTT => {
            let page = 1u64 << v.page_shift;
            let first = v.xlt_start & !(page - 1);
            let mut done = 0usize;
            while done < len {
                let at = va + done as u64;
                let idx =
                    usize::try_from((at - first) >> v.page_shift).map_err(|_| KeyError::Bounds)?;
                let e = *k.mtt.get(idx).ok_or(KeyError::Translation)?;
                let en = if write { MTT_WR_EN } else { MTT_RD_EN };
                if e & en == 0 {
                    return Err(KeyError::Translation);
                }
                let base = e & !0xff;
                let in_page = at & (page - 1);
                let chunk = ((page - in_page) as usize).min(len - done);
                f(base + in_page, done, chunk)?;
                done += chunk;
            }
            Ok(())
        }
        _ => Err(KeyError::Translation),
    }
}

/// Copies `dst.len()` bytes of the memory `key` maps at `va` into `dst` (a device read
/// of host memory).
pub fn read(fw: &Firmware, io: &Iommu, key: u32, va: u64, dst: &mut [u8]) -> Result<(), KeyError> {
    if dst.is_empty() {
        return Ok(());
    }
    let n = dst.len();
    walk(fw, key, va, n, false, |iova, off, chunk| {
        io.read(iova, &mut dst[off..off + chunk])
            .map_err(|_| KeyError::Translation)
    })
}

/// Copies `src` to the memory `key` maps at `va` (a device write of host memory).
pub fn write(fw: &Firmware, io: &Iommu, key: u32, va: u64, src: &[u8]) -> Result<(), KeyError> {
    write_cached(fw, io, &mut Window::default(), key, va, src)
}

/// [`write()`] with the IOMMU accesses through the cached window `win`
/// ([`Iommu::write_cached`]: the same checks, no table search while it is current).
pub fn write_cached(
    fw: &Firmware,
    io: &Iommu,
    win: &mut Window,
    key: u32,
    va: u64,
    src: &[u8],
) -> Result<(), KeyError> {
    if src.is_empty() {
        return Ok(());
    }
    walk(fw, key, va, src.len(), true, |iova, off, chunk| {
        io.write_cached(win, iova, &src[off..off + chunk])
            .map_err(|_| KeyError::Translation)
    })
}

/// The IOVA of `[va, va + len)` of the MKEY `k` when it is one piece of the
/// translation, for a write (`write`) or a read: what [`walk_key`] gives as its one
/// call for such a range (the range inside the key, a physical-address key or an
/// MTT entry with the enable bit covering the whole range in one page). `None` for
/// anything else (several pages, an error): [`walk_key`] then walks the range and
/// names the error exactly as before.
#[inline(always)]
fn one_piece(k: &Mkey, va: u64, len: usize, write: bool) -> Option<u64> {
    let v = &k.view;
    if !v.covers(va, len as u64) {
        return None;
    }
    match v.mode {
        ACCESS_MODE_PA => Some(va),
        ACCESS_MODE_MTT => {
            let page = 1u64 << v.page_shift;
            let in_page = va & (page - 1);
            if len as u64 > page - in_page {
                return None;
            }
            // `covers` holds, so `va >= start >= xlt_start & !(page - 1)` (a window
            // lies inside the region whose translation it has).
            let first = v.xlt_start & !(page - 1);
            let idx = usize::try_from((va - first) >> v.page_shift).ok()?;
            let e = *k.mtt.get(idx)?;
            let en = if write { MTT_WR_EN } else { MTT_RD_EN };
            (e & en != 0).then_some((e & !0xff) + in_page)
        }
        _ => None,
    }
}

/// [`write_cached`] through the MKEY `k` that [`checked`] gave for this key: the same
/// bounds check, translation and IOMMU accesses, without looking the key up again. A
/// write within one piece of the translation (`one_piece`: a SEND's payload in one
/// page) is translated at once; any other goes through `walk_key`. `io` is the
/// [`Iommu`] or a [`Held`](crate::iommu::Held) table (the one-packet receive path).
pub fn write_key_cached(
    k: &Mkey,
    io: &impl CachedAccess,
    win: &mut Window,
    va: u64,
    src: &[u8],
) -> Result<(), KeyError> {
    if src.is_empty() {
        return Ok(());
    }
    if let Some(iova) = one_piece(k, va, src.len(), true) {
        return io
            .write_cached(win, iova, src)
            .map_err(|_| KeyError::Translation);
    }
    walk_key(k, va, src.len(), true, |iova, off, chunk| {
        io.write_cached(win, iova, &src[off..off + chunk])
            .map_err(|_| KeyError::Translation)
    })
}

/// The IOVA of the 8 bytes at `va` (an atomic target, 8-byte aligned so it never
/// crosses a page).
pub fn translate8(fw: &Firmware, key: u32, va: u64) -> Result<u64, KeyError> {
    let mut out = None;
    walk(fw, key, va, 8, true, |iova, off, chunk| {
        if off == 0 && chunk == 8 {
            out = Some(iova);
        }
        Ok(())
    })?;
    out.ok_or(KeyError::Translation)
}

/// One entry of a gather or scatter list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    /// Virtual address (in the MKEY's address space).
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// The lkey.
    pub key: u32,
}

/// Total length of a list.
pub fn total(sges: &[Sge]) -> u64 {
    sges.iter().fold(0u64, |a, s| a.saturating_add(s.len))
}

/// Copies the bytes at `offset` of the message a gather list describes into `dst`.
pub fn gather(
    fw: &Firmware,
    io: &Iommu,
    sges: &[Sge],
    offset: u64,
    dst: &mut [u8],
) -> Result<(), KeyError> {
    let mut skip = offset;
    let mut done = 0usize;
    for s in sges {
        if done == dst.len() {
            break;
        }
        if skip >= s.len {
            skip -= s.len;
            continue;
        }
        let n = ((s.len - skip) as usize).min(dst.len() - done);
        read(fw, io, s.key, s.addr + skip, &mut dst[done..done + n])?;
        done += n;
        skip = 0;
    }
    if done < dst.len() {
        return Err(KeyError::Bounds);
    }
    Ok(())
}

/// Writes `src` at `offset` of the message a scatter list describes.
pub fn scatter(
    fw: &Firmware,
    io: &Iommu,
    sges: &[Sge],
    offset: u64,
    src: &[u8],
) -> Result<(), KeyError> {
    scatter_cached(fw, io, &mut Window::default(), sges, offset, src)
}

/// [`scatter`] with the IOMMU accesses through the cached window `win` (a QP keeps
/// one for the buffers its receive WQEs name: consecutive messages usually land in
/// the same mapping). Every key is still looked up and checked at each packet.
pub fn scatter_cached(
    fw: &Firmware,
    io: &Iommu,
    win: &mut Window,
    sges: &[Sge],
    offset: u64,
    src: &[u8],
) -> Result<(), KeyError> {
    let mut skip = offset;
    let mut done = 0usize;
    for s in sges {
        if done == src.len() {
            break;
        }
        if skip >= s.len {
            skip -= s.len;
            continue;
        }
        let n = ((s.len - skip) as usize).min(src.len() - done);
        write_cached(fw, io, win, s.key, s.addr + skip, &src[done..done + n])?;
        done += n;
        skip = 0;
    }
    if done < src.len() {
        return Err(KeyError::Bounds);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(view: MkeyView, mtt: Vec<u64>) -> Mkey {
        Mkey {
            key: 0x242,
            pd: 1,
            mkc: Vec::new(),
            mtt,
            view,
        }
    }

    /// The pieces `walk_key` gives for a range, or its error.
    fn walked(
        k: &Mkey,
        va: u64,
        len: usize,
        write: bool,
    ) -> Result<Vec<(u64, usize, usize)>, KeyError> {
        let mut v = Vec::new();
        walk_key(k, va, len, write, |iova, off, chunk| {
            v.push((iova, off, chunk));
            Ok(())
        })
        .map(|()| v)
    }

    #[test]
    fn one_piece_is_the_walk_of_a_one_piece_range() {
        let view = |start, len, length64, mode, page_shift| MkeyView {
            start,
            len,
            length64,
            mode,
            page_shift,
            lr: true,
            lw: true,
            rr: true,
            rw: true,
            a: true,
            free: false,
            en_rinval: false,
            umr_en: false,
            qpn: 0xff_ffff,
            xlt_start: start,
            parent: 0,
            window: false,
        };
        // MTT entries: page IOVAs with both enables, read-only, write-only, neither.
        let mtt: Vec<u64> = (0..8u64)
            .map(|i| (0xc0_0000_0000 + i * 0x20_0000) | [3, 1, 2, 0][i as usize % 4])
            .collect();
        let keys = [
            key(
                view(0x7000_0000, 5 * 4096, false, ACCESS_MODE_PA, 12),
                Vec::new(),
            ),
            key(
                view(0x7000_0100, 6 * 4096, false, ACCESS_MODE_MTT, 12),
                mtt.clone(),
            ),
            key(
                view(0x7000_0000, 8 << 21, false, ACCESS_MODE_MTT, 21),
                mtt.clone(),
            ),
            key(view(0x7000_0000, 0, true, ACCESS_MODE_MTT, 12), mtt.clone()),
            key(view(0x7000_0000, 4096, false, 7, 12), mtt.clone()),
        ];
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let mut ones = 0;
        for k in &keys {
            for _ in 0..20_000 {
                let va = 0x7000_0000 - 64 + next(10 << 12);
                let len = 1 + next(5000) as usize;
                for write in [false, true] {
                    let walk = walked(k, va, len, write);
                    match one_piece(k, va, len, write) {
                        Some(iova) => {
                            ones += 1;
                            assert_eq!(walk, Ok(vec![(iova, 0, len)]), "{k:?} {va:#x} {len}");
                        }
                        // Not one piece: the walk fails or gives several pieces.
                        None => assert!(
                            !matches!(&walk, Ok(p) if p.len() == 1),
                            "{k:?} {va:#x} {len}: {walk:?}"
                        ),
                    }
                }
            }
        }
        assert!(ones > 10_000, "{ones}");
    }
}
