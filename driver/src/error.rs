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

/// The name of a command opcode (`MLX5_CMD_OP_*` in Linux `mlx5_ifc.h`), if known.
pub fn opcode_name(opcode: u16) -> Option<&'static str> {
    Some(match opcode {
        0x100 => "QUERY_HCA_CAP",
        0x101 => "QUERY_ADAPTER",
        0x102 => "INIT_HCA",
        0x103 => "TEARDOWN_HCA",
        0x104 => "ENABLE_HCA",
        0x105 => "DISABLE_HCA",
        0x107 => "QUERY_PAGES",
        0x108 => "MANAGE_PAGES",
        0x109 => "SET_HCA_CAP",
        0x10a => "QUERY_ISSI",
        0x10b => "SET_ISSI",
        0x10d => "SET_DRIVER_VERSION",
        0x200 => "CREATE_MKEY",
        0x201 => "QUERY_MKEY",
        0x202 => "DESTROY_MKEY",
        0x203 => "QUERY_SPECIAL_CONTEXTS",
        0x301 => "CREATE_EQ",
        0x302 => "DESTROY_EQ",
        0x303 => "QUERY_EQ",
        0x304 => "GEN_EQE",
        0x400 => "CREATE_CQ",
        0x401 => "DESTROY_CQ",
        0x402 => "QUERY_CQ",
        0x403 => "MODIFY_CQ",
        0x500 => "CREATE_QP",
        0x501 => "DESTROY_QP",
        0x502 => "RST2INIT_QP",
        0x503 => "INIT2RTR_QP",
        0x504 => "RTR2RTS_QP",
        0x505 => "RTS2RTS_QP",
        0x506 => "SQERR2RTS_QP",
        0x507 => "2ERR_QP",
        0x50a => "2RST_QP",
        0x50b => "QUERY_QP",
        0x50c => "SQD_RTS_QP",
        0x50e => "INIT2INIT_QP",
        0x700 => "CREATE_SRQ",
        0x701 => "DESTROY_SRQ",
        0x702 => "QUERY_SRQ",
        0x703 => "ARM_RQ",
        0x750 => "QUERY_VPORT_STATE",
        0x751 => "MODIFY_VPORT_STATE",
        0x754 => "QUERY_NIC_VPORT_CONTEXT",
        0x755 => "MODIFY_NIC_VPORT_CONTEXT",
        0x760 => "QUERY_ROCE_ADDRESS",
        0x761 => "SET_ROCE_ADDRESS",
        0x762 => "QUERY_HCA_VPORT_CONTEXT",
        0x764 => "QUERY_HCA_VPORT_GID",
        0x771 => "ALLOC_Q_COUNTER",
        0x800 => "ALLOC_PD",
        0x801 => "DEALLOC_PD",
        0x802 => "ALLOC_UAR",
        0x803 => "DEALLOC_UAR",
        0x805 => "ACCESS_REG",
        0x806 => "ATTACH_TO_MCG",
        0x807 => "DETACH_FROM_MCG",
        0x80d => "NOP",
        0x80e => "ALLOC_XRCD",
        0x80f => "DEALLOC_XRCD",
        0x816 => "ALLOC_TRANSPORT_DOMAIN",
        0x817 => "DEALLOC_TRANSPORT_DOMAIN",
        0xa00 => "CREATE_GENERAL_OBJECT",
        0xa04 => "CREATE_UCTX",
        0xa06 => "DESTROY_UCTX",
        0xa08 => "CREATE_UMEM",
        0xa0a => "DESTROY_UMEM",
        _ => return None,
    })
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

    /// The PRM name of the status.
    pub fn name(self) -> &'static str {
        match self {
            CmdStatus::InternalError => "INT_ERR",
            CmdStatus::BadOp => "BAD_OP_ERR",
            CmdStatus::BadParam => "BAD_PARAM_ERR",
            CmdStatus::BadSysState => "BAD_SYS_STATE_ERR",
            CmdStatus::BadResource => "BAD_RES_ERR",
            CmdStatus::ResourceBusy => "RES_BUSY",
            CmdStatus::NotReady => "NOT_READY",
            CmdStatus::LimitsExceeded => "LIM_ERR",
            CmdStatus::BadResState => "BAD_RES_STATE_ERR",
            CmdStatus::BadIndex => "IX_ERR",
            CmdStatus::NoResources => "NO_RES_ERR",
            CmdStatus::BadQpState => "BAD_QP_STATE_ERR",
            CmdStatus::BadPacket => "BAD_PKT_ERR",
            CmdStatus::BadSizeOutstandingCqes => "BAD_SIZE_OUTS_CQES_ERR",
            CmdStatus::BadInputLen => "BAD_INP_LEN_ERR",
            CmdStatus::BadOutputLen => "BAD_OUTP_LEN_ERR",
            CmdStatus::Other(_) => "unknown status",
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

/// A step of the bring-up sequence (`docs/bring-up.md` describes each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// Checking the configuration the caller passed.
    Config,
    /// Reading the init segment: `cmdif_rev` and the command queue geometry.
    InitSegment,
    /// Allocating the command queue page and writing its address.
    CmdqAddress,
    /// Waiting for the `initializing` bit to clear.
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
            Step::CmdqAddress => "programming the command queue address",
            Step::WaitFirmware => "waiting for firmware initialization",
            Step::EnableHca => "ENABLE_HCA",
            Step::Issi => "negotiating the ISSI",
            Step::BootPages => "giving boot pages",
            Step::HostEndianness => "setting host endianness",
            Step::QueryGeneralCaps => "querying general capabilities",
            Step::SetGeneralCaps => "setting general capabilities",
            Step::RoceCaps => "querying/setting RoCE capabilities",
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
    #[error("firmware still initializing after {waited:?}")]
    FirmwareInitTimeout {
        /// How long the driver waited.
        waited: Duration,
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
    #[error("command queue geometry 2^{log_size} entries of 2^{log_stride} bytes is unusable")]
    BadCmdqGeometry {
        /// `log_cmdq_size`.
        log_size: u8,
        /// `log_cmdq_stride`.
        log_stride: u8,
    },
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
