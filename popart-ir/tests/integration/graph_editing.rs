//! Graph editing bookkeeping and every error the editing API returns.

use crate::common;

use common::{assert_real_cycle, f32i, op1};
use popart_ir::{
    lookup_op, register_op, Alias, AttrValue, Attributes, DataType, HostTensor, InferContext, Ir, IrError, OpDef,
    OpFlags, Port, Result, StreamDirection, TensorInfo, TensorKind,
};

#[test]
fn create_op_connects_infers_and_names_outputs() {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let x = ir.main_graph_mut().add_input("x", f32i(&[2, 3])).unwrap();
    let y = ir.main_graph_mut().add_input("y", f32i(&[3])).unwrap();
    let (add, s) = op1(&mut ir, main, "Add", &[x, y], "add");
    let g = ir.main_graph();
    assert_eq!(g.tensor(s).unwrap().name, "add:0");
    assert_eq!(g.tensor(s).unwrap().info, f32i(&[2, 3]));
    assert_eq!(g.tensor(s).unwrap().producer(), Some(Port { op: add, index: 0 }));
    assert_eq!(g.tensor(x).unwrap().consumers(), &[Port { op: add, index: 0 }]);
    assert_eq!(g.tensor(y).unwrap().consumers(), &[Port { op: add, index: 1 }]);
    assert_eq!(g.op(add).unwrap().inputs().iter().collect::<Vec<_>>(), vec![(0, x), (1, y)]);
    // A second op with the same name gets a fresh one, and so do its outputs.
    let (add2, s2) = op1(&mut ir, main, "Add", &[x, y], "add");
    let g = ir.main_graph();
    assert_eq!(g.op(add2).unwrap().name, "add_1");
    assert_eq!(g.tensor(s2).unwrap().name, "add_1:0");
    assert_eq!(g.op(add).unwrap().seq() + 1, g.op(add2).unwrap().seq());
    ir.verify().unwrap();
}

#[test]
fn one_op_may_consume_a_tensor_at_several_indices() {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let x = ir.main_graph_mut().add_input("x", f32i(&[4])).unwrap();
    let (mul, _) = op1(&mut ir, main, "Mul", &[x, x], "sq");
    let g = ir.main_graph();
    let mut cons = g.tensor(x).unwrap().consumers().to_vec();
    cons.sort();
    assert_eq!(cons, vec![Port { op: mul, index: 0 }, Port { op: mul, index: 1 }]);
    assert_eq!(g.op(mul).unwrap().inputs().indices_of(x).collect::<Vec<_>>(), vec![0, 1]);
    // Disconnecting one index leaves the other.
    let g = ir.main_graph_mut();
    assert_eq!(g.disconnect_input(mul, 0).unwrap(), x);
    assert_eq!(g.tensor(x).unwrap().consumers(), &[Port { op: mul, index: 1 }]);
    assert!(!g.op(mul).unwrap().inputs().contains(0));
}

#[test]
fn index_errors_name_the_op_and_index() {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let x = ir.main_graph_mut().add_input("x", f32i(&[4])).unwrap();
    let (neg, y) = op1(&mut ir, main, "Neg", &[x], "neg");
    let g = ir.main_graph_mut();
    assert_eq!(g.connect_input(neg, 0, x), Err(IrError::IndexTaken { op: "neg".into(), side: "input", index: 0 }));
    assert_eq!(
        g.disconnect_input(neg, 3),
        Err(IrError::IndexNotConnected { op: "neg".into(), side: "input", index: 3 })
    );
    assert_eq!(
        g.disconnect_output(neg, 1),
        Err(IrError::IndexNotConnected { op: "neg".into(), side: "output", index: 1 })
    );
    let z = g.add_tensor("z", f32i(&[4]), TensorKind::ActGrad).unwrap();
    assert_eq!(g.connect_output(neg, 0, z), Err(IrError::IndexTaken { op: "neg".into(), side: "output", index: 0 }));
    let err = g.create_output(neg, 0, "w", f32i(&[4])).unwrap_err();
    assert_eq!(err, IrError::IndexTaken { op: "neg".into(), side: "output", index: 0 });
    // Duplicate input indices passed to create_op.
    let err = ir.create_op(main, "Add", Attributes::new(), &[(0, x), (0, y)], "dup").unwrap_err();
    assert_eq!(err, IrError::IndexTaken { op: "dup".into(), side: "input", index: 0 });
    assert!(ir.main_graph().op_by_name("dup").is_err(), "nothing created on error");
}

#[test]
fn producing_is_restricted_to_unproduced_activations() {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let x = ir.main_graph_mut().add_input("x", f32i(&[2])).unwrap();
    let (neg, y) = op1(&mut ir, main, "Neg", &[x], "neg");
    let g = ir.main_graph_mut();
    let data = HostTensor::from_f32(&[2], &[1.0, 2.0]);
    let v = g.add_tensor("v", f32i(&[2]), TensorKind::Variable(data.clone())).unwrap();
    let c = g.add_tensor("c", f32i(&[2]), TensorKind::Constant(data)).unwrap();
    let s = g.add_tensor("s", f32i(&[2]), TensorKind::Stream(StreamDirection::HostToDevice)).unwrap();
    let other = g.add_op(lookup_op("Neg").unwrap(), Attributes::new(), "other");
    for (t, what) in [(x, "graph input"), (v, "variable"), (c, "constant"), (s, "stream")] {
        let name = g.tensor(t).unwrap().name.clone();
        assert_eq!(
            g.connect_output(other, 0, t),
            Err(IrError::NotProducible { graph: "main".into(), tensor: name, what, op: "other".into() })
        );
    }
    assert_eq!(
        g.connect_output(other, 0, y),
        Err(IrError::AlreadyProduced {
            graph: "main".into(),
            tensor: "neg:0".into(),
            producer: "neg".into(),
            op: "other".into()
        })
    );
    // After disconnecting, the tensor can be produced by another op.
    g.disconnect_output(neg, 0).unwrap();
    assert_eq!(g.tensor(y).unwrap().producer(), None);
    g.connect_output(other, 0, y).unwrap();
    assert_eq!(g.tensor(y).unwrap().producer(), Some(Port { op: other, index: 0 }));
}

