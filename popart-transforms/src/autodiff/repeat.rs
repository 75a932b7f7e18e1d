//! The gradient of `Repeat` ops (PopXL offers none; this is ours).
//!
//! `Repeat{graph=body, count=N}` with `m` body outputs has `m` loop-carried inputs
//! (body output `k` feeds body input `k` of the next iteration) followed by
//! loop-invariant inputs. The body is differentiated first, like any called graph;
//! a repeated body cannot grow outputs, so its gradient graph reads the body's
//! intermediates as forward inputs of the body's internal tensors (when every op
//! calling the body is a `Repeat`; otherwise it recomputes them from the body's
//! inputs). The op is then differentiated in three parts:
//!
//! 1. **Stash.** When the body's gradient graph reads carried inputs, outputs or
//!    intermediates, the forward op is rewritten in place into a `Repeat` of a
//!    wrapper body that calls the body and also carries an int32 iteration counter
//!    and, per carried input or intermediate read, a stash `[N, ..]` written at the
//!    counter by `DynamicUpdateInplace` (in place: no copy of the stash per
//!    iteration). Intermediates come from a copy of the body whose outputs are the
//!    body's followed by them, which the wrapper calls instead of the body: the
//!    backward pass recomputes nothing, as the unrolled layers would not. The op
//!    keeps its outputs `0..m` and gains the final counter and the stashes as
//!    outputs. The invariant inputs need no stash.
//! 2. **Reverse loop.** The gradient is a `Repeat`, `N` times, of a backward wrapper
//!    whose counter goes `N-1 .. 0`: it slices the stashes at the counter
//!    (`DynamicSlice`), calls the body's gradient graph, and hands the gradients of
//!    the carried inputs to the next (earlier) iteration, where they are the
//!    gradients of the body outputs. The body outputs the gradient graph reads are
//!    carried backwards too: output `k` of iteration `i` is input `k` of iteration
//!    `i + 1`, the previous backward step's slice (the op's output at the start).
//! 3. **Accumulation.** The gradients of the invariant inputs are summed over the
//!    iterations in carried accumulators that start from zeros. With stacked
//!    weights `W [L, ..]` read through `DynamicSlice(W, counter)`, each iteration
//!    contributes a `DynamicSliceGrad` (zeros but for its layer's slice); when the
//!    gradient graph returns it as such, the backward loop calls a copy of that
//!    graph returning the slice and its index instead and adds the slice into the
//!    accumulator in place (`DynamicSlice`, `Add`, `DynamicUpdateInplace`): no
//!    zero-padded tensor is built or added per iteration.
//!
//! The gradients of the initial carried inputs are the final carried gradients;
//! those of the invariants are the final accumulators.

use std::collections::BTreeSet;

use popart_ir::ops::binary::{Add, Sub};
use popart_ir::ops::control::{Call, CallAttrs, Repeat, RepeatAttrs};
use popart_ir::ops::grad::{Init, InitAttrs, InitType, Sum};
use popart_ir::ops::indexing::{DynamicSlice, DynamicSliceAttrs, DynamicUpdateInplace};
use popart_ir::ops::indexing_grad::DynamicSliceGrad;
use popart_ir::ops::indexing_grad::DynamicSliceGradAttrs;
use popart_ir::ops::shape::{Reshape, ReshapeAttrs};
use popart_ir::OpAttrs;
use popart_ir::{Attributes, DataType, GraphId, HostTensor, Ir, Op, OpDef, OpId, TensorId, TensorInfo, TensorKind};

use slotmap::SecondaryMap;

use super::analysis::topological_order;
use super::error::{AutodiffError, Result};
use super::grow::{dense, Builder, Grad};
use super::info::{name, ExpectedConnectionType, GradGraphInfo, GraphIo};
use crate::Malformed;

/// What the body's gradient graph reads and returns, by body input/output index.
#[derive(Debug, Default)]
struct Needs {
    /// Carried inputs whose value at every iteration is read: stashed (sorted).
    stash: Vec<usize>,
    /// Body outputs read, carried backwards (each also in `stash`; sorted).
    outputs: Vec<usize>,
    /// Body intermediates read (neither inputs nor outputs): stashed per
    /// iteration from a copy of the body that outputs them (first-read order).
    internals: Vec<TensorId>,
    /// Invariant inputs read (sorted).
    invariants: Vec<usize>,
    /// Floating point carried inputs: their gradients are carried backwards (sorted).
    carried_grads: Vec<usize>,
    /// Invariant inputs whose gradients are accumulated (sorted).
    accumulated: Vec<usize>,
}

