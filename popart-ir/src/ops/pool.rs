//! Pooling (NCHW, N-d): `MaxPool`, `AveragePool` and their gradients.
//!
//! Attributes (ONNX names, as PopART): `kernel_shape` (required), `strides`
//! (default 1, as PopXL), `pads` (`[begin_1.., end_1..]`, default 0),
//! `dilations` (default 1), `auto_pad` (as [`conv`](super::conv)), `ceil_mode`
//! (round the output size up, PopART's rule: `ceil((D + pads − K_eff) / s) + 1`).
//! PopXL's `out_pads` and `in_dilations` must keep their defaults (empty or
//! all 0 / all 1); other values are refused.
//!
//! Averages divide by the number of window elements inside the input (ONNX's
//! `count_include_pad = 0`; PopART refuses 1). A window entirely in the padding
//! (possible with `ceil_mode`) gives 0 for both pools. The max-pool gradient
//! goes to the first maximum of each window in row-major window order.

use super::conv::{dilated_extent, pad_type, padded_extent, same_padding, ConvGeometry, PadType};
use super::grad::spec;
use super::{op_types, require_float};
use crate::{op_attrs, AttrSpec, GradRule, GradSource, InferContext, OpAttrs, OpDef, Result, TensorInfo};

op_attrs! {
    /// Attributes of the pools and their gradients.
    #[derive(Clone, Debug, PartialEq)]
    pub struct PoolAttrs {
        /// The window.
        pub kernel_shape: Vec<i64>,
        /// Per spatial dim (absent: 1).
        pub strides: Option<Vec<i64>> = None,
        /// Begin and end pads (absent: 0).
        pub pads: Option<Vec<i64>> = None,
        /// Per spatial dim (absent: 1).
        pub dilations: Option<Vec<i64>> = None,
        /// As `Conv`.
        pub auto_pad: Option<String> = None,
        /// Round the output size up (non-zero).
        pub ceil_mode: i64 = 0,
        /// Must be zeros (PopXL's default).
        pub out_pads: Option<Vec<i64>> = None,
        /// Must be ones (PopXL's default).
        pub in_dilations: Option<Vec<i64>> = None,
    }
}

op_types!(
    /// `MaxPool{kernel_shape, strides, pads, dilations, auto_pad, ceil_mode}(x)`: the
    /// maximum of each window; PopXL `max_pool`
    MaxPool,
    /// `AveragePool{kernel_shape, strides, pads, dilations, auto_pad, ceil_mode}(x)`:
    /// the mean of each window's elements inside the input; PopXL `average_pool`
    AveragePool,
    /// `MaxPoolGrad{pool attrs}(g, x, y)`: `g` routed to the first maximum of each window
    MaxPoolGrad,
    /// `AveragePoolGrad{pool attrs}(g, x)`: `g` spread evenly over each window's
    /// elements inside the input (`x` is read for its shape only)
    AveragePoolGrad,
);

/// Reads a per-spatial-dim list attribute, defaulting each dim to `default`.
fn dims(
    values: &Option<Vec<i64>>,
    key: &str,
    n: usize,
    default: usize,
    min: usize,
) -> std::result::Result<Vec<usize>, String> {
    match values.as_deref() {
        None | Some([]) => Ok(vec![default; n]),
        Some(v) if v.len() != n => Err(format!("`{key}` has {} values, expected {n}", v.len())),
        Some(v) => v
            .iter()
            .map(|&d| {
                usize::try_from(d)
                    .ok()
                    .filter(|&d| d >= min)
                    .ok_or_else(|| format!("`{key}` values must be at least {min}, got {v:?}"))
            })
            .collect(),
    }
}

/// The geometry of a pool over `x` with `attrs`, as a depthwise convolution
/// (one group per channel) so kernels share the convolution's layout work.
pub fn pool_geometry(x: &[usize], attrs: &PoolAttrs) -> std::result::Result<ConvGeometry, String> {
    if x.len() < 3 {
        return Err(format!("the input must be [N, C, D..] with at least one spatial dimension, got {x:?}"));
    }
    let n = x.len() - 2;
    let kernel = match attrs.kernel_shape.as_slice() {
        k if k.len() == n && k.iter().all(|&v| v >= 1) => k.iter().map(|&v| v as usize).collect::<Vec<_>>(),
        other => return Err(format!("kernel_size must give {n} sizes of at least 1, got {other:?}")),
    };
    let strides = dims(&attrs.strides, "strides", n, 1, 1)?;
    let dilations = dims(&attrs.dilations, "dilations", n, 1, 1)?;
    let pads = dims(&attrs.pads, "pads", 2 * n, 0, 0)?;
    if dims(&attrs.out_pads, "out_pads", 2 * n, 0, 0)?.iter().any(|&p| p != 0) {
        return Err("out_pads other than 0 are not supported".into());
    }
    if dims(&attrs.in_dilations, "in_dilations", n, 1, 1)?.iter().any(|&d| d != 1) {
        return Err("in_dilations other than 1 are not supported".into());
    }
    let ceil = attrs.ceil_mode != 0;
    let ptype = pad_type(attrs.auto_pad.as_deref())?;
    let (mut out_size, mut pad_begin) = (Vec::new(), Vec::new());
    for i in 0..n {
        let k_eff = dilated_extent(kernel[i], dilations[i], i)?;
        let (d, s) = (x[2 + i], strides[i]);
        let (o, pb) = match ptype {
            PadType::NotSet => {
                let padded = padded_extent(d, pads[i], pads[n + i], i)?;
                if padded < k_eff {
                    return Err(format!(
                        "spatial dimension {i}: the window ({k_eff}) is larger than the padded input ({padded})"
                    ));
                }
                let span = padded - k_eff;
                (if ceil { span.div_ceil(s) } else { span / s } + 1, pads[i])
            }
            PadType::Valid => {
                if d < k_eff {
                    return Err(format!("spatial dimension {i}: the window ({k_eff}) is larger than the input ({d})"));
                }
                ((d - k_eff) / s + 1, 0)
            }
            PadType::SameUpper | PadType::SameLower => {
                let o = d.div_ceil(s);
                let total = same_padding(d, o, s, k_eff, i)?;
                (o, if ptype == PadType::SameUpper { total / 2 } else { total - total / 2 })
            }
        };
        out_size.push(o);
        pad_begin.push(pb);
    }
    Ok(ConvGeometry {
        batch: x[0],
        group: x[1],
        in_channels: x[1],
        out_channels: x[1],
        in_size: x[2..].to_vec(),
        kernel,
        out_size,
        strides,
        dilations,
        pad_begin,
    })
}

