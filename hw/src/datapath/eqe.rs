//! Event queue entries (`struct mlx5_eqe`, Linux `include/linux/mlx5/device.h`),
//! their payloads, and the event types (`mlx5-controlpath.md` §5.1).
//!
//! An EQ is a ring of `nent` (a power of two) 64-byte entries. Software sets every
//! entry's `owner` to [`MLX5_EQE_OWNER_INIT_VAL`] before CREATE_EQ; the device writes
//! the entry for producer index `p` with owner `(p / nent) & 1` (0 on the first pass),
//! body first and `owner` last. The entry at consumer counter `ci` is software's when
//! [`eqe_sw_owned`] holds; a read barrier follows the check. The consumer index goes
//! back to the device through the EQ doorbell ([`crate::datapath::uar`]).

use crate::conformance::{CMember, CStruct, Header};
use zerocopy::byteorder::big_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

c_constants! {
    /// The constants of this module, for the conformance registry.
    pub(crate) const CONSTANTS;

    // enum mlx5_event (device.h).
    /// Subscribe to any event (a notifier value, equal to [`MLX5_EVENT_TYPE_COMP`]).
    Device MLX5_EVENT_TYPE_NOTIFY_ANY: u8 = 0x00;
    /// Completion event: a CQ attached to this EQ has a new CQE.
    Device MLX5_EVENT_TYPE_COMP: u8 = 0x00;
    /// Path migrated.
    Device MLX5_EVENT_TYPE_PATH_MIG: u8 = 0x01;
    /// Communication established.
    Device MLX5_EVENT_TYPE_COMM_EST: u8 = 0x02;
    /// Send queue drained.
    Device MLX5_EVENT_TYPE_SQ_DRAINED: u8 = 0x03;
    /// SRQ last WQE reached.
    Device MLX5_EVENT_TYPE_SRQ_LAST_WQE: u8 = 0x13;
    /// SRQ limit reached.
    Device MLX5_EVENT_TYPE_SRQ_RQ_LIMIT: u8 = 0x14;
    /// CQ error (overrun, access error).
    Device MLX5_EVENT_TYPE_CQ_ERROR: u8 = 0x04;
    /// Work queue catastrophic error.
    Device MLX5_EVENT_TYPE_WQ_CATAS_ERROR: u8 = 0x05;
    /// Path migration failed.
    Device MLX5_EVENT_TYPE_PATH_MIG_FAILED: u8 = 0x07;
    /// Invalid request on a work queue.
    Device MLX5_EVENT_TYPE_WQ_INVAL_REQ_ERROR: u8 = 0x10;
    /// Access error on a work queue.
    Device MLX5_EVENT_TYPE_WQ_ACCESS_ERROR: u8 = 0x11;
    /// SRQ catastrophic error.
    Device MLX5_EVENT_TYPE_SRQ_CATAS_ERROR: u8 = 0x12;
    /// DEVX object change.
    Device MLX5_EVENT_TYPE_OBJECT_CHANGE: u8 = 0x27;
    /// Internal error.
    Device MLX5_EVENT_TYPE_INTERNAL_ERROR: u8 = 0x08;
    /// Port state change (`sub_type` = `MLX5_PORT_CHANGE_SUBTYPE_*`).
    Device MLX5_EVENT_TYPE_PORT_CHANGE: u8 = 0x09;
    /// GPIO event.
    Device MLX5_EVENT_TYPE_GPIO_EVENT: u8 = 0x15;
    /// Port module event.
    Device MLX5_EVENT_TYPE_PORT_MODULE_EVENT: u8 = 0x16;
    /// Temperature warning.
    Device MLX5_EVENT_TYPE_TEMP_WARN_EVENT: u8 = 0x17;
    /// XRQ error.
    Device MLX5_EVENT_TYPE_XRQ_ERROR: u8 = 0x18;
    /// Remote configuration.
    Device MLX5_EVENT_TYPE_REMOTE_CONFIG: u8 = 0x19;
    /// General event.
    Device MLX5_EVENT_TYPE_GENERAL_EVENT: u8 = 0x22;
    /// Monitor counter.
    Device MLX5_EVENT_TYPE_MONITOR_COUNTER: u8 = 0x24;
    /// PPS event.
    Device MLX5_EVENT_TYPE_PPS_EVENT: u8 = 0x25;
    /// Doorbell/BlueFlame congestion.
    Device MLX5_EVENT_TYPE_DB_BF_CONGESTION: u8 = 0x1a;
    /// Stall event.
    Device MLX5_EVENT_TYPE_STALL_EVENT: u8 = 0x1b;
    /// Command completion: `vector` has bit i set for each completed cmdq slot i.
    Device MLX5_EVENT_TYPE_CMD: u8 = 0x0a;
    /// Page request: the firmware wants pages given or returned.
    Device MLX5_EVENT_TYPE_PAGE_REQUEST: u8 = 0x0b;
    /// ODP page fault.
    Device MLX5_EVENT_TYPE_PAGE_FAULT: u8 = 0x0c;
    /// NIC vport context change.
    Device MLX5_EVENT_TYPE_NIC_VPORT_CHANGE: u8 = 0x0d;
    /// E-switch functions changed.
    Device MLX5_EVENT_TYPE_ESW_FUNCTIONS_CHANGED: u8 = 0x0e;
    /// VHCA state change.
    Device MLX5_EVENT_TYPE_VHCA_STATE_CHANGE: u8 = 0x0f;
    /// DCT drained.
    Device MLX5_EVENT_TYPE_DCT_DRAINED: u8 = 0x1c;
    /// DCT key violation.
    Device MLX5_EVENT_TYPE_DCT_KEY_VIOLATION: u8 = 0x1d;
    /// FPGA error.
    Device MLX5_EVENT_TYPE_FPGA_ERROR: u8 = 0x20;
    /// FPGA QP error.
    Device MLX5_EVENT_TYPE_FPGA_QP_ERROR: u8 = 0x21;
    /// Device tracer.
    Device MLX5_EVENT_TYPE_DEVICE_TRACER: u8 = 0x26;
    /// One past the largest event type (the event bitmask is 256 bits).
    Device MLX5_EVENT_TYPE_MAX: u16 = 0x100;

    // Resource type of a QP/SRQ event (device.h).
    /// `mlx5_eqe_qp_srq.type`: a QP.
    Device MLX5_EVENT_QUEUE_TYPE_QP: u8 = 0;
    /// An RQ.
    Device MLX5_EVENT_QUEUE_TYPE_RQ: u8 = 1;
    /// An SQ.
    Device MLX5_EVENT_QUEUE_TYPE_SQ: u8 = 2;
    /// A DCT.
    Device MLX5_EVENT_QUEUE_TYPE_DCT: u8 = 6;

    // Port change subtypes, in `sub_type` (device.h).
    /// Port went down.
    Device MLX5_PORT_CHANGE_SUBTYPE_DOWN: u8 = 1;
    /// Port became active.
    Device MLX5_PORT_CHANGE_SUBTYPE_ACTIVE: u8 = 4;
    /// Port initialized.
    Device MLX5_PORT_CHANGE_SUBTYPE_INITIALIZED: u8 = 5;
    /// LID changed.
    Device MLX5_PORT_CHANGE_SUBTYPE_LID: u8 = 6;
    /// P_Key table changed.
    Device MLX5_PORT_CHANGE_SUBTYPE_PKEY: u8 = 7;
    /// GUID changed.
    Device MLX5_PORT_CHANGE_SUBTYPE_GUID: u8 = 8;
    /// Client re-registration.
    Device MLX5_PORT_CHANGE_SUBTYPE_CLIENT_REREG: u8 = 9;
}

