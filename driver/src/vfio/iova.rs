//! The IOVA space: the ranges the IOMMU accepts, and an allocator inside them.
//!
//! `VFIO_IOMMU_GET_INFO` reports the IOMMU page sizes and, through a capability
//! chain, the usable IOVA ranges (`VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE`); the ranges
//! already exclude reserved regions such as the x86 MSI window at 0xFEE00000. Kernels
//! older than 5.4 have no such capability; then the legacy ranges rdma-core uses are
//! taken: `[0x10000, 0xFEDFFFFF]` and `[0xFEF00000, 2^39 - 1]` (reference §6.4).
//!
//! [`parse_iommu_info`] reads the structure the kernel filled in, bounds-checking every
//! offset (it is the kernel's bytes, but still bytes from outside this process), and
//! [`IovaAllocator`] hands out aligned ranges first-fit and takes them back, merging
//! neighbours. This file has no unsafe code and no system calls, so it is unit-tested
//! with synthetic bytes.

use std::collections::BTreeMap;

/// A usable IOVA range, `start..=end` (inclusive, as the kernel reports it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct IovaRange {
    /// First usable address.
    pub start: u64,
    /// Last usable address.
    pub end: u64,
}

/// The x86 interrupt (MSI) window that DMA must never target.
pub const MSI_WINDOW: IovaRange = IovaRange {
    start: 0xFEE0_0000,
    end: 0xFEEF_FFFF,
};

/// The ranges used when the kernel reports none (rdma-core `mlx5_vfio`, §6.4).
pub const LEGACY_RANGES: [IovaRange; 2] = [
    IovaRange {
        start: 0x1_0000,
        end: 0xFEDF_FFFF,
    },
    IovaRange {
        start: 0xFEF0_0000,
        end: (1 << 39) - 1,
    },
];

/// IOVAs below this are never handed out, so that an IOVA of 0 (or a small offset
/// from it) can never be mistaken for a valid device address.
pub const MIN_IOVA: u64 = 0x1_0000;

/// What `VFIO_IOMMU_GET_INFO` said.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IommuInfo {
    /// Bitmap of supported IOMMU page sizes (`iova_pgsizes`), when reported.
    pub page_sizes: Option<u64>,
    /// The usable ranges (capability `IOVA_RANGE`), when reported.
    pub ranges: Option<Vec<IovaRange>>,
    /// DMA mappings still available in the container (capability `DMA_AVAIL`).
    pub dma_avail: Option<u32>,
}

impl IommuInfo {
    /// The smallest IOMMU page size of at least 4 KiB (4 KiB when none is reported),
    /// as rdma-core's `iova_min_page_size`.
    pub fn min_page_size(&self) -> u64 {
        let sizes = self.page_sizes.unwrap_or(0) & !0xfff;
        if sizes == 0 {
            4096
        } else {
            1 << sizes.trailing_zeros()
        }
    }

    /// The ranges to allocate from: the reported ones, or [`LEGACY_RANGES`].
    pub fn usable_ranges(&self) -> Vec<IovaRange> {
        match &self.ranges {
            Some(r) if !r.is_empty() => r.clone(),
            _ => LEGACY_RANGES.to_vec(),
        }
    }
}

/// Why the bytes of a `vfio_iommu_type1_info` were rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CapChainError {
    /// The buffer is shorter than the fixed part.
    #[error("IOMMU info of {len} bytes is shorter than the 24-byte header")]
    Short {
        /// Bytes given.
        len: usize,
    },
    /// A capability header or body runs past the end of the buffer.
    #[error("capability at offset {offset} (id {id}) runs past the {len}-byte buffer")]
    OutOfBounds {
        /// Offset of the capability.
        offset: usize,
        /// Its id (0 when the header itself is cut off).
        id: u16,
        /// Buffer length.
        len: usize,
    },
    /// The chain points backwards or at itself (it would loop).
    #[error("capability chain loops: offset {next} follows {offset}")]
    Loop {
        /// Offset of the capability.
        offset: usize,
        /// Its `next`.
        next: usize,
    },
    /// An IOVA range with `end < start`.
    #[error("IOVA range {start:#x}..={end:#x} is inverted")]
    BadRange {
        /// Start.
        start: u64,
        /// End.
        end: u64,
    },
}

