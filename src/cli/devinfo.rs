//! `ferroverbs devinfo`: the device and port attributes in the layout of
//! rdma-core's `ibv_devinfo` (`-v` for the verbose listing). Field names and value
//! notations follow `ibv_devinfo`: GUIDs as four groups of four hex digits,
//! `vendor_id` in hex, `vendor_part_id` in decimal, port states as `PORT_ACTIVE (4)`,
//! MTUs as `1024 (3)`, GIDs in IPv6 notation with their RoCE version.

use std::fmt::Write as _;
use std::net::Ipv6Addr;

use ferroverbs::{AtomicCap, Context, DeviceSpec, LinkLayer, PortAttr, PortState, RoceVersion};
use ferroverbs_hw::Bus;

use super::args::DevinfoArgs;
use super::device::{open_sim, open_vfio, sim_udp_unsupported, SIM_PART_ID};
use super::error::CliError;

/// What identifies the device besides what the firmware reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// `hca_id`.
    pub hca_id: String,
    /// The PCI device id.
    pub vendor_part_id: u32,
    /// The PCI revision.
    pub hw_ver: u32,
}

/// `xxxx:xxxx:xxxx:xxxx`, as `ibv_devinfo` prints a GUID.
pub fn guid_text(g: u64) -> String {
    let b = g.to_be_bytes();
    b.chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect::<Vec<_>>()
        .join(":")
}

fn port_state(s: PortState) -> String {
    match s {
        PortState::Down => "PORT_DOWN (1)".into(),
        PortState::Active => "PORT_ACTIVE (4)".into(),
        PortState::Other(v) => format!("invalid state ({v})"),
    }
}

fn link_layer(l: LinkLayer) -> &'static str {
    match l {
        LinkLayer::Ethernet => "Ethernet",
        LinkLayer::InfiniBand => "InfiniBand",
    }
}

fn roce(v: RoceVersion) -> String {
    match v {
        RoceVersion::V1 => "RoCE v1".into(),
        RoceVersion::V2 => "RoCE v2".into(),
        RoceVersion::Other(x) => format!("RoCE version {x}"),
    }
}

/// One `name: value` line as `ibv_devinfo` lays it out: `indent` tabs, the label,
/// then tabs up to column 32 of the label (device lines, indent 1) or 24 (port lines).
fn field(s: &mut String, indent: usize, name: &str, value: std::fmt::Arguments<'_>) {
    let label_len = name.len() + 1;
    let width: usize = if indent == 1 { 32 } else { 24 };
    let tabs = width.saturating_sub(label_len).div_ceil(8).max(1);
    let _ = writeln!(
        s,
        "{}{name}:{}{value}",
        "\t".repeat(indent),
        "\t".repeat(tabs)
    );
}

