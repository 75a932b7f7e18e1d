//! The scheduler: property tests on random DAGs with random topoCons, cycle
//! reporting, tied constraints, and the liveness heuristic.

use crate::common;

use std::collections::{HashMap, HashSet};

use common::{assert_real_cycle, f32i, op1};
use popart_ir::{AttrValue, Attributes, Graph, Ir, IrError, OpId, ScheduleOptions, TensorId, TensorKind};
use proptest::prelude::*;

/// A random DAG: op `i` consumes 1 or 2 tensors chosen among the graph input
/// (index 0) and the outputs of ops `0..i` (index `j + 1`).
#[derive(Clone, Debug)]
struct Dag {
    /// Per op: indices into the tensor pool (0 = graph input, k + 1 = output of op k).
    inputs: Vec<Vec<usize>>,
    /// Extra constraints between ops (`a < b`, always forward in creation order).
    cons: Vec<(usize, usize, bool)>,
}

fn dag_strategy(max_ops: usize) -> impl Strategy<Value = Dag> {
    (2..max_ops)
        .prop_flat_map(|n| {
            let ops = (0..n).map(|i| proptest::collection::vec(0..=i, 1..=2).boxed()).collect::<Vec<_>>();
            let cons = proptest::collection::vec((0..n, 0..n, proptest::bool::weighted(0.3)), 0..n);
            (ops, cons)
        })
        .prop_map(|(inputs, cons)| {
            let cons = cons.into_iter().filter(|(a, b, _)| a != b).map(|(a, b, t)| (a.min(b), a.max(b), t)).collect();
            Dag { inputs, cons }
        })
}

/// Build the DAG in a fresh IR; returns the IR and the op ids in creation order.
fn build(dag: &Dag) -> (Ir, Vec<OpId>) {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let x = ir.main_graph_mut().add_input("x", f32i(&[4])).unwrap();
    let mut pool: Vec<TensorId> = vec![x];
    let mut ops = Vec::new();
    for (i, ins) in dag.inputs.iter().enumerate() {
        let ts: Vec<TensorId> = ins.iter().map(|&k| pool[k]).collect();
        let ty = if ts.len() == 2 { "Add" } else { "Neg" };
        let (op, out) = op1(&mut ir, main, ty, &ts, &format!("op{i}"));
        ops.push(op);
        pool.push(out);
    }
    for &(a, b, tied) in &dag.cons {
        let g = ir.main_graph_mut();
        if tied {
            g.add_tied_topo_con(ops[a], ops[b]).unwrap();
        } else {
            g.add_topo_con(ops[a], ops[b]).unwrap();
        }
    }
    (ir, ops)
}

/// Every (before, after) pair the schedule must respect: data edges and constraints.
fn required_edges(g: &Graph) -> Vec<(OpId, OpId)> {
    let mut v = Vec::new();
    for op in g.ops() {
        for t in op.inputs().tensors() {
            if let Some(p) = g.tensor(t).unwrap().producer() {
                v.push((p.op, op.id));
            }
        }
    }
    v.extend(g.topo_cons().edges().map(|(a, b, _)| (a, b)));
    v
}

fn check_schedule(g: &Graph, order: &[OpId]) {
    assert_eq!(order.len(), g.num_ops());
    let pos: HashMap<OpId, usize> = order.iter().enumerate().map(|(i, &o)| (o, i)).collect();
    assert_eq!(pos.len(), order.len(), "an op is scheduled twice");
    for (a, b) in required_edges(g) {
        assert!(pos[&a] < pos[&b], "{} must precede {}", g.op(a).unwrap().name, g.op(b).unwrap().name);
    }
}

