//! Gradient checks of the reduce_ext ops.

#[allow(unused_imports)]
use crate::harness::*;
