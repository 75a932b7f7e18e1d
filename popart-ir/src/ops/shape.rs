//! Shape ops: reshape, transpose, slice, concat, squeeze, gather.

pub use super::axes::{resolve_slices, transpose_perm, SliceDim};
use super::grad::spec;
use super::grad::{
    ConcatGrad, ConcatGradAttrs, GatherGrad, GatherGradAttrs, ReshapeGrad, ShapeAttrs, SliceGrad, SliceGradAttrs,
};
use super::{infer_error, normalize_axes, normalize_axis, op_types};
use crate::{
    op_attrs, Alias, AttrSpec, Attributes, GradContext, GradRule, GradSource, InferContext, OpAttrs, OpDef, Result,
    TensorInfo,
};

op_attrs! {
    /// Attributes of `Reshape` and `ReshapeInplace`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct ReshapeAttrs {
        /// The new shape (one `-1` allowed).
        pub shape: Vec<i64>,
    }
}

op_attrs! {
    /// Attributes of `Transpose` and `TransposeInplace`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct TransposeAttrs {
        /// The permutation (empty: reverse the axes).
        pub perm: Vec<i64> = Vec::new(),
    }
}

op_attrs! {
    /// Attributes of `Slice` and `SliceInplace` (numpy slice semantics, clamped).
    #[derive(Clone, Debug, PartialEq)]
    pub struct SliceAttrs {
        /// First index per sliced axis.
        pub starts: Vec<i64>,
        /// End index (exclusive) per sliced axis.
        pub ends: Vec<i64>,
        /// Steps (absent: 1).
        pub steps: Option<Vec<i64>> = None,
        /// Sliced axes (absent: `0..starts.len()`).
        pub axes: Option<Vec<i64>> = None,
    }
}

op_attrs! {
    /// Attributes of `Concat`.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct ConcatAttrs {
        /// The axis joined along.
        pub axis: i64,
    }
}

op_attrs! {
    /// Attributes of `Squeeze`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct SqueezeAttrs {
        /// Axes removed (empty: every size-1 axis).
        pub axes: Vec<i64> = Vec::new(),
    }
}

op_attrs! {
    /// Attributes of `Gather` and `TiedGather`.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct GatherAttrs {
        /// The gathered axis.
        pub axis: i64 = 0,
        /// Out-of-range indices give zeros (PopXL `zero_OOR`).
        pub zero_oor key "zero_OOR": bool = false,
    }
}

const G: GradSource = GradSource::GradOfOutput(0);

op_types!(
    /// view with a new shape (`shape` may hold one `-1`)
    Reshape,
    /// permute dims by `perm` (empty = reverse)
    Transpose,
    /// numpy slicing along `axes` with `starts`, `ends`, `steps`
    Slice,
    /// join n inputs along `axis`
    Concat,
    /// remove size-1 `axes` (empty = all size-1 axes)
    Squeeze,
    /// pick `indices` (integer tensor) along `axis` of `data`; an index outside
    /// `[-len, len)` gives a row of zeros (`zero_OOR` (bool, default false) says
    /// the user asked for that, so run-time index checks let it pass)
    Gather,
);

/// Resolve a reshape target with at most one `-1` against `nelms`.
pub fn resolve_reshape(target: &[i64], nelms: usize) -> std::result::Result<Vec<usize>, String> {
    let mut unknown = None;
    let mut known = 1usize;
    for (i, &d) in target.iter().enumerate() {
        match d {
            -1 if unknown.is_none() => unknown = Some(i),
            -1 => {
                return Err(format!("Reshape shape can contain at most one '-1' value: {target:?} has more than one"))
            }
            d if d < 0 => {
                return Err(format!(
                    "Invalid shape value in reshape: {d} in {target:?} (each must be >= 0, or -1 once)"
                ))
            }
            d => {
                let d = usize::try_from(d).map_err(|_| format!("dimension {d} does not fit this platform"))?;
                known = known.checked_mul(d).ok_or_else(|| format!("the size of {target:?} overflows"))?;
            }
        }
    }
    let mut shape: Vec<usize> = target.iter().map(|&d| usize::try_from(d).unwrap_or(0)).collect();
    if let Some(i) = unknown {
        if known == 0 || !nelms.is_multiple_of(known) {
            return Err(format!("cannot infer -1 in {target:?} for {nelms} elements"));
        }
        shape[i] = nelms / known;
    }
    if crate::size::checked_product(&shape) != Some(nelms) {
        return Err(format!("cannot reshape {nelms} elements into {target:?}"));
    }
    Ok(shape)
}

