//! On-demand paging (ODP) as Linux's mlx5_ib offers it to a process: the
//! capabilities `ibv_query_device_ex` reports (`mlx5_ib_internal_fill_odp_caps`),
//! regions registered with `IBV_ACCESS_ON_DEMAND` (nothing pinned: the device reaches
//! the pages through the process's page tables, `Bus::dma_map_on_demand`), and
//! `ibv_advise_mr` (UVERBS_METHOD_ADVISE_MR, `mlx5_ib_advise_mr`).
//!
//! Only on the simulator: over VFIO the type-1 IOMMU pins what it maps and this layer
//! resolves no device page faults, so the device reports no ODP and an on-demand
//! registration is EOPNOTSUPP there, as on a kernel without
//! `CONFIG_INFINIBAND_ON_DEMAND_PAGING`. Implicit regions (the whole address space)
//! are not offered: `IB_ODP_SUPPORT_IMPLICIT` needs the KSM child mkeys of
//! `mlx5_ib_alloc_implicit_mr`, which this layer does not build.

use ferroverbs_hw::control::caps::{odp_cap as o, odp_per_transport_service_cap as t};
use ferroverbs_hw::Field;

use super::{Ucontext, ACCESS_LOCAL_WRITE, ACCESS_ON_DEMAND};
use crate::nic::Nic;
use crate::{user, Errno};

/// `IB_ODP_SUPPORT` (`ib_verbs.h`, `ibv_odp_general_caps`).
pub const ODP_SUPPORT: u64 = 1;

/// `ib_odp_transport_cap_bits`: what one transport may do on ODP memory.
const SUPPORT_SEND: u32 = 1;
const SUPPORT_RECV: u32 = 1 << 1;
const SUPPORT_WRITE: u32 = 1 << 2;
const SUPPORT_READ: u32 = 1 << 3;
const SUPPORT_ATOMIC: u32 = 1 << 4;
const SUPPORT_SRQ_RECV: u32 = 1 << 5;

/// `ib_uverbs_advise_mr_advice`.
const ADVICE_PREFETCH: u64 = 0;
const ADVICE_PREFETCH_WRITE: u64 = 1;
const ADVICE_PREFETCH_NO_FAULT: u64 = 2;
/// `IB_UVERBS_ADVISE_MR_FLAG_FLUSH`: prefetch before returning.
const ADVISE_FLAG_FLUSH: u64 = 1;

/// The ODP capabilities of a device as `ib_uverbs_ex_query_device_resp` carries them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OdpCaps {
    /// `general_caps`.
    pub general: u64,
    /// `per_transport_caps.rc_odp_caps`.
    pub rc: u32,
    /// `per_transport_caps.uc_odp_caps`.
    pub uc: u32,
    /// `per_transport_caps.ud_odp_caps`.
    pub ud: u32,
    /// `xrc_odp_caps`.
    pub xrc: u32,
}

/// The transport bits Linux takes from one `odp_per_transport_service_cap` field,
/// given as the 32-bit value of the field.
fn transport(value: u64, take: &[(Field, u32)]) -> u32 {
    let bytes = (value as u32).to_be_bytes();
    take.iter()
        .filter(|(f, _)| f.get(&bytes) != 0)
        .fold(0, |acc, (_, bit)| acc | bit)
}

/// Linux `mlx5_ib_internal_fill_odp_caps`: nothing without the general `pg`
/// capability (or off the simulator, see the module doc); else `IB_ODP_SUPPORT` and,
/// per transport, the operations the device's ODP page names (UD: send and SRQ
/// receive only; UC: none, as Linux fills none).
pub fn caps(nic: &Nic) -> OdpCaps {
    if nic.sim.is_none() || nic.cap(ferroverbs_hw::control::caps::cmd_hca_cap::pg) == 0 {
        return OdpCaps::default();
    }
    let all = [
        (t::send, SUPPORT_SEND),
        (t::receive, SUPPORT_RECV),
        (t::write, SUPPORT_WRITE),
        (t::read, SUPPORT_READ),
        (t::atomic, SUPPORT_ATOMIC),
        (t::srq_receive, SUPPORT_SRQ_RECV),
    ];
    let ud = [(t::send, SUPPORT_SEND), (t::srq_receive, SUPPORT_SRQ_RECV)];
    OdpCaps {
        general: ODP_SUPPORT,
        rc: transport(nic.ctx.odp_cap(o::rc_odp_caps), &all),
        uc: 0,
        ud: transport(nic.ctx.odp_cap(o::ud_odp_caps), &ud),
        xrc: transport(nic.ctx.odp_cap(o::xrc_odp_caps), &all),
    }
}

/// Whether regions with `access` are registered on demand: EOPNOTSUPP when the device
/// offers no ODP (Linux `ib_check_mr_access` without `IBK_ON_DEMAND_PAGING`).
pub fn on_demand(nic: &Nic, access: u32) -> Result<bool, Errno> {
    if access & ACCESS_ON_DEMAND == 0 {
        return Ok(false);
    }
    if caps(nic).general & ODP_SUPPORT == 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    Ok(true)
}