/// The initial `owner` byte of every EQE (Linux `MLX5_EQE_OWNER_INIT_VAL`, defined in
/// `drivers/net/ethernet/mellanox/mlx5/core/eq.c`, not an installed header; see
/// `mlx5-controlpath.md` §5.1).
pub const MLX5_EQE_OWNER_INIT_VAL: u8 = 0x1;

/// Size of an EQE.
pub const EQE_SIZE: usize = 64;

/// Spare entries the kernel adds to every EQ (`MLX5_NUM_SPARE_EQE`, Linux
/// `include/linux/mlx5/eq.h`, a macro): the driver must publish its consumer index at
/// least every this many EQEs during a long pass.
pub const MLX5_NUM_SPARE_EQE: u32 = 0x80;

/// `ec_function` bit 15 of a page request: the request is for the embedded CPU function.
pub const PAGE_REQ_EC_FUNCTION: u16 = 1 << 15;
/// `ec_function` bit 14 of a page request: release all pages (Linux `pagealloc.c`).
pub const PAGE_REQ_RELEASE_ALL: u16 = 1 << 14;

/// Whether the EQE whose `owner` byte is `owner` belongs to software at consumer counter
/// `ci` in an EQ of `nent` entries (a power of two): `(owner & 1) == ((ci / nent) & 1)`.
/// Unlike the CQ rule there is no invalid opcode: the initial owner value 1 is what
/// keeps fresh entries from matching on the first pass.
#[inline]
pub const fn eqe_sw_owned(owner: u8, ci: u32, nent: u32) -> bool {
    ((owner & 1) != 0) == ((ci & nent) != 0)
}

