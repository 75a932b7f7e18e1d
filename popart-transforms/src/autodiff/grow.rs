//! Growing the gradient graph of one forward graph.

use popart_ir::ops::control::{Call, CallAttrs, If, Repeat};
use popart_ir::ops::grad::{Init, InitAttrs, ReduceToShape, ShapeAttrs, Sum};
use popart_ir::ops::unary::{Cast, CastAttrs, Identity};
use popart_ir::{
    Attributes, GradOpSpec, GradRule, GradSource, Graph, GraphId, Ir, Op, OpAttrs, OpDef, OpFlags, OpId, Placement,
    TensorId, TensorIndexMap, TensorInfo, TensorKind,
};
use slotmap::SecondaryMap;

use super::analysis::Analysis;
use super::error::{AutodiffError, Result};
use super::info::{name, ExpectedConnection, GradGraphInfo, GradGraphInfos, GraphIo};
use crate::Malformed;

/// A gradient value: symbolically zero, or a tensor of the gradient graph.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Grad {
    Zero,
    Tensor(TensorId),
}

/// The gradient contributions to one forward tensor, summed when it is finalised.
#[derive(Clone, Debug, Default)]
struct Partials {
    tensors: Vec<TensorId>,
    zero: bool,
}

/// Which graph [`differentiate`] builds the gradient of.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Role<'a> {
    /// The graph `autodiff` was asked for, with the inputs whose gradients are
    /// required (`None`: every floating point input that has a gradient).
    Top { required: Option<&'a [TensorId]> },
    /// A graph it calls (every floating point input that has a gradient).
    Callee,
}

/// Build the gradient graph of `fwd` (see [`super::autodiff`] for the contract).
/// Graphs created are appended to `created`.
pub(crate) fn differentiate(
    ir: &mut Ir,
    fwd: GraphId,
    analysis: &Analysis,
    provided: &[TensorId],
    role: Role<'_>,
    infos: &GradGraphInfos,
    created: &mut Vec<GraphId>,
) -> Result<GradGraphInfo> {
    let (required, callee) = match role {
        Role::Top { required } => (required, false),
        Role::Callee => (None, true),
    };
    let mode = Intermediates::of(ir, fwd, callee);
    let recompute = mode == Intermediates::Recompute;
    let grad_name = ir.unique_graph_name(&format!("{}_grad", ir.graph(fwd)?.name()));
    let grad = ir.create_graph(&grad_name)?;
    created.push(grad);
    let fwd_io = GraphIo::of(ir.graph(fwd)?);
    let mut b = Builder {
        fwd_io,
        ir,
        fwd,
        grad,
        infos,
        wants_grad: &analysis.wants_grad,
        recompute,
        created,
        fwd_map: SecondaryMap::new(),
        partials: SecondaryMap::new(),
        finals: SecondaryMap::new(),
        expected_inputs: Vec::new(),
        new_fwd_outputs: Vec::new(),
    };

    for &y in provided {
        let info = b.fwd_graph().tensor(y)?.info.clone();
        let base = format!("{}_grad", b.fwd_graph().tensor(y)?.name);
        let g = b.grad_graph_mut();
        let tname = g.unique_tensor_name(&base);
        let t = g.add_input(&tname, info)?;
        b.expected_inputs.push(ExpectedConnection::fwd_grad(y));
        b.add_partial(y, Grad::Tensor(t));
    }

    for (id, rule) in &analysis.active {
        b.grow_op(*id, rule)?;
    }

    let all_inputs;
    let (outputs, strict) = match required {
        Some(r) => (r, true),
        None => {
            all_inputs = b.fwd_graph().inputs().to_vec();
            (&all_inputs[..], false)
        }
    };
    let mut expected_outputs = Vec::new();
    for &x in outputs {
        let g = match b.finalize(x)? {
            Some(g) => g,
            None if strict => {
                let graph = b.fwd_graph().name().to_string();
                return Err(AutodiffError::NoGradientPath { graph, tensor: name(b.fwd_graph(), x) });
            }
            None => continue,
        };
        let t = b.materialize(Some(g), x)?;
        b.grad_graph_mut().add_output(t)?;
        expected_outputs.push(ExpectedConnection::fwd_grad(x));
    }

    let Builder { expected_inputs, new_fwd_outputs, .. } = b;
    if mode == Intermediates::Outputs {
        add_forward_outputs(ir, fwd, &new_fwd_outputs)?;
    }
    Ok(GradGraphInfo { graph: grad, forward_graph: fwd, expected_inputs, expected_outputs })
}

