//! The simulated firmware: command execution, object tables, page accounting,
//! capabilities and the QP state machine.

pub mod pages;
pub mod qp_state;
pub mod table;
