//! The text form: snapshots of small IRs, exact round trips, parse errors, and DOT.

use crate::common;

use common::{f32i, op1};
use popart_ir::text::{self, parse, structural_diff, to_text, to_text_with, TextOptions};
use popart_ir::{
    dot, lookup_op, AttrValue, Attributes, DataType, HostTensor, Ir, IrError, StreamDirection, TensorId, TensorInfo,
    TensorKind,
};

fn attrs(pairs: &[(&str, AttrValue)]) -> Attributes {
    pairs.iter().fold(Attributes::new(), |a, (k, v)| a.with(k, v.clone()))
}

fn out0(ir: &Ir, g: popart_ir::GraphId, op: popart_ir::OpId) -> TensorId {
    ir.graph(g).unwrap().op(op).unwrap().output(0).unwrap()
}

/// A main graph with variables, constants of several types, topoCons (one tied).
fn dense_ir() -> Ir {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let g = ir.main_graph_mut();
    let x = g.add_input("x", f32i(&[2, 3])).unwrap();
    let w = g
        .add_tensor(
            "w",
            f32i(&[3, 2]),
            TensorKind::Variable(HostTensor::from_f32(&[3, 2], &[0.5, -1.0, 0.1, 1e-8, -0.0, 3.0])),
        )
        .unwrap();
    let b = g.add_tensor("b", f32i(&[2]), TensorKind::Constant(HostTensor::from_f32(&[2], &[0.25, 2.5]))).unwrap();
    let idx = HostTensor::from_f64_values(DataType::Int32, &[2], &[1.0, -7.0]);
    let ids = g.add_tensor("ids", TensorInfo::new(DataType::Int32, [2]), TensorKind::Constant(idx)).unwrap();
    let (mm, h) = op1(&mut ir, main, "MatMul", &[x, w], "mm");
    let (add, hb) = op1(&mut ir, main, "Add", &[h, b], "bias");
    let (relu, r) = op1(&mut ir, main, "Relu", &[hb], "relu");
    let sm = ir.create_op(main, "Softmax", attrs(&[("axis", AttrValue::Int(-1))]), &[(0, r)], "softmax").unwrap();
    let p = out0(&ir, main, sm);
    let loss = ir
        .create_op(main, "NllLoss", attrs(&[("reduction", AttrValue::Str("mean".into()))]), &[(0, p), (1, ids)], "loss")
        .unwrap();
    let l = out0(&ir, main, loss);
    let g = ir.main_graph_mut();
    g.add_output(l).unwrap();
    g.add_output(r).unwrap();
    g.add_topo_con(mm, relu).unwrap();
    g.add_tied_topo_con(add, relu).unwrap();
    ir.verify().unwrap();
    ir
}