const INFO_FLAG_PGSIZES: u32 = vfio_bindings::bindings::vfio::VFIO_IOMMU_INFO_PGSIZES;
const INFO_FLAG_CAPS: u32 = vfio_bindings::bindings::vfio::VFIO_IOMMU_INFO_CAPS;
const CAP_IOVA_RANGE: u16 =
    vfio_bindings::bindings::vfio::VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE as u16;
const CAP_DMA_AVAIL: u16 = vfio_bindings::bindings::vfio::VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL as u16;

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(off..off + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(off..off + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(off..off + 8)?.try_into().ok()?))
}

/// The `argsz` the kernel asked for in a `vfio_iommu_type1_info` it filled in.
pub fn info_argsz(bytes: &[u8]) -> Option<u32> {
    u32_at(bytes, 0)
}

/// Parses a `vfio_iommu_type1_info` and its capability chain (host byte order):
/// `{argsz u32, flags u32, iova_pgsizes u64, cap_offset u32, pad u32}`, then
/// capabilities `{id u16, version u16, next u32}` whose `next` and `cap_offset` are
/// offsets from the start of the structure, 0 ending the chain. Unknown capabilities
/// are skipped.
pub fn parse_iommu_info(bytes: &[u8]) -> Result<IommuInfo, CapChainError> {
    let len = bytes.len();
    let (Some(flags), Some(pgsizes), Some(cap_offset)) =
        (u32_at(bytes, 4), u64_at(bytes, 8), u32_at(bytes, 16))
    else {
        return Err(CapChainError::Short { len });
    };
    if len < 24 {
        return Err(CapChainError::Short { len });
    }
    let mut info = IommuInfo {
        page_sizes: (flags & INFO_FLAG_PGSIZES != 0).then_some(pgsizes),
        ..IommuInfo::default()
    };
    if flags & INFO_FLAG_CAPS == 0 {
        return Ok(info);
    }
    let mut offset = cap_offset as usize;
    while offset != 0 {
        let oob = |id| CapChainError::OutOfBounds { offset, id, len };
        let (Some(id), Some(next)) = (u16_at(bytes, offset), u32_at(bytes, offset + 4)) else {
            return Err(oob(0));
        };
        match id {
            CAP_IOVA_RANGE => {
                let n = u32_at(bytes, offset + 8).ok_or(oob(id))? as usize;
                let body = offset + 16;
                let end = n
                    .checked_mul(16)
                    .and_then(|b| b.checked_add(body))
                    .ok_or(oob(id))?;
                if end > len {
                    return Err(oob(id));
                }
                let mut ranges = Vec::with_capacity(n);
                for i in 0..n {
                    let start = u64_at(bytes, body + i * 16).ok_or(oob(id))?;
                    let last = u64_at(bytes, body + i * 16 + 8).ok_or(oob(id))?;
                    if last < start {
                        return Err(CapChainError::BadRange { start, end: last });
                    }
                    ranges.push(IovaRange { start, end: last });
                }
                info.ranges = Some(ranges);
            }
            CAP_DMA_AVAIL => {
                info.dma_avail = Some(u32_at(bytes, offset + 8).ok_or(oob(id))?);
            }
            _ => {}
        }
        let next = next as usize;
        // The kernel lays capabilities out in ascending order; anything else would
        // loop (or is not the kernel's).
        if next != 0 && next <= offset {
            return Err(CapChainError::Loop { offset, next });
        }
        offset = next;
    }
    Ok(info)
}

/// Why a range could not be given back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IovaFreeError {
    /// The range is empty, wraps, or lies outside the managed ranges.
    #[error("IOVA range {start:#x}+{len:#x} is not inside the managed space")]
    Outside {
        /// Start.
        start: u64,
        /// Length.
        len: u64,
    },
    /// Part of the range is already free.
    #[error("IOVA range {start:#x}+{len:#x} overlaps free space (double free)")]
    AlreadyFree {
        /// Start.
        start: u64,
        /// Length.
        len: u64,
    },
}

/// First-fit allocator of aligned ranges inside a set of inclusive ranges.
///
/// Used for IOVAs (inside the IOMMU's valid ranges) and for carving DMA arenas into
/// chunks (inside `0..arena_len`).
#[derive(Clone, Debug)]
pub struct IovaAllocator {
    /// Free ranges, start → last (inclusive), never adjacent (merged).
    free: BTreeMap<u64, u64>,
    /// The managed ranges, as given (clipped), for validity checks.
    space: Vec<IovaRange>,
}