/// Does `to` reach `from`'s ... : true if there is a path `from -> .. -> to`.
fn reaches(g: &Graph, from: OpId, to: OpId) -> bool {
    let edges = required_edges(g);
    let mut seen = HashSet::new();
    let mut stack = vec![from];
    while let Some(o) = stack.pop() {
        if o == to {
            return true;
        }
        if seen.insert(o) {
            stack.extend(edges.iter().filter(|(a, _)| *a == o).map(|(_, b)| *b));
        }
    }
    false
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn schedules_respect_every_edge_and_constraint(dag in dag_strategy(40)) {
        let (ir, _) = build(&dag);
        let g = ir.main_graph();
        for opts in [ScheduleOptions { optimize_liveness: true }, ScheduleOptions { optimize_liveness: false }] {
            let order = g.schedule_with(opts).unwrap();
            check_schedule(g, &order);
            // Deterministic.
            prop_assert_eq!(g.schedule_with(opts).unwrap(), order);
        }
        ir.verify().unwrap();
    }

    #[test]
    fn tied_pairs_are_adjacent_when_possible(dag in dag_strategy(30), picks in proptest::collection::vec(any::<proptest::sample::Index>(), 0..8)) {
        let (mut ir, ops) = build(&Dag { inputs: dag.inputs.clone(), cons: vec![] });
        // Tie (p, c) where c's only predecessor is p, and each op is in at most one tie.
        let mut tied: Vec<(OpId, OpId)> = Vec::new();
        let mut used = HashSet::new();
        for pick in picks {
            let c = pick.index(ops.len());
            let producers: HashSet<usize> =
                dag.inputs[c].iter().filter(|&&k| k > 0).map(|&k| k - 1).collect();
            if producers.len() != 1 {
                continue;
            }
            let p = *producers.iter().next().unwrap();
            if used.contains(&p) || used.contains(&c) {
                continue;
            }
            used.insert(p);
            used.insert(c);
            ir.main_graph_mut().add_tied_topo_con(ops[p], ops[c]).unwrap();
            tied.push((ops[p], ops[c]));
        }
        let g = ir.main_graph();
        let order = g.schedule().unwrap();
        check_schedule(g, &order);
        let pos: HashMap<OpId, usize> = order.iter().enumerate().map(|(i, &o)| (o, i)).collect();
        for (p, c) in tied {
            prop_assert_eq!(pos[&p] + 1, pos[&c], "tied {} -> {}", g.op(p).unwrap().name, g.op(c).unwrap().name);
        }
    }

    #[test]
    fn back_edges_are_cycles_exactly_when_a_path_exists(dag in dag_strategy(30), a in any::<proptest::sample::Index>(), b in any::<proptest::sample::Index>()) {
        let (mut ir, ops) = build(&dag);
        let (a, b) = (a.index(ops.len()), b.index(ops.len()));
        prop_assume!(a < b);
        // Add the backward constraint b -> a: a cycle iff a already reaches b.
        let cyclic = reaches(ir.main_graph(), ops[a], ops[b]);
        // The checked path refuses exactly the cycles, naming a real one.
        match ir.main_graph_mut().add_topo_con(ops[b], ops[a]) {
            Ok(()) => prop_assert!(!cyclic, "add_topo_con missed a cycle"),
            Err(IrError::Cycle { ops: names, .. }) => {
                prop_assert!(cyclic, "add_topo_con reported a cycle that does not exist: {:?}", names);
                ir.main_graph_mut().add_topo_con_unchecked(ops[b], ops[a]).unwrap();
                assert_real_cycle(ir.main_graph(), &names);
            }
            Err(e) => prop_assert!(false, "unexpected error {}", e),
        }
        let g = ir.main_graph();
        match g.schedule() {
            Ok(order) => {
                prop_assert!(!cyclic, "missed a cycle");
                check_schedule(g, &order);
                ir.verify().unwrap();
            }
            Err(IrError::Cycle { graph, ops: names }) => {
                prop_assert!(cyclic, "reported a cycle that does not exist: {:?}", names);
                prop_assert_eq!(graph, "main");
                assert_real_cycle(g, &names);
                match ir.verify() {
                    Err(IrError::Cycle { ops: names, .. }) => assert_real_cycle(g, &names),
                    other => prop_assert!(false, "verify: expected a cycle, got {:?}", other),
                }
            }
            Err(e) => prop_assert!(false, "unexpected error {}", e),
        }
    }
}

/// Peak bytes of live activations produced by ops, for `order`: an output is live
/// from its producer until its last consumer has run (graph outputs until the end).
fn peak_live_bytes(g: &Graph, order: &[OpId]) -> usize {
    let mut remaining: HashMap<TensorId, usize> = g.tensors().map(|t| (t.id, t.consumers().len())).collect();
    let (mut live, mut peak) = (0usize, 0usize);
    for &o in order {
        let op = g.op(o).unwrap();
        for t in op.outputs().tensors() {
            live += g.tensor(t).unwrap().info.nbytes();
        }
        peak = peak.max(live);
        for t in op.inputs().tensors() {
            let r = remaining.get_mut(&t).unwrap();
            *r -= 1;
            let tensor = g.tensor(t).unwrap();
            if *r == 0 && tensor.producer().is_some() && !g.outputs().contains(&t) {
                live -= tensor.info.nbytes();
            }
        }
    }
    peak
}

