//! Convolutions (NCHW, N-d): `Conv`, its gradients `ConvDataGrad` and
//! `ConvWeightsGrad`, and `ConvTranspose`.
//!
//! Every one of them is the same relation between a data tensor `x`
//! `[N, C_in, D1..]`, a weight `w` `[C_out, C_in / group, K1..]` and a result `y`
//! `[N, C_out, O1..]`, described by a [`ConvGeometry`]:
//! `y[n, o, p] = Σ_{c, k} w[o, c, k] · x[n, g·C_in/group + c, p·stride + k·dilation − pad_begin]`
//! (out-of-range `x` reads are zero; `g` is the group of output channel `o`).
//! `Conv` computes `y`; `ConvDataGrad` and `ConvTranspose` compute the adjoint
//! `x` from `y`; `ConvWeightsGrad` computes `w` from `x` and `y`.
//!
//! Attributes (ONNX names, as PopART): `strides`, `dilations` (one per spatial
//! dim, default 1), `pads` (`[begin_1.., end_1..]`, default 0), `group` (default
//! 1), `auto_pad` (`not_set`, `same_upper`, `same_lower`, `valid`); `ConvTranspose`
//! adds `output_padding` and `output_shape`.

use super::grad::spec;
use super::op_types;
use crate::{op_attrs, AttrSpec, GradRule, GradSource, InferContext, OpAttrs, OpDef, Result, TensorInfo};

op_attrs! {
    /// Attributes of `Conv`, its gradients and `ConvPow2Scaled`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct ConvAttrs {
        /// Per spatial dim (absent: 1).
        pub strides: Option<Vec<i64>> = None,
        /// Begin and end pads per spatial dim (absent: 0).
        pub pads: Option<Vec<i64>> = None,
        /// Per spatial dim (absent: 1).
        pub dilations: Option<Vec<i64>> = None,
        /// Channel groups.
        pub group: i64 = 1,
        /// `not_set`, `same_upper`, `same_lower` or `valid`.
        pub auto_pad: Option<String> = None,
    }
}

op_attrs! {
    /// Attributes of `ConvTranspose`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct ConvTransposeAttrs {
        /// Per spatial dim (absent: 1).
        pub strides: Option<Vec<i64>> = None,
        /// Begin and end pads per spatial dim (absent: 0).
        pub pads: Option<Vec<i64>> = None,
        /// Per spatial dim (absent: 1).
        pub dilations: Option<Vec<i64>> = None,
        /// Channel groups.
        pub group: i64 = 1,
        /// `not_set`, `same_upper`, `same_lower` or `valid`.
        pub auto_pad: Option<String> = None,
        /// Added to one side of the output.
        pub output_padding: Option<Vec<i64>> = None,
        /// The output's spatial shape.
        pub output_shape: Option<Vec<i64>> = None,
    }
}

op_types!(
    /// `Conv{strides, pads, dilations, group, auto_pad}(x, w)`: N-d convolution
    /// (cross-correlation, no bias) of `x` `[N, C_in, D..]` with `w`
    /// `[C_out, C_in / group, K..]`; PopXL `conv`
    Conv,
    /// `ConvDataGrad{conv attrs}(g, w, x)`: the gradient of `Conv` w.r.t. `x`
    /// (`x` is read for its shape only)
    ConvDataGrad,
    /// `ConvWeightsGrad{conv attrs}(g, x, w)`: the gradient of `Conv` w.r.t. `w`
    /// (`w` is read for its shape only)
    ConvWeightsGrad,
    /// `ConvTranspose{strides, pads, dilations, group, auto_pad, output_padding,
    /// output_shape}(x, w)`: the adjoint of a convolution, `x` `[N, C_in, D..]`
    /// with `w` `[C_in, C_out / group, K..]` giving `[N, C_out, O..]`;
    /// PopXL `conv_transpose`
    ConvTranspose,
);

/// How missing padding is chosen (ONNX `auto_pad`, PopXL `pad_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PadType {
    /// Use the explicit `pads`.
    #[default]
    NotSet,
    /// Output size `ceil(D / stride)`; an odd total padding puts the extra at the end.
    SameUpper,
    /// Output size `ceil(D / stride)`; an odd total padding puts the extra at the start.
    SameLower,
    /// No padding.
    Valid,
}

