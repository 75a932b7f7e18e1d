//! Gradients of the subgraph ops `Call` and `If`: calls of the called graphs'
//! gradient graphs (`Repeat` is in [`super::repeat`]).

use popart_ir::ops::control::{Call, CallAttrs, If, IfAttrs};
use popart_ir::ops::grad::InitAttrs;
use popart_ir::ops::grad::{Init, Sum};
use popart_ir::{Attributes, GraphId, Op, OpAttrs, TensorId};

use super::error::{AutodiffError, Result};
use super::grow::{dense, Builder, Grad};
use super::info::{name, ExpectedConnectionType, GradGraphInfo, GradGraphInfos, GraphIo};

impl<'a> Builder<'a> {
    /// Graph `g` called by a subgraph op, and its gradient graph's info.
    pub(super) fn callee_info(&self, g: GraphId) -> Result<(GraphId, &'a GradGraphInfo)> {
        let infos: &'a GradGraphInfos = self.infos;
        let info = infos.get(&g).ok_or_else(|| AutodiffError::InvalidGradGraphInfo {
            graph: self.ir.graph(g).map_or_else(|_| format!("{g:?}"), |g| g.name().to_string()),
            reason: "no gradient graph was made for it".to_string(),
        })?;
        Ok((g, info))
    }

    /// The gradient-graph tensors feeding a call of the callee's gradient graph, for the
    /// forward subgraph op `op` whose callee input `k` is op input `op_input(k)` and
    /// whose callee outputs are the op's outputs.
    fn callee_grad_inputs(
        &mut self,
        op: &Op,
        callee: GraphId,
        info: &GradGraphInfo,
        op_input: &dyn Fn(usize) -> Option<u32>,
        grads: &[Option<Grad>],
    ) -> Result<Vec<TensorId>> {
        let invalid = |b: &Self, reason: String| AutodiffError::InvalidGradGraphInfo {
            graph: b.ir.graph(callee).map_or_else(|_| format!("{callee:?}"), |g| g.name().to_string()),
            reason,
        };
        let mut out = Vec::with_capacity(info.expected_inputs.len());
        let io = GraphIo::of(self.ir.graph(callee)?);
        let (op_ins, op_outs) = (dense(op.inputs(), op)?, dense(op.outputs(), op)?);
        for e in &info.expected_inputs {
            let cg = self.ir.graph(callee)?;
            let t = match e.connection_type {
                ExpectedConnectionType::FwdGrad => {
                    let ks: Vec<u32> = io.output_indices(e.fwd_tensor).iter().map(|&k| k as u32).collect();
                    let Some(&k0) = ks.first() else {
                        return Err(invalid(
                            self,
                            format!("expected input `{}` is not an output", name(cg, e.fwd_tensor)),
                        ));
                    };
                    let y0 = op_outs
                        .get(k0 as usize)
                        .copied()
                        .flatten()
                        .ok_or_else(|| self.not_differentiable(op, &format!("output {k0} is missing")))?;
                    let parts: Vec<TensorId> = ks
                        .iter()
                        .filter_map(|&k| grads.get(k as usize).copied().flatten())
                        .filter_map(|g| if let Grad::Tensor(t) = g { Some(t) } else { None })
                        .collect();
                    match parts.len() {
                        0 => self.materialize(None, y0)?,
                        1 => parts[0],
                        _ => {
                            let base = self.fwd_tensor(y0)?.0.to_string();
                            let ins: Vec<(u32, TensorId)> =
                                parts.iter().enumerate().map(|(i, &t)| (i as u32, t)).collect();
                            let s = self.create(&Sum, Attributes::new(), &ins, &format!("{base}_grad_sum"), &[])?;
                            self.output(s, 0)
                        }
                    }
                }
                ExpectedConnectionType::Fwd => {
                    let parent = if let Some(i) = io.input_index(e.fwd_tensor) {
                        op_input(i).and_then(|i| op_ins.get(i as usize).copied().flatten())
                    } else if let Some(k) = io.output_index(e.fwd_tensor) {
                        op_outs.get(k).copied().flatten()
                    } else {
                        return Err(invalid(
                            self,
                            format!(
                                "expected input `{}` is neither an input nor an output of the graph",
                                name(cg, e.fwd_tensor)
                            ),
                        ));
                    };
                    let parent = parent.ok_or_else(|| {
                        self.not_differentiable(op, &format!("it does not connect `{}`", name(cg, e.fwd_tensor)))
                    })?;
                    self.need_fwd(parent)?
                }
            };
            out.push(t);
        }
        Ok(out)
    }