#[test]
fn replace_all_uses_moves_consumers_and_graph_outputs() {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let x = ir.main_graph_mut().add_input("x", f32i(&[2])).unwrap();
    let (_, a) = op1(&mut ir, main, "Neg", &[x], "a");
    let (_, b) = op1(&mut ir, main, "Relu", &[x], "b");
    let (u1, _) = op1(&mut ir, main, "Add", &[a, a], "u1");
    let (u2, _) = op1(&mut ir, main, "Exp", &[a], "u2");
    let g = ir.main_graph_mut();
    g.add_output(a).unwrap();
    g.replace_all_uses(a, b).unwrap();
    assert!(g.tensor(a).unwrap().consumers().is_empty());
    let mut cons = g.tensor(b).unwrap().consumers().to_vec();
    cons.sort();
    let mut want = vec![Port { op: u1, index: 0 }, Port { op: u1, index: 1 }, Port { op: u2, index: 0 }];
    want.sort();
    assert_eq!(cons, want);
    assert_eq!(g.op(u1).unwrap().input(1), Some(b));
    assert_eq!(g.outputs(), &[b]);
    ir.verify().unwrap();
}

#[test]
fn replace_op_takes_over_connections_and_topo_cons() {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let x = ir.main_graph_mut().add_input("x", f32i(&[2])).unwrap();
    let (first, _) = op1(&mut ir, main, "Neg", &[x], "first");
    let (old, y) = op1(&mut ir, main, "Relu", &[x], "old");
    let (last, _) = op1(&mut ir, main, "Exp", &[y], "last");
    let g = ir.main_graph_mut();
    g.add_topo_con(first, old).unwrap();
    g.add_tied_topo_con(old, last).unwrap();
    let new = g.add_op(lookup_op("Relu").unwrap(), Attributes::new(), "new");
    g.replace_op(old, new).unwrap();
    assert!(g.op(old).is_err());
    assert!(g.op_by_name("old").is_err());
    assert_eq!(g.op(new).unwrap().input(0), Some(x));
    assert_eq!(g.op(new).unwrap().output(0), Some(y));
    assert_eq!(g.tensor(y).unwrap().producer(), Some(Port { op: new, index: 0 }));
    assert!(g.tensor(x).unwrap().consumers().contains(&Port { op: new, index: 0 }));
    assert!(!g.tensor(x).unwrap().consumers().iter().any(|p| p.op == old));
    assert!(g.topo_cons().contains(first, new));
    assert!(g.topo_cons().contains(new, last));
    assert!(g.topo_cons().afters(new).iter().all(|c| c.tied));
    assert_eq!(g.topo_cons().len(), 2);
    assert!(g.topo_cons().befores(old).is_empty() && g.topo_cons().afters(old).is_empty());
    // A replacement that is already connected is refused.
    let busy = g.op_by_name("first").unwrap().id;
    assert!(matches!(g.replace_op(new, busy), Err(IrError::ReplacementInUse { .. })));
    ir.verify().unwrap();
}

#[test]
fn erase_op_keeps_outputs_and_removes_constraints() {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let x = ir.main_graph_mut().add_input("x", f32i(&[2])).unwrap();
    let (a, y) = op1(&mut ir, main, "Neg", &[x], "a");
    let (b, z) = op1(&mut ir, main, "Exp", &[y], "b");
    let g = ir.main_graph_mut();
    g.add_topo_con(a, b).unwrap();
    let erased = g.erase_op(a).unwrap();
    assert_eq!(erased.name, "a");
    assert!(g.tensor(x).unwrap().consumers().is_empty());
    assert_eq!(g.tensor(y).unwrap().producer(), None);
    assert!(g.topo_cons().is_empty());
    // The name is free again.
    let again = g.add_op(lookup_op("Neg").unwrap(), Attributes::new(), "a");
    assert_eq!(g.op(again).unwrap().name, "a");
    // Outputs still consumed cannot be erased with their producer.
    g.add_output(z).unwrap();
    assert_eq!(
        g.erase_op_and_outputs(b),
        Err(IrError::TensorInUse {
            graph: "main".into(),
            tensor: "b:0".into(),
            reason: "it is consumed or a graph output".into()
        })
    );
    g.remove_output(0).unwrap();
    g.erase_op_and_outputs(b).unwrap();
    assert!(g.tensor_by_name("b:0").is_err());
    assert!(g.tensor(y).unwrap().consumers().is_empty());
}

