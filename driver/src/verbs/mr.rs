//! Memory regions: a buffer mapped for the device (`Bus::dma_map`) and described by a
//! memory key in MTT mode (`CREATE_MKEY`, `mlx5-controlpath.md` §4.3).
//!
//! The key's `start_addr` is the buffer's host address (what a verbs application
//! puts in its scatter/gather entries and hands to its peer); its translation is one
//! MTT entry per 4 KiB page: the IOVA of the page with the read bit, and the write
//! bit when the region is writable. The IOVA and the host address must share their
//! page offset (the simulator and `MemBus` guarantee it; rdma-core's `mlx5_vfio` maps
//! memory regions the same way).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use ferroverbs_hw::control::cmd::set_flex64;
use ferroverbs_hw::control::cmd::{new_input, Opcode};
use ferroverbs_hw::control::mkey::{
    self, create_mkey_in, create_mkey_input, create_mkey_out, destroy_mkey_in, destroy_mkey_out,
    mkc, mtt_octwords, MkcAccessMode, MKC_QPN_NONE, MTT_READ, MTT_WRITE,
};
use ferroverbs_hw::{Bus, DmaPerm};

use super::{exec, Error, Pd, RemoteAddr, Result, Sge};
use crate::dma::{DmaBuf, PAGE_SIZE};

/// Access rights of a memory region (`ibv_access_flags`; local read is always
/// granted).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct AccessFlags(u32);

impl AccessFlags {
    /// The device may write the region for local operations (receives, RDMA READ
    /// responses, atomic results). `IBV_ACCESS_LOCAL_WRITE`.
    pub const LOCAL_WRITE: AccessFlags = AccessFlags(1);
    /// Peers may RDMA WRITE into the region. `IBV_ACCESS_REMOTE_WRITE`.
    pub const REMOTE_WRITE: AccessFlags = AccessFlags(2);
    /// Peers may RDMA READ the region. `IBV_ACCESS_REMOTE_READ`.
    pub const REMOTE_READ: AccessFlags = AccessFlags(4);
    /// Peers may execute atomics on the region. `IBV_ACCESS_REMOTE_ATOMIC`.
    pub const REMOTE_ATOMIC: AccessFlags = AccessFlags(8);

    /// No flag: local read only.
    pub const fn empty() -> AccessFlags {
        AccessFlags(0)
    }

    /// Every flag.
    pub const fn all() -> AccessFlags {
        AccessFlags(15)
    }

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: AccessFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// The `ibv_access_flags` bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// The flags of `ibv_access_flags` bits, or `None` when a bit is not one of the
    /// four above.
    pub const fn from_bits(bits: u32) -> Option<AccessFlags> {
        if bits & !Self::all().0 == 0 {
            Some(AccessFlags(bits))
        } else {
            None
        }
    }

    /// Only the remote rights (what a QP's access flags grant its peers).
    pub const fn remote(self) -> AccessFlags {
        AccessFlags(self.0 & !Self::LOCAL_WRITE.0)
    }

    /// Whether the device may write memory with these rights.
    pub const fn writable(self) -> bool {
        self.0 & (1 | 2 | 8) != 0
    }

    /// Verbs requires LOCAL_WRITE with REMOTE_WRITE or REMOTE_ATOMIC.
    pub(crate) fn check(self) -> Result<()> {
        if (self.contains(Self::REMOTE_WRITE) || self.contains(Self::REMOTE_ATOMIC))
            && !self.contains(Self::LOCAL_WRITE)
        {
            return Err(Error::InvalidAccess(self));
        }
        Ok(())
    }
}

impl std::ops::BitOr for AccessFlags {
    type Output = AccessFlags;
    fn bitor(self, rhs: AccessFlags) -> AccessFlags {
        AccessFlags(self.0 | rhs.0)
    }
}

impl std::ops::BitOrAssign for AccessFlags {
    fn bitor_assign(&mut self, rhs: AccessFlags) {
        self.0 |= rhs.0;
    }
}

