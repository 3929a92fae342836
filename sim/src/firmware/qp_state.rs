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
    /// The driver's UMR QP (`MLX5_QPC_ST_REG_UMR`, 0xc; Linux `MLX5_IB_QPT_REG_UMR`,
    /// made by `mlx5r_umr_resource_init`): a send queue of UMR WQEs that may modify
    /// the mkeys of every PD, no transport, no packets.
    RegUmr,
}

impl ServiceType {
    /// Decodes qpc `st`; `None` for types the simulator does not model (XRC, DC,
    /// QP0/QP1, raw packet, the synchronous UMR QP).
    pub fn from_st(st: u64) -> Option<Self> {
        match st {
            0x0 => Some(ServiceType::Rc),
            0x1 => Some(ServiceType::Uc),
            0x2 => Some(ServiceType::Ud),
            0xc => Some(ServiceType::RegUmr),
            _ => None,
        }
    }

    /// The qpc `st` encoding.
    pub fn st(self) -> u8 {
        match self {
            ServiceType::Rc => 0,
            ServiceType::Uc => 1,
            ServiceType::Ud => 2,
            ServiceType::RegUmr => 0xc,
        }
    }
}

/// `MLX5_QP_OPTPAR_*` bits of `opt_param_mask`: hw's constants (`qp.h`) under short
/// names.
pub mod optpar {
    pub use ferroverbs_hw::control::qp::{
        MLX5_QP_OPTPAR_ACK_TIMEOUT as ACK_TIMEOUT, MLX5_QP_OPTPAR_ALT_ADDR_PATH as ALT_ADDR_PATH,
        MLX5_QP_OPTPAR_COUNTER_SET_ID as COUNTER_SET_ID, MLX5_QP_OPTPAR_LAG_TX_AFF as LAG_TX_AFF,
        MLX5_QP_OPTPAR_PKEY_INDEX as PKEY_INDEX, MLX5_QP_OPTPAR_PM_STATE as PM_STATE,
        MLX5_QP_OPTPAR_PRIMARY_ADDR_PATH as PRIMARY_ADDR_PATH, MLX5_QP_OPTPAR_PRI_PORT as PRI_PORT,
        MLX5_QP_OPTPAR_Q_KEY as Q_KEY, MLX5_QP_OPTPAR_RAE as RAE,
        MLX5_QP_OPTPAR_RETRY_COUNT as RETRY_COUNT, MLX5_QP_OPTPAR_RNR_RETRY as RNR_RETRY,
        MLX5_QP_OPTPAR_RNR_TIMEOUT as RNR_TIMEOUT, MLX5_QP_OPTPAR_RRA_MAX as RRA_MAX,
        MLX5_QP_OPTPAR_RRE as RRE, MLX5_QP_OPTPAR_RWE as RWE, MLX5_QP_OPTPAR_SRA_MAX as SRA_MAX,
    };
    /// Offload type (bit 24 in newer Linux `qp.h`, `mlx5-controlpath.md` §4.7; absent
    /// from the 6.1 header the hw crate follows).
    pub const OFFLOAD_TYPE: u32 = 1 << 24;
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
            // Linux brings its UMR QP to RTS with no optional parameter
            // (`mlx5r_umr_qp_rst2rts`).
            (_, RegUmr) => 0,
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