#[test]
fn remove_tensor_reports_why_a_tensor_is_in_use() {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let x = ir.main_graph_mut().add_input("x", f32i(&[2])).unwrap();
    let (_, y) = op1(&mut ir, main, "Neg", &[x], "a");
    let g = ir.main_graph_mut();
    let free = g.add_tensor("free", f32i(&[2]), TensorKind::ActGrad).unwrap();
    g.add_output(free).unwrap();
    let reason = |r: Result<_>| match r {
        Err(IrError::TensorInUse { reason, .. }) => reason,
        other => panic!("expected TensorInUse, got {other:?}"),
    };
    assert_eq!(reason(g.remove_tensor(y).map(|_| ())), "it has a producer");
    assert_eq!(reason(g.remove_tensor(x).map(|_| ())), "it has consumers");
    assert_eq!(reason(g.remove_tensor(free).map(|_| ())), "it is a graph output");
    g.remove_output(0).unwrap();
    let removed = g.remove_tensor(free).unwrap();
    assert_eq!(removed.name, "free");
    let lonely = g.add_input("lonely", f32i(&[1])).unwrap();
    assert_eq!(reason(g.remove_tensor(lonely).map(|_| ())), "it is a graph input");
}

#[test]
fn names_are_unique_per_graph() {
    let mut ir = Ir::new();
    let g = ir.main_graph_mut();
    g.add_input("x", f32i(&[1])).unwrap();
    assert_eq!(
        g.add_input("x", f32i(&[1])),
        Err(IrError::DuplicateTensorName { graph: "main".into(), name: "x".into() })
    );
    assert_eq!(g.unique_tensor_name("x"), "x_1");
    assert_eq!(g.unique_tensor_name("y"), "y");
    assert_eq!(ir.create_graph("main"), Err(IrError::DuplicateGraphName("main".into())));
    let sub = ir.create_graph("sub").unwrap();
    assert_eq!(ir.unique_graph_name("sub"), "sub_1");
    // The same tensor name may be used in another graph.
    ir.graph_mut(sub).unwrap().add_input("x", f32i(&[1])).unwrap();
    // Names with unusual characters are fine.
    let g = ir.main_graph_mut();
    let odd = g.add_tensor("a b/\"c\"->d", f32i(&[1]), TensorKind::ActGrad).unwrap();
    assert_eq!(g.tensor_by_name("a b/\"c\"->d").unwrap().id, odd);
}

#[test]
fn many_colliding_base_names_stay_unique() {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let x = ir.main_graph_mut().add_input("x", f32i(&[1])).unwrap();
    // A user name that looks like a generated suffix must not be taken twice.
    ir.main_graph_mut().add_tensor("relu_2:0", f32i(&[1]), TensorKind::ActGrad).unwrap();
    let mut names = std::collections::BTreeSet::new();
    for _ in 0..50 {
        let (op, out) = op1(&mut ir, main, "Relu", &[x], "relu");
        let g = ir.main_graph();
        assert!(names.insert(g.op(op).unwrap().name.clone()));
        assert!(names.insert(g.tensor(out).unwrap().name.clone()));
    }
    assert!(names.contains("relu_2"));
    assert!(names.contains("relu_2:0_1"), "generated name must avoid the user's `relu_2:0`");
    assert_eq!(ir.main_graph().op_by_name("relu_49").unwrap().name, "relu_49");
    ir.verify().unwrap();
}

#[test]
fn unknown_ids_and_names_are_errors() {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let x = ir.main_graph_mut().add_input("x", f32i(&[1])).unwrap();
    let (a, _) = op1(&mut ir, main, "Neg", &[x], "a");
    let sub = ir.create_graph("sub").unwrap();
    ir.remove_graph(sub).unwrap();
    assert!(matches!(ir.graph(sub), Err(IrError::UnknownGraph(_))));
    assert_eq!(ir.graph_by_name("nope").err(), Some(IrError::UnknownGraph("nope".into())));
    let g = ir.main_graph_mut();
    assert_eq!(
        g.tensor_by_name("nope").err(),
        Some(IrError::UnknownTensor { graph: "main".into(), tensor: "nope".into() })
    );
    assert_eq!(g.op_by_name("nope").err(), Some(IrError::UnknownOp { graph: "main".into(), op: "nope".into() }));
    g.erase_op(a).unwrap();
    assert!(matches!(g.op(a), Err(IrError::UnknownOp { .. })));
    assert!(matches!(g.connect_input(a, 0, x), Err(IrError::UnknownOp { .. })));
    assert!(matches!(g.disconnect_input(a, 0), Err(IrError::UnknownOp { .. })));
    assert!(matches!(g.erase_op(a), Err(IrError::UnknownOp { .. })));
    let t = g.add_tensor("t", f32i(&[1]), TensorKind::ActGrad).unwrap();
    g.remove_tensor(t).unwrap();
    assert!(matches!(g.tensor(t), Err(IrError::UnknownTensor { .. })));
    assert_eq!(lookup_op("NoSuchOp").err(), Some(IrError::UnknownOpType("NoSuchOp".into())));
    assert_eq!(
        ir.create_op(main, "NoSuchOp", Attributes::new(), &[], "n").err(),
        Some(IrError::UnknownOpType("NoSuchOp".into()))
    );
}

