//! The verifier: checks every structural invariant of an IR.

use slotmap::SecondaryMap;

use crate::ir::with_input_infos;
use crate::{Graph, Ir, IrError, Port, Result, TensorId, TensorKind};

impl Ir {
    /// Check every invariant of every graph:
    /// - connectivity is symmetric (op index maps agree with tensor producer/consumers);
    /// - each tensor has at most one producer, and graph inputs, variables,
    ///   constants and streams have none;
    /// - graph inputs are distinct activations; graph outputs exist; every other
    ///   activation that is read (consumed or a graph output) has a producer;
    /// - every tensor's byte size fits ([`TensorInfo::checked_nbytes`](crate::TensorInfo::checked_nbytes),
    ///   else [`IrError::TensorTooLarge`]); `num_host_transfers` and `replication_factor` are at least 1;
    /// - streams live in the main graph only; variable and constant data match their type
    ///   and are valid ([`IrError::HostData`]: length, bool bytes 0 or 1);
    /// - every op references tensors of its own graph and existing called graphs;
    /// - an op with an [`crate::IpuRoute`] (`IpuCopy`) placed on an IPU is placed on
    ///   its destination;
    /// - shape inference, re-run on every op, reads every connected input and agrees with
    ///   each output (the error names the op and the first output that differs; this also
    ///   checks that subgraph ops match the arity and types of the graphs they call, and
    ///   that hand-built gradient ops fit their forward tensors);
    /// - topological constraints join live ops of the same graph, and each graph
    ///   can be scheduled (no cycle through data edges and constraints);
    /// - no graph calls itself, directly or indirectly.
    ///
    /// Broken invariants are reported as [`IrError::Invalid`] naming the graph, op and
    /// tensor; inference failures as [`IrError::Inference`]; cycles as
    /// [`IrError::Cycle`]; recursion as [`IrError::RecursiveGraph`].
    ///
    /// ```
    /// use popart_ir::{Attributes, AttrValue, DataType, Ir, IrError, TensorInfo};
    /// let mut ir = Ir::new();
    /// let main = ir.main_graph_id();
    /// let x = ir.main_graph_mut().add_input("x", TensorInfo::new(DataType::Float32, [2, 3])).unwrap();
    /// let r = ir.create_op(main, "Reshape", Attributes::new().with("shape", AttrValue::Ints(vec![3, 2])), &[(0, x)], "r").unwrap();
    /// ir.verify().unwrap();
    /// // Editing attributes does not re-run inference: the verifier notices.
    /// ir.main_graph_mut().op_attrs_mut(r).unwrap().set("shape", AttrValue::Ints(vec![6]));
    /// assert!(matches!(ir.verify(), Err(IrError::Invalid(_))));
    /// ```
    pub fn verify(&self) -> Result<()> {
        if self.num_host_transfers == 0 {
            return Err(IrError::ZeroSetting { setting: "num_host_transfers" });
        }
        if self.replication_factor == 0 {
            return Err(IrError::ZeroSetting { setting: "replication_factor" });
        }
        self.graphs_callees_first()?;
        for g in self.graphs() {
            self.verify_graph(g)?;
        }
        self.verify_remote()?;
        self.verify_variable_settings()
    }