impl Needs {
    fn of(b: &Builder<'_>, op: &Op, body: GraphId, info: &GradGraphInfo, op_ins: &[TensorId]) -> Result<Needs> {
        let bg = b.ir.graph(body)?;
        let (m, io) = (bg.outputs().len(), GraphIo::of(bg));
        let invalid = |reason: String| AutodiffError::InvalidGradGraphInfo { graph: bg.name().to_string(), reason };
        let (mut stash, mut outputs, mut invariants) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
        let mut internals = Vec::new();
        for e in &info.expected_inputs {
            let t = e.fwd_tensor;
            match (e.connection_type, io.input_index(t), io.output_index(t)) {
                (ExpectedConnectionType::FwdGrad, _, Some(_)) => {}
                (ExpectedConnectionType::Fwd, Some(i), _) if i < m => {
                    stash.insert(i);
                }
                (ExpectedConnectionType::Fwd, Some(i), _) => {
                    invariants.insert(i);
                }
                (ExpectedConnectionType::Fwd, None, Some(k)) => {
                    outputs.insert(k);
                    stash.insert(k);
                }
                (ExpectedConnectionType::Fwd, None, None) if bg.tensor(t).is_ok_and(|x| x.producer().is_some()) => {
                    if !internals.contains(&t) {
                        internals.push(t);
                    }
                }
                _ => {
                    return Err(invalid(format!(
                        "its gradient graph reads `{}`, not a body input or output",
                        name(bg, t)
                    )))
                }
            }
        }
        let is_float = |t: TensorId| bg.tensor(t).is_ok_and(|t| t.info.dtype.is_floating_point());
        let carried_grads: Vec<usize> = (0..m).filter(|&k| is_float(bg.inputs()[k])).collect();
        let mut accumulated = BTreeSet::new();
        for e in &info.expected_outputs {
            let i = match (e.connection_type, io.input_index(e.fwd_tensor)) {
                (ExpectedConnectionType::FwdGrad, Some(i)) => i,
                _ => {
                    let what = name(bg, e.fwd_tensor);
                    return Err(invalid(format!("its gradient graph returns `{what}`, not a body input gradient")));
                }
            };
            if i >= m && op_ins.get(i).is_some_and(|&x| b.wants(x)) {
                accumulated.insert(i);
            }
        }
        if op_ins.len() != bg.inputs().len() {
            return Err(b.not_differentiable(op, "its inputs do not match its body's"));
        }
        let v = |s: BTreeSet<usize>| s.into_iter().collect::<Vec<_>>();
        Ok(Needs {
            stash: v(stash),
            outputs: v(outputs),
            internals,
            invariants: v(invariants),
            carried_grads,
            accumulated: v(accumulated),
        })
    }
}

/// Connect `inputs` to a new op of `g` at indices `0..n`, run inference, and return its outputs.
fn create(
    ir: &mut Ir,
    g: GraphId,
    def: &'static dyn OpDef,
    attrs: Attributes,
    inputs: &[TensorId],
    name: &str,
) -> Result<Vec<TensorId>> {
    let ins: Vec<(u32, TensorId)> = inputs.iter().enumerate().map(|(i, &t)| (i as u32, t)).collect();
    let op = ir.create_op_with_def(g, def, attrs, &ins, name)?;
    Ok(ir.graph(g)?.op(op)?.outputs().tensors().collect())
}

/// [`create`] for an op with one output.
fn create1(
    ir: &mut Ir,
    g: GraphId,
    def: &'static dyn OpDef,
    attrs: Attributes,
    inputs: &[TensorId],
    name: &str,
) -> Result<TensorId> {
    let outs = create(ir, g, def, attrs, inputs, name)?;
    Ok(outs.first().copied().ok_or_else(|| Malformed::NoOutput { op: name.to_string() })?)
}

/// An int32 scalar constant of `g`.
fn int_constant(ir: &mut Ir, g: GraphId, base: &str, value: i32) -> Result<TensorId> {
    let data = HostTensor::from_f64_values(DataType::Int32, &[], &[f64::from(value)]);
    let graph = ir.graph_mut(g)?;
    let n = graph.unique_tensor_name(base);
    Ok(graph.add_tensor(&n, data.info.clone(), TensorKind::Constant(data))?)
}

fn ints(v: &[usize]) -> Vec<i64> {
    v.iter().map(|&d| d as i64).collect()
}

/// The attributes of a `Reshape` to `info`'s shape.
fn reshape_attrs(info: &TensorInfo) -> Attributes {
    ReshapeAttrs { shape: ints(&info.shape) }.to_attrs()
}