#[test]
fn graph_inputs_and_outputs_edit_in_place() {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let g = ir.main_graph_mut();
    let a = g.add_input("a", f32i(&[1])).unwrap();
    let b = g.add_input("b", f32i(&[1])).unwrap();
    let c = g.add_tensor("c", f32i(&[1]), TensorKind::ActGrad).unwrap();
    g.insert_input(1, c).unwrap();
    assert_eq!(g.inputs(), &[a, c, b]);
    assert_eq!(g.input_index(b), Some(2));
    assert!(matches!(g.insert_input(0, a), Err(IrError::NotAnInputCandidate { .. })), "already an input");
    assert_eq!(g.remove_input(0).unwrap(), a);
    assert!(matches!(g.remove_input(7), Err(IrError::NoGraphPort { side: "input", index: 7, .. })));
    assert!(matches!(g.remove_output(0), Err(IrError::NoGraphPort { side: "output", index: 0, .. })));
    let (_, y) = op1(&mut ir, main, "Neg", &[a], "n");
    let g = ir.main_graph_mut();
    assert!(
        matches!(g.insert_input(0, y), Err(IrError::NotAnInputCandidate { .. })),
        "produced tensors cannot be inputs"
    );
    let v = g.add_tensor("v", f32i(&[1]), TensorKind::Variable(HostTensor::from_f32(&[1], &[1.0]))).unwrap();
    assert!(matches!(g.insert_input(0, v), Err(IrError::NotAnInputCandidate { .. })), "variables cannot be inputs");
    // Variable data must match its declared type.
    let err = g.add_tensor("w", f32i(&[2]), TensorKind::Variable(HostTensor::from_f32(&[1], &[1.0]))).unwrap_err();
    assert!(matches!(err, IrError::DataInfoMismatch { tensor, .. } if tensor == "w"));
}

#[test]
fn topo_con_errors_and_bookkeeping() {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let x = ir.main_graph_mut().add_input("x", f32i(&[1])).unwrap();
    let (a, _) = op1(&mut ir, main, "Neg", &[x], "a");
    let (b, _) = op1(&mut ir, main, "Exp", &[x], "b");
    let g = ir.main_graph_mut();
    assert_eq!(g.add_topo_con(a, a), Err(IrError::SelfConstraint("a".into())));
    g.add_topo_con(a, b).unwrap();
    g.add_topo_con(a, b).unwrap();
    assert_eq!(g.topo_cons().len(), 1, "adding twice is a no-op");
    g.add_tied_topo_con(a, b).unwrap();
    assert_eq!(g.topo_cons().edges().collect::<Vec<_>>(), vec![(a, b, true)], "tied upgrades the edge");
    assert!(g.remove_topo_con(a, b));
    assert!(!g.remove_topo_con(a, b));
    assert!(g.topo_cons().is_empty());
    g.add_topo_con(b, a).unwrap();
    let c = g.add_op(lookup_op("Neg").unwrap(), Attributes::new(), "c");
    g.transfer_topo_cons(b, c).unwrap();
    assert_eq!(g.topo_cons().edges().collect::<Vec<_>>(), vec![(c, a, false)]);
}

#[test]
fn transferring_constraints_that_close_a_cycle_is_refused_and_changes_nothing() {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let x = ir.main_graph_mut().add_input("x", f32i(&[1])).unwrap();
    let (p, yp) = op1(&mut ir, main, "Neg", &[x], "p");
    let (q, _) = op1(&mut ir, main, "Neg", &[yp], "q");
    let (r, _) = op1(&mut ir, main, "Neg", &[x], "r");
    let g = ir.main_graph_mut();
    // r -> p is fine; moving it onto q (r -> q) is fine; moving q -> r ... onto p is not:
    g.add_topo_con(q, r).unwrap();
    let err = g.transfer_topo_cons(r, p).unwrap_err();
    assert!(matches!(&err, IrError::Cycle { ops, .. } if ops.contains(&"p".to_string())), "{err}");
    assert_eq!(g.topo_cons().edges().collect::<Vec<_>>(), vec![(q, r, false)], "rolled back");
    ir.verify().unwrap();
}

#[test]
fn cycles_through_data_and_constraints_name_their_ops() {
    // Data cycle: a -> b -> a (b's output wired back into a).
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let x = ir.main_graph_mut().add_input("x", f32i(&[1])).unwrap();
    let (_, u) = op1(&mut ir, main, "Neg", &[x], "start");
    let (a, ya) = op1(&mut ir, main, "Neg", &[u], "a");
    let (_, yb) = op1(&mut ir, main, "Exp", &[ya], "b");
    ir.main_graph_mut().disconnect_input(a, 0).unwrap();
    ir.main_graph_mut().connect_input(a, 0, yb).unwrap();
    for err in [ir.main_graph().schedule().unwrap_err(), ir.verify().unwrap_err()] {
        let IrError::Cycle { graph, ops } = err else { panic!("expected a cycle, got {err:?}") };
        assert_eq!(graph, "main");
        assert_eq!(ops.len(), 2);
        assert_real_cycle(ir.main_graph(), &ops);
    }
    // Constraint cycle mixed with data: c -> d (data), d -> e (data), e -> c (constraint).
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let x = ir.main_graph_mut().add_input("x", f32i(&[1])).unwrap();
    let (c, yc) = op1(&mut ir, main, "Neg", &[x], "c");
    let (_, yd) = op1(&mut ir, main, "Neg", &[yc], "d");
    let (e, _) = op1(&mut ir, main, "Neg", &[yd], "e");
    op1(&mut ir, main, "Neg", &[x], "bystander");
    // Refused when added, naming the cycle it would close; nothing changes.
    let err = ir.main_graph_mut().add_topo_con(e, c).unwrap_err();
    assert_eq!(err, IrError::Cycle { graph: "main".into(), ops: vec!["e".into(), "c".into(), "d".into()] });
    assert_eq!(ir.main_graph_mut().add_tied_topo_con(e, c), Err(err));
    assert!(ir.main_graph().topo_cons().is_empty());
    // The unchecked path lets a pass add it; the scheduler and verifier report it.
    ir.main_graph_mut().add_topo_con_unchecked(e, c).unwrap();
    let err = ir.main_graph().schedule().unwrap_err();
    assert!(err.to_string().contains("cycle"), "{err}");
    let IrError::Cycle { ops, .. } = err else { panic!() };
    assert_eq!(ops.len(), 3);
    assert!(!ops.contains(&"bystander".to_string()));
    assert_real_cycle(ir.main_graph(), &ops);
    assert!(matches!(ir.verify(), Err(IrError::Cycle { .. })));
    // An op consuming its own output is a cycle of one.
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let x = ir.main_graph_mut().add_input("x", f32i(&[1])).unwrap();
    let (s, ys) = op1(&mut ir, main, "Neg", &[x], "selfish");
    ir.main_graph_mut().disconnect_input(s, 0).unwrap();
    ir.main_graph_mut().connect_input(s, 0, ys).unwrap();
    assert_eq!(ir.verify(), Err(IrError::Cycle { graph: "main".into(), ops: vec!["selfish".into()] }));
}

