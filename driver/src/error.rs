//! Errors of the control plane.
//!
//! Every error says what failed and with which value: a firmware command that came
//! back with a bad status carries its opcode, `op_mod`, the PRM status and the
//! firmware's 32-bit syndrome ([`CmdError`]); a bring-up failure names the step
//! ([`BringUpError`]); a device that stopped answering says how that was detected
//! ([`Failure`]).

use std::fmt;
use std::time::Duration;

use ferroverbs_hw::BusError;

use ferroverbs_hw::control::cmd::{CmdStatus as HwCmdStatus, Opcode as HwOpcode};

/// The name of a command opcode (`MLX5_CMD_OP_*` in Linux `mlx5_ifc.h`, without the
/// prefix), if the register model knows it.
pub fn opcode_name(opcode: u16) -> Option<&'static str> {
    HwOpcode::from_value(opcode).map(|o| o.c_name().trim_start_matches("MLX5_CMD_OP_"))
}

/// A command opcode, displayed by name: `QUERY_HCA_CAP(0x100)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Opcode(pub u16);

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match opcode_name(self.0) {
            Some(n) => write!(f, "{n}({:#x})", self.0),
            None => write!(f, "opcode {:#x}", self.0),
        }
    }
}

/// The command status in the output header (`MLX5_CMD_STAT_*`, Linux `device.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmdStatus {
    /// 0x01 `INT_ERR`: firmware internal error.
    InternalError,
    /// 0x02 `BAD_OP_ERR`: unknown or unsupported opcode.
    BadOp,
    /// 0x03 `BAD_PARAM_ERR`: a field has a bad value.
    BadParam,
    /// 0x04 `BAD_SYS_STATE_ERR`: the HCA is in the wrong state for this command.
    BadSysState,
    /// 0x05 `BAD_RES_ERR`: the named resource does not exist.
    BadResource,
    /// 0x06 `RES_BUSY`: the resource is in use.
    ResourceBusy,
    /// 0x07 `NOT_READY`.
    NotReady,
    /// 0x08 `LIM_ERR`: a limit was exceeded.
    LimitsExceeded,
    /// 0x09 `BAD_RES_STATE_ERR`: the resource is in the wrong state.
    BadResState,
    /// 0x0a `IX_ERR`: bad index.
    BadIndex,
    /// 0x0f `NO_RES_ERR`: no resources left.
    NoResources,
    /// 0x10 `BAD_QP_STATE_ERR`.
    BadQpState,
    /// 0x30 `BAD_PKT_ERR`.
    BadPacket,
    /// 0x40 `BAD_SIZE_OUTS_CQES_ERR`: more outstanding CQEs than the new size.
    BadSizeOutstandingCqes,
    /// 0x50 `BAD_INP_LEN_ERR`: input length wrong for this command.
    BadInputLen,
    /// 0x51 `BAD_OUTP_LEN_ERR`: output length wrong for this command.
    BadOutputLen,
    /// Any other nonzero value.
    Other(u8),
}

impl CmdStatus {
    /// Decodes a nonzero status byte (0 is success and has no variant).
    pub fn from_raw(v: u8) -> CmdStatus {
        match v {
            0x01 => CmdStatus::InternalError,
            0x02 => CmdStatus::BadOp,
            0x03 => CmdStatus::BadParam,
            0x04 => CmdStatus::BadSysState,
            0x05 => CmdStatus::BadResource,
            0x06 => CmdStatus::ResourceBusy,
            0x07 => CmdStatus::NotReady,
            0x08 => CmdStatus::LimitsExceeded,
            0x09 => CmdStatus::BadResState,
            0x0a => CmdStatus::BadIndex,
            0x0f => CmdStatus::NoResources,
            0x10 => CmdStatus::BadQpState,
            0x30 => CmdStatus::BadPacket,
            0x40 => CmdStatus::BadSizeOutstandingCqes,
            0x50 => CmdStatus::BadInputLen,
            0x51 => CmdStatus::BadOutputLen,
            other => CmdStatus::Other(other),
        }
    }

