//! Commands: the generic input and output headers, opcodes and status codes.
//!
//! Every command input starts with the 16-byte header [`mbox_in`] (opcode, uid,
//! op_mod) and every output with [`mbox_out`] (status, syndrome). The opcodes are the
//! `MLX5_CMD_OP_*` values of `mlx5_ifc.h` ([`Opcode`]); the command's own result is a
//! `MLX5_CMD_STAT_*` value of `device.h` ([`CmdStatus`]) plus a firmware-specific
//! 32-bit syndrome worth logging.
//!
//! The helpers here read the headers of bytes that came from the other side of the bus
//! and return [`TooShort`] instead of panicking when there are not enough of them.

use crate::field::{Field, Layout, TooShort};
use crate::prm_layout;

prm_layout! {
    /// The generic command input header (`mlx5_ifc_mbox_in_bits` of newer Linux; the
    /// same three fields start every `*_in` layout of the 6.1 header).
    pub mod mbox_in = "mbox_in" (0x80) {
        /// Command opcode ([`Opcode`](super::Opcode)).
        opcode: 0x0, 0x10;
        /// DEVX user context id; 0 for a driver that creates no user context.
        uid: 0x10, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
    }
}

prm_layout! {
    /// The generic command output header (`mlx5_ifc_mbox_out_bits` of newer Linux; the
    /// same two fields start every `*_out` layout of the 6.1 header).
    pub mod mbox_out = "mbox_out" (0x80) {
        /// Command status ([`CmdStatus`](super::CmdStatus)).
        status: 0x0, 8;
        /// Firmware syndrome; meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
    }
}

/// The layouts of this module.
pub const LAYOUTS: &[&Layout] = &[&mbox_in::LAYOUT, &mbox_out::LAYOUT];

