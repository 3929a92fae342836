//! HCA life-cycle commands: ENABLE/DISABLE_HCA, QUERY/SET_ISSI, QUERY_PAGES,
//! MANAGE_PAGES, QUERY/SET_HCA_CAP, INIT_HCA, TEARDOWN_HCA, ACCESS_REG (HOST_ENDIANNESS, PAOS) and
//! NOP
//! (`mlx5-controlpath.md` §3, §4.1).

use super::caps::{CapType, CAP_IMAGE};
use super::ifc::*;
use super::pages::{GiveError, PagePhase};
use super::{Cmd, CmdResult, Fail, Firmware, HcaState, Out, Syndrome};
use crate::iommu::{Access, Iommu};

/// ISSIs the firmware supports: 0 and 1 (`supported_issi_dw0` bits).
const SUPPORTED_ISSI: u32 = 0b11;

/// Most page entries one MANAGE_PAGES may carry (what fits in the largest message).
pub const MAX_PAGES_PER_CMD: u64 = ((crate::cmdq::MAX_MESSAGE - 16) / 8) as u64;

/// TEARDOWN_HCA profiles.
const TEARDOWN_GRACEFUL: u64 = 0;
const TEARDOWN_FORCE: u64 = 1;
const TEARDOWN_PREPARE_FAST: u64 = 2;

/// ACCESS_REG register ids (Linux `driver.h` `MLX5_REG_*`).
const REG_PAOS: u64 = 0x5006;
const REG_HOST_ENDIANNESS: u64 = 0x7004;

impl Firmware {
    fn self_function(c: &Cmd, ecpu: ferroverbs_hw::Field, fid: ferroverbs_hw::Field) -> bool {
        c.get(ecpu) == 0 && c.get(fid) == 0
    }

    pub(super) fn enable_hca(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(enable_hca_in::SIZE, enable_hca_out::SIZE)?;
        if self.state != HcaState::Disabled {
            return Err(Syndrome::EnableAlreadyEnabled.into());
        }
        if !Self::self_function(
            c,
            enable_hca_in::embedded_cpu_function,
            enable_hca_in::function_id,
        ) {
            return Err(Syndrome::EnableBadFunction.into());
        }
        self.state = HcaState::Enabled;
        Out::new(enable_hca_out::SIZE).done()
    }

    pub(super) fn disable_hca(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(disable_hca_in::SIZE, disable_hca_out::SIZE)?;
        if self.state == HcaState::Initialized {
            return Err(Syndrome::DisableWhileInitialized.into());
        }
        if !Self::self_function(
            c,
            disable_hca_in::embedded_cpu_function,
            disable_hca_in::function_id,
        ) {
            return Err(Syndrome::DisableBadFunction.into());
        }
        // The function forgets everything: a later ENABLE_HCA starts afresh.
        self.reset();
        Out::new(disable_hca_out::SIZE).done()
    }

    pub(super) fn query_issi(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(query_issi_in::SIZE, query_issi_out::SIZE)?;
        let mut o = Out::new(query_issi_out::SIZE);
        o.set(query_issi_out::current_issi, u64::from(self.issi));
        o.set(
            query_issi_out::supported_issi_dw0,
            u64::from(SUPPORTED_ISSI),
        );
        o.done()
    }

    pub(super) fn set_issi(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(set_issi_in::SIZE, set_issi_out::SIZE)?;
        if self.state == HcaState::Initialized {
            return Err(Syndrome::SetIssiAfterInit.into());
        }
        let issi = c.get(set_issi_in::current_issi);
        if issi >= 32 || SUPPORTED_ISSI & (1 << issi) == 0 {
            return Err(Syndrome::SetIssiUnsupported.into());
        }
        self.issi = issi as u16;
        Out::new(set_issi_out::SIZE).done()
    }

    pub(super) fn query_pages(&mut self, c: &Cmd) -> CmdResult {
        let phase = PagePhase::from_op_mod(c.op_mod).ok_or(Fail::from(Syndrome::BadOpMod))?;
        c.lengths(query_pages_in::SIZE, query_pages_out::SIZE)?;
        if !Self::self_function(
            c,
            query_pages_in::embedded_cpu_function,
            query_pages_in::function_id,
        ) {
            return Err(Syndrome::PagesBadFunction.into());
        }
        let n = self.pages.query(phase, self.state == HcaState::Initialized);
        let mut o = Out::new(query_pages_out::SIZE);
        o.set(query_pages_out::function_id, 0);
        o.set(query_pages_out::num_pages, u64::from(n as u32));
        o.done()
    }

