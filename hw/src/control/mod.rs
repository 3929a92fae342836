//! The control layouts of the register model.

use crate::conformance::{CStruct, Constant};
use crate::field::Layout;

/// Every PRM layout of this part, for the conformance test.
pub const LAYOUTS: &[&Layout] = &[];
/// Every C structure of this part, for the conformance test.
pub const C_STRUCTS: &[CStruct] = &[];
/// Every named constant of this part, for the conformance test.
pub const CONSTANTS: &[Constant] = &[];
