//! Helpers shared by the integration tests.
#![allow(dead_code)]

use popart_ir::{Attributes, DataType, Graph, GraphId, Ir, OpId, TensorId, TensorInfo};

/// float32 info of `shape`.
pub fn f32i(shape: &[usize]) -> TensorInfo {
    TensorInfo::new(DataType::Float32, shape)
}

/// Create an op with no attributes and return (op, output 0).
pub fn op1(ir: &mut Ir, g: GraphId, ty: &str, inputs: &[TensorId], name: &str) -> (OpId, TensorId) {
    let ins: Vec<(u32, TensorId)> = inputs.iter().enumerate().map(|(i, &t)| (i as u32, t)).collect();
    let op = ir.create_op(g, ty, Attributes::new(), &ins, name).unwrap();
    let out = ir.graph(g).unwrap().op(op).unwrap().output(0).unwrap();
    (op, out)
}

/// True if there is an edge `a -> b`: a data edge (an output of `a` consumed by `b`)
/// or a topological constraint.
pub fn has_edge(g: &Graph, a: OpId, b: OpId) -> bool {
    let data = g.op(a).unwrap().outputs().tensors().any(|t| g.tensor(t).unwrap().consumers().iter().any(|p| p.op == b));
    data || g.topo_cons().contains(a, b)
}

/// Check that `names` (ops of `g`) form a cycle in order, the first following the last.
pub fn assert_real_cycle(g: &Graph, names: &[String]) {
    assert!(!names.is_empty());
    let ids: Vec<OpId> = names.iter().map(|n| g.op_by_name(n).unwrap().id).collect();
    for k in 0..ids.len() {
        let (a, b) = (ids[k], ids[(k + 1) % ids.len()]);
        assert!(
            has_edge(g, a, b),
            "no edge {} -> {} in reported cycle {names:?}",
            names[k],
            names[(k + 1) % ids.len()]
        );
    }
    let mut sorted = names.to_vec();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), names.len(), "cycle {names:?} repeats an op");
}
