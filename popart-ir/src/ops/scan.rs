//! Scans: `CumSum` along one axis.

use super::grad::spec;
use super::{infer_error, normalize_axis, op_types};
use crate::{op_attrs, AttrSpec, DataType, GradRule, GradSource, InferContext, OpAttrs, OpDef, Result, TensorInfo};

op_attrs! {
    /// Attributes of `CumSum` (PopART's `CumSumOp`).
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct CumSumAttrs {
        /// The summed axis (negative counts from the end).
        pub axis: i64 = 0,
        /// Leave each element out of its own sum (the first is 0).
        pub exclusive: bool = false,
        /// Sum from the end of the axis.
        pub reverse: bool = false,
    }
}

op_types!(
    /// `CumSum{axis, exclusive, reverse}(x)`: cumulative sum along `axis` (default 0);
    /// `exclusive` leaves each element out of its own sum (the first is 0), `reverse`
    /// sums from the end (PopXL `cumsum`, PopART's `CumSumOp` attributes)
    CumSum,
);

impl OpDef for CumSum {
    fn op_type(&self) -> &'static str {
        "CumSum"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        CumSumAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        if x.dtype == DataType::Bool {
            return Err(ctx.error("the input must be numeric, got bool"));
        }
        normalize_axis(CumSumAttrs::infer(ctx)?.axis, x.rank()).map_err(infer_error(ctx))?;
        Ok(vec![x.clone()])
    }
    /// The gradient of a cumulative sum is the cumulative sum of `g` in the other
    /// direction, with the same `exclusive`: `CumSum{axis, exclusive, !reverse}(g)`.
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        let Ok(a) = CumSumAttrs::of(op) else { return GradRule::None };
        let attrs = CumSumAttrs { reverse: !a.reverse, ..a }.to_attrs();
        GradRule::Ops(vec![spec(&CumSum, attrs, &[(0, GradSource::GradOfOutput(0))], &[(0, 0)])])
    }
}

pub(crate) const ALL: &[&dyn OpDef] = &[&CumSum];