/// How the gradient graph of a forward graph receives the forward
/// intermediates it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Intermediates {
    /// Every op calling the graph is a `Call`, whose outputs can be extended:
    /// the intermediates become extra outputs of the graph and of its calls.
    Outputs,
    /// A called graph whose callers are all `Repeat`s (which keep their
    /// outputs): the gradient graph reads them as forward inputs of the body's
    /// internal tensors, and the `Repeat`'s gradient stashes them per
    /// iteration from a copy of the body that outputs them (`repeat.rs`).
    Internal,
    /// Otherwise (a graph called by `If`, a mix of callers, or the
    /// differentiated graph itself when something other than `Call` calls it):
    /// they are recomputed in the gradient graph.
    Recompute,
}

impl Intermediates {
    /// The mode of `fwd`; `callee`: it is differentiated as a graph called by
    /// the one `autodiff` was asked for.
    fn of(ir: &Ir, fwd: GraphId, callee: bool) -> Intermediates {
        let callers = || ir.graphs().flat_map(|g| g.ops()).filter(|op| op.called_graphs().contains(&fwd));
        if callers().all(|op| op.is::<Call>()) {
            Intermediates::Outputs
        } else if callee && callers().all(|op| op.is::<Repeat>()) {
            Intermediates::Internal
        } else {
            Intermediates::Recompute
        }
    }
}

/// Make `tensors` extra outputs of `fwd` and give every `Call` of `fwd` the matching outputs.
fn add_forward_outputs(ir: &mut Ir, fwd: GraphId, tensors: &[TensorId]) -> Result<()> {
    if tensors.is_empty() {
        return Ok(());
    }
    let mut sites: Vec<(GraphId, OpId)> = Vec::new();
    for g in ir.graphs() {
        for op in g.ops() {
            if op.is::<Call>() && CallAttrs::of(op).is_ok_and(|a| a.graph == fwd) {
                sites.push((g.id(), op.id));
            }
        }
    }
    for &t in tensors {
        let info = ir.graph(fwd)?.tensor(t)?.info.clone();
        let g = ir.graph_mut(fwd)?;
        g.add_output(t)?;
        let index = (g.outputs().len() - 1) as u32;
        for &(pg, op) in &sites {
            let pg = ir.graph_mut(pg)?;
            let name = format!("{}:{index}", pg.op(op)?.name);
            pg.create_output(op, index, &name, info.clone())?;
        }
    }
    Ok(())
}

/// An index map as a vector indexed by index.
/// Refuses maps whose largest index is far beyond their length (an index near
/// `u32::MAX` connected by hand), which would make the vector huge.
pub(super) fn dense(map: &TensorIndexMap, op: &Op) -> Result<Vec<Option<TensorId>>> {
    let end = usize::try_from(map.end()).unwrap_or(usize::MAX);
    if end > 2 * map.len() + 64 {
        return Err(Malformed::SparseIndexMap { op: op.name.clone(), index: end - 1, entries: map.len() }.into());
    }
    let mut v = vec![None; end];
    for (i, t) in map.iter() {
        if let Some(slot) = v.get_mut(i as usize) {
            *slot = Some(t);
        }
    }
    Ok(v)
}

pub(super) struct Builder<'a> {
    pub(super) ir: &'a mut Ir,
    pub(super) fwd: GraphId,
    /// Input and output positions of the forward graph.
    pub(super) fwd_io: GraphIo,
    pub(super) grad: GraphId,
    pub(super) infos: &'a GradGraphInfos,
    pub(super) wants_grad: &'a SecondaryMap<TensorId, ()>,
    pub(super) recompute: bool,
    pub(super) created: &'a mut Vec<GraphId>,
    /// Forward tensor -> the tensor standing for it in the gradient graph.
    pub(super) fwd_map: SecondaryMap<TensorId, TensorId>,
    /// Forward tensor -> gradient contributions not yet summed.
    partials: SecondaryMap<TensorId, Partials>,
    /// Forward tensor -> its final gradient (once every consumer has contributed).
    pub(super) finals: SecondaryMap<TensorId, Option<Grad>>,
    pub(super) expected_inputs: Vec<ExpectedConnection>,
    /// Forward intermediates read by the gradient graph, to become forward outputs.
    pub(super) new_fwd_outputs: Vec<TensorId>,
}

