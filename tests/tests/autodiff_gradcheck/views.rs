//! Gradient checks of the views ops.

#[allow(unused_imports)]
use crate::harness::*;
