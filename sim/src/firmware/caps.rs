//! Device capabilities: what QUERY_HCA_CAP reports and what SET_HCA_CAP may change.
//!
//! Each capability type has a *maximum* image (op_mod bit 0 clear) and a *current*
//! image (bit 0 set), 4096 bytes each (`hca_cap_union`). The values describe a
//! ConnectX-5-like adapter with an Ethernet (RoCE) port (`mlx5-controlpath.md` §4.2;
//! the limits are those Linux's `mlx5_ib` turns into verbs attributes).
//!
//! SET_HCA_CAP carries a copy of the current image with some fields changed, as both
//! drivers build it. Only the fields in [`SETTABLE_GENERAL`] and [`SETTABLE_ROCE`] may
//! differ from the current image, and only to values the rule of each allows (at most
//! the maximum image's value, or one fixed value); any other difference is refused with
//! `BAD_PARAM` and its own syndrome.

use ferroverbs_hw::Field;

use super::ifc::{
    atomic_caps as a, cmd_hca_cap as g, odp_cap as o, odp_per_transport_service_cap as t,
    roce_cap as r,
};
use super::syndrome::Syndrome;
use super::FwConfig;
use ferroverbs_hw::control::caps::{ATOMIC_OPS_CMP_SWAP, ATOMIC_OPS_FETCH_ADD};

/// Size of one capability image (`hca_cap_union`).
pub const CAP_IMAGE: usize = 4096;

/// The capability types the simulator models (`MLX5_CAP_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CapType {
    /// `MLX5_CAP_GENERAL` (0): `cmd_hca_cap`.
    General,
    /// `MLX5_CAP_ATOMIC` (3): `atomic_caps`.
    Atomic,
    /// `MLX5_CAP_ROCE` (4): `roce_cap`.
    Roce,
    /// `MLX5_CAP_ODP` (2): `odp_cap`.
    Odp,
}

impl CapType {
    /// Decodes the cap_type of an op_mod (`op_mod >> 1`).
    pub fn from_code(code: u16) -> Option<Self> {
        match code {
            0 => Some(CapType::General),
            2 => Some(CapType::Odp),
            3 => Some(CapType::Atomic),
            4 => Some(CapType::Roce),
            _ => None,
        }
    }

    /// The `MLX5_CAP_*` number.
    pub fn code(self) -> u16 {
        match self {
            CapType::General => 0,
            CapType::Odp => 2,
            CapType::Atomic => 3,
            CapType::Roce => 4,
        }
    }

    fn idx(self) -> usize {
        match self {
            CapType::General => 0,
            CapType::Atomic => 1,
            CapType::Roce => 2,
            CapType::Odp => 3,
        }
    }
}

/// A capability value forced by the device configuration (both images).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CapOverride {
    /// Which capability page.
    pub cap: CapType,
    /// The field, from `ferroverbs_hw`'s `cmd_hca_cap` / `roce_cap` layouts.
    pub field: Field,
    /// Its value.
    pub value: u64,
}

/// What a settable field accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// Any value up to the maximum image's value.
    UpToMax,
    /// Exactly this value.
    Only(u64),
    /// One of these values.
    OneOf(&'static [u64]),
}

/// General capability fields SET_HCA_CAP may change (those Linux's `handle_hca_cap`
/// and rdma-core's `mlx5_vfio_setup_function` set), and what each accepts.
pub const SETTABLE_GENERAL: &[(Field, Rule)] = &[
    // Command-interface checksums are not modelled: "disabled" (what both drivers set)
    // or the reset state, never "enabled".
    (g::cmdif_checksum, Rule::OneOf(&[0, 1])),
    // The UAR page size, 4 KiB << log_uar_page_sz (Linux sets PAGE_SHIFT - 12: 0 to
    // 4 for the 4 KiB to 64 KiB pages of the hosts ConnectX serves).
    (g::log_uar_page_sz, Rule::OneOf(&[0, 1, 2, 3, 4])),
    (g::pkey_table_size, Rule::UpToMax),
    (g::log_max_qp, Rule::UpToMax),
    (g::drain_sigerr, Rule::UpToMax),
    (g::mkey_by_name, Rule::UpToMax),
    (g::cache_line_128byte, Rule::UpToMax),
    (g::uar_4k, Rule::UpToMax),
    (g::dct, Rule::UpToMax),
    (g::release_all_pages, Rule::UpToMax),
    (g::roce, Rule::UpToMax),
    (g::num_vhca_ports, Rule::UpToMax),
];

