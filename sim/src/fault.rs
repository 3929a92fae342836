//! Fault injection: what a test can make the simulated device do wrong.
//!
//! The faults are those a driver must survive on real hardware (the simulator
//! checklist of `mlx5-controlpath.md` §9, item 7):
//!
//! * a command answered with a chosen command status and syndrome, or a chosen
//!   delivery status, without being executed ([`CommandFault`]);
//! * a command whose completion is held until the test releases it, or until device
//!   time has moved on by a given amount ([`DelayRule`]);
//! * a health counter that stops advancing (the "stuck firmware" sensor);
//! * a fatal health syndrome: `synd` and `ext_synd` in the health buffer with the
//!   reset-for-recovery (RFR) bit set;
//! * a device that has fallen off the bus: every BAR read returns `0xffffffff`
//!   (so `health.fw_ver` reads as the "PCI communication error" value), and writes,
//!   doorbells included, are ignored.

use std::time::Duration;

/// What an injected command fault answers instead of executing the command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultOutcome {
    /// Delivery OK, and the output header carries this command status and syndrome.
    Status {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: u8,
        /// 32-bit syndrome.
        syndrome: u32,
    },
    /// The transport-level delivery status in `status_own` (`MLX5_CMD_DELIVERY_STAT_*`);
    /// the output is not written.
    Delivery(u8),
}

/// Fail a chosen command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandFault {
    /// Opcode to match.
    pub opcode: u16,
    /// If set, only this op_mod matches.
    pub op_mod: Option<u16>,
    /// If set, only the n-th matching command (1-based, counted from when the fault
    /// was installed) fails and the fault is then removed; otherwise every match fails.
    pub nth: Option<u32>,
    /// The answer.
    pub outcome: FaultOutcome,
}

impl CommandFault {
    /// Every `opcode` command fails with `status` and `syndrome`.
    pub fn status(opcode: u16, status: u8, syndrome: u32) -> Self {
        CommandFault {
            opcode,
            op_mod: None,
            nth: None,
            outcome: FaultOutcome::Status { status, syndrome },
        }
    }

    /// Only the `n`-th occurrence (1-based) fails.
    pub fn nth(mut self, n: u32) -> Self {
        self.nth = Some(n);
        self
    }

    /// Only commands with this op_mod match.
    pub fn with_op_mod(mut self, op_mod: u16) -> Self {
        self.op_mod = Some(op_mod);
        self
    }
}

/// How long a delayed command is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// Until [`Sim::release_held`](crate::Sim::release_held).
    UntilReleased,
    /// Until device time has advanced by this much past the doorbell.
    For(Duration),
}

/// Delay the completion of matching commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DelayRule {
    /// Opcode to match; `None` matches every command.
    pub opcode: Option<u16>,
    /// If set, only the n-th matching command is held, and the rule is then removed.
    pub nth: Option<u32>,
    /// How long.
    pub hold: Hold,
}

/// A fatal condition written to the health buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FatalHealth {
    /// `health.synd` (e.g. 0x1 FW internal error, 0x7 iRISC not responding).
    pub synd: u8,
    /// `health.ext_synd`.
    pub ext_synd: u16,
    /// The RFR (reset for recovery requested) bit, bit 7 of `rfr_severity`: set, the
    /// condition is fatal to drivers; clear, a non-fatal report.
    pub rfr: bool,
}

#[derive(Clone, Debug)]
struct Counted<T> {
    rule: T,
    seen: u32,
}

/// The faults currently armed, and the bookkeeping to apply them.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    commands: Vec<Counted<CommandFault>>,
    delays: Vec<Counted<DelayRule>>,
    /// The health counter does not advance.
    pub(crate) health_stalled: bool,
    injected: u64,
}

impl Faults {
    /// Arms a command fault.
    pub fn add_command(&mut self, f: CommandFault) {
        self.commands.push(Counted { rule: f, seen: 0 });
    }