/// The owner bit the device writes into the entry for producer index `p`.
#[inline]
pub const fn eqe_hw_owner_bit(p: u32, nent: u32) -> u8 {
    ((p & nent) != 0) as u8
}

/// Event types as a closed set (`enum mlx5_event`; [`MLX5_EVENT_TYPE_NOTIFY_ANY`] is a
/// notifier value, not a type, and is absent).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EventType {
    /// [`MLX5_EVENT_TYPE_COMP`].
    Comp = MLX5_EVENT_TYPE_COMP,
    /// [`MLX5_EVENT_TYPE_PATH_MIG`].
    PathMig = MLX5_EVENT_TYPE_PATH_MIG,
    /// [`MLX5_EVENT_TYPE_COMM_EST`].
    CommEst = MLX5_EVENT_TYPE_COMM_EST,
    /// [`MLX5_EVENT_TYPE_SQ_DRAINED`].
    SqDrained = MLX5_EVENT_TYPE_SQ_DRAINED,
    /// [`MLX5_EVENT_TYPE_CQ_ERROR`].
    CqError = MLX5_EVENT_TYPE_CQ_ERROR,
    /// [`MLX5_EVENT_TYPE_WQ_CATAS_ERROR`].
    WqCatasError = MLX5_EVENT_TYPE_WQ_CATAS_ERROR,
    /// [`MLX5_EVENT_TYPE_PATH_MIG_FAILED`].
    PathMigFailed = MLX5_EVENT_TYPE_PATH_MIG_FAILED,
    /// [`MLX5_EVENT_TYPE_INTERNAL_ERROR`].
    InternalError = MLX5_EVENT_TYPE_INTERNAL_ERROR,
    /// [`MLX5_EVENT_TYPE_PORT_CHANGE`].
    PortChange = MLX5_EVENT_TYPE_PORT_CHANGE,
    /// [`MLX5_EVENT_TYPE_CMD`].
    Cmd = MLX5_EVENT_TYPE_CMD,
    /// [`MLX5_EVENT_TYPE_PAGE_REQUEST`].
    PageRequest = MLX5_EVENT_TYPE_PAGE_REQUEST,
    /// [`MLX5_EVENT_TYPE_PAGE_FAULT`].
    PageFault = MLX5_EVENT_TYPE_PAGE_FAULT,
    /// [`MLX5_EVENT_TYPE_NIC_VPORT_CHANGE`].
    NicVportChange = MLX5_EVENT_TYPE_NIC_VPORT_CHANGE,
    /// [`MLX5_EVENT_TYPE_ESW_FUNCTIONS_CHANGED`].
    EswFunctionsChanged = MLX5_EVENT_TYPE_ESW_FUNCTIONS_CHANGED,
    /// [`MLX5_EVENT_TYPE_VHCA_STATE_CHANGE`].
    VhcaStateChange = MLX5_EVENT_TYPE_VHCA_STATE_CHANGE,
    /// [`MLX5_EVENT_TYPE_WQ_INVAL_REQ_ERROR`].
    WqInvalReqError = MLX5_EVENT_TYPE_WQ_INVAL_REQ_ERROR,
    /// [`MLX5_EVENT_TYPE_WQ_ACCESS_ERROR`].
    WqAccessError = MLX5_EVENT_TYPE_WQ_ACCESS_ERROR,
    /// [`MLX5_EVENT_TYPE_SRQ_CATAS_ERROR`].
    SrqCatasError = MLX5_EVENT_TYPE_SRQ_CATAS_ERROR,
    /// [`MLX5_EVENT_TYPE_SRQ_LAST_WQE`].
    SrqLastWqe = MLX5_EVENT_TYPE_SRQ_LAST_WQE,
    /// [`MLX5_EVENT_TYPE_SRQ_RQ_LIMIT`].
    SrqRqLimit = MLX5_EVENT_TYPE_SRQ_RQ_LIMIT,
    /// [`MLX5_EVENT_TYPE_GPIO_EVENT`].
    GpioEvent = MLX5_EVENT_TYPE_GPIO_EVENT,
    /// [`MLX5_EVENT_TYPE_PORT_MODULE_EVENT`].
    PortModuleEvent = MLX5_EVENT_TYPE_PORT_MODULE_EVENT,
    /// [`MLX5_EVENT_TYPE_TEMP_WARN_EVENT`].
    TempWarnEvent = MLX5_EVENT_TYPE_TEMP_WARN_EVENT,
    /// [`MLX5_EVENT_TYPE_XRQ_ERROR`].
    XrqError = MLX5_EVENT_TYPE_XRQ_ERROR,
    /// [`MLX5_EVENT_TYPE_REMOTE_CONFIG`].
    RemoteConfig = MLX5_EVENT_TYPE_REMOTE_CONFIG,
    /// [`MLX5_EVENT_TYPE_DB_BF_CONGESTION`].
    DbBfCongestion = MLX5_EVENT_TYPE_DB_BF_CONGESTION,
    /// [`MLX5_EVENT_TYPE_STALL_EVENT`].
    StallEvent = MLX5_EVENT_TYPE_STALL_EVENT,
    /// [`MLX5_EVENT_TYPE_DCT_DRAINED`].
    DctDrained = MLX5_EVENT_TYPE_DCT_DRAINED,
    /// [`MLX5_EVENT_TYPE_DCT_KEY_VIOLATION`].
    DctKeyViolation = MLX5_EVENT_TYPE_DCT_KEY_VIOLATION,
    /// [`MLX5_EVENT_TYPE_FPGA_ERROR`].
    FpgaError = MLX5_EVENT_TYPE_FPGA_ERROR,
    /// [`MLX5_EVENT_TYPE_FPGA_QP_ERROR`].
    FpgaQpError = MLX5_EVENT_TYPE_FPGA_QP_ERROR,
    /// [`MLX5_EVENT_TYPE_GENERAL_EVENT`].
    GeneralEvent = MLX5_EVENT_TYPE_GENERAL_EVENT,
    /// [`MLX5_EVENT_TYPE_MONITOR_COUNTER`].
    MonitorCounter = MLX5_EVENT_TYPE_MONITOR_COUNTER,
    /// [`MLX5_EVENT_TYPE_PPS_EVENT`].
    PpsEvent = MLX5_EVENT_TYPE_PPS_EVENT,
    /// [`MLX5_EVENT_TYPE_DEVICE_TRACER`].
    DeviceTracer = MLX5_EVENT_TYPE_DEVICE_TRACER,
    /// [`MLX5_EVENT_TYPE_OBJECT_CHANGE`].
    ObjectChange = MLX5_EVENT_TYPE_OBJECT_CHANGE,
}