header_enum! {
    /// Command opcodes (`MLX5_CMD_OP_*`, `mlx5_ifc.h`): every command of the reference's
    /// bring-up, verbs-object and vport sets.
    pub enum Opcode: u16 in Mlx5Ifc {
        /// Query a capability page.
        QueryHcaCap = 0x100 => "MLX5_CMD_OP_QUERY_HCA_CAP",
        /// Query adapter information.
        QueryAdapter = 0x101 => "MLX5_CMD_OP_QUERY_ADAPTER",
        /// Initialize the HCA (after caps and init pages).
        InitHca = 0x102 => "MLX5_CMD_OP_INIT_HCA",
        /// Tear the HCA down.
        TeardownHca = 0x103 => "MLX5_CMD_OP_TEARDOWN_HCA",
        /// Enable the function (first command after the queue is up).
        EnableHca = 0x104 => "MLX5_CMD_OP_ENABLE_HCA",
        /// Disable the function.
        DisableHca = 0x105 => "MLX5_CMD_OP_DISABLE_HCA",
        /// Ask how many pages firmware needs.
        QueryPages = 0x107 => "MLX5_CMD_OP_QUERY_PAGES",
        /// Give pages to firmware or take them back.
        ManagePages = 0x108 => "MLX5_CMD_OP_MANAGE_PAGES",
        /// Set a capability page.
        SetHcaCap = 0x109 => "MLX5_CMD_OP_SET_HCA_CAP",
        /// Query the supported interface step sequence ids.
        QueryIssi = 0x10a => "MLX5_CMD_OP_QUERY_ISSI",
        /// Select the interface step sequence id.
        SetIssi = 0x10b => "MLX5_CMD_OP_SET_ISSI",
        /// Tell firmware the driver's version string.
        SetDriverVersion = 0x10d => "MLX5_CMD_OP_SET_DRIVER_VERSION",
        /// Create a memory key.
        CreateMkey = 0x200 => "MLX5_CMD_OP_CREATE_MKEY",
        /// Query a memory key.
        QueryMkey = 0x201 => "MLX5_CMD_OP_QUERY_MKEY",
        /// Destroy a memory key.
        DestroyMkey = 0x202 => "MLX5_CMD_OP_DESTROY_MKEY",
        /// Query the special keys (reserved lkey, null mkey, ...).
        QuerySpecialContexts = 0x203 => "MLX5_CMD_OP_QUERY_SPECIAL_CONTEXTS",
        /// Create an event queue.
        CreateEq = 0x301 => "MLX5_CMD_OP_CREATE_EQ",
        /// Destroy an event queue.
        DestroyEq = 0x302 => "MLX5_CMD_OP_DESTROY_EQ",
        /// Query an event queue.
        QueryEq = 0x303 => "MLX5_CMD_OP_QUERY_EQ",
        /// Generate an event queue entry.
        GenEqe = 0x304 => "MLX5_CMD_OP_GEN_EQE",
        /// Create a completion queue.
        CreateCq = 0x400 => "MLX5_CMD_OP_CREATE_CQ",
        /// Destroy a completion queue.
        DestroyCq = 0x401 => "MLX5_CMD_OP_DESTROY_CQ",
        /// Query a completion queue.
        QueryCq = 0x402 => "MLX5_CMD_OP_QUERY_CQ",
        /// Modify a completion queue.
        ModifyCq = 0x403 => "MLX5_CMD_OP_MODIFY_CQ",
        /// Create a queue pair.
        CreateQp = 0x500 => "MLX5_CMD_OP_CREATE_QP",
        /// Destroy a queue pair.
        DestroyQp = 0x501 => "MLX5_CMD_OP_DESTROY_QP",
        /// RESET to INIT.
        Rst2InitQp = 0x502 => "MLX5_CMD_OP_RST2INIT_QP",
        /// INIT to RTR.
        Init2RtrQp = 0x503 => "MLX5_CMD_OP_INIT2RTR_QP",
        /// RTR to RTS.
        Rtr2RtsQp = 0x504 => "MLX5_CMD_OP_RTR2RTS_QP",
        /// RTS to RTS.
        Rts2RtsQp = 0x505 => "MLX5_CMD_OP_RTS2RTS_QP",
        /// SQ error to RTS.
        Sqerr2RtsQp = 0x506 => "MLX5_CMD_OP_SQERR2RTS_QP",
        /// Any state to ERR.
        Qp2ErrQp = 0x507 => "MLX5_CMD_OP_2ERR_QP",
        /// Any state to RESET.
        Qp2RstQp = 0x50a => "MLX5_CMD_OP_2RST_QP",
        /// Query a queue pair.
        QueryQp = 0x50b => "MLX5_CMD_OP_QUERY_QP",
        /// SQ drained to RTS.
        SqdRtsQp = 0x50c => "MLX5_CMD_OP_SQD_RTS_QP",
        /// INIT to INIT.
        Init2InitQp = 0x50e => "MLX5_CMD_OP_INIT2INIT_QP",
        /// Create a shared receive queue.
        CreateSrq = 0x700 => "MLX5_CMD_OP_CREATE_SRQ",
        /// Destroy a shared receive queue.
        DestroySrq = 0x701 => "MLX5_CMD_OP_DESTROY_SRQ",
        /// Query a shared receive queue.
        QuerySrq = 0x702 => "MLX5_CMD_OP_QUERY_SRQ",
        /// Arm the limit watermark of an SRQ.
        ArmRq = 0x703 => "MLX5_CMD_OP_ARM_RQ",
        /// Query the link state of a vport.
        QueryVportState = 0x750 => "MLX5_CMD_OP_QUERY_VPORT_STATE",
        /// Query the NIC vport context (MAC, MTU, ...).
        QueryNicVportContext = 0x754 => "MLX5_CMD_OP_QUERY_NIC_VPORT_CONTEXT",
        /// Modify the NIC vport context (RoCE enable, loopback, MTU, ...).
        ModifyNicVportContext = 0x755 => "MLX5_CMD_OP_MODIFY_NIC_VPORT_CONTEXT",
        /// Read a GID table entry.
        QueryRoceAddress = 0x760 => "MLX5_CMD_OP_QUERY_ROCE_ADDRESS",
        /// Write a GID table entry.
        SetRoceAddress = 0x761 => "MLX5_CMD_OP_SET_ROCE_ADDRESS",
        /// Query the HCA vport context.
        QueryHcaVportContext = 0x762 => "MLX5_CMD_OP_QUERY_HCA_VPORT_CONTEXT",
        /// Query the HCA vport GID table.
        QueryHcaVportGid = 0x764 => "MLX5_CMD_OP_QUERY_HCA_VPORT_GID",
        /// Read a vport's traffic counters.
        QueryVportCounter = 0x770 => "MLX5_CMD_OP_QUERY_VPORT_COUNTER",
        /// Allocate a queue counter set.
        AllocQCounter = 0x771 => "MLX5_CMD_OP_ALLOC_Q_COUNTER",
        /// Free a queue counter set.
        DeallocQCounter = 0x772 => "MLX5_CMD_OP_DEALLOC_Q_COUNTER",
        /// Read a queue counter set.
        QueryQCounter = 0x773 => "MLX5_CMD_OP_QUERY_Q_COUNTER",
        /// Allocate a protection domain.
        AllocPd = 0x800 => "MLX5_CMD_OP_ALLOC_PD",
        /// Free a protection domain.
        DeallocPd = 0x801 => "MLX5_CMD_OP_DEALLOC_PD",
        /// Allocate a UAR page.
        AllocUar = 0x802 => "MLX5_CMD_OP_ALLOC_UAR",
        /// Free a UAR page.
        DeallocUar = 0x803 => "MLX5_CMD_OP_DEALLOC_UAR",
        /// Read or write an access register.
        AccessReg = 0x805 => "MLX5_CMD_OP_ACCESS_REG",
        /// Attach a QP to a multicast group.
        AttachToMcg = 0x806 => "MLX5_CMD_OP_ATTACH_TO_MCG",
        /// Detach a QP from a multicast group.
        DetachFromMcg = 0x807 => "MLX5_CMD_OP_DETACH_FROM_MCG",
        /// No operation.
        Nop = 0x80d => "MLX5_CMD_OP_NOP",
        /// Allocate an XRC domain.
        AllocXrcd = 0x80e => "MLX5_CMD_OP_ALLOC_XRCD",
        /// Free an XRC domain.
        DeallocXrcd = 0x80f => "MLX5_CMD_OP_DEALLOC_XRCD",
        /// Allocate a transport domain.
        AllocTransportDomain = 0x816 => "MLX5_CMD_OP_ALLOC_TRANSPORT_DOMAIN",
        /// Free a transport domain.
        DeallocTransportDomain = 0x817 => "MLX5_CMD_OP_DEALLOC_TRANSPORT_DOMAIN",
        /// Create a general object.
        CreateGeneralObject = 0xa00 => "MLX5_CMD_OP_CREATE_GENERAL_OBJECT",
        /// Create a DEVX user context.
        CreateUctx = 0xa04 => "MLX5_CMD_OP_CREATE_UCTX",
        /// Destroy a DEVX user context.
        DestroyUctx = 0xa06 => "MLX5_CMD_OP_DESTROY_UCTX",
        /// Register user memory (UMEM).
        CreateUmem = 0xa08 => "MLX5_CMD_OP_CREATE_UMEM",
        /// Deregister user memory.
        DestroyUmem = 0xa0a => "MLX5_CMD_OP_DESTROY_UMEM",
    }
}