impl std::fmt::Debug for AccessFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = [
            (Self::LOCAL_WRITE, "LOCAL_WRITE"),
            (Self::REMOTE_WRITE, "REMOTE_WRITE"),
            (Self::REMOTE_READ, "REMOTE_READ"),
            (Self::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
        ];
        let set: Vec<&str> = names
            .iter()
            .filter(|(fl, _)| self.contains(*fl))
            .map(|(_, n)| *n)
            .collect();
        if set.is_empty() {
            f.write_str("AccessFlags(LOCAL_READ)")
        } else {
            write!(f, "AccessFlags({})", set.join(" | "))
        }
    }
}

/// A range outside the memory region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{len} bytes at offset {offset} are outside the {mr_len}-byte memory region")]
pub struct RangeError {
    /// Offset asked for.
    pub offset: usize,
    /// Length asked for.
    pub len: usize,
    /// The region's length.
    pub mr_len: usize,
}

/// Memory given by the caller: a `Box<[u8]>` taken over, or raw memory the caller
/// vouches for. Only ever accessed through atomics once registered.
struct UserMem<B: Bus> {
    bus: Arc<B>,
    ptr: NonNull<AtomicU8>,
    len: usize,
    iova: u64,
    /// Whether `ptr` came from `Box::<[u8]>::into_raw` and is freed here.
    owned: bool,
    /// Whether the mapping is still in place.
    mapped: bool,
}

// SAFETY: the memory is owned by this value (or vouched for by the caller of
// `reg_mr_raw`) and is accessed only through atomic operations, so moving the owner to
// another thread or sharing `&UserMem` cannot create a data race. `B: Bus` is
// `Send + Sync`.
unsafe impl<B: Bus> Send for UserMem<B> {}
// SAFETY: see `Send`: shared access is atomic only.
unsafe impl<B: Bus> Sync for UserMem<B> {}

impl<B: Bus> UserMem<B> {
    #[inline]
    fn byte(&self, off: usize) -> &AtomicU8 {
        assert!(off < self.len, "offset {off} outside {} bytes", self.len);
        // SAFETY: `off` is inside the allocation of `len` bytes, which lives as long as
        // `self` (owned, or vouched for by the caller of `reg_mr_raw`); `AtomicU8` has
        // the size and alignment of `u8`; no non-atomic reference to it exists.
        unsafe { &*self.ptr.as_ptr().add(off) }
    }

    /// Takes the buffer back out (owned memory only), after unmapping it.
    fn into_box(mut self) -> Option<Box<[u8]>> {
        if !self.owned {
            return None;
        }
        self.mapped = false;
        if let Err(e) = self.bus.dma_unmap(self.iova, self.len) {
            tracing::error!(iova = self.iova, error = %e, "DMA unmap failed; leaking the buffer");
            self.owned = false;
            return None;
        }
        self.owned = false;
        let raw = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr() as *mut u8, self.len);
        // SAFETY: `raw` is exactly the pointer and length `Box::into_raw` gave in
        // `Pd::reg_mr`; the device can no longer reach it (unmapped above), no
        // reference into it exists, and `owned` is now false so `Drop` won't free it.
        Some(unsafe { Box::from_raw(raw) })
    }
}

impl<B: Bus> Drop for UserMem<B> {
    fn drop(&mut self) {
        if self.mapped {
            if let Err(e) = self.bus.dma_unmap(self.iova, self.len) {
                // The device may still reach the memory: leaking it is the only safe
                // choice.
                tracing::error!(iova = self.iova, error = %e, "DMA unmap failed; leaking the buffer");
                return;
            }
        }
        if self.owned {
            let raw = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr() as *mut u8, self.len);
            // SAFETY: as in `into_box`: the pointer and length of `Box::into_raw`, no
            // longer reachable by the device, no reference into it, freed once.
            drop(unsafe { Box::from_raw(raw) });
        }
    }
}

enum Backing<B: Bus> {
    Dma(DmaBuf<B>),
    User(UserMem<B>),
}