#[test]
fn recursion_and_graph_removal() {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let body = ir.create_graph("body").unwrap();
    let bx = ir.graph_mut(body).unwrap().add_input("bx", f32i(&[2])).unwrap();
    let (_, by) = op1(&mut ir, body, "Neg", &[bx], "neg");
    ir.graph_mut(body).unwrap().add_output(by).unwrap();
    let x = ir.main_graph_mut().add_input("x", f32i(&[2])).unwrap();
    let call_attrs = Attributes::new().with("graph", AttrValue::Graph(body));
    let call = ir.create_op(main, "Call", call_attrs.clone(), &[(0, x)], "call").unwrap();
    ir.verify().unwrap();
    assert!(matches!(ir.remove_graph(body), Err(IrError::GraphStillCalled { op, .. }) if op == "call"));
    assert_eq!(ir.remove_graph(main).unwrap_err(), IrError::MainGraphRemoval);
    // body calling itself, directly or through another graph, is refused at creation.
    assert_eq!(
        ir.create_op(body, "Call", call_attrs.clone(), &[(0, bx)], "again"),
        Err(IrError::RecursiveGraph("body".into()))
    );
    let outer = ir.create_graph("outer").unwrap();
    let ox = ir.graph_mut(outer).unwrap().add_input("ox", f32i(&[2])).unwrap();
    ir.create_op(outer, "Call", call_attrs.clone(), &[(0, ox)], "inner").unwrap();
    let outer_attrs = Attributes::new().with("graph", AttrValue::Graph(outer));
    assert_eq!(
        ir.create_op(body, "Call", outer_attrs, &[(0, bx)], "via_outer"),
        Err(IrError::RecursiveGraph("body".into()))
    );
    ir.verify().unwrap();
    // Editing attributes bypasses the check; the verifier still finds the recursion.
    let again = ir.create_op(body, "Neg", Attributes::new(), &[(0, bx)], "again").unwrap();
    ir.graph_mut(body).unwrap().op_attrs_mut(again).unwrap().set("graph", AttrValue::Graph(body));
    assert_eq!(ir.verify(), Err(IrError::RecursiveGraph("body".into())));
    assert_eq!(ir.graphs_callees_first(), Err(IrError::RecursiveGraph("body".into())));
    let _ = call;
}

#[test]
fn graphs_callees_first_orders_callees_before_callers() {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let leaf = ir.create_graph("leaf").unwrap();
    let mid = ir.create_graph("mid").unwrap();
    let lx = ir.graph_mut(leaf).unwrap().add_input("lx", f32i(&[1])).unwrap();
    ir.graph_mut(leaf).unwrap().add_output(lx).unwrap();
    let mx = ir.graph_mut(mid).unwrap().add_input("mx", f32i(&[1])).unwrap();
    let c =
        ir.create_op(mid, "Call", Attributes::new().with("graph", AttrValue::Graph(leaf)), &[(0, mx)], "c").unwrap();
    let my = ir.graph(mid).unwrap().op(c).unwrap().output(0).unwrap();
    ir.graph_mut(mid).unwrap().add_output(my).unwrap();
    let x = ir.main_graph_mut().add_input("x", f32i(&[1])).unwrap();
    ir.create_op(main, "Call", Attributes::new().with("graph", AttrValue::Graph(mid)), &[(0, x)], "c").unwrap();
    let order = ir.graphs_callees_first().unwrap();
    let pos = |g| order.iter().position(|&x| x == g).unwrap();
    assert!(pos(leaf) < pos(mid) && pos(mid) < pos(main));
    ir.verify().unwrap();
}

fn infer_err(ir: &mut Ir, ty: &str, attrs: Attributes, inputs: &[popart_ir::TensorId]) -> String {
    let main = ir.main_graph_id();
    let ins: Vec<(u32, popart_ir::TensorId)> = inputs.iter().enumerate().map(|(i, &t)| (i as u32, t)).collect();
    match ir.create_op(main, ty, attrs, &ins, "bad") {
        Err(IrError::Inference { op, op_type, message }) => {
            assert_eq!(op, "bad");
            assert_eq!(op_type, ty);
            message
        }
        other => panic!("{ty}: expected an inference error, got {other:?}"),
    }
}

