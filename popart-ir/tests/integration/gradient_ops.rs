//! Gradient op types: a unary op's gradient is an op type of its own that knows
//! its forward op by type; no attribute names an op type.

use popart_ir::ops::all::{BinaryGrad, Exp, ExpGrad, ReduceGrad, Relu, ReluGrad, Sin, SinGrad};
use popart_ir::ops::grad::{UnaryGradOp, X, Y};
use popart_ir::ops::unary::DERIVATIVES;
use popart_ir::{
    lookup_op, registered_ops, AttrValue, Attributes, DataType, GradContext, GradRule, GradSource, Ir, IrError,
    OpDefId, TensorInfo,
};

/// The unary ops whose PopART gradient op reads the forward output (`ReluGradOp`,
/// `ExpGradOp`, `SqrtGradOp`, `TanhGradOp`, `SigmoidGradOp`); every other
/// differentiable unary op's reads the input.
const READS_OUTPUT: &[&str] = &["Exp", "Sqrt", "Relu", "Tanh", "Sigmoid"];

#[test]
fn each_unary_derivative_is_an_op_type_reading_the_declared_tensor() {
    assert_eq!(DERIVATIVES.len(), 14);
    for (fwd, grad) in DERIVATIVES {
        let name = fwd.op_type();
        assert_eq!(grad.op_type(), format!("{name}Grad"));
        assert_eq!(lookup_op(grad.op_type()).unwrap().id(), grad.id(), "{name}: registered");
        let mut ir = Ir::new();
        let main = ir.main_graph_id();
        let x = ir.main_graph_mut().add_input("x", TensorInfo::new(DataType::Float32, [3])).unwrap();
        let op = ir.create_op(main, *fwd, Attributes::new(), &[(0, x)], "f").unwrap();
        let GradRule::Ops(specs) = fwd.grad(&GradContext::new(ir.main_graph().op(op).unwrap(), ir.main_graph())) else {
            panic!("{name}: no grad ops")
        };
        assert_eq!(specs.len(), 1);
        let want = if READS_OUTPUT.contains(&name) { GradSource::FwdOutput(0) } else { GradSource::FwdInput(0) };
        assert_eq!(specs[0].op.id(), grad.id(), "{name}");
        assert!(specs[0].attrs.is_empty(), "{name}: attributes {:?}", specs[0].attrs);
        assert_eq!(specs[0].inputs, [(0, GradSource::GradOfOutput(0)), (1, want)], "{name}");
    }
}

/// A rule builds its grad op's typed attributes: the forward op's, decoded
/// (defaults included), and the forward input's shape from the context.
#[test]
fn gradient_rules_build_typed_attributes_with_shapes_from_the_context() {
    use popart_ir::ops::grad::{ReduceGradAttrs, ReduceKind, SliceGradAttrs};
    use popart_ir::ops::reduce::ReduceMean;
    use popart_ir::ops::shape::Slice;
    use popart_ir::{OpAttrs, OpDef};
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let x = ir.main_graph_mut().add_input("x", TensorInfo::new(DataType::Float32, [2, 5, 3])).unwrap();
    let axes = Attributes::new().with("axes", AttrValue::Ints(vec![1]));
    let mean = ir.create_op(main, &ReduceMean, axes, &[(0, x)], "mean").unwrap();
    let g = ir.main_graph();
    let GradRule::Ops(specs) = ReduceMean.grad(&GradContext::new(g.op(mean).unwrap(), g)) else { panic!("no grad") };
    let want = ReduceGradAttrs { reduction: ReduceKind::Mean, axes: vec![1], keepdims: false, shape: vec![2, 5, 3] };
    assert_eq!(ReduceGradAttrs::from_attrs(&specs[0].attrs).unwrap(), want);
    assert_eq!(specs[0].inputs, [(0, GradSource::GradOfOutput(0))], "the shape is no input");

    let bounds = Attributes::new().with("starts", AttrValue::Ints(vec![1])).with("ends", AttrValue::Ints(vec![4]));
    let slice = ir.create_op(main, &Slice, bounds.with("axes", AttrValue::Ints(vec![1])), &[(0, x)], "s").unwrap();
    let g = ir.main_graph();
    let GradRule::Ops(specs) = Slice.grad(&GradContext::new(g.op(slice).unwrap(), g)) else { panic!("no grad") };
    let got = SliceGradAttrs::from_attrs(&specs[0].attrs).unwrap();
    assert_eq!((got.axes, got.shape), (Some(vec![1]), vec![2, 5, 3]));
}

#[test]
fn gradient_ops_know_their_forward_op_by_type() {
    assert_eq!(<ReluGrad as UnaryGradOp>::fwd_id(), OpDefId::of::<Relu>());
    assert_eq!(<ExpGrad as UnaryGradOp>::fwd_id(), OpDefId::of::<Exp>());
    assert_eq!(<SinGrad as UnaryGradOp>::fwd_id(), OpDefId::of::<Sin>());
    // The declared tensor, as a type: Relu's gradient reads y, Sin's x.
    let popart_ir::ops::grad::Y(y) = popart_ir::ops::grad::fwd_value::<Relu, i32>(1);
    let X(x) = popart_ir::ops::grad::fwd_value::<Sin, i32>(2);
    assert_eq!((y, x), (1, 2));
    let _: Y<()> = Y(());
}

#[test]
fn no_attribute_names_an_op_type() {
    for def in registered_ops() {
        assert!(def.attributes().iter().all(|a| a.name != "func"), "{} declares `func`", def.op_type());
    }
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let f = |ir: &mut Ir, n: &str| ir.main_graph_mut().add_input(n, TensorInfo::new(DataType::Float32, [2])).unwrap();
    let (g, a, b) = (f(&mut ir, "g"), f(&mut ir, "a"), f(&mut ir, "b"));
    // The old op-name attribute is unknown; a name that is no derivative is refused.
    let old = Attributes::new().with("func", AttrValue::Str("div_rhs".into()));
    let err = ir.create_op(main, &BinaryGrad, old, &[(0, g), (1, a), (2, b)], "old").unwrap_err();
    assert!(matches!(err, IrError::Attribute { .. }), "{err}");
    let named = Attributes::new().with("derivative", AttrValue::Str("Div".into()));
    let err = ir.create_op(main, &BinaryGrad, named, &[(0, g), (1, a), (2, b)], "named").unwrap_err();
    assert!(matches!(err, IrError::Attribute { .. }), "{err}");
    let ok = Attributes::new().with("derivative", AttrValue::Str("div_rhs".into()));
    ir.create_op(main, &BinaryGrad, ok, &[(0, g), (1, a), (2, b)], "ok").unwrap();
    let reduce =
        |r: &str| Attributes::new().with("reduction", AttrValue::Str(r.into())).with("shape", AttrValue::Ints(vec![2]));
    let err = ir.create_op(main, &ReduceGrad, reduce("ReduceSum"), &[(0, g)], "r").unwrap_err();
    assert!(matches!(err, IrError::Attribute { .. }), "{err}");
    let s = ir.main_graph_mut().add_input("s", TensorInfo::new(DataType::Float32, Vec::<usize>::new())).unwrap();
    ir.create_op(main, &ReduceGrad, reduce("sum"), &[(0, s)], "r").unwrap();
    // A unary gradient op takes exactly (g, forward tensor).
    assert!(ir.create_op(main, &ReluGrad, Attributes::new(), &[(0, g), (2, a)], "r2").is_err());
    ir.create_op(main, &ReluGrad, Attributes::new(), &[(0, g), (1, a)], "r3").unwrap();
}