/// Subgraphs called by Call, Repeat and If; host streams with HostLoad/HostStore;
/// non-contiguous input indices; attributes of every kind; awkward names.
fn subgraph_ir() -> Ir {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    ir.num_host_transfers = 4;
    ir.replication_factor = 2;
    // body(a, b) = (a + b, b): used by Call and Repeat.
    let body = ir.create_graph("body").unwrap();
    let ba = ir.graph_mut(body).unwrap().add_input("body/a", f32i(&[4])).unwrap();
    let bb = ir.graph_mut(body).unwrap().add_input("body/b", f32i(&[4])).unwrap();
    let (_, bs) = op1(&mut ir, body, "Add", &[ba, bb], "sum");
    ir.graph_mut(body).unwrap().add_output(bs).unwrap();
    ir.graph_mut(body).unwrap().add_output(bb).unwrap();
    // then(t) = -t ; else(e) = e * 2
    let then_g = ir.create_graph("then branch").unwrap();
    let tt = ir.graph_mut(then_g).unwrap().add_input("t", f32i(&[4])).unwrap();
    let (_, tn) = op1(&mut ir, then_g, "Neg", &[tt], "neg");
    ir.graph_mut(then_g).unwrap().add_output(tn).unwrap();
    let else_g = ir.create_graph("else").unwrap();
    let g = ir.graph_mut(else_g).unwrap();
    let ee = g.add_input("e", f32i(&[4])).unwrap();
    let two = g.add_tensor("two", f32i(&[]), TensorKind::Constant(HostTensor::from_f32(&[], &[2.0]))).unwrap();
    let (_, em) = op1(&mut ir, else_g, "Mul", &[ee, two], "double");
    ir.graph_mut(else_g).unwrap().add_output(em).unwrap();

    let g = ir.main_graph_mut();
    g.add_tensor("input stream", f32i(&[4]), TensorKind::Stream(StreamDirection::HostToDevice)).unwrap();
    g.add_tensor("out->host", f32i(&[4]), TensorKind::Stream(StreamDirection::DeviceToHost)).unwrap();
    let flag = g.add_input("flag", TensorInfo::new(DataType::Bool, [])).unwrap();
    let acc = g
        .add_tensor("acc \"quoted\"", f32i(&[4]), TensorKind::Variable(HostTensor::from_f32(&[4], &[0.0; 4])))
        .unwrap();
    let load = ir
        .create_op(main, "HostLoad", attrs(&[("stream", AttrValue::Str("input stream".into()))]), &[], "load")
        .unwrap();
    let xin = out0(&ir, main, load);
    let call = ir
        .create_op(
            main,
            "Call",
            attrs(&[("graph", AttrValue::Graph(body)), ("modified", AttrValue::Ints(vec![]))]),
            &[(0, xin), (1, acc)],
            "call",
        )
        .unwrap();
    let c0 = out0(&ir, main, call);
    let rep = ir
        .create_op(
            main,
            "Repeat",
            attrs(&[("graph", AttrValue::Graph(body)), ("count", AttrValue::Int(3))]),
            &[(0, c0), (1, xin)],
            "repeat",
        )
        .unwrap();
    let r0 = out0(&ir, main, rep);
    let iff = ir
        .create_op(
            main,
            "If",
            attrs(&[
                ("then_graph", AttrValue::Graph(then_g)),
                ("else_graph", AttrValue::Graph(else_g)),
                ("then_inputs", AttrValue::Ints(vec![1])),
                ("else_inputs", AttrValue::Ints(vec![1])),
            ]),
            &[(0, flag), (1, r0)],
            "if",
        )
        .unwrap();
    let i0 = out0(&ir, main, iff);
    // Non-contiguous inputs: ScaledAddInplace(x, y, b) with `a` (index 2) absent.
    let scale = ir
        .main_graph_mut()
        .add_tensor("scale", f32i(&[]), TensorKind::Constant(HostTensor::from_f32(&[], &[0.5])))
        .unwrap();
    let upd = ir
        .create_op(
            main,
            "ScaledAddInplace",
            attrs(&[("a", AttrValue::Float(1.0))]),
            &[(0, acc), (1, i0), (3, scale)],
            "update",
        )
        .unwrap();
    let cast =
        ir.create_op(main, "Cast", attrs(&[("to", AttrValue::DType(DataType::Float16))]), &[(0, i0)], "cast").unwrap();
    let rs = ir
        .create_op(
            main,
            "ReduceSum",
            attrs(&[("axes", AttrValue::Ints(vec![0])), ("keepdims", AttrValue::Bool(true))]),
            &[(0, out0(&ir, main, cast))],
            "reduce",
        )
        .unwrap();
    let store = ir
        .create_op(main, "HostStore", attrs(&[("stream", AttrValue::Str("out->host".into()))]), &[(0, i0)], "store")
        .unwrap();
    let g = ir.main_graph_mut();
    let reduced = g.op(rs).unwrap().output(0).unwrap();
    g.add_output(reduced).unwrap();
    g.add_topo_con(upd, store).unwrap();
    g.add_tied_topo_con(load, call).unwrap();
    ir.verify().unwrap();
    ir
}

fn assert_round_trip(ir: &Ir) -> String {
    let t = to_text(ir);
    let parsed = parse(&t).unwrap_or_else(|e| panic!("{e}\n{t}"));
    assert_eq!(to_text(&parsed), t);
    assert_eq!(structural_diff(ir, &parsed), None);
    assert_eq!(dot::to_dot(ir), dot::to_dot(&parsed));
    t
}

#[test]
fn snapshot_dense_graph() {
    let ir = dense_ir();
    let t = assert_round_trip(&ir);
    assert_eq!(ir.to_string(), t, "Display is the text form");
    insta::assert_snapshot!("dense", t);
}

#[test]
fn snapshot_subgraphs_streams_and_control_flow() {
    let t = assert_round_trip(&subgraph_ir());
    insta::assert_snapshot!("subgraphs", t);
}

#[test]
fn snapshot_empty_ir() {
    let t = assert_round_trip(&Ir::new());
    assert_eq!(t, "ir num_host_transfers=1 replication_factor=1\n\ngraph main\n  inputs []\n  outputs []\n");
}

#[test]
fn snapshot_dot() {
    insta::assert_snapshot!("dot", dot::to_dot(&subgraph_ir()));
}

