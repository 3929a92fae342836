//! The QP state machine of the firmware: which modify command moves a QP from which
//! state to which, for each service type, and which optional parameters each
//! transition accepts.
//!
//! Sources: the transition table of Linux `drivers/infiniband/hw/mlx5/qpc.c` (`optab`,
//! reproduced in `mlx5-controlpath.md` §4.7) and the per-transition optional-parameter
//! masks of `drivers/infiniband/hw/mlx5/qp.c` (`opt_mask`), restated as facts.
//!
//! The states ([`QpcState`](ferroverbs_hw::control::qp::QpcState)) and the transition commands with their source and target
//! states ([`QpTransition`]) are the hw crate's; this module adds what only the
//! simulated firmware checks: which transitions exist for each service type and which
//! optional parameters each accepts.

use ferroverbs_hw::control::qp::QpTransition;

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

impl ServiceType {
    /// Whether transition `t` exists for this service type at all (SQ error recovery
    /// is for the unreliable types; an RC QP goes to ERR instead).
    pub fn has_transition(self, t: QpTransition) -> bool {
        !(t == QpTransition::Sqerr2Rts && self == ServiceType::Rc)
    }

    /// The optional parameters (`opt_param_mask` bits) transition `t` accepts for this
    /// service type (Linux `opt_mask`).
    pub fn allowed_optional(self, t: QpTransition) -> u32 {
        use optpar::*;
        use QpTransition as T;
        use ServiceType::*;
        match (t, self) {
            (T::Rst2Init, _) => 0,
            (T::Init2Init, Rc) => RRE | RAE | RWE | PKEY_INDEX | PRI_PORT | LAG_TX_AFF,
            (T::Init2Init, Uc) => RWE | PKEY_INDEX | PRI_PORT | LAG_TX_AFF,
            (T::Init2Init, Ud) => PKEY_INDEX | Q_KEY | PRI_PORT | LAG_TX_AFF,
            (T::Init2Rtr, Rc) => {
                ALT_ADDR_PATH | RRE | RAE | RWE | PKEY_INDEX | LAG_TX_AFF | COUNTER_SET_ID
            }
            (T::Init2Rtr, Uc) => ALT_ADDR_PATH | RWE | PKEY_INDEX | LAG_TX_AFF | COUNTER_SET_ID,
            (T::Init2Rtr, Ud) => PKEY_INDEX | Q_KEY | COUNTER_SET_ID,
            (T::Rtr2Rts, Rc) => {
                ALT_ADDR_PATH | RRE | RAE | RWE | PM_STATE | RNR_TIMEOUT | OFFLOAD_TYPE
            }
            (T::Rtr2Rts, Uc) => ALT_ADDR_PATH | RWE | PM_STATE,
            (T::Rtr2Rts, Ud) => Q_KEY,
            (T::Rts2Rts, Rc) => RRE | RAE | RWE | RNR_TIMEOUT | PM_STATE | ALT_ADDR_PATH,
            (T::Rts2Rts, Uc) => RWE | RNR_TIMEOUT | PM_STATE | ALT_ADDR_PATH,
            (T::Rts2Rts, Ud) => Q_KEY,
            (T::Sqerr2Rts, Uc) => RWE,
            (T::Sqerr2Rts, Ud) => Q_KEY,
            (T::Sqerr2Rts, Rc) => 0,
            (T::Sqd2Rts, Rc) => {
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
            (T::Sqd2Rts, Uc) => ALT_ADDR_PATH | RWE | PM_STATE | PKEY_INDEX | PRIMARY_ADDR_PATH,
            (T::Sqd2Rts, Ud) => PKEY_INDEX | Q_KEY,
            (T::ToErr | T::ToRst, _) => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroverbs_hw::control::qp::QpcState;

    const ALL: [QpcState; 7] = [
        QpcState::Rst,
        QpcState::Init,
        QpcState::Rtr,
        QpcState::Rts,
        QpcState::Sqer,
        QpcState::Sqd,
        QpcState::Err,
    ];

    #[test]
    fn forward_path_and_resets() {
        let mut s = QpcState::Rst;
        for t in [
            QpTransition::Rst2Init,
            QpTransition::Init2Init,
            QpTransition::Init2Rtr,
            QpTransition::Rtr2Rts,
            QpTransition::Rts2Rts,
        ] {
            assert!(t.allowed_from(s), "{t:?} from {s:?}");
            s = t.target();
        }
        assert_eq!(s, QpcState::Rts);
        for from in ALL {
            assert!(QpTransition::ToErr.allowed_from(from));
            assert!(QpTransition::ToRst.allowed_from(from));
        }
        // Every other transition is accepted from exactly one state.
        for t in [
            QpTransition::Rst2Init,
            QpTransition::Init2Rtr,
            QpTransition::Rtr2Rts,
            QpTransition::Sqerr2Rts,
            QpTransition::Sqd2Rts,
        ] {
            assert_eq!(
                ALL.iter().filter(|&&f| t.allowed_from(f)).count(),
                1,
                "{t:?}"
            );
        }
    }

    #[test]
    fn optional_parameter_masks() {
        use optpar::*;
        assert_eq!(ServiceType::Rc.allowed_optional(QpTransition::Rst2Init), 0);
        assert_ne!(
            ServiceType::Rc.allowed_optional(QpTransition::Init2Rtr) & RRE,
            0
        );
        assert_eq!(
            ServiceType::Uc.allowed_optional(QpTransition::Init2Rtr) & RRE,
            0
        );
        assert_ne!(
            ServiceType::Ud.allowed_optional(QpTransition::Rtr2Rts) & Q_KEY,
            0
        );
        assert!(!ServiceType::Rc.has_transition(QpTransition::Sqerr2Rts));
        assert_eq!(QpcState::Sqd.value(), 7);
        assert_eq!(ServiceType::from_st(2), Some(ServiceType::Ud));
        assert_eq!(ServiceType::from_st(3), None);
    }
}