impl PadType {
    /// Parse PopXL's names (`not_set`, `same_upper`, `same_lower`, `valid`; case-insensitive,
    /// ONNX's `NOTSET` accepted).
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "not_set" | "notset" => Some(PadType::NotSet),
            "same_upper" => Some(PadType::SameUpper),
            "same_lower" => Some(PadType::SameLower),
            "valid" => Some(PadType::Valid),
            _ => None,
        }
    }

    /// PopXL's name.
    pub fn name(self) -> &'static str {
        match self {
            PadType::NotSet => "not_set",
            PadType::SameUpper => "same_upper",
            PadType::SameLower => "same_lower",
            PadType::Valid => "valid",
        }
    }
}

/// The resolved shape relation of a convolution between `x`, `w` and `y` (see the
/// module doc): everything a kernel needs, computed once from shapes and attributes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvGeometry {
    /// Batch size.
    pub batch: usize,
    /// Groups.
    pub group: usize,
    /// Channels of `x`.
    pub in_channels: usize,
    /// Channels of `y`.
    pub out_channels: usize,
    /// Spatial sizes of `x`.
    pub in_size: Vec<usize>,
    /// Spatial sizes of the kernel.
    pub kernel: Vec<usize>,
    /// Spatial sizes of `y`.
    pub out_size: Vec<usize>,
    /// Strides.
    pub strides: Vec<usize>,
    /// Dilations.
    pub dilations: Vec<usize>,
    /// Padding before each spatial dim (the padding after only sets `out_size`).
    pub pad_begin: Vec<usize>,
}

impl ConvGeometry {
    /// Shape of `x`.
    pub fn x_shape(&self) -> Vec<usize> {
        [vec![self.batch, self.in_channels], self.in_size.clone()].concat()
    }
    /// Shape of `w`.
    pub fn w_shape(&self) -> Vec<usize> {
        [vec![self.out_channels, self.in_channels / self.group], self.kernel.clone()].concat()
    }
    /// Shape of `y`.
    pub fn y_shape(&self) -> Vec<usize> {
        [vec![self.batch, self.out_channels], self.out_size.clone()].concat()
    }
    /// Multiply-adds of one `Conv` (and of each gradient).
    pub fn macs(&self) -> usize {
        self.batch
            * self.out_channels
            * (self.in_channels / self.group)
            * self.out_size.iter().product::<usize>()
            * self.kernel.iter().product::<usize>()
    }
}

/// Reads a per-spatial-dim integer list attribute (`default` for each dim when absent).
fn per_dim(
    values: &Option<Vec<i64>>,
    key: &str,
    n: usize,
    default: usize,
    min: usize,
) -> std::result::Result<Vec<usize>, String> {
    let Some(v) = values.as_deref() else {
        return Ok(vec![default; n]);
    };
    if v.is_empty() {
        return Ok(vec![default; n]);
    }
    if v.len() != n {
        return Err(format!("`{key}` has {} values, expected one per spatial dimension ({n})", v.len()));
    }
    v.iter()
        .map(|&d| match usize::try_from(d) {
            Ok(d) if d >= min => Ok(d),
            _ => Err(format!("`{key}` values must be at least {min}, got {v:?}")),
        })
        .collect()
}

/// The `auto_pad` attribute's value (absent: `not_set`).
pub fn pad_type(auto_pad: Option<&str>) -> std::result::Result<PadType, String> {
    match auto_pad {
        None => Ok(PadType::NotSet),
        Some(s) => PadType::parse(s)
            .ok_or_else(|| format!("unknown pad_type `{s}` (expected not_set, same_upper, same_lower or valid)")),
    }
}

/// Checks the data and weight shapes against each other and `group`; returns
/// (spatial dims, group).
fn check_x_w(
    x: &[usize],
    w: &[usize],
    c_x: usize,
    c_w: usize,
    group: i64,
) -> std::result::Result<(usize, usize), String> {
    if x.len() < 3 {
        return Err(format!("the input must be [N, C, D..] with at least one spatial dimension, got {x:?}"));
    }
    if w.len() != x.len() {
        return Err(format!("the weight {w:?} must have the input's rank {} ([C_out, C_in / group, K..])", x.len()));
    }
    let group = match group {
        g if g >= 1 => g as usize,
        g => return Err(format!("groups must be at least 1, got {g}")),
    };
    if !x[c_x].is_multiple_of(group) || !w[c_w].is_multiple_of(group) {
        return Err(format!(
            "groups ({group}) must divide the input channels ({}) and the weight's channel dimension ({})",
            x[c_x], w[c_w]
        ));
    }
    Ok((x.len() - 2, group))
}