impl OpDef for Reshape {
    fn op_type(&self) -> &'static str {
        "Reshape"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        ReshapeAttrs::SCHEMA
    }
    /// Its output holds the input's bytes in order (a view for lowering).
    fn aliases(&self, _attrs: &Attributes) -> Vec<Alias> {
        vec![Alias::copy(0, 0)]
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        let shape = resolve_reshape(&ReshapeAttrs::infer(ctx)?.shape, x.nelms()).map_err(|m| ctx.error(m))?;
        Ok(vec![TensorInfo::new(x.dtype, shape)])
    }
    /// `ReshapeGrad{shape: x's}(g)`: back to the input's shape.
    fn grad(&self, cx: &GradContext<'_>) -> GradRule {
        reshape_back(cx)
    }
}

impl OpDef for Transpose {
    fn op_type(&self) -> &'static str {
        "Transpose"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        TransposeAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        let p = transpose_perm(&TransposeAttrs::infer(ctx)?.perm, x.rank()).map_err(infer_error(ctx))?;
        Ok(vec![TensorInfo::new(x.dtype, p.iter().map(|&i| x.shape[i]).collect::<Vec<_>>())])
    }
    /// `Transpose(g)` by the inverse permutation (reversal, the default, is its own inverse).
    fn grad(&self, cx: &GradContext<'_>) -> GradRule {
        let op = cx.op;
        let Ok(TransposeAttrs { perm }) = TransposeAttrs::of(op) else { return GradRule::None };
        let rank = perm.len() as i64;
        let mut inverse = vec![0i64; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            // Shape inference has validated `perm` as a permutation of `rank` axes.
            let p = if p < 0 { p + rank } else { p };
            if let Some(slot) = usize::try_from(p).ok().and_then(|p| inverse.get_mut(p)) {
                *slot = i as i64;
            }
        }
        let attrs = TransposeAttrs { perm: inverse }.to_attrs();
        GradRule::Ops(vec![spec(&Transpose, attrs, &[(0, G)], &[(0, 0)])])
    }
}

/// The slices of a `Slice` (or of the forward slice of a `SliceGrad`), `a`,
/// resolved against `shape`.
pub(crate) fn slice_dims(ctx: &InferContext<'_>, a: &SliceAttrs, shape: &[usize]) -> Result<Vec<SliceDim>> {
    resolve_slices(shape, &a.starts, &a.ends, a.steps.as_deref(), a.axes.as_deref()).map_err(infer_error(ctx))
}

impl OpDef for Slice {
    fn op_type(&self) -> &'static str {
        "Slice"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        SliceAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        let mut shape = x.shape.clone();
        for s in slice_dims(ctx, &SliceAttrs::infer(ctx)?, &x.shape)? {
            shape[s.axis] = s.len;
        }
        Ok(vec![TensorInfo::new(x.dtype, shape)])
    }
    /// `SliceGrad{starts, ends, steps, axes, shape: x's}(g)`: `g` placed into zeros of the input's shape.
    fn grad(&self, cx: &GradContext<'_>) -> GradRule {
        let (Ok(a), Some(shape)) = (SliceAttrs::of(cx.op), cx.input_shape(0)) else { return GradRule::None };
        let SliceAttrs { starts, ends, steps, axes } = a;
        let attrs = SliceGradAttrs { starts, ends, steps, axes, shape }.to_attrs();
        GradRule::Ops(vec![spec(&SliceGrad, attrs, &[(0, G)], &[(0, 0)])])
    }
}

impl OpDef for Concat {
    fn op_type(&self) -> &'static str {
        "Concat"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        ConcatAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        concat_infer(ctx, ConcatAttrs::infer(ctx)?.axis)
    }
    /// `ConcatGrad{axis, index, shape0, .., shape<n-1>}(g)` for each input
    /// `index`: the inputs' shapes are attributes.
    fn grad(&self, cx: &GradContext<'_>) -> GradRule {
        let Ok(ConcatAttrs { axis }) = ConcatAttrs::of(cx.op) else { return GradRule::None };
        concat_grad(cx, axis)
    }
}

/// The output of a concatenation of the connected inputs along `axis`
/// (`Concat` and `ConcatInplace`).
pub(crate) fn concat_infer(ctx: &InferContext<'_>, axis: i64) -> Result<Vec<TensorInfo>> {
    let ins = ctx.inputs();
    let Some((_, first)) = ins.first() else {
        return Err(ctx.error("concat needs at least one input"));
    };
    if ins.iter().enumerate().any(|(k, (i, _))| *i as usize != k) {
        return Err(ctx.error("concat inputs must be at indices 0..n"));
    }
    let axis = normalize_axis(axis, first.rank()).map_err(infer_error(ctx))?;
    let mut shape = first.shape.clone();
    shape[axis] = 0;
    for (i, t) in ins {
        let same_other_dims = t.rank() == first.rank()
            && t.shape.iter().zip(&first.shape).enumerate().all(|(d, (a, b))| d == axis || a == b);
        if t.dtype != first.dtype {
            let types: Vec<String> = ins.iter().map(|(_, t)| t.dtype.to_string()).collect();
            return Err(ctx.error(format!(
                "All inputs to a concat operation must have the same type: [{}] (input {i} is {}, input 0 {})",
                types.join(", "),
                t.dtype,
                first.dtype
            )));
        }
        if !same_other_dims {
            return Err(ctx.error(format!("input {i} ({t}) does not match input 0 ({first}) off axis {axis}")));
        }
        shape[axis] = shape[axis]
            .checked_add(t.shape[axis])
            .ok_or_else(|| ctx.error(format!("the concatenated size along axis {axis} overflows")))?;
    }
    Ok(vec![TensorInfo::new(first.dtype, shape)])
}

