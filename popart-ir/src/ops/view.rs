//! In-place views (PopXL's `reshape_`, `flatten_`, `transpose_`, `T_`,
//! `slice_`, `concat_`): the output is an alias of the input, so a later
//! in-place write through either is seen through the other, in schedule order.
//!
//! Two kinds, told apart by [`is_strided_view`]:
//! - `ReshapeInplace` holds exactly the input's bytes: its output is one buffer
//!   with its input (an [`OpDef::aliases`] pair, as in-place updates), and runs
//!   no kernel.
//! - `TransposeInplace`, `SliceInplace` and `ConcatInplace` reorder or select
//!   elements. They declare their aliases too (the ambiguity check, pruning and
//!   the constant check follow them), and the `materialize-views` pass of
//!   `popart-transforms` replaces each by its out-of-place op plus the copies
//!   that keep the view and its base in sync after every in-place write to
//!   either: lowering never sees them.
//!
//! `SliceUpdateInplace(base, update)` writes `update` into the slice of `base`
//! given by the `Slice` attributes (the write-back of a `slice_` view).
//!
//! In-place variants have no gradient (PopXL marks them ✗) except
//! `ConcatInplace`, differentiated as `Concat`.

use super::op_types;
use super::shape::{slice_dims, Reshape, Slice, Transpose};
use crate::{op_attrs, Alias, AttrSpec, Attributes, GradRule, InferContext, OpAttrs, OpDef, Result, TensorInfo};

op_attrs! {
    /// Attributes of `ConcatInplace`.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct ConcatInplaceAttrs {
        /// The axis joined along.
        pub axis: i64,
        /// The number of inputs (each aliases its region of the output).
        pub num_inputs: i64,
    }
}

op_types!(
    /// `reshape_`: a view of input 0 with attribute `shape` (one `-1` allowed)
    ReshapeInplace,
    /// `transpose_`: a view of input 0 permuted by `perm` (empty = reverse)
    TransposeInplace,
    /// `slice_`: a view of the `starts/ends/steps/axes` slice of input 0
    SliceInplace,
    /// `concat_`: a view of inputs 0..n joined along `axis`
    ConcatInplace,
    /// writes input 1 into the `starts/ends/steps/axes` slice of input 0, in place
    SliceUpdateInplace,
);

/// True for the view ops whose output is not the input's bytes in order
/// (`TransposeInplace`, `SliceInplace`, `ConcatInplace`): the ones the
/// `materialize-views` pass rewrites before lowering.
pub fn is_strided_view(def: &dyn OpDef) -> bool {
    def.is::<TransposeInplace>() || def.is::<SliceInplace>() || def.is::<ConcatInplace>()
}

impl OpDef for ReshapeInplace {
    fn op_type(&self) -> &'static str {
        "ReshapeInplace"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        super::shape::ReshapeAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        Reshape.infer(ctx)
    }
    fn aliases(&self, _attrs: &Attributes) -> Vec<Alias> {
        vec![Alias::identical(0, 0)]
    }
}

impl OpDef for TransposeInplace {
    fn op_type(&self) -> &'static str {
        "TransposeInplace"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        super::shape::TransposeAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        Transpose.infer(ctx)
    }
    fn aliases(&self, _attrs: &Attributes) -> Vec<Alias> {
        vec![Alias::region(0, 0)]
    }
}

impl OpDef for SliceInplace {
    fn op_type(&self) -> &'static str {
        "SliceInplace"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        super::shape::SliceAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        Slice.infer(ctx)
    }
    fn aliases(&self, _attrs: &Attributes) -> Vec<Alias> {
        vec![Alias::region(0, 0)]
    }
}

impl OpDef for ConcatInplace {
    fn op_type(&self) -> &'static str {
        "ConcatInplace"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        ConcatInplaceAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let a = ConcatInplaceAttrs::infer(ctx)?;
        let out = super::shape::concat_infer(ctx, a.axis)?;
        let n = a.num_inputs;
        if usize::try_from(n).ok() != Some(ctx.num_inputs()) {
            return Err(ctx.error(format!("attribute num_inputs = {n}, but {} inputs are connected", ctx.num_inputs())));
        }
        Ok(out)
    }
    /// Every input aliases its region of the output (attribute `num_inputs`,
    /// checked against the connected inputs by inference).
    fn aliases(&self, attrs: &Attributes) -> Vec<Alias> {
        // Attributes that do not decode are reported by inference; they alias nothing.
        let n = ConcatInplaceAttrs::from_attrs(attrs).ok().and_then(|a| u32::try_from(a.num_inputs).ok()).unwrap_or(0);
        (0..n).map(|i| Alias::region(i, 0)).collect()
    }
    /// As `Concat` (PopXL: `concat_` ✓).
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let Ok(a) = ConcatInplaceAttrs::of(cx.op) else { return GradRule::None };
        super::shape::concat_grad(cx, a.axis)
    }
}

impl OpDef for SliceUpdateInplace {
    fn op_type(&self) -> &'static str {
        "SliceUpdateInplace"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        super::shape::SliceAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let (base, update) = (ctx.input(0)?, ctx.input(1)?);
        let mut shape = base.shape.clone();
        for s in slice_dims(ctx, &super::shape::SliceAttrs::infer(ctx)?, &base.shape)? {
            shape[s.axis] = s.len;
        }
        if update.dtype != base.dtype || update.shape != shape {
            return Err(ctx.error(format!("update {update} does not match the slice {shape:?} of {base}")));
        }
        Ok(vec![base.clone()])
    }
    fn aliases(&self, _attrs: &Attributes) -> Vec<Alias> {
        vec![Alias::modified(0, 0)]
    }
}

/// The attributes of a `ConcatInplace` of `n` inputs along `axis`.
pub fn concat_inplace_attrs(axis: i64, n: usize) -> Attributes {
    ConcatInplaceAttrs { axis, num_inputs: i64::try_from(n).unwrap_or(i64::MAX) }.to_attrs()
}

/// The ops of this file.
pub(crate) const ALL: &[&dyn OpDef] =
    &[&ReshapeInplace, &TransposeInplace, &SliceInplace, &ConcatInplace, &SliceUpdateInplace];