/// RoCE capability fields SET_HCA_CAP may change.
pub const SETTABLE_ROCE: &[(Field, Rule)] = &[(r::sw_r_roce_src_udp_port, Rule::UpToMax)];

/// Atomic capability fields SET_HCA_CAP may change: the requester's byte order for
/// 8-byte atomic responses (Linux `handle_hca_cap_atomic` sets host endianness when
/// `supported_atomic_req_8B_endianness_mode_1` allows it; the maximum image holds 1
/// only then).
pub const SETTABLE_ATOMIC: &[(Field, Rule)] = &[(a::atomic_req_8B_endianness_mode, Rule::UpToMax)];

/// The atomic capabilities: the standard 8-byte compare-and-swap and fetch-and-add
/// on RC QPs (what the simulator executes; masked and larger atomics are absent),
/// responses big-endian until SET_HCA_CAP selects host endianness.
fn atomic_defaults() -> Vec<(Field, u64)> {
    vec![
        (
            a::atomic_operations,
            ATOMIC_OPS_CMP_SWAP | ATOMIC_OPS_FETCH_ADD,
        ),
        (a::atomic_size_qp, 8),
        (a::supported_atomic_req_8B_endianness_mode_1, 1),
        (a::atomic_req_8B_endianness_mode, 0),
    ]
}

/// The on-demand paging capabilities (the general page's `pg` is set): RC sends,
/// receives (plain and from an SRQ), RDMA writes, reads and atomics, and UD sends
/// may touch ODP memory, what a ConnectX-5 reports for the transports the simulator
/// has (Linux `mlx5_ib_internal_fill_odp_caps` turns them into `ibv_odp_caps`). The
/// device reaches ODP memory through the process's page tables
/// (`Iommu::map_on_demand`).
fn odp_defaults() -> Vec<(Field, u64)> {
    // One transport's 32-bit field, its flags placed by the per-transport layout.
    let transport = |flags: &[Field]| {
        let mut b = [0u8; 4];
        for f in flags {
            set(&mut b, *f, 1);
        }
        u64::from(u32::from_be_bytes(b))
    };
    vec![
        (
            o::rc_odp_caps,
            transport(&[
                t::send,
                t::receive,
                t::write,
                t::read,
                t::atomic,
                t::srq_receive,
            ]),
        ),
        (o::ud_odp_caps, transport(&[t::send])),
    ]
}

/// The current value of the general capabilities of a ConnectX-5-like adapter.
fn general_defaults(cfg: &FwConfig) -> Vec<(Field, u64)> {
    vec![
        (g::log_max_srq_sz, 15),
        (g::log_max_qp_sz, 15),
        (g::log_max_qp, 18),
        (g::log_max_srq, 23),
        (g::log_max_cq_sz, 22),
        (g::log_max_cq, 24),
        (g::log_max_eq_sz, 22),
        (g::log_max_mkey, 24),
        (g::log_max_eq, 7),
        (g::max_indirection, 4),
        (g::log_max_mrw_sz, 64),
        (g::log_max_klm_list_size, 16),
        (g::log_max_ra_req_qp, 4),
        (g::log_max_ra_res_qp, 4),
        // 8 << 4 = 128 entries in the IB encoding; RoCE uses roce_address_table_size.
        (g::gid_table_size, 4),
        // 128 entries (`to_fw_pkey_sz(128)` = 0).
        (g::pkey_table_size, 0),
        (g::local_ca_ack_delay, 16),
        (g::port_type, 1),
        (g::num_ports, u64::from(cfg.ports.max(1))),
        (g::log_max_msg, 30),
        (g::max_tc, 8),
        (g::cqe_version, 1),
        (g::sctr_data_cqe, 1),
        // MLX5_CMD_HCA_CAP_CMDIF_CHECKSUM_INITIAL_STATE, what a device reports at reset.
        (g::cmdif_checksum, 1),
        (g::roce, 1),
        (g::atomic, 1),
        (g::cq_oi, 1),
        // MODIFY_CQ with op_mod resize (Linux `mlx5_ib_resize_cq` checks it).
        (g::cq_resize, 1),
        (g::vport_counters, 1),
        (g::max_qp_cnt, 255),
        (g::qkv, 1),
        (g::ud, 1),
        (g::uc, 1),
        (g::rc, 1),
        (g::umem_uid_0, 1),
        (g::log_pg_sz, 12),
        (g::bf, 1),
        // TEARDOWN_HCA FORCE_CLOSE (Linux `mlx5_cmd_force_teardown_hca` checks it).
        (g::force_teardown, 1),
        (g::log_bf_reg_size, 9),
        (g::max_wqe_sz_sq, 1024),
        (g::max_wqe_sz_rq, 512),
        (g::log_max_transport_domain, 20),
        (g::log_max_pd, 24),
        (g::roce_rw_supported, 1),
        // On-demand paging (the ODP page, `odp_defaults`).
        (g::pg, 1),
        (g::log_uar_page_sz, 0),
        (
            g::device_frequency_khz,
            crate::engine::cq::DEVICE_FREQUENCY_KHZ as u64,
        ),
    ]
}

