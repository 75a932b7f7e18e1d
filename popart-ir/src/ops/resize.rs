//! Resizing, PopART's `ResizeOp` (PopXL `interpolate`): `Resize` and its
//! gradient `ResizeGrad`.
//!
//! Every dim `d` of `x` is resized to `floor(len_d · scales[d])`, one dim after
//! the other (the map is separable). Output index `i` reads input coordinate
//! `c(i)` given by `coordinate_transformation_mode` (with `s` the scale and
//! `L` the input length): `half_pixel` `(i + 0.5) / s − 0.5`,
//! `pytorch_half_pixel` the same unless `L · s <= 1` (then 0), `asymmetric`
//! `i / s`, `align_corners` `i · (L − 1) / (L · s − 1)` (0 when `L · s == 1`).
//! `nearest` takes the element at `nearest_mode(c)` (`round_prefer_floor`,
//! `round_prefer_ceil`, `floor`, `ceil`) clamped into the input; `linear`
//! mixes the elements at `floor(c)` and `ceil(c)` (clamped) with weight
//! `max(c, 0) − floor(max(c, 0))` on the second, as PopART. `cubic` and
//! `tf_crop_and_resize` are refused (PopART's `cpu` path has no such kernel).
//! The gradient is the exact adjoint of that linear map.

use super::grad::spec;
use super::{op_types, require_float};
use crate::{op_attrs, AttrSpec, GradRule, GradSource, InferContext, OpAttrs, OpDef, Result, TensorInfo};

op_attrs! {
    /// Attributes of `Resize`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct ResizeAttrs {
        /// Per dim (absent: 1).
        pub scales: Option<Vec<f64>> = None,
        /// `nearest` or `linear`.
        pub mode: String = "nearest".to_string(),
        /// Rounding of nearest.
        pub nearest_mode: String = "round_prefer_floor".to_string(),
        /// Coordinate mapping.
        pub coordinate_transformation_mode: String = "half_pixel".to_string(),
    }
}

op_attrs! {
    /// Attributes of `ResizeGrad`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct ResizeGradAttrs {
        /// Per dim (absent: 1).
        pub scales: Option<Vec<f64>> = None,
        /// `nearest` or `linear`.
        pub mode: String = "nearest".to_string(),
        /// Rounding of nearest.
        pub nearest_mode: String = "round_prefer_floor".to_string(),
        /// Coordinate mapping.
        pub coordinate_transformation_mode: String = "half_pixel".to_string(),
        /// The forward input's shape (from the gradient rule's context).
        pub shape: Vec<i64>,
    }
}

op_types!(
    /// `Resize{scales, mode, nearest_mode, coordinate_transformation_mode}(x)`; PopXL `interpolate`
    Resize,
    /// `ResizeGrad{resize attrs, shape}(g)`: the adjoint of `Resize`, of the
    /// forward input's shape (attribute `shape`)
    ResizeGrad,
);

/// How output coordinates map to input coordinates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoordinateMode {
    /// `(i + 0.5) / s − 0.5`.
    HalfPixel,
    /// As `HalfPixel` unless the output length is 1 (then 0).
    PytorchHalfPixel,
    /// `i / s`.
    Asymmetric,
    /// `i · (L − 1) / (L·s − 1)`.
    AlignCorners,
}

/// How a coordinate is rounded by `nearest` resizing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NearestMode {
    /// Halves round down.
    RoundPreferFloor,
    /// Halves round up.
    RoundPreferCeil,
    /// Round down.
    Floor,
    /// Round up.
    Ceil,
}

/// The resolved attributes of a `Resize`.
#[derive(Clone, Debug, PartialEq)]
pub struct ResizeParams {
    /// One scale per dim.
    pub scales: Vec<f64>,
    /// `true`: linear; `false`: nearest.
    pub linear: bool,
    /// Rounding of `nearest`.
    pub nearest: NearestMode,
    /// Coordinate transformation.
    pub coordinates: CoordinateMode,
}

impl ResizeAttrs {
    /// The resolved attributes, checked against an input of `rank` dims.
    pub fn params(&self, rank: usize) -> std::result::Result<ResizeParams, String> {
        ResizeParams::new(
            self.scales.as_deref(),
            &self.mode,
            &self.nearest_mode,
            &self.coordinate_transformation_mode,
            rank,
        )
    }
}

impl ResizeGradAttrs {
    /// The resolved attributes of the forward `Resize`, checked against its
    /// input of `rank` dims.
    pub fn params(&self, rank: usize) -> std::result::Result<ResizeParams, String> {
        ResizeParams::new(
            self.scales.as_deref(),
            &self.mode,
            &self.nearest_mode,
            &self.coordinate_transformation_mode,
            rank,
        )
    }
}

impl ResizeParams {
    /// Checks the attribute values against an input of `rank` dims.
    fn new(
        scales: Option<&[f64]>,
        mode: &str,
        nearest_mode: &str,
        coordinate_transformation_mode: &str,
        rank: usize,
    ) -> std::result::Result<Self, String> {
        let scales = scales.map(|s| s.to_vec()).unwrap_or_else(|| vec![1.0; rank]);
        if scales.len() != rank || scales.iter().any(|&s| !(s > 0.0 && s.is_finite())) {
            return Err(format!("scale_factor must give {rank} positive finite scales (one per dim), got {scales:?}"));
        }
        let linear = match mode {
            "nearest" => false,
            "linear" => true,
            "cubic" => return Err("mode `cubic` is not supported (nearest and linear are)".into()),
            m => return Err(format!("unknown mode `{m}` (expected nearest, linear or cubic)")),
        };
        let nearest = match nearest_mode {
            "round_prefer_floor" => NearestMode::RoundPreferFloor,
            "round_prefer_ceil" => NearestMode::RoundPreferCeil,
            "floor" => NearestMode::Floor,
            "ceil" => NearestMode::Ceil,
            m => return Err(format!("unknown nearest_mode `{m}`")),
        };
        let coordinates = match coordinate_transformation_mode {
            "half_pixel" => CoordinateMode::HalfPixel,
            "pytorch_half_pixel" => CoordinateMode::PytorchHalfPixel,
            "asymmetric" => CoordinateMode::Asymmetric,
            "align_corners" => CoordinateMode::AlignCorners,
            "tf_crop_and_resize" => {
                return Err("coordinate_transformation_mode `tf_crop_and_resize` is not supported".into())
            }
            m => return Err(format!("unknown coordinate_transformation_mode `{m}`")),
        };
        Ok(ResizeParams { scales, linear, nearest, coordinates })
    }