#[test]
fn exact_data_round_trip_for_every_dtype() {
    let mut ir = Ir::new();
    let g = ir.main_graph_mut();
    let f32s = [0.0f32, -0.0, 1.0, 0.1, f32::MIN_POSITIVE / 3.0, f32::MAX, f32::INFINITY, f32::NEG_INFINITY, f32::NAN];
    let mut bytes: Vec<u8> = f32s.iter().flat_map(|x| x.to_le_bytes()).collect();
    bytes.extend_from_slice(&0xffc0_0001u32.to_le_bytes()); // a negative NaN with a payload
    let info = f32i(&[10]);
    g.add_tensor("f32", info.clone(), TensorKind::Variable(HostTensor::from_bytes(info, bytes).unwrap())).unwrap();
    let f64s = [1.0 / 3.0, -1e-300, 5e-324, f64::from_bits(0x7ff8_0000_dead_beef)];
    let info = TensorInfo::new(DataType::Float64, [4]);
    let bytes = f64s.iter().flat_map(|x| x.to_le_bytes()).collect();
    g.add_tensor("f64", info.clone(), TensorKind::Constant(HostTensor::from_bytes(info, bytes).unwrap())).unwrap();
    let f16s: [u16; 6] = [0x0001, 0x3c00, 0x8000, 0x7c00, 0x7e00, 0x7d01];
    let info = TensorInfo::new(DataType::Float16, [6]);
    let bytes = f16s.iter().flat_map(|x| x.to_le_bytes()).collect();
    g.add_tensor("f16", info.clone(), TensorKind::Constant(HostTensor::from_bytes(info, bytes).unwrap())).unwrap();
    let ints: [(DataType, Vec<u8>); 9] = [
        (DataType::Bool, vec![0, 1, 1]),
        (DataType::Int8, vec![0x80, 0x7f, 0xff]),
        (DataType::Uint8, vec![0, 200, 255]),
        (DataType::Int16, [i16::MIN, -1, i16::MAX].iter().flat_map(|x| x.to_le_bytes()).collect()),
        (DataType::Uint16, [0u16, 1, u16::MAX].iter().flat_map(|x| x.to_le_bytes()).collect()),
        (DataType::Int32, [i32::MIN, 0, i32::MAX].iter().flat_map(|x| x.to_le_bytes()).collect()),
        (DataType::Uint32, [0u32, 7, u32::MAX].iter().flat_map(|x| x.to_le_bytes()).collect()),
        (DataType::Int64, [i64::MIN, -2, i64::MAX].iter().flat_map(|x| x.to_le_bytes()).collect()),
        (DataType::Uint64, [0u64, 9, u64::MAX].iter().flat_map(|x| x.to_le_bytes()).collect()),
    ];
    for (d, bytes) in ints {
        let info = TensorInfo::new(d, [3]);
        g.add_tensor(d.name(), info.clone(), TensorKind::Variable(HostTensor::from_bytes(info, bytes).unwrap()))
            .unwrap();
    }
    let t = assert_round_trip(&ir);
    // Spot-check the printed forms.
    assert!(t.contains("tensor f32 var float32[10] = [0.0, -0.0, 1.0, 0.1, "), "{t}");
    assert!(t.contains("inf, -inf, NaN, nan:0xffc00001]"), "{t}");
    assert!(t.contains("nan:0x7ff80000deadbeef"), "{t}");
    assert!(t.contains("tensor f16 const float16[6] = [5.9604645e-8, 1.0, -0.0, inf, NaN, nan:0x7d01]"), "{t}");
    assert!(t.contains("tensor bool var bool[3] = [false, true, true]"), "{t}");
    assert!(t.contains("= [-9223372036854775808, -2, 9223372036854775807]"), "{t}");
    assert!(t.contains("= [0, 9, 18446744073709551615]"), "{t}");
    // And the bytes are bit-exact.
    let parsed = parse(&t).unwrap();
    for tensor in ir.main_graph().tensors() {
        let other = parsed.main_graph().tensor_by_name(&tensor.name).unwrap();
        assert_eq!(other.kind.data().unwrap().bytes, tensor.kind.data().unwrap().bytes, "{}", tensor.name);
    }
}

#[test]
fn creation_order_survives_erasure_and_slot_reuse() {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let x = ir.main_graph_mut().add_input("x", f32i(&[2])).unwrap();
    let (a, _) = op1(&mut ir, main, "Neg", &[x], "a");
    op1(&mut ir, main, "Exp", &[x], "b");
    ir.main_graph_mut().erase_op_and_outputs(a).unwrap();
    // These reuse the freed arena slots but are newer: they print last.
    let (c, yc) = op1(&mut ir, main, "Relu", &[x], "c");
    let (d, _) = op1(&mut ir, main, "Abs", &[yc], "d");
    let b = ir.main_graph().op_by_name("b").unwrap().id;
    ir.main_graph_mut().add_topo_con(d, b).unwrap();
    ir.main_graph_mut().add_topo_con(c, b).unwrap();
    let t = assert_round_trip(&ir);
    let ops: Vec<&str> =
        t.lines().filter_map(|l| l.trim().strip_prefix("op ")).map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(ops, vec!["b", "c", "d"]);
    let tensors: Vec<&str> =
        t.lines().filter_map(|l| l.trim().strip_prefix("tensor ")).map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(tensors, vec!["x", "b:0", "c:0", "d:0"]);
    let cons: Vec<&str> = t.lines().filter_map(|l| l.trim().strip_prefix("topocon ")).collect();
    assert_eq!(cons, vec!["c -> b", "d -> b"]);
}

