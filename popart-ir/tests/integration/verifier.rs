//! The verifier catches every broken invariant, whether reachable through the
//! public API (attribute edits, misplaced streams, bad data) or only by corrupting
//! internal bookkeeping through the test hook.

use crate::common;

use common::{f32i, op1};
use popart_ir::test_hooks::{corrupt, Corruption};
use popart_ir::{
    AttrValue, Attributes, DataType, HostTensor, Ir, IrError, OpId, Port, StreamDirection, TensorId, TensorInfo,
    TensorKind,
};

/// main: x -> neg -> y -> exp -> z (output), plus a variable `v` and a free activation `free`.
struct Fixture {
    ir: Ir,
    x: TensorId,
    y: TensorId,
    z: TensorId,
    v: TensorId,
    free: TensorId,
    neg: OpId,
    exp: OpId,
}

fn fixture() -> Fixture {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let x = ir.main_graph_mut().add_input("x", f32i(&[2])).unwrap();
    let (neg, y) = op1(&mut ir, main, "Neg", &[x], "neg");
    let (exp, z) = op1(&mut ir, main, "Exp", &[y], "exp");
    let g = ir.main_graph_mut();
    g.add_output(z).unwrap();
    let v = g.add_tensor("v", f32i(&[2]), TensorKind::Variable(HostTensor::from_f32(&[2], &[1.0, 2.0]))).unwrap();
    let free = g.add_tensor("free", f32i(&[2]), TensorKind::ActGrad).unwrap();
    ir.verify().unwrap();
    Fixture { ir, x, y, z, v, free, neg, exp }
}

