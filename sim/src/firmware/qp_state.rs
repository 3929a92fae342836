//! The QP state machine of the firmware: which modify command moves a QP from which
//! state to which, for each service type, and which optional parameters each
//! transition accepts.
//!
//! Sources: the transition table of Linux `drivers/infiniband/hw/mlx5/qpc.c` (`optab`,
//! reproduced in `mlx5-controlpath.md` §4.7) and the per-transition optional-parameter
//! masks of `drivers/infiniband/hw/mlx5/qp.c` (`opt_mask`), restated as facts.

/// QP states as the qpc `state` field encodes them (`MLX5_QPC_STATE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Reset (0).
    Rst,
    /// Initialized (1).
    Init,
    /// Ready to receive (2).
    Rtr,
    /// Ready to send (3).
    Rts,
    /// Send queue error (4).
    Sqer,
    /// Send queue drained (7 in the ifc enum).
    Sqd,
    /// Error (6).
    Err,
}

impl QpState {
    /// The qpc `state` encoding (`MLX5_QPC_STATE_*`).
    pub fn encoding(self) -> u8 {
        match self {
            QpState::Rst => 0,
            QpState::Init => 1,
            QpState::Rtr => 2,
            QpState::Rts => 3,
            QpState::Sqer => 4,
            QpState::Sqd => 7,
            QpState::Err => 6,
        }
    }
}

/// The transport service types the simulator models (qpc `st`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ServiceType {
    /// Reliable connected (0x0).
    Rc,
    /// Unreliable connected (0x1).
    Uc,
    /// Unreliable datagram (0x2).
    Ud,
}

impl ServiceType {
    /// Decodes qpc `st`; `None` for types the simulator does not model (XRC, DC,
    /// QP0/QP1, raw packet, UMR).
    pub fn from_st(st: u64) -> Option<Self> {
        match st {
            0x0 => Some(ServiceType::Rc),
            0x1 => Some(ServiceType::Uc),
            0x2 => Some(ServiceType::Ud),
            _ => None,
        }
    }

    /// The qpc `st` encoding.
    pub fn st(self) -> u8 {
        match self {
            ServiceType::Rc => 0,
            ServiceType::Uc => 1,
            ServiceType::Ud => 2,
        }
    }
}

/// A QP modify command (the opcode names the transition).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transition {
    /// RST2INIT_QP (0x502).
    Rst2Init,
    /// INIT2INIT_QP (0x50e).
    Init2Init,
    /// INIT2RTR_QP (0x503).
    Init2Rtr,
    /// RTR2RTS_QP (0x504).
    Rtr2Rts,
    /// RTS2RTS_QP (0x505).
    Rts2Rts,
    /// SQERR2RTS_QP (0x506).
    Sqerr2Rts,
    /// SQD_RTS_QP (0x50c).
    SqdRts,
    /// 2ERR_QP (0x507).
    ToErr,
    /// 2RST_QP (0x50a).
    ToRst,
}

/// `MLX5_QP_OPTPAR_*` bits of `opt_param_mask`.
pub mod optpar {
    /// Alternate address path.
    pub const ALT_ADDR_PATH: u32 = 1 << 0;
    /// Remote read enable.
    pub const RRE: u32 = 1 << 1;
    /// Remote atomic enable.
    pub const RAE: u32 = 1 << 2;
    /// Remote write enable.
    pub const RWE: u32 = 1 << 3;
    /// P_Key index.
    pub const PKEY_INDEX: u32 = 1 << 4;
    /// Q_Key.
    pub const Q_KEY: u32 = 1 << 5;
    /// RNR timeout.
    pub const RNR_TIMEOUT: u32 = 1 << 6;
    /// Primary address path.
    pub const PRIMARY_ADDR_PATH: u32 = 1 << 7;
    /// Outstanding RDMA read/atomic as requester.
    pub const SRA_MAX: u32 = 1 << 8;
    /// Outstanding RDMA read/atomic as responder.
    pub const RRA_MAX: u32 = 1 << 9;
    /// Path migration state.
    pub const PM_STATE: u32 = 1 << 10;
    /// Retry count.
    pub const RETRY_COUNT: u32 = 1 << 12;
    /// RNR retry.
    pub const RNR_RETRY: u32 = 1 << 13;
    /// ACK timeout.
    pub const ACK_TIMEOUT: u32 = 1 << 14;
    /// LAG TX port affinity.
    pub const LAG_TX_AFF: u32 = 1 << 15;
    /// Primary port.
    pub const PRI_PORT: u32 = 1 << 16;
    /// Offload type.
    pub const OFFLOAD_TYPE: u32 = 1 << 24;
    /// Counter set id.
    pub const COUNTER_SET_ID: u32 = 1 << 25;
}

