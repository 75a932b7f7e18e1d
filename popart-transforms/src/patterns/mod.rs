//! Patterns: local rewrites applied to a prepared IR before lowering.
//!
//! Each pattern is a file with a function over the whole IR returning what it
//! changed, and a [`crate::pipeline::Pass`] running it. Patterns preserve the values every graph computes and every
//! variable's final value; they only change how the work is done.
//!
//! | pattern | rewrite |
//! |---|---|
//! | [`fuse_weight_update`] | `ScaledAddInplace(W, Call(..)[o])` whose gradient is a callee's `MatMulRhsGrad` becomes one `ScaledAddMatMulRhsGradInplace` inside the callee, accumulating into `W` |
//! | [`fuse_masked_softmax`] | `Softmax(Where(mask, Mul(x, scale), fill))` over the last axis becomes one `MaskedSoftmax{scale, fill}(x, mask)` |
//! | [`fuse_matmul_bias`] | `Add(MatMul(a, b), c)` with `c` a row vector becomes `MatMulAdd(a, b, c)` (the GEMM accumulates onto the bias) |

pub mod fuse_masked_softmax;
pub mod fuse_matmul_bias;
pub mod fuse_weight_update;

pub use fuse_masked_softmax::FuseMaskedSoftmax;
pub use fuse_matmul_bias::FuseMatMulBias;
pub use fuse_weight_update::{fuse_weight_updates, FuseWeightUpdates};
