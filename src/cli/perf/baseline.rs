//! `--baseline`: the reference each figure is reported beside, measured in the same
//! run, with the same sizes and iterations, and printed in the test's own columns.
//!
//! | test | one process (`--device sim`) | two processes (`--server`/`--client`) |
//! |---|---|---|
//! | latency | TCP ping-pong over 127.0.0.1 with an echo thread | TCP ping-pong between the two processes (their rendezvous connection) |
//! | bandwidth | `memcpy` of each message between two buffers | raw UDP from the client's NIC address to the server's, datagrams of the size RoCEv2 sends |
//!
//! The TCP ping-pong sends `size` bytes (`TCP_NODELAY`) and waits for `size` bytes
//! back, stamped as the latency tests stamp (half the round trip, as send-lat and
//! write-lat report; the full round trip for read-lat and atomic-lat, whose figure is
//! one). The raw UDP stream carries as many bytes as the test moved
//! (`iterations x QPs x size`), in datagrams of `12 + MTU + 4` bytes (BTH, one MTU of
//! payload, ICRC: the middle packets of a RoCEv2 message), sent as fast as `sendto`
//! goes; the receiver (with the same 8 MiB socket buffer as the UDP link) counts what
//! arrives and times the first to the last datagram. Datagrams the kernel drops are
//! not counted (the line reports the datagrams received).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use ferroverbs_sim::link::udp::{set_receive_buffer, SOCKET_RECEIVE_BUFFER};

use super::stats::{bw_report, BwReport, LatencySamples};
use crate::cli::error::CliError;

/// The bytes of a RoCEv2 datagram carrying one MTU of payload (BTH, payload, ICRC).
pub fn roce_datagram(mtu: u32) -> usize {
    12 + mtu as usize + 4
}

/// How long the UDP receiver waits for more datagrams after the last one.
pub const UDP_QUIET: Duration = Duration::from_millis(300);

fn io_err(what: &str) -> impl FnOnce(std::io::Error) -> CliError + '_ {
    move |e| CliError::runtime(format!("baseline: {what}"), e)
}

/// The client's half of a TCP ping-pong: `iters` round trips of `size` bytes, written
/// to `w` and read back from `r`; returns the stamp (ns) of each send.
pub fn tcp_ping(
    r: &mut dyn Read,
    w: &mut dyn Write,
    size: usize,
    iters: u64,
) -> Result<Vec<u64>, CliError> {
    let out = vec![0x5au8; size];
    let mut back = vec![0u8; size];
    let mut stamps = super::runner::stamp_array(iters as usize);
    let t0 = Instant::now();
    for _ in 0..iters {
        stamps.push(t0.elapsed().as_nanos() as u64);
        w.write_all(&out).map_err(io_err("TCP ping"))?;
        r.read_exact(&mut back).map_err(io_err("TCP pong"))?;
    }
    Ok(stamps)
}

/// The server's half of a TCP ping-pong: echoes `iters` messages of `size` bytes
/// from `r` to `w`.
pub fn tcp_pong(
    r: &mut dyn Read,
    w: &mut dyn Write,
    size: usize,
    iters: u64,
) -> Result<(), CliError> {
    let mut buf = vec![0u8; size];
    for _ in 0..iters {
        r.read_exact(&mut buf).map_err(io_err("TCP echo read"))?;
        w.write_all(&buf).map_err(io_err("TCP echo write"))?;
    }
    Ok(())
}

/// A TCP ping-pong over 127.0.0.1 with an echo thread in this process; returns the
/// stamps of the sends.
pub fn tcp_loopback(size: usize, iters: u64) -> Result<Vec<u64>, CliError> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(io_err("TCP listen"))?;
    let at = l.local_addr().map_err(io_err("TCP listen"))?;
    let echo = std::thread::spawn(move || -> Result<(), CliError> {
        let (s, _) = l.accept().map_err(io_err("TCP accept"))?;
        let _ = s.set_nodelay(true);
        tcp_pong(&mut &s, &mut &s, size, iters)
    });
    let s = TcpStream::connect(at).map_err(io_err("TCP connect"))?;
    let _ = s.set_nodelay(true);
    let stamps = tcp_ping(&mut &s, &mut &s, size, iters)?;
    echo.join()
        .map_err(|_| CliError::runtime_msg("baseline: the TCP echo thread panicked"))??;
    Ok(stamps)
}

/// The latency samples of a ping-pong's stamps, with the test's RTT factor.
pub fn latency(stamps: &[u64], rtt_factor: u32) -> Result<LatencySamples, CliError> {
    LatencySamples::from_stamps(stamps, rtt_factor)
        .map_err(|e| CliError::runtime("baseline: computing the latency", e))
}

/// `memcpy` bandwidth: `count` copies of `size` bytes between two buffers, each
/// stamped, reported as a bandwidth test reports (one copy = one message).
pub fn memcpy(size: usize, count: u64) -> Result<BwReport, CliError> {
    let src = vec![0xa5u8; size];
    let mut dst = vec![0u8; size];
    let n = count as usize;
    let (mut posted, mut completed) = (vec![0u64; n], vec![0u64; n]);
    let t0 = Instant::now();
    for i in 0..n {
        posted[i] = t0.elapsed().as_nanos() as u64;
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
        completed[i] = t0.elapsed().as_nanos() as u64;
    }
    bw_report(size as u64, &posted, &completed, 1, 1)
        .map_err(|e| CliError::runtime("baseline: computing the bandwidth", e))
}