#[test]
fn dangling_tensors_and_unusual_names_round_trip() {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let g = ir.main_graph_mut();
    let x = g.add_input("", f32i(&[1])).unwrap();
    g.add_tensor("tab\there", f32i(&[1]), TensorKind::ActGrad).unwrap();
    g.add_tensor("uni\u{1}code é ✓", f32i(&[]), TensorKind::ActGrad).unwrap();
    g.add_tensor("a->b", f32i(&[1]), TensorKind::ActGrad).unwrap();
    g.add_tensor("back\\slash", f32i(&[1]), TensorKind::ActGrad).unwrap();
    op1(&mut ir, main, "Neg", &[x], "op with spaces");
    op1(&mut ir, main, "Neg", &[x], "-");
    op1(&mut ir, main, "Neg", &[x], "123");
    let t = assert_round_trip(&ir);
    assert!(t.contains("inputs [\"\"]"), "{t}");
    assert!(t.contains("tensor \"tab\\there\" act"), "{t}");
    assert!(t.contains("tensor \"uni\\u{1}code é ✓\" act float32[]"), "{t}");
    assert!(t.contains("tensor \"a->b\""), "{t}");
    assert!(t.contains("op - Neg in[0=\"\"] out[0=-:0]"), "{t}");
    assert!(t.contains("op 123 Neg"), "{t}");
}

#[test]
fn custom_ops_round_trip_through_the_registry() {
    use popart_ir::{op_attrs, register_op, AttrSpec, InferContext, OpAttrs, OpDef, Result};
    op_attrs! {
        /// The custom op's attributes, declared as builtin ops declare theirs.
        struct HalveAttrs {
            parts: i64,
            /// Unread; float lists round trip.
            weights: Option<Vec<f64>> = None,
        }
    }
    struct Halve;
    impl OpDef for Halve {
        fn op_type(&self) -> &'static str {
            "text_test.Halve"
        }
        fn attributes(&self) -> &'static [AttrSpec] {
            HalveAttrs::SCHEMA
        }
        fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
            let x = ctx.input(0)?;
            let parts = HalveAttrs::infer(ctx)?.parts;
            // A custom op checks its own attributes (the text fuzzer gives it any value).
            let n = usize::try_from(parts)
                .ok()
                .filter(|n| (1..=16).contains(n))
                .ok_or_else(|| ctx.error(format!("parts must be in 1..=16, not {parts}")))?;
            Ok(vec![TensorInfo::new(x.dtype, [x.nelms() / n]); n])
        }
    }
    static HALVE: Halve = Halve;
    register_op(&HALVE).unwrap();
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let x = ir.main_graph_mut().add_input("x", f32i(&[8])).unwrap();
    let a = HalveAttrs { parts: 2, weights: Some(vec![0.1, -2.0, 1e300]) };
    ir.create_op(main, "text_test.Halve", a.to_attrs(), &[(0, x)], "h").unwrap();
    let t = assert_round_trip(&ir);
    assert!(
        t.contains("op h text_test.Halve {parts=2, weights=floats[0.1, -2.0, 1e300]} in[0=x] out[0=h:0, 1=h:1]"),
        "{t}"
    );
    let bad = attrs(&[("parts", AttrValue::Float(2.0))]);
    assert!(matches!(ir.create_op(main, "text_test.Halve", bad, &[(0, x)], "h2"), Err(IrError::Attribute { .. })));
}

#[test]
fn elided_data_is_for_reading_only() {
    let mut ir = Ir::new();
    let g = ir.main_graph_mut();
    g.add_tensor("big", f32i(&[100]), TensorKind::Variable(HostTensor::zeros(f32i(&[100])))).unwrap();
    g.add_tensor("small", f32i(&[2]), TensorKind::Variable(HostTensor::zeros(f32i(&[2])))).unwrap();
    let t = to_text_with(&ir, &TextOptions { elide_data_over: Some(16) });
    assert!(t.contains("tensor big var float32[100] = elided(100)\n"), "{t}");
    assert!(t.contains("tensor small var float32[2] = [0.0, 0.0]\n"), "{t}");
    match parse(&t) {
        Err(IrError::Parse { line: 6, message }) => {
            assert!(message.contains("elided"), "{message}")
        }
        other => panic!("expected a parse error, got {other:?}"),
    }
}

