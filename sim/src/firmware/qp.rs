//! Queue pairs: CREATE_QP, DESTROY_QP, QUERY_QP and every modify command, with the
//! state machine of [`qp_state`](super::qp_state) and the checks each transition makes
//! on its mandatory and optional parameters (`mlx5-controlpath.md` §4.6-4.7).

use ferroverbs_hw::control::qp::{QpTransition, QpcSt, QpcState};
use ferroverbs_hw::Field;

use super::ifc::*;
use super::qp_state::{optpar, ServiceType};
use super::queues::{buffer_pages, BufferErrors, PAGE_OFFSET_UNIT};
use super::{Cmd, CmdResult, Fail, Firmware, Out, Qp, Syndrome};
use crate::iommu::{Access, Iommu};

/// `rq_type`: a regular receive queue.
const RQ_REGULAR: u64 = 0;
/// `rq_type`: no receive queue.
const RQ_ZERO_LEN: u64 = 3;
/// `rq_type`: receive WQEs from the SRQ `srqn_rmpn_xrqn` (`MLX5_SRQ_RQ`).
const RQ_SRQ: u64 = 1;

/// A field of the primary address path, relative to the qpc.
fn pri(f: Field) -> Field {
    f.at(qpc::primary_address_path.bit)
}

/// A field of the stored qpc image (relative to the qpc).
fn qget(img: &[u8], f: Field) -> u64 {
    if f.fits(img.len()) {
        f.get(img)
    } else {
        0
    }
}

fn qset(img: &mut [u8], f: Field, v: u64) {
    if f.fits(img.len()) {
        f.set(img, v);
    }
}

/// The layout facts of one modify command.
struct ModifyLayout {
    in_size: usize,
    out_size: usize,
    qpn: Field,
    opt: Option<Field>,
    qpc: Option<Field>,
}

/// The layout facts of a modify command, from hw: every modify command carries `qpn`
/// at the same place, and those with a context (all but 2ERR and 2RST) carry
/// `opt_param_mask` and the qpc at the same places too (hw's tests check both).
fn modify_layout(t: QpTransition) -> ModifyLayout {
    ModifyLayout {
        in_size: t.in_layout().size(),
        out_size: t.out_layout().size(),
        qpn: qp_2rst_in::qpn,
        opt: t.has_qpc().then_some(rst2init_qp_in::opt_param_mask),
        qpc: t.has_qpc().then_some(rst2init_qp_in::qpc),
    }
}