/// Apply `c` to the main graph of a fresh fixture and return the verifier's message.
fn broken(c: impl FnOnce(&Fixture) -> Corruption) -> String {
    let mut f = fixture();
    let c = c(&f);
    corrupt(f.ir.main_graph_mut(), c);
    match f.ir.verify() {
        Err(IrError::Invalid(m)) => m,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[test]
fn missing_consumer_entry() {
    let m = broken(|f| Corruption::DropConsumerEntry { op: f.exp, index: 0 });
    assert_eq!(m, "graph `main`: tensor `neg:0` does not list op `exp` input 0 as a consumer");
}

#[test]
fn spurious_consumer_entry() {
    let m = broken(|f| Corruption::AddConsumerEntry { tensor: f.x, port: Port { op: f.exp, index: 0 } });
    assert!(m.contains("tensor `x` lists a consumer that does not consume it"), "{m}");
    let m = broken(|f| Corruption::AddConsumerEntry { tensor: f.x, port: Port { op: f.neg, index: 0 } });
    assert!(m.contains("tensor `x` lists a consumer twice"), "{m}");
}

#[test]
fn producer_mismatch() {
    let m = broken(|f| Corruption::SetProducer { tensor: f.y, producer: None });
    assert!(m.contains("tensor `neg:0` does not name op `neg` output 0 as its producer"), "{m}");
    let m = broken(|f| Corruption::SetProducer { tensor: f.free, producer: Some(Port { op: f.neg, index: 0 }) });
    assert!(m.contains("tensor `free` names a producer that does not produce it"), "{m}");
}

#[test]
fn op_refers_to_foreign_tensors() {
    // A tensor id from another graph's arena that this graph does not hold.
    let mut other = Ir::new();
    let mut foreign = other.main_graph_mut().add_input("f0", f32i(&[2])).unwrap();
    for k in 1..10 {
        foreign = other.main_graph_mut().add_input(&format!("f{k}"), f32i(&[2])).unwrap();
    }
    let m = broken(|f| Corruption::SetOpInput { op: f.neg, index: 0, tensor: foreign });
    assert!(m.contains("op `neg` input 0 is not a tensor of this graph"), "{m}");
    let m = broken(|f| Corruption::SetOpOutput { op: f.neg, index: 0, tensor: foreign });
    assert!(m.contains("op `neg` output 0 is not a tensor of this graph"), "{m}");
    let m = broken(|_| Corruption::PushInput(foreign));
    assert!(m.contains("input 1 is not a tensor of this graph"), "{m}");
    let m = broken(|_| Corruption::PushOutput(foreign));
    assert!(m.contains("output 1 is not a tensor of this graph"), "{m}");
}

#[test]
fn graph_input_invariants() {
    let m = broken(|f| Corruption::PushInput(f.y));
    assert!(m.contains("graph input `neg:0` is produced by an op"), "{m}");
    let m = broken(|f| Corruption::PushInput(f.v));
    assert!(m.contains("graph input `v` is a var"), "{m}");
    let m = broken(|f| Corruption::PushInput(f.x));
    assert!(m.contains("tensor `x` is graph input more than once"), "{m}");
}

#[test]
fn non_activations_are_never_produced() {
    let m = broken(|f| Corruption::SetKind {
        tensor: f.y,
        kind: TensorKind::Constant(HostTensor::from_f32(&[2], &[0.0, 0.0])),
    });
    assert!(m.contains("const tensor `neg:0` has a producer"), "{m}");
}

#[test]
fn inferred_info_must_match() {
    let m = broken(|f| Corruption::SetInfo { tensor: f.z, info: TensorInfo::new(DataType::Float16, [2]) });
    assert!(
        m.contains("output 0 (`exp:0`) of op `exp` (Exp) is float16[2] but shape inference gives float32[2]"),
        "{m}"
    );
    // Through the public API: attribute edits do not re-run inference.
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let x = ir.main_graph_mut().add_input("x", f32i(&[2, 3])).unwrap();
    let r = ir
        .create_op(main, "Reshape", Attributes::new().with("shape", AttrValue::Ints(vec![3, 2])), &[(0, x)], "r")
        .unwrap();
    ir.verify().unwrap();
    ir.main_graph_mut().op_attrs_mut(r).unwrap().set("shape", AttrValue::Ints(vec![6]));
    assert!(matches!(ir.verify(), Err(IrError::Invalid(m)) if m.contains("op `r`")));
    // An attribute edit that makes inference fail reports the inference error.
    ir.main_graph_mut().op_attrs_mut(r).unwrap().set("shape", AttrValue::Ints(vec![7]));
    assert!(matches!(ir.verify(), Err(IrError::Inference { op, .. }) if op == "r"));
    // A disconnected output also disagrees with inference.
    let mut f = fixture();
    f.ir.main_graph_mut().remove_output(0).unwrap();
    f.ir.main_graph_mut().disconnect_input(f.exp, 0).unwrap();
    f.ir.main_graph_mut().disconnect_output(f.neg, 0).unwrap();
    assert!(matches!(f.ir.verify(), Err(IrError::Invalid(m)) if m.contains("outputs of op `neg` are []")));
}

#[test]
fn topo_cons_must_join_live_ops() {
    let mut f = fixture();
    let main = f.ir.main_graph_id();
    let (dead, _) = op1(&mut f.ir, main, "Neg", &[f.x], "dead");
    f.ir.main_graph_mut().erase_op(dead).unwrap();
    corrupt(f.ir.main_graph_mut(), Corruption::AddTopoCon { before: f.neg, after: dead });
    assert!(matches!(f.ir.verify(), Err(IrError::Invalid(m)) if m.contains("topological constraint")));
}

#[test]
fn streams_only_in_the_main_graph() {
    let mut ir = Ir::new();
    let sub = ir.create_graph("sub").unwrap();
    ir.main_graph_mut().add_tensor("ok", f32i(&[2]), TensorKind::Stream(StreamDirection::HostToDevice)).unwrap();
    ir.verify().unwrap();
    ir.graph_mut(sub).unwrap().add_tensor("s", f32i(&[2]), TensorKind::Stream(StreamDirection::DeviceToHost)).unwrap();
    assert_eq!(ir.verify(), Err(IrError::Invalid("graph `sub`: stream `s` is not in the main graph".into())));
}

#[test]
fn variable_data_must_match_its_type() {
    let mut ir = Ir::new();
    let short = HostTensor { info: f32i(&[2]), bytes: vec![0; 7] };
    let err = ir.main_graph_mut().add_tensor("w", f32i(&[2]), TensorKind::Variable(short)).unwrap_err();
    assert!(matches!(err, IrError::HostData { ref tensor, .. } if tensor == "w"), "{err:?}");
    assert_eq!(err.to_string(), "data of tensor `w` in graph `main`: float32[2] data must be 8 bytes, got 7");
}

#[test]
fn subgraph_ops_must_match_the_called_graph() {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let body = ir.create_graph("body").unwrap();
    let bx = ir.graph_mut(body).unwrap().add_input("bx", f32i(&[2])).unwrap();
    ir.graph_mut(body).unwrap().add_output(bx).unwrap();
    let x = ir.main_graph_mut().add_input("x", f32i(&[2])).unwrap();
    ir.create_op(main, "Call", Attributes::new().with("graph", AttrValue::Graph(body)), &[(0, x)], "call").unwrap();
    ir.verify().unwrap();
    // The callee gains an input after the call was created: arity no longer matches.
    ir.graph_mut(body).unwrap().add_input("extra", f32i(&[1])).unwrap();
    match ir.verify() {
        Err(IrError::Inference { op, message, .. }) => {
            assert_eq!(op, "call");
            assert!(message.contains("has 2 inputs but 1 were given"), "{message}");
        }
        other => panic!("expected an inference error, got {other:?}"),
    }
    ir.graph_mut(body).unwrap().remove_input(1).unwrap();
    ir.verify().unwrap();
    // The callee gains an output: the call's outputs no longer match.
    ir.graph_mut(body).unwrap().add_output(bx).unwrap();
    assert!(matches!(ir.verify(), Err(IrError::Invalid(m)) if m.contains("outputs of op `call`")));
}

#[test]
fn calls_to_removed_graphs_are_caught() {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let body = ir.create_graph("body").unwrap();
    let spare = ir.create_graph("spare").unwrap();
    let x = ir.main_graph_mut().add_input("x", f32i(&[2])).unwrap();
    let call = ir.create_op(main, "Call", Attributes::new().with("graph", AttrValue::Graph(body)), &[(0, x)], "call");
    // body has no inputs: the call with one input is rejected at creation.
    assert!(matches!(call, Err(IrError::Inference { .. })));
    let call =
        ir.create_op(main, "Call", Attributes::new().with("graph", AttrValue::Graph(body)), &[], "call").unwrap();
    ir.remove_graph(spare).unwrap();
    ir.main_graph_mut().op_attrs_mut(call).unwrap().set("graph", AttrValue::Graph(spare));
    match ir.verify() {
        Err(IrError::Invalid(m)) => assert!(m.contains("op `call` calls a graph that is not in this IR"), "{m}"),
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[test]
fn unused_inputs_and_wrong_grad_shapes_are_refused() {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let x = ir.main_graph_mut().add_input("x", TensorInfo::new(DataType::Float32, [2, 3])).unwrap();
    let w = ir.main_graph_mut().add_input("w", TensorInfo::new(DataType::Float32, [3, 4])).unwrap();
    // A third input of Add would be ignored: refused, naming the op and index.
    let err = ir.create_op(main, "Add", Attributes::new(), &[(0, x), (1, x), (2, x)], "add3").unwrap_err();
    assert!(
        matches!(&err, IrError::Inference { op, message, .. } if op == "add3" && message.contains("index 2")),
        "{err}"
    );
    // A hand-built matmul gradient whose incoming gradient has the wrong shape.
    let bad_g = ir.main_graph_mut().add_input("g", TensorInfo::new(DataType::Float32, [2, 5])).unwrap();
    let err = ir.create_op(main, "MatMulRhsGrad", Attributes::new(), &[(0, bad_g), (1, x), (2, w)], "rg").unwrap_err();
    assert!(err.to_string().contains("does not match the forward output float32[2,4]"), "{err}");
    let g = ir.main_graph_mut().add_input("g_ok", TensorInfo::new(DataType::Float32, [2, 4])).unwrap();
    ir.create_op(main, "MatMulRhsGrad", Attributes::new(), &[(0, g), (1, x), (2, w)], "rg").unwrap();
    ir.verify().unwrap();
}

#[test]
fn oversized_outputs_are_refused_where_they_are_created() {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let a = ir.main_graph_mut().add_input("a", TensorInfo::new(DataType::Float32, [1usize << 40, 1])).unwrap();
    let b = ir.main_graph_mut().add_input("b", TensorInfo::new(DataType::Float32, [1, 1usize << 40])).unwrap();
    // Each operand is 4 TiB; the broadcast product is 2^80 elements.
    let err = ir.create_op(main, "Add", Attributes::new(), &[(0, a), (1, b)], "big").unwrap_err();
    assert!(matches!(&err, IrError::TensorTooLarge { tensor, .. } if tensor == "big:0"), "{err}");
    assert_eq!(ir.main_graph().num_ops(), 0, "nothing created");
    // Concat lengths that overflow usize, reshape products that overflow.
    let attrs = Attributes::new().with("axis", AttrValue::Int(0));
    let huge = ir.main_graph_mut().add_input("h", TensorInfo::new(DataType::Bool, [usize::MAX / 2 - 1])).unwrap();
    let err = ir.create_op(main, "Concat", attrs, &[(0, huge), (1, huge), (2, huge)], "cat").unwrap_err();
    assert!(matches!(err, IrError::Inference { .. } | IrError::TensorTooLarge { .. }), "{err}");
    let shape = Attributes::new().with("shape", AttrValue::Ints(vec![i64::MAX, i64::MAX, 0, -1]));
    assert!(ir.create_op(main, "Reshape", shape, &[(0, a)], "r").is_err());
    ir.verify().unwrap();
}

#[test]
fn zero_host_transfers_or_replicas_are_invalid() {
    let mut ir = Ir::new();
    ir.num_host_transfers = 0;
    assert_eq!(ir.verify(), Err(IrError::ZeroSetting { setting: "num_host_transfers" }));
    ir.num_host_transfers = 1;
    ir.replication_factor = 0;
    assert_eq!(ir.verify(), Err(IrError::ZeroSetting { setting: "replication_factor" }));
    // Host data built by hand for a huge shape: no capacity overflow.
    let t = HostTensor::from_f64_values(DataType::Float32, &[usize::MAX], &[]);
    assert!(t.validate().is_err());
}

#[test]
fn graph_attributes_only_where_a_graph_is_called() {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let body = ir.create_graph("body").unwrap();
    let bx = ir.graph_mut(body).unwrap().add_input("bx", f32i(&[2])).unwrap();
    ir.graph_mut(body).unwrap().add_output(bx).unwrap();
    let x = ir.main_graph_mut().add_input("x", f32i(&[2])).unwrap();
    // A stray graph attribute would be taken for a call by every pass.
    let relu = Attributes::new().with("graph", AttrValue::Graph(body));
    let err = ir.create_op(main, "Relu", relu, &[(0, x)], "r").unwrap_err();
    // Refused as an undeclared attribute (issue 34), before the check that only
    // subgraph ops carry graphs.
    assert!(err.to_string().contains("unknown attribute `graph`"), "{err}");
    let call = Attributes::new().with("graph", AttrValue::Graph(body)).with("aaa", AttrValue::Graph(body));
    let err = ir.create_op(main, "Call", call, &[(0, x)], "c").unwrap_err();
    assert!(err.to_string().contains("unknown attribute `aaa`"), "{err}");
}

/// An activation that is read must be defined: by its producer or as a graph
/// input. Erasing the producer (as a careless pattern would) leaves `y` (`neg:0`), read by
/// `exp`, undefined; the unread activation `free` stays valid.
#[test]
fn a_read_activation_without_producer_is_invalid() {
    let mut f = fixture();
    f.ir.main_graph_mut().erase_op(f.neg).unwrap_or_else(|e| panic!("{e}"));
    match f.ir.verify() {
        Err(IrError::Invalid(m)) => assert!(m.contains("activation `neg:0` is read but has no producer"), "{m}"),
        other => panic!("expected Invalid, got {other:?}"),
    }
    // As a graph output only.
    let mut ir = Ir::new();
    let g = ir.main_graph_mut();
    let t = g.add_tensor("t", f32i(&[2]), TensorKind::ActGrad).unwrap();
    g.add_output(t).unwrap();
    match ir.verify() {
        Err(IrError::Invalid(m)) => assert!(m.contains("activation `t` is read"), "{m}"),
        other => panic!("expected Invalid, got {other:?}"),
    }
}
