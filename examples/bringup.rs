//! Brings up a simulated ConnectX through the ferroverbs driver, prints the device and
//! port attributes (in the manner of `ibv_devinfo -v`), and tears it down again.
//!
//! ```text
//! cargo run --example bringup
//! ```

use std::process::ExitCode;

use ferroverbs::{Device, DeviceConfig, GidEntry};
use ferroverbs_sim::{Sim, SimConfig};

fn hex_gid(g: &[u8; 16]) -> String {
    g.chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect::<Vec<_>>()
        .join(":")
}

fn mac(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn guid(g: u64) -> String {
    let b = g.to_be_bytes();
    b.chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect::<Vec<_>>()
        .join(":")
}

fn run() -> ferroverbs::Result<()> {
    // A simulated single-port ConnectX-5-like device on virtual time.
    let sim = Sim::new(SimConfig::deterministic(2024, 1));
    let mac0 = sim.with_firmware(|fw| fw.ports()[0].mac);
    // The driver's waits move the device's virtual time on (firmware boot).
    let (now, time) = (sim.clock().clone(), sim.clock().clone());
    let config = DeviceConfig::default()
        .with_clock(std::sync::Arc::new(ferroverbs::SteppedClock::new(
            move || now.now(),
            move |d| time.advance(d),
        )))
        .with_gid(GidEntry::ipv4(0, [192, 168, 10, 1], mac0))
        .with_gid(GidEntry::ipv6(
            1,
            [
                0xfe,
                0x80,
                0,
                0,
                0,
                0,
                0,
                0,
                mac0[0] ^ 2,
                mac0[1],
                mac0[2],
                0xff,
                0xfe,
                mac0[3],
                mac0[4],
                mac0[5],
            ],
            mac0,
        ));

    let ctx = Device::open(sim.bus(), config)?;
    let d = ctx.query_device()?;
    println!("hca_id:\tsim_mlx5_0");
    println!("\ttransport:\t\t\t{:?}", d.link_layer);
    println!("\tfw_ver:\t\t\t\t{}", d.fw_ver);
    println!("\tnode_guid:\t\t\t{}", guid(d.node_guid));
    println!("\tsys_image_guid:\t\t\t{}", guid(d.sys_image_guid));
    println!("\tvendor_id:\t\t\t{:#06x}", d.vendor_id);
    println!("\tphys_port_cnt:\t\t\t{}", d.phys_port_cnt);
    println!("\tmax_mr_size:\t\t\t{:#x}", d.max_mr_size);
    println!("\tpage_size_cap:\t\t\t{:#x}", d.page_size_cap);
    println!("\tmax_qp:\t\t\t\t{}", d.max_qp);
    println!("\tmax_qp_wr:\t\t\t{}", d.max_qp_wr);
    println!("\tmax_sge:\t\t\t{}", d.max_sge);
    println!("\tmax_sge_rd:\t\t\t{}", d.max_sge_rd);
    println!("\tmax_cq:\t\t\t\t{}", d.max_cq);
    println!("\tmax_cqe:\t\t\t{}", d.max_cqe);
    println!("\tmax_mr:\t\t\t\t{}", d.max_mr);
    println!("\tmax_pd:\t\t\t\t{}", d.max_pd);
    println!("\tmax_qp_rd_atom:\t\t\t{}", d.max_qp_rd_atom);
    println!("\tmax_qp_init_rd_atom:\t\t{}", d.max_qp_init_rd_atom);
    println!("\tmax_srq:\t\t\t{}", d.max_srq);
    println!("\tmax_srq_wr:\t\t\t{}", d.max_srq_wr);
    println!("\tmax_srq_sge:\t\t\t{}", d.max_srq_sge);
    println!("\tatomic_cap:\t\t\t{:?}", d.atomic_cap);
    println!("\tmax_msg_sz:\t\t\t{:#x}", d.max_msg_sz);
    println!("\tlocal_ca_ack_delay:\t\t{}", d.local_ca_ack_delay);
    println!("\thca_core_clock:\t\t\t{} kHz", d.hca_core_clock_khz);
    println!(
        "\ttransports:\t\t\tRC {} UC {} UD {} XRC {}",
        d.transports.rc, d.transports.uc, d.transports.ud, d.transports.xrc
    );
    for port in 1..=d.phys_port_cnt {
        let p = ctx.query_port(port)?;
        println!("\t\tport:\t{port}");
        println!("\t\t\tstate:\t\t\t{:?} (admin {})", p.state, p.admin_state);
        println!("\t\t\tmax_mtu:\t\t{} ({:?})", p.max_mtu.bytes(), p.max_mtu);
        println!(
            "\t\t\tactive_mtu:\t\t{} ({:?})",
            p.active_mtu.bytes(),
            p.active_mtu
        );
        println!("\t\t\tvport_mtu:\t\t{}", p.vport_mtu);
        println!("\t\t\tlink_layer:\t\t{:?}", p.link_layer);
        println!("\t\t\tmac:\t\t\t{}", mac(&p.mac));
        println!("\t\t\tgid_tbl_len:\t\t{}", p.gid_tbl_len);
        println!("\t\t\tmax_msg_sz:\t\t{:#x}", p.max_msg_sz);
        for g in &p.gids {
            println!(
                "\t\t\tGID[{:3}]:\t\t{}, RoCE {:?} {:?}",
                g.index,
                hex_gid(&g.gid),
                g.version,
                g.l3_type
            );
        }
    }
    println!(
        "\tdriver:\t\t\t\tUAR {:?}, async EQ {:?}, {} firmware pages, commands by {}",
        ctx.uar_index(),
        ctx.async_eqn(),
        ctx.pages_lent(),
        if ctx.event_mode() { "event" } else { "polling" }
    );
    ctx.close()?;

    let s = sim.stats();
    println!(
        "teardown: {} commands executed, {} failed; left behind: {} mappings, {} pages, {} objects",
        s.fw.executed,
        s.fw.failed,
        s.mappings,
        s.pages_held,
        s.objects.total()
    );
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bringup: {e}");
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                eprintln!("  caused by: {s}");
                src = s.source();
            }
            ExitCode::FAILURE
        }
    }
}