/// A registered memory region: a buffer the device may access with this region's
/// keys, within its bounds and access rights.
///
/// The region owns its buffer, so the buffer can be neither freed nor moved while it
/// is registered. The buffer is shared with the device, which may write it at any
/// time (receives, RDMA WRITEs from a peer, READ responses, atomics): it is therefore
/// read and written through copies ([`MemoryRegion::read`], [`MemoryRegion::write`],
/// ...), never through a Rust reference.
///
/// Dropping it issues `DESTROY_MKEY`, then unmaps and frees (or, with
/// [`MemoryRegion::deregister`], returns) the buffer.
pub struct MemoryRegion<'a, B: Bus> {
    pd: &'a Pd<'a, B>,
    backing: Option<Backing<B>>,
    addr: u64,
    len: usize,
    key: u32,
    access: AccessFlags,
}

impl<B: Bus> std::fmt::Debug for MemoryRegion<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .field("lkey", &format_args!("{:#x}", self.key))
            .field("access", &self.access)
            .finish()
    }
}

impl<'ctx, B: Bus> Pd<'ctx, B> {
    /// Allocates a zeroed, page-aligned buffer of `len` bytes and registers it.
    pub fn alloc_mr(&self, len: usize, access: AccessFlags) -> Result<MemoryRegion<'_, B>> {
        self.alloc_mr_in(len, access, false)
    }

    /// [`Pd::alloc_mr`] addressed from 0 (`IBV_ACCESS_ZERO_BASED`, `ibv_reg_mr_iova2`
    /// with iova 0): work requests and peers name byte `i` of the buffer as address `i`,
    /// so no host address appears in a work request or on the wire (a seeded run's
    /// packets are then the same in any process).
    pub fn alloc_mr_zero_based(
        &self,
        len: usize,
        access: AccessFlags,
    ) -> Result<MemoryRegion<'_, B>> {
        self.alloc_mr_in(len, access, true)
    }

    fn alloc_mr_in(
        &self,
        len: usize,
        access: AccessFlags,
        zero_based: bool,
    ) -> Result<MemoryRegion<'_, B>> {
        access.check()?;
        if len == 0 {
            return Err(Error::InvalidArgument(
                "a memory region needs at least one byte",
            ));
        }
        let perm = if access.writable() {
            DmaPerm::RW
        } else {
            DmaPerm::RO
        };
        let buf = DmaBuf::new(self.context().bus(), len, perm)?;
        // The buffer is page-aligned: address 0 has its page offset.
        let addr = if zero_based { 0 } else { buf.as_ptr() as u64 };
        let iova = buf.iova();
        self.register(Backing::Dma(buf), addr, iova, len, access)
    }

    /// Registers a buffer the caller hands over (a `Vec<u8>` converts with
    /// `into_boxed_slice`); [`MemoryRegion::deregister`] gives it back.
    pub fn reg_mr(&self, buf: Box<[u8]>, access: AccessFlags) -> Result<MemoryRegion<'_, B>> {
        access.check()?;
        if buf.is_empty() {
            return Err(Error::InvalidArgument(
                "a memory region needs at least one byte",
            ));
        }
        let len = buf.len();
        let raw = Box::into_raw(buf) as *mut u8;
        // SAFETY (of what follows): `raw` owns `len` bytes from now on; they are only
        // accessed atomically or by the device, and freed by `UserMem`.
        let ptr = NonNull::new(raw as *mut AtomicU8).expect("Box pointers are non-null");
        self.reg_user(ptr, len, access, true, raw as u64)
    }

    /// Registers `len` bytes at `ptr` that the caller keeps.
    ///
    /// # Safety
    ///
    /// The memory must stay allocated and in place until the region is dropped, and
    /// the caller must not access it other than atomically (the device writes it at
    /// any time: receives, peers' RDMA WRITEs and atomics, READ responses) while it is
    /// registered.
    pub unsafe fn reg_mr_raw(
        &self,
        ptr: NonNull<u8>,
        len: usize,
        access: AccessFlags,
    ) -> Result<MemoryRegion<'_, B>> {
        access.check()?;
        if len == 0 {
            return Err(Error::InvalidArgument(
                "a memory region needs at least one byte",
            ));
        }
        self.reg_user(ptr.cast(), len, access, false, ptr.as_ptr() as u64)
    }

    /// Registers `len` bytes at `ptr` that the caller keeps, addressed by the keys
    /// from `iova` on instead of from the host address (`ibv_reg_mr_iova2`): work
    /// requests and peers name byte `i` of the buffer as `iova + i` (`mkc.start_addr`
    /// is `iova`). As Linux requires for its user memory (`ib_umem_find_best_pgsz`),
    /// `iova` and `ptr` must have the same offset in a 4 KiB page
    /// ([`Error::IovaMisaligned`] otherwise).
    ///
    /// # Safety
    ///
    /// As [`Pd::reg_mr_raw`].
    pub unsafe fn reg_mr_raw_iova(
        &self,
        ptr: NonNull<u8>,
        len: usize,
        access: AccessFlags,
        iova: u64,
    ) -> Result<MemoryRegion<'_, B>> {
        access.check()?;
        if len == 0 {
            return Err(Error::InvalidArgument(
                "a memory region needs at least one byte",
            ));
        }
        let page = PAGE_SIZE as u64;
        let host = ptr.as_ptr() as u64;
        if host % page != iova % page {
            return Err(Error::IovaMisaligned { addr: host, iova });
        }
        self.reg_user(ptr.cast(), len, access, false, iova)
    }

    /// Maps `len` bytes at `ptr` for the device and registers them with the keys'
    /// address of byte 0 `va`.
    fn reg_user(
        &self,
        ptr: NonNull<AtomicU8>,
        len: usize,
        access: AccessFlags,
        owned: bool,
        va: u64,
    ) -> Result<MemoryRegion<'_, B>> {
        let bus = Arc::clone(self.context().bus());
        let perm = if access.writable() {
            DmaPerm::RW
        } else {
            DmaPerm::RO
        };
        let iova = match bus.dma_map(ptr.as_ptr() as usize, len, perm) {
            Ok(iova) => iova,
            Err(e) => {
                if owned {
                    let raw = std::ptr::slice_from_raw_parts_mut(ptr.as_ptr() as *mut u8, len);
                    // SAFETY: never mapped, so never seen by the device; this is the
                    // Box given to `reg_mr`, freed once.
                    drop(unsafe { Box::from_raw(raw) });
                }
                return Err(crate::Error::Bus(e).into());
            }
        };
        let mem = UserMem {
            bus,
            ptr,
            len,
            iova,
            owned,
            mapped: true,
        };
        self.register(Backing::User(mem), va, iova, len, access)
    }

    /// `CREATE_MKEY` for `len` bytes at host address `addr`, mapped at `iova`.
    fn register(
        &self,
        backing: Backing<B>,
        addr: u64,
        iova: u64,
        len: usize,
        access: AccessFlags,
    ) -> Result<MemoryRegion<'_, B>> {
        let page = PAGE_SIZE as u64;
        if addr % page != iova % page {
            return Err(Error::IovaMisaligned { addr, iova });
        }
        let first = iova & !(page - 1);
        let npages = (iova + len as u64 - first).div_ceil(page) as usize;
        let write_bit = if access.writable() { MTT_WRITE } else { 0 };
        let mtt: Vec<u64> = (0..npages as u64)
            .map(|i| (first + i * page) | MTT_READ | write_bit)
            .collect();
        let octwords = mtt_octwords(npages) as u64;
        let mut input = create_mkey_input(npages);
        let m = mkey::in_command;
        create_mkey_in::pg_access.set(&mut input, 1);
        create_mkey_in::translations_octword_actual_size.set(&mut input, octwords);
        m(mkc::access_mode_1_0).set(&mut input, MkcAccessMode::Mtt.value().into());
        m(mkc::lr).set(&mut input, 1);
        m(mkc::lw).set(&mut input, access.contains(AccessFlags::LOCAL_WRITE).into());
        m(mkc::rr).set(&mut input, access.contains(AccessFlags::REMOTE_READ).into());
        m(mkc::rw).set(
            &mut input,
            access.contains(AccessFlags::REMOTE_WRITE).into(),
        );
        m(mkc::a).set(
            &mut input,
            access.contains(AccessFlags::REMOTE_ATOMIC).into(),
        );
        m(mkc::qpn).set(&mut input, MKC_QPN_NONE.into());
        // A UMR may change the region in place (Linux `reg_create` sets `umr_en` on
        // user regions; `MemoryRegion::rereg_pd_access` relies on it).
        m(mkc::umr_en).set(&mut input, 1);
        let variant = self.context().next_key_variant()?;
        m(mkc::mkey_7_0).set(&mut input, variant.into());
        m(mkc::pd).set(&mut input, self.pdn().into());
        m(mkc::start_addr).set(&mut input, addr);
        m(mkc::len).set(&mut input, len as u64);
        m(mkc::translations_octword_size).set(&mut input, octwords);
        m(mkc::log_page_size).set(&mut input, 12);
        set_flex64(&mut input, create_mkey_in::klm_pas_mtt, &mtt)
            .map_err(|_| Error::InvalidArgument("MTT list does not fit the command"))?;
        let out = exec(self.context(), &input, create_mkey_out::SIZE)?;
        let index = create_mkey_out::mkey_index.get(&out) as u32;
        let key = mkey::mkey(index, variant);
        let host = match &backing {
            Backing::Dma(b) => NonNull::new(b.as_ptr()),
            Backing::User(u) => NonNull::new(u.ptr.as_ptr() as *mut u8),
        };
        // The poll's copies of scattered CQEs translate receive scatter entries here
        // (`scatter`); the entry goes before the key and the memory do.
        if let Some(host) = host {
            self.context().mrs().insert(key, addr, len, host);
        }
        Ok(MemoryRegion {
            pd: self,
            backing: Some(backing),
            addr,
            len,
            key,
            access,
        })
    }
}