/// Maximum-image values that differ from the current image (the settable headroom).
fn general_max_extra() -> Vec<(Field, u64)> {
    vec![
        (g::drain_sigerr, 1),
        (g::mkey_by_name, 1),
        (g::cache_line_128byte, 1),
        (g::uar_4k, 1),
    ]
}

fn roce_defaults(cfg: &FwConfig) -> Vec<(Field, u64)> {
    let _ = cfg;
    vec![
        (r::fl_rc_qp_when_roce_disabled, 1),
        // IPv4 (bit 1) and IPv6 (bit 2) GIDs (`MLX5_ROCE_L3_TYPE_*_CAP`).
        (r::l3_type, 0x6),
        // RoCE v1 (bit 0) and v2 (bit 2) (`MLX5_ROCE_VERSION_*_CAP`).
        (r::roce_version, 0x5),
        (r::r_roce_dest_udp_port, 4791),
        (r::r_roce_max_src_udp_port, 0xffff),
        (r::r_roce_min_src_udp_port, 0xc000),
        (r::roce_address_table_size, 256),
    ]
}

fn roce_max_extra() -> Vec<(Field, u64)> {
    vec![(r::sw_r_roce_src_udp_port, 1)]
}

/// The capability images of the function.
#[derive(Clone, Debug)]
pub struct Caps {
    cur: [Vec<u8>; 4],
    max: [Vec<u8>; 4],
}

fn set(img: &mut [u8], f: Field, v: u64) {
    if f.width <= 64 && f.fits(img.len()) {
        f.set(img, v);
    }
}

fn get(img: &[u8], f: Field) -> u64 {
    if f.width <= 64 && f.fits(img.len()) {
        f.get(img)
    } else {
        0
    }
}

impl Caps {
    /// The reset-state capabilities for a configuration.
    pub fn new(cfg: &FwConfig) -> Self {
        let mut cur = [
            vec![0u8; CAP_IMAGE],
            vec![0u8; CAP_IMAGE],
            vec![0u8; CAP_IMAGE],
            vec![0u8; CAP_IMAGE],
        ];
        for (f, v) in odp_defaults() {
            set(&mut cur[3], f, v);
        }
        for (f, v) in general_defaults(cfg) {
            set(&mut cur[0], f, v);
        }
        for (f, v) in roce_defaults(cfg) {
            set(&mut cur[2], f, v);
        }
        for (f, v) in atomic_defaults() {
            set(&mut cur[1], f, v);
        }
        let mut max = cur.clone();
        for (f, v) in general_max_extra() {
            set(&mut max[0], f, v);
        }
        for (f, v) in roce_max_extra() {
            set(&mut max[2], f, v);
        }
        for o in &cfg.caps {
            set(&mut cur[o.cap.idx()], o.field, o.value);
            set(&mut max[o.cap.idx()], o.field, o.value);
        }
        // Host-endian atomic responses may be selected when mode 1 is supported.
        let mode_1 = get(&max[1], a::supported_atomic_req_8B_endianness_mode_1);
        set(&mut max[1], a::atomic_req_8B_endianness_mode, mode_1);
        Caps { cur, max }
    }