    /// `Call(graph)`: a call of the callee's gradient graph.
    pub(super) fn grow_call(&mut self, op: &Op) -> Result<()> {
        let grads = self.output_grads(op)?;
        if self.skip_if_zero(op, &grads) {
            return Ok(());
        }
        let (callee, info) = self.callee_info(CallAttrs::of(op)?.graph)?;
        let inputs = self.callee_grad_inputs(op, callee, info, &|i| Some(i as u32), &grads)?;
        // Which op input each gradient-graph output is the gradient of.
        let io = GraphIo::of(self.ir.graph(callee)?);
        let op_ins = dense(op.inputs(), op)?;
        let targets: Vec<Option<TensorId>> = info
            .expected_outputs
            .iter()
            .map(|e| {
                io.input_index(e.fwd_tensor).and_then(|i| op_ins.get(i).copied().flatten()).filter(|&x| self.wants(x))
            })
            .collect();
        if targets.iter().all(Option::is_none) {
            return Ok(());
        }
        let op_name = format!("{}_grad", op.name);
        let names: Vec<String> = targets
            .iter()
            .enumerate()
            .map(|(k, x)| x.map_or_else(|| format!("{op_name}:{k}"), |x| self.partial_name(x)))
            .collect();
        let ins: Vec<(u32, TensorId)> = inputs.iter().enumerate().map(|(i, &t)| (i as u32, t)).collect();
        let attrs = CallAttrs { graph: info.graph, modified: Vec::new() }.to_attrs();
        let call = self.create(&Call, attrs, &ins, &op_name, &names)?;
        for (k, x) in targets.into_iter().enumerate() {
            if let Some(x) = x {
                let t = self.fit(self.output(call, k as u32), x)?;
                self.add_partial(x, Grad::Tensor(t));
            }
        }
        Ok(())
    }

    /// `If(cond, ..)`: an `If` on the same condition whose branches call the branch
    /// graphs' gradient graphs (through wrapper graphs with identical outputs).
    #[allow(clippy::expect_used)] // Cannot fail: `wanted` lists connected inputs of `op`.
    pub(super) fn grow_if(&mut self, op: &Op) -> Result<()> {
        let grads = self.output_grads(op)?;
        if self.skip_if_zero(op, &grads) {
            return Ok(());
        }
        let a = IfAttrs::of(op)?;
        let branch_map = |v: &[i64]| -> Vec<u32> { v.iter().map(|&i| i as u32).collect() };
        let branches = [(a.then_graph, branch_map(&a.then_inputs)), (a.else_graph, branch_map(&a.else_inputs))];
        // Op inputs receiving a gradient from at least one branch.
        let mut wanted: Vec<u32> = Vec::new();
        for (branch, map) in &branches {
            let (callee, info) = self.callee_info(*branch)?;
            let io = GraphIo::of(self.ir.graph(callee)?);
            for e in &info.expected_outputs {
                if let Some(&j) = io.input_index(e.fwd_tensor).and_then(|i| map.get(i)) {
                    if op.input(j).is_some_and(|x| self.wants(x)) && !wanted.contains(&j) {
                        wanted.push(j);
                    }
                }
            }
        }
        wanted.sort_unstable();
        if wanted.is_empty() {
            return Ok(());
        }
        let cond = self.need_fwd(op.input(0).ok_or_else(|| self.not_differentiable(op, "it has no condition"))?)?;
        let mut if_inputs = vec![cond];
        let mut graphs = Vec::with_capacity(2);
        for (branch, map) in &branches {
            let (callee, info) = self.callee_info(*branch)?;
            let parents = self.callee_grad_inputs(op, callee, info, &|i| map.get(i).copied(), &grads)?;
            let wrapper = self.if_branch_wrapper(op, callee, info, map, &parents, &wanted)?;
            let mut indices = Vec::with_capacity(parents.len());
            for t in parents {
                let k = if_inputs.iter().position(|&u| u == t).unwrap_or_else(|| {
                    if_inputs.push(t);
                    if_inputs.len() - 1
                });
                indices.push(k as i64);
            }
            graphs.push((wrapper, indices));
        }
        let [(then_graph, then_inputs), (else_graph, else_inputs)]: [(GraphId, Vec<i64>); 2] =
            graphs.try_into().map_err(|_| self.not_differentiable(op, "it has not two branches"))?;
        let attrs = IfAttrs { then_graph, else_graph, then_inputs, else_inputs }.to_attrs();
        let op_name = format!("{}_grad", op.name);
        let names: Vec<String> =
            wanted.iter().map(|&j| self.partial_name(op.input(j).expect("wanted input"))).collect();
        let ins: Vec<(u32, TensorId)> = if_inputs.iter().enumerate().map(|(i, &t)| (i as u32, t)).collect();
        let new = self.create(&If, attrs, &ins, &op_name, &names)?;
        for (k, &j) in wanted.iter().enumerate() {
            let x = op.input(j).expect("wanted input");
            let t = self.fit(self.output(new, k as u32), x)?;
            self.add_partial(x, Grad::Tensor(t));
        }
        Ok(())
    }

