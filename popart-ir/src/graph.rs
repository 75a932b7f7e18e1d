//! A graph: ops and tensors in arenas, ordered inputs and outputs, topological constraints.

use std::collections::HashMap;

use slotmap::SlotMap;

use crate::{
    Attributes, GraphId, IrError, Op, OpDef, OpId, Port, Result, Tensor, TensorId, TensorIndexMap, TensorInfo,
    TensorKind, TopoCons,
};

/// Picks unique names: `base`, then `base_1`, `base_2`...
#[derive(Clone, Debug, Default)]
struct Names<K> {
    taken: HashMap<String, K>,
    next_suffix: HashMap<String, usize>,
}

impl<K: Copy> Names<K> {
    fn unique(&mut self, base: &str) -> String {
        if !self.taken.contains_key(base) {
            return base.to_string();
        }
        let n = self.next_suffix.entry(base.to_string()).or_insert(1);
        loop {
            let candidate = format!("{base}_{n}");
            *n += 1;
            if !self.taken.contains_key(&candidate) {
                return candidate;
            }
        }
    }
}

/// A graph of ops and tensors. Owned by an [`crate::Ir`]; the main graph or a subgraph.
#[derive(Clone, Debug)]
pub struct Graph {
    pub(crate) id: GraphId,
    pub(crate) name: String,
    pub(crate) ops: SlotMap<OpId, Op>,
    pub(crate) tensors: SlotMap<TensorId, Tensor>,
    op_names: Names<OpId>,
    tensor_names: Names<TensorId>,
    pub(crate) inputs: Vec<TensorId>,
    pub(crate) outputs: Vec<TensorId>,
    pub(crate) topo_cons: TopoCons,
    next_seq: u64,
}