    /// The raw status byte.
    pub fn raw(self) -> u8 {
        match self {
            CmdStatus::InternalError => 0x01,
            CmdStatus::BadOp => 0x02,
            CmdStatus::BadParam => 0x03,
            CmdStatus::BadSysState => 0x04,
            CmdStatus::BadResource => 0x05,
            CmdStatus::ResourceBusy => 0x06,
            CmdStatus::NotReady => 0x07,
            CmdStatus::LimitsExceeded => 0x08,
            CmdStatus::BadResState => 0x09,
            CmdStatus::BadIndex => 0x0a,
            CmdStatus::NoResources => 0x0f,
            CmdStatus::BadQpState => 0x10,
            CmdStatus::BadPacket => 0x30,
            CmdStatus::BadSizeOutstandingCqes => 0x40,
            CmdStatus::BadInputLen => 0x50,
            CmdStatus::BadOutputLen => 0x51,
            CmdStatus::Other(v) => v,
        }
    }

    /// The status's name (`MLX5_CMD_STAT_*` of Linux `device.h`, without the prefix).
    pub fn name(self) -> &'static str {
        match HwCmdStatus::from_value(self.raw()) {
            Some(s) => s.c_name().trim_start_matches("MLX5_CMD_STAT_"),
            // NOT_READY is Linux `cmd.c` only, not in the installed headers.
            None if self == CmdStatus::NotReady => "NOT_READY",
            None => "unknown status",
        }
    }
}

impl fmt::Display for CmdStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({:#x})", self.name(), self.raw())
    }
}

/// The delivery status of a command queue entry (`status_own >> 1`,
/// `MLX5_CMD_DELIVERY_STAT_*`): the transport-level result, before the firmware looked
/// at the command itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeliveryStatus {
    /// 0x1 `SIGNAT_ERR`: bad signature.
    Signature,
    /// 0x2 `TOK_ERR`: token mismatch.
    Token,
    /// 0x3 `BAD_BLK_NUM_ERR`: mailbox block numbers out of sequence.
    BadBlockNumber,
    /// 0x4 `OUT_PTR_ALIGN_ERR`.
    OutPtrAlign,
    /// 0x5 `IN_PTR_ALIGN_ERR`.
    InPtrAlign,
    /// 0x6 `FW_ERR`.
    Firmware,
    /// 0x7 `IN_LENGTH_ERR`.
    InLength,
    /// 0x8 `OUT_LENGTH_ERR`.
    OutLength,
    /// 0x9 `RES_FLD_NOT_CLR_ERR`: a reserved field was not zero.
    ReservedNotCleared,
    /// 0x10 `CMD_DESCR_ERR`: bad command descriptor.
    CmdDescriptor,
    /// Any other nonzero value.
    Other(u8),
}

impl DeliveryStatus {
    /// Decodes a nonzero delivery status.
    pub fn from_raw(v: u8) -> DeliveryStatus {
        match v {
            0x1 => DeliveryStatus::Signature,
            0x2 => DeliveryStatus::Token,
            0x3 => DeliveryStatus::BadBlockNumber,
            0x4 => DeliveryStatus::OutPtrAlign,
            0x5 => DeliveryStatus::InPtrAlign,
            0x6 => DeliveryStatus::Firmware,
            0x7 => DeliveryStatus::InLength,
            0x8 => DeliveryStatus::OutLength,
            0x9 => DeliveryStatus::ReservedNotCleared,
            0x10 => DeliveryStatus::CmdDescriptor,
            other => DeliveryStatus::Other(other),
        }
    }

