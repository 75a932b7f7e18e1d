//! Graphviz DOT export of a whole IR.

use std::fmt::Write as _;

use slotmap::SecondaryMap;

use crate::text::quote;
use crate::{Graph, Ir, OpId, TensorId, TensorKind};

/// The IR as a Graphviz `digraph`: one cluster per graph (main first), a box per op
/// (name and type), an ellipse per tensor (name and type; graph inputs, variables,
/// constants and streams styled apart), solid edges for data (labelled with the
/// input or output index), dashed edges for topological constraints (bold red when
/// tied) and dotted edges from subgraph ops to the graphs they call.
///
/// A pure function of the IR: the same IR always gives the same text.
///
/// ```
/// use popart_ir::{dot, Attributes, DataType, Ir, TensorInfo};
/// let mut ir = Ir::new();
/// let main = ir.main_graph_id();
/// let x = ir.main_graph_mut().add_input("x", TensorInfo::new(DataType::Float32, [2])).unwrap();
/// ir.create_op(main, "Relu", Attributes::new(), &[(0, x)], "relu").unwrap();
/// let d = dot::to_dot(&ir);
/// assert!(d.starts_with("digraph ir {"));
/// assert!(d.contains("\"g0_t0\" -> \"g0_o0\" [label=\"0\"]"));
/// ```
pub fn to_dot(ir: &Ir) -> String {
    let mut out = String::from("digraph ir {\n  compound=true;\n  node [fontname=\"monospace\"];\n");
    let graphs: Vec<&Graph> = ir.graphs().collect();
    // Node ids are positional (graph index, creation index) so output is independent of arena ids.
    let op_ids: Vec<Vec<OpId>> = graphs.iter().map(|g| g.ops_in_creation_order()).collect();
    let tensor_ids: Vec<Vec<TensorId>> = graphs.iter().map(|g| g.tensors_in_creation_order()).collect();
    let op_pos: Vec<SecondaryMap<OpId, usize>> =
        op_ids.iter().map(|v| v.iter().enumerate().map(|(k, &o)| (o, k)).collect()).collect();
    let tensor_pos: Vec<SecondaryMap<TensorId, usize>> =
        tensor_ids.iter().map(|v| v.iter().enumerate().map(|(k, &t)| (t, k)).collect()).collect();
    let op_node = |gi: usize, o: OpId| -> String {
        let k = op_pos[gi].get(o).copied().unwrap_or(usize::MAX);
        format!("\"g{gi}_o{k}\"")
    };
    for (gi, g) in graphs.iter().enumerate() {
        let tpos = |t: TensorId| tensor_pos[gi].get(t).copied().unwrap_or(usize::MAX);
        let _ = writeln!(out, "  subgraph \"cluster_g{gi}\" {{");
        let _ = writeln!(out, "    label={};", quote(g.name()));
        for (k, &t) in tensor_ids[gi].iter().enumerate() {
            let t = &g.tensors[t];
            let style = match t.kind {
                TensorKind::ActGrad if g.input_index(t.id).is_some() => ", style=filled, fillcolor=\"#dde8ff\"",
                TensorKind::ActGrad => "",
                TensorKind::Variable(_) => ", style=filled, fillcolor=\"#ffe9c6\"",
                TensorKind::Constant(_) => ", style=filled, fillcolor=\"#e6e6e6\"",
                TensorKind::Stream(_) => ", shape=cds",
            };
            let label = format!("{}\n{} {}", t.name, t.kind.short_name(), t.info);
            let _ = writeln!(out, "    \"g{gi}_t{k}\" [label={}{style}];", quote(&label));
        }
        for (k, &o) in op_ids[gi].iter().enumerate() {
            let op = &g.ops[o];
            let label = format!("{}\n{}", op.name, op.op_type());
            let _ = writeln!(out, "    \"g{gi}_o{k}\" [shape=box, label={}];", quote(&label));
        }
        out.push_str("  }\n");
        for (k, &o) in op_ids[gi].iter().enumerate() {
            let op = &g.ops[o];
            for (i, t) in op.inputs.iter() {
                let _ = writeln!(out, "  \"g{gi}_t{}\" -> \"g{gi}_o{k}\" [label=\"{i}\"];", tpos(t));
            }
            for (i, t) in op.outputs.iter() {
                let _ = writeln!(out, "  \"g{gi}_o{k}\" -> \"g{gi}_t{}\" [label=\"{i}\"];", tpos(t));
            }
            for (key, called) in op.attrs.iter().filter_map(|(k, v)| match v {
                crate::AttrValue::Graph(g) => Some((k, *g)),
                _ => None,
            }) {
                if let Some(ci) = graphs.iter().position(|g| g.id() == called) {
                    // Point at the called graph's first node, clipped to its cluster.
                    let target = if !tensor_ids[ci].is_empty() {
                        format!("\"g{ci}_t0\"")
                    } else if !op_ids[ci].is_empty() {
                        format!("\"g{ci}_o0\"")
                    } else {
                        continue;
                    };
                    let _ = writeln!(
                        out,
                        "  \"g{gi}_o{k}\" -> {target} [style=dotted, lhead=\"cluster_g{ci}\", label={}];",
                        quote(key)
                    );
                }
            }
        }
        let seq = |o: OpId| g.ops.get(o).map_or(u64::MAX, |op| op.seq);
        for (b, a, tied) in g.topo_cons.sorted_edges(seq) {
            let style = if tied { "style=dashed, color=red, penwidth=2" } else { "style=dashed" };
            let _ = writeln!(out, "  {} -> {} [{style}];", op_node(gi, b), op_node(gi, a));
        }
    }
    out.push_str("}\n");
    out
}