/// `a + b` of geometry sizes, or an error saying that `what` overflows.
pub(crate) fn geo_add(a: usize, b: usize, i: usize, what: &str) -> std::result::Result<usize, String> {
    a.checked_add(b).ok_or_else(|| format!("spatial dimension {i}: {what} overflows ({a} + {b})"))
}

/// `a · b` of geometry sizes, or an error saying that `what` overflows.
pub(crate) fn geo_mul(a: usize, b: usize, i: usize, what: &str) -> std::result::Result<usize, String> {
    a.checked_mul(b).ok_or_else(|| format!("spatial dimension {i}: {what} overflows ({a} × {b})"))
}

/// The extent of kernel size `k` (at least 1) dilated by `dilation`: `(k - 1) · dilation + 1`.
pub(crate) fn dilated_extent(k: usize, dilation: usize, i: usize) -> std::result::Result<usize, String> {
    geo_add(geo_mul(k.saturating_sub(1), dilation, i, "the dilated kernel")?, 1, i, "the dilated kernel")
}

/// The input size `d` with `begin` and `end` padding.
pub(crate) fn padded_extent(d: usize, begin: usize, end: usize, i: usize) -> std::result::Result<usize, String> {
    geo_add(geo_add(d, begin, i, "the padded input")?, end, i, "the padded input")
}

/// The total `same_*` padding for input `d`, output `o`, stride `s` and kernel extent `k_eff`.
pub(crate) fn same_padding(d: usize, o: usize, s: usize, k_eff: usize, i: usize) -> std::result::Result<usize, String> {
    let span = geo_mul(o.max(1) - 1, s, i, "the `same` padding")?;
    Ok(geo_add(span, k_eff, i, "the `same` padding")?.saturating_sub(d))
}

/// The geometry of `Conv(x, w)` with `attrs`: checks channels, groups, padding
/// and that the (dilated) kernel fits the padded input.
pub fn conv_geometry(x: &[usize], w: &[usize], attrs: &ConvAttrs) -> std::result::Result<ConvGeometry, String> {
    let (n, group) = check_x_w(x, w, 1, 0, attrs.group)?;
    if w[1].checked_mul(group) != Some(x[1]) {
        return Err(format!(
            "the weight {w:?} expects {} per group × {group} groups input channels, the input {x:?} has {}",
            w[1], x[1]
        ));
    }
    let strides = per_dim(&attrs.strides, "strides", n, 1, 1)?;
    let dilations = per_dim(&attrs.dilations, "dilations", n, 1, 1)?;
    let pads = per_dim(&attrs.pads, "pads", 2 * n, 0, 0)?;
    let kernel = w[2..].to_vec();
    let in_size = x[2..].to_vec();
    if kernel.contains(&0) {
        return Err(format!("the kernel {kernel:?} has an empty dimension"));
    }
    let mut out_size = Vec::with_capacity(n);
    let mut pad_begin = Vec::with_capacity(n);
    let ptype = pad_type(attrs.auto_pad.as_deref())?;
    for i in 0..n {
        let k_eff = dilated_extent(kernel[i], dilations[i], i)?;
        let (d, s) = (in_size[i], strides[i]);
        let (o, pb) = match ptype {
            PadType::NotSet => {
                let padded = padded_extent(d, pads[i], pads[n + i], i)?;
                if padded < k_eff {
                    return Err(format!(
                        "spatial dimension {i}: the dilated kernel ({k_eff}) is larger than the padded input ({padded})"
                    ));
                }
                ((padded - k_eff) / s + 1, pads[i])
            }
            PadType::Valid => {
                if d < k_eff {
                    return Err(format!(
                        "spatial dimension {i}: the dilated kernel ({k_eff}) is larger than the input ({d})"
                    ));
                }
                ((d - k_eff) / s + 1, 0)
            }
            PadType::SameUpper | PadType::SameLower => {
                let o = d.div_ceil(s);
                let total = same_padding(d, o, s, k_eff, i)?;
                let begin = if ptype == PadType::SameUpper { total / 2 } else { total - total / 2 };
                (o, begin)
            }
        };
        out_size.push(o);
        pad_begin.push(pb);
    }
    Ok(ConvGeometry {
        batch: x[0],
        group,
        in_channels: x[1],
        out_channels: w[0],
        in_size,
        kernel,
        out_size,
        strides,
        dilations,
        pad_begin,
    })
}