#[test]
fn shape_inference_rejects_bad_inputs() {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let g = ir.main_graph_mut();
    let a = g.add_input("a", f32i(&[2, 3])).unwrap();
    let b = g.add_input("b", f32i(&[4])).unwrap();
    let i = g.add_input("i", TensorInfo::new(DataType::Int32, [2, 3])).unwrap();
    let cond = g.add_input("cond", TensorInfo::new(DataType::Bool, [])).unwrap();
    let n_before = ir.main_graph().num_ops();

    assert!(infer_err(&mut ir, "Add", Attributes::new(), &[a, b]).contains("cannot be broadcast"));
    assert!(infer_err(&mut ir, "Add", Attributes::new(), &[a, i]).contains("different dtypes"));
    assert!(infer_err(&mut ir, "MatMul", Attributes::new(), &[a, a]).contains("inner dimensions"));
    assert!(infer_err(&mut ir, "Exp", Attributes::new(), &[i]).contains("floating point"));
    assert!(infer_err(&mut ir, "Neg", Attributes::new(), &[]).contains("missing input at index 0"));
    let reshape = Attributes::new().with("shape", AttrValue::Ints(vec![4, -1]));
    assert!(infer_err(&mut ir, "Reshape", reshape, &[a]).contains("-1"));
    let perm = Attributes::new().with("perm", AttrValue::Ints(vec![0, 0]));
    assert!(infer_err(&mut ir, "Transpose", perm, &[a]).contains("permutation"));
    let concat = Attributes::new().with("axis", AttrValue::Int(0));
    assert!(infer_err(&mut ir, "Concat", concat, &[a, b]).contains("does not match"));
    assert!(infer_err(&mut ir, "Softmax", Attributes::new(), &[i]).contains("floating point"));
    let load = Attributes::new().with("stream", AttrValue::Str("nope".into()));
    assert!(infer_err(&mut ir, "HostLoad", load, &[]).contains("no stream named `nope`"));
    let sum = Attributes::new().with("axes", AttrValue::Ints(vec![5]));
    assert!(infer_err(&mut ir, "ReduceSum", sum, &[a]).contains("out of range"));

    // Subgraph ops check the called graph's signature.
    let body = ir.create_graph("body").unwrap();
    let bx = ir.graph_mut(body).unwrap().add_input("bx", f32i(&[4])).unwrap();
    ir.graph_mut(body).unwrap().add_output(bx).unwrap();
    let call = Attributes::new().with("graph", AttrValue::Graph(body));
    assert!(infer_err(&mut ir, "Call", call.clone(), &[a]).contains("graph `body` input 0"));
    assert!(infer_err(&mut ir, "Call", call.clone(), &[b, b]).contains("has 1 inputs but 2 were given"));
    let repeat = call.clone().with("count", AttrValue::Int(0));
    assert!(infer_err(&mut ir, "Repeat", repeat, &[b]).contains("greater than 0"));
    let if_attrs = Attributes::new()
        .with("then_graph", AttrValue::Graph(body))
        .with("else_graph", AttrValue::Graph(body))
        .with("then_inputs", AttrValue::Ints(vec![1]))
        .with("else_inputs", AttrValue::Ints(vec![1]));
    assert!(infer_err(&mut ir, "If", if_attrs.clone(), &[a, b]).contains("bool scalar"));
    // ... and the well-formed versions work.
    ir.create_op(main, "If", if_attrs, &[(0, cond), (1, b)], "if").unwrap();
    ir.create_op(main, "Call", call, &[(0, b)], "call").unwrap();
    assert_eq!(ir.main_graph().num_ops(), n_before + 2, "failed creations leave nothing behind");
    ir.verify().unwrap();
}

/// A custom op defined outside the crate: `Duplicate(x) -> (x, x)`.
struct Duplicate;

impl OpDef for Duplicate {
    fn op_type(&self) -> &'static str {
        "test.Duplicate"
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        if x.rank() == 0 {
            return Err(ctx.error("scalars cannot be duplicated"));
        }
        Ok(vec![x.clone(), x.clone()])
    }
    fn aliases(&self, _: &Attributes) -> Vec<Alias> {
        vec![Alias::copy(0, 0)]
    }
}

static DUPLICATE: Duplicate = Duplicate;

/// Another definition claiming the same type name.
struct Impostor;

impl OpDef for Impostor {
    fn op_type(&self) -> &'static str {
        "test.Duplicate"
    }
    fn infer(&self, _: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        Ok(vec![])
    }
}

static IMPOSTOR: Impostor = Impostor;

#[test]
fn custom_ops_register_from_outside_the_crate() {
    register_op(&DUPLICATE).unwrap();
    register_op(&DUPLICATE).unwrap(); // the same definition again is fine
    assert_eq!(register_op(&IMPOSTOR), Err(IrError::DuplicateOpType("test.Duplicate".into())));
    assert!(popart_ir::registered_op_types().contains(&"test.Duplicate"));
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let x = ir.main_graph_mut().add_input("x", f32i(&[3])).unwrap();
    let op = ir.create_op(main, "test.Duplicate", Attributes::new(), &[(0, x)], "dup").unwrap();
    let g = ir.main_graph();
    let o = g.op(op).unwrap();
    assert_eq!(o.flags(), OpFlags::VIEW);
    assert_eq!(o.outputs().len(), 2);
    assert_eq!(g.tensor(o.output(1).unwrap()).unwrap().name, "dup:1");
    ir.verify().unwrap();
    let s = ir.main_graph_mut().add_input("s", f32i(&[])).unwrap();
    let err = ir.create_op(main, "test.Duplicate", Attributes::new(), &[(0, s)], "d2").unwrap_err();
    assert_eq!(
        err,
        IrError::Inference {
            op: "d2".into(),
            op_type: "test.Duplicate".into(),
            message: "scalars cannot be duplicated".into()
        }
    );
    // Builtins cannot be replaced.
    struct FakeRelu;
    impl OpDef for FakeRelu {
        fn op_type(&self) -> &'static str {
            "Relu"
        }
        fn infer(&self, _: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
            Ok(vec![])
        }
    }
    static FAKE: FakeRelu = FakeRelu;
    assert_eq!(register_op(&FAKE), Err(IrError::DuplicateOpType("Relu".into())));
}