impl Firmware {
    pub(super) fn create_qp(&mut self, c: &Cmd, io: &Iommu) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(create_qp_in::SIZE, create_qp_out::SIZE)?;
        let ctx = create_qp_in::qpc;
        let q = |f: Field| c.inp.at(ctx, f);
        if c.get(create_qp_in::input_qpn) != 0 {
            return Err(Syndrome::QpInputQpnUnsupported.into());
        }
        if c.get(create_qp_in::wq_umem_valid) != 0 || q(qpc::dbr_umem_valid) != 0 {
            return Err(Syndrome::QpUmemUnsupported.into());
        }
        self.check_counter_set(q(qpc::counter_set_id))?;
        // QP1 (`MLX5_QPC_ST_QP1`): a UD QP that is its port's general services QP.
        let gsi = q(qpc::st) == u64::from(QpcSt::Qp1.value());
        let st = if gsi {
            ServiceType::Ud
        } else {
            ServiceType::from_st(q(qpc::st)).ok_or(Fail::from(Syndrome::QpBadServiceType))?
        };
        let pd = q(qpc::pd) as u32;
        if !self.pds.contains(pd) {
            return Err(Syndrome::QpUnknownPd.into());
        }
        let uar = q(qpc::uar_page) as u32;
        if !self.uar_allocated(uar) {
            return Err(Syndrome::QpUnknownUar.into());
        }
        let rq_type = q(qpc::rq_type);
        if rq_type != RQ_REGULAR && rq_type != RQ_ZERO_LEN && rq_type != RQ_SRQ {
            return Err(Syndrome::QpBadRqType.into());
        }
        let srqn = if rq_type == RQ_SRQ {
            let n = q(qpc::srqn_rmpn_xrqn) as u32;
            if !self.srqs.contains(n) {
                return Err(Syndrome::QpUnknownSrq.into());
            }
            Some(n)
        } else {
            None
        };
        let has_sq = q(qpc::no_sq) == 0;
        let has_rq = rq_type == RQ_REGULAR;
        let max_sz = self.caps.gen(cmd_hca_cap::log_max_qp_sz);
        let mut bytes = 0u64;
        if has_sq {
            let l = q(qpc::log_sq_size);
            if l > max_sz {
                return Err(Syndrome::QpBadSqSize.into());
            }
            bytes += 64u64 << l;
        }
        if has_rq {
            let l = q(qpc::log_rq_size);
            if l > max_sz {
                return Err(Syndrome::QpBadRqSize.into());
            }
            let stride = 16u64 << q(qpc::log_rq_stride);
            if stride > self.caps.gen(cmd_hca_cap::max_wqe_sz_rq) {
                return Err(Syndrome::QpBadRqStride.into());
            }
            bytes += stride << l;
        }
        let cq_ref = |n: u64, required: bool, err: Syndrome| -> Result<Option<u32>, Fail> {
            if n == 0 && !required {
                return Ok(None);
            }
            if self.cqs.contains(n as u32) {
                Ok(Some(n as u32))
            } else {
                Err(err.into())
            }
        };
        let cqn_snd = cq_ref(q(qpc::cqn_snd), has_sq, Syndrome::QpUnknownCqSnd)?;
        let cqn_rcv = cq_ref(
            q(qpc::cqn_rcv),
            has_rq || srqn.is_some(),
            Syndrome::QpUnknownCqRcv,
        )?;
        let dbr = q(qpc::dbr_addr);
        if dbr & 7 != 0 {
            return Err(Syndrome::QpDbrMisaligned.into());
        }
        if !Self::mapped(io, dbr, 8, Access::Write) {
            return Err(Syndrome::QpDbrNotMapped.into());
        }
        let pages = buffer_pages(
            c,
            io,
            create_qp_in::pas.byte_offset(),
            q(qpc::log_page_size),
            q(qpc::page_offset) * PAGE_OFFSET_UNIT,
            bytes,
            BufferErrors {
                short: Syndrome::QpPasShort,
                misaligned: Syndrome::QpPasMisaligned,
                not_mapped: Syndrome::QpPasNotMapped,
            },
        )?;
        let mut img = c.inp.bytes(ctx).to_vec();
        qset(&mut img, qpc::state, u64::from(QpcState::Rst.value()));
        let qp = Qp {
            st,
            gsi,
            state: QpcState::Rst,
            qpc: img,
            pd,
            cqn_snd,
            cqn_rcv,
            srqn,
            uar,
            pages,
            dbr,
        };
        let qpn = self
            .qps
            .insert(qp)
            .ok_or(Fail::from(Syndrome::QpExhausted))?;
        self.pds.acquire(pd);
        self.uar_acquire(uar);
        for cq in [cqn_snd, cqn_rcv].into_iter().flatten() {
            self.cqs.acquire(cq);
        }
        if let Some(s) = srqn {
            self.srqs.acquire(s);
        }
        let mut o = Out::new(create_qp_out::SIZE);
        o.set(create_qp_out::qpn, u64::from(qpn));
        o.done()
    }

    pub(super) fn destroy_qp(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(destroy_qp_in::SIZE, destroy_qp_out::SIZE)?;
        let qpn = c.get(destroy_qp_in::qpn) as u32;
        let qp = self
            .qps
            .remove(qpn)
            .map_err(|_| Fail::from(Syndrome::QpUnknown))?;
        if qp.gsi {
            for p in &mut self.ports {
                if p.gsi_qpn == Some(qpn) {
                    p.gsi_qpn = None;
                }
            }
        }
        self.pds.release(qp.pd);
        self.uar_release(qp.uar);
        for cq in [qp.cqn_snd, qp.cqn_rcv].into_iter().flatten() {
            self.cqs.release(cq);
        }
        if let Some(s) = qp.srqn {
            self.srqs.release(s);
        }
        self.datapath_events
            .push(super::DataPathEvent::QpDestroyed(qpn));
        Out::new(destroy_qp_out::SIZE).done()
    }

    pub(super) fn query_qp(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(query_qp_in::SIZE, query_qp_out::SIZE)?;
        let qpn = c.get(query_qp_in::qpn) as u32;
        let qp = self.qps.get(qpn).ok_or(Fail::from(Syndrome::QpUnknown))?;
        let mut o = Out::with_pas(c.outlen, query_qp_out::SIZE, query_qp_out::pas, &qp.pages);
        o.put(query_qp_out::qpc, &qp.qpc);
        o.done()
    }

    /// Checks an address path of the qpc image: port in range, GID index valid.
    fn check_path(&self, img: &[u8]) -> Result<(), Fail> {
        let port = qget(img, pri(ads::vhca_port_num));
        if port == 0 || port > self.ports.len() as u64 {
            return Err(Syndrome::QpBadPort.into());
        }
        let idx = qget(img, pri(ads::src_addr_index)) as usize;
        if self.ports[port as usize - 1].gid(idx).is_none() {
            return Err(Syndrome::QpBadGidIndex.into());
        }
        Ok(())
    }

    fn check_port(&self, img: &[u8]) -> Result<(), Fail> {
        let port = qget(img, pri(ads::vhca_port_num));
        if port == 0 || port > self.ports.len() as u64 {
            return Err(Syndrome::QpBadPort.into());
        }
        Ok(())
    }

    pub(super) fn modify_qp(&mut self, c: &Cmd, t: QpTransition) -> CmdResult {
        c.op_mod_zero()?;
        let l = modify_layout(t);
        c.lengths(l.in_size, l.out_size)?;
        let qpn = c.get(l.qpn) as u32;
        let qp = self.qps.get(qpn).ok_or(Fail::from(Syndrome::QpUnknown))?;
        let st = qp.st;
        if !st.has_transition(t) {
            return Err(Syndrome::QpTransitionNotForType.into());
        }
        if !t.allowed_from(qp.state) {
            return Err(Syndrome::QpWrongState.into());
        }
        let mut img = qp.qpc.clone();
        if let (Some(opt_f), Some(ctx)) = (l.opt, l.qpc) {
            let opt = c.get(opt_f) as u32;
            if opt & !st.allowed_optional(t) != 0 {
                return Err(Syndrome::QpBadOptParam.into());
            }
            let input = |f: Field| c.inp.at(ctx, f);
            let copy = |img: &mut Vec<u8>, f: Field| qset(img, f, input(f));
            let copy_bytes = |img: &mut Vec<u8>, f: Field| {
                let src = c.inp.bytes(f.at(ctx.bit));
                if let Some(dst) = f.bytes_mut(img) {
                    if src.len() == dst.len() {
                        dst.copy_from_slice(src);
                    }
                }
            };
            let connected = !matches!(st, ServiceType::Ud | ServiceType::RegUmr);
            // Mandatory parameters of the transition.
            match t {
                QpTransition::Rst2Init => {
                    for f in [
                        qpc::pm_state,
                        pri(ads::vhca_port_num),
                        pri(ads::pkey_index),
                        qpc::rre,
                        qpc::rwe,
                        qpc::rae,
                        qpc::atomic_mode,
                        qpc::counter_set_id,
                    ] {
                        copy(&mut img, f);
                    }
                    self.check_counter_set(input(qpc::counter_set_id))?;
                    if st == ServiceType::Ud {
                        copy(&mut img, qpc::q_key);
                    }
                    self.check_port(&img)?;
                    if qp.gsi {
                        // The port's one QP1.
                        let port = qget(&img, pri(ads::vhca_port_num)) as usize;
                        match self.ports[port - 1].gsi_qpn {
                            Some(other) if other != qpn => {
                                return Err(Syndrome::QpGsiPortTaken.into());
                            }
                            _ => {}
                        }
                    }
                }
                QpTransition::Init2Rtr => {
                    if !self.ports[0].roce_en {
                        return Err(Syndrome::QpRoceDisabled.into());
                    }
                    if connected {
                        let mtu = input(qpc::mtu);
                        if !(1..=5).contains(&mtu) {
                            return Err(Syndrome::QpBadMtu.into());
                        }
                        if input(qpc::remote_qpn) == 0 {
                            return Err(Syndrome::QpNoRemoteQpn.into());
                        }
                        if input(qpc::log_msg_max) > self.caps.gen(cmd_hca_cap::log_max_msg) {
                            return Err(Syndrome::QpBadMsgMax.into());
                        }
                        for f in [
                            qpc::mtu,
                            qpc::log_msg_max,
                            qpc::remote_qpn,
                            qpc::next_rcv_psn,
                            qpc::log_ack_req_freq,
                        ] {
                            copy(&mut img, f);
                        }
                        copy_bytes(&mut img, qpc::primary_address_path);
                        if st == ServiceType::Rc {
                            if input(qpc::log_rra_max)
                                > self.caps.gen(cmd_hca_cap::log_max_ra_res_qp)
                            {
                                return Err(Syndrome::QpRraTooLarge.into());
                            }
                            copy(&mut img, qpc::min_rnr_nak);
                            copy(&mut img, qpc::log_rra_max);
                        }
                        self.check_path(&img)?;
                    }
                }
                QpTransition::Rtr2Rts => {
                    copy(&mut img, qpc::next_send_psn);
                    if st == ServiceType::Rc {
                        if input(qpc::log_sra_max) > self.caps.gen(cmd_hca_cap::log_max_ra_req_qp) {
                            return Err(Syndrome::QpSraTooLarge.into());
                        }
                        for f in [
                            qpc::retry_count,
                            qpc::rnr_retry,
                            qpc::log_sra_max,
                            pri(ads::ack_timeout),
                        ] {
                            copy(&mut img, f);
                        }
                    }
                }
                _ => {}
            }
            // Optional parameters flagged in opt_param_mask.
            let flagged = |bit: u32| opt & bit != 0;
            let simple = [
                (optpar::RRE, qpc::rre),
                (optpar::RAE, qpc::rae),
                (optpar::RWE, qpc::rwe),
                (optpar::PKEY_INDEX, pri(ads::pkey_index)),
                (optpar::Q_KEY, qpc::q_key),
                (optpar::RNR_TIMEOUT, qpc::min_rnr_nak),
                (optpar::SRA_MAX, qpc::log_sra_max),
                (optpar::RRA_MAX, qpc::log_rra_max),
                (optpar::PM_STATE, qpc::pm_state),
                (optpar::RETRY_COUNT, qpc::retry_count),
                (optpar::RNR_RETRY, qpc::rnr_retry),
                (optpar::ACK_TIMEOUT, pri(ads::ack_timeout)),
                (optpar::LAG_TX_AFF, qpc::lag_tx_port_affinity),
                (optpar::PRI_PORT, pri(ads::vhca_port_num)),
                (optpar::COUNTER_SET_ID, qpc::counter_set_id),
                (optpar::OFFLOAD_TYPE, qpc::offload_type),
            ];
            if flagged(optpar::PRIMARY_ADDR_PATH) {
                copy_bytes(&mut img, qpc::primary_address_path);
                self.check_path(&img)?;
            }
            if flagged(optpar::ALT_ADDR_PATH) {
                copy_bytes(&mut img, qpc::secondary_address_path);
            }
            for (bit, f) in simple {
                if flagged(bit) {
                    copy(&mut img, f);
                }
            }
            if flagged(optpar::PRI_PORT) {
                self.check_port(&img)?;
            }
            if flagged(optpar::SRA_MAX)
                && qget(&img, qpc::log_sra_max) > self.caps.gen(cmd_hca_cap::log_max_ra_req_qp)
            {
                return Err(Syndrome::QpSraTooLarge.into());
            }
            if flagged(optpar::RRA_MAX)
                && qget(&img, qpc::log_rra_max) > self.caps.gen(cmd_hca_cap::log_max_ra_res_qp)
            {
                return Err(Syndrome::QpRraTooLarge.into());
            }
            // The P_Key table of an Ethernet port has a single entry.
            if qget(&img, pri(ads::pkey_index)) != 0 {
                return Err(Syndrome::QpBadPkeyIndex.into());
            }
            if st == ServiceType::Uc && (qget(&img, qpc::rre) != 0 || qget(&img, qpc::rae) != 0) {
                return Err(Syndrome::QpUcRemoteReadAtomic.into());
            }
        }
        let target = t.target();
        qset(&mut img, qpc::state, u64::from(target.value()));
        let from = qp.state;
        let gsi_port = (qp.gsi && t == QpTransition::Rst2Init)
            .then(|| qget(&img, pri(ads::vhca_port_num)) as usize);
        if let Some(qp) = self.qps.get_mut(qpn) {
            qp.qpc = img;
            qp.state = target;
        }
        if let Some(port) = gsi_port {
            self.ports[port - 1].gsi_qpn = Some(qpn);
        }
        self.datapath_events.push(super::DataPathEvent::QpModified {
            qpn,
            from,
            to: target,
        });
        Out::new(l.out_size).done()
    }
}