const HEADER: &str = "ir num_host_transfers=1 replication_factor=1\n";

fn parse_err(body: &str) -> (usize, String) {
    match parse(&format!("{HEADER}{body}")) {
        Err(IrError::Parse { line, message }) => (line, message),
        other => panic!("expected a parse error for\n{body}\ngot {other:?}"),
    }
}

#[test]
fn parse_errors_give_the_line_and_the_problem() {
    let cases: &[(&str, usize, &str)] = &[
        ("graph main\n  frobnicate\n", 3, "unknown statement `frobnicate`"),
        ("  tensor x act float32[1]\n", 2, "outside a graph"),
        ("graph sub\n", 2, "first graph must be `main`"),
        ("graph main\ngraph main\n", 3, "already has a graph named `main`"),
        ("graph main\n  tensor x act float33[1]\n", 3, "unknown data type `float33`"),
        ("graph main\n  tensor x wobbly float32[1]\n", 3, "unknown tensor kind `wobbly`"),
        ("graph main\n  tensor x act float32[1\n", 3, "expected `,` or `]`, found end of line"),
        ("graph main\n  tensor x act float32[1]\n  tensor x act float32[1]\n", 4, "already has a tensor named `x`"),
        ("graph main\n  tensor v var float32[2]\n", 3, "needs `= [..]` data"),
        ("graph main\n  tensor v var float32[2] = [1.0]\n", 3, "has 2 elements but 1 values"),
        ("graph main\n  tensor v var int8[1] = [300]\n", 3, "`300` is not a int8 value"),
        ("graph main\n  tensor a act float32[1] = [1.0]\n", 3, "cannot have data"),
        ("graph main\n  tensor \"x act float32[1]\n", 3, "unterminated string"),
        ("graph main\n  tensor \"\\q\" act float32[1]\n", 3, "unknown escape"),
        ("graph main\n  inputs [y]\n", 3, "has no tensor `y`"),
        ("graph main\n  inputs []\n  inputs []\n", 4, "a second `inputs` line"),
        ("graph main\n  op n Nope in[] out[]\n", 3, "unknown op type `Nope`"),
        ("graph main\n  tensor x act float32[1]\n  op n Neg in[0=y] out[]\n", 4, "has no tensor `y`"),
        ("graph main\n  tensor x act float32[1]\n  op n Neg in[0=x] out[]\n", 4, "declares outputs [] but shape inference gives [0: float32[1]]"),
        (
            "graph main\n  tensor x act float32[1]\n  tensor y act float32[2]\n  op n Neg in[0=x] out[0=y]\n",
            5,
            "declares outputs [0: float32[2]]",
        ),
        ("graph main\n  tensor x act int32[1]\n  tensor y act int32[1]\n  op n Exp in[0=x] out[0=y]\n", 5, "floating point"),
        (
            "graph main\n  tensor x act float32[1]\n  tensor y act float32[1]\n  op n Neg in[0=x] out[0=y]\n  op n Neg in[0=x] out[0=y]\n",
            6,
            "already has an op named `n`",
        ),
        (
            "graph main\n  tensor x act float32[1]\n  tensor y act float32[1]\n  tensor z act float32[1]\n  op n Neg in[0=x] out[0=y]\n  op m Neg in[0=x] out[0=y]\n",
            7,
            "already produced by op `n`",
        ),
        ("graph main\n  tensor x act float32[1]\n  tensor y act float32[1]\n  op n Neg in[0=x] out[0=y]\n  topocon n -> q\n", 6, "has no op `q`"),
        ("graph main\n  tensor x act float32[1]\n  tensor y act float32[1]\n  op n Neg in[0=x] out[0=y]\n  topocon n -> n\n", 6, "to itself"),
        ("graph main\n  tensor x act float32[1]\n  tensor y act float32[1]\n  op n Neg in[0=x] out[0=y]\n  topocon n n\n", 6, "expected `->`"),
        ("graph main\n  tensor x act float32[1]\n  tensor y act float32[1]\n  op n Neg in[0=x] out[0=y]\n  topocon n -> n loose\n", 6, "expected `tied`"),
        ("graph main\n  op c Call {graph=@nowhere} in[] out[]\n", 3, "unknown graph `nowhere`"),
        ("graph main\n  op c Call {graph=@main, graph=@main} in[] out[]\n", 3, "attribute `graph` given twice"),
        ("graph main\n  op c Call {graph=$} in[] out[]\n", 3, "unexpected character `$`"),
        ("graph main\n  op c Call {graph=[1, x]} in[] out[]\n", 3, "expected an integer, found `x`"),
        ("graph main\n  op c Neg in[x=y] out[]\n", 3, "expected an index, found `x`"),
        ("graph main\n  tensor x act float32[1]\n  op c Neg in[0=x] out[] extra\n", 4, "unexpected `extra` at end of line"),
    ];
    for &(body, line, msg) in cases {
        let (l, m) = parse_err(body);
        assert_eq!(l, line, "wrong line for\n{body}\n{m}");
        assert!(m.contains(msg), "for\n{body}\nexpected `{msg}` in `{m}`");
    }
}