header_enum! {
    /// Command status codes (`MLX5_CMD_STAT_*`, `device.h`): byte 0 of every output.
    pub enum CmdStatus: u8 in Device {
        /// Success.
        Ok = 0x0 => "MLX5_CMD_STAT_OK",
        /// Internal error.
        IntErr = 0x1 => "MLX5_CMD_STAT_INT_ERR",
        /// Unknown or unsupported opcode or op_mod.
        BadOpErr = 0x2 => "MLX5_CMD_STAT_BAD_OP_ERR",
        /// A parameter is invalid.
        BadParamErr = 0x3 => "MLX5_CMD_STAT_BAD_PARAM_ERR",
        /// The HCA is in the wrong state for the command.
        BadSysStateErr = 0x4 => "MLX5_CMD_STAT_BAD_SYS_STATE_ERR",
        /// The resource does not exist.
        BadResErr = 0x5 => "MLX5_CMD_STAT_BAD_RES_ERR",
        /// The resource is busy (still referenced).
        ResBusy = 0x6 => "MLX5_CMD_STAT_RES_BUSY",
        /// A limit is exceeded.
        LimErr = 0x8 => "MLX5_CMD_STAT_LIM_ERR",
        /// The resource is in the wrong state.
        BadResStateErr = 0x9 => "MLX5_CMD_STAT_BAD_RES_STATE_ERR",
        /// Bad index.
        IxErr = 0xa => "MLX5_CMD_STAT_IX_ERR",
        /// No resources left.
        NoResErr = 0xf => "MLX5_CMD_STAT_NO_RES_ERR",
        /// The QP is in the wrong state for the transition.
        BadQpStateErr = 0x10 => "MLX5_CMD_STAT_BAD_QP_STATE_ERR",
        /// Bad packet.
        BadPktErr = 0x30 => "MLX5_CMD_STAT_BAD_PKT_ERR",
        /// Bad size of outstanding CQEs.
        BadSizeOutsCqesErr = 0x40 => "MLX5_CMD_STAT_BAD_SIZE_OUTS_CQES_ERR",
        /// Input length does not fit the command.
        BadInpLenErr = 0x50 => "MLX5_CMD_STAT_BAD_INP_LEN_ERR",
        /// Output length does not fit the command.
        BadOutpLenErr = 0x51 => "MLX5_CMD_STAT_BAD_OUTP_LEN_ERR",
    }
}

