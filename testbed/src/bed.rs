//! The bed: NICs on a fabric, each opened on the virtual clock with a PD.

use std::sync::Arc;

use ferroverbs::verbs::Pd;
use ferroverbs::{Context, Device, DeviceConfig, GidEntry, SteppedClock};
use ferroverbs_sim::link::faults::Impairments;
use ferroverbs_sim::{Fabric, Sim, SimBus, SimConfig};

use crate::Error;

/// Frames kept for the diagnostic of a failed [`Bed::run_until`] by default.
const DEFAULT_TRACE: usize = 32;

/// One simulated NIC of a bed, opened through the driver.
pub struct Nic {
    /// The simulated device (its statistics, firmware and fault controls).
    pub sim: Sim,
    /// The driver's context on it, on the simulator's virtual clock.
    pub ctx: &'static Context<SimBus>,
    /// A protection domain the bed's pairs use.
    pub pd: &'static Pd<'static, SimBus>,
    /// Its RoCEv2 GID (IPv4 10.0.0.n for NIC n - 1) and MAC address.
    pub gid: GidEntry,
}

/// Builds a [`Bed`].
#[derive(Clone, Debug)]
pub struct BedBuilder {
    seed: u64,
    nics: usize,
    impair: Option<Impairments>,
    trace: usize,
}

impl BedBuilder {
    /// The number of NICs (default 2; at most 254, one per IPv4 address 10.0.0.n).
    pub fn nics(mut self, n: usize) -> Self {
        self.nics = n;
        self
    }

    /// Impairs every link between two NICs, in both directions, each direction
    /// drawing from its own generator seeded by the bed's seed.
    pub fn impair(mut self, imp: Impairments) -> Self {
        self.impair = Some(imp);
        self
    }

    /// How many of the last frames a failed [`Bed::run_until`] shows (default 32).
    pub fn trace(mut self, frames: usize) -> Self {
        self.trace = frames;
        self
    }

    /// Creates the NICs, attaches them to the fabric and brings each up through the
    /// driver.
    pub fn build(self) -> Result<Bed, Error> {
        if self.nics == 0 || self.nics > 254 {
            return Err(Error::Config(
                "a bed has 1 to 254 NICs (IPv4 10.0.0.1 to 10.0.0.254)",
            ));
        }
        let fabric = Fabric::new(self.seed);
        fabric.keep_last(Some(self.trace));
        let mut nics = Vec::with_capacity(self.nics);
        for i in 0..self.nics {
            // Each NIC's own generator, a function of the bed's seed and its index.
            let seed = self.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i as u64 + 1);
            let sim = Sim::new(SimConfig::deterministic(seed, 1));
            fabric.attach(&sim);
            nics.push(open(sim, i as u8 + 1)?);
        }
        if let Some(imp) = &self.impair {
            for (i, a) in nics.iter().enumerate() {
                for b in &nics[i + 1..] {
                    fabric.impair_both(a.gid.mac, b.gid.mac, imp.clone());
                }
            }
        }
        Ok(Bed {
            fabric,
            nics,
            seed: self.seed,
        })
    }
}

/// Opens `sim` on its virtual clock with the GID 10.0.0.`n` and allocates a PD.
fn open(sim: Sim, n: u8) -> Result<Nic, Error> {
    let gid = GidEntry::ipv4(0, [10, 0, 0, n], sim.port_macs()[0]);
    let (now, adv) = (sim.clock().clone(), sim.clock().clone());
    let clock = SteppedClock::new(move || now.now(), move |d| adv.advance(d));
    let cfg = DeviceConfig::default()
        .with_clock(Arc::new(clock))
        .with_gid(gid);
    // The bed keeps its contexts and PDs for the life of the process: that is what
    // lets the QPs, CQs and MRs it hands out carry no lifetime.
    let ctx: &'static Context<SimBus> = Box::leak(Box::new(Device::open(sim.bus(), cfg)?));
    let pd: &'static Pd<'static, SimBus> = Box::leak(Box::new(ctx.alloc_pd()?));
    Ok(Nic { sim, ctx, pd, gid })
}

/// Simulated NICs on a seeded fabric, opened on the virtual clock (see the crate
/// documentation).
pub struct Bed {
    pub(crate) fabric: Fabric,
    pub(crate) nics: Vec<Nic>,
    pub(crate) seed: u64,
}

impl Bed {
    /// A bed of two NICs with perfect links.
    ///
    /// # Panics
    ///
    /// If bring-up fails (use [`Bed::builder`] to get the error instead).
    pub fn new(seed: u64) -> Bed {
        match Bed::builder(seed).build() {
            Ok(b) => b,
            Err(e) => panic!("test bed with seed {seed}: bring-up failed: {e}"),
        }
    }

    /// A builder of a bed with `seed` (two NICs, perfect links, until changed).
    pub fn builder(seed: u64) -> BedBuilder {
        BedBuilder {
            seed,
            nics: 2,
            impair: None,
            trace: DEFAULT_TRACE,
        }
    }

    /// The seed: a failed run prints it, and the same seed replays the same run.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The fabric (impairments, partitions, pcap, statistics).
    pub fn fabric(&self) -> &Fabric {
        &self.fabric
    }

    /// NIC `i` (0-based).
    ///
    /// # Panics
    ///
    /// If the bed has no NIC `i`.
    pub fn nic(&self, i: usize) -> &Nic {
        &self.nics[i]
    }

    /// The NICs.
    pub fn nics(&self) -> &[Nic] {
        &self.nics
    }
}