#[test]
fn header_errors() {
    assert!(matches!(parse(""), Err(IrError::Parse { message, .. }) if message.contains("missing the `ir` header")));
    assert!(
        matches!(parse("graph main\n"), Err(IrError::Parse { line: 1, message }) if message.contains("`ir` header"))
    );
    assert!(
        matches!(parse("ir num_host_transfers=1\n"), Err(IrError::Parse { line: 1, message }) if message.contains("replication_factor"))
    );
    for zero in ["ir num_host_transfers=0 replication_factor=1\n", "ir num_host_transfers=2 replication_factor=0\n"] {
        assert!(
            matches!(parse(zero), Err(IrError::Parse { line: 1, message }) if message.contains("must be at least 1")),
            "{zero}"
        );
    }
    assert!(matches!(
        parse("ir num_host_transfers=1 replication_factor=1 colour=3\n"),
        Err(IrError::Parse { line: 1, message }) if message.contains("unknown header field `colour`")
    ));
    assert!(matches!(parse(HEADER), Err(IrError::Parse { message, .. }) if message.contains("no `graph main`")));
    // Comments and blank lines are ignored.
    let ir = parse(&format!("# a comment\n\n{HEADER}\n# another\ngraph main\n\n  inputs []\n")).unwrap();
    assert_eq!(ir.main_graph().num_tensors(), 0);
}

#[test]
fn parsed_ir_is_verified() {
    // A constraint closing a cycle is refused with the typed error, naming the ops.
    let body = "graph main\n  tensor x act float32[1]\n  tensor y act float32[1]\n  tensor z act float32[1]\n  op a Neg in[0=x] out[0=y]\n  op b Neg in[0=y] out[0=z]\n  topocon b -> a\n";
    match parse(&format!("{HEADER}{body}")) {
        Err(IrError::Cycle { graph, mut ops }) => {
            assert_eq!(graph, "main");
            ops.sort();
            assert_eq!(ops, vec!["a", "b"]);
        }
        other => panic!("expected a cycle, got {other:?}"),
    }
}

#[test]
fn structural_diff_finds_differences() {
    let a = dense_ir();
    let mut b = dense_ir();
    assert_eq!(structural_diff(&a, &b), None);
    let relu = b.main_graph().op_by_name("relu").unwrap().id;
    b.main_graph_mut().op_attrs_mut(relu).unwrap().set("x", AttrValue::Int(1));
    assert_eq!(structural_diff(&a, &b).unwrap(), "graph `main`: attributes of op `relu` differ");
    let mut c = dense_ir();
    let mm = c.main_graph().op_by_name("mm").unwrap().id;
    c.main_graph_mut().remove_topo_con(mm, relu);
    let relu_c = c.main_graph().op_by_name("relu").unwrap().id;
    c.main_graph_mut().remove_topo_con(mm, relu_c);
    assert!(structural_diff(&a, &c).unwrap().contains("topological constraints"));
    let mut d = dense_ir();
    let g = d.main_graph_mut();
    let extra = g.add_op(lookup_op("Neg").unwrap(), Attributes::new(), "extra");
    g.erase_op(extra).unwrap();
    // Erasing leaves no trace structurally.
    assert_eq!(structural_diff(&a, &d), None);
    assert_eq!(text::to_text(&a), text::to_text(&d));
}

proptest::proptest! {
    /// `text::quote` is the one string quoting: whatever a name or a string attribute
    /// holds, the text holds it quoted (or bare, for a plain word) and parses back to it.
    #[test]
    fn quoted_names_and_strings_round_trip(s in r#"\PC*|[-a>"\\\n\r\t\x00-\x1f\x7f-\x9f ]*"#) {
        let mut ir = Ir::new();
        let main = ir.main_graph_id();
        let x = ir.main_graph_mut().add_input(&s, f32i(&[1])).unwrap();
        let title = attrs(&[("title", AttrValue::Str(s.clone()))]);
        ir.create_op(main, "PrintTensor", title, &[(0, x)], "neg").unwrap();
        let t = assert_round_trip(&ir);
        let parsed = parse(&t).unwrap();
        let g = parsed.main_graph();
        proptest::prop_assert_eq!(&g.tensor(g.inputs()[0]).unwrap().name, &s);
        let op = g.op_by_name("neg").unwrap();
        proptest::prop_assert_eq!(op.attrs.str("title"), Some(s.as_str()));
        let quoted = text::quote(&s);
        proptest::prop_assert!(t.contains(&format!("title={quoted}")), "{}", t);
    }
}