impl Opcode {
    /// The input and output layouts of the command, for the commands this crate
    /// describes; `None` for the others.
    pub const fn layouts(self) -> Option<(&'static Layout, &'static Layout)> {
        use super::{caps, counters as cnt, cq, eq, hca, mkey, pages, qp, reg, roce, srq};
        use super::{uar_pd_td as u, vport};
        Some(match self {
            Opcode::QueryHcaCap => (
                &caps::query_hca_cap_in::LAYOUT,
                &caps::query_hca_cap_out::LAYOUT,
            ),
            Opcode::SetHcaCap => (
                &caps::set_hca_cap_in::LAYOUT,
                &caps::set_hca_cap_out::LAYOUT,
            ),
            Opcode::InitHca => (&hca::init_hca_in::LAYOUT, &hca::init_hca_out::LAYOUT),
            Opcode::TeardownHca => (
                &hca::teardown_hca_in::LAYOUT,
                &hca::teardown_hca_out::LAYOUT,
            ),
            Opcode::EnableHca => (&hca::enable_hca_in::LAYOUT, &hca::enable_hca_out::LAYOUT),
            Opcode::DisableHca => (&hca::disable_hca_in::LAYOUT, &hca::disable_hca_out::LAYOUT),
            Opcode::QueryIssi => (&hca::query_issi_in::LAYOUT, &hca::query_issi_out::LAYOUT),
            Opcode::SetIssi => (&hca::set_issi_in::LAYOUT, &hca::set_issi_out::LAYOUT),
            Opcode::QueryPages => (
                &pages::query_pages_in::LAYOUT,
                &pages::query_pages_out::LAYOUT,
            ),
            Opcode::ManagePages => (
                &pages::manage_pages_in::LAYOUT,
                &pages::manage_pages_out::LAYOUT,
            ),
            Opcode::AccessReg => (
                &reg::access_register_in::LAYOUT,
                &reg::access_register_out::LAYOUT,
            ),
            Opcode::AllocUar => (&u::alloc_uar_in::LAYOUT, &u::alloc_uar_out::LAYOUT),
            Opcode::DeallocUar => (&u::dealloc_uar_in::LAYOUT, &u::dealloc_uar_out::LAYOUT),
            Opcode::AllocPd => (&u::alloc_pd_in::LAYOUT, &u::alloc_pd_out::LAYOUT),
            Opcode::DeallocPd => (&u::dealloc_pd_in::LAYOUT, &u::dealloc_pd_out::LAYOUT),
            Opcode::AllocTransportDomain => (
                &u::alloc_transport_domain_in::LAYOUT,
                &u::alloc_transport_domain_out::LAYOUT,
            ),
            Opcode::DeallocTransportDomain => (
                &u::dealloc_transport_domain_in::LAYOUT,
                &u::dealloc_transport_domain_out::LAYOUT,
            ),
            Opcode::CreateMkey => (
                &mkey::create_mkey_in::LAYOUT,
                &mkey::create_mkey_out::LAYOUT,
            ),
            Opcode::DestroyMkey => (
                &mkey::destroy_mkey_in::LAYOUT,
                &mkey::destroy_mkey_out::LAYOUT,
            ),
            Opcode::QueryMkey => (&mkey::query_mkey_in::LAYOUT, &mkey::query_mkey_out::LAYOUT),
            Opcode::CreateEq => (&eq::create_eq_in::LAYOUT, &eq::create_eq_out::LAYOUT),
            Opcode::DestroyEq => (&eq::destroy_eq_in::LAYOUT, &eq::destroy_eq_out::LAYOUT),
            Opcode::QueryEq => (&eq::query_eq_in::LAYOUT, &eq::query_eq_out::LAYOUT),
            Opcode::CreateCq => (&cq::create_cq_in::LAYOUT, &cq::create_cq_out::LAYOUT),
            Opcode::DestroyCq => (&cq::destroy_cq_in::LAYOUT, &cq::destroy_cq_out::LAYOUT),
            Opcode::QueryCq => (&cq::query_cq_in::LAYOUT, &cq::query_cq_out::LAYOUT),
            Opcode::ModifyCq => (&cq::modify_cq_in::LAYOUT, &cq::modify_cq_out::LAYOUT),
            Opcode::CreateQp => (&qp::create_qp_in::LAYOUT, &qp::create_qp_out::LAYOUT),
            Opcode::DestroyQp => (&qp::destroy_qp_in::LAYOUT, &qp::destroy_qp_out::LAYOUT),
            Opcode::QueryQp => (&qp::query_qp_in::LAYOUT, &qp::query_qp_out::LAYOUT),
            Opcode::CreateSrq => (&srq::create_srq_in::LAYOUT, &srq::create_srq_out::LAYOUT),
            Opcode::DestroySrq => (&srq::destroy_srq_in::LAYOUT, &srq::destroy_srq_out::LAYOUT),
            Opcode::QuerySrq => (&srq::query_srq_in::LAYOUT, &srq::query_srq_out::LAYOUT),
            Opcode::ArmRq => (&srq::arm_rq_in::LAYOUT, &srq::arm_rq_out::LAYOUT),
            Opcode::QueryVportState => (
                &vport::query_vport_state_in::LAYOUT,
                &vport::query_vport_state_out::LAYOUT,
            ),
            Opcode::QueryNicVportContext => (
                &vport::query_nic_vport_context_in::LAYOUT,
                &vport::query_nic_vport_context_out::LAYOUT,
            ),
            Opcode::ModifyNicVportContext => (
                &vport::modify_nic_vport_context_in::LAYOUT,
                &vport::modify_nic_vport_context_out::LAYOUT,
            ),
            Opcode::AllocQCounter => (
                &cnt::alloc_q_counter_in::LAYOUT,
                &cnt::alloc_q_counter_out::LAYOUT,
            ),
            Opcode::DeallocQCounter => (
                &cnt::dealloc_q_counter_in::LAYOUT,
                &cnt::dealloc_q_counter_out::LAYOUT,
            ),
            Opcode::QueryQCounter => (
                &cnt::query_q_counter_in::LAYOUT,
                &cnt::query_q_counter_out::LAYOUT,
            ),
            Opcode::QueryVportCounter => (
                &cnt::query_vport_counter_in::LAYOUT,
                &cnt::query_vport_counter_out::LAYOUT,
            ),
            Opcode::SetRoceAddress => (
                &roce::set_roce_address_in::LAYOUT,
                &roce::set_roce_address_out::LAYOUT,
            ),
            Opcode::QueryRoceAddress => (
                &roce::query_roce_address_in::LAYOUT,
                &roce::query_roce_address_out::LAYOUT,
            ),
            op => match qp::QpTransition::from_opcode(op) {
                Some(t) => (t.in_layout(), t.out_layout()),
                None => return None,
            },
        })
    }