/// Writes the listing of `ctx` (all ports, or `only_port`) into a string.
pub fn render<B: Bus>(
    ctx: &Context<B>,
    id: &Identity,
    only_port: Option<u8>,
    verbose: bool,
) -> ferroverbs::Result<String> {
    let d = ctx.query_device()?;
    let mut s = String::new();
    macro_rules! line {
        ($indent:expr, $name:expr, $($v:tt)*) => {
            field(&mut s, $indent, $name, format_args!($($v)*))
        };
    }
    let _ = writeln!(s, "hca_id:\t{}", id.hca_id);
    // Every mlx5 function is an InfiniBand-transport CA, RoCE ports included.
    line!(1, "transport", "InfiniBand (0)");
    line!(1, "fw_ver", "{}", d.fw_ver);
    line!(1, "node_guid", "{}", guid_text(d.node_guid));
    line!(1, "sys_image_guid", "{}", guid_text(d.sys_image_guid));
    line!(1, "vendor_id", "{:#06x}", d.vendor_id);
    line!(1, "vendor_part_id", "{}", id.vendor_part_id);
    line!(1, "hw_ver", "{:#x}", id.hw_ver);
    line!(1, "phys_port_cnt", "{}", d.phys_port_cnt);
    if verbose {
        line!(1, "max_mr_size", "{:#x}", d.max_mr_size);
        line!(1, "page_size_cap", "{:#x}", d.page_size_cap);
        line!(1, "max_qp", "{}", d.max_qp);
        line!(1, "max_qp_wr", "{}", d.max_qp_wr);
        line!(1, "max_sge", "{}", d.max_sge);
        line!(1, "max_sge_rd", "{}", d.max_sge_rd);
        line!(1, "max_cq", "{}", d.max_cq);
        line!(1, "max_cqe", "{}", d.max_cqe);
        line!(1, "max_mr", "{}", d.max_mr);
        line!(1, "max_pd", "{}", d.max_pd);
        line!(1, "max_qp_rd_atom", "{}", d.max_qp_rd_atom);
        line!(1, "max_qp_init_rd_atom", "{}", d.max_qp_init_rd_atom);
        line!(
            1,
            "atomic_cap",
            "{}",
            match d.atomic_cap {
                AtomicCap::None => "ATOMIC_NONE (0)",
                AtomicCap::Hca => "ATOMIC_HCA (1)",
            }
        );
        line!(1, "max_mcast_grp", "{}", d.max_mcast_grp);
        line!(1, "max_mcast_qp_attach", "{}", d.max_mcast_qp_attach);
        line!(1, "max_srq", "{}", d.max_srq);
        line!(1, "max_srq_wr", "{}", d.max_srq_wr);
        line!(1, "max_srq_sge", "{}", d.max_srq_sge);
        line!(1, "max_msg_sz", "{:#x}", d.max_msg_sz);
        line!(1, "local_ca_ack_delay", "{}", d.local_ca_ack_delay);
        line!(1, "hca_core_clock", "{}kHZ", d.hca_core_clock_khz);
        let t = d.transports;
        let names: Vec<&str> = [(t.rc, "RC"), (t.uc, "UC"), (t.ud, "UD"), (t.xrc, "XRC")]
            .into_iter()
            .filter_map(|(on, n)| on.then_some(n))
            .collect();
        line!(1, "transports", "{}", names.join(" "));
    }
    let ports: Vec<u8> = match only_port {
        Some(p) => vec![p],
        None => (1..=d.phys_port_cnt).collect(),
    };
    for port in ports {
        let p = ctx.query_port(port)?;
        render_port(&mut s, port, &p, verbose);
    }
    Ok(s)
}

fn render_port(s: &mut String, port: u8, p: &PortAttr, verbose: bool) {
    macro_rules! line {
        ($name:expr, $($v:tt)*) => {
            field(s, 3, $name, format_args!($($v)*))
        };
    }
    let _ = writeln!(s, "\t\tport:\t{port}");
    line!("state", "{}", port_state(p.state));
    line!("max_mtu", "{} ({})", p.max_mtu.bytes(), p.max_mtu as u8);
    line!(
        "active_mtu",
        "{} ({})",
        p.active_mtu.bytes(),
        p.active_mtu as u8
    );
    line!("sm_lid", "0");
    line!("port_lid", "0");
    line!("port_lmc", "0x00");
    line!("link_layer", "{}", link_layer(p.link_layer));
    if verbose {
        line!("max_msg_sz", "{:#x}", p.max_msg_sz);
        line!("gid_tbl_len", "{}", p.gid_tbl_len);
        line!("vport_mtu", "{}", p.vport_mtu);
        line!(
            "mac",
            "{}",
            p.mac
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":")
        );
        for g in &p.gids {
            let _ = writeln!(
                s,
                "\t\t\tGID[{:3}]:\t\t{}, {}",
                g.index,
                Ipv6Addr::from(g.gid),
                roce(g.version)
            );
        }
    }
    let _ = writeln!(s);
}