    fn verify_graph(&self, g: &Graph) -> Result<()> {
        let bad = |msg: String| Err(IrError::Invalid(format!("graph `{}`: {msg}", g.name)));
        let mut input_ports = 0usize;
        for op in g.ops.values() {
            for (i, t) in op.inputs.iter() {
                if !g.tensors.contains_key(t) {
                    return bad(format!("op `{}` input {i} is not a tensor of this graph", op.name));
                }
                input_ports += 1;
            }
            for (i, t) in op.outputs.iter() {
                let Some(tensor) = g.tensors.get(t) else {
                    return bad(format!("op `{}` output {i} is not a tensor of this graph", op.name));
                };
                if tensor.producer != Some(Port { op: op.id, index: i }) {
                    return bad(format!(
                        "tensor `{}` does not name op `{}` output {i} as its producer",
                        tensor.name, op.name
                    ));
                }
            }
            for called in op.attrs.graphs() {
                if !self.contains_graph(called) {
                    return bad(format!("op `{}` calls a graph that is not in this IR", op.name));
                }
            }
            check_input_kinds(g, &op.name, op.def, &op.attrs, op.inputs.iter())?;
            if let (Some(route), Some(ipu)) = (op.def.ipu_route(&op.attrs), op.placement.ipu) {
                if ipu != route.destination {
                    return bad(format!(
                        "op `{}` ({}) copies to IPU {} but is placed on IPU {ipu}",
                        op.name,
                        op.op_type(),
                        route.destination
                    ));
                }
            }
            let expected = with_input_infos(g, op.inputs.iter(), |in_infos| {
                crate::op::run_infer(op.def, &op.name, in_infos, &op.attrs, self)
            })?;
            // Name the first output that disagrees (a hand-built gradient op with a
            // wrong shape, an attribute edited after creation...).
            if let Some((i, t)) =
                op.outputs.iter().find(|(i, t)| expected.get(*i as usize) != Some(&g.tensors[*t].info))
            {
                let tensor = &g.tensors[t];
                return bad(match expected.get(i as usize) {
                    Some(e) => format!(
                        "output {i} (`{}`) of op `{}` ({}) is {} but shape inference gives {e}",
                        tensor.name,
                        op.name,
                        op.op_type(),
                        tensor.info
                    ),
                    None => format!(
                        "op `{}` ({}) has output {i} (`{}`) but shape inference gives only {} outputs",
                        op.name,
                        op.op_type(),
                        tensor.name,
                        expected.len()
                    ),
                });
            }
            if expected.len() != op.outputs.len() {
                return bad(format!(
                    "outputs of op `{}` are [{}] but shape inference gives [{}]",
                    op.name,
                    op.outputs
                        .iter()
                        .map(|(i, t)| format!("{i}: {}", g.tensors[t].info))
                        .collect::<Vec<_>>()
                        .join(", "),
                    expected.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ")
                ));
            }
        }
        let mut consumer_entries = 0usize;
        for t in g.tensors.values() {
            for p in &t.consumers {
                match g.ops.get(p.op) {
                    Some(op) if op.inputs.get(p.index) == Some(t.id) => {}
                    _ => return bad(format!("tensor `{}` lists a consumer that does not consume it", t.name)),
                }
            }
            if has_duplicates(&t.consumers) {
                return bad(format!("tensor `{}` lists a consumer twice", t.name));
            }
            consumer_entries += t.consumers.len();
            if let Some(p) = t.producer {
                match g.ops.get(p.op) {
                    Some(op) if op.outputs.get(p.index) == Some(t.id) => {}
                    _ => return bad(format!("tensor `{}` names a producer that does not produce it", t.name)),
                }
                if t.kind != TensorKind::ActGrad {
                    return bad(format!("{} tensor `{}` has a producer", t.kind.short_name(), t.name));
                }
            }
            if matches!(t.kind, TensorKind::Stream(_)) && g.id != self.main_graph_id() {
                return bad(format!("stream `{}` is not in the main graph", t.name));
            }
            if t.info.checked_nbytes().is_none() {
                return Err(IrError::TensorTooLarge {
                    graph: g.name.clone(),
                    tensor: t.name.clone(),
                    info: t.info.clone(),
                });
            }
            if let Some(d) = t.kind.data() {
                if d.info != t.info {
                    return bad(format!("data of `{}` is {} but the tensor is {}", t.name, d.info, t.info));
                }
                if let Err(source) = d.validate() {
                    return Err(IrError::HostData { graph: g.name.clone(), tensor: t.name.clone(), source });
                }
            }
        }
        // Every consumer entry matches a distinct op input port; equal counts make
        // the correspondence one-to-one. Otherwise find the port that is missing.
        if consumer_entries != input_ports {
            for op in g.ops.values() {
                for (i, t) in op.inputs.iter() {
                    let tensor = &g.tensors[t];
                    if !tensor.consumers.contains(&Port { op: op.id, index: i }) {
                        return bad(format!(
                            "tensor `{}` does not list op `{}` input {i} as a consumer",
                            tensor.name, op.name
                        ));
                    }
                }
            }
        }
        let mut is_input: SecondaryMap<TensorId, ()> = SecondaryMap::new();
        for (i, &t) in g.inputs.iter().enumerate() {
            let Some(tensor) = g.tensors.get(t) else {
                return bad(format!("input {i} is not a tensor of this graph"));
            };
            if tensor.producer.is_some() {
                return bad(format!("graph input `{}` is produced by an op", tensor.name));
            }
            if tensor.kind != TensorKind::ActGrad {
                return bad(format!("graph input `{}` is a {}", tensor.name, tensor.kind.short_name()));
            }
            if is_input.insert(t, ()).is_some() {
                return bad(format!("tensor `{}` is graph input more than once", tensor.name));
            }
        }
        for (i, &t) in g.outputs.iter().enumerate() {
            if !g.tensors.contains_key(t) {
                return bad(format!("output {i} is not a tensor of this graph"));
            }
        }
        // An activation is defined by its producer or as a graph input; one with
        // neither (its producer erased, or written so in the text form) that an
        // op or the graph's outputs read would be read uninitialised.
        let is_output: std::collections::HashSet<TensorId> = g.outputs.iter().copied().collect();
        if let Some(t) = g.tensors.values().find(|t| {
            t.kind == TensorKind::ActGrad
                && t.producer.is_none()
                && !is_input.contains_key(t.id)
                && (!t.consumers.is_empty() || is_output.contains(&t.id))
        }) {
            return bad(format!("activation `{}` is read but has no producer and is not a graph input", t.name));
        }
        for (b, a, _) in g.topo_cons.edges() {
            if !g.ops.contains_key(b) || !g.ops.contains_key(a) {
                return bad("a topological constraint refers to an op that is not in this graph".into());
            }
        }
        g.check_acyclic()
    }
}

