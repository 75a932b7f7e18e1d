//! `fuse_matmul_bias`: a linear layer's bias added by the GEMM.
//!
//! ```text
//! t = MatMul(a, b)        t read by nothing else, not a graph output
//! y = Add(t, c)           c: [n], n the last dim of t; y has t's shape
//! ```
//!
//! becomes `y = MatMulAdd(a, b, c)`: the kernel adds `c` to each output block
//! right after the GEMM writes it, while the block is in cache, instead of a
//! separate pass that reads `t` and writes `y`. After autodiff the gradients read
//! `a`, `b` and the incoming gradient, never `t`, so training graphs match. Values
//! are exactly those of the two ops: `c` is added to the finished product, as
//! `a·b + c` does (PopXL's programs compare with numpy at its default tolerance).
//!
//! Then a residual connection after such a layer:
//!
//! ```text
//! t = MatMulAdd(a, b, c)  t read by nothing else, not a graph output
//! y = Add(t, r)           r (either operand) with y's info, which is t's
//! ```
//!
//! becomes `y = MatMulAdd(a, b, c, r)`: the kernel adds `r` to each block after
//! the bias, so the values are again exactly those of the ops it replaces
//! (`(a·b + c) + r`), and the pass over `t` and `r` that the `Add` made is gone.

use crate::Result;
use popart_ir::ops::all::{Add, MatMul};
use popart_ir::ops::matmul::MatMulAdd;
use popart_ir::{Graph, Ir, OpId, TensorId};

use super::{fuse_ops, rewrite_matches, single_use};

use crate::pipeline::{Pass, PassOutcome};

/// The `fuse-matmul-bias` pattern (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FuseMatMulBias;

impl FuseMatMulBias {
    /// The pass's name in a pipeline.
    pub const NAME: &'static str = "fuse-matmul-bias";
}

impl Pass for FuseMatMulBias {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&self, ir: &mut Ir) -> Result<PassOutcome> {
        let n = rewrite_matches(ir, find, rewrite)?;
        let r = rewrite_matches(ir, find_residual, rewrite)?;
        Ok(PassOutcome::changed(n + r > 0).with_note(format!("{n} biases and {r} residuals fused")))
    }
}

struct Match {
    add: OpId,
    matmul: OpId,
    /// The fused op's inputs: `a`, `b`, `c` and the residual, if any.
    inputs: Vec<TensorId>,
}

fn find(g: &Graph, add: OpId) -> Option<Match> {
    let op = g.op(add).ok()?;
    if !op.is::<Add>() {
        return None;
    }
    let y = g.tensor(op.output(0)?).ok()?;
    let (x0, x1) = (op.input(0)?, op.input(1)?);
    [(x0, x1), (x1, x0)].into_iter().find_map(|(t, c)| {
        let tt = g.tensor(t).ok()?;
        let ct = g.tensor(c).ok()?;
        let mm = g.op(tt.producer()?.op).ok()?;
        let n = *tt.info.shape.last()?;
        let fits = mm.is::<MatMul>()
            && single_use(g, t)
            && tt.info == y.info
            && ct.info.dtype == y.info.dtype
            && y.info.dtype.is_floating_point()
            && ct.info.shape == [n];
        fits.then(|| Some(Match { add, matmul: mm.id, inputs: vec![mm.input(0)?, mm.input(1)?, c] }))?
    })
}

/// `Add(MatMulAdd(a, b, c), r)` (either order), `r` with the result's info.
fn find_residual(g: &Graph, add: OpId) -> Option<Match> {
    let op = g.op(add).ok()?;
    if !op.is::<Add>() {
        return None;
    }
    let y = g.tensor(op.output(0)?).ok()?;
    let (x0, x1) = (op.input(0)?, op.input(1)?);
    [(x0, x1), (x1, x0)].into_iter().find_map(|(t, r)| {
        let tt = g.tensor(t).ok()?;
        let mm = g.op(tt.producer()?.op).ok()?;
        let fits = mm.is::<MatMulAdd>()
            && mm.input(3).is_none()
            && single_use(g, t)
            && tt.info == y.info
            && g.tensor(r).ok()?.info == y.info;
        let inputs = vec![mm.input(0)?, mm.input(1)?, mm.input(2)?, r];
        fits.then_some(Match { add, matmul: mm.id, inputs })
    })
}

fn rewrite(g: &mut Graph, m: Match) -> Result<()> {
    let mm = g.op(m.matmul)?;
    let name = if mm.is::<MatMulAdd>() { format!("{}_residual", mm.name) } else { format!("{}_bias", mm.name) };
    let attrs = mm.attrs.clone();
    fuse_ops(g, &[m.add, m.matmul], &MatMulAdd, attrs, &name, &m.inputs)?;
    Ok(())
}
