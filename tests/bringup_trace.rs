//! The order of the commands in bring-up and teardown, observed through the driver's
//! per-command tracing events (opcode, op_mod, duration, result). Alone in its binary:
//! a scoped tracing subscriber must not race other tests' callsite registrations.

mod bringup_support;
use bringup_support::*;

use std::fmt;
use std::sync::{Arc, Mutex};

use ferroverbs::Device;

/// A tracing subscriber that records the driver's per-command events.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<CmdEvent>>>);

#[derive(Clone, Debug, Default, PartialEq)]
struct CmdEvent {
    opcode: String,
    op_mod: u64,
    result: String,
    has_duration: bool,
}

impl tracing::field::Visit for CmdEvent {
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        match field.name() {
            "op_mod" => self.op_mod = value,
            "duration_us" => self.has_duration = true,
            _ => {}
        }
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "result" {
            self.result = value.to_string();
        }
    }
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        match field.name() {
            "opcode" => self.opcode = format!("{value:?}"),
            "result" => self.result = format!("{value:?}"),
            _ => {}
        }
    }
}

impl tracing::Subscriber for Recorder {
    fn register_callsite(
        &self,
        _: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::sometimes()
    }
    fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
        m.target() == "ferroverbs::cmd"
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, e: &tracing::Event<'_>) {
        let mut ev = CmdEvent::default();
        e.record(&mut ev);
        self.0.lock().unwrap().push(ev);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

impl Recorder {
    fn take(&self) -> Vec<(String, u64)> {
        let v: Vec<CmdEvent> = std::mem::take(&mut *self.0.lock().unwrap());
        for e in &v {
            assert!(e.has_duration, "{e:?} has a duration");
            assert_eq!(e.result, "ok", "{e:?}");
        }
        v.into_iter()
            .map(|e| {
                let name = e.opcode.split('(').next().unwrap_or("").to_string();
                (name, e.op_mod)
            })
            .collect()
    }
}

fn seq(v: &[(&str, u64)]) -> Vec<(String, u64)> {
    v.iter().map(|(n, m)| (n.to_string(), *m)).collect()
}

#[test]
fn bring_up_and_teardown_follow_the_firmware_order_with_one_trace_event_per_command() {
    let sim = sim();
    let rec = Recorder::default();
    tracing::subscriber::with_default(rec.clone(), || {
        let ctx = Device::open(sim.bus(), config(&sim)).unwrap();
        assert_eq!(
            rec.take(),
            seq(&[
                ("ENABLE_HCA", 0),
                ("QUERY_ISSI", 0),
                ("SET_ISSI", 0),
                ("QUERY_PAGES", 1),
                ("MANAGE_PAGES", 1),
                ("ACCESS_REG", 0),
                ("QUERY_HCA_CAP", 0),
                ("QUERY_HCA_CAP", 1),
                ("SET_HCA_CAP", 0),
                ("QUERY_HCA_CAP", 1),
                ("QUERY_HCA_CAP", 7),
                ("SET_HCA_CAP", 6),
                ("QUERY_HCA_CAP", 7),
                ("QUERY_HCA_CAP", 5),
                ("QUERY_HCA_CAP", 8),
                ("QUERY_HCA_CAP", 9),
                ("SET_HCA_CAP", 8),
                ("QUERY_HCA_CAP", 9),
                ("QUERY_PAGES", 2),
                ("MANAGE_PAGES", 1),
                ("INIT_HCA", 0),
                ("MODIFY_NIC_VPORT_CONTEXT", 0),
                ("SET_ROCE_ADDRESS", 0),
                ("ALLOC_UAR", 0),
                ("CREATE_EQ", 0),
            ])
        );
        ctx.close().unwrap();
        assert_eq!(
            rec.take(),
            seq(&[
                ("DESTROY_EQ", 0),
                ("DEALLOC_UAR", 0),
                ("SET_ROCE_ADDRESS", 0),
                ("MODIFY_NIC_VPORT_CONTEXT", 0),
                ("TEARDOWN_HCA", 0),
                ("MANAGE_PAGES", 2),
                ("DISABLE_HCA", 0),
            ])
        );
    });
    assert_nothing_left(&sim);
    // The firmware saw what the driver set: no checksums, 4 KiB UARs, RoCE source
    // ports chosen by software.
    assert_eq!(sim.stats().fw.failed, 0);
}