/// Issue 34: every registered op type checks its attributes against its
/// declaration, built in code and parsed from text: an unknown key, and a value
/// of the wrong kind for each declared attribute, are `IrError::Attribute`
/// errors naming the op, its type and the attribute.
#[test]
fn every_registered_op_checks_its_attributes() {
    use popart_ir::{registered_ops, AttrError};
    fn text_of(op_type: &str, key: &str, value: &AttrValue) -> String {
        format!(
            "ir num_host_transfers=1 replication_factor=1\n\ngraph main\n  inputs [x]\n  outputs []\n  tensor x act float32[2,3]\n  tensor y act float32[2,3]\n  op o {op_type} {{{key}={value}}} in[0=x] out[0=y]\n"
        )
    }
    // The template parses for a valid op and attribute.
    popart_ir::text::parse(&text_of("Softmax", "axis", &AttrValue::Int(1))).unwrap();
    let ops = registered_ops();
    assert!(ops.len() > 150, "{} op types", ops.len());
    let mut checked_attrs = 0;
    for def in ops {
        let op_type = def.op_type();
        let mut cases = vec![("bogus".to_string(), AttrValue::Int(1), true)];
        for spec in def.attributes() {
            cases.push((spec.example_key(), spec.kind.wrong_value(), false));
            checked_attrs += 1;
        }
        for (key, value, unknown) in cases {
            let matches = |e: &IrError| match e {
                IrError::Attribute { op, op_type: t, error } if op == "o" && t == op_type => match error.as_ref() {
                    AttrError::Unknown { attr, .. } => unknown && *attr == key,
                    AttrError::WrongKind { attr, expected, got } => {
                        !unknown && *attr == key && *got == value && !expected.accepts(&value)
                    }
                    _ => false,
                },
                _ => false,
            };
            let mut ir = Ir::new();
            let main = ir.main_graph_id();
            let x = ir.main_graph_mut().add_input("x", TensorInfo::new(DataType::Float32, [2, 3])).unwrap();
            let err = ir.create_op(main, op_type, attrs(&[(&key, value.clone())]), &[(0, x)], "o").unwrap_err();
            assert!(matches(&err), "{op_type} {key}={value} built in code: {err:?}");
            assert!(err.to_string().contains(&key) && err.to_string().contains(op_type), "{err}");
            let err = popart_ir::text::parse(&text_of(op_type, &key, &value)).unwrap_err();
            assert!(matches(&err), "{op_type} {key}={value} parsed from text: {err:?}");
        }
    }
    assert!(checked_attrs > 200, "{checked_attrs} declared attributes");
}

/// Issue 34: values of the right kind are decoded and validated in one place
/// (missing required attributes, out-of-range values, unknown enum names).
#[test]
fn typed_attributes_refuse_missing_and_out_of_range_values() {
    use popart_ir::ops::all::{Clip, CumSum, NllLoss, Reshape};
    use popart_ir::ops::scan::CumSumAttrs;
    use popart_ir::{AttrError, AttrKind, OpAttrs};
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let x = ir.main_graph_mut().add_input("x", TensorInfo::new(DataType::Float32, [2, 3])).unwrap();
    let ids = ir.main_graph_mut().add_input("ids", TensorInfo::new(DataType::Int32, [2])).unwrap();
    let attr_error = |e: IrError| match e {
        IrError::Attribute { error, .. } => *error,
        e => panic!("{e:?}"),
    };
    let err = ir.create_op(main, &Reshape, Attributes::new(), &[(0, x)], "r").unwrap_err();
    assert_eq!(attr_error(err), AttrError::Missing { attr: "shape".into(), expected: AttrKind::Ints });
    let inverted = attrs(&[("min", AttrValue::Float(2.0)), ("max", AttrValue::Int(1))]);
    let err = attr_error(ir.create_op(main, &Clip, inverted, &[(0, x)], "c").unwrap_err());
    assert!(
        matches!(err, AttrError::OutOfRange { ref attr, got: AttrValue::Float(m), .. } if attr == "max" && m == 1.0)
    );
    let sum = attrs(&[("reduction", AttrValue::Str("total".into()))]);
    let err = attr_error(ir.create_op(main, &NllLoss, sum, &[(0, x), (1, ids)], "l").unwrap_err());
    assert!(matches!(err, AttrError::OutOfRange { ref attr, .. } if attr == "reduction"), "{err:?}");
    assert!(err.to_string().contains("mean sum none"), "{err}");
    // Encode and decode are inverse; defaults are the declaration's.
    let a = CumSumAttrs { axis: 1, exclusive: true, reverse: false };
    let op = ir.create_op(main, &CumSum, a.to_attrs(), &[(0, x)], "cs").unwrap();
    assert_eq!(CumSumAttrs::of(ir.main_graph().op(op).unwrap()).unwrap(), a);
    let defaults = CumSumAttrs { axis: 0, exclusive: false, reverse: false };
    assert_eq!(CumSumAttrs::from_attrs(&Attributes::new()).unwrap(), defaults);
}

