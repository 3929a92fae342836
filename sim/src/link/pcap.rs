//! pcap capture of a link: every frame as a full Ethernet/IPv4/UDP/RoCEv2 frame in a
//! classic pcap file (`LINKTYPE_ETHERNET`), for Wireshark/tshark.
//!
//! File format (the classic libpcap format, as documented by tcpdump.org's
//! `pcap-savefile(5)` and the IETF draft "PCAP Capture File Format"): a 24-byte global
//! header (magic `0xa1b2c3d4` for microsecond time stamps, version 2.4, time zone 0,
//! accuracy 0, snapshot length, link type 1 = Ethernet), then per frame a 16-byte record
//! header (seconds, microseconds, captured length, original length) and the frame bytes
//! (no frame check sequence). Everything is written little-endian; readers detect the
//! byte order from the magic.
//!
//! A capture is turned on per link ([`crate::link::Fabric::set_pcap`],
//! [`crate::link::udp::UdpConfig::pcap`]) or for every link of a process with the
//! environment variable [`ENV_VAR`] (`FERROVERBS_PCAP=path`; a `{pid}` in the path is
//! replaced by the process id, so that two processes of a test can capture to two
//! files). Links of one process that capture to the same path share one writer
//! ([`PcapWriter::shared`]), so a file is never opened twice.
//!
//! Writing a frame allocates nothing: the record goes into a buffered writer made at
//! setup. The buffer is flushed at most every [`FLUSH_EVERY`] (checked on each write),
//! on [`PcapWriter::flush`] and when the last handle is dropped.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The environment variable that turns on capture for every link of a process.
pub const ENV_VAR: &str = "FERROVERBS_PCAP";

/// `LINKTYPE_ETHERNET` (tcpdump.org link-layer header types).
pub const LINKTYPE_ETHERNET: u32 = 1;

/// The classic pcap magic number for microsecond time stamps.
pub const MAGIC_USEC: u32 = 0xa1b2_c3d4;

/// Snapshot length recorded in the global header (no frame is truncated below this).
pub const SNAPLEN: u32 = 65_535;

/// Longest time buffered records wait before a write flushes them.
pub const FLUSH_EVERY: Duration = Duration::from_millis(50);

/// The 24-byte global header of a classic pcap file with Ethernet frames.
pub fn global_header() -> [u8; 24] {
    let mut h = [0u8; 24];
    h[0..4].copy_from_slice(&MAGIC_USEC.to_le_bytes());
    h[4..6].copy_from_slice(&2u16.to_le_bytes());
    h[6..8].copy_from_slice(&4u16.to_le_bytes());
    // thiszone (8..12) and sigfigs (12..16) are 0.
    h[16..20].copy_from_slice(&SNAPLEN.to_le_bytes());
    h[20..24].copy_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
    h
}

/// The 16-byte record header of a frame of `len` bytes captured at `ts` (since the Unix
/// epoch), `len` capped at [`SNAPLEN`] for the captured length.
pub fn record_header(ts: Duration, len: usize) -> [u8; 16] {
    let mut h = [0u8; 16];
    let incl = len.min(SNAPLEN as usize) as u32;
    h[0..4].copy_from_slice(&(ts.as_secs() as u32).to_le_bytes());
    h[4..8].copy_from_slice(&ts.subsec_micros().to_le_bytes());
    h[8..12].copy_from_slice(&incl.to_le_bytes());
    h[12..16].copy_from_slice(&(len.min(u32::MAX as usize) as u32).to_le_bytes());
    h
}

struct State {
    out: BufWriter<File>,
    last_flush: Instant,
    frames: u64,
    errors: u64,
}

/// A pcap file being written. Shared by the links that capture into it; safe to use
/// from any thread (records are written whole, under a lock).
pub struct PcapWriter {
    path: PathBuf,
    state: Mutex<State>,
}

impl core::fmt::Debug for PcapWriter {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PcapWriter")
            .field("path", &self.path)
            .field("frames", &self.frames())
            .finish()
    }
}

static SHARED: Mutex<Vec<(PathBuf, Weak<PcapWriter>)>> = Mutex::new(Vec::new());

impl PcapWriter {
    /// Creates (truncates) the file at `path` and writes the global header.
    pub fn create(path: impl AsRef<Path>) -> io::Result<Arc<PcapWriter>> {
        let path = path.as_ref().to_path_buf();
        let mut out = BufWriter::with_capacity(1 << 16, File::create(&path)?);
        out.write_all(&global_header())?;
        out.flush()?;
        Ok(Arc::new(PcapWriter {
            path,
            state: Mutex::new(State {
                out,
                last_flush: Instant::now(),
                frames: 0,
                errors: 0,
            }),
        }))
    }

    /// The writer of this process for `path`: the one already open if some link of
    /// this process captures there, else a new file.
    pub fn shared(path: impl AsRef<Path>) -> io::Result<Arc<PcapWriter>> {
        let path = path.as_ref().to_path_buf();
        let mut reg = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        reg.retain(|(_, w)| w.strong_count() > 0);
        if let Some(w) = reg
            .iter()
            .find(|(p, _)| *p == path)
            .and_then(|(_, w)| w.upgrade())
        {
            return Ok(w);
        }
        let w = PcapWriter::create(&path)?;
        reg.push((path, Arc::downgrade(&w)));
        Ok(w)
    }

