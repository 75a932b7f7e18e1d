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
//! | [`fuse_matmul_bias`] | `Add(MatMul(a, b), c)` with `c` a row vector becomes `MatMulAdd(a, b, c)`, and `Add(MatMulAdd(a, b, c), r)` with `r` of the result's shape `MatMulAdd(a, b, c, r)` (the kernel adds the bias and the residual to each block after its product) |
//! | [`fuse_adam`] | `Accumulate{moving_average}(m, g)`, `Accumulate{moving_average_square}(v, g)`, `AdamUpdater` and `ScaledAddInplace(w, u)` (PopXL's Adam) become one `AdamStep(w, g, m, v, step?)`, bit for bit |
//! | [`fuse_bias_grad`] | `MatMulRhsGrad(g, x, W)` and `ReduceToShape{shape=[n]}(g)` (a layer's weight and bias gradients) become one `MatMulRhsBiasGrad(g, x, W)` with both outputs, the bias summed in the weight gradient's pass over `g` |
//! | [`fuse_residual_grad`] | `Sum(r, GroupNormGrad(..)[0])` (a residual connection's gradient and its norm's) becomes `GroupNormGrad(.., r)`, adding `r` as it writes `dx` |

pub mod fuse_adam;
pub mod fuse_all_reduce_update;
pub mod fuse_bias_grad;
pub mod fuse_masked_softmax;
pub mod fuse_matmul_bias;
pub mod fuse_residual_grad;
pub mod fuse_weight_update;

pub use fuse_adam::FuseAdam;
pub use fuse_all_reduce_update::FuseAllReduceUpdate;
pub use fuse_bias_grad::FuseBiasGrad;
pub use fuse_masked_softmax::FuseMaskedSoftmax;
pub use fuse_matmul_bias::FuseMatMulBias;
pub use fuse_residual_grad::FuseResidualGrad;
pub use fuse_weight_update::{fuse_weight_updates, FuseWeightUpdates};

use crate::Result;
use std::collections::HashSet;

use popart_ir::{Attributes, Graph, Ir, OpDef, OpId, TensorId};

/// `t` is read by exactly one op input and is not a graph output.
pub(crate) fn single_use(g: &Graph, t: TensorId) -> bool {
    g.tensor(t).is_ok_and(|t| t.consumers().len() == 1) && g.output_index(t).is_none()
}

/// Ops reachable from `from` through data edges and topological constraints.
pub(crate) fn reachable_from(g: &Graph, from: OpId) -> Result<HashSet<OpId>> {
    let mut seen = HashSet::new();
    let mut work = vec![from];
    while let Some(o) = work.pop() {
        let op = g.op(o)?;
        let mut next: Vec<OpId> = g.topo_cons().afters(o).iter().map(|c| c.op).collect();
        for t in op.outputs().tensors() {
            next.extend(g.tensor(t)?.consumers().iter().map(|p| p.op));
        }
        for n in next {
            if seen.insert(n) {
                work.push(n);
            }
        }
    }
    Ok(seen)
}

/// Run a local pattern over every graph: collect the matches `find` reports for
/// each op of a graph, then apply `rewrite` to each; returns the number rewritten.
/// `find` must report disjoint matches (no op in two of them).
pub(crate) fn rewrite_matches<M>(
    ir: &mut Ir,
    find: impl Fn(&Graph, OpId) -> Option<M>,
    mut rewrite: impl FnMut(&mut Graph, M) -> Result<()>,
) -> Result<usize> {
    let mut count = 0;
    for g in ir.graph_ids() {
        let matches: Vec<M> = {
            let graph = ir.graph(g)?;
            graph.ops().filter_map(|op| find(graph, op.id)).collect()
        };
        let graph = ir.graph_mut(g)?;
        for m in matches {
            rewrite(graph, m)?;
            count += 1;
        }
    }
    Ok(count)
}

/// Replace the connected ops `ops` by one new op of type `def` reading `inputs`
/// (at indices 0..) and producing the output tensor of `ops[0]`'s output 0 (kept:
/// its id, name and consumers do not change). The new op takes the placement of
/// `ops[0]` and every topological constraint of `ops` with other ops; the other
/// outputs of `ops` must be read by nothing but `ops`, and are erased with them.
pub(crate) fn fuse_ops(
    g: &mut Graph,
    ops: &[OpId],
    def: &'static dyn OpDef,
    attrs: Attributes,
    name: &str,
    inputs: &[TensorId],
) -> Result<OpId> {
    fuse_ops_keeping(g, ops, def, attrs, name, inputs, &[(ops[0], 0)])
}

/// [`fuse_ops`] keeping several outputs: the new op's output `i` is the tensor
/// that was output `outputs[i]` (an op of `ops` and its output index).
pub(crate) fn fuse_ops_keeping(
    g: &mut Graph,
    ops: &[OpId],
    def: &'static dyn OpDef,
    attrs: Attributes,
    name: &str,
    inputs: &[TensorId],
    outputs: &[(OpId, u32)],
) -> Result<OpId> {
    let placement = g.op(ops[0])?.placement;
    let fused = g.add_op(def, attrs, name);
    g.set_op_placement(fused, placement)?;
    let kept = outputs.iter().map(|&(op, i)| g.disconnect_output(op, i)).collect::<std::result::Result<Vec<_>, _>>()?;
    // Constraints among the fused ops vanish; the others move to the fused op.
    for &a in ops {
        for &b in ops {
            g.remove_topo_con(a, b);
        }
    }
    for &op in ops {
        g.transfer_topo_cons(op, fused)?;
    }
    // Consumers first: each op's outputs are then unread when it is erased.
    for &op in ops {
        g.erase_op_and_outputs(op)?;
    }
    for (i, &t) in inputs.iter().enumerate() {
        g.connect_input(fused, i as u32, t)?;
    }
    for (i, t) in kept.into_iter().enumerate() {
        g.connect_output(fused, i as u32, t)?;
    }
    Ok(fused)
}