impl IovaAllocator {
    /// An allocator over `ranges` (overlaps merged), minus everything below `floor`.
    pub fn new(ranges: &[IovaRange], floor: u64) -> Self {
        let mut sorted: Vec<IovaRange> = ranges
            .iter()
            .filter(|r| r.end >= floor && r.end >= r.start)
            .map(|r| IovaRange {
                start: r.start.max(floor),
                end: r.end,
            })
            .collect();
        sorted.sort();
        let mut space: Vec<IovaRange> = Vec::new();
        for r in sorted {
            match space.last_mut() {
                Some(last) if r.start <= last.end.saturating_add(1) => {
                    last.end = last.end.max(r.end)
                }
                _ => space.push(r),
            }
        }
        IovaAllocator {
            free: space.iter().map(|r| (r.start, r.end)).collect(),
            space,
        }
    }

    /// An allocator over the ranges the IOMMU reported (or the legacy ones), with
    /// nothing below [`MIN_IOVA`].
    pub fn for_iommu(info: &IommuInfo) -> Self {
        IovaAllocator::new(&info.usable_ranges(), MIN_IOVA)
    }

    /// The managed ranges.
    pub fn space(&self) -> &[IovaRange] {
        &self.space
    }

    /// Total free bytes (saturating).
    pub fn free_bytes(&self) -> u64 {
        self.free.iter().fold(0u64, |acc, (s, l)| {
            acc.saturating_add((l - s).saturating_add(1))
        })
    }

    /// Allocates `len` bytes aligned to `align` (a power of two); `None` when no free
    /// range has room, or `len` is 0, or `align` is not a power of two.
    pub fn alloc(&mut self, len: u64, align: u64) -> Option<u64> {
        if len == 0 || !align.is_power_of_two() {
            return None;
        }
        let (start, last, at) = self.free.iter().find_map(|(&start, &last)| {
            let at = start.checked_add(align - 1)? & !(align - 1);
            let end = at.checked_add(len - 1)?;
            (at >= start && end <= last).then_some((start, last, at))
        })?;
        self.free.remove(&start);
        if at > start {
            self.free.insert(start, at - 1);
        }
        let end = at + (len - 1);
        if end < last {
            self.free.insert(end + 1, last);
        }
        Some(at)
    }

    /// Gives back `len` bytes at `start`, merging with free neighbours.
    pub fn free(&mut self, start: u64, len: u64) -> Result<(), IovaFreeError> {
        let outside = IovaFreeError::Outside { start, len };
        let end = len
            .checked_sub(1)
            .and_then(|l| start.checked_add(l))
            .ok_or(outside)?;
        if !self.space.iter().any(|r| r.start <= start && end <= r.end) {
            return Err(outside);
        }
        let before = self.free.range(..=end).next_back().map(|(&s, &l)| (s, l));
        if let Some((_, l)) = before {
            if l >= start {
                return Err(IovaFreeError::AlreadyFree { start, len });
            }
        }
        let (mut new_start, mut new_last) = (start, end);
        if let Some((s, l)) = before {
            if l.checked_add(1) == Some(start) {
                self.free.remove(&s);
                new_start = s;
            }
        }
        if let Some(next) = end.checked_add(1) {
            if let Some(l) = self.free.get(&next).copied() {
                self.free.remove(&next);
                new_last = l;
            }
        }
        self.free.insert(new_start, new_last);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: u64, end: u64) -> IovaRange {
        IovaRange { start, end }
    }

    #[test]
    fn legacy_ranges_skip_the_msi_window() {
        let info = IommuInfo::default();
        assert_eq!(info.usable_ranges(), LEGACY_RANGES.to_vec());
        assert_eq!(info.min_page_size(), 4096);
        let mut a = IovaAllocator::for_iommu(&info);
        // Fill the low range, one 1 MiB block at a time, and check none touches the
        // MSI window; the allocation that straddles it goes above.
        let mut last = 0;
        for _ in 0..5000 {
            let iova = a.alloc(1 << 20, 1 << 20).unwrap();
            let end = iova + (1 << 20) - 1;
            assert!(end < MSI_WINDOW.start || iova > MSI_WINDOW.end, "{iova:#x}");
            assert!(iova >= MIN_IOVA);
            last = iova;
        }
        assert!(last > MSI_WINDOW.end);
        assert_eq!(a.alloc(1 << 20, 1 << 20).unwrap(), last + (1 << 20));
    }

