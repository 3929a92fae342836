//! Address handles: where a UD send goes (`ibv_create_ah` for RoCE v2).
//!
//! An address handle holds the 48-byte mlx5 address vector (`struct mlx5_wqe_av`,
//! `mlx5-datapath.md` §2.3) prebuilt once, as rdma-core's `mlx5_create_ah` builds it
//! for an Ethernet port; each UD send copies it into the WQE's datagram segment and
//! writes the remote QPN (with `MLX5_EXTENDED_UD_AV`) and the remote Q_Key over it
//! ([`SendWr::ud`]):
//!
//! | AV field | value |
//! |---|---|
//! | `stat_rate_sl` | `(sl & 7) << 1`: the Ethernet priority (RoCE), static rate 0 |
//! | `fl_mlid` | 0 (no force-loopback, no path bits) |
//! | `rlid` | RoCE v2: the UDP source port, in 0xc000..=0xffff (see below) |
//! | `rmac` | the destination MAC |
//! | `tclass`, `hop_limit` | traffic class (IPv4 TOS), hop limit (IPv4 TTL) |
//! | `grh_gid_fl` | source GID index << 20 \| flow label (the GRH bit 30 is IB only) |
//! | `rgid` | the destination GID (`::ffff:a.b.c.d` for IPv4) |
//!
//! The destination MAC comes from the caller, as for an RC path ([`AddressVector`]):
//! a userspace driver has no kernel neighbour table to resolve it (rdma-core asks the
//! kernel in `ibv_cmd_create_ah`). The UDP source port: the one given, else the Linux
//! rule from a non-zero flow label (`rdma_flow_label_to_udp_sport`), else a port
//! derived from the destination GID (rdma-core draws it at random; a fixed value keeps
//! runs reproducible). A hop limit below 2 becomes 64, as on the RC path.
//!
//! An address handle is a host-side object only (RoCE has no firmware AH), so
//! creating and dropping one issues no command.

use ferroverbs_hw::control::caps::cmd_hca_cap as g;
use ferroverbs_hw::datapath::wqe::WqeAv;
use ferroverbs_hw::Bus;
use zerocopy::FromZeros;

use super::{AddressVector, Attribute, Error, Pd, Result};
use crate::ring::{SendWr, UdAddress};

/// The destination of UD sends: an address vector prebuilt for the hardware.
pub struct AddressHandle<'a, B: Bus> {
    pd: &'a Pd<'a, B>,
    port: u8,
    attr: AddressVector,
    av: WqeAv,
}

impl<B: Bus> std::fmt::Debug for AddressHandle<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddressHandle")
            .field("port", &self.port)
            .field("attr", &self.attr)
            .finish()
    }
}

/// Linux `rdma_flow_label_to_udp_sport`: folds a 20-bit flow label into the RoCE v2
/// source port range 0xc000..=0xffff.
pub fn udp_sport_from_flow_label(fl: u32) -> u16 {
    (((fl & 0x3fff) ^ ((fl & 0xf_c000) >> 14)) as u16) | 0xc000
}

/// Linux `rdma_calc_flow_label` (`include/rdma/ib_verbs.h`): the flow label of a
/// connection whose path gives none, the same on both ends: the product of the two
/// QP numbers, folded (`v ^= v >> 20; v ^= v >> 40`) to 20 bits.
pub fn flow_label_from_qpns(lqpn: u32, rqpn: u32) -> u32 {
    let mut v = u64::from(lqpn) * u64::from(rqpn);
    v ^= v >> 20;
    v ^= v >> 40;
    (v & 0xf_ffff) as u32
}

/// The address vector of `attr` from local port `port` (without destination QPN and
/// Q_Key, which each send writes).
pub fn build_av(attr: &AddressVector) -> WqeAv {
    let sport = attr.udp_sport.unwrap_or_else(|| {
        if attr.flow_label != 0 {
            udp_sport_from_flow_label(attr.flow_label)
        } else {
            // FNV-1a over the destination GID and the source GID index.
            let h = attr
                .dgid
                .iter()
                .chain(std::iter::once(&attr.sgid_index))
                .fold(0x811c_9dc5u32, |h, &b| {
                    (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
                });
            0xc000 | (h as u16 & 0x3fff)
        }
    });
    let hop = if attr.hop_limit < 2 {
        64
    } else {
        attr.hop_limit
    };
    let mut av = WqeAv::new_zeroed();
    av.set_dgram_seg(
        0,
        0,
        true,
        (attr.sl & 7) << 1,
        0,
        sport,
        attr.dmac,
        attr.traffic_class,
        hop,
        WqeAv::make_grh_gid_fl(false, attr.sgid_index, attr.flow_label),
        attr.dgid,
    );
    av
}

impl<'ctx, B: Bus> Pd<'ctx, B> {
    /// Creates an address handle for UD sends from `port` along `attr`
    /// (`ibv_create_ah` with a global route: destination GID, source GID index, hop
    /// limit, traffic class, flow label, SL, and the destination MAC). Checks the port,
    /// that the source GID index has an entry in the port's GID table, and the ranges
    /// of flow label (20 bits) and SL (0-7).
    pub fn create_ah(&self, port: u8, attr: &AddressVector) -> Result<AddressHandle<'_, B>> {
        let ctx = self.context();
        let ports = ctx.cap(g::num_ports).max(1);
        if port == 0 || u64::from(port) > ports {
            return Err(Error::AttributeOutOfRange {
                attribute: Attribute::Port,
                value: port.into(),
                max: ports,
            });
        }
        if attr.flow_label > 0xf_ffff {
            return Err(Error::AttributeOutOfRange {
                attribute: Attribute::AddressVector,
                value: attr.flow_label.into(),
                max: 0xf_ffff,
            });
        }
        if attr.sl > 7 {
            return Err(Error::AttributeOutOfRange {
                attribute: Attribute::AddressVector,
                value: attr.sl.into(),
                max: 7,
            });
        }
        let sgid = ctx.query_gid(port, attr.sgid_index.into())?;
        if sgid.is_empty() {
            return Err(Error::InvalidArgument(
                "the source GID index has no entry in the port's GID table",
            ));
        }
        Ok(AddressHandle {
            pd: self,
            port,
            attr: *attr,
            av: build_av(attr),
        })
    }
}