/// Op identity is the definition's concrete Rust type (the blanket `AsAny`
/// supertrait): a custom op named like a builtin is neither that builtin nor
/// downcast to it, and downcasting to its own type gives back its fields.
#[test]
fn custom_op_cannot_claim_another_identity() {
    use popart_ir::ops::all::Relu;
    use popart_ir::{AsAny, OpDefId};
    let _ = <Relu as AsAny>::as_any;
    struct NamedLikeRelu {
        payload: u64,
    }
    impl OpDef for NamedLikeRelu {
        fn op_type(&self) -> &'static str {
            "Relu"
        }
        fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
            Ok(vec![ctx.input(0)?.clone()])
        }
    }
    static IMPOSTOR: NamedLikeRelu = NamedLikeRelu { payload: 0xdead_beef };
    let def: &'static dyn OpDef = &IMPOSTOR;
    assert!(!def.is::<Relu>());
    assert!(def.downcast_ref::<Relu>().is_none());
    assert_ne!(def.id(), OpDefId::of::<Relu>());
    assert_eq!(def.id(), OpDefId::of::<NamedLikeRelu>());
    assert_eq!(def.downcast_ref::<NamedLikeRelu>().map(|d| d.payload), Some(0xdead_beef));
    // A reference to a definition is not the definition.
    let by_ref: &'static dyn OpDef = &Relu;
    assert!(by_ref.is::<Relu>() && !by_ref.as_any().is::<&Relu>());
    assert_eq!(lookup_op("Relu").unwrap().id(), OpDefId::of::<Relu>());
}

#[test]
fn independent_irs_coexist() {
    let mut a = Ir::new();
    let b = Ir::new();
    assert_ne!(a.id(), b.id());
    a.main_graph_mut().add_input("x", f32i(&[1])).unwrap();
    assert_eq!(a.main_graph().num_tensors(), 1);
    assert_eq!(b.main_graph().num_tensors(), 0);
    let c = a.clone();
    assert_eq!(c.id(), a.id());
}

#[test]
fn index_maps_stay_sorted_through_inserts_and_removals() {
    let mut ir = Ir::new();
    let g = ir.main_graph_mut();
    let ts: Vec<_> = (0..6).map(|k| g.add_input(&format!("t{k}"), f32i(&[1])).unwrap()).collect();
    let op = g.add_op(lookup_op("Concat").unwrap(), Attributes::new(), "cat");
    // Out-of-order, non-contiguous indices; past two entries the map moves to the heap.
    for &(i, k) in &[(5u32, 0usize), (1, 1), (3, 2), (0, 3), (9, 4)] {
        g.connect_input(op, i, ts[k]).unwrap();
    }
    let m = g.op(op).unwrap().inputs().clone();
    assert_eq!(m.iter().collect::<Vec<_>>(), vec![(0, ts[3]), (1, ts[1]), (3, ts[2]), (5, ts[0]), (9, ts[4])]);
    assert_eq!((m.len(), m.end(), m.get(3), m.get(4)), (5, 10, Some(ts[2]), None));
    for i in [1, 9, 0] {
        g.disconnect_input(op, i).unwrap();
    }
    let m = g.op(op).unwrap().inputs();
    assert_eq!(m.iter().collect::<Vec<_>>(), vec![(3, ts[2]), (5, ts[0])]);
    // A small map: insert before and between inline entries.
    let small = g.add_op(lookup_op("Add").unwrap(), Attributes::new(), "small");
    g.connect_input(small, 4, ts[5]).unwrap();
    g.connect_input(small, 2, ts[4]).unwrap();
    assert_eq!(g.op(small).unwrap().inputs().iter().collect::<Vec<_>>(), vec![(2, ts[4]), (4, ts[5])]);
    g.connect_input(small, 3, ts[3]).unwrap();
    assert_eq!(g.op(small).unwrap().inputs().tensors().collect::<Vec<_>>(), vec![ts[4], ts[3], ts[5]]);
    g.disconnect_input(small, 2).unwrap();
    g.disconnect_input(small, 4).unwrap();
    assert_eq!(g.op(small).unwrap().inputs().iter().collect::<Vec<_>>(), vec![(3, ts[3])]);
    // Equality ignores where the entries are stored.
    let other = g.add_op(lookup_op("Add").unwrap(), Attributes::new(), "other");
    g.connect_input(other, 3, ts[3]).unwrap();
    assert_eq!(g.op(small).unwrap().inputs(), g.op(other).unwrap().inputs());
}

#[test]
fn graphs_iterate_in_creation_order_after_removal() {
    let mut ir = Ir::new();
    let a = ir.create_graph("a").unwrap();
    ir.create_graph("b").unwrap();
    ir.remove_graph(a).unwrap();
    // `c` may reuse `a`'s arena slot but is still the newest graph.
    ir.create_graph("c").unwrap();
    let names: Vec<&str> = ir.graphs().map(|g| g.name()).collect();
    assert_eq!(names, vec!["main", "b", "c"]);
    let ids: Vec<&str> = ir.graph_ids().into_iter().map(|g| ir.graph(g).unwrap().name()).collect();
    assert_eq!(ids, names);
    let t = popart_ir::text::to_text(&ir);
    assert_eq!(popart_ir::text::to_text(&popart_ir::text::parse(&t).unwrap()), t);
}