    /// The image QUERY_HCA_CAP returns.
    pub fn image(&self, ty: CapType, current: bool) -> &[u8] {
        if current {
            &self.cur[ty.idx()]
        } else {
            &self.max[ty.idx()]
        }
    }

    /// A current general capability.
    pub fn gen(&self, f: Field) -> u64 {
        get(&self.cur[0], f)
    }

    /// A maximum general capability.
    pub fn gen_max(&self, f: Field) -> u64 {
        get(&self.max[0], f)
    }

    /// A current RoCE capability.
    pub fn roce(&self, f: Field) -> u64 {
        get(&self.cur[2], f)
    }

    /// A current atomic capability.
    pub fn atomic(&self, f: Field) -> u64 {
        get(&self.cur[1], f)
    }

    fn settable(ty: CapType) -> &'static [(Field, Rule)] {
        match ty {
            CapType::General => SETTABLE_GENERAL,
            CapType::Roce => SETTABLE_ROCE,
            CapType::Atomic => SETTABLE_ATOMIC,
            // Read-only here: Linux's `handle_hca_cap_odp` sets the SRQ-receive bits
            // only where the maximum image has them and the current lacks them;
            // this device reports them current already.
            CapType::Odp => &[],
        }
    }

    /// SET_HCA_CAP: checks `new` (a whole image) against the rules and makes it current.
    pub fn set(&mut self, ty: CapType, new: &[u8]) -> Result<(), Syndrome> {
        let i = ty.idx();
        let rules = Self::settable(ty);
        // Bits the command may change.
        let mut mask = vec![0u8; CAP_IMAGE];
        for (f, _) in rules {
            set(&mut mask, *f, u64::MAX);
        }
        let cur = &self.cur[i];
        // Linux (`handle_hca_cap_atomic`) sends the atomic page zeroed but for the
        // field it sets: the firmware takes the settable fields of that page only.
        let changed_elsewhere = ty != CapType::Atomic
            && (0..CAP_IMAGE).any(|b| {
                let n = new.get(b).copied().unwrap_or(0);
                (n ^ cur[b]) & !mask[b] != 0
            });
        if changed_elsewhere {
            return Err(Syndrome::SetCapReadOnly);
        }
        let mut img = cur.clone();
        for (f, rule) in rules {
            let v = get(new, *f);
            let ok = match rule {
                Rule::UpToMax => v <= get(&self.max[i], *f),
                Rule::Only(x) => v == *x,
                Rule::OneOf(xs) => xs.contains(&v),
            };
            if !ok {
                return Err(Syndrome::SetCapValue);
            }
            set(&mut img, *f, v);
        }
        self.cur[i] = img;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode_page(mode: u64) -> Vec<u8> {
        let mut p = vec![0u8; CAP_IMAGE];
        set(&mut p, a::atomic_req_8B_endianness_mode, mode);
        p
    }

    #[test]
    fn the_atomic_page_takes_a_supported_endianness_mode_only() {
        let mut c = Caps::new(&FwConfig::default());
        assert_eq!(
            get(c.image(CapType::Atomic, true), a::atomic_operations),
            ATOMIC_OPS_CMP_SWAP | ATOMIC_OPS_FETCH_ADD
        );
        // Linux's zeroed page with the mode alone is accepted; the rest is kept.
        assert_eq!(c.set(CapType::Atomic, &mode_page(1)), Ok(()));
        assert_eq!(c.atomic(a::atomic_req_8B_endianness_mode), 1);
        assert_eq!(c.atomic(a::atomic_size_qp), 8);
        assert_eq!(
            c.set(CapType::Atomic, &mode_page(2)),
            Err(Syndrome::SetCapValue)
        );
        assert_eq!(c.atomic(a::atomic_req_8B_endianness_mode), 1);
        // Without mode 1 support only big-endian responses may be selected.
        let cfg = FwConfig {
            caps: vec![CapOverride {
                cap: CapType::Atomic,
                field: a::supported_atomic_req_8B_endianness_mode_1,
                value: 0,
            }],
            ..FwConfig::default()
        };
        let mut c = Caps::new(&cfg);
        assert_eq!(
            c.set(CapType::Atomic, &mode_page(1)),
            Err(Syndrome::SetCapValue)
        );
        assert_eq!(c.set(CapType::Atomic, &mode_page(0)), Ok(()));
    }
}