impl<'a> Builder<'a> {
    #[allow(clippy::expect_used)] // Cannot fail: the builder holds `&mut Ir` for its whole life and never removes the forward graph.
    pub(super) fn fwd_graph(&self) -> &Graph {
        self.ir.graph(self.fwd).expect("forward graph exists")
    }

    #[allow(clippy::expect_used)] // Cannot fail: the builder creates the gradient graph and never removes it.
    pub(super) fn grad_graph(&self) -> &Graph {
        self.ir.graph(self.grad).expect("gradient graph exists")
    }

    #[allow(clippy::expect_used)] // Cannot fail: the builder creates the gradient graph and never removes it.
    pub(super) fn grad_graph_mut(&mut self) -> &mut Graph {
        self.ir.graph_mut(self.grad).expect("gradient graph exists")
    }

    pub(super) fn fwd_tensor(&self, t: TensorId) -> Result<(&str, &TensorInfo)> {
        let t = self.fwd_graph().tensor(t)?;
        Ok((&t.name, &t.info))
    }

    pub(super) fn wants(&self, t: TensorId) -> bool {
        self.wants_grad.contains_key(t)
    }

    pub(super) fn add_partial(&mut self, x: TensorId, g: Grad) {
        if !self.wants(x) {
            return;
        }
        if !self.partials.contains_key(x) {
            self.partials.insert(x, Partials::default());
        }
        let p = &mut self.partials[x];
        match g {
            Grad::Zero => p.zero = true,
            Grad::Tensor(t) => p.tensors.push(t),
        }
    }

    /// Name for the gradient of `x` contributed by one consumer: the final name when
    /// that consumer is the only one.
    #[allow(clippy::expect_used)] // Cannot fail: `x` is a forward tensor the analysis found in the forward graph.
    pub(super) fn partial_name(&self, x: TensorId) -> String {
        let g = self.fwd_graph();
        let t = g.tensor(x).expect("forward tensor");
        if t.consumers().len() == 1 && self.fwd_io.output_index(x).is_none() {
            format!("{}_grad", t.name)
        } else {
            format!("{}_grad_partial", t.name)
        }
    }

    /// The gradient of `x`, summing its contributions (once; later calls return the same).
    pub(super) fn finalize(&mut self, x: TensorId) -> Result<Option<Grad>> {
        if let Some(g) = self.finals.get(x) {
            return Ok(*g);
        }
        let p = self.partials.remove(x).unwrap_or_default();
        let g = match p.tensors.len() {
            0 => p.zero.then_some(Grad::Zero),
            1 => Some(Grad::Tensor(p.tensors[0])),
            _ => {
                let base = self.fwd_tensor(x)?.0.to_string();
                let inputs: Vec<(u32, TensorId)> = p.tensors.iter().enumerate().map(|(i, &t)| (i as u32, t)).collect();
                let op = self.create(
                    &Sum,
                    Attributes::new(),
                    &inputs,
                    &format!("{base}_grad_sum"),
                    &[format!("{base}_grad")],
                )?;
                Some(Grad::Tensor(self.output(op, 0)))
            }
        };
        self.finals.insert(x, g);
        Ok(g)
    }

    /// A gradient as a tensor of the gradient graph (zeros of `x`'s info if zero or absent).
    pub(super) fn materialize(&mut self, g: Option<Grad>, x: TensorId) -> Result<TensorId> {
        match g {
            Some(Grad::Tensor(t)) => Ok(t),
            _ => {
                let (n, info) = self.fwd_tensor(x)?;
                let (n, info) = (n.to_string(), info.clone());
                self.zeros(&info, &format!("{n}_grad_zero"))
            }
        }
    }

    pub(super) fn zeros(&mut self, info: &TensorInfo, name: &str) -> Result<TensorId> {
        let shape = info.shape.iter().map(|&d| d as i64).collect();
        let attrs = InitAttrs { shape, dtype: info.dtype, init_type: None }.to_attrs();
        let op = self.create(&Init, attrs, &[], name, &[])?;
        Ok(self.output(op, 0))
    }