/// The attributes of an `Init` of `info`.
fn init_attrs(info: &TensorInfo) -> Attributes {
    InitAttrs { shape: ints(&info.shape), dtype: info.dtype, init_type: None }.to_attrs()
}

/// The attributes of a stash's `Init`: every row is written before the
/// backward reads it, so the buffer is not filled.
fn stash_init_attrs(info: &TensorInfo) -> Attributes {
    InitAttrs { shape: ints(&info.shape), dtype: info.dtype, init_type: Some(InitType::Undef) }.to_attrs()
}

/// `[count, ..shape]`: a stash of `info` per iteration.
fn stacked(info: &TensorInfo, count: usize) -> TensorInfo {
    let mut shape = Vec::with_capacity(info.shape.len() + 1);
    shape.push(count);
    shape.extend_from_slice(&info.shape);
    TensorInfo::new(info.dtype, shape)
}

/// The attributes of a dynamic slice or update of one row of a stash.
fn row_attrs() -> Attributes {
    DynamicSliceAttrs { axes: vec![0], sizes: vec![1], no_overlap: false }.to_attrs()
}

/// Row `counter` of `stash` in graph `g`, reshaped to `info`'s shape.
fn stash_row(ir: &mut Ir, g: GraphId, stash: TensorId, counter: TensorId, info: &TensorInfo) -> Result<TensorId> {
    let base = ir.graph(g)?.tensor(stash)?.name.clone();
    let row = create1(ir, g, &DynamicSlice, row_attrs(), &[stash, counter], &format!("{base}_row"))?;
    create1(ir, g, &Reshape, reshape_attrs(info), &[row], &format!("{base}_row_reshape"))
}

/// The wrapper body of a stashing forward `Repeat`: inputs `[carried.., counter,
/// stashes.., internal stashes.., invariants..]`, outputs `[body outputs..,
/// counter + 1, stashes.., internal stashes..]`, the stash of carried input `k`
/// written at the counter before the body runs, those of the body's
/// `internals` after it: the wrapper then calls `callee`, a copy of the body
/// whose outputs are the body's followed by the internals (`callee` is the body
/// itself when there are none).
fn stash_wrapper(
    ir: &mut Ir,
    body: GraphId,
    callee: GraphId,
    count: usize,
    stash: &[usize],
    internals: &[TensorId],
) -> Result<GraphId> {
    let bg = ir.graph(body)?;
    let m = bg.outputs().len();
    let internal_infos: Vec<(String, TensorInfo)> = internals
        .iter()
        .map(|&t| bg.tensor(t).map(|t| (t.name.clone(), t.info.clone())))
        .collect::<std::result::Result<_, _>>()?;
    let inputs: Vec<(String, TensorInfo)> = bg
        .inputs()
        .iter()
        .map(|&t| bg.tensor(t).map(|t| (t.name.clone(), t.info.clone())))
        .collect::<std::result::Result<_, _>>()?;
    let wname = ir.unique_graph_name(&format!("{}_stash", bg.name()));
    new_graph(ir, &wname, |ir, w| {
        let mut ins = Vec::with_capacity(inputs.len());
        let add_input = |ir: &mut Ir, base: &str, info: TensorInfo| -> Result<TensorId> {
            let g = ir.graph_mut(w)?;
            let n = g.unique_tensor_name(base);
            Ok(g.add_input(&n, info)?)
        };
        for (n, info) in &inputs[..m] {
            ins.push(add_input(ir, n, info.clone())?);
        }
        let counter = add_input(ir, "counter", TensorInfo::new(DataType::Int32, []))?;
        let mut stash_ins = Vec::with_capacity(stash.len());
        for &k in stash {
            let (n, info) = &inputs[k];
            stash_ins.push(add_input(ir, &format!("{n}_stash"), stacked(info, count))?);
        }
        let mut internal_ins = Vec::with_capacity(internals.len());
        for (n, info) in &internal_infos {
            internal_ins.push(add_input(ir, &format!("{n}_stash"), stacked(info, count))?);
        }
        for (n, info) in &inputs[m..] {
            ins.push(add_input(ir, n, info.clone())?);
        }
        let mut outs = Vec::with_capacity(m + 1 + stash.len());
        let mut updates = Vec::with_capacity(stash.len());
        for (&k, &s) in stash.iter().zip(&stash_ins) {
            let info = stacked(&inputs[k].1, 1);
            let row = create1(ir, w, &Reshape, reshape_attrs(&info), &[ins[k]], &format!("{}_row", inputs[k].0))?;
            let name = format!("{}_stash_update", inputs[k].0);
            updates.push(create1(ir, w, &DynamicUpdateInplace, row_attrs(), &[s, counter, row], &name)?);
        }
        let attrs = CallAttrs { graph: callee, modified: Vec::new() }.to_attrs();
        let called = create(ir, w, &Call, attrs, &ins, "body")?;
        outs.extend_from_slice(&called[..m]);
        let one = int_constant(ir, w, "one", 1)?;
        outs.push(create1(ir, w, &Add, Attributes::new(), &[counter, one], "counter_next")?);
        outs.extend(updates);
        for (j, (&s, (n, info))) in internal_ins.iter().zip(&internal_infos).enumerate() {
            let row =
                create1(ir, w, &Reshape, reshape_attrs(&stacked(info, 1)), &[called[m + j]], &format!("{n}_row"))?;
            outs.push(create1(
                ir,
                w,
                &DynamicUpdateInplace,
                row_attrs(),
                &[s, counter, row],
                &format!("{n}_stash_update"),
            )?);
        }
        let g = ir.graph_mut(w)?;
        for t in outs {
            g.add_output(t)?;
        }
        Ok(())
    })
}