    /// The raw value.
    pub fn raw(self) -> u8 {
        match self {
            DeliveryStatus::Signature => 0x1,
            DeliveryStatus::Token => 0x2,
            DeliveryStatus::BadBlockNumber => 0x3,
            DeliveryStatus::OutPtrAlign => 0x4,
            DeliveryStatus::InPtrAlign => 0x5,
            DeliveryStatus::Firmware => 0x6,
            DeliveryStatus::InLength => 0x7,
            DeliveryStatus::OutLength => 0x8,
            DeliveryStatus::ReservedNotCleared => 0x9,
            DeliveryStatus::CmdDescriptor => 0x10,
            DeliveryStatus::Other(v) => v,
        }
    }

    /// The PRM name.
    pub fn name(self) -> &'static str {
        match self {
            DeliveryStatus::Signature => "SIGNAT_ERR",
            DeliveryStatus::Token => "TOK_ERR",
            DeliveryStatus::BadBlockNumber => "BAD_BLK_NUM_ERR",
            DeliveryStatus::OutPtrAlign => "OUT_PTR_ALIGN_ERR",
            DeliveryStatus::InPtrAlign => "IN_PTR_ALIGN_ERR",
            DeliveryStatus::Firmware => "FW_ERR",
            DeliveryStatus::InLength => "IN_LENGTH_ERR",
            DeliveryStatus::OutLength => "OUT_LENGTH_ERR",
            DeliveryStatus::ReservedNotCleared => "RES_FLD_NOT_CLR_ERR",
            DeliveryStatus::CmdDescriptor => "CMD_DESCR_ERR",
            DeliveryStatus::Other(_) => "unknown delivery status",
        }
    }
}

impl fmt::Display for DeliveryStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({:#x})", self.name(), self.raw())
    }
}

/// A firmware command that completed with a nonzero status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{opcode} op_mod {op_mod:#x} failed: {status}, syndrome {syndrome:#010x}")]
pub struct CmdError {
    /// The command.
    pub opcode: Opcode,
    /// Its `op_mod`.
    pub op_mod: u16,
    /// The status from the output header.
    pub status: CmdStatus,
    /// The firmware's syndrome from the output header (worth quoting to the vendor).
    pub syndrome: u32,
}

/// Why the device is considered failed (the health watchdog's verdict, or a sign
/// that it fell off the bus).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// Registers read all ones: the PCI link is gone ("PCI comm error").
    #[error("the device no longer answers on the bus (registers read all ones)")]
    Vanished,
    /// The health buffer reports a syndrome (`health.synd`, ext_synd).
    #[error("firmware reported fatal health syndrome {synd:#x} (ext {ext_synd:#x})")]
    FatalSyndrome {
        /// `health.synd` (1 = FW internal error, 7 = iRISC not responding, ...).
        synd: u8,
        /// `health.ext_synd`.
        ext_synd: u16,
    },
    /// The health counter did not move for `polls` consecutive watchdog polls.
    #[error("health counter stuck at {counter:#x} for {polls} polls")]
    CounterStalled {
        /// The value it is stuck at.
        counter: u32,
        /// Consecutive polls without change.
        polls: u32,
    },
    /// `nic_interface` reads DISABLED or SW_RESET although the driver did not ask.
    #[error("NIC interface mode changed to {mode} behind the driver's back")]
    NicInterface {
        /// The mode read from `cmdq_addr_l_sz[10:8]`.
        mode: u8,
    },
}

/// The two waits for the `initializing` bit (Linux mlx5_core `mlx5_function_enable`:
/// `wait_fw_init` "pre-initializing" before `mlx5_cmd_enable` writes the command queue
/// address, and "initializing" after it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InitWait {
    /// Before the command queue address was written: firmware still booting.
    BeforeCmdqAddress,
    /// After the command queue address was written.
    AfterCmdqAddress,
}

impl fmt::Display for InitWait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InitWait::BeforeCmdqAddress => "before the command queue address was written",
            InitWait::AfterCmdqAddress => "after the command queue address was written",
        })
    }
}