#[test]
fn bulk_output_and_tensor_removal() {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let x = ir.main_graph_mut().add_input("x", f32i(&[2])).unwrap();
    let outs: Vec<_> = (0..4).map(|k| op1(&mut ir, main, "Relu", &[x], &format!("r{k}"))).collect();
    let g = ir.main_graph_mut();
    for &(_, t) in &outs {
        g.add_output(t).unwrap();
    }
    // Out of range: nothing changes.
    assert!(g.remove_outputs(&[1, 4]).is_err());
    assert_eq!(g.outputs().len(), 4);
    // Any order, duplicates ignored; the rest keep their order.
    assert_eq!(g.remove_outputs(&[2, 0, 2]).unwrap(), vec![outs[0].1, outs[2].1]);
    assert_eq!(g.outputs(), &[outs[1].1, outs[3].1]);
    // A produced tensor cannot go; nothing is removed when one of them fails.
    let (r0, t0) = outs[0];
    assert!(matches!(g.remove_tensors(&[t0]), Err(IrError::TensorInUse { .. })));
    g.erase_op(r0).unwrap();
    let (r2, t2) = outs[2];
    g.erase_op(r2).unwrap();
    let kept = outs[1].1;
    assert!(matches!(g.remove_tensors(&[t0, kept]), Err(IrError::TensorInUse { .. })));
    assert!(g.tensor(t0).is_ok());
    g.remove_tensors(&[t0, t2]).unwrap();
    assert!(g.tensor(t0).is_err() && g.tensor(t2).is_err());
    ir.verify().unwrap();
}

#[test]
fn bulk_op_output_removal_renumbers_the_rest() {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let sub = ir.create_graph("sub").unwrap();
    let x = ir.graph_mut(sub).unwrap().add_input("x", f32i(&[2])).unwrap();
    for k in 0..5 {
        let (_, t) = op1(&mut ir, sub, "Relu", &[x], &format!("r{k}"));
        ir.graph_mut(sub).unwrap().add_output(t).unwrap();
    }
    let c = ir.main_graph_mut().add_input("c", f32i(&[2])).unwrap();
    let call = ir.create_op(main, "Call", Attributes::new().with("graph", AttrValue::Graph(sub)), &[(0, c)], "call");
    let call = call.unwrap();
    let g = ir.main_graph_mut();
    let outs: Vec<_> = g.op(call).unwrap().outputs().tensors().collect();
    // Any order, duplicates and unconnected indices ignored; removed in index order.
    assert_eq!(g.remove_op_outputs(call, &[3, 1, 3, 9]).unwrap(), vec![outs[1], outs[3]]);
    let left: Vec<_> = g.op(call).unwrap().outputs().iter().collect();
    assert_eq!(left, vec![(0, outs[0]), (1, outs[2]), (2, outs[4])]);
    for (i, t) in left {
        assert_eq!(g.tensor(t).unwrap().producer(), Some(Port { op: call, index: i }));
    }
    assert_eq!(g.tensor(outs[1]).unwrap().producer(), None);
    assert!(g.remove_op_outputs(call, &[]).unwrap().is_empty());
    // The callee loses the same outputs: the IR verifies again.
    g.remove_tensors(&[outs[1], outs[3]]).unwrap();
    ir.graph_mut(sub).unwrap().remove_outputs(&[1, 3]).unwrap();
    ir.verify().unwrap();
}

/// `add_10619` and `add_10692` have the same name hash (FxHash on digits that
/// straddle an 8-byte boundary): lookups, removal and reuse stay exact.
#[test]
fn colliding_names_stay_distinct() {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let x = ir.main_graph_mut().add_input("x", f32i(&[2])).unwrap();
    let names = ["add_10619", "add_10692", "add_10619_x"];
    let ops: Vec<_> = names.iter().map(|n| op1(&mut ir, main, "Relu", &[x], n).0).collect();
    let g = ir.main_graph_mut();
    for (&n, &o) in names.iter().zip(&ops) {
        assert_eq!(g.op_by_name(n).unwrap().id, o);
    }
    // Remove the first of the colliding pair, then the second; reuse both names.
    g.erase_op(ops[0]).unwrap();
    assert!(g.op_by_name(names[0]).is_err());
    assert_eq!(g.op_by_name(names[1]).unwrap().id, ops[1]);
    let again = op1(&mut ir, main, "Relu", &[x], names[0]).0;
    let g = ir.main_graph_mut();
    assert_eq!(g.op(again).unwrap().name, names[0]);
    g.erase_op(ops[1]).unwrap();
    assert!(g.op_by_name(names[1]).is_err());
    assert_eq!(g.op_by_name(names[0]).unwrap().id, again);
    let again1 = op1(&mut ir, main, "Relu", &[x], names[1]).0;
    assert_eq!(ir.main_graph().op(again1).unwrap().name, names[1]);
    ir.verify().unwrap();
}

#[test]
fn extreme_indices_do_not_overflow_or_allocate() {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let x = ir.main_graph_mut().add_input("x", f32i(&[1])).unwrap();
    let (op, y) = op1(&mut ir, main, "Neg", &[x], "n");
    let g = ir.main_graph_mut();
    g.disconnect_output(op, 0).unwrap();
    g.connect_output(op, u32::MAX, y).unwrap();
    assert_eq!(g.op(op).unwrap().outputs().end(), u64::from(u32::MAX) + 1);
    assert!(matches!(ir.verify(), Err(IrError::Invalid(m)) if m.contains("output 4294967295")));
    let g = ir.main_graph_mut();
    assert_eq!(g.remove_op_outputs(op, &[u32::MAX]).unwrap(), vec![y]);
    assert!(g.op(op).unwrap().outputs().is_empty());
}