/// Rewrite forward `Repeat` op `id` of `fwd` (body `body`) to call a stashing wrapper
/// (see [`stash_wrapper`]); returns its stash outputs, in the order of `stash`.
fn stash_forward(
    ir: &mut Ir,
    fwd: GraphId,
    id: OpId,
    body: GraphId,
    count: usize,
    stash: &[usize],
    internals: &[TensorId],
) -> Result<Vec<TensorId>> {
    let (m, n) = {
        let bg = ir.graph(body)?;
        (bg.outputs().len(), bg.inputs().len())
    };
    let op = ir.graph(fwd)?.op(id)?.clone();
    let callee = if internals.is_empty() {
        body
    } else {
        let mut outputs = ir.graph(body)?.outputs().to_vec();
        outputs.extend_from_slice(internals);
        let name = ir.unique_graph_name(&format!("{}_stashed", ir.graph(body)?.name()));
        clone_graph(ir, body, &name, &[], &outputs)?
    };
    let w = match stash_wrapper(ir, body, callee, count, stash, internals) {
        Ok(w) => w,
        Err(e) => {
            if callee != body {
                let _ = ir.remove_graph(callee);
            }
            return Err(e);
        }
    };
    let rewrite = |ir: &mut Ir| -> Result<Vec<TensorId>> {
        let old: Vec<TensorId> = dense(op.inputs(), &op)?.into_iter().flatten().collect();
        if old.len() != n {
            return Err(Malformed::UnconnectedGraphInputs { op: op.name.clone(), op_type: "Repeat" }.into());
        }
        let mut inputs: Vec<TensorId> = old[..m].to_vec();
        inputs.push(int_constant(ir, fwd, &format!("{}_counter_init", op.name), 0)?);
        let winfos = ir.graph(w)?.input_infos();
        for s in 0..stash.len() + internals.len() {
            let info = &winfos[m + 1 + s];
            inputs.push(create1(ir, fwd, &Init, stash_init_attrs(info), &[], &format!("{}_stash_init", op.name))?);
        }
        inputs.extend_from_slice(&old[m..]);
        let attrs = RepeatAttrs { graph: w, ..RepeatAttrs::of(&op)? }.to_attrs();
        let ins: Vec<(u32, TensorId)> = inputs.iter().enumerate().map(|(i, &t)| (i as u32, t)).collect();
        let infos = ir.infer_outputs(fwd, &Repeat, &attrs, &ins, &op.name)?;
        // Everything is checked: now change the op.
        let g = ir.graph_mut(fwd)?;
        for i in (m..n).rev() {
            g.disconnect_input(id, i as u32)?;
        }
        for (i, &t) in inputs.iter().enumerate().skip(m) {
            g.connect_input(id, i as u32, t)?;
        }
        *g.op_attrs_mut(id)? = attrs;
        let mut outs = Vec::with_capacity(stash.len());
        for (j, info) in infos.into_iter().enumerate().skip(m) {
            let suffix = if j == m { "counter".to_string() } else { format!("stash{}", j - m - 1) };
            let t = g.create_output(id, j as u32, &format!("{}_{suffix}", op.name), info)?;
            if j > m {
                outs.push(t);
            }
        }
        Ok(outs)
    };
    let result = rewrite(ir);
    if result.is_err() && !ir.graphs().any(|g| g.ops().any(|o| o.attrs.graphs().any(|g| g == w))) {
        let _ = ir.remove_graph(w);
        if callee != body {
            let _ = ir.remove_graph(callee);
        }
    }
    result
}

