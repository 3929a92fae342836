//! Protection domains: `ALLOC_PD` / `DEALLOC_PD` (`mlx5_ifc.h` `alloc_pd_in`).

use ferroverbs_hw::control::cmd::{new_input, Opcode};
use ferroverbs_hw::control::uar_pd_td::{alloc_pd_out, dealloc_pd_in, dealloc_pd_out};
use ferroverbs_hw::Bus;

use super::{exec, Result};
use crate::Context;

/// A protection domain: memory regions and queue pairs of one PD may work together;
/// the device refuses a key of another PD (local or remote protection error).
///
/// Borrows the context; memory regions and queue pairs borrow it in turn, so it
/// outlives them. Dropping it issues `DEALLOC_PD`.
pub struct Pd<'ctx, B: Bus> {
    ctx: &'ctx Context<B>,
    pdn: u32,
    live: bool,
}

impl<B: Bus> std::fmt::Debug for Pd<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pd").field("pdn", &self.pdn).finish()
    }
}

impl<B: Bus> Context<B> {
    /// Allocates a protection domain (`ALLOC_PD`).
    pub fn alloc_pd(&self) -> Result<Pd<'_, B>> {
        let input = new_input(Opcode::AllocPd, 0, 16);
        let out = exec(self, &input, alloc_pd_out::SIZE)?;
        Ok(Pd {
            ctx: self,
            pdn: alloc_pd_out::pd.get(&out) as u32,
            live: true,
        })
    }
}

impl<'ctx, B: Bus> Pd<'ctx, B> {
    /// The PD number.
    pub fn pdn(&self) -> u32 {
        self.pdn
    }

    /// The context.
    pub fn context(&self) -> &'ctx Context<B> {
        self.ctx
    }

    /// Deallocates the PD now and reports the result (dropping does the same and
    /// only logs a failure).
    pub fn dealloc(mut self) -> Result<()> {
        self.live = false;
        self.release()
    }

    fn release(&self) -> Result<()> {
        let mut input = new_input(Opcode::DeallocPd, 0, dealloc_pd_in::SIZE);
        dealloc_pd_in::pd.set(&mut input, u64::from(self.pdn));
        exec(self.ctx, &input, dealloc_pd_out::SIZE).map(|_| ())
    }
}

impl<B: Bus> Drop for Pd<'_, B> {
    fn drop(&mut self) {
        if self.live {
            if let Err(e) = self.release() {
                tracing::warn!(pdn = self.pdn, error = %e, "DEALLOC_PD failed");
            }
        }
    }
}