/// The geometry of `ConvTranspose(x, w)` with `attrs`, as the convolution whose
/// data gradient it computes (its `x` is that convolution's `y`).
pub fn conv_transpose_geometry(
    x: &[usize],
    w: &[usize],
    attrs: &ConvTransposeAttrs,
) -> std::result::Result<ConvGeometry, String> {
    let (n, group) = check_x_w(x, w, 1, 0, attrs.group)?;
    if w[0] != x[1] {
        return Err(format!(
            "the weight {w:?} expects {} input channels ([C_in, C_out / group, K..]), the input {x:?} has {}",
            w[0], x[1]
        ));
    }
    let strides = per_dim(&attrs.strides, "strides", n, 1, 1)?;
    let dilations = per_dim(&attrs.dilations, "dilations", n, 1, 1)?;
    if dilations.iter().any(|&d| d != 1) {
        return Err(format!("conv_transpose supports dilation 1 only (as PopART), got {dilations:?}"));
    }
    let pads = per_dim(&attrs.pads, "pads", 2 * n, 0, 0)?;
    let output_padding = per_dim(&attrs.output_padding, "output_padding", n, 0, 0)?;
    let ptype = pad_type(attrs.auto_pad.as_deref())?;
    let output_shape: Vec<usize> = match attrs.output_shape.as_deref() {
        None | Some([]) => Vec::new(),
        Some(v) => {
            let spatial = if v.len() == n + 2 { &v[2..] } else { v };
            if spatial.len() != n || spatial.iter().any(|&d| d < 1) {
                return Err(format!("`output_shape` {v:?} must give {n} positive spatial sizes"));
            }
            spatial.iter().map(|&d| d as usize).collect()
        }
    };
    let kernel = w[2..].to_vec();
    if kernel.contains(&0) {
        return Err(format!("the kernel {kernel:?} has an empty dimension"));
    }
    let mut out_size = Vec::with_capacity(n);
    let mut pad_begin = Vec::with_capacity(n);
    for i in 0..n {
        let full = geo_mul(strides[i], x[2 + i].max(1) - 1, i, "the transposed output")?;
        let full = geo_add(
            geo_add(full, output_padding[i], i, "the transposed output")?,
            kernel[i],
            i,
            "the transposed output",
        )?;
        if output_shape.is_empty() {
            let cut = geo_add(pads[i], pads[n + i], i, "the padding")?;
            if full <= cut {
                return Err(format!("spatial dimension {i}: the padding ({cut}) leaves no output"));
            }
            out_size.push(full - cut);
            pad_begin.push(pads[i]);
        } else {
            if ptype == PadType::Valid {
                return Err("pad_type `valid` cannot be used with `output_shape`".into());
            }
            let o = output_shape[i];
            let total = full.checked_sub(o).ok_or_else(|| {
                format!("spatial dimension {i}: output_shape {o} is larger than the full transposed size {full}")
            })?;
            // As PopART: same_upper puts the odd padding at the start of the equivalent conv.
            out_size.push(o);
            pad_begin.push(if ptype == PadType::SameUpper { total.div_ceil(2) } else { total / 2 });
        }
    }
    Ok(ConvGeometry {
        batch: x[0],
        group,
        in_channels: w[1]
            .checked_mul(group)
            .ok_or_else(|| format!("{} output channels per group × {group} groups overflow", w[1]))?,
        out_channels: w[0],
        in_size: out_size,
        kernel,
        out_size: x[2..].to_vec(),
        strides,
        dilations,
        pad_begin,
    })
}

/// Checks `x` and `w` are floats of one dtype.
fn check_dtypes(ctx: &InferContext<'_>, a: &TensorInfo, b: &TensorInfo) -> Result<()> {
    if !a.dtype.is_floating_point() || a.dtype != b.dtype {
        return Err(ctx.error(format!("operands must be floats of one dtype, got {} and {}", a.dtype, b.dtype)));
    }
    Ok(())
}