fn has_duplicates(ports: &[Port]) -> bool {
    if ports.len() <= 16 {
        ports.iter().enumerate().any(|(k, p)| ports[..k].contains(p))
    } else {
        let mut v = ports.to_vec();
        v.sort_unstable();
        v.windows(2).any(|w| w[0] == w[1])
    }
}

/// Deliberate corruption of an IR's internal bookkeeping, for testing that the
/// verifier catches broken invariants that the editing API never produces.
/// Not part of the supported API.
#[doc(hidden)]
pub mod test_hooks {
    use crate::{Graph, OpId, Port, TensorId, TensorInfo, TensorKind};

    /// One way of breaking an invariant.
    #[derive(Clone, Debug)]
    pub enum Corruption {
        /// Remove `op` input `index` from its tensor's consumer list only.
        DropConsumerEntry { op: OpId, index: u32 },
        /// Add a consumer entry to `tensor` that its op does not match.
        AddConsumerEntry { tensor: TensorId, port: Port },
        /// Set (or clear) a tensor's producer without touching ops.
        SetProducer { tensor: TensorId, producer: Option<Port> },
        /// Point `op` input `index` at `tensor` without updating consumers.
        SetOpInput { op: OpId, index: u32, tensor: TensorId },
        /// Point `op` output `index` at `tensor` without updating the producer.
        SetOpOutput { op: OpId, index: u32, tensor: TensorId },
        /// Overwrite a tensor's info.
        SetInfo { tensor: TensorId, info: TensorInfo },
        /// Overwrite a tensor's kind.
        SetKind { tensor: TensorId, kind: TensorKind },
        /// Append to the graph inputs without checks.
        PushInput(TensorId),
        /// Append to the graph outputs without checks.
        PushOutput(TensorId),
        /// Add a constraint without checking that the ops exist.
        AddTopoCon { before: OpId, after: OpId },
    }

    /// Apply `c` to `g`, bypassing every check. Panics if an id it indexes by is dead.
    // A test hook that corrupts on purpose: panicking on a dead id is its contract.
    #[allow(clippy::expect_used)]
    pub fn corrupt(g: &mut Graph, c: Corruption) {
        match c {
            Corruption::DropConsumerEntry { op, index } => {
                let t = g.ops[op].inputs.get(index).expect("connected input");
                g.tensors[t].consumers.retain(|p| *p != Port { op, index });
            }
            Corruption::AddConsumerEntry { tensor, port } => g.tensors[tensor].consumers.push(port),
            Corruption::SetProducer { tensor, producer } => g.tensors[tensor].producer = producer,
            Corruption::SetOpInput { op, index, tensor } => {
                g.ops[op].inputs.remove(index);
                g.ops[op].inputs.insert(index, tensor);
            }
            Corruption::SetOpOutput { op, index, tensor } => {
                g.ops[op].outputs.remove(index);
                g.ops[op].outputs.insert(index, tensor);
            }
            Corruption::SetInfo { tensor, info } => g.tensors[tensor].info = info,
            Corruption::SetKind { tensor, kind } => g.tensors[tensor].kind = kind,
            Corruption::PushInput(t) => g.inputs.push(t),
            Corruption::PushOutput(t) => g.outputs.push(t),
            Corruption::AddTopoCon { before, after } => g.topo_cons.insert(before, after, false),
        }
    }
}

/// Inputs an op may not take: a stream tensor (it must be loaded with `HostLoad`),
/// or a constant at an input the op writes in place.
pub(crate) fn check_input_kinds(
    g: &Graph,
    op_name: &str,
    def: &dyn crate::OpDef,
    attrs: &crate::Attributes,
    inputs: impl Iterator<Item = (u32, crate::TensorId)>,
) -> Result<()> {
    let mut modified: Option<Vec<u32>> = None;
    for (i, t) in inputs {
        let Some(tensor) = g.tensors.get(t) else { continue };
        match tensor.kind {
            TensorKind::Stream(_) => {
                return Err(IrError::StreamAsInput {
                    graph: g.name.clone(),
                    op: op_name.to_string(),
                    tensor: tensor.name.clone(),
                })
            }
            TensorKind::Constant(_) if modified.get_or_insert_with(|| def.modified_inputs(attrs)).contains(&i) => {
                return Err(IrError::ModifiesConstant {
                    graph: g.name.clone(),
                    op: op_name.to_string(),
                    tensor: tensor.name.clone(),
                })
            }
            _ if modified.get_or_insert_with(|| def.modified_inputs(attrs)).contains(&i) => {
                // A write through a view of a constant writes the constant.
                if let Some(c) = crate::alias::aliased_constant(g, t) {
                    return Err(IrError::ModifiesConstant {
                        graph: g.name.clone(),
                        op: op_name.to_string(),
                        tensor: g.tensors.get(c).map_or_else(String::new, |c| c.name.clone()),
                    });
                }
            }
            _ => {}
        }
    }
    Ok(())
}
