//! `fuse_masked_softmax`: the scaled, masked softmax of attention in one op.
//!
//! ```text
//! s = Mul(x, scale)            scale: a constant scalar (optional step)
//! w = Where(mask, s, fill)     mask: bool, broadcasting to x; fill: a constant scalar
//! y = Softmax{axis = last}(w)
//! ```
//!
//! becomes `y = MaskedSoftmax{scale, fill}(x, mask)`: one pass over each row
//! instead of three kernels and two intermediate tensors. It applies when `s` and
//! `w` are read by nothing else and are not graph outputs (after autodiff, the
//! gradient reads only `y` and `mask`), shapes do not broadcast `x` (its shape is
//! the softmax's), and everything is float of one dtype. The rewrite keeps every
//! value: `where(mask, x · scale, fill)` is computed exactly as before, per element.

use crate::Result;
use popart_ir::ops::all::{Mul, Softmax, Where};
use popart_ir::ops::nn::{MaskedSoftmax, MaskedSoftmaxAttrs, SoftmaxAttrs};
use popart_ir::{Graph, Ir, OpAttrs, OpId, TensorId, TensorKind};

use super::{fuse_ops, rewrite_matches, single_use};

use crate::pipeline::{Pass, PassOutcome};

/// The `fuse-masked-softmax` pattern (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FuseMaskedSoftmax;

impl FuseMaskedSoftmax {
    /// The pass's name in a pipeline.
    pub const NAME: &'static str = "fuse-masked-softmax";
}

impl Pass for FuseMaskedSoftmax {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&self, ir: &mut Ir) -> Result<PassOutcome> {
        let n = rewrite_matches(ir, find, rewrite)?;
        Ok(PassOutcome::changed(n > 0).with_note(format!("{n} softmaxes fused")))
    }
}

/// A match: the ops to remove and the fused op's operands.
struct Match {
    softmax: OpId,
    where_: OpId,
    mul: Option<OpId>,
    x: TensorId,
    mask: TensorId,
    scale: f64,
    fill: f64,
}

/// The value of a constant scalar tensor.
fn constant_scalar(g: &Graph, t: TensorId) -> Option<f64> {
    let t = g.tensor(t).ok()?;
    match &t.kind {
        TensorKind::Constant(data) if t.info.nelms() == 1 && t.info.dtype.is_floating_point() => {
            data.to_f64_vec().first().copied()
        }
        _ => None,
    }
}

fn find(g: &Graph, softmax: OpId) -> Option<Match> {
    let op = g.op(softmax).ok()?;
    if !op.is::<Softmax>() {
        return None;
    }
    let w = op.input(0)?;
    let info = &g.tensor(w).ok()?.info;
    let rank = info.rank() as i64;
    let axis = SoftmaxAttrs::of(op).ok()?.axis;
    if rank == 0 || (axis != -1 && axis != rank - 1) || !info.dtype.is_floating_point() || !single_use(g, w) {
        return None;
    }
    let where_op = g.op(g.tensor(w).ok()?.producer()?.op).ok()?;
    if !where_op.is::<Where>() {
        return None;
    }
    let (mask, s, f) = (where_op.input(0)?, where_op.input(1)?, where_op.input(2)?);
    let fill = constant_scalar(g, f)?;
    if g.tensor(s).ok()?.info != *info {
        return None;
    }
    let mut m = Match { softmax, where_: where_op.id, mul: None, x: s, mask, scale: 1.0, fill };
    if let Some(p) = g.tensor(s).ok()?.producer() {
        let mul = g.op(p.op).ok()?;
        if mul.is::<Mul>() && single_use(g, s) {
            let (a, b) = (mul.input(0)?, mul.input(1)?);
            let scaled = [(a, b), (b, a)].into_iter().find_map(|(x, c)| {
                let scale = constant_scalar(g, c)?;
                (g.tensor(x).ok()?.info == *info).then_some((x, scale))
            });
            if let Some((x, scale)) = scaled {
                (m.x, m.scale, m.mul) = (x, scale, Some(mul.id));
            }
        }
    }
    Some(m)
}

fn rewrite(g: &mut Graph, m: Match) -> Result<()> {
    let name = format!("{}_masked", g.op(m.softmax)?.name);
    let attrs = MaskedSoftmaxAttrs { scale: m.scale, fill: m.fill, axis: -1 }.to_attrs();
    // Consumers before producers: the softmax, the where, the mul.
    let mut ops = vec![m.softmax, m.where_];
    ops.extend(m.mul);
    fuse_ops(g, &ops, &MaskedSoftmax, attrs, &name, &[m.x, m.mask])?;
    Ok(())
}
