//! One-line descriptions of the RoCEv2 frames a fabric forwarded, for the diagnostic
//! of a run that did not reach its condition.

use ferroverbs_sim::wire::frame;

/// Describes one frame: addresses, opcode, destination QP, PSN and the extended
/// headers that say what the packet does (RETH, AETH, immediate, IETH), or why it
/// could not be parsed.
pub fn describe(bytes: &[u8]) -> String {
    let (r, payload) = match frame::parse(bytes) {
        Ok(x) => x,
        Err(e) => return format!("{} bytes, not a valid RoCEv2 frame: {e}", bytes.len()),
    };
    let roce = &r.roce;
    let mut s = format!(
        "{}:{} -> {} {} qp {:#08x} psn {}",
        r.ipv4.src_addr,
        r.udp.src_port,
        r.ipv4.dst_addr,
        roce.bth.opcode,
        roce.bth.dest_qp,
        roce.bth.psn
    );
    if roce.bth.ack_req {
        s.push_str(" ackreq");
    }
    if let Some(reth) = roce.reth {
        s += &format!(
            " reth va {:#x} rkey {:#x} len {}",
            reth.virtual_address, reth.rkey, reth.dma_length
        );
    }
    if let Some(aeth) = roce.aeth {
        s += &format!(" aeth {:?} msn {}", aeth.syndrome, aeth.msn);
    }
    if let Some(imm) = roce.immdt {
        s += &format!(" imm {imm:?}");
    }
    if let Some(ieth) = roce.ieth {
        s += &format!(" ieth {ieth:?}");
    }
    if let Some(deth) = roce.deth {
        s += &format!(" deth {deth:?}");
    }
    s += &format!(" payload {}", payload.len());
    s
}