    /// The input layout (its fixed part; page lists and register data follow it).
    pub const fn in_layout(self) -> Option<&'static Layout> {
        match self.layouts() {
            Some((i, _)) => Some(i),
            None => None,
        }
    }

    /// The output layout (its fixed part).
    pub const fn out_layout(self) -> Option<&'static Layout> {
        match self.layouts() {
            Some((_, o)) => Some(o),
            None => None,
        }
    }
}

/// A zeroed input of the fixed size of `opcode`'s input layout (16 bytes for a command
/// this crate does not describe) with its header written.
pub fn command_input(opcode: Opcode, op_mod: u16) -> Vec<u8> {
    let len = opcode.in_layout().map_or(mbox_in::SIZE, Layout::size);
    new_input(opcode, op_mod, len)
}

/// Reads a header field, refusing a buffer too short to hold it.
fn get_checked(layout: &'static str, field: Field, buf: &[u8]) -> Result<u64, TooShort> {
    if field.fits(buf.len()) {
        Ok(field.get(buf))
    } else {
        Err(TooShort {
            layout,
            len: buf.len(),
            need: field.end_byte(),
        })
    }
}

/// Writes a header field, refusing a buffer too short to hold it.
fn set_checked(
    layout: &'static str,
    field: Field,
    buf: &mut [u8],
    value: u64,
) -> Result<(), TooShort> {
    if field.fits(buf.len()) {
        field.set(buf, value);
        Ok(())
    } else {
        Err(TooShort {
            layout,
            len: buf.len(),
            need: field.end_byte(),
        })
    }
}

