//! The simulated firmware's syndromes: one distinct 32-bit value for every way a
//! command can fail, each bound to the command status it is reported with.
//!
//! A real ConnectX returns a firmware-internal syndrome next to the PRM status; the
//! values are opaque to drivers, which log them. The simulator's values are its own:
//! `0x5f00_0000 | area << 16 | n`, with areas 0 generic, 1 HCA life cycle, 2 pages,
//! 3 capabilities, 4 UAR/PD/transport domain, 5 MKEY, 6 EQ, 7 CQ, 8 QP, 9 vport and
//! GID table, 0xa access registers, 0xb counters, 0xc SRQ. `docs/simulator.md` carries the same table, and a
//! test checks that every value appears there.

use ferroverbs_hw::control::cmd::CmdStatus;

macro_rules! syndromes {
    ($( $(#[$m:meta])* $name:ident = $val:expr, $status:ident, $text:literal; )*) => {
        /// Every error the simulated firmware can answer a command with.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Syndrome {
            $( $(#[$m])* #[doc = $text] $name, )*
        }

        impl Syndrome {
            /// Every syndrome, in table order.
            pub const ALL: &'static [Syndrome] = &[$(Syndrome::$name),*];

            /// The 32-bit syndrome value.
            pub const fn value(self) -> u32 {
                match self { $(Syndrome::$name => $val,)* }
            }

            /// The command status the syndrome is reported with.
            pub const fn status(self) -> CmdStatus {
                match self { $(Syndrome::$name => CmdStatus::$status,)* }
            }

            /// What went wrong.
            pub const fn describe(self) -> &'static str {
                match self { $(Syndrome::$name => $text,)* }
            }

            /// The syndrome with this value, if any.
            pub fn from_value(v: u32) -> Option<Syndrome> {
                Syndrome::ALL.iter().copied().find(|s| s.value() == v)
            }
        }
    };
}

syndromes! {
    // --- 0: generic, any command -------------------------------------------------
    UnknownOpcode = 0x5f00_0001, BadOpErr, "opcode unknown to the firmware";
    NotImplemented = 0x5f00_0002, BadOpErr, "known opcode the simulator does not implement";
    BadOpMod = 0x5f00_0003, BadParamErr, "op_mod not valid for this command";
    UidNotZero = 0x5f00_0004, BadParamErr, "uid names a user context that does not exist";
    InputTooShort = 0x5f00_0005, BadInpLenErr, "input shorter than the command's layout";
    OutputTooShort = 0x5f00_0006, BadOutpLenErr, "output length shorter than the command's answer";
    HcaNotEnabled = 0x5f00_0007, BadSysStateErr, "command before ENABLE_HCA";
    HcaNotInitialized = 0x5f00_0008, BadSysStateErr, "resource command before INIT_HCA (or after TEARDOWN_HCA)";
    // --- 1: HCA life cycle -----------------------------------------------------
    EnableAlreadyEnabled = 0x5f01_0001, BadSysStateErr, "ENABLE_HCA on an enabled function";
    EnableBadFunction = 0x5f01_0002, BadParamErr, "ENABLE_HCA for another function or the embedded CPU";
    DisableWhileInitialized = 0x5f01_0003, BadSysStateErr, "DISABLE_HCA before TEARDOWN_HCA";
    DisableBadFunction = 0x5f01_0004, BadParamErr, "DISABLE_HCA for another function or the embedded CPU";
    SetIssiUnsupported = 0x5f01_0005, BadParamErr, "SET_ISSI to an ISSI not in supported_issi";
    SetIssiAfterInit = 0x5f01_0006, BadSysStateErr, "SET_ISSI after INIT_HCA";
    InitAlreadyInitialized = 0x5f01_0007, BadSysStateErr, "INIT_HCA on an initialized HCA";
    InitPagesMissing = 0x5f01_0008, BadSysStateErr, "INIT_HCA before the boot and init pages were given";
    TeardownNotInitialized = 0x5f01_0009, BadSysStateErr, "TEARDOWN_HCA on an HCA that is not initialized";
    TeardownBadProfile = 0x5f01_000a, BadParamErr, "TEARDOWN_HCA profile unknown";
    TeardownFastUnsupported = 0x5f01_000b, BadParamErr, "TEARDOWN_HCA PREPARE_FAST_TEARDOWN without the fast_teardown capability";
    TeardownObjectsLeft = 0x5f01_000c, BadResStateErr, "TEARDOWN_HCA GRACEFUL_CLOSE while objects still exist";
    TeardownForceUnsupported = 0x5f01_000d, BadParamErr, "TEARDOWN_HCA FORCE_CLOSE without the force_teardown capability";
    // --- 2: pages --------------------------------------------------------------
    PagesBadFunction = 0x5f02_0001, BadParamErr, "QUERY_PAGES/MANAGE_PAGES for another function or the embedded CPU";
    GiveInputShort = 0x5f02_0002, BadInpLenErr, "MANAGE_PAGES GIVE lists fewer addresses than input_num_entries";
    GiveTooMany = 0x5f02_0003, LimErr, "MANAGE_PAGES with more entries than one command may carry";
    GiveMisaligned = 0x5f02_0004, BadParamErr, "MANAGE_PAGES GIVE address not 4 KiB aligned";
    GiveDuplicate = 0x5f02_0005, BadParamErr, "MANAGE_PAGES GIVE of a page the firmware already holds";
    GiveNotMapped = 0x5f02_0006, BadParamErr, "MANAGE_PAGES GIVE of a page not mapped writable in the IOMMU";
    TakeOutputShort = 0x5f02_0007, BadOutpLenErr, "MANAGE_PAGES TAKE output too short for the requested entries";
    // --- 3: capabilities -------------------------------------------------------
    CapTypeUnsupported = 0x5f03_0001, BadParamErr, "QUERY_HCA_CAP/SET_HCA_CAP of a capability type not modelled";
    CapOtherFunction = 0x5f03_0002, BadParamErr, "capability command for another function";
    SetCapAfterInit = 0x5f03_0003, BadSysStateErr, "SET_HCA_CAP after INIT_HCA";
    SetCapReadOnly = 0x5f03_0004, BadParamErr, "SET_HCA_CAP changes a field that is not settable";
    SetCapValue = 0x5f03_0005, BadParamErr, "SET_HCA_CAP sets a settable field to an unsupported value";
    // --- 4: UAR, PD, transport domain ------------------------------------------
    UarExhausted = 0x5f04_0001, LimErr, "ALLOC_UAR with every UAR page allocated";
    UarUnknown = 0x5f04_0002, BadResErr, "DEALLOC_UAR of a UAR not allocated";
    UarInUse = 0x5f04_0003, BadResStateErr, "DEALLOC_UAR of a UAR an EQ, CQ or QP uses";
    PdExhausted = 0x5f04_0004, LimErr, "ALLOC_PD beyond 2^log_max_pd";
    PdUnknown = 0x5f04_0005, BadResErr, "DEALLOC_PD of a PD not allocated";
    PdInUse = 0x5f04_0006, BadResStateErr, "DEALLOC_PD of a PD an MKEY or QP uses";
    TdExhausted = 0x5f04_0007, LimErr, "ALLOC_TRANSPORT_DOMAIN beyond 2^log_max_transport_domain";
    TdUnknown = 0x5f04_0008, BadResErr, "DEALLOC_TRANSPORT_DOMAIN of a domain not allocated";
    // --- 5: MKEY ---------------------------------------------------------------
    MkeyExhausted = 0x5f05_0001, LimErr, "CREATE_MKEY beyond 2^log_max_mkey";
    MkeyUnknown = 0x5f05_0002, BadResErr, "DESTROY_MKEY/QUERY_MKEY of an mkey index not in use";
    MkeyUnknownPd = 0x5f05_0003, BadResErr, "CREATE_MKEY in a PD not allocated";
    MkeyBadAccessMode = 0x5f05_0004, BadParamErr, "CREATE_MKEY access mode other than PA or MTT (or KLM for a free memory window)";
    MkeyUmemUnsupported = 0x5f05_0005, BadParamErr, "CREATE_MKEY with mkey_umem_valid (UMEM not modelled)";
    MkeyFreeUnsupported = 0x5f05_0006, BadParamErr, "CREATE_MKEY in the free state other than a memory window (KLM mode with umr_en)";
    MkeyQpnBound = 0x5f05_0007, BadParamErr, "CREATE_MKEY bound to a QP (qpn other than 0xffffff)";
    MkeyBadPageSize = 0x5f05_0008, BadParamErr, "CREATE_MKEY log_page_size outside 12..=30";
    MkeyLength64Mtt = 0x5f05_0009, BadParamErr, "CREATE_MKEY length64 with MTT translation";
    MkeyTranslationsShort = 0x5f05_000a, BadParamErr, "CREATE_MKEY translations_octword_size smaller than the pages the range covers";
    MkeyMttInputShort = 0x5f05_000b, BadInpLenErr, "CREATE_MKEY input shorter than its MTT list";
    MkeyMttMisaligned = 0x5f05_000c, BadParamErr, "CREATE_MKEY MTT entry not aligned to the page size";
    MkeyMttNotMapped = 0x5f05_000d, BadParamErr, "CREATE_MKEY MTT page not mapped in the IOMMU";
    MkeyBadLength = 0x5f05_000e, BadParamErr, "CREATE_MKEY len larger than 2^log_max_mrw_sz";
    // --- 6: EQ -----------------------------------------------------------------
    EqExhausted = 0x5f06_0001, LimErr, "CREATE_EQ beyond 2^log_max_eq";
    EqUnknown = 0x5f06_0002, BadResErr, "DESTROY_EQ/QUERY_EQ of an EQ that does not exist";
    EqInUse = 0x5f06_0003, BadResStateErr, "DESTROY_EQ of an EQ a CQ completes to";
    EqBadSize = 0x5f06_0004, BadParamErr, "CREATE_EQ log_eq_size above log_max_eq_sz";
    EqUnknownUar = 0x5f06_0005, BadResErr, "CREATE_EQ uar_page not allocated";
    EqBadIntr = 0x5f06_0006, BadParamErr, "CREATE_EQ intr beyond the MSI-X vectors";
    EqUnsupported = 0x5f06_0007, BadParamErr, "CREATE_EQ collapsed EQ (ec) not modelled";
    EqPasShort = 0x5f06_0008, BadInpLenErr, "CREATE_EQ input shorter than the PAS list of its buffer";
    EqPasMisaligned = 0x5f06_0009, BadParamErr, "CREATE_EQ PAS entry not aligned to the page size";
    EqPasNotMapped = 0x5f06_000a, BadParamErr, "CREATE_EQ buffer page not mapped writable";
    // --- 7: CQ -----------------------------------------------------------------
    CqExhausted = 0x5f07_0001, LimErr, "CREATE_CQ beyond 2^log_max_cq";
    CqUnknown = 0x5f07_0002, BadResErr, "DESTROY_CQ/QUERY_CQ/MODIFY_CQ of a CQ that does not exist";
    CqInUse = 0x5f07_0003, BadResStateErr, "DESTROY_CQ of a CQ a QP uses";
    CqBadSize = 0x5f07_0004, BadParamErr, "CREATE_CQ log_cq_size above log_max_cq_sz";
    CqBadCqeSize = 0x5f07_0005, BadParamErr, "CREATE_CQ cqe_sz other than 64 or 128 bytes";
    CqUnknownEq = 0x5f07_0006, BadResErr, "CREATE_CQ c_eqn names no EQ";
    CqUnknownUar = 0x5f07_0007, BadResErr, "CREATE_CQ uar_page not allocated";
    CqUnsupported = 0x5f07_0008, BadParamErr, "CREATE_CQ/MODIFY_CQ with a feature not modelled (collapsed, compression, UMEM)";
    CqDbrMisaligned = 0x5f07_0009, BadParamErr, "CREATE_CQ dbr_addr not 8-byte aligned";
    CqDbrNotMapped = 0x5f07_000a, BadParamErr, "CREATE_CQ doorbell record not mapped writable";
    CqPasShort = 0x5f07_000b, BadInpLenErr, "CREATE_CQ/MODIFY_CQ input shorter than the PAS list of its buffer";
    CqPasMisaligned = 0x5f07_000c, BadParamErr, "CREATE_CQ/MODIFY_CQ PAS entry not aligned to the page size";
    CqPasNotMapped = 0x5f07_000d, BadParamErr, "CREATE_CQ/MODIFY_CQ buffer page not mapped writable";
    CqResizeBadSize = 0x5f07_000e, BadParamErr, "MODIFY_CQ resize log_cq_size above log_max_cq_sz";
    CqResizeTooSmall = 0x5f07_000f, BadParamErr, "MODIFY_CQ resize to no more entries than the CQ has unpolled CQEs";
    CqResizeFull = 0x5f07_0010, BadResStateErr, "MODIFY_CQ resize of a full CQ (no entry left for the resize CQE)";
    CqResizeInError = 0x5f07_0011, BadResStateErr, "MODIFY_CQ resize of a CQ in error (overrun or write failure)";
    CqResizeCqeSize = 0x5f07_0012, BadParamErr, "MODIFY_CQ resize cqe_sz other than the CQ's";
    CqResizeFields = 0x5f07_0013, BadParamErr, "MODIFY_CQ resize field select other than log_size, page_offset and log_page_size";
    // --- 8: QP -----------------------------------------------------------------
    QpExhausted = 0x5f08_0001, LimErr, "CREATE_QP beyond 2^log_max_qp";
    QpUnknown = 0x5f08_0002, BadResErr, "QP command on a QPN that does not exist";
    QpBadServiceType = 0x5f08_0003, BadParamErr, "CREATE_QP service type other than RC, UC, UD, QP1 or REG_UMR";
    QpUnknownPd = 0x5f08_0004, BadResErr, "CREATE_QP in a PD not allocated";
    QpUnknownCqSnd = 0x5f08_0005, BadResErr, "CREATE_QP cqn_snd names no CQ";
    QpUnknownCqRcv = 0x5f08_0006, BadResErr, "CREATE_QP cqn_rcv names no CQ";
    QpUnknownUar = 0x5f08_0007, BadResErr, "CREATE_QP uar_page not allocated";
    QpBadRqType = 0x5f08_0008, BadParamErr, "CREATE_QP rq_type other than regular, SRQ or zero-length";
    QpBadSqSize = 0x5f08_0009, BadParamErr, "CREATE_QP log_sq_size above log_max_qp_sz";
    QpBadRqSize = 0x5f08_000a, BadParamErr, "CREATE_QP log_rq_size above log_max_qp_sz";
    QpBadRqStride = 0x5f08_000b, BadParamErr, "CREATE_QP receive WQE larger than max_wqe_sz_rq";
    QpUmemUnsupported = 0x5f08_000c, BadParamErr, "CREATE_QP with UMEM buffers (not modelled)";
    QpInputQpnUnsupported = 0x5f08_000d, BadParamErr, "CREATE_QP with an input_qpn";
    QpPasShort = 0x5f08_000e, BadInpLenErr, "CREATE_QP input shorter than the PAS list of its buffer";
    QpPasMisaligned = 0x5f08_000f, BadParamErr, "CREATE_QP PAS entry not aligned to the page size";
    QpPasNotMapped = 0x5f08_0010, BadParamErr, "CREATE_QP buffer page not mapped writable";
    QpDbrMisaligned = 0x5f08_0011, BadParamErr, "CREATE_QP dbr_addr not 8-byte aligned";
    QpDbrNotMapped = 0x5f08_0012, BadParamErr, "CREATE_QP doorbell record not mapped writable";
    QpWrongState = 0x5f08_0013, BadQpStateErr, "QP transition from a state it does not start from";
    QpTransitionNotForType = 0x5f08_0014, BadQpStateErr, "QP transition that does not exist for the service type";
    QpBadOptParam = 0x5f08_0015, BadParamErr, "opt_param_mask flags a parameter the transition does not accept";
    QpBadPort = 0x5f08_0016, BadParamErr, "QP address path port outside 1..=num_ports";
    QpBadPkeyIndex = 0x5f08_0017, BadParamErr, "QP pkey_index beyond the P_Key table (one entry on Ethernet)";
    QpUcRemoteReadAtomic = 0x5f08_0018, BadParamErr, "UC QP with remote read or atomic enabled";
    QpBadMtu = 0x5f08_0019, BadParamErr, "INIT2RTR mtu outside 256..=4096 (codes 1..=5)";
    QpNoRemoteQpn = 0x5f08_001a, BadParamErr, "INIT2RTR of a connected QP without remote_qpn";
    QpBadMsgMax = 0x5f08_001b, BadParamErr, "INIT2RTR log_msg_max above log_max_msg";
    QpRraTooLarge = 0x5f08_001c, BadParamErr, "log_rra_max above log_max_ra_res_qp";
    QpSraTooLarge = 0x5f08_001d, BadParamErr, "log_sra_max above log_max_ra_req_qp";
    QpBadGidIndex = 0x5f08_001e, BadParamErr, "address path src_addr_index names no valid GID table entry";
    QpRoceDisabled = 0x5f08_001f, BadSysStateErr, "INIT2RTR while RoCE is disabled on the NIC vport";
    QpUnknownSrq = 0x5f08_0020, BadResErr, "CREATE_QP with rq_type SRQ naming no SRQ";
    QpGsiPortTaken = 0x5f08_0021, BadParamErr, "RST2INIT of a QP1 to a port that already has its QP1";
    // --- 9: vport, GID table ---------------------------------------------------
    VportOther = 0x5f09_0001, BadParamErr, "vport command for another vport (not an e-switch manager)";
    VportFieldUnsupported = 0x5f09_0002, BadParamErr, "MODIFY_NIC_VPORT_CONTEXT field_select names a field that cannot be modified";
    VportBadMtu = 0x5f09_0003, BadParamErr, "MODIFY_NIC_VPORT_CONTEXT mtu outside 68..=9978";
    RoceAddrBadIndex = 0x5f09_0004, IxErr, "SET/QUERY_ROCE_ADDRESS index beyond roce_address_table_size";
    RoceAddrBadPort = 0x5f09_0005, IxErr, "SET/QUERY_ROCE_ADDRESS vhca_port_num outside the ports";
    RoceAddrBadVersion = 0x5f09_0006, BadParamErr, "SET_ROCE_ADDRESS roce_version other than v1 (0) or v2 (2)";
    RoceAddrBadL3Type = 0x5f09_0007, BadParamErr, "SET_ROCE_ADDRESS roce_l3_type other than IPv4 (0) or IPv6 (1)";
    // --- 0xa: access registers -------------------------------------------------
    AccessRegUnknown = 0x5f0a_0001, BadParamErr, "ACCESS_REG register_id not modelled";
    AccessRegShort = 0x5f0a_0002, BadInpLenErr, "ACCESS_REG register data shorter than the register";
    HostEndiannessBad = 0x5f0a_0003, BadParamErr, "HOST_ENDIANNESS with reserved bits set (only he, bit 0, is defined)";
    RegBadPort = 0x5f0a_0004, IxErr, "port register for a local_port outside the ports";
    PaosBadStatus = 0x5f0a_0005, BadParamErr, "PAOS admin_status other than up (1) or down (2)";
    // --- 0xb: counters ---------------------------------------------------------
    QCounterExhausted = 0x5f0b_0001, LimErr, "ALLOC_Q_COUNTER with every counter set (max_qp_cnt) allocated";
    QCounterUnknown = 0x5f0b_0002, BadResErr, "DEALLOC_Q_COUNTER/QUERY_Q_COUNTER of a counter set not allocated";
    QpBadCounterSet = 0x5f0b_0003, BadParamErr, "QP counter_set_id names no allocated Q counter set";
    VportCounterOther = 0x5f0b_0004, BadParamErr, "QUERY_VPORT_COUNTER for another vport or a port outside the ports";
    // --- 0xc: SRQ --------------------------------------------------------------
    SrqExhausted = 0x5f0c_0001, LimErr, "CREATE_SRQ beyond 2^log_max_srq";
    SrqUnknown = 0x5f0c_0002, BadResErr, "DESTROY_SRQ/QUERY_SRQ/ARM_RQ of an SRQ that does not exist";
    SrqInUse = 0x5f0c_0003, BadResStateErr, "DESTROY_SRQ of an SRQ a QP uses";
    SrqUnknownPd = 0x5f0c_0004, BadResErr, "CREATE_SRQ in a PD not allocated";
    SrqBadSize = 0x5f0c_0005, BadParamErr, "CREATE_SRQ log_srq_size above log_max_srq_sz";
    SrqBadStride = 0x5f0c_0006, BadParamErr, "CREATE_SRQ WQE stride under 32 bytes or above max_wqe_sz_rq";
    SrqBadLwm = 0x5f0c_0007, BadParamErr, "CREATE_SRQ/ARM_RQ lwm not below the SRQ size";
    SrqDbrMisaligned = 0x5f0c_0008, BadParamErr, "CREATE_SRQ dbr_addr not 4-byte aligned";
    SrqDbrNotMapped = 0x5f0c_0009, BadParamErr, "CREATE_SRQ doorbell record not mapped";
    SrqPasShort = 0x5f0c_000a, BadInpLenErr, "CREATE_SRQ input shorter than the PAS list of its buffer";
    SrqPasMisaligned = 0x5f0c_000b, BadParamErr, "CREATE_SRQ PAS entry not aligned to the page size";
    SrqPasNotMapped = 0x5f0c_000c, BadParamErr, "CREATE_SRQ buffer page not mapped";
    SrqUnsupported = 0x5f0c_000d, BadParamErr, "CREATE_SRQ with a feature not modelled (contiguous buffer, WQE signatures, XRC)";
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn values_are_distinct_and_area_coded() {
        let mut seen = HashSet::new();
        for s in Syndrome::ALL {
            assert!(seen.insert(s.value()), "{s:?} duplicates a value");
            assert_eq!(s.value() >> 24, 0x5f);
            assert_ne!(s.status(), CmdStatus::Ok);
            assert_eq!(Syndrome::from_value(s.value()), Some(*s));
        }
        assert_eq!(Syndrome::from_value(0), None);
    }
}