    /// The shared writer named by [`ENV_VAR`] (with `{pid}` replaced by the process
    /// id), if the variable is set and non-empty. A file that cannot be created is
    /// reported on standard error once per link and capture stays off.
    pub fn from_env() -> Option<Arc<PcapWriter>> {
        let v = std::env::var_os(ENV_VAR)?;
        let s = v.to_string_lossy();
        if s.is_empty() {
            return None;
        }
        let path = s.replace("{pid}", &std::process::id().to_string());
        match PcapWriter::shared(&path) {
            Ok(w) => Some(w),
            Err(e) => {
                eprintln!("ferroverbs-sim: {ENV_VAR}={path}: {e}; capture off");
                None
            }
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one frame, time-stamped now (wall clock).
    pub fn write(&self, frame: &[u8]) {
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        self.write_at(ts, frame);
    }

    /// Appends one frame with the time stamp `ts` (since the Unix epoch). Allocates
    /// nothing; an I/O error is counted ([`PcapWriter::errors`]), never raised.
    pub fn write_at(&self, ts: Duration, frame: &[u8]) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let incl = frame.len().min(SNAPLEN as usize);
        let r = s
            .out
            .write_all(&record_header(ts, frame.len()))
            .and_then(|()| s.out.write_all(&frame[..incl]));
        if r.is_err() {
            s.errors += 1;
        }
        s.frames += 1;
        if s.last_flush.elapsed() >= FLUSH_EVERY {
            if s.out.flush().is_err() {
                s.errors += 1;
            }
            s.last_flush = Instant::now();
        }
    }

    /// Writes the buffered records to the file.
    pub fn flush(&self) -> io::Result<()> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.last_flush = Instant::now();
        s.out.flush()
    }

    /// Frames written so far.
    pub fn frames(&self) -> u64 {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).frames
    }

    /// Writes that failed.
    pub fn errors(&self) -> u64 {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).errors
    }
}

impl Drop for PcapWriter {
    fn drop(&mut self) {
        let s = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        let _ = s.out.flush();
    }
}

/// One record of a pcap file read back by [`read`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Time stamp (since the Unix epoch).
    pub ts: Duration,
    /// Original length of the frame.
    pub orig_len: u32,
    /// The captured bytes.
    pub data: Vec<u8>,
}

/// Why [`read`] could not read a file.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file could not be read.
    #[error("reading the capture: {0}")]
    Io(#[from] io::Error),
    /// Not a little-endian microsecond classic pcap file with Ethernet frames.
    #[error("not a classic little-endian Ethernet pcap file")]
    Format,
    /// A record runs past the end of the file.
    #[error("record {0} is truncated")]
    Truncated(usize),
}

/// Reads a classic pcap file as this module writes it (for tests and tools).
pub fn read(path: impl AsRef<Path>) -> Result<Vec<Record>, ReadError> {
    parse(&std::fs::read(path)?)
}

/// Parses the bytes of a classic pcap file as this module writes it.
pub fn parse(bytes: &[u8]) -> Result<Vec<Record>, ReadError> {
    let g = global_header();
    if bytes.len() < g.len() || bytes[..8] != g[..8] || bytes[20..24] != g[20..24] {
        return Err(ReadError::Format);
    }
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let mut out = Vec::new();
    let mut at = g.len();
    while at < bytes.len() {
        let n = out.len();
        let h = bytes.get(at..at + 16).ok_or(ReadError::Truncated(n))?;
        let incl = u32_at(h, 8) as usize;
        let data = bytes
            .get(at + 16..at + 16 + incl)
            .ok_or(ReadError::Truncated(n))?;
        out.push(Record {
            ts: Duration::new(u64::from(u32_at(h, 0)), u32_at(h, 4).saturating_mul(1000)),
            orig_len: u32_at(h, 12),
            data: data.to_vec(),
        });
        at += 16 + incl;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_bytes() {
        assert_eq!(
            global_header(),
            [
                0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0,
                0, 0
            ]
        );
        assert_eq!(
            record_header(Duration::new(0x0102_0304, 5_000), 60),
            [4, 3, 2, 1, 5, 0, 0, 0, 60, 0, 0, 0, 60, 0, 0, 0]
        );
    }

    #[test]
    fn write_and_read_back() {
        let dir = std::env::temp_dir().join(format!("fv-pcap-unit-{}", std::process::id()));
        let w = PcapWriter::shared(&dir).unwrap();
        let w2 = PcapWriter::shared(&dir).unwrap();
        assert!(Arc::ptr_eq(&w, &w2));
        w.write_at(Duration::new(7, 8_000), &[1, 2, 3]);
        w2.write(&[4; 70]);
        w.flush().unwrap();
        let r = read(&dir).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].ts, Duration::new(7, 8_000));
        assert_eq!(r[0].data, vec![1, 2, 3]);
        assert_eq!((r[1].orig_len, r[1].data.len()), (70, 70));
        assert_eq!(w.frames(), 2);
        assert!(matches!(parse(&[0; 10]), Err(ReadError::Format)));
        let mut b = std::fs::read(&dir).unwrap();
        b.pop();
        assert!(matches!(parse(&b), Err(ReadError::Truncated(1))));
        let _ = std::fs::remove_file(&dir);
    }
}
