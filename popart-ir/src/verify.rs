//! The verifier: checks every structural invariant of an IR.

use crate::op::InferContext;
use crate::{Graph, Ir, IrError, Port, Result, TensorKind};

impl Ir {
    /// Check every invariant of every graph:
    /// - connectivity is symmetric (op index maps agree with tensor producer/consumers);
    /// - each tensor has at most one producer, and graph inputs, variables,
    ///   constants and streams have none;
    /// - graph inputs are distinct activations; graph outputs exist;
    /// - streams live in the main graph only;
    /// - every op references tensors of its own graph and existing called graphs;
    /// - shape inference, re-run on every op, agrees with its outputs (this also checks
    ///   that subgraph ops match the arity and types of the graphs they call);
    /// - topological constraints join live ops of the same graph, and each graph
    ///   can be scheduled (no cycle through data edges and constraints);
    /// - no graph calls itself, directly or indirectly.
    pub fn verify(&self) -> Result<()> {
        self.graphs_callees_first()?;
        for g in self.graphs() {
            self.verify_graph(g)?;
        }
        Ok(())
    }

    fn verify_graph(&self, g: &Graph) -> Result<()> {
        let bad = |msg: String| Err(IrError::Invalid(format!("graph `{}`: {msg}", g.name)));
        for op in g.ops() {
            for (i, t) in op.inputs.iter() {
                let Some(tensor) = g.tensors.get(t) else {
                    return bad(format!("op `{}` input {i} is not a tensor of this graph", op.name));
                };
                if !tensor.consumers.contains(&Port { op: op.id, index: i }) {
                    return bad(format!("tensor `{}` does not list op `{}` input {i} as a consumer", tensor.name, op.name));
                }
            }
            for (i, t) in op.outputs.iter() {
                let Some(tensor) = g.tensors.get(t) else {
                    return bad(format!("op `{}` output {i} is not a tensor of this graph", op.name));
                };
                if tensor.producer != Some(Port { op: op.id, index: i }) {
                    return bad(format!("tensor `{}` does not name op `{}` output {i} as its producer", tensor.name, op.name));
                }
            }
            for called in op.called_graphs() {
                if !self.contains_graph(called) {
                    return bad(format!("op `{}` calls a graph that is not in this IR", op.name));
                }
            }
            let in_infos: Vec<(u32, crate::TensorInfo)> =
                op.inputs.iter().map(|(i, t)| (i, g.tensors[t].info.clone())).collect();
            let ctx = InferContext { op_name: &op.name, op_type: op.op_type(), inputs: &in_infos, attrs: &op.attrs, ir: self };
            let expected = op.def.infer(&ctx)?;
            let actual: Vec<(u32, &crate::TensorInfo)> = op.outputs.iter().map(|(i, t)| (i, &g.tensors[t].info)).collect();
            let matches = expected.len() == actual.len()
                && actual.iter().all(|(i, info)| expected.get(*i as usize) == Some(*info));
            if !matches {
                return bad(format!(
                    "outputs of op `{}` are [{}] but shape inference gives [{}]",
                    op.name,
                    actual.iter().map(|(i, t)| format!("{i}: {t}")).collect::<Vec<_>>().join(", "),
                    expected.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ")
                ));
            }
        }
        for t in g.tensors() {
            for p in &t.consumers {
                match g.ops.get(p.op) {
                    Some(op) if op.inputs.get(p.index) == Some(t.id) => {}
                    _ => return bad(format!("tensor `{}` lists a consumer that does not consume it", t.name)),
                }
            }
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
            if let Some(d) = t.kind.data() {
                if d.info != t.info || d.bytes.len() != t.info.nbytes() {
                    return bad(format!("data of `{}` does not match its type {}", t.name, t.info));
                }
            }
        }
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
            if g.inputs[..i].contains(&t) {
                return bad(format!("tensor `{}` is graph input more than once", tensor.name));
            }
        }
        for (i, &t) in g.outputs.iter().enumerate() {
            if !g.tensors.contains_key(t) {
                return bad(format!("output {i} is not a tensor of this graph"));
            }
        }
        for (b, a, _) in g.topo_cons.edges() {
            if !g.ops.contains_key(b) || !g.ops.contains_key(a) {
                return bad("a topological constraint refers to an op that is not in this graph".into());
            }
        }
        g.schedule_with(crate::ScheduleOptions { optimize_liveness: false })?;
        Ok(())
    }
}