    #[test]
    fn alignment_ranges_exhaustion_and_reuse() {
        let mut a = IovaAllocator::new(&[r(0x1000, 0x4fff), r(0x10000, 0x1ffff)], 0);
        assert_eq!(a.free_bytes(), 0x4000 + 0x10000);
        // A 16 KiB-aligned 16 KiB block would sit at 0x4000..0x7fff, past the end of
        // the first range, so it goes to the second.
        assert_eq!(a.alloc(0x4000, 0x4000), Some(0x10000));
        assert_eq!(a.alloc(0x1000, 0x1000), Some(0x1000));
        assert_eq!(a.alloc(0x3000, 0x1000), Some(0x2000));
        // The first range is full now.
        assert_eq!(a.alloc(0x1000, 0x1000), Some(0x14000));
        assert_eq!(a.alloc(0x1_0000, 0x1000), None, "exhausted");
        assert_eq!(a.alloc(0, 0x1000), None);
        assert_eq!(
            a.alloc(0x1000, 0x3000),
            None,
            "alignment must be a power of 2"
        );
        // Free and reuse, with merging.
        a.free(0x2000, 0x3000).unwrap();
        a.free(0x1000, 0x1000).unwrap();
        assert_eq!(
            a.alloc(0x4000, 0x1000),
            Some(0x1000),
            "merged back to one range"
        );
        assert_eq!(
            a.free(0x1000, 0x1000).and_then(|_| a.free(0x1000, 0x1000)),
            Err(IovaFreeError::AlreadyFree {
                start: 0x1000,
                len: 0x1000
            })
        );
        assert_eq!(
            a.free(0x8000, 0x1000),
            Err(IovaFreeError::Outside {
                start: 0x8000,
                len: 0x1000
            })
        );
        assert!(a.free(u64::MAX, 2).is_err());
        assert!(a.free(0x1000, 0).is_err());
    }

    #[test]
    fn whole_space_round_trip_and_top_of_range() {
        let mut a = IovaAllocator::new(&[r(0, u64::MAX)], MIN_IOVA);
        assert_eq!(a.space(), &[r(MIN_IOVA, u64::MAX)]);
        let big = a.alloc(1 << 63, 1 << 63).unwrap();
        assert_eq!(big, 1 << 63);
        let top = a.alloc(0x1000, 0x1000).unwrap();
        assert_eq!(top, MIN_IOVA);
        a.free(big, 1 << 63).unwrap();
        a.free(top, 0x1000).unwrap();
        assert_eq!(a.free_bytes(), u64::MAX - MIN_IOVA + 1);
        // Overlapping input ranges merge.
        let a = IovaAllocator::new(
            &[r(0x1000, 0x2fff), r(0x2000, 0x3fff), r(0x4000, 0x4fff)],
            0,
        );
        assert_eq!(a.space(), &[r(0x1000, 0x4fff)]);
    }

    /// Builds a `vfio_iommu_type1_info` with the given capabilities.
    fn info_bytes(flags: u32, pgsizes: u64, caps: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut b = vec![0u8; 24];
        b[4..8].copy_from_slice(&flags.to_ne_bytes());
        b[8..16].copy_from_slice(&pgsizes.to_ne_bytes());
        if !caps.is_empty() {
            b[16..20].copy_from_slice(&24u32.to_ne_bytes());
        }
        for (i, (id, body)) in caps.iter().enumerate() {
            let at = b.len();
            let next = if i + 1 < caps.len() {
                (at + 8 + body.len()) as u32
            } else {
                0
            };
            b.extend_from_slice(&id.to_ne_bytes());
            b.extend_from_slice(&1u16.to_ne_bytes());
            b.extend_from_slice(&next.to_ne_bytes());
            b.extend_from_slice(body);
        }
        let argsz = b.len() as u32;
        b[0..4].copy_from_slice(&argsz.to_ne_bytes());
        b
    }