impl Graph {
    pub(crate) fn new(id: GraphId, name: String) -> Self {
        Graph {
            id,
            name,
            ops: SlotMap::with_key(),
            tensors: SlotMap::with_key(),
            op_names: Names::default(),
            tensor_names: Names::default(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            topo_cons: TopoCons::default(),
            next_seq: 0,
        }
    }

    /// This graph's id.
    pub fn id(&self) -> GraphId {
        self.id
    }

    /// This graph's name, unique in its IR.
    pub fn name(&self) -> &str {
        &self.name
    }

    // ----- lookup -----

    /// A tensor by id.
    pub fn tensor(&self, id: TensorId) -> Result<&Tensor> {
        self.tensors.get(id).ok_or_else(|| self.unknown_tensor(id))
    }

    /// A tensor by name.
    pub fn tensor_by_name(&self, name: &str) -> Result<&Tensor> {
        self.tensor_names
            .taken
            .get(name)
            .and_then(|id| self.tensors.get(*id))
            .ok_or_else(|| IrError::UnknownTensor { graph: self.name.clone(), tensor: name.to_string() })
    }

    /// Id of the tensor with this name.
    pub fn tensor_id(&self, name: &str) -> Result<TensorId> {
        self.tensor_by_name(name).map(|t| t.id)
    }

    /// True if `id` is a live tensor of this graph.
    pub fn contains_tensor(&self, id: TensorId) -> bool {
        self.tensors.contains_key(id)
    }

    /// An op by id.
    pub fn op(&self, id: OpId) -> Result<&Op> {
        self.ops.get(id).ok_or_else(|| self.unknown_op(id))
    }

    /// An op by name.
    pub fn op_by_name(&self, name: &str) -> Result<&Op> {
        self.op_names
            .taken
            .get(name)
            .and_then(|id| self.ops.get(*id))
            .ok_or_else(|| IrError::UnknownOp { graph: self.name.clone(), op: name.to_string() })
    }

    /// Mutable access to an op's attributes. Changing attributes does not re-run
    /// shape inference; passes that change shapes must re-create the op.
    pub fn op_attrs_mut(&mut self, id: OpId) -> Result<&mut Attributes> {
        let err = self.unknown_op(id);
        self.ops.get_mut(id).map(|o| &mut o.attrs).ok_or(err)
    }

    /// Every op, in arena order (use [`crate::Ir::schedule`] for execution order).
    pub fn ops(&self) -> impl Iterator<Item = &Op> {
        self.ops.values()
    }

    /// Ops in creation order.
    pub fn ops_in_creation_order(&self) -> Vec<OpId> {
        let mut v: Vec<&Op> = self.ops.values().collect();
        v.sort_unstable_by_key(|o| o.seq);
        v.into_iter().map(|o| o.id).collect()
    }

    /// Every tensor, in arena order.
    pub fn tensors(&self) -> impl Iterator<Item = &Tensor> {
        self.tensors.values()
    }

    /// Number of ops.
    pub fn num_ops(&self) -> usize {
        self.ops.len()
    }

    /// Number of tensors.
    pub fn num_tensors(&self) -> usize {
        self.tensors.len()
    }

    /// Graph inputs, indexed from 0.
    pub fn inputs(&self) -> &[TensorId] {
        &self.inputs
    }

    /// Graph outputs, indexed from 0.
    pub fn outputs(&self) -> &[TensorId] {
        &self.outputs
    }

    /// Index of `t` among the graph inputs.
    pub fn input_index(&self, t: TensorId) -> Option<usize> {
        self.inputs.iter().position(|&x| x == t)
    }

    /// Index of `t` among the graph outputs (first occurrence).
    pub fn output_index(&self, t: TensorId) -> Option<usize> {
        self.outputs.iter().position(|&x| x == t)
    }

    /// Infos of the graph inputs, in order.
    pub fn input_infos(&self) -> Vec<TensorInfo> {
        self.inputs.iter().map(|t| self.tensors[*t].info.clone()).collect()
    }

    /// Infos of the graph outputs, in order.
    pub fn output_infos(&self) -> Vec<TensorInfo> {
        self.outputs.iter().map(|t| self.tensors[*t].info.clone()).collect()
    }

    /// The topological constraints.
    pub fn topo_cons(&self) -> &TopoCons {
        &self.topo_cons
    }

    /// Variables of this graph.
    pub fn variables(&self) -> impl Iterator<Item = &Tensor> {
        self.tensors.values().filter(|t| t.is_variable())
    }

    /// Constants of this graph.
    pub fn constants(&self) -> impl Iterator<Item = &Tensor> {
        self.tensors.values().filter(|t| t.is_constant())
    }

    /// Graphs called by the ops of this graph (each once, in first-seen creation order).
    pub fn called_graphs(&self) -> Vec<GraphId> {
        let mut seen = Vec::new();
        for op in self.ops_in_creation_order() {
            for g in self.ops[op].called_graphs() {
                if !seen.contains(&g) {
                    seen.push(g);
                }
            }
        }
        seen
    }

    // ----- tensors -----

    /// A name not yet used by a tensor of this graph, derived from `base`.
    pub fn unique_tensor_name(&mut self, base: &str) -> String {
        self.tensor_names.unique(base)
    }

    /// A name not yet used by an op of this graph, derived from `base`.
    pub fn unique_op_name(&mut self, base: &str) -> String {
        self.op_names.unique(base)
    }

    /// Add a tensor with exactly this name; an error if the name is taken.
    pub fn add_tensor(&mut self, name: &str, info: TensorInfo, kind: TensorKind) -> Result<TensorId> {
        if self.tensor_names.taken.contains_key(name) {
            return Err(IrError::DuplicateTensorName { graph: self.name.clone(), name: name.to_string() });
        }
        if let Some(data) = kind.data() {
            if data.info != info {
                return Err(IrError::Invalid(format!(
                    "data of tensor `{name}` in graph `{}` is {} but the tensor is declared {}",
                    self.name, data.info, info
                )));
            }
        }
        let name = name.to_string();
        let id = self.tensors.insert_with_key(|id| Tensor {
            id,
            name: name.clone(),
            info,
            kind,
            producer: None,
            consumers: Vec::new(),
        });
        self.tensor_names.taken.insert(name, id);
        Ok(id)
    }

    /// Append a graph input (an activation tensor) with exactly this name.
    pub fn add_input(&mut self, name: &str, info: TensorInfo) -> Result<TensorId> {
        let id = self.add_tensor(name, info, TensorKind::ActGrad)?;
        self.inputs.push(id);
        Ok(id)
    }

    /// Insert an existing, unproduced activation as graph input at `index`.
    pub fn insert_input(&mut self, index: usize, t: TensorId) -> Result<()> {
        let tensor = self.tensor(t)?;
        if tensor.producer.is_some() || tensor.kind != TensorKind::ActGrad || self.inputs.contains(&t) {
            return Err(IrError::Invalid(format!(
                "tensor `{}` of graph `{}` cannot become a graph input (produced, already an input, or not an activation)",
                tensor.name, self.name
            )));
        }
        let index = index.min(self.inputs.len());
        self.inputs.insert(index, t);
        Ok(())
    }

    /// Remove graph input `index`; the tensor stays in the graph.
    pub fn remove_input(&mut self, index: usize) -> Result<TensorId> {
        if index >= self.inputs.len() {
            return Err(IrError::Invalid(format!("graph `{}` has no input {index}", self.name)));
        }
        Ok(self.inputs.remove(index))
    }

    /// Append `t` to the graph outputs.
    pub fn add_output(&mut self, t: TensorId) -> Result<()> {
        self.tensor(t)?;
        self.outputs.push(t);
        Ok(())
    }

    /// Remove graph output `index`; the tensor stays in the graph.
    pub fn remove_output(&mut self, index: usize) -> Result<TensorId> {
        if index >= self.outputs.len() {
            return Err(IrError::Invalid(format!("graph `{}` has no output {index}", self.name)));
        }
        Ok(self.outputs.remove(index))
    }

    /// Remove a tensor that has no producer, no consumers and is not a graph input or output.
    pub fn remove_tensor(&mut self, t: TensorId) -> Result<Tensor> {
        let tensor = self.tensor(t)?;
        let reason = if tensor.producer.is_some() {
            Some("it has a producer")
        } else if !tensor.consumers.is_empty() {
            Some("it has consumers")
        } else if self.inputs.contains(&t) {
            Some("it is a graph input")
        } else if self.outputs.contains(&t) {
            Some("it is a graph output")
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(IrError::TensorInUse {
                graph: self.name.clone(),
                tensor: tensor.name.clone(),
                reason: reason.to_string(),
            });
        }
        let tensor = self.tensors.remove(t).expect("checked above");
        self.tensor_names.taken.remove(&tensor.name);
        Ok(tensor)
    }

    // ----- ops -----

    /// Add an op with no connections; the name is made unique.
    /// Prefer [`crate::Ir::create_op`], which connects and infers outputs.
    pub fn add_op(&mut self, def: &'static dyn OpDef, attrs: Attributes, name: &str) -> OpId {
        let name = self.op_names.unique(name);
        let seq = self.next_seq;
        self.next_seq += 1;
        let id = self.ops.insert_with_key(|id| Op {
            id,
            name: name.clone(),
            def,
            attrs,
            inputs: TensorIndexMap::default(),
            outputs: TensorIndexMap::default(),
            seq,
        });
        self.op_names.taken.insert(name, id);
        id
    }

    /// Connect `tensor` as input `index` of `op`.
    pub fn connect_input(&mut self, op: OpId, index: u32, tensor: TensorId) -> Result<()> {
        self.tensor(tensor)?;
        let o = self.ops.get_mut(op).ok_or_else(|| IrError::UnknownOp {
            graph: self.name.clone(),
            op: format!("{op:?}"),
        })?;
        if !o.inputs.insert(index, tensor) {
            return Err(IrError::IndexTaken { op: o.name.clone(), side: "input", index });
        }
        self.tensors[tensor].consumers.push(Port { op, index });
        Ok(())
    }

    /// Disconnect input `index` of `op`, returning the tensor that was there.
    pub fn disconnect_input(&mut self, op: OpId, index: u32) -> Result<TensorId> {
        let err = self.unknown_op(op);
        let o = self.ops.get_mut(op).ok_or(err)?;
        let t = o
            .inputs
            .remove(index)
            .ok_or_else(|| IrError::IndexNotConnected { op: o.name.clone(), side: "input", index })?;
        let consumers = &mut self.tensors[t].consumers;
        let pos = consumers.iter().position(|p| *p == Port { op, index }).expect("symmetric connectivity");
        consumers.swap_remove(pos);
        Ok(t)
    }

    /// Connect an existing, unproduced activation as output `index` of `op`.
    pub fn connect_output(&mut self, op: OpId, index: u32, tensor: TensorId) -> Result<()> {
        let t = self.tensor(tensor)?;
        let op_name = self.op(op)?.name.clone();
        if let Some(p) = t.producer {
            return Err(IrError::AlreadyProduced {
                graph: self.name.clone(),
                tensor: t.name.clone(),
                producer: self.ops[p.op].name.clone(),
                op: op_name,
            });
        }
        let what = if self.inputs.contains(&tensor) {
            Some("graph input")
        } else {
            match t.kind {
                TensorKind::ActGrad => None,
                TensorKind::Variable(_) => Some("variable"),
                TensorKind::Constant(_) => Some("constant"),
                TensorKind::Stream(_) => Some("stream"),
            }
        };
        if let Some(what) = what {
            return Err(IrError::NotProducible { graph: self.name.clone(), tensor: t.name.clone(), what, op: op_name });
        }
        let o = &mut self.ops[op];
        if !o.outputs.insert(index, tensor) {
            return Err(IrError::IndexTaken { op: op_name, side: "output", index });
        }
        self.tensors[tensor].producer = Some(Port { op, index });
        Ok(())
    }

    /// Create a new activation named (uniquely) after `name` and connect it as output `index` of `op`.
    pub fn create_output(&mut self, op: OpId, index: u32, name: &str, info: TensorInfo) -> Result<TensorId> {
        self.op(op)?;
        if self.ops[op].outputs.contains(index) {
            return Err(IrError::IndexTaken { op: self.ops[op].name.clone(), side: "output", index });
        }
        let name = self.tensor_names.unique(name);
        let t = self.add_tensor(&name, info, TensorKind::ActGrad)?;
        self.connect_output(op, index, t)?;
        Ok(t)
    }

    /// Disconnect output `index` of `op`; the tensor stays, unproduced.
    pub fn disconnect_output(&mut self, op: OpId, index: u32) -> Result<TensorId> {
        let err = self.unknown_op(op);
        let o = self.ops.get_mut(op).ok_or(err)?;
        let t = o
            .outputs
            .remove(index)
            .ok_or_else(|| IrError::IndexNotConnected { op: o.name.clone(), side: "output", index })?;
        self.tensors[t].producer = None;
        Ok(t)
    }

    /// Disconnect every input and output of `op` and remove it with its topological
    /// constraints. Its output tensors stay in the graph, unproduced.
    pub fn erase_op(&mut self, op: OpId) -> Result<Op> {
        let o = self.op(op)?;
        let ins: Vec<u32> = o.inputs.iter().map(|(i, _)| i).collect();
        let outs: Vec<u32> = o.outputs.iter().map(|(i, _)| i).collect();
        for i in ins {
            self.disconnect_input(op, i)?;
        }
        for i in outs {
            self.disconnect_output(op, i)?;
        }
        self.topo_cons.remove_op(op);
        let o = self.ops.remove(op).expect("checked above");
        self.op_names.taken.remove(&o.name);
        Ok(o)
    }

    /// Erase `op` and all of its output tensors (which must have no consumers and not be graph outputs).
    pub fn erase_op_and_outputs(&mut self, op: OpId) -> Result<()> {
        let outs: Vec<TensorId> = self.op(op)?.outputs.tensors().collect();
        for &t in &outs {
            let tensor = &self.tensors[t];
            if !tensor.consumers.is_empty() || self.outputs.contains(&t) {
                return Err(IrError::TensorInUse {
                    graph: self.name.clone(),
                    tensor: tensor.name.clone(),
                    reason: "it is consumed or a graph output".into(),
                });
            }
        }
        self.erase_op(op)?;
        for t in outs {
            self.remove_tensor(t)?;
        }
        Ok(())
    }

    /// Move every consumer of `from` onto `to` (same indices); graph outputs that were
    /// `from` become `to`.
    pub fn replace_all_uses(&mut self, from: TensorId, to: TensorId) -> Result<()> {
        self.tensor(from)?;
        self.tensor(to)?;
        let consumers = std::mem::take(&mut self.tensors[from].consumers);
        for p in &consumers {
            let ins = &mut self.ops[p.op].inputs;
            ins.remove(p.index);
            ins.insert(p.index, to);
        }
        self.tensors[to].consumers.extend(consumers);
        for o in self.outputs.iter_mut() {
            if *o == from {
                *o = to;
            }
        }
        Ok(())
    }

    /// Replace op `old` by `new`: `new` takes over `old`'s inputs and outputs at the same
    /// indices (so consumers are untouched) and its topological constraints; `old` is erased.
    /// `new` must have no connections yet.
    pub fn replace_op(&mut self, old: OpId, new: OpId) -> Result<()> {
        let o = self.op(old)?.clone();
        let n = self.op(new)?;
        if !n.inputs.is_empty() || !n.outputs.is_empty() {
            return Err(IrError::Invalid(format!("replacement op `{}` is already connected", n.name)));
        }
        self.topo_cons.transfer(old, new);
        self.erase_op(old)?;
        for (i, t) in o.inputs.iter() {
            self.connect_input(new, i, t)?;
        }
        for (i, t) in o.outputs.iter() {
            self.connect_output(new, i, t)?;
        }
        Ok(())
    }

    // ----- topological constraints -----

    /// Require `before` to be scheduled before `after`.
    pub fn add_topo_con(&mut self, before: OpId, after: OpId) -> Result<()> {
        self.check_con(before, after)?;
        self.topo_cons.insert(before, after, false);
        Ok(())
    }

    /// Require `before` immediately before `after` (tied: scheduled adjacently).
    pub fn add_tied_topo_con(&mut self, before: OpId, after: OpId) -> Result<()> {
        self.check_con(before, after)?;
        self.topo_cons.insert(before, after, true);
        Ok(())
    }

    /// Remove the constraint `before -> after`; returns whether it existed.
    pub fn remove_topo_con(&mut self, before: OpId, after: OpId) -> bool {
        self.topo_cons.remove(before, after)
    }

    /// Move all constraints of `from` onto `to`.
    pub fn transfer_topo_cons(&mut self, from: OpId, to: OpId) -> Result<()> {
        self.op(from)?;
        self.op(to)?;
        self.topo_cons.transfer(from, to);
        Ok(())
    }

    fn check_con(&self, before: OpId, after: OpId) -> Result<()> {
        let b = self.op(before)?;
        self.op(after)?;
        if before == after {
            return Err(IrError::SelfConstraint(b.name.clone()));
        }
        Ok(())
    }

    pub(crate) fn unknown_tensor(&self, id: TensorId) -> IrError {
        IrError::UnknownTensor { graph: self.name.clone(), tensor: format!("{id:?}") }
    }

    pub(crate) fn unknown_op(&self, id: OpId) -> IrError {
        IrError::UnknownOp { graph: self.name.clone(), op: format!("{id:?}") }
    }
}
