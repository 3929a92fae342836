//! Is this a ConnectX, and is its firmware alive? Checks made before bring-up.
//!
//! [`connectx_model`] recognises the PCI ids rdma-core's `mlx5_vfio` accepts
//! (`mlx5_hca_table` in `providers/mlx5/mlx5.c`; reference §6.1 item 7).
//! [`check_bar0`] reads the initialization segment right after BAR0 is mapped: the
//! firmware must leave the `initializing` state (iseg 0x1fc bit 31, polled every 2 ms
//! for up to 120 s) and report command interface revision 5 (iseg 0x4 `[31:16]`,
//! Linux `CMD_IF_REV`). This is Linux's "pre-initializing" wait
//! (`mlx5_function_enable` polls the bit *before* programming the command queue, so
//! real firmware clears it first); rdma-core waits only after programming the queue.
//! The driver's bring-up waits again, before and after programming the queue. It
//! takes any [`Bus`], so it runs against `MemBus` in tests and against the simulator
//! (whose firmware boots for a configurable time after reset).

use std::time::{Duration, Instant};

use ferroverbs_hw::control::iseg;
use ferroverbs_hw::Bus;

use super::error::Bar0Error;

/// The PCI vendor id of Mellanox / NVIDIA networking.
pub const MELLANOX_VENDOR_ID: u16 = 0x15b3;

/// mlx5 device ids and their names (physical functions and virtual functions).
pub const CONNECTX_DEVICE_IDS: &[(u16, &str)] = &[
    (0x1013, "ConnectX-4"),
    (0x1014, "ConnectX-4 VF"),
    (0x1015, "ConnectX-4 Lx"),
    (0x1016, "ConnectX-4 Lx VF"),
    (0x1017, "ConnectX-5"),
    (0x1018, "ConnectX-5 VF"),
    (0x1019, "ConnectX-5 Ex"),
    (0x101a, "ConnectX-5 Ex VF"),
    (0x101b, "ConnectX-6"),
    (0x101c, "ConnectX-6 VF"),
    (0x101d, "ConnectX-6 Dx"),
    (0x101e, "ConnectX family mlx5 VF"),
    (0x101f, "ConnectX-6 Lx"),
    (0x1021, "ConnectX-7"),
    (0x1023, "ConnectX-8"),
    (0xa2d6, "BlueField-2"),
    (0xa2dc, "BlueField-3"),
];

/// The model name of a ConnectX PCI id, `None` for anything else.
pub fn connectx_model(vendor: u16, device: u16) -> Option<&'static str> {
    if vendor != MELLANOX_VENDOR_ID {
        return None;
    }
    CONNECTX_DEVICE_IDS
        .iter()
        .find(|(id, _)| *id == device)
        .map(|(_, name)| *name)
}

/// How long [`check_bar0`] waits for firmware: rdma-core's `FW_PRE_INIT_TIMEOUT_MILI`.
pub const FW_READY_TIMEOUT: Duration = Duration::from_secs(120);
/// How often it polls: `FW_INIT_WAIT_MS`.
pub const FW_READY_POLL: Duration = Duration::from_millis(2);

/// The smallest BAR0 the driver accepts: the initialization segment, rounded up to
/// whole 4 KiB pages (UAR pages follow it).
pub const MIN_BAR0_LEN: usize = iseg::INIT_SEG_SIZE.div_ceil(4096) * 4096;

/// What the initialization segment says about the firmware.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FirmwareInfo {
    /// Major revision (iseg 0x0 `[15:0]`).
    pub major: u16,
    /// Minor revision (iseg 0x0 `[31:16]`).
    pub minor: u16,
    /// Sub-minor revision (iseg 0x4 `[15:0]`).
    pub subminor: u16,
    /// Command interface revision (iseg 0x4 `[31:16]`), 5.
    pub cmdif_rev: u16,
    /// How long the firmware took to become ready.
    pub waited: Duration,
}

impl std::fmt::Display for FirmwareInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.subminor)
    }
}

const INITIALIZING_BIT: u32 = 1 << 31;

/// Waits up to `timeout` (polling every `poll`) for the firmware to clear
/// `initializing`, then checks the command interface revision.
///
/// A register that reads as all ones means the function does not answer at all.
pub fn check_bar0<B: Bus + ?Sized>(
    bus: &B,
    timeout: Duration,
    poll: Duration,
) -> Result<FirmwareInfo, Bar0Error> {
    let start = Instant::now();
    let fw_rev = bus.read32(iseg::FW_REV);
    if fw_rev == u32::MAX {
        return Err(Bar0Error::NotResponding {
            offset: iseg::FW_REV,
        });
    }
    let mut register = bus.read32(iseg::INITIALIZING);
    loop {
        if register == u32::MAX {
            return Err(Bar0Error::NotResponding {
                offset: iseg::INITIALIZING,
            });
        }
        if register & INITIALIZING_BIT == 0 {
            break;
        }
        let waited = start.elapsed();
        if waited >= timeout {
            return Err(Bar0Error::FwNotReady { waited, register });
        }
        std::thread::sleep(poll.min(timeout - waited));
        register = bus.read32(iseg::INITIALIZING);
    }
    // The revisions are read once the firmware is ready, as Linux does.
    let mut fw = check_cmdif(bus)?;
    fw.waited = start.elapsed();
    Ok(fw)
}