    fn ranges_body(ranges: &[(u64, u64)]) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&(ranges.len() as u32).to_ne_bytes());
        body.extend_from_slice(&0u32.to_ne_bytes());
        for (s, e) in ranges {
            body.extend_from_slice(&s.to_ne_bytes());
            body.extend_from_slice(&e.to_ne_bytes());
        }
        body
    }

    #[test]
    fn capability_chain_is_parsed() {
        let bytes = info_bytes(
            INFO_FLAG_PGSIZES | INFO_FLAG_CAPS,
            0x4020_1000, // 4 KiB, 2 MiB, 1 GiB
            &[
                (9, vec![0xaa; 8]), // unknown, skipped
                (
                    CAP_IOVA_RANGE,
                    ranges_body(&[(0, 0xfedf_ffff), (0xfef0_0000, 0xffff_ffff_ffff)]),
                ),
                (CAP_DMA_AVAIL, 65000u32.to_ne_bytes().to_vec()),
            ],
        );
        assert_eq!(info_argsz(&bytes), Some(bytes.len() as u32));
        let info = parse_iommu_info(&bytes).unwrap();
        assert_eq!(info.page_sizes, Some(0x4020_1000));
        assert_eq!(info.min_page_size(), 4096);
        assert_eq!(info.dma_avail, Some(65000));
        assert_eq!(
            info.usable_ranges(),
            vec![r(0, 0xfedf_ffff), r(0xfef0_0000, 0xffff_ffff_ffff)]
        );
        let a = IovaAllocator::for_iommu(&info);
        assert_eq!(a.space()[0].start, MIN_IOVA, "nothing below MIN_IOVA");

        // No CAPS flag: the chain is ignored and legacy ranges apply.
        let bytes = info_bytes(INFO_FLAG_PGSIZES, 0x20_0000 | 0x1000, &[]);
        let info = parse_iommu_info(&bytes).unwrap();
        assert_eq!(info.ranges, None);
        assert_eq!(info.usable_ranges(), LEGACY_RANGES.to_vec());
        // Only large pages: the minimum is the smallest of them.
        let bytes = info_bytes(INFO_FLAG_PGSIZES, 0x4020_0000, &[]);
        assert_eq!(parse_iommu_info(&bytes).unwrap().min_page_size(), 0x20_0000);
    }

    #[test]
    fn malformed_chains_are_rejected_not_panicked_on() {
        assert_eq!(
            parse_iommu_info(&[0; 10]),
            Err(CapChainError::Short { len: 10 })
        );
        // Range count larger than the buffer.
        let mut body = ranges_body(&[(0x1000, 0x1fff)]);
        body[0..4].copy_from_slice(&1000u32.to_ne_bytes());
        let bytes = info_bytes(INFO_FLAG_CAPS, 0, &[(CAP_IOVA_RANGE, body)]);
        assert!(matches!(
            parse_iommu_info(&bytes),
            Err(CapChainError::OutOfBounds { id: 1, .. })
        ));
        // Inverted range.
        let bytes = info_bytes(
            INFO_FLAG_CAPS,
            0,
            &[(CAP_IOVA_RANGE, ranges_body(&[(0x2000, 0x1000)]))],
        );
        assert_eq!(
            parse_iommu_info(&bytes),
            Err(CapChainError::BadRange {
                start: 0x2000,
                end: 0x1000
            })
        );
        // A chain pointing at itself.
        let mut bytes = info_bytes(INFO_FLAG_CAPS, 0, &[(9, vec![0; 8])]);
        bytes[28..32].copy_from_slice(&24u32.to_ne_bytes());
        assert_eq!(
            parse_iommu_info(&bytes),
            Err(CapChainError::Loop {
                offset: 24,
                next: 24
            })
        );
        // cap_offset past the end.
        let mut bytes = info_bytes(INFO_FLAG_CAPS, 0, &[]);
        bytes[16..20].copy_from_slice(&4000u32.to_ne_bytes());
        assert!(matches!(
            parse_iommu_info(&bytes),
            Err(CapChainError::OutOfBounds { offset: 4000, .. })
        ));
        // Every truncation of a valid buffer is an error or a (shorter) success, never
        // a panic.
        let full = info_bytes(
            INFO_FLAG_PGSIZES | INFO_FLAG_CAPS,
            0x1000,
            &[
                (
                    CAP_IOVA_RANGE,
                    ranges_body(&[(0x1000, 0xffff), (0x2_0000, 0x2_ffff)]),
                ),
                (CAP_DMA_AVAIL, 7u32.to_ne_bytes().to_vec()),
            ],
        );
        for n in 0..full.len() {
            let _ = parse_iommu_info(&full[..n]);
        }
    }
}