/// The raw opcode of a command input (it may be one [`Opcode`] does not know).
pub fn opcode(input: &[u8]) -> Result<u16, TooShort> {
    get_checked("mbox_in", mbox_in::opcode, input).map(|v| v as u16)
}

/// The uid of a command input.
pub fn uid(input: &[u8]) -> Result<u16, TooShort> {
    get_checked("mbox_in", mbox_in::uid, input).map(|v| v as u16)
}

/// The op_mod of a command input.
pub fn op_mod(input: &[u8]) -> Result<u16, TooShort> {
    get_checked("mbox_in", mbox_in::op_mod, input).map(|v| v as u16)
}

/// The raw status byte of a command output.
pub fn status(output: &[u8]) -> Result<u8, TooShort> {
    get_checked("mbox_out", mbox_out::status, output).map(|v| v as u8)
}

/// The syndrome of a command output.
pub fn syndrome(output: &[u8]) -> Result<u32, TooShort> {
    get_checked("mbox_out", mbox_out::syndrome, output).map(|v| v as u32)
}

/// Writes the generic input header (uid 0).
pub fn set_input_header(input: &mut [u8], opcode: Opcode, op_mod: u16) -> Result<(), TooShort> {
    set_checked("mbox_in", mbox_in::opcode, input, u64::from(opcode.value()))?;
    set_checked("mbox_in", mbox_in::uid, input, 0)?;
    set_checked("mbox_in", mbox_in::op_mod, input, u64::from(op_mod))
}

/// Writes the generic output header.
pub fn set_output_header(
    output: &mut [u8],
    status: CmdStatus,
    syndrome: u32,
) -> Result<(), TooShort> {
    set_checked(
        "mbox_out",
        mbox_out::status,
        output,
        u64::from(status.value()),
    )?;
    set_checked("mbox_out", mbox_out::syndrome, output, u64::from(syndrome))
}

/// A zeroed command input of `len` bytes (at least the 16-byte header) with its header
/// written.
pub fn new_input(opcode: Opcode, op_mod: u16, len: usize) -> Vec<u8> {
    let mut input = vec![0u8; len.max(mbox_in::SIZE)];
    // The buffer holds the header, so this cannot fail.
    let _ = set_input_header(&mut input, opcode, op_mod);
    input
}

/// The generic input header of a command, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InHeader {
    /// Raw opcode; see [`InHeader::opcode`].
    pub opcode: u16,
    /// DEVX user context id.
    pub uid: u16,
    /// Command-specific modifier.
    pub op_mod: u16,
}

impl InHeader {
    /// Decodes the header of `input`.
    pub fn parse(input: &[u8]) -> Result<Self, TooShort> {
        Ok(InHeader {
            opcode: opcode(input)?,
            uid: uid(input)?,
            op_mod: op_mod(input)?,
        })
    }

    /// The opcode, or the raw value when it is not one of [`Opcode`].
    pub fn opcode(&self) -> Result<Opcode, u16> {
        Opcode::try_from(self.opcode)
    }
}

/// The generic output header of a command, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutHeader {
    /// Raw status byte; see [`OutHeader::status`].
    pub status: u8,
    /// Firmware syndrome.
    pub syndrome: u32,
}

impl OutHeader {
    /// Decodes the header of `output`.
    pub fn parse(output: &[u8]) -> Result<Self, TooShort> {
        Ok(OutHeader {
            status: status(output)?,
            syndrome: syndrome(output)?,
        })
    }