/// What a wait of the driver that ended in [`Error::ClockFrozen`] was waiting for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Wait {
    /// The `initializing` bit to clear.
    FirmwareInit(InitWait),
    /// A command to complete.
    Command {
        /// The command.
        opcode: Opcode,
        /// Its `op_mod`.
        op_mod: u16,
    },
    /// The firmware to return its pages after TEARDOWN_HCA (`MANAGE_PAGES(take)`).
    PageReclaim {
        /// Pages it still held.
        pages: usize,
    },
}

impl fmt::Display for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Wait::FirmwareInit(phase) => write!(f, "firmware still initializing {phase}"),
            Wait::Command { opcode, op_mod } => {
                write!(f, "{opcode} op_mod {op_mod:#x} not completed")
            }
            Wait::PageReclaim { pages } => {
                write!(f, "firmware still holding {pages} pages after teardown")
            }
        }
    }
}

/// A step of the bring-up sequence (`docs/bring-up.md` describes each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// Checking the configuration the caller passed.
    Config,
    /// Reading the init segment: `cmdif_rev` and the command queue geometry.
    InitSegment,
    /// Waiting for the `initializing` bit to clear before the command queue address
    /// is written: the firmware is booting (after a reset or the function-level reset
    /// that opening a vfio-pci device does).
    WaitFirmwareBoot,
    /// Allocating the command queue page and writing its address.
    CmdqAddress,
    /// Waiting for the `initializing` bit to clear again after the command queue
    /// address was written.
    WaitFirmware,
    /// `ENABLE_HCA`.
    EnableHca,
    /// `QUERY_ISSI` and `SET_ISSI(1)`.
    Issi,
    /// `QUERY_PAGES(boot)` and `MANAGE_PAGES(give)`.
    BootPages,
    /// `ACCESS_REG HOST_ENDIANNESS`.
    HostEndianness,
    /// `QUERY_HCA_CAP` of the general capabilities (current and maximum).
    QueryGeneralCaps,
    /// `SET_HCA_CAP` of the general capabilities.
    SetGeneralCaps,
    /// `QUERY_HCA_CAP` / `SET_HCA_CAP` of the RoCE capabilities.
    RoceCaps,
    /// `QUERY_HCA_CAP` / `SET_HCA_CAP` of the atomic capabilities.
    AtomicCaps,
    /// `QUERY_HCA_CAP` of the on-demand paging capabilities.
    OdpCaps,
    /// `QUERY_PAGES(init)` and `MANAGE_PAGES(give)`.
    InitPages,
    /// `INIT_HCA`.
    InitHca,
    /// `MODIFY_NIC_VPORT_CONTEXT roce_en` and `QUERY_NIC_VPORT_CONTEXT`.
    EnableRoce,
    /// `SET_ROCE_ADDRESS` for the configured GIDs.
    GidTable,
    /// `ALLOC_UAR`.
    AllocUar,
    /// `CREATE_EQ` of the async EQ and arming it.
    AsyncEq,
    /// Switching commands to event mode.
    EventMode,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Step::Config => "checking the configuration",
            Step::InitSegment => "reading the init segment",
            Step::WaitFirmwareBoot => "waiting for firmware to boot",
            Step::CmdqAddress => "programming the command queue address",
            Step::WaitFirmware => "waiting for firmware initialization",
            Step::EnableHca => "ENABLE_HCA",
            Step::Issi => "negotiating the ISSI",
            Step::BootPages => "giving boot pages",
            Step::HostEndianness => "setting host endianness",
            Step::QueryGeneralCaps => "querying general capabilities",
            Step::SetGeneralCaps => "setting general capabilities",
            Step::RoceCaps => "querying/setting RoCE capabilities",
            Step::AtomicCaps => "querying/setting atomic capabilities",
            Step::OdpCaps => "querying on-demand paging capabilities",
            Step::InitPages => "giving init pages",
            Step::InitHca => "INIT_HCA",
            Step::EnableRoce => "enabling RoCE on the NIC vport",
            Step::GidTable => "programming the GID table",
            Step::AllocUar => "allocating the driver UAR",
            Step::AsyncEq => "creating the async EQ",
            Step::EventMode => "switching commands to event mode",
        };
        f.write_str(s)
    }
}