    /// Reduce and cast a gradient-graph tensor to the shape and dtype of forward tensor `x`.
    pub(super) fn fit(&mut self, t: TensorId, x: TensorId) -> Result<TensorId> {
        let (xname, xinfo) = self.fwd_tensor(x)?;
        let (xname, xinfo) = (xname.to_string(), xinfo.clone());
        let tinfo = self.grad_graph().tensor(t)?.info.clone();
        if tinfo == xinfo {
            return Ok(t);
        }
        let out_name = self.partial_name(x);
        let mut t = t;
        if tinfo.shape != xinfo.shape {
            let shape = xinfo.shape.iter().map(|&d| d as i64).collect();
            let last = tinfo.dtype == xinfo.dtype;
            let names = if last { vec![out_name.clone()] } else { vec![] };
            let op = self.create(
                &ReduceToShape,
                ShapeAttrs { shape }.to_attrs(),
                &[(0, t)],
                &format!("{xname}_grad_reduce"),
                &names,
            )?;
            t = self.output(op, 0);
        }
        if tinfo.dtype != xinfo.dtype {
            let attrs = CastAttrs { to: xinfo.dtype }.to_attrs();
            let op = self.create(&Cast, attrs, &[(0, t)], &format!("{xname}_grad_cast"), &[out_name])?;
            t = self.output(op, 0);
        }
        Ok(t)
    }

    /// Create an op in the gradient graph; `output_names` name its first outputs.
    pub(super) fn create(
        &mut self,
        def: &'static dyn OpDef,
        attrs: Attributes,
        inputs: &[(u32, TensorId)],
        name: &str,
        output_names: &[String],
    ) -> Result<OpId> {
        let infos = self.ir.infer_outputs(self.grad, def, &attrs, inputs, name)?;
        Ok(self.ir.create_op_with_outputs(self.grad, def, attrs, inputs, infos, output_names, name)?)
    }

    #[allow(clippy::expect_used)] // Cannot fail: `op` was just created and shape inference gave it output `index`.
    pub(super) fn output(&self, op: OpId, index: u32) -> TensorId {
        self.grad_graph().op(op).expect("just created").output(index).expect("inferred output")
    }

    /// Is forward tensor `x` something the gradient graph can receive as an input
    /// (rather than recompute)?
    fn is_direct(&self, x: TensorId) -> Result<bool> {
        let g = self.fwd_graph();
        let t = g.tensor(x)?;
        Ok(!self.recompute || t.producer().is_none() || self.fwd_io.is_io(x) || t.is_constant())
    }

    /// The gradient-graph tensor standing for forward tensor `x`: a copy of a
    /// constant, a new gradient-graph input (expected `Fwd`), or a recomputation.
    pub(super) fn need_fwd(&mut self, x: TensorId) -> Result<TensorId> {
        if let Some(&t) = self.fwd_map.get(x) {
            return Ok(t);
        }
        if !self.is_direct(x)? {
            return self.recompute(x);
        }
        let fg = self.fwd_graph();
        let tensor = fg.tensor(x)?;
        let is_io = self.fwd_io.is_io(x);
        let constant = matches!(tensor.kind, TensorKind::Constant(_)).then(|| tensor.kind.clone());
        let (tname, info) = (tensor.name.clone(), tensor.info.clone());
        let g = self.grad_graph_mut();
        let unique = g.unique_tensor_name(&tname);
        let t = if let Some(kind) = constant {
            g.add_tensor(&unique, info, kind)?
        } else {
            let t = g.add_input(&unique, info)?;
            self.expected_inputs.push(ExpectedConnection::fwd(x));
            if !is_io {
                self.new_fwd_outputs.push(x);
            }
            t
        };
        self.fwd_map.insert(x, t);
        Ok(t)
    }