    /// The output shape for input `shape`.
    pub fn out_shape(&self, shape: &[usize]) -> Vec<usize> {
        shape.iter().zip(&self.scales).map(|(&d, &s)| (d as f64 * s).floor() as usize).collect()
    }

    /// For one dim of input length `len` resized to `out`: per output index,
    /// `(i0, i1, w1)`: the output is `(1 − w1) · x[i0] + w1 · x[i1]`.
    pub fn taps(&self, dim: usize, len: usize, out: usize) -> Vec<(usize, usize, f64)> {
        // PopART computes coordinates in f32.
        let s = self.scales[dim] as f32;
        let last = len.saturating_sub(1) as f32;
        (0..out)
            .map(|i| {
                let i = i as f32;
                let c = match self.coordinates {
                    CoordinateMode::HalfPixel => (i + 0.5) / s - 0.5,
                    CoordinateMode::PytorchHalfPixel if len as f32 * s > 1.0 => (i + 0.5) / s - 0.5,
                    CoordinateMode::PytorchHalfPixel => 0.0,
                    CoordinateMode::Asymmetric => i / s,
                    CoordinateMode::AlignCorners if len as f32 * s == 1.0 => 0.0,
                    CoordinateMode::AlignCorners => i * last / (len as f32 * s - 1.0),
                };
                let clamp = |v: f32| v.clamp(0.0, last) as usize;
                if self.linear {
                    let cp = c.max(0.0);
                    (clamp(c.floor()), clamp(c.ceil()), (cp - cp.floor()) as f64)
                } else {
                    let r = match self.nearest {
                        NearestMode::RoundPreferFloor if c - c.floor() <= 0.5 => c.floor(),
                        NearestMode::RoundPreferFloor => c.ceil(),
                        NearestMode::RoundPreferCeil => c.round(),
                        NearestMode::Floor => c.floor(),
                        NearestMode::Ceil => c.ceil(),
                    };
                    (clamp(r), clamp(r), 0.0)
                }
            })
            .collect()
    }
}

fn infer_resize(
    ctx: &InferContext<'_>,
    x: &TensorInfo,
    p: std::result::Result<ResizeParams, String>,
) -> Result<Vec<usize>> {
    require_float(ctx, x, "the input")?;
    let p = p.map_err(|m| ctx.error(m))?;
    Ok(p.out_shape(&x.shape))
}

impl OpDef for Resize {
    fn op_type(&self) -> &'static str {
        "Resize"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        ResizeAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        let p = ResizeAttrs::infer(ctx)?.params(x.rank());
        Ok(vec![TensorInfo::new(x.dtype, infer_resize(ctx, x, p)?)])
    }
    /// `ResizeGrad{.., shape: x's}(g)`.
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        let (Ok(a), Some(shape)) = (ResizeAttrs::of(op), cx.input_shape(0)) else { return GradRule::None };
        let ResizeAttrs { scales, mode, nearest_mode, coordinate_transformation_mode } = a;
        let attrs = ResizeGradAttrs { scales, mode, nearest_mode, coordinate_transformation_mode, shape }.to_attrs();
        let ins = [(0, GradSource::GradOfOutput(0))];
        GradRule::Ops(vec![spec(&ResizeGrad, attrs, &ins, &[(0, 0)])])
    }
}

impl OpDef for ResizeGrad {
    fn op_type(&self) -> &'static str {
        "ResizeGrad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        ResizeGradAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let g = ctx.input(0)?;
        let a = ResizeGradAttrs::infer(ctx)?;
        let x = &TensorInfo::new(g.dtype, super::checked_shape(ctx, &a.shape, "shape")?);
        let out = infer_resize(ctx, x, a.params(x.rank()))?;
        if g.shape != out || g.dtype != x.dtype {
            return Err(ctx.error(format!("the gradient {g} does not match the resize output {out:?}")));
        }
        Ok(vec![x.clone()])
    }
}

pub(crate) const ALL: &[&dyn OpDef] = &[&Resize, &ResizeGrad];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_half_pixel_doubles() {
        let a = ResizeAttrs { scales: Some(vec![2.0]), ..ResizeAttrs::defaults().unwrap() };
        let p = a.params(1).unwrap();
        let idx: Vec<usize> = p.taps(0, 3, 6).iter().map(|t| t.0).collect();
        // c = (i + 0.5) / 2 − 0.5 = -0.25, 0.25, 0.75, 1.25, 1.75, 2.25 -> round_prefer_floor, clamped
        assert_eq!(idx, vec![0, 0, 1, 1, 2, 2]);
        assert_eq!(p.out_shape(&[3]), vec![6]);
        let bad = ResizeAttrs { scales: Some(vec![2.0, 1.0]), ..a };
        assert!(bad.params(1).is_err());
    }
}