#[test]
fn liveness_heuristic_beats_creation_order() {
    // K expanders a_k = Relu(x) (4000 bytes each), created first, then K reducers
    // r_k = ReduceSum(a_k) (4-byte graph outputs). Creation order keeps every a_k live
    // at once; the heuristic runs each reducer right after its expander.
    const K: usize = 8;
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let x = ir.main_graph_mut().add_input("x", f32i(&[1000])).unwrap();
    let expanded: Vec<TensorId> = (0..K).map(|k| op1(&mut ir, main, "Relu", &[x], &format!("a{k}")).1).collect();
    for (k, &a) in expanded.iter().enumerate() {
        let r = ir
            .create_op(
                main,
                "ReduceSum",
                Attributes::new().with("axes", AttrValue::Ints(vec![])),
                &[(0, a)],
                &format!("r{k}"),
            )
            .unwrap();
        let out = ir.main_graph().op(r).unwrap().output(0).unwrap();
        ir.main_graph_mut().add_output(out).unwrap();
    }
    let g = ir.main_graph();
    let creation = g.schedule_with(ScheduleOptions { optimize_liveness: false }).unwrap();
    assert_eq!(creation, g.ops_in_creation_order());
    let smart = g.schedule().unwrap();
    check_schedule(g, &smart);
    let (p_creation, p_smart) = (peak_live_bytes(g, &creation), peak_live_bytes(g, &smart));
    assert_eq!(p_creation, K * 4000 + 4);
    assert_eq!(p_smart, 4000 + 4 * K);
    let names: Vec<&str> = smart.iter().map(|&o| g.op(o).unwrap().name.as_str()).collect();
    assert_eq!(names[..4], ["a0", "r0", "a1", "r1"]);
}

#[test]
fn constraints_override_the_heuristic() {
    // Same shape as above with K = 2, but a constraint forces both expanders first.
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let x = ir.main_graph_mut().add_input("x", f32i(&[1000])).unwrap();
    let (a0, y0) = op1(&mut ir, main, "Relu", &[x], "a0");
    let (a1, y1) = op1(&mut ir, main, "Relu", &[x], "a1");
    let (r0, _) = op1(&mut ir, main, "Neg", &[y0], "r0");
    let (r1, _) = op1(&mut ir, main, "Neg", &[y1], "r1");
    ir.main_graph_mut().add_topo_con(a1, r0).unwrap();
    assert_eq!(ir.main_graph().schedule().unwrap(), vec![a0, a1, r0, r1]);
    // A tied constraint pulls its pair together even against creation order.
    let mut ir2 = ir.clone();
    ir2.main_graph_mut().remove_topo_con(a1, r0);
    ir2.main_graph_mut().add_tied_topo_con(a1, r1).unwrap();
    ir2.main_graph_mut().add_topo_con(a1, a0).unwrap();
    assert_eq!(ir2.main_graph().schedule().unwrap(), vec![a1, r1, a0, r0]);
}

#[test]
fn variables_and_graph_outputs_are_never_freed() {
    // Three ready ops, created in this order: one reading a variable (frees nothing,
    // adds 400 bytes), one reducing a graph output (frees nothing, adds 4), one
    // reducing the last use of an activation (frees 400, adds 4).
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let g = ir.main_graph_mut();
    let v = g.add_tensor("v", f32i(&[100]), TensorKind::Variable(popart_ir::HostTensor::zeros(f32i(&[100])))).unwrap();
    let kept = g.add_input("kept", f32i(&[100])).unwrap();
    g.add_output(kept).unwrap();
    let dropped = g.add_input("dropped", f32i(&[100])).unwrap();
    let (uses_v, _) = op1(&mut ir, main, "Neg", &[v], "uses_v");
    let (uses_kept, _) = op1(&mut ir, main, "ReduceSum", &[kept], "uses_kept");
    let (uses_dropped, _) = op1(&mut ir, main, "ReduceSum", &[dropped], "uses_dropped");
    let g = ir.main_graph();
    assert_eq!(g.schedule().unwrap(), vec![uses_dropped, uses_kept, uses_v]);
    assert_eq!(
        g.schedule_with(ScheduleOptions { optimize_liveness: false }).unwrap(),
        vec![uses_v, uses_kept, uses_dropped]
    );
}