impl EventType {
    /// Every event type.
    pub const ALL: [EventType; 36] = [
        Self::Comp,
        Self::PathMig,
        Self::CommEst,
        Self::SqDrained,
        Self::CqError,
        Self::WqCatasError,
        Self::PathMigFailed,
        Self::InternalError,
        Self::PortChange,
        Self::Cmd,
        Self::PageRequest,
        Self::PageFault,
        Self::NicVportChange,
        Self::EswFunctionsChanged,
        Self::VhcaStateChange,
        Self::WqInvalReqError,
        Self::WqAccessError,
        Self::SrqCatasError,
        Self::SrqLastWqe,
        Self::SrqRqLimit,
        Self::GpioEvent,
        Self::PortModuleEvent,
        Self::TempWarnEvent,
        Self::XrqError,
        Self::RemoteConfig,
        Self::DbBfCongestion,
        Self::StallEvent,
        Self::DctDrained,
        Self::DctKeyViolation,
        Self::FpgaError,
        Self::FpgaQpError,
        Self::GeneralEvent,
        Self::MonitorCounter,
        Self::PpsEvent,
        Self::DeviceTracer,
        Self::ObjectChange,
    ];

    /// Decodes an EQE `type` byte; `None` for an undefined type.
    pub fn from_u8(v: u8) -> Option<Self> {
        Self::ALL.iter().copied().find(|t| *t as u8 == v)
    }