/// A UDP socket that receives the raw stream, bound to `ip` (any port), with the UDP
/// link's receive buffer.
pub fn udp_receiver(ip: Ipv4Addr) -> Result<UdpSocket, CliError> {
    let s = UdpSocket::bind(SocketAddrV4::new(ip, 0)).map_err(io_err("UDP bind"))?;
    set_receive_buffer(&s, SOCKET_RECEIVE_BUFFER);
    Ok(s)
}

/// What the receiver of the raw stream saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpReceived {
    /// Datagrams received.
    pub datagrams: u64,
    /// Nanoseconds from the first to the last.
    pub span_ns: u64,
}

/// Receives up to `count` datagrams of `size` bytes, until [`UDP_QUIET`] passes with
/// none (or 30 s with none at all).
pub fn udp_receive(s: &UdpSocket, size: usize, count: u64) -> Result<UdpReceived, CliError> {
    let mut buf = vec![0u8; size + 64];
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(io_err("UDP timeout"))?;
    let mut got = 0u64;
    let mut first = None;
    let mut last = Instant::now();
    while got < count {
        match s.recv(&mut buf) {
            Ok(_) => {
                last = Instant::now();
                first.get_or_insert(last);
                got += 1;
                if got == 1 {
                    s.set_read_timeout(Some(UDP_QUIET))
                        .map_err(io_err("UDP timeout"))?;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                break
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_err("UDP receive")(e)),
        }
    }
    Ok(UdpReceived {
        datagrams: got,
        span_ns: first.map_or(0, |f| last.duration_since(f).as_nanos() as u64),
    })
}

/// Sends `count` datagrams of `size` bytes from `from` to `to` as fast as `sendto`
/// goes (a full socket buffer blocks; nothing else paces it).
pub fn udp_send(from: Ipv4Addr, to: SocketAddr, size: usize, count: u64) -> Result<(), CliError> {
    let s = UdpSocket::bind(SocketAddrV4::new(from, 0)).map_err(io_err("UDP bind"))?;
    s.connect(to).map_err(io_err("UDP connect"))?;
    let buf = vec![0x3cu8; size];
    for _ in 0..count {
        match s.send(&buf) {
            Ok(_) => {}
            // Loopback reports a receiver's full buffer as ECONNREFUSED/ENOBUFS at
            // times: the datagram is lost, as on a wire.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => {}
        }
    }
    Ok(())
}

/// The bandwidth line of the raw stream: `#bytes` the datagram size, `#iterations`
/// the datagrams received.
pub fn udp_report(size: usize, r: UdpReceived) -> BwReport {
    let secs = (r.span_ns.max(1)) as f64 / 1e9;
    let bw = (size as f64 * r.datagrams as f64) / secs / f64::from(1u32 << 20);
    BwReport {
        bytes: size as u64,
        iterations: r.datagrams,
        bw_peak: bw,
        bw_avg: bw,
        msg_rate: r.datagrams as f64 / secs / 1e6,
    }
}

/// The line that sets a figure beside its baseline.
pub fn ratio_line(what: &str, test: f64, base: f64, unit: &str, lower_is_better: bool) -> String {
    let r = if base > 0.0 { test / base } else { f64::NAN };
    let verdict = if lower_is_better {
        if r <= 1.0 {
            format!("{:.2}x faster than the baseline", 1.0 / r)
        } else {
            format!("{r:.2}x slower than the baseline")
        }
    } else {
        format!("{:.1} % of the baseline", 100.0 * r)
    };
    format!(" {what}: {test:.2} {unit} vs baseline {base:.2} {unit}: {verdict}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tcp_ping_pong_on_loopback() {
        let stamps = tcp_loopback(64, 20).unwrap();
        assert_eq!(stamps.len(), 20);
        assert!(stamps.windows(2).all(|w| w[0] <= w[1]));
        let s = latency(&stamps, 2).unwrap();
        assert!(s.report(64, 20).unwrap().t_min > 0.0);
    }

    #[test]
    fn memcpy_counts_every_copy() {
        let r = memcpy(4096, 100).unwrap();
        assert_eq!((r.bytes, r.iterations), (4096, 100));
        assert!(r.bw_avg > 0.0 && r.msg_rate > 0.0);
    }

    #[test]
    fn a_raw_udp_stream_on_loopback() {
        let rx = udp_receiver(Ipv4Addr::LOCALHOST).unwrap();
        let to = rx.local_addr().unwrap();
        let size = roce_datagram(1024);
        assert_eq!(size, 1040);
        let t = std::thread::spawn(move || udp_receive(&rx, size, 50).unwrap());
        // A few at a time, so that none is dropped whatever the scheduling.
        for _ in 0..50 {
            udp_send(Ipv4Addr::LOCALHOST, to, size, 1).unwrap();
        }
        let r = t.join().unwrap();
        assert!(r.datagrams > 0 && r.datagrams <= 50);
        let line = udp_report(size, r);
        assert_eq!(line.bytes, 1040);
    }

    #[test]
    fn ratios_read_both_ways() {
        assert_eq!(
            ratio_line("t_typical", 10.0, 20.0, "us", true),
            " t_typical: 10.00 us vs baseline 20.00 us: 2.00x faster than the baseline\n"
        );
        assert!(ratio_line("BW", 50.0, 200.0, "MiB/s", false).contains("25.0 % of the baseline"));
    }
}
