//! Gradient checks of the elementwise_ext ops.

#[allow(unused_imports)]
use crate::harness::*;