/// The gradient rule of a concatenation along `axis` (`Concat`, `ConcatInplace`).
pub(crate) fn concat_grad(cx: &GradContext<'_>, axis: i64) -> GradRule {
    let n = cx.op.inputs().len() as u32;
    let Some(shapes) = (0..n).map(|k| cx.input_shape(k)).collect::<Option<Vec<_>>>() else {
        return GradRule::None;
    };
    let specs = (0..n)
        .map(|i| {
            let attrs = ConcatGradAttrs { axis, index: i64::from(i), shapes: shapes.clone() }.to_attrs();
            spec(&ConcatGrad, attrs, &[(0, G)], &[(0, i)])
        })
        .collect();
    GradRule::Ops(specs)
}

/// `ReshapeGrad{shape: x's}(g)`: the gradient back in the input's shape.
fn reshape_back(cx: &GradContext<'_>) -> GradRule {
    let Some(shape) = cx.input_shape(0) else { return GradRule::None };
    GradRule::Ops(vec![spec(&ReshapeGrad, ShapeAttrs { shape }.to_attrs(), &[(0, G)], &[(0, 0)])])
}

impl OpDef for Squeeze {
    fn op_type(&self) -> &'static str {
        "Squeeze"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        SqueezeAttrs::SCHEMA
    }
    /// Its output holds the input's bytes in order (a view for lowering).
    fn aliases(&self, _attrs: &Attributes) -> Vec<Alias> {
        vec![Alias::copy(0, 0)]
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        let given = &SqueezeAttrs::infer(ctx)?.axes;
        let axes: Vec<usize> = if given.is_empty() {
            (0..x.rank()).filter(|&i| x.shape[i] == 1).collect()
        } else {
            normalize_axes(given, x.rank()).map_err(infer_error(ctx))?
        };
        if let Some(&a) = axes.iter().find(|&&a| x.shape[a] != 1) {
            return Err(ctx.error(format!("cannot squeeze axis {a} of size {}", x.shape[a])));
        }
        let shape: Vec<usize> = (0..x.rank()).filter(|i| !axes.contains(i)).map(|i| x.shape[i]).collect();
        Ok(vec![TensorInfo::new(x.dtype, shape)])
    }
    /// `ReshapeGrad{shape: x's}(g)`: the squeezed axes come back.
    fn grad(&self, cx: &GradContext<'_>) -> GradRule {
        reshape_back(cx)
    }
}

impl OpDef for Gather {
    fn op_type(&self) -> &'static str {
        "Gather"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        GatherAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let (x, idx) = (ctx.input(0)?, ctx.input(1)?);
        if !idx.dtype.is_int() {
            return Err(ctx.error(format!("indices must be an integer tensor, got {}", idx.dtype)));
        }
        let axis = normalize_axis(GatherAttrs::infer(ctx)?.axis, x.rank()).map_err(infer_error(ctx))?;
        let mut shape = x.shape[..axis].to_vec();
        shape.extend_from_slice(&idx.shape);
        shape.extend_from_slice(&x.shape[axis + 1..]);
        Ok(vec![TensorInfo::new(x.dtype, shape)])
    }
    /// `GatherGrad{axis, zero_OOR}(g, indices, data)`: scatter-add into zeros
    /// (out-of-range indices add nothing); the indices get none.
    fn grad(&self, cx: &GradContext<'_>) -> GradRule {
        let op = cx.op;
        let Ok(GatherAttrs { axis, zero_oor }) = GatherAttrs::of(op) else { return GradRule::None };
        let Some(shape) = cx.input_shape(0) else { return GradRule::None };
        let attrs = GatherGradAttrs { axis, zero_oor, shape }.to_attrs();
        let ins = [(0, G), (1, GradSource::FwdInput(1))];
        GradRule::Ops(vec![spec(&GatherGrad, attrs, &ins, &[(0, 0)])])
    }
}

pub(crate) const ALL: &[&dyn OpDef] = &[&Reshape, &Transpose, &Slice, &Concat, &Squeeze, &Gather];
