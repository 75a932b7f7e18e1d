//! The PopXL-shaped user facade.