/// Runs `ferroverbs devinfo`.
pub fn run(args: &DevinfoArgs) -> Result<(), CliError> {
    let runtime = |e| CliError::runtime("querying the device", e);
    let text = match args.device {
        DeviceSpec::Sim => {
            let nic = open_sim(0)?;
            let id = Identity {
                hca_id: nic.name.clone(),
                vendor_part_id: SIM_PART_ID,
                hw_ver: 0,
            };
            check_port(args.port, &nic.ctx)?;
            let t = render(&nic.ctx, &id, args.port, args.verbose).map_err(runtime)?;
            nic.ctx
                .close()
                .map_err(|e| CliError::runtime("closing the device", e))?;
            t
        }
        DeviceSpec::SimUdp(a) => return Err(sim_udp_unsupported(a)),
        DeviceSpec::Vfio(bdf) => {
            let nic = open_vfio(&bdf)?;
            let id = Identity {
                hca_id: bdf.to_string(),
                vendor_part_id: u32::from(nic.info.pci_id.1),
                hw_ver: nic.revision,
            };
            check_port(args.port, &nic.ctx)?;
            let t = render(&nic.ctx, &id, args.port, args.verbose).map_err(runtime)?;
            nic.ctx
                .close()
                .map_err(|e| CliError::runtime("closing the device", e))?;
            t
        }
    };
    print!("{text}");
    Ok(())
}

fn check_port<B: Bus>(port: Option<u8>, ctx: &Context<B>) -> Result<(), CliError> {
    if let Some(p) = port {
        let n = ctx
            .query_device()
            .map_err(|e| CliError::runtime("querying the device", e))?
            .phys_port_cnt;
        if p == 0 || p > n {
            return Err(CliError::setup_msg(format!(
                "the device has {n} port(s); there is no port {p}"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guids() {
        assert_eq!(guid_text(0x0c42_a103_0065_9a2c), "0c42:a103:0065:9a2c");
    }

    #[test]
    fn the_simulator_listing() {
        let nic = open_sim(0).unwrap();
        let id = Identity {
            hca_id: "sim0".into(),
            vendor_part_id: SIM_PART_ID,
            hw_ver: 0,
        };
        let short = render(&nic.ctx, &id, None, false).unwrap();
        assert!(short.starts_with("hca_id:\tsim0\n"), "{short}");
        assert!(
            short.contains("\ttransport:\t\t\tInfiniBand (0)\n"),
            "{short}"
        );
        assert!(short.contains("\tvendor_id:\t\t\t0x02c9\n"), "{short}");
        assert!(short.contains("\tvendor_part_id:\t\t\t4119\n"), "{short}");
        assert!(short.contains("\tfw_ver:\t\t\t\t16.35.1012\n"), "{short}");
        assert!(short.contains("\t\tport:\t1\n"));
        assert!(
            short.contains("\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n"),
            "{short}"
        );
        assert!(short.contains("\t\t\tmax_mtu:\t\t4096 (5)\n"), "{short}");
        assert!(short.contains("\t\t\tlink_layer:\t\tEthernet\n"), "{short}");
        assert!(!short.contains("max_qp"));
        assert!(!short.contains("GID["));

        let long = render(&nic.ctx, &id, Some(1), true).unwrap();
        for f in [
            "max_qp:",
            "max_qp_wr:",
            "max_sge:",
            "max_cq:",
            "max_cqe:",
            "max_mr:",
            "max_pd:",
            "max_qp_rd_atom:",
            "max_srq:",
            "atomic_cap:",
            "max_mr_size:",
            "page_size_cap:",
        ] {
            assert!(long.contains(&format!("\t{f}")), "{f}\n{long}");
        }
        assert!(
            long.contains("GID[  1]:\t\t::ffff:192.0.2.1, RoCE v2\n"),
            "{long}"
        );
        assert!(long.contains("GID[  0]:\t\tfe80::"), "{long}");
        nic.ctx.close().unwrap();
    }
}