    /// The bit of this type in the first 64-bit word of `create_eq_in.event_bitmask`
    /// (the bit number is the type value; every type is below 64).
    pub fn mask_bit(self) -> u64 {
        // Every type is below 0x40, so the shift never overflows.
        1u64 << (self as u8)
    }

    /// Whether the payload is a [`EqeQpSrq`] (a QP, RQ, SQ, DCT or SRQ affiliated event).
    pub fn is_qp_srq_event(self) -> bool {
        matches!(
            self,
            Self::PathMig
                | Self::CommEst
                | Self::SqDrained
                | Self::WqCatasError
                | Self::PathMigFailed
                | Self::WqInvalReqError
                | Self::WqAccessError
                | Self::SrqCatasError
                | Self::SrqLastWqe
                | Self::SrqRqLimit
        )
    }
}

/// Event queue entry (`struct mlx5_eqe`, 64 bytes, packed; Linux `device.h`).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct Eqe {
    /// Reserved.
    pub rsvd0: u8,
    /// Event type (`MLX5_EVENT_TYPE_*`).
    pub r#type: u8,
    /// Reserved.
    pub rsvd1: u8,
    /// Event subtype (e.g. `MLX5_PORT_CHANGE_SUBTYPE_*`).
    pub sub_type: u8,
    /// Reserved.
    pub rsvd2: [U32; 7],
    /// The event-specific payload (`union ev_data`, 28 bytes).
    pub data: [u8; 28],
    /// Reserved.
    pub rsvd3: U16,
    /// Signature.
    pub signature: u8,
    /// Bit 0: the owner bit.
    pub owner: u8,
}
checked_view!(Eqe, "mlx5_eqe");

impl Eqe {
    /// The event type byte.
    pub fn event_type(&self) -> u8 {
        self.r#type
    }

    /// The event type decoded; `None` for an undefined type.
    pub fn event(&self) -> Option<EventType> {
        EventType::from_u8(self.r#type)
    }

    /// The owner bit.
    pub fn owner_bit(&self) -> u8 {
        self.owner & 1
    }

    /// The payload as a command completion.
    pub fn cmd(&self) -> &EqeCmd {
        zerocopy::transmute_ref!(&self.data)
    }

    /// The payload as a page request.
    pub fn page_req(&self) -> &EqePageReq {
        zerocopy::transmute_ref!(&self.data)
    }

    /// The payload as a completion event.
    pub fn comp(&self) -> &EqeComp {
        zerocopy::transmute_ref!(&self.data)
    }

    /// The payload as a QP/SRQ affiliated event.
    pub fn qp_srq(&self) -> &EqeQpSrq {
        zerocopy::transmute_ref!(&self.data)
    }

    /// The payload as a CQ error (its first 12 bytes).
    pub fn cq_err(&self) -> &EqeCqErr {
        // The payload is 28 bytes, longer than the 12-byte struct: a prefix view.
        match EqeCqErr::ref_from(&self.data) {
            Ok(v) => v,
            Err(_) => unreachable_view(),
        }
    }

    /// The payload as a port state change (its first 9 bytes).
    pub fn port(&self) -> &EqePortState {
        match EqePortState::ref_from(&self.data) {
            Ok(v) => v,
            Err(_) => unreachable_view(),
        }
    }

    /// Sets the payload from any payload structure (zero-padded to 28 bytes).
    pub fn set_data(&mut self, payload: &[u8]) {
        let n = payload.len().min(self.data.len());
        self.data = [0; 28];
        self.data[..n].copy_from_slice(&payload[..n]);
    }

    /// The device side of the ownership protocol: writes bytes 0..63 of this EQE into
    /// `entry`, then a release fence, then the `owner` byte (see
    /// [`Cqe64::write_body_then_owner`](crate::datapath::cqe::Cqe64::write_body_then_owner)).
    pub fn write_body_then_owner(&self, entry: &mut [u8]) -> Result<(), crate::TooShort> {
        super::write_owner_last(entry, self.as_bytes(), Self::C_NAME)
    }
}

// The payload views above cannot fail: the sizes are checked at compile time here.
const _: () = assert!(EqeCqErr::SIZE <= 28 && EqePortState::SIZE <= 28);

#[cold]
fn unreachable_view() -> ! {
    unreachable!("payload structs fit in the 28-byte EQE data (checked at compile time)")
}

/// Command completion payload (`struct mlx5_eqe_cmd`, 28 bytes).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct EqeCmd {
    /// Bit i set: command queue slot i completed.
    pub vector: U32,
    /// Reserved.
    pub rsvd: [U32; 6],
}
checked_view!(EqeCmd, "mlx5_eqe_cmd");