    /// The status, or the raw value when the header does not define it.
    pub fn status(&self) -> Result<CmdStatus, u8> {
        CmdStatus::try_from(self.status)
    }

    /// Whether the command succeeded.
    pub fn is_ok(&self) -> bool {
        self.status == CmdStatus::Ok.value()
    }
}

/// Entry `index` of a flexible array (`pas[]`, `klm_pas_mtt[]`, ...) of `elem_bits`-bit
/// entries that starts where `array` starts; `None` when the offset overflows.
pub const fn flex_entry(array: Field, elem_bits: u32, index: usize) -> Option<Field> {
    if index > u32::MAX as usize {
        return None;
    }
    match elem_bits.checked_mul(index as u32) {
        Some(off) => match array.bit.checked_add(off) {
            Some(bit) => Some(Field::new(array.name, bit, elem_bits)),
            None => None,
        },
        None => None,
    }
}

/// Length in bytes of a command whose fixed part is `layout` followed by `count`
/// entries of a 64-bit flexible array (PAS, MTT), or `None` on overflow.
pub const fn len_with_flex64(layout: &Layout, count: usize) -> Option<usize> {
    match count.checked_mul(8) {
        Some(n) => layout.size().checked_add(n),
        None => None,
    }
}

/// The `count` 64-bit entries of the flexible array `array` (a page address list) in
/// `buf`, after checking that `buf` holds all of them. `count` usually comes from the
/// other side of the bus, so nothing is read or allocated before the check.
pub fn flex64_entries<'a>(
    buf: &'a [u8],
    array: Field,
    count: usize,
) -> Result<impl ExactSizeIterator<Item = u64> + 'a, TooShort> {
    let start = array.byte_offset();
    let end = count.checked_mul(8).and_then(|n| n.checked_add(start));
    match end.and_then(|end| buf.get(start..end)) {
        Some(bytes) => Ok(bytes
            .chunks_exact(8)
            .map(|c| u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))),
        None => Err(TooShort {
            layout: array.name,
            len: buf.len(),
            need: end.unwrap_or(usize::MAX),
        }),
    }
}