/// Replicated variables: a grouped one (two groups of two, stride 2), a
/// sharded one, and one of a non-constant grouping.
fn replicated_ir() -> Ir {
    use popart_ir::{ReplicaGrouping, RetrievalMode, VariableSettings};
    let mut ir = Ir::new();
    ir.replication_factor = 4;
    let main = ir.main_graph_id();
    let var = |ir: &mut Ir, name: &str, shape: &[usize]| {
        let n = shape.iter().product::<usize>();
        let data: Vec<f32> = (0..n).map(|i| i as f32).collect();
        ir.main_graph_mut()
            .add_tensor(name, f32i(shape), TensorKind::Variable(HostTensor::from_f32(shape, &data)))
            .unwrap()
    };
    let grouped = var(&mut ir, "grouped", &[3]);
    let settings = VariableSettings {
        grouping: ReplicaGrouping::new(4, 2, 2).unwrap(),
        retrieval_mode: RetrievalMode::AllReplicas,
        shard_over: None,
        host: HostTensor::from_f32(&[2, 3], &[1.0, 2.0, 3.0, -1.0, -2.0, -3.0]),
    };
    ir.set_variable_settings(grouped, settings).unwrap();
    let sharded = var(&mut ir, "sharded", &[3]);
    let settings = VariableSettings {
        grouping: ReplicaGrouping::new(4, 1, 4).unwrap(),
        retrieval_mode: RetrievalMode::OnePerGroup,
        shard_over: Some(2),
        host: HostTensor::from_f32(&[5], &[0.5, 1.5, 2.5, 3.5, 4.5]),
    };
    ir.set_variable_settings(sharded, settings).unwrap();
    let odd = var(&mut ir, "odd", &[1]);
    let settings = VariableSettings {
        grouping: ReplicaGrouping::from_assignment(4, &[0, 1, 1, 0]).unwrap(),
        retrieval_mode: RetrievalMode::OnePerGroup,
        shard_over: None,
        host: HostTensor::from_f32(&[2, 1], &[7.0, 8.0]),
    };
    ir.set_variable_settings(odd, settings).unwrap();
    let y = ir.create_op(main, "Add", Attributes::new(), &[(0, grouped), (1, sharded)], "add").unwrap();
    let y = out0(&ir, main, y);
    ir.main_graph_mut().add_output(y).unwrap();
    ir.verify().unwrap();
    ir
}

#[test]
fn replica_groupings_and_sharding_round_trip() {
    let ir = replicated_ir();
    let printed = assert_round_trip(&ir);
    assert!(printed.contains("variable_settings grouped groups=[0, 1, 0, 1] retrieval=all_replicas shard_over=none host float32[2,3] = [1.0, 2.0, 3.0, -1.0, -2.0, -3.0]"), "{printed}");
    assert!(
        printed.contains("variable_settings sharded groups=[0, 0, 0, 0] retrieval=one_per_group shard_over=2"),
        "{printed}"
    );
    assert!(printed.contains("variable_settings odd groups=[0, 1, 1, 0]"), "{printed}");
    let back = parse(&printed).unwrap();
    for name in ["grouped", "sharded", "odd"] {
        let t = |ir: &Ir| ir.main_graph().tensor_id(name).unwrap();
        assert_eq!(back.variable_settings(t(&back)), ir.variable_settings(t(&ir)), "{name}");
    }
    // A grouping changed in the text is a structural difference naming the variable.
    let changed = parse(&printed.replace("groups=[0, 1, 0, 1]", "groups=[0, 0, 1, 1]")).unwrap();
    let diff = structural_diff(&ir, &changed).expect("groupings differ");
    assert!(diff.contains("`grouped`"), "{diff}");
    // So is a host value of one group.
    let changed = parse(&printed.replace("-3.0]", "-4.0]")).unwrap();
    assert!(structural_diff(&ir, &changed).is_some());
    // Settings the IR refuses are parse errors naming the line.
    let err = parse(&printed.replace("shard_over=2", "shard_over=3")).unwrap_err();
    assert!(err.to_string().contains("shard_over"), "{err}");
    let err = parse(&printed.replace("groups=[0, 1, 1, 0]", "groups=[0, 1, 1]")).unwrap_err();
    assert!(err.to_string().contains("line"), "{err}");
}
