//! perftest's output: the test-information block, the column headers and the result
//! lines, laid out as perftest lays them out (`RESULT_LINE`, `RESULT_FMT_LAT`,
//! `REPORT_FMT_LAT`, `RESULT_FMT`, `REPORT_FMT` in perftest's
//! `src/perftest_parameters.h`), so scripts that parse perftest's output parse ours.

use std::fmt::Write as _;

use super::config::{Mode, PerfConfig, Verb};
use super::stats::{BwReport, LatencyReport};

/// perftest's separator line (87 dashes).
pub const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";

/// perftest's latency column header (`RESULT_FMT_LAT`).
pub const LAT_HEADER: &str =
    " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    \
t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

/// perftest's bandwidth column header (`RESULT_FMT`; its "MiB" is 2^20 bytes).
pub const BW_HEADER: &str =
    " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]";

/// One side's connection data, printed as perftest prints it after the header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Address {
    /// QP number.
    pub qpn: u32,
    /// Initial packet sequence number.
    pub psn: u32,
    /// The GID.
    pub gid: [u8; 16],
    /// The remote key and address of the side's buffer (RDMA tests).
    pub remote: Option<(u32, u64)>,
}

/// What the test-information block shows besides the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestInfo {
    /// The device name.
    pub device: String,
    /// The link type (`Ethernet`, `IB`).
    pub link_type: String,
    /// The path MTU in bytes.
    pub mtu: u32,
    /// The inline size granted.
    pub inline: u32,
    /// The GID index used.
    pub gid_index: u16,
    /// RDMA READs and atomics outstanding per QP (`max_rd_atomic`).
    pub out_reads: u32,
    /// How the fabric runs (shown as perftest's "Data ex. method").
    pub exchange: String,
}

/// The title line: "Send Latency Test", "RDMA_Write Post List BW Test", ...
pub fn title(cfg: &PerfConfig) -> String {
    let mut t = format!("{} ", cfg.test.verb_title());
    if cfg.test.verb == Verb::Atomic {
        t.push_str(cfg.atomic.name());
        t.push(' ');
    }
    match cfg.test.mode {
        Mode::Bw => {
            if cfg.post_list > 1 {
                t.push_str("Post List ");
            }
            t.push_str("BW ");
        }
        Mode::Lat => t.push_str("Latency "),
    }
    t.push_str("Test");
    t
}

/// The test-information block (perftest `ctx_print_test_info`), ending with a
/// separator line.
pub fn test_info(cfg: &PerfConfig, info: &TestInfo) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{RESULT_LINE}");
    let _ = writeln!(s, "                    {}", title(cfg));
    if cfg.events {
        let _ = writeln!(s, " Test with events. Using {}_comp0", info.device);
    }
    let _ = writeln!(
        s,
        " Dual-port       : OFF\t\tDevice         : {}",
        info.device
    );
    let _ = writeln!(s, " Number of qps   : {}\t\tTransport type : IB", cfg.qps);
    let _ = writeln!(s, " Connection type : RC\t\tUsing SRQ      : OFF");
    let _ = writeln!(s, " TX depth        : {}", cfg.tx_depth);
    if cfg.post_list > 1 {
        let _ = writeln!(s, " Post List       : {}", cfg.post_list);
    }
    if cfg.test.has_recv() {
        let _ = writeln!(s, " RX depth        : {}", cfg.rx_depth);
    }
    if cfg.test.mode == Mode::Bw {
        let _ = writeln!(s, " CQ Moderation   : {}", cfg.cq_mod);
    }
    let _ = writeln!(s, " Mtu             : {}[B]", info.mtu);
    let _ = writeln!(s, " Link type       : {}", info.link_type);
    let _ = writeln!(s, " GID index       : {}", info.gid_index);
    if cfg.test.one_sided_request() {
        let _ = writeln!(s, " Outstand reads  : {}", info.out_reads);
    } else {
        let _ = writeln!(s, " Max inline data : {}[B]", info.inline);
    }
    let _ = writeln!(s, " rdma_cm QPs\t : OFF");
    let _ = writeln!(s, " Data ex. method : {}", info.exchange);
    let _ = writeln!(s, "{RESULT_LINE}");
    s
}