impl Transition {
    /// The state a QP must be in for this command, or `None` if any state will do.
    pub fn accepts(self, from: QpState) -> bool {
        use QpState::*;
        match self {
            Transition::Rst2Init => from == Rst,
            Transition::Init2Init => from == Init,
            Transition::Init2Rtr => from == Init,
            Transition::Rtr2Rts => from == Rtr,
            Transition::Rts2Rts => from == Rts,
            Transition::Sqerr2Rts => from == Sqer,
            Transition::SqdRts => from == Sqd,
            Transition::ToErr | Transition::ToRst => true,
        }
    }

    /// The state after the command.
    pub fn target(self) -> QpState {
        match self {
            Transition::Rst2Init | Transition::Init2Init => QpState::Init,
            Transition::Init2Rtr => QpState::Rtr,
            Transition::Rtr2Rts
            | Transition::Rts2Rts
            | Transition::Sqerr2Rts
            | Transition::SqdRts => QpState::Rts,
            Transition::ToErr => QpState::Err,
            Transition::ToRst => QpState::Rst,
        }
    }

    /// Whether the command carries `opt_param_mask` and a qpc.
    pub fn carries_qpc(self) -> bool {
        !matches!(self, Transition::ToErr | Transition::ToRst)
    }

    /// Whether the transition exists for this service type at all (SQ error recovery
    /// is for the unreliable types; an RC QP goes to ERR instead).
    pub fn valid_for(self, st: ServiceType) -> bool {
        !(self == Transition::Sqerr2Rts && st == ServiceType::Rc)
    }