    /// Clone the forward ops producing `x` (and whatever they need) into the gradient graph.
    fn recompute(&mut self, x: TensorId) -> Result<TensorId> {
        let producer = |b: &Self, t: TensorId| -> Result<OpId> {
            b.fwd_graph().tensor(t)?.producer().map(|p| p.op).ok_or_else(|| AutodiffError::InvalidGradGraphInfo {
                graph: b.fwd_graph().name().to_string(),
                reason: format!("tensor `{}` has no producer", name(b.fwd_graph(), t)),
            })
        };
        let mut stack = vec![producer(self, x)?];
        while let Some(&p) = stack.last() {
            let op = self.fwd_graph().op(p)?.clone();
            let mut missing = None;
            for t in op.inputs().tensors() {
                if self.fwd_map.contains_key(t) {
                    continue;
                }
                if self.is_direct(t)? {
                    self.need_fwd(t)?;
                } else {
                    missing = Some(t);
                    break;
                }
            }
            if let Some(t) = missing {
                stack.push(producer(self, t)?);
                continue;
            }
            if op.flags().intersects(OpFlags::SIDE_EFFECT | OpFlags::MODIFIES_INPUTS | OpFlags::HOST_IO) {
                return Err(AutodiffError::CannotRecompute {
                    graph: self.fwd_graph().name().to_string(),
                    op: op.name.clone(),
                    op_type: op.op_type().to_string(),
                    reason: "it has side effects or modifies its inputs, and the graph's call sites \
                             (If/Repeat) cannot expose the tensor as an extra output"
                        .to_string(),
                });
            }
            let inputs: Vec<(u32, TensorId)> = op.inputs().iter().map(|(i, t)| (i, self.fwd_map[t])).collect();
            let fg = self.fwd_graph();
            let mut infos = Vec::new();
            let mut names = Vec::new();
            for (_, y) in op.outputs().iter() {
                let t = fg.tensor(y)?;
                infos.push(t.info.clone());
                names.push(t.name.clone());
            }
            let new = self.ir.create_op_with_outputs(
                self.grad,
                op.def(),
                op.attrs.clone(),
                &inputs,
                infos,
                &names,
                &op.name,
            )?;
            if !op.placement.is_default() {
                self.grad_graph_mut().set_op_placement(new, op.placement)?;
            }
            for (k, (_, y)) in op.outputs().iter().enumerate() {
                let t = self.output(new, k as u32);
                self.fwd_map.insert(y, t);
            }
            stack.pop();
        }
        Ok(self.fwd_map[x])
    }

    pub(super) fn not_differentiable(&self, op: &Op, reason: &str) -> AutodiffError {
        AutodiffError::NotDifferentiable {
            graph: self.fwd_graph().name().to_string(),
            op: op.name.clone(),
            op_type: op.op_type().to_string(),
            reason: reason.to_string(),
        }
    }

    fn grow_op(&mut self, id: OpId, rule: &GradRule) -> Result<()> {
        let op = self.fwd_graph().op(id)?.clone();
        match rule {
            GradRule::None => Err(self.not_differentiable(&op, "")),
            GradRule::Stop => Ok(()),
            GradRule::Zero => {
                let grads = self.output_grads(&op)?;
                if grads.iter().any(Option::is_some) {
                    for x in op.inputs().tensors() {
                        self.add_partial(x, Grad::Zero);
                    }
                }
                Ok(())
            }
            GradRule::Ops(specs) => self.grow_specs(&op, specs),
            GradRule::Subgraph if op.is::<Call>() => self.grow_call(&op),
            GradRule::Subgraph if op.is::<If>() => self.grow_if(&op),
            GradRule::Subgraph if op.is::<Repeat>() => self.grow_repeat(&op),
            GradRule::Subgraph => {
                Err(self.not_differentiable(&op, "autodiff differentiates only Call, If and Repeat subgraph ops"))
            }
        }
    }

    /// Final gradients of the outputs of `op`, indexed by output index.
    pub(super) fn output_grads(&mut self, op: &Op) -> Result<Vec<Option<Grad>>> {
        let outs = dense(op.outputs(), op)?;
        let mut grads = vec![None; outs.len()];
        for (k, y) in op.outputs().iter() {
            let g = self.finalize(y)?;
            if let Some(slot) = grads.get_mut(k as usize) {
                *slot = g;
            }
        }
        Ok(grads)
    }

