//! Ports and the NIC vport: QUERY/MODIFY_NIC_VPORT_CONTEXT (RoCE enable, MTU,
//! loopback), QUERY_VPORT_STATE, SET/QUERY_ROCE_ADDRESS (the GID table), and the
//! PAOS port register (`mlx5-controlpath.md` §4.8).

use ferroverbs_hw::control::roce::{eui64, ipv4_mapped_gid, RoceL3Type, RoceVersion};
use ferroverbs_hw::Field;

use super::caps::Caps;
use super::ifc::*;
use super::{Cmd, CmdResult, Fail, Firmware, FwConfig, HcaState, Out, Syndrome};
use crate::iommu::Iommu;

/// Largest Ethernet MTU of a port.
pub const MAX_MTU: u16 = 9978;
/// Smallest MTU MODIFY_NIC_VPORT_CONTEXT accepts.
pub const MIN_MTU: u16 = 68;

pub use ferroverbs_hw::control::roce::RoceAddr;

/// A RoCE v2 GID table entry for an IPv4 address (`::ffff:a.b.c.d`).
pub fn roce_v2_ipv4(ip: [u8; 4], mac: [u8; 6]) -> RoceAddr {
    RoceAddr {
        gid: ipv4_mapped_gid(ip),
        mac,
        vlan: None,
        l3_type: RoceL3Type::Ipv4.value(),
        version: RoceVersion::V2.value(),
    }
}

fn put(buf: &mut [u8], f: Field, v: u64) {
    if f.fits(buf.len()) {
        f.set(buf, v);
    }
}

fn get(buf: &[u8], f: Field) -> u64 {
    if f.fits(buf.len()) {
        f.get(buf)
    } else {
        0
    }
}

/// A physical port and (for port 1) the function's NIC vport.
#[derive(Clone, Debug)]
pub struct Port {
    /// Permanent MAC address.
    pub mac: [u8; 6],
    /// NIC vport MTU (Ethernet, bytes).
    pub mtu: u16,
    /// RoCE enabled on the vport (`nic_vport_context.roce_en`).
    pub roce_en: bool,
    /// Unicast loopback disabled.
    pub disable_uc_local_lb: bool,
    /// Multicast loopback disabled.
    pub disable_mc_local_lb: bool,
    /// Promiscuous modes (uc, mc, all).
    pub promisc: [bool; 3],
    /// The vport change event is armed.
    pub arm_change_event: bool,
    /// PAOS admin status: up.
    pub admin_up: bool,
    /// The physical link is up.
    pub link_up: bool,
    /// The GID table (`roce_address_table_size` entries).
    pub gids: Vec<Option<RoceAddr>>,
    /// The port's QP1 (general services QP), once one was initialized on it.
    pub gsi_qpn: Option<u32>,
}

impl Port {
    /// The valid GID entry at `index`, if any.
    pub fn gid(&self, index: usize) -> Option<&RoceAddr> {
        self.gids.get(index).and_then(|g| g.as_ref())
    }

    /// Operational state: link up and administratively up.
    pub fn oper_up(&self) -> bool {
        self.link_up && self.admin_up
    }

    /// EUI-64 GUID derived from the MAC.
    pub fn guid(&self) -> u64 {
        u64::from_be_bytes(eui64(self.mac))
    }
}

/// The ports of a configuration in their reset state.
pub(super) fn ports(cfg: &FwConfig, caps: &Caps) -> Vec<Port> {
    let size = caps.roce(roce_cap::roce_address_table_size) as usize;
    (0..usize::from(cfg.ports.max(1)))
        .map(|i| {
            let mac = cfg
                .macs
                .get(i)
                .copied()
                .unwrap_or([0x02, 0, 0, 0, 0, i as u8 + 1]);
            let mut gids = vec![None; size];
            if let Some(list) = cfg.gids.get(i) {
                for (slot, g) in gids.iter_mut().zip(list) {
                    *slot = Some(*g);
                }
            }
            Port {
                mac,
                mtu: 1500,
                roce_en: false,
                disable_uc_local_lb: false,
                disable_mc_local_lb: false,
                promisc: [false; 3],
                arm_change_event: false,
                admin_up: true,
                link_up: cfg.link_up,
                gids,
                gsi_qpn: None,
            }
        })
        .collect()
}