    /// Arms a delay rule.
    pub fn add_delay(&mut self, d: DelayRule) {
        self.delays.push(Counted { rule: d, seen: 0 });
    }

    /// Removes every command fault and delay rule.
    pub fn clear_commands(&mut self) {
        self.commands.clear();
        self.delays.clear();
    }

    /// Number of command faults and delays applied so far.
    pub fn injected(&self) -> u64 {
        self.injected
    }

    /// Whether the health counter is stalled.
    pub fn health_stalled(&self) -> bool {
        self.health_stalled
    }

    /// The outcome to apply to a command about to execute, if a fault matches.
    pub fn on_command(&mut self, opcode: u16, op_mod: u16) -> Option<FaultOutcome> {
        fire(&mut self.commands, &mut self.injected, |f| {
            (f.opcode == opcode && f.op_mod.is_none_or(|m| m == op_mod))
                .then_some((f.nth, f.outcome))
        })
    }

    /// Whether a command with this opcode must be held, and how.
    pub fn on_doorbell(&mut self, opcode: u16) -> Option<Hold> {
        fire(&mut self.delays, &mut self.injected, |d| {
            d.opcode
                .is_none_or(|o| o == opcode)
                .then_some((d.nth, d.hold))
        })
    }
}

/// Applies the first due rule of `rules`. `matching` gives, for a rule that matches,
/// its `nth` and what it does. Every matching rule counts the match; one without `nth`
/// fires every time, one with `nth` fires on its n-th match and is then removed. A
/// firing is counted in `injected`.
fn fire<T, O>(
    rules: &mut Vec<Counted<T>>,
    injected: &mut u64,
    matching: impl Fn(&T) -> Option<(Option<u32>, O)>,
) -> Option<O> {
    let mut hit = None;
    let mut remove = None;
    for (i, c) in rules.iter_mut().enumerate() {
        let Some((nth, outcome)) = matching(&c.rule) else {
            continue;
        };
        c.seen = c.seen.saturating_add(1);
        match nth {
            None => {
                hit = Some(outcome);
                break;
            }
            Some(n) if c.seen == n => {
                hit = Some(outcome);
                remove = Some(i);
                break;
            }
            Some(_) => {}
        }
    }
    if let Some(i) = remove {
        rules.remove(i);
    }
    if hit.is_some() {
        *injected += 1;
    }
    hit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nth_occurrence_fails_once() {
        let mut f = Faults::default();
        f.add_command(CommandFault::status(0x800, 0x8, 0x1234).nth(2));
        assert_eq!(f.on_command(0x800, 0), None);
        assert_eq!(f.on_command(0x801, 0), None);
        assert_eq!(
            f.on_command(0x800, 0),
            Some(FaultOutcome::Status {
                status: 8,
                syndrome: 0x1234
            })
        );
        assert_eq!(f.on_command(0x800, 0), None);
        assert_eq!(f.injected(), 1);
    }

    #[test]
    fn persistent_and_op_mod_filtered() {
        let mut f = Faults::default();
        f.add_command(CommandFault {
            opcode: 0x107,
            op_mod: Some(2),
            nth: None,
            outcome: FaultOutcome::Delivery(6),
        });
        assert_eq!(f.on_command(0x107, 1), None);
        assert_eq!(f.on_command(0x107, 2), Some(FaultOutcome::Delivery(6)));
        assert_eq!(f.on_command(0x107, 2), Some(FaultOutcome::Delivery(6)));
        f.clear_commands();
        assert_eq!(f.on_command(0x107, 2), None);
    }

    #[test]
    fn delays_match_by_opcode() {
        let mut f = Faults::default();
        f.add_delay(DelayRule {
            opcode: Some(0x104),
            nth: Some(1),
            hold: Hold::UntilReleased,
        });
        assert_eq!(f.on_doorbell(0x105), None);
        assert_eq!(f.on_doorbell(0x104), Some(Hold::UntilReleased));
        assert_eq!(f.on_doorbell(0x104), None);
    }
}