/// The geometry of the forward conv behind a gradient op, from its `x` and `w`
/// inputs (at `xi`, `wi`), checked against the incoming gradient `g`.
fn grad_geometry(ctx: &InferContext<'_>, xi: u32, wi: u32) -> Result<ConvGeometry> {
    let (g, x, w) = (ctx.input(0)?, ctx.input(xi)?, ctx.input(wi)?);
    check_dtypes(ctx, g, x)?;
    check_dtypes(ctx, g, w)?;
    let geo = conv_geometry(&x.shape, &w.shape, &ConvAttrs::infer(ctx)?).map_err(|m| ctx.error(m))?;
    if g.shape != geo.y_shape() {
        return Err(ctx.error(format!("the gradient {g} does not match the convolution's output {:?}", geo.y_shape())));
    }
    Ok(geo)
}

impl OpDef for Conv {
    fn op_type(&self) -> &'static str {
        "Conv"
    }
    /// Output elements x the weight's window (input channels per group x kernel size) multiply-adds.
    fn cost(&self, ctx: &crate::CostContext<'_>) -> crate::OpCost {
        ctx.matrix(ctx.output_elements(0).saturating_mul(ctx.input_window(1)))
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        ConvAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let (x, w) = (ctx.input(0)?, ctx.input(1)?);
        check_dtypes(ctx, x, w)?;
        let geo = conv_geometry(&x.shape, &w.shape, &ConvAttrs::infer(ctx)?).map_err(|m| ctx.error(m))?;
        Ok(vec![TensorInfo::new(x.dtype, geo.y_shape())])
    }
    /// `ConvDataGrad(g, w, x)` for `x` and `ConvWeightsGrad(g, x, w)` for `w`, as PopART.
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        let Ok(a) = ConvAttrs::of(op) else { return GradRule::None };
        let attrs = a.to_attrs();
        let g = (0, GradSource::GradOfOutput(0));
        let data = [g, (1, GradSource::FwdInput(1)), (2, GradSource::FwdInput(0))];
        let weights = [g, (1, GradSource::FwdInput(0)), (2, GradSource::FwdInput(1))];
        GradRule::Ops(vec![
            spec(&ConvDataGrad, attrs.clone(), &data, &[(0, 0)]),
            spec(&ConvWeightsGrad, attrs, &weights, &[(0, 1)]),
        ])
    }
}

impl OpDef for ConvDataGrad {
    fn op_type(&self) -> &'static str {
        "ConvDataGrad"
    }
    /// The forward convolution's multiply-adds: `g`'s elements x the weight's window.
    fn cost(&self, ctx: &crate::CostContext<'_>) -> crate::OpCost {
        ctx.matrix(ctx.input_elements(0).saturating_mul(ctx.input_window(1)))
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        ConvAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let geo = grad_geometry(ctx, 2, 1)?;
        Ok(vec![TensorInfo::new(ctx.input(0)?.dtype, geo.x_shape())])
    }
}

impl OpDef for ConvWeightsGrad {
    fn op_type(&self) -> &'static str {
        "ConvWeightsGrad"
    }
    /// The forward convolution's multiply-adds: `g`'s elements x the weight's window (input 2, the weight).
    fn cost(&self, ctx: &crate::CostContext<'_>) -> crate::OpCost {
        ctx.matrix(ctx.input_elements(0).saturating_mul(ctx.input_window(2)))
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        ConvAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let geo = grad_geometry(ctx, 1, 2)?;
        Ok(vec![TensorInfo::new(ctx.input(0)?.dtype, geo.w_shape())])
    }
}

impl OpDef for ConvTranspose {
    fn op_type(&self) -> &'static str {
        "ConvTranspose"
    }
    /// As `ConvDataGrad`: input elements x the weight's window.
    fn cost(&self, ctx: &crate::CostContext<'_>) -> crate::OpCost {
        ctx.matrix(ctx.input_elements(0).saturating_mul(ctx.input_window(1)))
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        ConvTransposeAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let (x, w) = (ctx.input(0)?, ctx.input(1)?);
        check_dtypes(ctx, x, w)?;
        let geo =
            conv_transpose_geometry(&x.shape, &w.shape, &ConvTransposeAttrs::infer(ctx)?).map_err(|m| ctx.error(m))?;
        Ok(vec![TensorInfo::new(x.dtype, geo.x_shape())])
    }
}

