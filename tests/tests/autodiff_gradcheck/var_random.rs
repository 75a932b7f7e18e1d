//! Gradient checks of the var_random ops.

#[allow(unused_imports)]
use crate::harness::*;