impl EqeCmd {
    /// The bitmask of completed command slots.
    pub fn vector(&self) -> u32 {
        self.vector.get()
    }
}

/// Page request payload (`struct mlx5_eqe_page_req`, 28 bytes).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct EqePageReq {
    /// Bit 15 embedded-CPU function, bit 14 release all.
    pub ec_function: U16,
    /// Function ID.
    pub func_id: U16,
    /// Pages wanted (> 0: give; < 0: reclaim), a signed 32-bit count.
    pub num_pages: U32,
    /// Reserved.
    pub rsvd1: [U32; 5],
}
checked_view!(EqePageReq, "mlx5_eqe_page_req");

impl EqePageReq {
    /// The function ID.
    pub fn func_id(&self) -> u16 {
        self.func_id.get()
    }

    /// Whether the request is for the embedded CPU function.
    pub fn ec_function(&self) -> bool {
        self.ec_function.get() & PAGE_REQ_EC_FUNCTION != 0
    }

    /// Whether the firmware asks for all pages back.
    pub fn release_all(&self) -> bool {
        self.ec_function.get() & PAGE_REQ_RELEASE_ALL != 0
    }

    /// Pages requested: positive to give, negative to reclaim.
    pub fn num_pages(&self) -> i32 {
        self.num_pages.get() as i32
    }
}

/// Completion event payload (`struct mlx5_eqe_comp`, 28 bytes).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct EqeComp {
    /// Reserved.
    pub reserved: [U32; 6],
    /// Bits 23..0: the CQ number.
    pub cqn: U32,
}
checked_view!(EqeComp, "mlx5_eqe_comp");

impl EqeComp {
    /// The CQ number.
    pub fn cqn(&self) -> u32 {
        self.cqn.get() & 0x00ff_ffff
    }
}

/// QP/SRQ affiliated event payload (`struct mlx5_eqe_qp_srq`, 28 bytes).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct EqeQpSrq {
    /// Reserved.
    pub reserved1: [U32; 5],
    /// Resource type (`MLX5_EVENT_QUEUE_TYPE_*`).
    pub r#type: u8,
    /// Reserved.
    pub reserved2: [u8; 3],
    /// Bits 23..0: QP/RQ/SQ/DCT/SRQ number.
    pub qp_srq_n: U32,
}
checked_view!(EqeQpSrq, "mlx5_eqe_qp_srq");

impl EqeQpSrq {
    /// The resource type.
    pub fn resource_type(&self) -> u8 {
        self.r#type
    }

    /// The resource number.
    pub fn qp_srq_n(&self) -> u32 {
        self.qp_srq_n.get() & 0x00ff_ffff
    }
}