pub(crate) const ALL: &[&dyn OpDef] = &[&Conv, &ConvDataGrad, &ConvWeightsGrad, &ConvTranspose];

#[cfg(test)]
mod tests {
    use super::*;

    fn conv() -> ConvAttrs {
        ConvAttrs::defaults().unwrap()
    }

    #[test]
    fn output_sizes_follow_padding_stride_and_dilation() {
        let a = ConvAttrs {
            strides: Some(vec![3, 3]),
            pads: Some(vec![1, 1, 1, 1]),
            dilations: Some(vec![2, 2]),
            group: 2,
            ..conv()
        };
        let g = conv_geometry(&[2, 10, 50, 50], &[20, 5, 5, 5], &a).unwrap();
        // torch: floor((50 + 2 - 2·4 - 1) / 3) + 1 = 15
        assert_eq!(g.y_shape(), vec![2, 20, 15, 15]);
        let same = ConvAttrs { strides: Some(vec![2]), auto_pad: Some("same_lower".into()), ..conv() };
        let g = conv_geometry(&[1, 1, 7], &[1, 1, 4], &same).unwrap();
        // out = 4, total pad = 3·2 + 4 − 7 = 3, same_lower puts 2 at the start.
        assert_eq!((g.out_size.clone(), g.pad_begin.clone()), (vec![4], vec![2]));
    }

    #[test]
    fn geometry_that_would_wrap_is_an_error() {
        let big = 1i64 << 62;
        let dilated = ConvAttrs { dilations: Some(vec![i64::MAX, 1]), ..conv() };
        let err = conv_geometry(&[1, 1, 5, 5], &[1, 1, 4, 3], &dilated).unwrap_err();
        assert!(err.contains("spatial dimension 0: the dilated kernel overflows"), "{err}");
        let padded = ConvAttrs { pads: Some(vec![i64::MAX, 0, i64::MAX, 0]), ..conv() };
        assert!(conv_geometry(&[1, 1, 5, 5], &[1, 1, 3, 3], &padded).unwrap_err().contains("padded input overflows"));
        // Groups times per-group channels wrapping to the input's channel count.
        let grouped = ConvAttrs { group: big, ..conv() };
        let err = conv_geometry(&[1, 0, 5, 5], &[0, 4, 3, 3], &grouped).unwrap_err();
        assert!(err.contains("per group"), "{err}");
        let t = ConvTransposeAttrs {
            strides: Some(vec![i64::MAX, 1]),
            output_padding: Some(vec![i64::MAX, 0]),
            ..ConvTransposeAttrs::defaults().unwrap()
        };
        assert!(conv_transpose_geometry(&[1, 1, 3, 5], &[1, 1, 3, 3], &t).unwrap_err().contains("overflows"));
    }

    #[test]
    fn mismatches_are_reported() {
        let a = conv();
        assert!(conv_geometry(&[1, 3, 5, 5], &[4, 2, 3, 3], &a).unwrap_err().contains("input channels"));
        assert!(conv_geometry(&[1, 3, 2, 2], &[4, 3, 3, 3], &a).unwrap_err().contains("larger than the padded input"));
        let g = ConvAttrs { group: 2, ..conv() };
        assert!(conv_geometry(&[1, 3, 5, 5], &[4, 1, 3, 3], &g).unwrap_err().contains("must divide"));
    }

    #[test]
    fn transpose_inverts_the_conv_shape() {
        let a = ConvTransposeAttrs {
            strides: Some(vec![2, 2]),
            pads: Some(vec![1, 1, 1, 1]),
            output_padding: Some(vec![1, 1]),
            ..ConvTransposeAttrs::defaults().unwrap()
        };
        // torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1): 5 -> 10
        let g = conv_transpose_geometry(&[2, 4, 5, 5], &[4, 6, 3, 3], &a).unwrap();
        assert_eq!(g.x_shape(), vec![2, 6, 10, 10]);
        assert_eq!(g.y_shape(), vec![2, 4, 5, 5]);
    }
}
