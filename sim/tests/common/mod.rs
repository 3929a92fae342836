//! A test driver: plays the host side of the command interface explicitly (command
//! entries and mailbox chains built in mapped memory, doorbells rung through the
//! [`SimBus`]), so the simulator can be tested without the real driver.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};

use ferroverbs_hw::control::cmd::{self, Opcode};
use ferroverbs_hw::control::cmdq::{DeliveryStatus, MLX5_PCI_CMD_XPORT};
use ferroverbs_hw::control::iseg;
use ferroverbs_hw::{Bus, DmaPerm};
use ferroverbs_sim::{Sim, SimBus, SimConfig};

/// Host memory shared with the device: 4 KiB-aligned, accessed only atomically by the
/// test (the device writes it through the IOMMU).
pub struct Mem {
    words: Box<[AtomicU64]>,
    start: usize,
    len: usize,
}

impl Mem {
    /// `len` zeroed bytes starting on a 4 KiB boundary.
    pub fn new(len: usize) -> Mem {
        let words: Box<[AtomicU64]> = (0..(len + 4096).div_ceil(8) + 1)
            .map(|_| AtomicU64::new(0))
            .collect();
        let base = words.as_ptr() as usize;
        let start = base.next_multiple_of(4096) - base;
        Mem { words, start, len }
    }

    /// Host address of byte 0.
    pub fn addr(&self) -> usize {
        self.words.as_ptr() as usize + self.start
    }

    /// Length.
    pub fn len(&self) -> usize {
        self.len
    }

    fn word(&self, byte: usize) -> (&AtomicU64, usize) {
        let abs = self.start + byte;
        (&self.words[abs / 8], abs % 8)
    }

    /// Reads `buf.len()` bytes at `off`.
    pub fn read(&self, off: usize, buf: &mut [u8]) {
        let mut i = 0;
        while i < buf.len() {
            let (w, k) = self.word(off + i);
            let v = w.load(Ordering::Acquire).to_ne_bytes();
            let n = (8 - k).min(buf.len() - i);
            buf[i..i + n].copy_from_slice(&v[k..k + n]);
            i += n;
        }
    }

    /// Writes `data` at `off`.
    pub fn write(&self, off: usize, data: &[u8]) {
        let mut i = 0;
        while i < data.len() {
            let (w, k) = self.word(off + i);
            let n = (8 - k).min(data.len() - i);
            let mut v = w.load(Ordering::Acquire).to_ne_bytes();
            v[k..k + n].copy_from_slice(&data[i..i + n]);
            w.store(u64::from_ne_bytes(v), Ordering::Release);
            i += n;
        }
    }

    /// Bytes `off..off + n`.
    pub fn bytes(&self, off: usize, n: usize) -> Vec<u8> {
        let mut v = vec![0; n];
        self.read(off, &mut v);
        v
    }

    /// Fills the whole buffer with `b`.
    pub fn fill(&self, b: u8) {
        for i in 0..self.len {
            self.write(i, &[b]);
        }
    }
}

/// A mapped buffer.
pub struct Dma {
    pub mem: Mem,
    pub iova: u64,
}

/// What a command came back with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Delivered; the output message (`outlen` bytes).
    Out(Vec<u8>),
    /// A delivery error.
    Delivery(DeliveryStatus),
    /// The entry stayed owned by hardware (ignored or held).
    Pending,
}

impl Answer {
    /// The output, panicking on a delivery problem.
    pub fn out(&self) -> &[u8] {
        match self {
            Answer::Out(o) => o,
            other => panic!("no output: {other:?}"),
        }
    }

    /// `(status, syndrome)` of the output.
    pub fn status(&self) -> (u8, u32) {
        let o = self.out();
        (cmd::status(o).unwrap(), cmd::syndrome(o).unwrap())
    }
}

/// Size of the slot a mailbox block occupies in the test's chains (1 KiB alignment,
/// as Linux allocates them).
pub const BLOCK_STRIDE: usize = 1024;