    pub(super) fn manage_pages(&mut self, c: &Cmd, io: &Iommu) -> CmdResult {
        // op_mod 0 CANT_GIVE, 1 GIVE, 2 TAKE.
        if c.op_mod > 2 {
            return Err(Syndrome::BadOpMod.into());
        }
        c.lengths(manage_pages_in::SIZE, manage_pages_out::SIZE)?;
        if !Self::self_function(
            c,
            manage_pages_in::embedded_cpu_function,
            manage_pages_in::function_id,
        ) {
            return Err(Syndrome::PagesBadFunction.into());
        }
        let n = c.get(manage_pages_in::input_num_entries);
        if n > MAX_PAGES_PER_CMD {
            return Err(Syndrome::GiveTooMany.into());
        }
        let initialized = self.state == HcaState::Initialized;
        match c.op_mod {
            0 => {
                self.pages.cant_give();
                Out::new(manage_pages_out::SIZE).done()
            }
            1 => {
                let start = manage_pages_in::pas.byte_offset();
                let list = c
                    .inp
                    .be64s(start, n as usize)
                    .ok_or(Fail::from(Syndrome::GiveInputShort))?;
                self.pages.check_give(&list).map_err(|e| match e {
                    GiveError::Misaligned(_) => Fail::from(Syndrome::GiveMisaligned),
                    GiveError::Duplicate(_) => Fail::from(Syndrome::GiveDuplicate),
                })?;
                if list
                    .iter()
                    .any(|&p| !Self::mapped(io, p, 4096, Access::Write))
                {
                    return Err(Syndrome::GiveNotMapped.into());
                }
                // Checked above: cannot fail.
                let _ = self.pages.give(&list);
                Out::new(manage_pages_out::SIZE).done()
            }
            _ => {
                let start = manage_pages_out::pas.byte_offset();
                let need = start + n as usize * 8;
                if c.outlen < need {
                    return Err(Syndrome::TakeOutputShort.into());
                }
                let taken = self.pages.take(n, initialized);
                let mut o = Out::new(start + taken.len() * 8);
                o.set(manage_pages_out::output_num_entries, taken.len() as u64);
                o.put_be64s(start, &taken);
                o.done()
            }
        }
    }

    pub(super) fn query_hca_cap(&mut self, c: &Cmd) -> CmdResult {
        let ty =
            CapType::from_code(c.op_mod >> 1).ok_or(Fail::from(Syndrome::CapTypeUnsupported))?;
        c.lengths(query_hca_cap_in::SIZE, query_hca_cap_out::SIZE)?;
        if c.get(query_hca_cap_in::other_function) != 0 || c.get(query_hca_cap_in::function_id) != 0
        {
            return Err(Syndrome::CapOtherFunction.into());
        }
        let mut o = Out::new(query_hca_cap_out::SIZE);
        o.put(
            query_hca_cap_out::capability,
            self.caps.image(ty, c.op_mod & 1 == 1),
        );
        o.done()
    }

    pub(super) fn set_hca_cap(&mut self, c: &Cmd) -> CmdResult {
        if c.op_mod & 1 != 0 {
            return Err(Syndrome::BadOpMod.into());
        }
        let ty =
            CapType::from_code(c.op_mod >> 1).ok_or(Fail::from(Syndrome::CapTypeUnsupported))?;
        c.lengths(set_hca_cap_in::SIZE, set_hca_cap_out::SIZE)?;
        if self.state == HcaState::Initialized {
            return Err(Syndrome::SetCapAfterInit.into());
        }
        if c.get(set_hca_cap_in::other_function) != 0 || c.get(set_hca_cap_in::function_id) != 0 {
            return Err(Syndrome::CapOtherFunction.into());
        }
        let img = c.inp.bytes(set_hca_cap_in::capability);
        let img = &img[..img.len().min(CAP_IMAGE)];
        self.caps.set(ty, img).map_err(Fail::from)?;
        self.size_tables();
        Out::new(set_hca_cap_out::SIZE).done()
    }

    pub(super) fn init_hca(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(init_hca_in::SIZE, init_hca_out::SIZE)?;
        if self.state == HcaState::Initialized {
            return Err(Syndrome::InitAlreadyInitialized.into());
        }
        if !self.pages.init_satisfied() {
            return Err(Syndrome::InitPagesMissing.into());
        }
        self.size_tables();
        self.state = HcaState::Initialized;
        Out::new(init_hca_out::SIZE).done()
    }