/// CQ error payload (`struct mlx5_eqe_cq_err`, 12 bytes).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct EqeCqErr {
    /// Bits 23..0: the CQ number.
    pub cqn: U32,
    /// Reserved.
    pub reserved1: [u8; 7],
    /// Error syndrome (1 = overrun, 2 = access violation).
    pub syndrome: u8,
}
checked_view!(EqeCqErr, "mlx5_eqe_cq_err");

impl EqeCqErr {
    /// The CQ number.
    pub fn cqn(&self) -> u32 {
        self.cqn.get() & 0x00ff_ffff
    }
}

/// Port state change payload (`struct mlx5_eqe_port_state`, 9 bytes).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct EqePortState {
    /// Reserved.
    pub reserved0: [u8; 8],
    /// Bits 7..4: the port number.
    pub port: u8,
}
checked_view!(EqePortState, "mlx5_eqe_port_state");

impl EqePortState {
    /// The port number, `(port >> 4) & 0xf`.
    pub fn port_num(&self) -> u8 {
        (self.port >> 4) & 0xf
    }
}

/// A member whose C name is a Rust keyword (`type`): measured like [`c_member!`].
macro_rules! c_member_type {
    ($ty:ty) => {
        CMember {
            name: "type",
            offset: ::core::mem::offset_of!($ty, r#type),
            size: 1,
        }
    };
}

/// The C structures of this module, for the conformance registry.
pub(crate) const C_STRUCTS: &[CStruct] = &[
    CStruct {
        header: Header::Device,
        name: "mlx5_eqe",
        size: Eqe::SIZE,
        members: &[
            c_member!(Eqe, rsvd0),
            c_member_type!(Eqe),
            c_member!(Eqe, rsvd1),
            c_member!(Eqe, sub_type),
            c_member!(Eqe, rsvd2),
            c_member!(Eqe, data),
            c_member!(Eqe, rsvd3),
            c_member!(Eqe, signature),
            c_member!(Eqe, owner),
        ],
    },
    CStruct {
        header: Header::Device,
        name: "mlx5_eqe_cmd",
        size: EqeCmd::SIZE,
        members: &[c_member!(EqeCmd, vector), c_member!(EqeCmd, rsvd)],
    },
    CStruct {
        header: Header::Device,
        name: "mlx5_eqe_page_req",
        size: EqePageReq::SIZE,
        members: &[
            c_member!(EqePageReq, ec_function),
            c_member!(EqePageReq, func_id),
            c_member!(EqePageReq, num_pages),
            c_member!(EqePageReq, rsvd1),
        ],
    },
    CStruct {
        header: Header::Device,
        name: "mlx5_eqe_comp",
        size: EqeComp::SIZE,
        members: &[c_member!(EqeComp, reserved), c_member!(EqeComp, cqn)],
    },
    CStruct {
        header: Header::Device,
        name: "mlx5_eqe_qp_srq",
        size: EqeQpSrq::SIZE,
        members: &[
            c_member!(EqeQpSrq, reserved1),
            c_member_type!(EqeQpSrq),
            c_member!(EqeQpSrq, reserved2),
            c_member!(EqeQpSrq, qp_srq_n),
        ],
    },
    CStruct {
        header: Header::Device,
        name: "mlx5_eqe_cq_err",
        size: EqeCqErr::SIZE,
        members: &[
            c_member!(EqeCqErr, cqn),
            c_member!(EqeCqErr, reserved1),
            c_member!(EqeCqErr, syndrome),
        ],
    },
    CStruct {
        header: Header::Device,
        name: "mlx5_eqe_port_state",
        size: EqePortState::SIZE,
        members: &[
            c_member!(EqePortState, reserved0),
            c_member!(EqePortState, port),
        ],
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_offsets() {
        assert_eq!(Eqe::SIZE, 64);
        assert_eq!(core::mem::offset_of!(Eqe, data), 0x20);
        assert_eq!(core::mem::offset_of!(Eqe, owner), 0x3f);
        assert_eq!(EqeCmd::SIZE, 28);
        assert_eq!(EqePageReq::SIZE, 28);
        assert_eq!(EqeComp::SIZE, 28);
        assert_eq!(core::mem::offset_of!(EqeComp, cqn), 0x18);
        assert_eq!(EqeQpSrq::SIZE, 28);
        assert_eq!(core::mem::offset_of!(EqeQpSrq, r#type), 0x14);
        assert_eq!(EqeCqErr::SIZE, 12);
        assert_eq!(core::mem::offset_of!(EqeCqErr, syndrome), 0x0b);
        assert_eq!(EqePortState::SIZE, 9);
    }

    #[test]
    fn payloads_decode() {
        let mut b = [0u8; 64];
        b[1] = MLX5_EVENT_TYPE_PAGE_REQUEST;
        b[0x20..0x22].copy_from_slice(&0xc000u16.to_be_bytes());
        b[0x22..0x24].copy_from_slice(&3u16.to_be_bytes());
        b[0x24..0x28].copy_from_slice(&(-12i32).to_be_bytes());
        b[63] = 1;
        let e = Eqe::ref_from(&b).unwrap();
        assert_eq!(e.event(), Some(EventType::PageRequest));
        assert_eq!(e.owner_bit(), 1);
        let p = e.page_req();
        assert!(p.ec_function() && p.release_all());
        assert_eq!((p.func_id(), p.num_pages()), (3, -12));

        let mut e = Eqe::zeroed();
        e.r#type = MLX5_EVENT_TYPE_CMD;
        let mut cmd = EqeCmd::zeroed();
        cmd.vector = U32::new(1 << 31 | 1);
        e.set_data(cmd.as_bytes());
        assert_eq!(e.cmd().vector(), 0x8000_0001);
        assert_eq!(&e.as_bytes()[0x20..0x24], &[0x80, 0, 0, 1]);

        let mut comp = EqeComp::zeroed();
        comp.cqn = U32::new(0xff00_0123);
        e.set_data(comp.as_bytes());
        assert_eq!(e.comp().cqn(), 0x123);
        assert_eq!(&e.as_bytes()[0x38..0x3c], &[0xff, 0, 0x01, 0x23]);

        let mut d = [0u8; 28];
        d[0x14] = MLX5_EVENT_QUEUE_TYPE_SQ;
        d[0x18..0x1c].copy_from_slice(&0x00ab_cdefu32.to_be_bytes());
        e.set_data(&d);
        assert_eq!(e.qp_srq().resource_type(), MLX5_EVENT_QUEUE_TYPE_SQ);
        assert_eq!(e.qp_srq().qp_srq_n(), 0xabcdef);

        let mut d = [0u8; 28];
        d[0..4].copy_from_slice(&0x0000_0777u32.to_be_bytes());
        d[0x0b] = 1;
        d[8] = 0x20;
        e.set_data(&d);
        assert_eq!((e.cq_err().cqn(), e.cq_err().syndrome), (0x777, 1));
        assert_eq!(e.port().port_num(), 2);
    }

    #[test]
    fn ownership_rule() {
        let nent = 8;
        // Fresh entries (owner 1) are not software's on the first pass...
        assert!(!eqe_sw_owned(MLX5_EQE_OWNER_INIT_VAL, 0, nent));
        // ...the device's first-pass write (owner 0) is.
        assert!(eqe_sw_owned(eqe_hw_owner_bit(3, nent), 3, nent));
        // On the second pass the stale owner 0 no longer matches.
        assert!(!eqe_sw_owned(0, 8 + 3, nent));
        assert!(eqe_sw_owned(eqe_hw_owner_bit(11, nent), 11, nent));
        let mut entry = [0u8; 64];
        let mut e = Eqe::zeroed();
        e.owner = 1;
        e.write_body_then_owner(&mut entry).unwrap();
        assert_eq!(entry[63], 1);
        assert!(e.write_body_then_owner(&mut [0u8; 10]).is_err());
    }

    #[test]
    fn event_types() {
        for t in EventType::ALL {
            assert_eq!(EventType::from_u8(t as u8), Some(t));
        }
        assert_eq!(EventType::from_u8(0x06), None);
        assert_eq!(EventType::Cmd.mask_bit(), 1 << 10);
        assert!(EventType::SrqRqLimit.is_qp_srq_event());
        assert!(!EventType::Comp.is_qp_srq_event());
    }
}