impl<'a, B: Bus> AddressHandle<'a, B> {
    /// The attributes it was created with.
    pub fn attr(&self) -> &AddressVector {
        &self.attr
    }

    /// The local port.
    pub fn port(&self) -> u8 {
        self.port
    }

    /// The protection domain.
    pub fn pd(&self) -> &'a Pd<'a, B> {
        self.pd
    }

    /// The prebuilt address vector (destination QPN and Q_Key zero).
    pub fn av(&self) -> &WqeAv {
        &self.av
    }
}

impl<'a> SendWr<'a> {
    /// Addresses a send on a UD QP: to QP `remote_qpn` with Q_Key `remote_qkey` along
    /// `ah` (`wr.ud.ah`, `remote_qpn`, `remote_qkey`). A Q_Key with its high bit set
    /// makes the device send the QP's own Q_Key instead (IBTA §10.2.5).
    pub fn ud<B: Bus>(
        mut self,
        ah: &'a AddressHandle<'_, B>,
        remote_qpn: u32,
        remote_qkey: u32,
    ) -> Self {
        self.ud = Some(UdAddress {
            av: &ah.av,
            remote_qpn: remote_qpn & 0x00ff_ffff,
            remote_qkey,
        });
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn av_bytes_as_rdma_core_builds_them() {
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(&[10, 0, 0, 2]);
        let attr = AddressVector {
            traffic_class: 0x22,
            hop_limit: 0x40,
            flow_label: 0x1_2345,
            sl: 3,
            ..AddressVector::new(gid, [1, 2, 3, 4, 5, 6], 3)
        };
        let mut av = build_av(&attr);
        av.set_ud_dest(0x12_3456, 0x1111_1111);
        let b = av.as_bytes();
        assert_eq!(
            &b[..16],
            &[0x11, 0x11, 0x11, 0x11, 0, 0, 0, 0, 0x80, 0x12, 0x34, 0x56, 0x06, 0, 0xe3, 0x41][..]
        );
        assert_eq!(
            &b[16..32],
            &[0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 0x22, 0x40, 0x00, 0x31, 0x23, 0x45][..]
        );
        assert_eq!(&b[32..], &gid[..]);
        assert_eq!(av.rlid(), udp_sport_from_flow_label(0x1_2345));
    }

    #[test]
    fn flow_label_from_qpns_is_linuxs_rule() {
        // (0x1234 * 0x5678) = 0x6260060, folded: 0x6260060 ^ 0x62 = 0x6260002 -> 0x60002.
        assert_eq!(flow_label_from_qpns(0x1234, 0x5678), 0x6_0002);
        // Symmetric, so both ends of a connection agree.
        assert_eq!(
            flow_label_from_qpns(0x5678, 0x1234),
            flow_label_from_qpns(0x1234, 0x5678)
        );
        assert_eq!(flow_label_from_qpns(7, 0), 0);
        // The top bits fold in: 0xffffff * 0xffffff = 0xfffffe000001.
        let v: u64 = 0xffff_fe00_0001;
        let v = v ^ (v >> 20);
        let v = v ^ (v >> 40);
        assert_eq!(
            flow_label_from_qpns(0xff_ffff, 0xff_ffff),
            (v & 0xf_ffff) as u32
        );
    }

    #[test]
    fn flow_label_port_rule() {
        assert_eq!(udp_sport_from_flow_label(0), 0xc000);
        assert_eq!(
            udp_sport_from_flow_label(0xf_ffff),
            0xc000 | (0x3fff ^ 0x3f)
        );
        let attr = AddressVector::new([7; 16], [0; 6], 0);
        let p = build_av(&attr).rlid();
        assert!(p >= 0xc000);
        assert_eq!(build_av(&attr).rlid(), p, "stable");
        assert_eq!(build_av(&attr).hop_limit, 64);
    }
}