/// A gradient graph output that is a `DynamicSliceGrad` (zeros but for one slice):
/// the gradient of a stacked weight read through `DynamicSlice` at a counter.
struct SlicedGrad {
    /// The body input it is the gradient of.
    input: usize,
    /// Its position among the gradient graph's outputs (the slice, in the variant).
    output: usize,
    /// Position of the variant's extra output holding the slice index.
    index: usize,
    /// `axes`, `sizes` and `no_overlap` of the slice.
    attrs: DynamicSliceAttrs,
}

/// For the accumulated inputs whose gradient the gradient graph `info.graph` returns
/// as a `DynamicSliceGrad`, a copy of that graph returning the slice gradient and
/// its index instead (extra outputs at the end), so the backward loop adds the
/// slice into its accumulator in place rather than a zero-padded tensor.
fn sliced_variant(
    ir: &mut Ir,
    info: &GradGraphInfo,
    io: &GraphIo,
    accumulated: &[usize],
) -> Result<Option<(GraphId, Vec<SlicedGrad>)>> {
    let gg = ir.graph(info.graph)?;
    let mut sliced = Vec::new();
    let mut skip = Vec::new();
    let mut outputs = gg.outputs().to_vec();
    for (p, e) in info.expected_outputs.iter().enumerate() {
        let Some(i) = io.input_index(e.fwd_tensor).filter(|i| accumulated.contains(i)) else { continue };
        let once = info.expected_outputs.iter().filter(|f| io.input_index(f.fwd_tensor) == Some(i)).count() == 1;
        let Some(&t) = outputs.get(p) else { continue };
        let tensor = gg.tensor(t)?;
        let Some(port) = tensor.producer() else { continue };
        let op = gg.op(port.op)?;
        let (Some(g), Some(index)) = (op.input(0), op.input(1)) else { continue };
        let single_use = tensor.consumers().is_empty() && gg.outputs().iter().filter(|&&o| o == t).count() == 1;
        if !once || !single_use || !op.is::<DynamicSliceGrad>() {
            continue;
        }
        let a = DynamicSliceGradAttrs::of(op)?;
        outputs[p] = g;
        sliced.push(SlicedGrad {
            input: i,
            output: p,
            index: gg.outputs().len() + sliced.len(),
            attrs: DynamicSliceAttrs { axes: a.axes, sizes: a.sizes, no_overlap: a.no_overlap },
        });
        outputs.push(index);
        skip.push(op.id);
    }
    if sliced.is_empty() {
        return Ok(None);
    }
    let name = ir.unique_graph_name(&format!("{}_sliced", gg.name()));
    let copy = clone_graph(ir, info.graph, &name, &skip, &outputs)?;
    Ok(Some((copy, sliced)))
}

/// A copy of graph `src` named `name`, without the ops `skip`, whose outputs are the
/// copies of `outputs` (tensors of `src`).
fn clone_graph(ir: &mut Ir, src: GraphId, name: &str, skip: &[OpId], outputs: &[TensorId]) -> Result<GraphId> {
    let g = ir.graph(src)?.clone();
    new_graph(ir, name, |ir, copy| {
        let mut map: SecondaryMap<TensorId, TensorId> = SecondaryMap::new();
        for &t in g.inputs() {
            let x = g.tensor(t)?;
            map.insert(t, ir.graph_mut(copy)?.add_input(&x.name, x.info.clone())?);
        }
        for x in g.tensors() {
            if x.producer().is_none() && !map.contains_key(x.id) {
                map.insert(x.id, ir.graph_mut(copy)?.add_tensor(&x.name, x.info.clone(), x.kind.clone())?);
            }
        }
        for id in topological_order(&g) {
            let op = g.op(id)?;
            if skip.contains(&id) {
                continue;
            }
            let inputs = op
                .inputs()
                .iter()
                .map(|(i, t)| map.get(t).map(|&n| (i, n)))
                .collect::<Option<Vec<(u32, TensorId)>>>()
                .ok_or_else(|| Malformed::UncopiedTensor {
                    what: format!("op `{}`", op.name),
                    graph: g.name().to_string(),
                })?;
            let mut infos = Vec::new();
            let mut names = Vec::new();
            for t in op.outputs().tensors() {
                let x = g.tensor(t)?;
                infos.push(x.info.clone());
                names.push(x.name.clone());
            }
            let new = ir.create_op_with_outputs(copy, op.def(), op.attrs.clone(), &inputs, infos, &names, &op.name)?;
            let cg = ir.graph_mut(copy)?;
            cg.set_op_placement(new, op.placement)?;
            let outs: Vec<TensorId> = cg.op(new)?.outputs().tensors().collect();
            for (t, n) in op.outputs().tensors().zip(outs) {
                map.insert(t, n);
            }
        }
        let cg = ir.graph_mut(copy)?;
        for &t in outputs {
            let n = map.get(t).copied().ok_or_else(|| Malformed::UncopiedTensor {
                what: "an output".to_string(),
                graph: g.name().to_string(),
            })?;
            cg.add_output(n)?;
        }
        Ok(())
    })
}