impl Firmware {
    /// The QP1 of port `port` (1-based), if one was initialized on it: where the
    /// engine delivers UD packets addressed to QP 1.
    pub fn gsi_qpn(&self, port: usize) -> Option<u32> {
        self.ports.get(port.checked_sub(1)?)?.gsi_qpn
    }

    fn vport_self(c: &Cmd, other: Field) -> Result<(), Fail> {
        if c.get(other) != 0 {
            return Err(Syndrome::VportOther.into());
        }
        Ok(())
    }

    pub(super) fn query_nic_vport_context(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(
            query_nic_vport_context_in::SIZE,
            query_nic_vport_context_out::SIZE,
        )?;
        Self::vport_self(c, query_nic_vport_context_in::other_vport)?;
        let p = &self.ports[0];
        let ctx = query_nic_vport_context_out::nic_vport_context;
        let mut o = Out::new(query_nic_vport_context_out::SIZE);
        let n = nic_vport_context::roce_en;
        o.set_at(ctx, n, u64::from(p.roce_en));
        o.set_at(
            ctx,
            nic_vport_context::disable_uc_local_lb,
            u64::from(p.disable_uc_local_lb),
        );
        o.set_at(
            ctx,
            nic_vport_context::disable_mc_local_lb,
            u64::from(p.disable_mc_local_lb),
        );
        o.set_at(
            ctx,
            nic_vport_context::arm_change_event,
            u64::from(p.arm_change_event),
        );
        o.set_at(ctx, nic_vport_context::mtu, u64::from(p.mtu));
        o.set_at(ctx, nic_vport_context::system_image_guid, p.guid());
        o.set_at(ctx, nic_vport_context::port_guid, p.guid());
        o.set_at(ctx, nic_vport_context::node_guid, p.guid());
        o.set_at(ctx, nic_vport_context::promisc_uc, u64::from(p.promisc[0]));
        o.set_at(ctx, nic_vport_context::promisc_mc, u64::from(p.promisc[1]));
        o.set_at(ctx, nic_vport_context::promisc_all, u64::from(p.promisc[2]));
        let mac = p.mac;
        let m = u64::from_be_bytes([0, 0, mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]]);
        let addr = nic_vport_context::permanent_address.at(ctx.bit);
        o.set_at(addr, mac_address_layout::mac_addr_47_32, m >> 32);
        o.set_at(addr, mac_address_layout::mac_addr_31_0, m & 0xffff_ffff);
        o.done()
    }

    pub(super) fn modify_nic_vport_context(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(
            modify_nic_vport_context_in::SIZE,
            modify_nic_vport_context_out::SIZE,
        )?;
        Self::vport_self(c, modify_nic_vport_context_in::other_vport)?;
        let sel = modify_nic_vport_context_in::field_select;
        let ctx = modify_nic_vport_context_in::nic_vport_context;
        let s = |f: Field| c.inp.at(sel, f) != 0;
        let v = |f: Field| c.inp.at(ctx, f);
        use modify_nic_vport_field_select as fs;
        if s(fs::affiliation)
            || s(fs::node_guid)
            || s(fs::port_guid)
            || s(fs::min_inline)
            || s(fs::permanent_address)
            || s(fs::addresses_list)
        {
            return Err(Syndrome::VportFieldUnsupported.into());
        }
        let mtu = v(nic_vport_context::mtu);
        if s(fs::mtu) && !(u64::from(MIN_MTU)..=u64::from(MAX_MTU)).contains(&mtu) {
            return Err(Syndrome::VportBadMtu.into());
        }
        let p = &mut self.ports[0];
        if s(fs::roce_en) {
            p.roce_en = v(nic_vport_context::roce_en) != 0;
        }
        if s(fs::mtu) {
            p.mtu = mtu as u16;
        }
        if s(fs::disable_uc_local_lb) {
            p.disable_uc_local_lb = v(nic_vport_context::disable_uc_local_lb) != 0;
        }
        if s(fs::disable_mc_local_lb) {
            p.disable_mc_local_lb = v(nic_vport_context::disable_mc_local_lb) != 0;
        }
        if s(fs::change_event) {
            p.arm_change_event = v(nic_vport_context::arm_change_event) != 0;
        }
        if s(fs::promisc) {
            p.promisc = [
                v(nic_vport_context::promisc_uc) != 0,
                v(nic_vport_context::promisc_mc) != 0,
                v(nic_vport_context::promisc_all) != 0,
            ];
        }
        Out::new(modify_nic_vport_context_out::SIZE).done()
    }

    pub(super) fn query_vport_state(&mut self, c: &Cmd) -> CmdResult {
        // op_mod: 0 VNIC vport, 1 e-switch vport, 2 uplink.
        if c.op_mod > 2 {
            return Err(Syndrome::BadOpMod.into());
        }
        c.lengths(query_vport_state_in::SIZE, query_vport_state_out::SIZE)?;
        Self::vport_self(c, query_vport_state_in::other_vport)?;
        let p = &self.ports[0];
        let mut o = Out::new(query_vport_state_out::SIZE);
        o.set(query_vport_state_out::admin_state, u64::from(p.admin_up));
        let up = p.oper_up() && self.state == HcaState::Initialized;
        o.set(query_vport_state_out::state, u64::from(up));
        o.done()
    }

    /// The port a GID-table command addresses: `vhca_port_num` counts only when the
    /// function has several vHCA ports (`num_vhca_ports`), as the PRM says.
    fn roce_port(&self, c: &Cmd, f: Field) -> Result<usize, Fail> {
        if self.caps.gen(cmd_hca_cap::num_vhca_ports) == 0 {
            return Ok(0);
        }
        let p = c.get(f) as usize;
        if p == 0 || p > self.ports.len() {
            return Err(Syndrome::RoceAddrBadPort.into());
        }
        Ok(p - 1)
    }

    pub(super) fn set_roce_address(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(set_roce_address_in::SIZE, set_roce_address_out::SIZE)?;
        let port = self.roce_port(c, set_roce_address_in::vhca_port_num)?;
        let index = c.get(set_roce_address_in::roce_address_index) as usize;
        if index >= self.ports[port].gids.len() {
            return Err(Syndrome::RoceAddrBadIndex.into());
        }
        let a = RoceAddr::read(c.inp.0, set_roce_address_in::roce_address.bit)
            .map_err(|_| Fail::from(Syndrome::InputTooShort))?;
        let entry = if a.gid == [0; 16] && a.mac == [0; 6] {
            // Linux deletes an entry by writing it with no GID and no MAC.
            None
        } else {
            if RoceVersion::from_value(a.version).is_none() {
                return Err(Syndrome::RoceAddrBadVersion.into());
            }
            if RoceL3Type::from_value(a.l3_type).is_none() {
                return Err(Syndrome::RoceAddrBadL3Type.into());
            }
            Some(a)
        };
        self.ports[port].gids[index] = entry;
        Out::new(set_roce_address_out::SIZE).done()
    }

    pub(super) fn query_roce_address(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(query_roce_address_in::SIZE, query_roce_address_out::SIZE)?;
        let port = self.roce_port(c, query_roce_address_in::vhca_port_num)?;
        let index = c.get(query_roce_address_in::roce_address_index) as usize;
        if index >= self.ports[port].gids.len() {
            return Err(Syndrome::RoceAddrBadIndex.into());
        }
        let mut o = Out::new(query_roce_address_out::SIZE);
        if let Some(e) = self.ports[port].gid(index) {
            e.write(&mut o.0, query_roce_address_out::roce_address.bit);
        }
        o.done()
    }

    fn reg_port(&self, data: &[u8], f: Field) -> Result<usize, Fail> {
        let p = get(data, f) as usize;
        if p == 0 || p > self.ports.len() {
            return Err(Syndrome::RegBadPort.into());
        }
        Ok(p - 1)
    }

    /// PAOS (port administrative and operational status), ACCESS_REG 0x5006.
    pub(super) fn paos(
        &mut self,
        io: &Iommu,
        write: bool,
        data: &[u8],
        reg: &mut [u8],
    ) -> Result<(), Fail> {
        let port = self.reg_port(data, paos_reg::local_port)?;
        if write && get(data, paos_reg::ase) != 0 {
            let was = self.ports[port].oper_up();
            match get(data, paos_reg::admin_status) {
                1 => self.ports[port].admin_up = true,
                2 => self.ports[port].admin_up = false,
                _ => return Err(Syndrome::PaosBadStatus.into()),
            }
            self.port_event(io, port, was);
        }
        let p = &self.ports[port];
        reg.fill(0);
        put(reg, paos_reg::local_port, port as u64 + 1);
        put(reg, paos_reg::admin_status, if p.admin_up { 1 } else { 2 });
        put(reg, paos_reg::oper_status, if p.oper_up() { 1 } else { 2 });
        Ok(())
    }
}
