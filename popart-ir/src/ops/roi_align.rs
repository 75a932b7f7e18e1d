//! Region-of-interest pooling, PopART's `RoiAlignOp` (PopXL `roi_align`):
//! `RoiAlign` and its gradient `RoiAlignGrad`.
//!
//! `x` `[N, C, H, W]`, `rois` `[R, 4]` (`x1, y1, x2, y2` in input-image
//! coordinates, scaled by `spatial_scale`), `batch_index` `[R]` (integers)
//! give `[R, C, out_h, out_w]`: each output bin averages a grid of
//! `sampling_ratio × sampling_ratio` bilinear samples (with `sampling_ratio`
//! 0, `ceil(roi size / output size)` per axis), as torchvision's `RoIAlign`
//! with `aligned = False`, which PopXL's tests compare against: ROI sizes are
//! at least 1, samples more than one pixel outside the map read 0, samples
//! are clamped into the map. A `batch_index` outside `[0, N)` gives zeros.
//! The gradient flows to `x` only (the ROIs and indices get none, as PopART).

use super::grad::spec;
use super::{op_types, require_float};
use crate::{op_attrs, AttrSpec, GradRule, GradSource, InferContext, OpAttrs, OpDef, Result, TensorInfo};

op_attrs! {
    /// Attributes of `RoiAlign` and `RoiAlignGrad`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct RoiAlignAttrs {
        /// Output rows (positive).
        pub output_height: i64,
        /// Output columns (positive).
        pub output_width: i64,
        /// Samples per bin (0: adaptive).
        pub sampling_ratio: i64 = 0,
        /// Box coordinates to input pixels (finite).
        pub spatial_scale: f64,
    }
}

op_types!(
    /// `RoiAlign{output_height, output_width, spatial_scale, sampling_ratio}(x, rois, batch_index)`; PopXL `roi_align`
    RoiAlign,
    /// `RoiAlignGrad{roi attrs}(g, x, rois, batch_index)`: the adjoint w.r.t. `x` (`x` read for its shape only)
    RoiAlignGrad,
);

/// Checks the inputs; returns the output shape.
fn roi_shape(ctx: &InferContext<'_>, x: &TensorInfo, rois: &TensorInfo, idx: &TensorInfo) -> Result<Vec<usize>> {
    require_float(ctx, x, "the input")?;
    if x.rank() != 4 {
        return Err(ctx.error(format!("the input must be [N, C, H, W], got {x}")));
    }
    if rois.dtype != x.dtype || rois.rank() != 2 || rois.shape[1] != 4 {
        return Err(ctx.error(format!("rois must be a {} tensor [num_rois, 4], got {rois}", x.dtype)));
    }
    if !idx.dtype.is_int() || idx.shape != [rois.shape[0]] {
        return Err(ctx.error(format!("batch_index must be an integer tensor [{}], got {idx}", rois.shape[0])));
    }
    let a = RoiAlignAttrs::infer(ctx)?;
    let dim = |k: &str, v: i64| match usize::try_from(v) {
        Ok(v) if v >= 1 => Ok(v),
        _ => Err(ctx.error(format!("output_size must be positive, got {k} = {v}"))),
    };
    let (h, w) = (dim("output_height", a.output_height)?, dim("output_width", a.output_width)?);
    if a.sampling_ratio < 0 {
        return Err(ctx.error("sampling_ratio must be >= 0"));
    }
    if !a.spatial_scale.is_finite() {
        return Err(ctx.error(format!("spatial_scale must be finite, got {}", a.spatial_scale)));
    }
    Ok(vec![rois.shape[0], x.shape[1], h, w])
}

impl OpDef for RoiAlign {
    fn op_type(&self) -> &'static str {
        "RoiAlign"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        RoiAlignAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        Ok(vec![TensorInfo::new(x.dtype, roi_shape(ctx, x, ctx.input(1)?, ctx.input(2)?)?)])
    }
    /// `RoiAlignGrad(g, x, rois, batch_index)` for `x`.
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        let Ok(a) = RoiAlignAttrs::of(op) else { return GradRule::None };
        let attrs = a.to_attrs();
        let ins = [
            (0, GradSource::GradOfOutput(0)),
            (1, GradSource::FwdInput(0)),
            (2, GradSource::FwdInput(1)),
            (3, GradSource::FwdInput(2)),
        ];
        GradRule::Ops(vec![spec(&RoiAlignGrad, attrs, &ins, &[(0, 0)])])
    }
}

impl OpDef for RoiAlignGrad {
    fn op_type(&self) -> &'static str {
        "RoiAlignGrad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        RoiAlignAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let (g, x) = (ctx.input(0)?, ctx.input(1)?);
        let out = roi_shape(ctx, x, ctx.input(2)?, ctx.input(3)?)?;
        if g.shape != out || g.dtype != x.dtype {
            return Err(ctx.error(format!("the gradient {g} does not match the output {out:?}")));
        }
        Ok(vec![x.clone()])
    }
}

pub(crate) const ALL: &[&dyn OpDef] = &[&RoiAlign, &RoiAlignGrad];