fn infer_pool(ctx: &InferContext<'_>, x: &TensorInfo) -> Result<ConvGeometry> {
    require_float(ctx, x, "the input")?;
    pool_geometry(&x.shape, &PoolAttrs::infer(ctx)?).map_err(|m| ctx.error(m))
}

impl OpDef for MaxPool {
    fn op_type(&self) -> &'static str {
        "MaxPool"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        PoolAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        Ok(vec![TensorInfo::new(x.dtype, infer_pool(ctx, x)?.y_shape())])
    }
    /// `MaxPoolGrad(g, x, y)`, as PopART.
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        let Ok(a) = PoolAttrs::of(op) else { return GradRule::None };
        let attrs = a.to_attrs();
        let ins = [(0, GradSource::GradOfOutput(0)), (1, GradSource::FwdInput(0)), (2, GradSource::FwdOutput(0))];
        GradRule::Ops(vec![spec(&MaxPoolGrad, attrs, &ins, &[(0, 0)])])
    }
}

impl OpDef for AveragePool {
    fn op_type(&self) -> &'static str {
        "AveragePool"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        PoolAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        Ok(vec![TensorInfo::new(x.dtype, infer_pool(ctx, x)?.y_shape())])
    }
    /// `AveragePoolGrad(g, x)`.
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        let Ok(a) = PoolAttrs::of(op) else { return GradRule::None };
        let attrs = a.to_attrs();
        let ins = [(0, GradSource::GradOfOutput(0)), (1, GradSource::FwdInput(0))];
        GradRule::Ops(vec![spec(&AveragePoolGrad, attrs, &ins, &[(0, 0)])])
    }
}

/// Checks a pool gradient's inputs; returns the input info.
fn infer_pool_grad(ctx: &InferContext<'_>, with_y: bool) -> Result<Vec<TensorInfo>> {
    let (g, x) = (ctx.input(0)?, ctx.input(1)?);
    let geo = infer_pool(ctx, x)?;
    let y_ok = !with_y || ctx.input(2)?.shape == geo.y_shape();
    if g.shape != geo.y_shape() || g.dtype != x.dtype || !y_ok {
        return Err(ctx.error(format!("the gradient {g} does not match the pool's output {:?}", geo.y_shape())));
    }
    Ok(vec![x.clone()])
}

impl OpDef for MaxPoolGrad {
    fn op_type(&self) -> &'static str {
        "MaxPoolGrad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        PoolAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        infer_pool_grad(ctx, true)
    }
}

impl OpDef for AveragePoolGrad {
    fn op_type(&self) -> &'static str {
        "AveragePoolGrad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        PoolAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        infer_pool_grad(ctx, false)
    }
}

pub(crate) const ALL: &[&dyn OpDef] = &[&MaxPool, &AveragePool, &MaxPoolGrad, &AveragePoolGrad];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_sizes() {
        let a = PoolAttrs {
            kernel_shape: vec![3, 3],
            strides: Some(vec![2, 2]),
            pads: Some(vec![1, 1, 1, 1]),
            dilations: None,
            auto_pad: None,
            ceil_mode: 0,
            out_pads: None,
            in_dilations: None,
        };
        assert_eq!(pool_geometry(&[1, 2, 8, 7], &a).unwrap().y_shape(), vec![1, 2, 4, 4]);
        let c = PoolAttrs { ceil_mode: 1, pads: Some(vec![]), ..a.clone() };
        // ceil((8 − 3) / 2) + 1 = 4, ceil((7 − 3) / 2) + 1 = 3
        assert_eq!(pool_geometry(&[1, 2, 8, 7], &c).unwrap().y_shape(), vec![1, 2, 4, 3]);
        let bad = PoolAttrs { in_dilations: Some(vec![2, 1]), ..a };
        assert!(pool_geometry(&[1, 2, 8, 7], &bad).unwrap_err().contains("in_dilations"));
    }
}