/// C's `%#0Nx`: `0x` and zero padding to `width` characters in all, except that 0
/// gets no `0x` (printf's alternate form adds the prefix to nonzero values only).
fn c_alt_hex(v: u64, width: usize) -> String {
    if v == 0 {
        format!("{:0width$}", 0)
    } else {
        format!("{v:#0width$x}")
    }
}

/// perftest's GID notation (`PERF_GID_FMT`): the 16 bytes in decimal, `%02d` each.
fn gid_text(g: &[u8; 16]) -> String {
    g.iter()
        .map(|b| format!("{b:02}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The local and remote address lines of one QP pair (perftest
/// `ctx_print_pingpong_data`: `BASIC_ADDR_FMT`, `READ_FMT`, `RDMA_FMT`, `PERF_GID_FMT`).
pub fn addresses(local: &Address, remote: &Address, outstanding_reads: Option<u32>) -> String {
    let mut s = String::new();
    for (side, a) in [("local", local), ("remote", remote)] {
        let _ = write!(
            s,
            " {side} address: LID {} QPN {} PSN {}",
            c_alt_hex(0, 4),
            c_alt_hex(u64::from(a.qpn), 6),
            c_alt_hex(u64::from(a.psn), 6)
        );
        if let Some(o) = outstanding_reads {
            let _ = write!(s, " OUT {}", c_alt_hex(u64::from(o), 4));
        }
        if let Some((rkey, vaddr)) = a.remote {
            let _ = write!(
                s,
                " RKey {} VAddr {}",
                c_alt_hex(u64::from(rkey), 8),
                c_alt_hex(vaddr, 16)
            );
        }
        let _ = writeln!(s);
        let _ = writeln!(s, " GID: {}", gid_text(&a.gid));
    }
    s
}

/// The header of the result table: separator line and column names.
pub fn header(mode: Mode) -> String {
    match mode {
        Mode::Lat => format!("{LAT_HEADER}\n"),
        Mode::Bw => format!("{BW_HEADER}\n"),
    }
}

/// One latency line (`REPORT_FMT_LAT`).
pub fn lat_line(r: &LatencyReport) -> String {
    format!(
        " {:<7} {}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}\n",
        r.bytes, r.iterations, r.t_min, r.t_max, r.t_typical, r.t_avg, r.t_stdev, r.p99, r.p99_9
    )
}

/// One bandwidth line (`REPORT_FMT`).
pub fn bw_line(r: &BwReport) -> String {
    format!(
        " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t     {:<7.6}\n",
        r.bytes, r.iterations, r.bw_peak, r.bw_avg, r.msg_rate
    )
}

/// Splits a result line into its whitespace-separated fields (what a script does).
pub fn fields(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::perf::runner::tests::config;
    use crate::cli::perf::stats::{bw_report, LatencySamples};

    #[test]
    fn headers_are_perftests() {
        assert_eq!(RESULT_LINE.len(), 87);
        assert_eq!(
            fields(LAT_HEADER),
            [
                "#bytes",
                "#iterations",
                "t_min[usec]",
                "t_max[usec]",
                "t_typical[usec]",
                "t_avg[usec]",
                "t_stdev[usec]",
                "99%",
                "percentile[usec]",
                "99.9%",
                "percentile[usec]"
            ]
        );
        assert_eq!(
            fields(BW_HEADER),
            [
                "#bytes",
                "#iterations",
                "BW",
                "peak[MiB/sec]",
                "BW",
                "average[MiB/sec]",
                "MsgRate[Mpps]"
            ]
        );
    }

    #[test]
    fn a_latency_line_from_synthetic_samples() {
        let d: Vec<f64> = (0..999).map(|i| 1.0 + f64::from(i % 10) * 0.01).collect();
        let r = LatencySamples::from_deltas_us(d).report(2, 1000).unwrap();
        let line = lat_line(&r);
        assert!(line.ends_with('\n'));
        let f = fields(&line);
        assert_eq!(f.len(), 9);
        assert_eq!(f[0], "2");
        assert_eq!(f[1], "1000");
        assert_eq!(f[2], "1.00"); // t_min
        assert_eq!(f[3], "1.09"); // t_max
        assert_eq!(f[8], "1.09"); // 99.9 %
        assert!(
            line.starts_with(" 2       1000          1.00   "),
            "{line:?}"
        );
    }

    #[test]
    fn a_bandwidth_line_from_synthetic_stamps() {
        // 1000 messages of 64 KiB over exactly 10 ms: 6250 MiB/s, 0.1 Mpps.
        let p: Vec<u64> = (0..1000u64).map(|i| i * 10_000).collect();
        let mut c: Vec<u64> = p.iter().map(|t| t + 10_000).collect();
        c[999] = 10_000_000;
        let r = bw_report(65536, &p, &c, 1, 1).unwrap();
        let line = bw_line(&r);
        let f = fields(&line);
        assert_eq!(f, ["65536", "1000", "6250.00", "6250.00", "0.100000"]);
        assert!(
            line.starts_with(" 65536      1000             6250.00"),
            "{line:?}"
        );
    }

    #[test]
    fn the_information_block() {
        let info = TestInfo {
            device: "sim0".into(),
            link_type: "Ethernet".into(),
            mtu: 1024,
            inline: 236,
            gid_index: 1,
            out_reads: 16,
            exchange: "in-process fabric".into(),
        };
        let s = test_info(&config(&["send-lat"]), &info);
        let lines: Vec<_> = s.lines().collect();
        assert_eq!(lines[0], RESULT_LINE);
        assert_eq!(lines[1], "                    Send Latency Test");
        assert!(s.contains(" Number of qps   : 1\t\tTransport type : IB\n"));
        assert!(s.contains(" RX depth        : 512\n"));
        assert!(s.contains(" Max inline data : 236[B]\n"));
        assert!(!s.contains("CQ Moderation"));
        assert_eq!(*lines.last().unwrap(), RESULT_LINE);

        let s = test_info(&config(&["write-bw", "-l", "4", "-s", "64"]), &info);
        assert!(s.contains("RDMA_Write Post List BW Test"));
        assert!(s.contains(" Post List       : 4\n"));
        assert!(s.contains(" CQ Moderation   : 4\n"));
        assert!(!s.contains("RX depth"));

        let s = test_info(&config(&["atomic-lat", "-A", "CMP_AND_SWAP"]), &info);
        assert!(s.contains("Atomic CMP_AND_SWAP Latency Test"));
        assert!(s.contains(" Outstand reads  : 16\n"));
    }

    #[test]
    fn address_lines() {
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(&[192, 0, 2, 1]);
        let a = Address {
            qpn: 0x108,
            psn: 0x3e5b4c,
            gid,
            remote: Some((0x1234, 0x7f00_0000_1000)),
        };
        let s = addresses(&a, &a, None);
        assert!(s.starts_with(
            " local address: LID 0000 QPN 0x0108 PSN 0x3e5b4c RKey 0x001234 VAddr 0x007f0000001000\n"
        ));
        assert!(s.contains(" GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:00:02:01\n"));
        assert!(s.contains(" remote address: LID 0000 QPN 0x0108"));
        let b = Address {
            psn: 0,
            remote: None,
            ..a
        };
        let s = addresses(&b, &b, Some(16));
        assert!(
            s.starts_with(" local address: LID 0000 QPN 0x0108 PSN 000000 OUT 0x10\n"),
            "{s}"
        );
    }
}