    /// If no output of `op` has a non-zero gradient, give its inputs zero (or no)
    /// gradients and return true.
    pub(super) fn skip_if_zero(&mut self, op: &Op, grads: &[Option<Grad>]) -> bool {
        if grads.iter().any(|g| matches!(g, Some(Grad::Tensor(_)))) {
            return false;
        }
        if grads.iter().any(Option::is_some) {
            for x in op.inputs().tensors() {
                self.add_partial(x, Grad::Zero);
            }
        }
        true
    }

    /// Place gradient op `new` where forward op `fwd` runs, as PopART's grad ops
    /// inherit their forward op's settings; an op with an IPU route (the
    /// `IpuCopy` back) runs on its own destination.
    fn place_grad_op(&mut self, new: OpId, fwd: &Op) -> Result<()> {
        let g = self.grad_graph_mut();
        let created = g.op(new)?;
        let route = created.def().ipu_route(&created.attrs);
        let placement =
            Placement { ipu: route.map(|r| r.destination).or(fwd.placement.ipu), tile_set: fwd.placement.tile_set };
        if !placement.is_default() {
            g.set_op_placement(new, placement)?;
        }
        Ok(())
    }

    fn grow_specs(&mut self, op: &Op, specs: &[GradOpSpec]) -> Result<()> {
        let grads = self.output_grads(op)?;
        if self.skip_if_zero(op, &grads) {
            return Ok(());
        }
        let grad_of = |k: u32| grads.get(k as usize).copied().flatten();
        for spec in specs {
            let targets: Vec<(u32, TensorId)> = spec
                .outputs
                .iter()
                .filter_map(|&(o, i)| op.input(i).filter(|&x| self.wants(x)).map(|x| (o, x)))
                .collect();
            if targets.is_empty() {
                continue;
            }
            // `Identity(g_k)`: forward the output gradient instead of copying it.
            if let [(0, GradSource::GradOfOutput(k))] = &spec.inputs[..] {
                if spec.op.is::<Identity>() && spec.attrs.is_empty() {
                    for &(_, x) in &targets {
                        match grad_of(*k) {
                            Some(Grad::Tensor(t)) => {
                                let t = self.fit(t, x)?;
                                self.add_partial(x, Grad::Tensor(t));
                            }
                            Some(Grad::Zero) => self.add_partial(x, Grad::Zero),
                            None => {}
                        }
                    }
                    continue;
                }
            }
            let mut inputs = Vec::with_capacity(spec.inputs.len());
            for &(gi, src) in &spec.inputs {
                let missing = |what: &str, i: u32| {
                    self.not_differentiable(op, &format!("its gradient rule reads {what} {i}, which is not connected"))
                };
                let t = match src {
                    GradSource::FwdInput(i) => self.need_fwd(op.input(i).ok_or_else(|| missing("input", i))?)?,
                    GradSource::FwdOutput(j) => self.need_fwd(op.output(j).ok_or_else(|| missing("output", j))?)?,
                    GradSource::GradOfOutput(k) => {
                        let y = op.output(k).ok_or_else(|| missing("the gradient of output", k))?;
                        self.materialize(grad_of(k), y)?
                    }
                };
                inputs.push((gi, t));
            }
            let attrs = &spec.attrs;
            let op_name = format!("{}_grad", op.name);
            let def = spec.op;
            let infos = self.ir.infer_outputs(self.grad, def, attrs, &inputs, &op_name)?;
            let mut names = Vec::with_capacity(infos.len());
            for (o, info) in infos.iter().enumerate() {
                let target = targets.iter().find(|(to, _)| *to as usize == o);
                names.push(match target {
                    Some(&(_, x)) if self.fwd_tensor(x)?.1 == info => self.partial_name(x),
                    Some(&(_, x)) => format!("{}_grad_unreduced", self.fwd_tensor(x)?.0),
                    None => format!("{op_name}:{o}"),
                });
            }
            let new =
                self.ir.create_op_with_outputs(self.grad, def, attrs.clone(), &inputs, infos, &names, &op_name)?;
            self.place_grad_op(new, op)?;
            for &(o, x) in &targets {
                let t = self.grad_graph().op(new)?.output(o).ok_or_else(|| {
                    self.not_differentiable(op, &format!("its gradient op `{}` has no output {o}", spec.op.op_type()))
                })?;
                let t = self.fit(t, x)?;
                self.add_partial(x, Grad::Tensor(t));
            }
        }
        Ok(())
    }
}