    /// TEARDOWN_HCA (Linux `mlx5_cmd_teardown_hca`, `mlx5_cmd_force_teardown_hca`,
    /// `mlx5_cmd_fast_teardown_hca` in `fw.c`).
    ///
    /// GRACEFUL_CLOSE is refused while any object exists (`BAD_RES_STATE`); a driver
    /// then forces the close. FORCE_CLOSE needs the `force_teardown` capability and,
    /// as PREPARE_FAST_TEARDOWN does (which needs `fast_teardown`), drops every object
    /// the function still holds (QPs, SRQs, CQs, EQs, memory keys, PDs, transport
    /// domains, UARs and Q counter sets); both report `teardown_hca_out.state`
    /// SUCCESS (`MLX5_TEARDOWN_HCA_OUT_FORCE_STATE_SUCCESS`), the value Linux checks
    /// before it trusts the forced close.
    pub(super) fn teardown_hca(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(teardown_hca_in::SIZE, teardown_hca_out::SIZE)?;
        let profile = c.get(teardown_hca_in::profile);
        if profile > TEARDOWN_PREPARE_FAST {
            return Err(Syndrome::TeardownBadProfile.into());
        }
        if profile == TEARDOWN_PREPARE_FAST && self.caps.gen(cmd_hca_cap::fast_teardown) == 0 {
            return Err(Syndrome::TeardownFastUnsupported.into());
        }
        if profile == TEARDOWN_FORCE && self.caps.gen(cmd_hca_cap::force_teardown) == 0 {
            return Err(Syndrome::TeardownForceUnsupported.into());
        }
        if self.state != HcaState::Initialized {
            return Err(Syndrome::TeardownNotInitialized.into());
        }
        if profile == TEARDOWN_GRACEFUL && self.objects().total() != 0 {
            return Err(Syndrome::TeardownObjectsLeft.into());
        }
        if profile == TEARDOWN_FORCE || profile == TEARDOWN_PREPARE_FAST {
            self.qps.clear();
            self.srqs.clear();
            self.cqs.clear();
            self.eqs.clear();
            self.mkeys.clear();
            self.mkey_objs.clear();
            self.tds.clear();
            self.pds.clear();
            self.uars.clear();
            self.q_sets.clear();
            self.counters = super::counters::Counters::default();
            self.datapath_events.push(super::DataPathEvent::Reset);
        }
        self.state = HcaState::Enabled;
        let mut o = Out::new(teardown_hca_out::SIZE);
        // state 0: SUCCESS (fast teardown prepared, or closed).
        o.set(teardown_hca_out::state, 0);
        o.done()
    }

    pub(super) fn nop(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(mbox_in::SIZE, mbox_out::SIZE)?;
        Out::new(mbox_out::SIZE).done()
    }

    pub(super) fn access_reg(&mut self, c: &Cmd, io: &Iommu) -> CmdResult {
        // op_mod 0 write, 1 read.
        if c.op_mod > 1 {
            return Err(Syndrome::BadOpMod.into());
        }
        let write = c.op_mod == 0;
        c.lengths(access_register_in::SIZE, access_register_out::SIZE)?;
        let id = c.get(access_register_in::register_id);
        let data_at = access_register_in::register_data.byte_offset();
        let out_at = access_register_out::register_data.byte_offset();
        let data = c.inp.0.get(data_at..).unwrap_or(&[]);
        let reg_size = match id {
            REG_HOST_ENDIANNESS => register_host_endianness::SIZE,
            REG_PAOS => paos_reg::SIZE,
            _ => return Err(Syndrome::AccessRegUnknown.into()),
        };
        if data.len() < reg_size {
            return Err(Syndrome::AccessRegShort.into());
        }
        if c.outlen < out_at + reg_size {
            return Err(Syndrome::OutputTooShort.into());
        }
        let data = &data[..reg_size];
        let mut reg = data.to_vec();
        match id {
            REG_HOST_ENDIANNESS => {
                if write {
                    // Only `he` (bit 0) is defined; the other 127 bits are reserved.
                    let mut rest = data.to_vec();
                    register_host_endianness::he.set(&mut rest, 0);
                    if rest.iter().any(|&b| b != 0) {
                        return Err(Syndrome::HostEndiannessBad.into());
                    }
                    self.host_endianness = register_host_endianness::he.get(data) as u8;
                }
                reg.fill(0);
                register_host_endianness::he.set(&mut reg, u64::from(self.host_endianness));
            }
            _ => self.paos(io, write, data, &mut reg)?,
        }
        let mut o = Out::new(out_at + reg_size);
        o.0[out_at..out_at + reg_size].copy_from_slice(&reg);
        o.done()
    }
}
