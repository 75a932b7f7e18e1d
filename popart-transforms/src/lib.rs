//! Graph transforms and patterns over `popart-ir`, and the pass [`Pipeline`] that
//! prepares an IR for lowering.

#![warn(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod autodiff;
pub mod decompose_sum;
pub mod error;
pub mod inline;
pub mod merge_exchange;
pub mod patterns;
pub mod pipeline;
pub mod prepare;
pub mod prune;
pub mod views;

pub use autodiff::{
    autodiff, AutodiffError, AutodiffOutput, CallSite, ExpectedConnection, ExpectedConnectionType, GradGraphInfo,
    GradGraphInfos,
};
pub use error::{Malformed, Result, TransformError};
pub use pipeline::{Pass, PassOutcome, Pipeline};