/// Reads the firmware and command interface revisions without waiting for
/// `initializing` (for firmware that clears it only once the command queue address is
/// written): the revision must be 5 and the function must answer.
pub fn check_cmdif<B: Bus + ?Sized>(bus: &B) -> Result<FirmwareInfo, Bar0Error> {
    let fw_rev = bus.read32(iseg::FW_REV);
    if fw_rev == u32::MAX {
        return Err(Bar0Error::NotResponding {
            offset: iseg::FW_REV,
        });
    }
    let cmdif = bus.read32(iseg::CMDIF_REV_FW_SUB);
    if cmdif == u32::MAX {
        return Err(Bar0Error::NotResponding {
            offset: iseg::CMDIF_REV_FW_SUB,
        });
    }
    let cmdif_rev = (cmdif >> 16) as u16;
    if cmdif_rev != iseg::CMD_IF_REV {
        return Err(Bar0Error::CmdifRev { found: cmdif_rev });
    }
    Ok(FirmwareInfo {
        major: fw_rev as u16,
        minor: (fw_rev >> 16) as u16,
        subminor: cmdif as u16,
        cmdif_rev,
        waited: Duration::ZERO,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ferroverbs_hw::MemBus;

    use super::*;

    fn ready_bus() -> MemBus {
        let bus = MemBus::new(MIN_BAR0_LEN);
        bus.write32(iseg::FW_REV, (35 << 16) | 16); // 16.35.x
        bus.write32(iseg::CMDIF_REV_FW_SUB, (5 << 16) | 1002);
        bus.write32(iseg::INITIALIZING, 0);
        bus
    }

    #[test]
    fn ready_firmware_passes() {
        let fw = check_bar0(&ready_bus(), Duration::from_millis(10), FW_READY_POLL).unwrap();
        assert_eq!(
            (fw.major, fw.minor, fw.subminor, fw.cmdif_rev),
            (16, 35, 1002, 5)
        );
        assert_eq!(fw.to_string(), "16.35.1002");
    }

    #[test]
    fn wrong_cmdif_revision() {
        let bus = ready_bus();
        bus.write32(iseg::CMDIF_REV_FW_SUB, (4 << 16) | 7);
        assert_eq!(
            check_bar0(&bus, Duration::from_millis(10), FW_READY_POLL),
            Err(Bar0Error::CmdifRev { found: 4 })
        );
        let msg = Bar0Error::CmdifRev { found: 4 }.to_string();
        assert!(msg.contains("expected 5"), "{msg}");
    }

    #[test]
    fn firmware_that_stays_initializing_times_out() {
        let bus = ready_bus();
        // Other bits of the register do not matter, only bit 31.
        bus.write32(iseg::INITIALIZING, 0x8000_0000 | (1 << 24));
        let t = Instant::now();
        let err =
            check_bar0(&bus, Duration::from_millis(30), Duration::from_millis(2)).unwrap_err();
        assert!(t.elapsed() >= Duration::from_millis(30));
        match err {
            Bar0Error::FwNotReady { waited, register } => {
                assert!(waited >= Duration::from_millis(30));
                assert_eq!(register, 0x8100_0000);
            }
            e => panic!("{e:?}"),
        }
        // Bits other than 31 alone do not mean "initializing".
        bus.write32(iseg::INITIALIZING, 1 << 24);
        assert!(check_bar0(&bus, Duration::ZERO, FW_READY_POLL).is_ok());
    }

    #[test]
    fn firmware_that_becomes_ready_while_waiting() {
        let bus = Arc::new(ready_bus());
        bus.write32(iseg::INITIALIZING, 0x8000_0000);
        let b = Arc::clone(&bus);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            b.write32(iseg::INITIALIZING, 0);
        });
        // The bit is set when the check starts and cleared by another thread later:
        // the check must keep polling and succeed, well before its timeout. (How
        // long it waited depends on scheduling, so it is not asserted.)
        let fw = check_bar0(&*bus, Duration::from_secs(10), Duration::from_millis(1)).unwrap();
        t.join().unwrap();
        assert!(fw.waited < Duration::from_secs(10));
    }

    #[test]
    fn a_dead_function_reads_all_ones() {
        // MemBus reads outside BAR0 as all ones: a 4-byte bus has only fw_rev.
        let bus = MemBus::new(4);
        assert_eq!(
            check_bar0(&bus, Duration::ZERO, FW_READY_POLL),
            Err(Bar0Error::NotResponding {
                offset: iseg::INITIALIZING
            })
        );
        let bus = ready_bus();
        bus.write32(iseg::FW_REV, u32::MAX);
        assert_eq!(
            check_bar0(&bus, Duration::ZERO, FW_READY_POLL),
            Err(Bar0Error::NotResponding { offset: 0 })
        );
    }

    #[test]
    fn connectx_ids() {
        assert_eq!(connectx_model(0x15b3, 0x1017), Some("ConnectX-5"));
        assert_eq!(connectx_model(0x15b3, 0x101d), Some("ConnectX-6 Dx"));
        assert_eq!(connectx_model(0x15b3, 0xa2dc), Some("BlueField-3"));
        assert_eq!(connectx_model(0x15b3, 0x1003), None, "ConnectX-3 is mlx4");
        assert_eq!(connectx_model(0x8086, 0x1017), None);
        const { assert!(MIN_BAR0_LEN >= 0x2010 && MIN_BAR0_LEN.is_multiple_of(4096)) };
    }
}
