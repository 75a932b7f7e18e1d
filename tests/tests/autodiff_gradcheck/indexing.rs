//! Gradient checks of the indexing ops.

#[allow(unused_imports)]
use crate::harness::*;