impl<'a, B: Bus> MemoryRegion<'a, B> {
    /// The address of byte 0 as the keys translate it: the buffer's host address, or
    /// the address it was registered at (0 for [`Pd::alloc_mr_zero_based`]).
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a region holds at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.key
    }

    /// The remote key (equal to the local key on mlx5).
    pub fn rkey(&self) -> u32 {
        self.key
    }

    /// The access rights.
    pub fn access(&self) -> AccessFlags {
        self.access
    }

    /// The protection domain.
    pub fn pd(&self) -> &'a Pd<'a, B> {
        self.pd
    }

    /// Records a PD and rights the device gave the region's key in place.
    pub(super) fn set_pd_access(&mut self, pd: &'a Pd<'a, B>, access: AccessFlags) {
        self.pd = pd;
        self.access = access;
    }

    fn check(&self, offset: usize, len: usize) -> std::result::Result<(), RangeError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(RangeError {
                offset,
                len,
                mr_len: self.len,
            }),
        }
    }

    /// A scatter/gather entry for `len` bytes at `offset`, checked against the region.
    pub fn sge(&self, offset: usize, len: u32) -> std::result::Result<Sge, RangeError> {
        self.check(offset, len as usize)?;
        Ok(Sge {
            addr: self.addr + offset as u64,
            length: len,
            lkey: self.key,
        })
    }

    /// A scatter/gather entry for the whole region (at most 4 GiB - 1).
    pub fn sge_all(&self) -> Sge {
        Sge {
            addr: self.addr,
            length: u32::try_from(self.len).unwrap_or(u32::MAX),
            lkey: self.key,
        }
    }

    /// The remote address of byte `offset`, to hand to a peer.
    pub fn remote(&self, offset: usize) -> RemoteAddr {
        RemoteAddr {
            addr: self.addr + offset as u64,
            rkey: self.key,
        }
    }

    /// Copies `dst.len()` bytes at `offset` out of the region.
    ///
    /// # Panics
    /// If the range is outside the region.
    pub fn read(&self, offset: usize, dst: &mut [u8]) {
        if let Err(e) = self.check(offset, dst.len()) {
            panic!("{e}");
        }
        match self.backing.as_ref() {
            Some(Backing::Dma(b)) => b.read_bytes(offset, dst),
            Some(Backing::User(u)) => {
                for (i, d) in dst.iter_mut().enumerate() {
                    *d = u.byte(offset + i).load(Ordering::Relaxed);
                }
            }
            None => {}
        }
    }

    /// Copies `src` into the region at `offset`.
    ///
    /// # Panics
    /// If the range is outside the region.
    pub fn write(&self, offset: usize, src: &[u8]) {
        if let Err(e) = self.check(offset, src.len()) {
            panic!("{e}");
        }
        match self.backing.as_ref() {
            Some(Backing::Dma(b)) => b.write_bytes(offset, src),
            Some(Backing::User(u)) => {
                for (i, s) in src.iter().enumerate() {
                    u.byte(offset + i).store(*s, Ordering::Relaxed);
                }
            }
            None => {}
        }
    }

    /// Sets `len` bytes at `offset` to `value`.
    ///
    /// # Panics
    /// If the range is outside the region.
    pub fn fill(&self, offset: usize, len: usize, value: u8) {
        if let Err(e) = self.check(offset, len) {
            panic!("{e}");
        }
        match self.backing.as_ref() {
            Some(Backing::Dma(b)) => b.fill(offset, len, value),
            Some(Backing::User(u)) => {
                for i in 0..len {
                    u.byte(offset + i).store(value, Ordering::Relaxed);
                }
            }
            None => {}
        }
    }

    /// A copy of the whole region.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0; self.len];
        self.read(0, &mut v);
        v
    }

    /// Deregisters the region now and reports the result; gives back the buffer
    /// handed to [`Pd::reg_mr`] (`None` for driver-allocated or raw memory).
    pub fn deregister(mut self) -> Result<Option<Box<[u8]>>> {
        let r = self.destroy_key();
        let backing = self.backing.take();
        r?;
        Ok(match backing {
            Some(Backing::User(u)) => u.into_box(),
            _ => None,
        })
    }

    fn destroy_key(&self) -> Result<()> {
        // No copy of a scattered CQE reaches the memory after this.
        self.pd.context().mrs().remove(self.key);
        let mut input = new_input(Opcode::DestroyMkey, 0, destroy_mkey_in::SIZE);
        destroy_mkey_in::mkey_index.set(&mut input, u64::from(mkey::mkey_index(self.key)));
        exec(self.pd.context(), &input, destroy_mkey_out::SIZE).map(|_| ())
    }
}

impl<B: Bus> Drop for MemoryRegion<'_, B> {
    fn drop(&mut self) {
        if self.backing.is_some() {
            if let Err(e) = self.destroy_key() {
                tracing::warn!(lkey = self.key, error = %e, "DESTROY_MKEY failed");
            }
        }
        // The backing (if still here) unmaps, then frees, after the key is gone.
    }
}

#[cfg(test)]
mod access_tests {
    use super::AccessFlags as A;

    #[test]
    fn flags_of_their_verbs_bits() {
        assert_eq!(A::from_bits(0), Some(A::empty()));
        assert_eq!(A::from_bits(9), Some(A::LOCAL_WRITE | A::REMOTE_ATOMIC));
        assert_eq!(A::from_bits(15), Some(A::all()));
        assert_eq!(A::from_bits(0x10), None);
        assert_eq!(A::from_bits(0x100001), None);
        assert_eq!(
            A::all().remote(),
            A::REMOTE_WRITE | A::REMOTE_READ | A::REMOTE_ATOMIC
        );
        assert_eq!(A::LOCAL_WRITE.remote(), A::empty());
    }
}