/// Bring-up failed at `step`; everything done before it has been undone.
#[derive(Debug, thiserror::Error)]
#[error("bring-up failed while {step}: {source}")]
pub struct BringUpError {
    /// The step that failed.
    pub step: Step,
    /// What went wrong.
    #[source]
    pub source: Box<Error>,
}

/// The error type of the control plane.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A command completed with a bad status.
    #[error(transparent)]
    Cmd(#[from] CmdError),
    /// The command queue refused the entry (delivery status nonzero).
    #[error("{opcode} op_mod {op_mod:#x} not delivered: {status}")]
    Delivery {
        /// The command.
        opcode: Opcode,
        /// Its `op_mod`.
        op_mod: u16,
        /// The delivery status.
        status: DeliveryStatus,
    },
    /// A command did not complete within its timeout.
    #[error("{opcode} op_mod {op_mod:#x} timed out after {waited:?}")]
    CmdTimeout {
        /// The command.
        opcode: Opcode,
        /// Its `op_mod`.
        op_mod: u16,
        /// How long the driver waited.
        waited: Duration,
    },
    /// Every command slot is held by a command that timed out.
    #[error("no free command slot: all are held by commands the device never completed")]
    NoFreeSlot,
    /// The `initializing` bit did not clear in time.
    #[error("firmware still initializing {phase} (waited {waited:?})")]
    FirmwareInitTimeout {
        /// Which of the two waits it was.
        phase: InitWait,
        /// How long the driver waited.
        waited: Duration,
    },
    /// The driver's clock did not move while it waited for the device: a clock of
    /// virtual time that nobody advances (see [`crate::clock::SteppedClock`]). Every
    /// wait of the driver ends so after a bounded number of looks, as it ends in its
    /// timeout on a clock that moves.
    #[error(
        "{wait} and the driver's clock did not move in {looks} looks: a clock of virtual \
         time must move on while the driver waits (ferroverbs::clock::SteppedClock)"
    )]
    ClockFrozen {
        /// What the driver waited for.
        wait: Wait,
        /// Looks at the device so far.
        looks: u32,
    },
    /// A forced TEARDOWN_HCA (profile FORCE_CLOSE) completed but reported that it
    /// failed (`teardown_hca_out.state` FAIL): the HCA is still initialized.
    #[error(
        "TEARDOWN_HCA FORCE_CLOSE reported state {state:#x} (FAIL): the HCA is still initialized"
    )]
    ForceTeardownFailed {
        /// `teardown_hca_out.state`.
        state: u8,
    },
    /// The device failed; every later call returns this at once.
    #[error("device failed: {0}")]
    DeviceFailed(Failure),
    /// A bus operation (DMA mapping) failed.
    #[error("bus: {0}")]
    Bus(BusError),
    /// Host memory allocation failed.
    #[error("out of memory allocating {bytes} bytes of DMA memory")]
    OutOfMemory {
        /// Requested size.
        bytes: usize,
    },
    /// The bus returned an IOVA the device cannot use for this purpose.
    #[error("{what}: IOVA {iova:#x} is not suitably aligned")]
    Misaligned {
        /// What it was for.
        what: &'static str,
        /// The IOVA.
        iova: u64,
    },
    /// The command interface revision is not 5.
    #[error("command interface revision {found}, only 5 is supported")]
    UnsupportedCmdifRev {
        /// What the init segment reports.
        found: u16,
    },
    /// The command queue geometry in the init segment is unusable.
    #[error("unusable command queue geometry: {0}")]
    BadCmdqGeometry(ferroverbs_hw::control::cmdq::GeometryError),
    /// The firmware does not support ISSI 1.
    #[error("firmware does not support ISSI 1 (supported_issi_dw0 = {supported:#x})")]
    UnsupportedIssi {
        /// The `supported_issi_dw0` bitmask.
        supported: u32,
    },
    /// The device returned output that breaks the PRM's rules.
    #[error("{opcode}: malformed output: {what}")]
    MalformedOutput {
        /// The command.
        opcode: Opcode,
        /// What was wrong.
        what: &'static str,
    },
    /// The firmware returned a page it does not hold.
    #[error("firmware returned page {iova:#x}, which it was never given")]
    BadPageReturned {
        /// The IOVA it named.
        iova: u64,
    },
    /// Teardown could not take back every firmware page.
    #[error("firmware kept {pages} pages after teardown")]
    PagesNotReturned {
        /// Pages still held.
        pages: usize,
    },
    /// An argument was out of range.
    #[error("invalid argument: {what}")]
    InvalidArgument {
        /// What was wrong.
        what: &'static str,
    },
    /// Bring-up failed.
    #[error(transparent)]
    BringUp(#[from] BringUpError),
}

