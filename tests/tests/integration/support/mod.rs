//! Helpers shared by several test modules.

pub mod forward_backward;