/// Waits, as Linux's pre-initializing wait does, until the firmware has booted and
/// reads `initializing` clear: moves virtual time on, or sleeps on real time.
pub fn wait_booted(sim: &Sim, bus: &SimBus) {
    for _ in 0..10_000 {
        if !iseg::is_initializing(bus.read32(iseg::INITIALIZING)) {
            return;
        }
        if !sim.advance(std::time::Duration::from_micros(100)) {
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }
    panic!("the simulated firmware did not boot");
}

/// The test driver.
pub struct Host {
    pub sim: Sim,
    pub bus: SimBus,
    pub cmdq: Dma,
    pub slot: usize,
    pub token: u8,
    /// Everything mapped for the device (freed by [`Host::release`]).
    pub mapped: Vec<Dma>,
}

impl Host {
    /// A device with `cfg`, its command queue programmed (polling mode).
    pub fn new(cfg: SimConfig) -> Host {
        let sim = Sim::new(cfg);
        let bus = sim.bus();
        wait_booted(&sim, &bus);
        let mem = Mem::new(4096);
        let iova = bus.dma_map(mem.addr(), 4096, DmaPerm::RW).unwrap();
        bus.write32(iseg::CMDQ_ADDR_H, (iova >> 32) as u32);
        bus.write32(iseg::CMDQ_ADDR_L_SZ, iova as u32);
        Host {
            sim,
            bus,
            cmdq: Dma { mem, iova },
            slot: 0,
            token: 0,
            mapped: Vec::new(),
        }
    }

    /// A deterministic single-port device.
    pub fn deterministic() -> Host {
        Host::new(SimConfig::deterministic(7, 1))
    }

    /// Maps `len` bytes; returns the index in `mapped`.
    pub fn map(&mut self, len: usize) -> usize {
        let mem = Mem::new(len);
        let iova = self.bus.dma_map(mem.addr(), len, DmaPerm::RW).unwrap();
        self.mapped.push(Dma { mem, iova });
        self.mapped.len() - 1
    }

    /// IOVA of mapping `i`.
    pub fn iova(&self, i: usize) -> u64 {
        self.mapped[i].iova
    }

    /// Unmaps mapping `i` and keeps its memory (a test of what the device does with
    /// host memory taken away from it).
    pub fn unmap(&self, i: usize) {
        let d = &self.mapped[i];
        self.bus.dma_unmap(d.iova, d.mem.len()).unwrap();
    }

    /// Unmaps everything mapped with [`Host::map`].
    pub fn release(&mut self) {
        for d in self.mapped.drain(..) {
            self.bus.dma_unmap(d.iova, d.mem.len()).unwrap();
        }
    }

    /// Unmaps the command queue too (end of a test).
    pub fn close(mut self) -> Sim {
        self.release();
        self.bus.dma_unmap(self.cmdq.iova, 4096).unwrap();
        self.sim.clone()
    }

    fn entry_off(&self) -> usize {
        self.slot * 64
    }

    /// A chain of `n` blocks in fresh memory, numbered 0.. with the entry's token,
    /// `payload` copied into the data areas. Returns (mapping, first IOVA).
    pub fn chain(&mut self, n: usize, payload: &[u8]) -> Option<Dma> {
        if n == 0 {
            return None;
        }
        let mem = Mem::new(n * BLOCK_STRIDE);
        let iova = self
            .bus
            .dma_map(mem.addr(), n * BLOCK_STRIDE, DmaPerm::RW)
            .unwrap();
        for k in 0..n {
            let off = k * BLOCK_STRIDE;
            let chunk = payload
                .get(k * 512..((k + 1) * 512).min(payload.len()))
                .unwrap_or(&[]);
            mem.write(off, chunk);
            let next = if k + 1 < n {
                iova + ((k + 1) * BLOCK_STRIDE) as u64
            } else {
                0
            };
            mem.write(off + 0x230, &next.to_be_bytes());
            mem.write(off + 0x238, &(k as u32).to_be_bytes());
            mem.write(off + 0x23d, &[self.token]);
        }
        Some(Dma { mem, iova })
    }

    /// Writes an entry for `input` with chains for it and for `outlen`, rings the
    /// doorbell, and collects the answer. Chains are unmapped afterwards.
    pub fn exec(&mut self, input: &[u8], outlen: usize) -> Answer {
        let in_blocks = input.len().saturating_sub(16).div_ceil(512);
        let out_blocks = outlen.saturating_sub(16).div_ceil(512);
        let inc = self.chain(in_blocks, input.get(16..).unwrap_or(&[]));
        let outc = self.chain(out_blocks, &[]);
        let e = self.entry_off();
        let mut entry = [0u8; 64];
        entry[0] = MLX5_PCI_CMD_XPORT;
        entry[4..8].copy_from_slice(&(input.len() as u32).to_be_bytes());
        entry[8..16].copy_from_slice(&inc.as_ref().map_or(0, |d| d.iova).to_be_bytes());
        let n = input.len().min(16);
        entry[16..16 + n].copy_from_slice(&input[..n]);
        entry[0x30..0x38].copy_from_slice(&outc.as_ref().map_or(0, |d| d.iova).to_be_bytes());
        entry[0x38..0x3c].copy_from_slice(&(outlen as u32).to_be_bytes());
        entry[0x3c] = self.token;
        entry[0x3f] = 1;
        self.cmdq.mem.write(e, &entry);
        self.bus.wmb();
        self.bus.write32(iseg::CMD_DBELL, 1 << self.slot);
        let ans = self.collect(outlen, outc.as_ref());
        for d in [inc, outc].into_iter().flatten() {
            self.bus.dma_unmap(d.iova, d.mem.len()).unwrap();
        }
        ans
    }

    /// Reads back the entry of the current slot.
    pub fn collect(&self, outlen: usize, outc: Option<&Dma>) -> Answer {
        let e = self.entry_off();
        let so = self.cmdq.mem.bytes(e + 0x3f, 1)[0];
        if so & 1 == 1 {
            return Answer::Pending;
        }
        let ds = DeliveryStatus::from_value(so >> 1).expect("known delivery status");
        if ds != DeliveryStatus::Ok {
            return Answer::Delivery(ds);
        }
        let mut out = self.cmdq.mem.bytes(e + 0x20, 16);
        if let Some(c) = outc {
            let mut k = 0;
            while out.len() < outlen {
                let take = (outlen - out.len()).min(512);
                out.extend(c.mem.bytes(k * BLOCK_STRIDE, take));
                k += 1;
            }
        }
        out.truncate(outlen.max(16));
        Answer::Out(out)
    }

    /// Executes and returns `(status, syndrome, output)`.
    pub fn cmd(&mut self, input: &[u8], outlen: usize) -> (u8, u32, Vec<u8>) {
        let a = self.exec(input, outlen);
        let (s, y) = a.status();
        (s, y, a.out().to_vec())
    }

    /// Executes a command that must succeed; returns its output.
    pub fn ok(&mut self, input: &[u8], outlen: usize) -> Vec<u8> {
        let (s, y, out) = self.cmd(input, outlen);
        assert_eq!(
            (s, y),
            (0, 0),
            "{:?} failed",
            Opcode::from_value(cmd::opcode(input).unwrap())
        );
        out
    }

    /// Executes a command that must fail with this syndrome (and its status).
    pub fn fails(&mut self, input: &[u8], outlen: usize, synd: ferroverbs_sim::firmware::Syndrome) {
        let (s, y, _) = self.cmd(input, outlen);
        assert_eq!(
            (s, y),
            (synd.status().value(), synd.value()),
            "{:?}: expected {synd:?}",
            Opcode::from_value(cmd::opcode(input).unwrap_or(0))
        );
    }
}

use ferroverbs_hw::control::caps::{cmd_hca_cap, query_hca_cap_out, set_hca_cap_in};
use ferroverbs_hw::control::eq::create_eq_input;
use ferroverbs_hw::control::eq::create_eq_out;
use ferroverbs_hw::control::hca::{query_issi_out, set_issi_in};
use ferroverbs_hw::control::pages::{give_pages_in, manage_pages_in, query_pages_out};
use ferroverbs_hw::control::reg::host_endianness_input;
use ferroverbs_hw::control::uar_pd_td::alloc_uar_out;
use ferroverbs_hw::control::vport::{
    modify_nic_vport_context_in, modify_nic_vport_field_select, nic_vport_context,
};
use ferroverbs_hw::datapath::eqe::EventType;
use ferroverbs_hw::Field;

/// A zeroed input of the command's fixed size with its header.
pub fn input(op: Opcode, op_mod: u16) -> Vec<u8> {
    cmd::command_input(op, op_mod)
}

/// The fixed output size of a command (16 for one hw does not describe).
pub fn outlen(op: Opcode) -> usize {
    op.out_layout().map_or(16, |l| l.size())
}

/// Sets a field in a buffer.
pub fn set(buf: &mut [u8], f: Field, v: u64) {
    f.set(buf, v);
}

/// Reads a field.
pub fn get(buf: &[u8], f: Field) -> u64 {
    f.get(buf)
}

/// What [`Host::bring_up`] created.
#[derive(Clone, Copy, Debug)]
pub struct Up {
    pub uar: u32,
    pub eqn: u32,
    /// Index of the EQ buffer in `Host::mapped`.
    pub eq_buf: usize,
    pub eq_log_size: u8,
}

impl Host {
    /// Runs a fixed-size command with op_mod that must succeed.
    pub fn simple(&mut self, op: Opcode, op_mod: u16, f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut i = input(op, op_mod);
        f(&mut i);
        self.ok(&i, outlen(op))
    }

    /// QUERY_PAGES for a phase.
    pub fn query_pages(&mut self, op_mod: u16) -> i32 {
        let o = self.simple(Opcode::QueryPages, op_mod, |_| {});
        get(&o, query_pages_out::num_pages) as u32 as i32
    }

    /// Gives `n` fresh pages (one mapping); returns the mapping index.
    pub fn give(&mut self, n: usize) -> Option<usize> {
        if n == 0 {
            return None;
        }
        let m = self.map(n * 4096);
        let base = self.iova(m);
        let pages: Vec<u64> = (0..n as u64).map(|i| base + i * 4096).collect();
        self.ok(&give_pages_in(0, &pages), outlen(Opcode::ManagePages));
        Some(m)
    }

    /// TAKE `n` pages back; returns them.
    pub fn take(&mut self, n: usize) -> Vec<u64> {
        let mut i = input(Opcode::ManagePages, 2);
        set(&mut i, manage_pages_in::input_num_entries, n as u64);
        let o = self.ok(&i, 16 + 8 * n);
        ferroverbs_hw::control::pages::returned_pages(&o)
            .unwrap()
            .collect()
    }

    /// The general capabilities (current or maximum).
    pub fn caps(&mut self, cur: bool) -> Vec<u8> {
        let o = self.simple(Opcode::QueryHcaCap, u16::from(cur), |_| {});
        o[query_hca_cap_out::capability.byte_offset()..].to_vec()
    }

    /// Everything up to and including INIT_HCA, in rdma-core's order.
    pub fn init(&mut self) {
        self.init_with(|_| {});
    }

    /// [`Host::init`] with the general SET_HCA_CAP input changed by `f` first.
    pub fn init_with(&mut self, f: impl FnOnce(&mut Vec<u8>)) {
        self.simple(Opcode::EnableHca, 0, |_| {});
        let o = self.simple(Opcode::QueryIssi, 0, |_| {});
        assert_eq!(get(&o, query_issi_out::supported_issi_dw0) & 2, 2);
        self.simple(Opcode::SetIssi, 0, |i| set(i, set_issi_in::current_issi, 1));
        let boot = self.query_pages(1);
        self.give(boot as usize);
        self.ok(&host_endianness_input(), 16 + 16);
        let cur = self.caps(true);
        let mut i = input(Opcode::SetHcaCap, 0);
        let at = set_hca_cap_in::capability.byte_offset();
        i[at..at + cur.len()].copy_from_slice(&cur);
        set(
            &mut i,
            ferroverbs_hw::control::caps::in_command(cmd_hca_cap::cmdif_checksum),
            0,
        );
        f(&mut i);
        self.ok(&i, outlen(Opcode::SetHcaCap));
        let init = self.query_pages(2);
        self.give(init as usize);
        self.simple(Opcode::InitHca, 0, |_| {});
    }

    /// Enables RoCE on the NIC vport.
    pub fn roce_enable(&mut self) {
        self.simple(Opcode::ModifyNicVportContext, 0, |i| {
            set(
                i,
                modify_nic_vport_field_select::roce_en
                    .at(modify_nic_vport_context_in::field_select.bit),
                1,
            );
            set(
                i,
                nic_vport_context::roce_en.at(modify_nic_vport_context_in::nic_vport_context.bit),
                1,
            );
        });
    }

    /// ALLOC_UAR.
    pub fn alloc_uar(&mut self) -> u32 {
        let o = self.simple(Opcode::AllocUar, 0, |_| {});
        get(&o, alloc_uar_out::uar) as u32
    }

    /// Creates an EQ of `1 << log_size` entries on `uar`, vector `intr`, subscribed to
    /// `events`, owner bytes initialised to 1; returns (eqn, buffer mapping).
    pub fn create_eq(
        &mut self,
        log_size: u8,
        uar: u32,
        intr: u16,
        events: &[EventType],
    ) -> (u32, usize) {
        let bytes = 64usize << log_size;
        let m = self.map(bytes.max(4096));
        for k in 0..(1usize << log_size) {
            self.mapped[m].mem.write(k * 64 + 63, &[1]);
        }
        let npages = bytes.div_ceil(4096);
        let base = self.iova(m);
        let pas: Vec<u64> = (0..npages as u64).map(|i| base + i * 4096).collect();
        let i = create_eq_input(log_size, uar, intr, 0, events, &pas);
        let o = self.ok(&i, outlen(Opcode::CreateEq));
        (get(&o, create_eq_out::eq_number) as u32, m)
    }

    /// Writes an EQ doorbell: `(eqn << 24) | ci` at UAR + 0x40 (arm) or + 0x48.
    pub fn eq_doorbell(&self, uar: u32, eqn: u32, ci: u32, arm: bool) {
        let off = ferroverbs_hw::datapath::uar::uar_bar_offset(uar)
            + ferroverbs_hw::datapath::uar::eq_doorbell_offset(arm);
        self.bus.write32(
            off,
            ferroverbs_hw::datapath::uar::eq_doorbell_value(eqn as u8, ci),
        );
    }

    /// rdma-core's whole bring-up: init, RoCE enable, UAR, async EQ (CMD + PAGE_REQUEST)
    /// armed on vector 0.
    pub fn bring_up(&mut self) -> Up {
        self.init();
        self.roce_enable();
        let uar = self.alloc_uar();
        let (eqn, eq_buf) = self.create_eq(6, uar, 0, &[EventType::Cmd, EventType::PageRequest]);
        self.eq_doorbell(uar, eqn, 0, true);
        Up {
            uar,
            eqn,
            eq_buf,
            eq_log_size: 6,
        }
    }

    /// Linux-style teardown of what [`Host::bring_up`] made: destroy the EQ, free the
    /// UAR, TEARDOWN_HCA, take every page back, DISABLE_HCA, unmap everything.
    pub fn tear_down(&mut self, up: Up) {
        self.simple(Opcode::DestroyEq, 0, |i| {
            set(
                i,
                ferroverbs_hw::control::eq::destroy_eq_in::eq_number,
                up.eqn.into(),
            )
        });
        self.simple(Opcode::DeallocUar, 0, |i| {
            set(
                i,
                ferroverbs_hw::control::uar_pd_td::dealloc_uar_in::uar,
                up.uar.into(),
            )
        });
        self.simple(Opcode::TeardownHca, 0, |_| {});
        let held = self.sim.stats().pages_held as usize;
        let got = self.take(held);
        assert_eq!(got.len(), held);
        self.simple(Opcode::DisableHca, 0, |_| {});
        self.release();
    }
}

use ferroverbs_hw::control::cq::create_cq_input;
use ferroverbs_hw::control::cq::create_cq_out;
use ferroverbs_hw::control::mkey::{self as mk, create_mkey_in, create_mkey_out, mkc};
use ferroverbs_hw::control::qp::{self as qpm, ads, create_qp_out, qpc, QpTransition};
use ferroverbs_hw::control::roce::{ipv4_mapped_gid, set_roce_address_input, RoceAddr};
use ferroverbs_hw::control::uar_pd_td::alloc_pd_out;

/// A RoCE v2 IPv4 GID entry.
pub fn gid_v4(ip: [u8; 4], mac: [u8; 6]) -> RoceAddr {
    RoceAddr {
        gid: ipv4_mapped_gid(ip),
        mac,
        vlan: None,
        l3_type: 0,
        version: 2,
    }
}

/// Parameters of a test QP.
#[derive(Clone, Copy, Debug)]
pub struct QpSpec {
    pub st: u8,
    pub pd: u32,
    pub uar: u32,
    pub cqn: u32,
    pub log_sq: u8,
    pub log_rq: u8,
    pub rq_stride: u8,
}

impl Host {
    /// ALLOC_PD.
    pub fn alloc_pd(&mut self) -> u32 {
        let o = self.simple(Opcode::AllocPd, 0, |_| {});
        get(&o, alloc_pd_out::pd) as u32
    }

    /// A CREATE_CQ input for a 64-entry CQ in fresh memory (one page, doorbell record
    /// at the end of it).
    pub fn cq_input(&mut self, uar: u32, eqn: u32) -> Vec<u8> {
        let m = self.map(8192);
        let base = self.iova(m);
        create_cq_input(6, uar, eqn, base + 4096, 0, &[base])
    }

    /// CREATE_CQ; returns the CQN.
    pub fn create_cq(&mut self, uar: u32, eqn: u32) -> u32 {
        let i = self.cq_input(uar, eqn);
        let o = self.ok(&i, outlen(Opcode::CreateCq));
        get(&o, create_cq_out::cqn) as u32
    }

    /// A CREATE_MKEY input (MTT, 4 KiB pages, all access) over `npages` fresh pages.
    pub fn mkey_input(&mut self, pd: u32, npages: usize) -> Vec<u8> {
        let m = self.map(npages.max(1) * 4096);
        let base = self.iova(m);
        let mut i = mk::create_mkey_input(npages);
        let f = mk::in_command;
        set(&mut i, create_mkey_in::pg_access, 1);
        set(&mut i, f(mkc::access_mode_1_0), 1);
        for a in [mkc::lr, mkc::lw, mkc::rr, mkc::rw, mkc::a] {
            set(&mut i, f(a), 1);
        }
        set(&mut i, f(mkc::qpn), 0xff_ffff);
        set(&mut i, f(mkc::mkey_7_0), 0x42);
        set(&mut i, f(mkc::pd), pd.into());
        set(&mut i, f(mkc::start_addr), 0x7000_0000);
        set(&mut i, f(mkc::len), (npages * 4096) as u64);
        set(&mut i, f(mkc::log_page_size), 12);
        set(
            &mut i,
            f(mkc::translations_octword_size),
            mk::mtt_octwords(npages) as u64,
        );
        set(
            &mut i,
            create_mkey_in::translations_octword_actual_size,
            mk::mtt_octwords(npages) as u64,
        );
        for k in 0..npages {
            let at = mk::MTT_OFFSET + k * 8;
            i[at..at + 8].copy_from_slice(&((base + k as u64 * 4096) | 3).to_be_bytes());
        }
        i
    }

    /// CREATE_MKEY; returns the key.
    pub fn create_mkey(&mut self, pd: u32, npages: usize) -> u32 {
        let i = self.mkey_input(pd, npages);
        let o = self.ok(&i, outlen(Opcode::CreateMkey));
        (get(&o, create_mkey_out::mkey_index) as u32) << 8 | 0x42
    }

    /// A CREATE_QP input in fresh memory.
    pub fn qp_input(&mut self, s: QpSpec) -> Vec<u8> {
        let rq = (16usize << s.rq_stride) << s.log_rq;
        let sq = 64usize << s.log_sq;
        let bytes = rq + sq;
        let npages = bytes.div_ceil(4096);
        let m = self.map(npages * 4096 + 4096);
        let base = self.iova(m);
        let len = 0x110 + npages * 8;
        let mut i = cmd::new_input(Opcode::CreateQp, 0, len);
        let f = qpm::in_command;
        set(&mut i, f(qpc::st), s.st.into());
        set(&mut i, f(qpc::pm_state), 3);
        set(&mut i, f(qpc::pd), s.pd.into());
        set(&mut i, f(qpc::uar_page), s.uar.into());
        set(&mut i, f(qpc::log_rq_size), s.log_rq.into());
        set(&mut i, f(qpc::log_rq_stride), s.rq_stride.into());
        set(&mut i, f(qpc::log_sq_size), s.log_sq.into());
        set(&mut i, f(qpc::cqn_snd), s.cqn.into());
        set(&mut i, f(qpc::cqn_rcv), s.cqn.into());
        set(&mut i, f(qpc::dbr_addr), base + (npages * 4096) as u64);
        set(&mut i, f(qpc::user_index), 0x1234);
        for k in 0..npages {
            let at = 0x110 + k * 8;
            i[at..at + 8].copy_from_slice(&(base + k as u64 * 4096).to_be_bytes());
        }
        i
    }

    /// CREATE_QP; returns the QPN.
    pub fn create_qp(&mut self, s: QpSpec) -> u32 {
        let i = self.qp_input(s);
        let o = self.ok(&i, outlen(Opcode::CreateQp));
        get(&o, create_qp_out::qpn) as u32
    }

    /// Writes GID table entry `index` of `port`.
    pub fn set_gid(&mut self, index: u16, port: u8, addr: &RoceAddr) {
        self.ok(
            &set_roce_address_input(index, port, addr),
            outlen(Opcode::SetRoceAddress),
        );
    }

    /// A modify command for `qpn` with the mandatory fields of `t` filled in for an RC
    /// or UC QP on port 1 with GID index 0.
    pub fn transition_input(&self, t: QpTransition, qpn: u32, opt: u32) -> Vec<u8> {
        let mut i = qpm::transition_input(t, qpn, opt);
        let f = qpm::in_command;
        let p = qpm::primary_path;
        match t {
            QpTransition::Rst2Init => {
                set(&mut i, p(ads::vhca_port_num), 1);
                set(&mut i, f(qpc::rwe), 1);
                set(&mut i, f(qpc::pm_state), 3);
            }
            QpTransition::Init2Rtr => {
                set(&mut i, f(qpc::mtu), 5);
                set(&mut i, f(qpc::log_msg_max), 20);
                set(&mut i, f(qpc::remote_qpn), 0x4711);
                set(&mut i, f(qpc::next_rcv_psn), 0x1000);
                set(&mut i, f(qpc::min_rnr_nak), 12);
                set(&mut i, f(qpc::log_rra_max), 2);
                set(&mut i, p(ads::vhca_port_num), 1);
                set(&mut i, p(ads::src_addr_index), 0);
                set(&mut i, p(ads::hop_limit), 64);
                set(&mut i, p(ads::udp_sport), 0xdcba);
                set(&mut i, p(ads::rmac_47_32), 0x0200);
                set(&mut i, p(ads::rmac_31_0), 0x0000_0002);
            }
            QpTransition::Rtr2Rts => {
                set(&mut i, f(qpc::next_send_psn), 0x2000);
                set(&mut i, f(qpc::retry_count), 7);
                set(&mut i, f(qpc::rnr_retry), 7);
                set(&mut i, f(qpc::log_sra_max), 2);
                set(&mut i, p(ads::ack_timeout), 14);
            }
            _ => {}
        }
        i
    }

    /// Runs a transition; returns (status, syndrome).
    pub fn transition(&mut self, t: QpTransition, qpn: u32, opt: u32) -> (u8, u32) {
        let i = self.transition_input(t, qpn, opt);
        let (s, y, _) = self.cmd(&i, t.out_layout().size());
        (s, y)
    }

    /// QUERY_QP; returns the qpc bytes.
    pub fn query_qp(&mut self, qpn: u32) -> Vec<u8> {
        let o = self.simple(Opcode::QueryQp, 0, |i| {
            set(i, qpm::query_qp_in::qpn, qpn.into())
        });
        o[qpm::query_qp_out::qpc.byte_offset()..qpm::query_qp_out::qpc.end_byte()].to_vec()
    }
}