impl Error {
    /// The command error, if this is one (also inside a bring-up error).
    pub fn cmd(&self) -> Option<&CmdError> {
        match self {
            Error::Cmd(c) => Some(c),
            Error::BringUp(b) => b.source.cmd(),
            _ => None,
        }
    }

    /// The failed bring-up step, if this is a bring-up error.
    pub fn step(&self) -> Option<Step> {
        match self {
            Error::BringUp(b) => Some(b.step),
            _ => None,
        }
    }
}

/// Result alias of the control plane.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use ferroverbs_hw::control::cmdq::DeliveryStatus as HwDeliveryStatus;

    #[test]
    fn every_status_of_the_register_model_has_a_variant() {
        for s in HwCmdStatus::ALL.iter().filter(|s| s.value() != 0) {
            let mine = CmdStatus::from_raw(s.value());
            assert!(!matches!(mine, CmdStatus::Other(_)), "{s:?}");
            assert_eq!(format!("MLX5_CMD_STAT_{}", mine.name()), s.c_name());
        }
        for v in 1..=0x10u8 {
            if let Some(d) = HwDeliveryStatus::from_value(v) {
                let mine = DeliveryStatus::from_raw(v);
                assert!(!matches!(mine, DeliveryStatus::Other(_)), "{d:?}");
                assert_eq!(mine.raw(), d as u8);
            }
        }
        assert_eq!(opcode_name(0x10b), Some("SET_ISSI"));
    }

    #[test]
    fn statuses_round_trip_and_have_prm_names() {
        for v in 1..=0xffu8 {
            assert_eq!(CmdStatus::from_raw(v).raw(), v);
            assert_eq!(DeliveryStatus::from_raw(v).raw(), v);
        }
        assert_eq!(CmdStatus::from_raw(3), CmdStatus::BadParam);
        assert_eq!(CmdStatus::BadSysState.to_string(), "BAD_SYS_STATE_ERR(0x4)");
        assert_eq!(DeliveryStatus::from_raw(3).name(), "BAD_BLK_NUM_ERR");
    }

    #[test]
    fn command_errors_name_everything() {
        let e = CmdError {
            opcode: Opcode(0x100),
            op_mod: 1,
            status: CmdStatus::BadParam,
            syndrome: 0x1234abcd,
        };
        assert_eq!(
            e.to_string(),
            "QUERY_HCA_CAP(0x100) op_mod 0x1 failed: BAD_PARAM_ERR(0x3), syndrome 0x1234abcd"
        );
        let b = Error::from(BringUpError {
            step: Step::InitHca,
            source: Box::new(Error::Cmd(e)),
        });
        assert_eq!(b.step(), Some(Step::InitHca));
        assert_eq!(b.cmd().map(|c| c.syndrome), Some(0x1234abcd));
        assert!(b
            .to_string()
            .starts_with("bring-up failed while INIT_HCA: QUERY_HCA_CAP"));
        assert_eq!(Opcode(0x9999).to_string(), "opcode 0x9999");
    }
}