    /// A graph taking the inputs of `info.graph` (typed like `parents`), calling it and
    /// returning, for each op input in `wanted`, the gradient of that `If` op input
    /// through this branch (zeros if the branch does not use it).
    #[allow(clippy::expect_used)] // Cannot fail: `wanted` lists connected inputs of `op`; `call`, `Init` and `Sum` were just created with these outputs.
    fn if_branch_wrapper(
        &mut self,
        op: &Op,
        branch: GraphId,
        info: &GradGraphInfo,
        map: &[u32],
        parents: &[TensorId],
        wanted: &[u32],
    ) -> Result<GraphId> {
        let wname = self.ir.unique_graph_name(&format!("{}_{}", self.ir.graph(info.graph)?.name(), op.name));
        let w = self.ir.create_graph(&wname)?;
        self.created.push(w);
        let mut call_inputs = Vec::with_capacity(parents.len());
        for (k, &p) in parents.iter().enumerate() {
            let t = self.grad_graph().tensor(p)?;
            let (n, i) = (t.name.clone(), t.info.clone());
            let g = self.ir.graph_mut(w)?;
            let n = g.unique_tensor_name(&n);
            call_inputs.push((k as u32, g.add_input(&n, i)?));
        }
        let attrs = CallAttrs { graph: info.graph, modified: Vec::new() }.to_attrs();
        let call = self.ir.create_op(w, &Call, attrs, &call_inputs, "call_grad")?;
        let io = GraphIo::of(self.ir.graph(branch)?);
        let mut per_input: Vec<Vec<TensorId>> = vec![Vec::new(); wanted.len()];
        for (k, e) in info.expected_outputs.iter().enumerate() {
            let j = io.input_index(e.fwd_tensor).and_then(|i| map.get(i));
            if let Some(slot) = j.and_then(|j| wanted.iter().position(|w| w == j)) {
                per_input[slot].push(self.ir.graph(w)?.op(call)?.output(k as u32).expect("call output"));
            }
        }
        for (slot, parts) in per_input.into_iter().enumerate() {
            let x = op.input(wanted[slot]).expect("wanted input");
            let t = match parts.len() {
                1 => parts[0],
                0 => {
                    let info = self.fwd_tensor(x)?.1.clone();
                    let shape = info.shape.iter().map(|&d| d as i64).collect();
                    let attrs = InitAttrs { shape, dtype: info.dtype, init_type: None }.to_attrs();
                    let z = self.ir.create_op(w, &Init, attrs, &[], "zeros")?;
                    self.ir.graph(w)?.op(z)?.output(0).expect("init output")
                }
                _ => {
                    let ins: Vec<(u32, TensorId)> = parts.iter().enumerate().map(|(i, &t)| (i as u32, t)).collect();
                    let s = self.ir.create_op(w, &Sum, Attributes::new(), &ins, "sum")?;
                    self.ir.graph(w)?.op(s)?.output(0).expect("sum output")
                }
            };
            self.ir.graph_mut(w)?.add_output(t)?;
        }
        Ok(w)
    }
}