    /// The optional parameters (`opt_param_mask` bits) this transition accepts for
    /// the service type (Linux `opt_mask`).
    pub fn allowed_optional(self, st: ServiceType) -> u32 {
        use optpar::*;
        use ServiceType::*;
        match (self, st) {
            (Transition::Rst2Init, _) => 0,
            (Transition::Init2Init, Rc) => RRE | RAE | RWE | PKEY_INDEX | PRI_PORT | LAG_TX_AFF,
            (Transition::Init2Init, Uc) => RWE | PKEY_INDEX | PRI_PORT | LAG_TX_AFF,
            (Transition::Init2Init, Ud) => PKEY_INDEX | Q_KEY | PRI_PORT | LAG_TX_AFF,
            (Transition::Init2Rtr, Rc) => {
                ALT_ADDR_PATH | RRE | RAE | RWE | PKEY_INDEX | LAG_TX_AFF | COUNTER_SET_ID
            }
            (Transition::Init2Rtr, Uc) => {
                ALT_ADDR_PATH | RWE | PKEY_INDEX | LAG_TX_AFF | COUNTER_SET_ID
            }
            (Transition::Init2Rtr, Ud) => PKEY_INDEX | Q_KEY | COUNTER_SET_ID,
            (Transition::Rtr2Rts, Rc) => {
                ALT_ADDR_PATH | RRE | RAE | RWE | PM_STATE | RNR_TIMEOUT | OFFLOAD_TYPE
            }
            (Transition::Rtr2Rts, Uc) => ALT_ADDR_PATH | RWE | PM_STATE,
            (Transition::Rtr2Rts, Ud) => Q_KEY,
            (Transition::Rts2Rts, Rc) => RRE | RAE | RWE | RNR_TIMEOUT | PM_STATE | ALT_ADDR_PATH,
            (Transition::Rts2Rts, Uc) => RWE | RNR_TIMEOUT | PM_STATE | ALT_ADDR_PATH,
            (Transition::Rts2Rts, Ud) => Q_KEY,
            (Transition::Sqerr2Rts, Uc) => RWE,
            (Transition::Sqerr2Rts, Ud) => Q_KEY,
            (Transition::Sqerr2Rts, Rc) => 0,
            (Transition::SqdRts, Rc) => {
                ALT_ADDR_PATH
                    | RRE
                    | RAE
                    | RWE
                    | RNR_TIMEOUT
                    | PM_STATE
                    | PKEY_INDEX
                    | PRIMARY_ADDR_PATH
                    | SRA_MAX
                    | RRA_MAX
                    | RETRY_COUNT
                    | RNR_RETRY
                    | ACK_TIMEOUT
            }
            (Transition::SqdRts, Uc) => {
                ALT_ADDR_PATH | RWE | PM_STATE | PKEY_INDEX | PRIMARY_ADDR_PATH
            }
            (Transition::SqdRts, Ud) => PKEY_INDEX | Q_KEY,
            (Transition::ToErr | Transition::ToRst, _) => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [QpState; 7] = [
        QpState::Rst,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqer,
        QpState::Sqd,
        QpState::Err,
    ];

    #[test]
    fn forward_path_and_resets() {
        let mut s = QpState::Rst;
        for t in [
            Transition::Rst2Init,
            Transition::Init2Init,
            Transition::Init2Rtr,
            Transition::Rtr2Rts,
            Transition::Rts2Rts,
        ] {
            assert!(t.accepts(s), "{t:?} from {s:?}");
            s = t.target();
        }
        assert_eq!(s, QpState::Rts);
        for from in ALL {
            assert!(Transition::ToErr.accepts(from));
            assert!(Transition::ToRst.accepts(from));
        }
        // Every other transition is accepted from exactly one state.
        for t in [
            Transition::Rst2Init,
            Transition::Init2Rtr,
            Transition::Rtr2Rts,
            Transition::Sqerr2Rts,
            Transition::SqdRts,
        ] {
            assert_eq!(ALL.iter().filter(|&&f| t.accepts(f)).count(), 1, "{t:?}");
        }
    }

    #[test]
    fn agrees_with_the_hw_transition_table() {
        use ferroverbs_hw::control::qp::{QpTransition as Hw, QpcState};
        let pairs = [
            (Transition::Rst2Init, Hw::Rst2Init),
            (Transition::Init2Init, Hw::Init2Init),
            (Transition::Init2Rtr, Hw::Init2Rtr),
            (Transition::Rtr2Rts, Hw::Rtr2Rts),
            (Transition::Rts2Rts, Hw::Rts2Rts),
            (Transition::Sqerr2Rts, Hw::Sqerr2Rts),
            (Transition::SqdRts, Hw::Sqd2Rts),
            (Transition::ToErr, Hw::ToErr),
            (Transition::ToRst, Hw::ToRst),
        ];
        for (mine, hw) in pairs {
            assert_eq!(mine.target().encoding(), hw.target().value(), "{mine:?}");
            assert_eq!(mine.carries_qpc(), hw.has_qpc(), "{mine:?}");
            for from in ALL {
                let s = QpcState::from_value(from.encoding()).unwrap();
                assert_eq!(
                    mine.accepts(from),
                    hw.allowed_from(s),
                    "{mine:?} from {from:?}"
                );
            }
        }
    }

    #[test]
    fn optional_parameter_masks() {
        use optpar::*;
        assert_eq!(Transition::Rst2Init.allowed_optional(ServiceType::Rc), 0);
        assert_ne!(
            Transition::Init2Rtr.allowed_optional(ServiceType::Rc) & RRE,
            0
        );
        assert_eq!(
            Transition::Init2Rtr.allowed_optional(ServiceType::Uc) & RRE,
            0
        );
        assert_ne!(
            Transition::Rtr2Rts.allowed_optional(ServiceType::Ud) & Q_KEY,
            0
        );
        assert!(!Transition::Sqerr2Rts.valid_for(ServiceType::Rc));
        assert_eq!(QpState::Sqd.encoding(), 7);
        assert_eq!(ServiceType::from_st(2), Some(ServiceType::Ud));
        assert_eq!(ServiceType::from_st(3), None);
    }
}