/// Writes `values` as consecutive big-endian 64-bit entries of the flexible array
/// `array`, refusing a buffer too short for all of them.
pub fn set_flex64(buf: &mut [u8], array: Field, values: &[u64]) -> Result<(), TooShort> {
    let start = array.byte_offset();
    let len = buf.len();
    let end = values
        .len()
        .checked_mul(8)
        .and_then(|n| n.checked_add(start));
    match end.and_then(|end| buf.get_mut(start..end)) {
        Some(bytes) => {
            for (c, v) in bytes.chunks_exact_mut(8).zip(values) {
                c.copy_from_slice(&v.to_be_bytes());
            }
            Ok(())
        }
        None => Err(TooShort {
            layout: array.name,
            len,
            need: end.unwrap_or(usize::MAX),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_bit_placement() {
        let input = new_input(Opcode::QueryHcaCap, 0x0001, 16);
        assert_eq!(
            input,
            [0x01, 0x00, 0, 0, 0, 0, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(opcode(&input), Ok(0x100));
        assert_eq!(op_mod(&input), Ok(1));
        assert_eq!(uid(&input), Ok(0));
        let h = InHeader::parse(&input).unwrap();
        assert_eq!(h.opcode(), Ok(Opcode::QueryHcaCap));

        let mut out = [0u8; 16];
        set_output_header(&mut out, CmdStatus::BadParamErr, 0xdead_beef).unwrap();
        assert_eq!(&out[..8], &[0x03, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef]);
        let h = OutHeader::parse(&out).unwrap();
        assert_eq!(h.status(), Ok(CmdStatus::BadParamErr));
        assert_eq!(h.syndrome, 0xdead_beef);
        assert!(!h.is_ok());
    }

    #[test]
    fn short_buffers_are_errors_not_panics() {
        assert_eq!(
            opcode(&[1]),
            Err(TooShort {
                layout: "mbox_in",
                len: 1,
                need: 2
            })
        );
        assert!(op_mod(&[0; 7]).is_err());
        assert_eq!(op_mod(&[0, 0, 0, 0, 0, 0, 0x12, 0x34]), Ok(0x1234));
        assert!(status(&[]).is_err());
        assert!(syndrome(&[0; 7]).is_err());
        // A 12-byte output (e.g. 6.1's enable_hca_out) still has a full header.
        assert!(OutHeader::parse(&[0; 12]).is_ok());
        assert!(set_input_header(&mut [0; 7], Opcode::Nop, 0).is_err());
        assert!(set_output_header(&mut [0; 4], CmdStatus::Ok, 0).is_err());
        assert_eq!(new_input(Opcode::Nop, 0, 0).len(), 16);
    }

    #[test]
    fn opcode_and_status_decoding() {
        assert_eq!(Opcode::from_value(0x50e), Some(Opcode::Init2InitQp));
        assert_eq!(Opcode::try_from(0x999), Err(0x999));
        assert_eq!(Opcode::Qp2ErrQp.c_name(), "MLX5_CMD_OP_2ERR_QP");
        assert_eq!(
            Opcode::SetRoceAddress.to_string(),
            "MLX5_CMD_OP_SET_ROCE_ADDRESS"
        );
        assert_eq!(CmdStatus::from_value(0x51), Some(CmdStatus::BadOutpLenErr));
        assert_eq!(CmdStatus::from_value(0x07), None);
        for op in Opcode::ALL {
            assert_eq!(Opcode::from_value(op.value()), Some(*op));
        }
        assert_eq!(Opcode::CONSTANTS.len(), Opcode::ALL.len());
    }

    #[test]
    fn generic_headers_coincide_with_every_command() {
        // The mbox_in/mbox_out deviation: their fields are where every 6.1 command has
        // its own opcode/uid/op_mod and status/syndrome (uid is absent from some).
        let mut n = 0;
        for op in Opcode::ALL {
            let Some((i, o)) = op.layouts() else { continue };
            n += 1;
            assert!(i.name.ends_with("_in") && o.name.ends_with("_out"), "{op}");
            for f in mbox_in::FIELDS {
                match i.field(f.name) {
                    Some(g) => assert_eq!(g, *f, "{}.{}", i.name, f.name),
                    None => assert_eq!(f.name, "uid", "{} lacks {}", i.name, f.name),
                }
            }
            for f in mbox_out::FIELDS {
                assert_eq!(o.field(f.name), Some(*f), "{}.{}", o.name, f.name);
            }
            assert!(i.size() >= 16 && o.size() >= 12, "{op}");
            assert_eq!(command_input(*op, 3).len(), i.size());
        }
        assert_eq!(n, 52);
        assert_eq!(command_input(Opcode::Nop, 0).len(), 16);
        assert_eq!(
            Opcode::CreateQp.in_layout().map(|l| l.name),
            Some("create_qp_in")
        );
        assert_eq!(
            Opcode::Qp2RstQp.out_layout().map(|l| l.name),
            Some("qp_2rst_out")
        );
        assert_eq!(Opcode::GenEqe.layouts().map(|l| l.0.name), None);
    }

    #[test]
    fn flex_entries() {
        let pas = Field::new("pas", 0x880, 0);
        let e = flex_entry(pas, 64, 2).unwrap();
        assert_eq!(e.byte_offset(), 0x110 + 16);
        assert_eq!(e.width, 64);
        assert_eq!(flex_entry(pas, 64, usize::MAX), None);
        assert_eq!(flex_entry(pas, 64, 1 << 30), None);

        let mut buf = vec![0u8; 0x110 + 16];
        set_flex64(&mut buf, pas, &[0x1000, 0xdead_b000]).unwrap();
        assert_eq!(&buf[0x110..0x118], &[0, 0, 0, 0, 0, 0, 0x10, 0]);
        let got: Vec<u64> = flex64_entries(&buf, pas, 2).unwrap().collect();
        assert_eq!(got, [0x1000, 0xdead_b000]);
        assert_eq!(e.get(&[buf.as_slice(), &[0u8; 8]].concat()), 0);
        assert!(flex64_entries(&buf, pas, 3).is_err());
        assert!(flex64_entries(&buf, pas, usize::MAX).is_err());
        assert!(set_flex64(&mut buf, pas, &[1, 2, 3]).is_err());
        assert_eq!(flex64_entries(&buf, pas, 0).unwrap().len(), 0);
    }
}