/// The name and info of tensor `t` of graph `body`.
fn body_tensor(ir: &Ir, body: GraphId, t: TensorId) -> Result<(String, TensorInfo)> {
    let x = ir.graph(body)?.tensor(t)?;
    Ok((x.name.clone(), x.info.clone()))
}

/// Create graph `name` and fill it with `build`; on failure the half-built graph is
/// removed again, so a failed autodiff leaves no stray graph behind.
fn new_graph(ir: &mut Ir, name: &str, build: impl FnOnce(&mut Ir, GraphId) -> Result<()>) -> Result<GraphId> {
    let g = ir.create_graph(name)?;
    match build(ir, g) {
        Ok(()) => Ok(g),
        Err(e) => {
            let _ = ir.remove_graph(g);
            Err(e)
        }
    }
}

impl Builder<'_> {
    /// `Repeat(body)`: stash the carried inputs in the forward op, then a `Repeat` in
    /// reverse over the body's gradient graph (see the module doc).
    pub(super) fn grow_repeat(&mut self, op: &Op) -> Result<()> {
        let grads = self.output_grads(op)?;
        if self.skip_if_zero(op, &grads) {
            return Ok(());
        }
        let (body, info) = self.callee_info(RepeatAttrs::of(op)?.graph)?;
        let count = RepeatAttrs::of(op)?.count;
        let count_i32 = i32::try_from(count)
            .ok()
            .filter(|&c| c >= 1)
            .ok_or_else(|| self.not_differentiable(op, &format!("its count {count} is not in 1..=i32::MAX")))?;
        let connected = |v: Vec<Option<TensorId>>, what: &str| {
            v.into_iter()
                .collect::<Option<Vec<TensorId>>>()
                .ok_or_else(|| self.not_differentiable(op, &format!("its {what} are not connected at 0..n")))
        };
        let op_ins = connected(dense(op.inputs(), op)?, "inputs")?;
        let op_outs = connected(dense(op.outputs(), op)?, "outputs")?;
        let needs = Needs::of(self, op, body, info, &op_ins)?;
        let wanted_carried: Vec<usize> =
            needs.carried_grads.iter().copied().filter(|&k| self.wants(op_ins[k])).collect();
        if wanted_carried.is_empty() && needs.accumulated.is_empty() {
            return Ok(());
        }
        let out = |k: usize| op_outs[k];
        let input = |i: usize| op_ins[i];

        // The backward loop's inputs: carried [counter, gradients, accumulators,
        // outputs read], then invariant [stashes, invariants read].
        let mut ins = vec![int_constant(self.ir, self.grad, &format!("{}_counter_start", op.name), count_i32 - 1)?];
        for &k in &needs.carried_grads {
            ins.push(self.materialize(grads.get(k).copied().flatten(), out(k))?);
        }
        for &i in &needs.accumulated {
            let x = input(i);
            let info = self.fwd_tensor(x)?.1.clone();
            ins.push(self.zeros(&info, &format!("{}_grad_acc_init", self.fwd_tensor(x)?.0))?);
        }
        for &k in &needs.outputs {
            ins.push(self.need_fwd(out(k))?);
        }
        if !needs.stash.is_empty() || !needs.internals.is_empty() {
            let stashes =
                stash_forward(self.ir, self.fwd, op.id, body, count_i32 as usize, &needs.stash, &needs.internals)?;
            for t in stashes {
                ins.push(self.need_fwd(t)?);
            }
        }
        for &i in &needs.invariants {
            ins.push(self.need_fwd(input(i))?);
        }

        let bw = self.backward_body(op, body, info, count_i32 as usize, &needs)?;
        let op_name = format!("{}_grad", op.name);
        let mut names = vec![format!("{op_name}:counter")];
        for &k in &needs.carried_grads {
            names.push(if wanted_carried.contains(&k) {
                self.partial_name(input(k))
            } else {
                format!("{op_name}:{k}")
            });
        }
        for &i in &needs.accumulated {
            names.push(self.partial_name(input(i)));
        }
        let attrs = RepeatAttrs { graph: bw, count, modified: Vec::new() }.to_attrs();
        let ins: Vec<(u32, TensorId)> = ins.iter().enumerate().map(|(i, &t)| (i as u32, t)).collect();
        let rep = self.create(&Repeat, attrs, &ins, &op_name, &names)?;
        for (j, &k) in needs.carried_grads.iter().enumerate() {
            if wanted_carried.contains(&k) {
                let x = input(k);
                let t = self.fit(self.output(rep, 1 + j as u32), x)?;
                self.add_partial(x, Grad::Tensor(t));
            }
        }
        let first_acc = 1 + needs.carried_grads.len();
        for (j, &i) in needs.accumulated.iter().enumerate() {
            let x = input(i);
            let t = self.fit(self.output(rep, (first_acc + j) as u32), x)?;
            self.add_partial(x, Grad::Tensor(t));
        }
        Ok(())
    }

    /// The body of the backward loop (see [`Builder::grow_repeat`] for its inputs):
    /// one reverse iteration, calling the body's gradient graph.
    fn backward_body(
        &mut self,
        op: &Op,
        body: GraphId,
        info: &GradGraphInfo,
        count: usize,
        needs: &Needs,
    ) -> Result<GraphId> {
        let bg = self.ir.graph(body)?;
        let io = GraphIo::of(bg);
        let binputs: Vec<(String, TensorInfo)> = bg
            .inputs()
            .iter()
            .map(|&t| bg.tensor(t).map(|t| (t.name.clone(), t.info.clone())))
            .collect::<std::result::Result<_, _>>()?;
        let grad_name = self.ir.graph(info.graph)?.name().to_string();
        let wname = self.ir.unique_graph_name(&format!("{grad_name}_{}", op.name));
        let w = self.ir.create_graph(&wname)?;
        self.created.push(w);
        let variant = sliced_variant(self.ir, info, &io, &needs.accumulated)?;
        if let Some((v, _)) = &variant {
            self.created.push(*v);
        }
        let (grad_graph, sliced) = variant.map_or((info.graph, Vec::new()), |(v, s)| (v, s));
        let ir = &mut *self.ir;
        let add_input = |ir: &mut Ir, base: &str, info: TensorInfo| -> Result<TensorId> {
            let g = ir.graph_mut(w)?;
            let n = g.unique_tensor_name(base);
            Ok(g.add_input(&n, info)?)
        };
        let counter = add_input(ir, "counter", TensorInfo::new(DataType::Int32, []))?;
        let mut dc = Vec::with_capacity(needs.carried_grads.len());
        for &k in &needs.carried_grads {
            let (n, i) = &binputs[k];
            dc.push(add_input(ir, &format!("{n}_grad"), i.clone())?);
        }
        let mut acc = Vec::with_capacity(needs.accumulated.len());
        for &i in &needs.accumulated {
            let (n, info) = &binputs[i];
            acc.push(add_input(ir, &format!("{n}_grad_acc"), info.clone())?);
        }
        let mut ynext = Vec::with_capacity(needs.outputs.len());
        for &k in &needs.outputs {
            let (n, i) = &binputs[k];
            ynext.push(add_input(ir, &format!("{n}_next"), i.clone())?);
        }
        let mut stash = Vec::with_capacity(needs.stash.len());
        for &k in &needs.stash {
            let (n, i) = &binputs[k];
            stash.push(add_input(ir, &format!("{n}_stash"), stacked(i, count))?);
        }
        let mut internal_stash = Vec::with_capacity(needs.internals.len());
        for &t in &needs.internals {
            let x = body_tensor(ir, body, t)?;
            internal_stash.push((add_input(ir, &format!("{}_stash", x.0), stacked(&x.1, count))?, x.1));
        }
        let mut inv = Vec::with_capacity(needs.invariants.len());
        for &i in &needs.invariants {
            let (n, info) = &binputs[i];
            inv.push(add_input(ir, n, info.clone())?);
        }
        let mut rows = Vec::with_capacity(stash.len());
        for (&k, &s) in needs.stash.iter().zip(&stash) {
            rows.push(stash_row(ir, w, s, counter, &binputs[k].1)?);
        }
        let mut internal_rows = Vec::with_capacity(internal_stash.len());
        for (s, info) in &internal_stash {
            internal_rows.push(stash_row(ir, w, *s, counter, info)?);
        }
        let pos = |v: &[usize], k: usize| v.iter().position(|&x| x == k);
        let missing = |what: String| AutodiffError::InvalidGradGraphInfo { graph: grad_name.clone(), reason: what };

        // The gradient graph's inputs.
        let mut call_ins = Vec::with_capacity(info.expected_inputs.len());
        for e in &info.expected_inputs {
            let t = e.fwd_tensor;
            let v = match e.connection_type {
                ExpectedConnectionType::FwdGrad => {
                    let parts: Vec<TensorId> = io
                        .output_indices(t)
                        .iter()
                        .filter_map(|&k| pos(&needs.carried_grads, k).map(|j| dc[j]))
                        .collect();
                    match parts[..] {
                        [g] => g,
                        [] => {
                            let k = io.output_index(t).unwrap_or(0);
                            return Err(missing(format!(
                                "it reads the gradient of body output {k}, not a float output"
                            )));
                        }
                        _ => create1(ir, w, &Sum, Attributes::new(), &parts, "output_grad_sum")?,
                    }
                }
                ExpectedConnectionType::Fwd => match (io.input_index(t), io.output_index(t)) {
                    (Some(i), _) => match (pos(&needs.stash, i), pos(&needs.invariants, i)) {
                        (Some(s), _) => rows[s],
                        (None, Some(j)) => inv[j],
                        _ => return Err(missing(format!("input {i} is not available"))),
                    },
                    (None, Some(k)) => {
                        ynext[pos(&needs.outputs, k).ok_or_else(|| missing(format!("output {k} is not available")))?]
                    }
                    (None, None) => match needs.internals.iter().position(|&x| x == t) {
                        Some(j) => internal_rows[j],
                        None => {
                            return Err(missing("an input is neither a body input, output nor stashed".to_string()))
                        }
                    },
                },
            };
            call_ins.push(v);
        }
        let attrs = CallAttrs { graph: grad_graph, modified: Vec::new() }.to_attrs();
        let grads = create(ir, w, &Call, attrs, &call_ins, "body_grad")?;

        // Gradients by body input.
        let mut by_input: Vec<Vec<TensorId>> = vec![Vec::new(); binputs.len()];
        for (e, &g) in info.expected_outputs.iter().zip(&grads) {
            if let Some(slot) = io.input_index(e.fwd_tensor).and_then(|i| by_input.get_mut(i)) {
                slot.push(g);
            }
        }
        let mut outs = Vec::new();
        let one = int_constant(ir, w, "one", 1)?;
        outs.push(create1(ir, w, &Sub, Attributes::new(), &[counter, one], "counter_prev")?);
        for &k in &needs.carried_grads {
            let (n, info) = &binputs[k];
            let parts = &by_input[k];
            outs.push(match parts[..] {
                [g] => g,
                [] => create1(ir, w, &Init, init_attrs(info), &[], &format!("{n}_grad_zero"))?,
                _ => create1(ir, w, &Sum, Attributes::new(), parts, &format!("{n}_grad_sum"))?,
            });
        }
        for (j, &i) in needs.accumulated.iter().enumerate() {
            let n = &binputs[i].0;
            if let Some(sg) = sliced.iter().find(|sg| sg.input == i) {
                // acc[index] += slice, in place.
                let (g, index) = (grads[sg.output], grads[sg.index]);
                let row =
                    create1(ir, w, &DynamicSlice, sg.attrs.to_attrs(), &[acc[j], index], &format!("{n}_grad_acc_row"))?;
                let sum = create1(ir, w, &Add, Attributes::new(), &[row, g], &format!("{n}_grad_acc_row_add"))?;
                let attrs = sg.attrs.to_attrs();
                outs.push(create1(
                    ir,
                    w,
                    &DynamicUpdateInplace,
                    attrs,
                    &[acc[j], index, sum],
                    &format!("{n}_grad_acc"),
                )?);
                continue;
            }
            let mut parts = vec![acc[j]];
            parts.extend_from_slice(&by_input[i]);
            outs.push(match parts[..] {
                [a, g] => create1(ir, w, &Add, Attributes::new(), &[a, g], &format!("{n}_grad_acc_add"))?,
                _ => create1(ir, w, &Sum, Attributes::new(), &parts, &format!("{n}_grad_acc_sum"))?,
            });
        }
        for &k in &needs.outputs {
            let s = pos(&needs.stash, k).ok_or_else(|| missing(format!("output {k} is not stashed")))?;
            outs.push(rows[s]);
        }
        let g = ir.graph_mut(w)?;
        for t in outs {
            g.add_output(t)?;
        }
        Ok(w)
    }
}