/// One entry of ADVISE_MR's scatter list (`struct ib_uverbs_sge`: addr, length, lkey).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    /// Start, in the region's IOVA space.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// The region's lkey.
    pub lkey: u32,
}

/// Parses ADVISE_MR's scatter list: EINVAL unless a whole number of 16-byte entries
/// (`ib_uverbs_sge`), at least one (`uverbs_attr_ptr_get_array_size`).
pub fn parse_sges(bytes: &[u8]) -> Result<Vec<Sge>, Errno> {
    use crate::abi::{sge as e, Req};
    if bytes.is_empty() || !bytes.len().is_multiple_of(e::SIZE) {
        return Err(Errno::EINVAL);
    }
    Ok(bytes
        .chunks_exact(e::SIZE)
        .map(|b| {
            let r = Req(b);
            Sge {
                addr: r.u64(e::addr),
                length: r.u32(e::length),
                lkey: r.u32(e::lkey),
            }
        })
        .collect())
}

impl Ucontext {
    /// UVERBS_METHOD_ADVISE_MR (Linux `UVERBS_HANDLER(UVERBS_METHOD_ADVISE_MR)`, then
    /// `mlx5_ib_advise_mr`): an advice other than the three prefetches is
    /// EOPNOTSUPP, an unknown flag EINVAL, an unknown PD EINVAL; each entry must name
    /// an on-demand region of that PD by its lkey, writable for PREFETCH_WRITE
    /// (`get_prefetchable_mr`), else ENOENT. With FLUSH the pages are faulted in
    /// before the answer (`mlx5_ib_prefetch_sg_list`): a range outside its region, or
    /// not readable by the process, is EFAULT (`pagefault_mr`); PREFETCH_NO_FAULT
    /// takes only what is present and never faults. Without FLUSH the work is
    /// Linux's background work, whose failures nobody hears: the answer is 0 once
    /// the keys are checked.
    pub fn advise_mr(
        &mut self,
        pd: u32,
        advice: u64,
        flags: u64,
        sges: &[Sge],
    ) -> Result<(), Errno> {
        if advice > ADVICE_PREFETCH_NO_FAULT {
            return Err(Errno::EOPNOTSUPP);
        }
        if flags & !ADVISE_FLAG_FLUSH != 0 || !self.pds.contains_key(&pd) {
            return Err(Errno::EINVAL);
        }
        let mut ranges = Vec::with_capacity(sges.len());
        for s in sges {
            let mr = self
                .mrs
                .values()
                .find(|m| m.key == s.lkey && m.pd == pd && m.access & ACCESS_ON_DEMAND != 0)
                .ok_or(Errno::ENOENT)?;
            if advice == ADVICE_PREFETCH_WRITE && mr.access & ACCESS_LOCAL_WRITE == 0 {
                return Err(Errno::ENOENT);
            }
            ranges.push((mr.start, mr.hca_va, mr.length));
        }
        if flags & ADVISE_FLAG_FLUSH == 0 || advice == ADVICE_PREFETCH_NO_FAULT {
            return Ok(());
        }
        debug_assert!(matches!(advice, ADVICE_PREFETCH | ADVICE_PREFETCH_WRITE));
        for (s, (start, iova, length)) in sges.iter().zip(ranges) {
            let off = s.addr.checked_sub(iova).ok_or(Errno::EFAULT)?;
            if off >= length || length - off < u64::from(s.length) {
                return Err(Errno::EFAULT);
            }
            user::check_readable(start + off, u64::from(s.length))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The per-transport field's bits land where `mlx5_ifc.h` puts them: `send` is
    /// the field's most significant bit, `srq_receive` its sixth.
    #[test]
    fn transport_bits_follow_the_ifc_layout() {
        let all = [(t::send, SUPPORT_SEND), (t::srq_receive, SUPPORT_SRQ_RECV)];
        assert_eq!(transport(0x8000_0000, &all), SUPPORT_SEND);
        assert_eq!(transport(0x0400_0000, &all), SUPPORT_SRQ_RECV);
        assert_eq!(transport(0x7800_0000, &all), 0);
    }

    #[test]
    fn advise_mr_scatter_lists_are_whole_entries() {
        let mut b = vec![0u8; 16];
        b[..8].copy_from_slice(&0x1000u64.to_ne_bytes());
        b[8..12].copy_from_slice(&64u32.to_ne_bytes());
        b[12..].copy_from_slice(&0x1234u32.to_ne_bytes());
        assert_eq!(
            parse_sges(&b),
            Ok(vec![Sge {
                addr: 0x1000,
                length: 64,
                lkey: 0x1234
            }])
        );
        assert_eq!(parse_sges(&[]), Err(Errno::EINVAL));
        assert_eq!(parse_sges(&b[..15]), Err(Errno::EINVAL));
    }
}
