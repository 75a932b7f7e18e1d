//! Each `popxl::ops` function creates the op type and attributes of the
//! `popart-ir` catalogue (popart-ir/src/ops/mod.rs), with the expected shapes.

use ndarray::{Array1, Array2, Array3};
use popart_ir::{AttrValue, Attributes};
use popxl::{ops, s, Ir, Tensor};

/// Type, attributes, input tensor names (by index) and output shapes of the
/// last op created in `t`'s graph.
fn last_op(ir: &Ir, graph: &popxl::Graph) -> (String, Attributes, Vec<String>, Vec<Vec<usize>>) {
    ir.with_ir(|core| {
        let g = core.graph(graph.id()).unwrap();
        let op = g.op(*g.ops_in_creation_order().last().unwrap()).unwrap();
        let ins = op.inputs().tensors().map(|t| g.tensor(t).unwrap().name.clone()).collect();
        let outs = op.outputs().tensors().map(|t| g.tensor(t).unwrap().info.shape.clone()).collect();
        (op.op_type().to_string(), op.attrs.clone(), ins, outs)
    })
}

type UnaryFn = fn(&Tensor) -> popxl::Result<Tensor>;
type BinaryFn = fn(&Tensor, &Tensor) -> popxl::Result<Tensor>;

fn ints(v: &[i64]) -> AttrValue {
    AttrValue::Ints(v.to_vec())
}

struct Main {
    ir: Ir,
    _g: popxl::GraphContext,
    x: Tensor,
}

fn main_with_x() -> Main {
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let x = popxl::variable(Array2::<f32>::ones((2, 3)), "x").unwrap();
    Main { ir, _g: g, x }
}

impl Main {
    fn check(&self, op_type: &str, attrs: &[(&str, AttrValue)], inputs: &[&str], outputs: &[&[usize]]) {
        let (ty, a, ins, outs) = last_op(&self.ir, &self.ir.main_graph());
        assert_eq!(ty, op_type);
        let mut expected = Attributes::new();
        for (k, v) in attrs {
            expected.set(k, v.clone());
        }
        assert_eq!(a, expected, "attributes of {op_type}");
        assert_eq!(ins, inputs, "inputs of {op_type}");
        let outputs: Vec<Vec<usize>> = outputs.iter().map(|s| s.to_vec()).collect();
        assert_eq!(outs, outputs, "output shapes of {op_type}");
    }
}

#[test]
fn unary_ops() {
    let m = main_with_x();
    let cases: &[(UnaryFn, &str)] = &[
        (ops::negate, "Neg"),
        (ops::abs, "Abs"),
        (ops::exp, "Exp"),
        (ops::log, "Log"),
        (ops::sqrt, "Sqrt"),
        (ops::relu, "Relu"),
        (ops::gelu, "Gelu"),
        (ops::tanh, "Tanh"),
        (ops::sigmoid, "Sigmoid"),
        (ops::sin, "Sin"),
        (ops::cos, "Cos"),
        (ops::sign, "Sign"),
        (ops::floor, "Floor"),
        (ops::ceil, "Ceil"),
        (ops::detach, "Detach"),
    ];
    for (f, ty) in cases {
        let y = f(&m.x).unwrap();
        m.check(ty, &[], &["x"], &[&[2, 3]]);
        assert_eq!(y.spec(), m.x.spec());
    }
    let y = ops::identity(&m.x, "renamed").unwrap();
    m.check("Identity", &[], &["x"], &[&[2, 3]]);
    assert_eq!(y.name(), "renamed");
    let y = ops::cast(&m.x, popxl::int32).unwrap();
    m.check("Cast", &[("to", AttrValue::DType(popxl::int32))], &["x"], &[&[2, 3]]);
    assert_eq!(y.dtype(), popxl::int32);
}

#[test]
fn binary_ops_broadcast() {
    let m = main_with_x();
    let b = popxl::variable(Array1::<f32>::ones(3), "b").unwrap();
    let cases: &[(BinaryFn, &str)] = &[
        (ops::add, "Add"),
        (ops::sub, "Sub"),
        (ops::mul, "Mul"),
        (ops::div, "Div"),
        (ops::pow, "Pow"),
        (|a, b| ops::maximum(&[a, b]), "Maximum"),
        (|a, b| ops::minimum(&[a, b]), "Minimum"),
        (ops::fmod, "Fmod"),
    ];
    for (f, ty) in cases {
        f(&m.x, &b).unwrap();
        m.check(ty, &[], &["x", "b"], &[&[2, 3]]);
    }
    for (f, ty) in [(ops::greater as BinaryFn, "Greater"), (ops::less, "Less"), (ops::equal, "Equal")] {
        let y = f(&b, &m.x).unwrap();
        m.check(ty, &[], &["b", "x"], &[&[2, 3]]);
        assert_eq!(y.dtype(), popxl::bool);
    }
    let c = popxl::variable(Array1::from(vec![true, false, true]), "c").unwrap();
    ops::select(&c, &m.x, &b).unwrap();
    m.check("Where", &[], &["c", "x", "b"], &[&[2, 3]]);
}

#[test]
fn operators_map_to_binary_ops_and_scalar_constants() {
    let m = main_with_x();
    let y = &m.x * 3;
    m.check("Mul", &[], &["x", "scalar"], &[&[2, 3]]);
    let c = m.ir.main_graph().get_tensor("scalar").unwrap();
    assert_eq!(c.spec(), popxl::TensorSpec::new([], popxl::float32));
    let data = match c.kind().unwrap() {
        popart_ir::TensorKind::Constant(d) => d,
        k => panic!("{k:?}"),
    };
    assert_eq!(data.to_f64_vec(), vec![3.0]);
    let _ = 1.5 - &y;
    m.check("Sub", &[], &["scalar_1", "Mul:0"], &[&[2, 3]]);
    let _ = -&m.x;
    m.check("Neg", &[], &["x"], &[&[2, 3]]);
    let _ = &m.x / &m.x;
    m.check("Div", &[], &["x", "x"], &[&[2, 3]]);
    let mut acc = m.x.clone();
    acc += &y;
    m.check("AddInplace", &[], &["x", "Mul:0"], &[&[2, 3]]);
    // PopXL's `__iadd__` returns `self`: the handle still names `x`.
    assert_eq!(acc, m.x);
    acc += 1.0;
    m.check("AddInplace", &[], &["x", "scalar_2"], &[&[2, 3]]);
    acc += 2;
    m.check("AddInplace", &[], &["x", "scalar_3"], &[&[2, 3]]);
    assert_eq!(acc, m.x);
}

#[test]
fn matmul_reduce_softmax() {
    let m = main_with_x();
    let w = popxl::variable(Array2::<f32>::ones((3, 4)), "w").unwrap();
    m.x.matmul(&w).unwrap();
    m.check("MatMul", &[], &["x", "w"], &[&[2, 4]]);
    for (f, ty) in [
        (ops::sum as fn(&Tensor, &[i64], bool) -> _, "ReduceSum"),
        (ops::mean, "ReduceMean"),
        (ops::max, "ReduceMax"),
        (ops::min, "ReduceMin"),
    ] {
        f(&m.x, &[-1], true).unwrap();
        m.check(ty, &[("axes", ints(&[-1])), ("keepdims", AttrValue::Bool(true))], &["x"], &[&[2, 1]]);
        f(&m.x, &[], false).unwrap();
        m.check(ty, &[("axes", ints(&[])), ("keepdims", AttrValue::Bool(false))], &["x"], &[&[]]);
    }
    ops::softmax(&m.x, 1).unwrap();
    m.check("Softmax", &[("axis", AttrValue::Int(1))], &["x"], &[&[2, 3]]);
}

#[test]
fn nll_losses() {
    let m = main_with_x();
    let labels = popxl::variable(Array1::<i32>::zeros(2), "labels").unwrap();
    ops::nll_loss(&m.x, &labels).unwrap();
    let no_log = ("log_prob", AttrValue::Bool(false));
    m.check("NllLoss", &[("reduction", AttrValue::Str("mean".into())), no_log.clone()], &["x", "labels"], &[&[]]);
    let opts = ops::NllLossOptions { reduction: ops::Reduction::None, ignore_index: Some(-100), log_prob: false };
    ops::nll_loss_with(&m.x, &labels, opts).unwrap();
    m.check(
        "NllLoss",
        &[("reduction", AttrValue::Str("none".into())), ("ignore_index", AttrValue::Int(-100)), no_log.clone()],
        &["x", "labels"],
        &[&[2]],
    );
    let (loss, dlogits) = ops::nll_loss_with_softmax_grad(&m.x, &labels).unwrap();
    m.check(
        "NllLossWithSoftmaxGrad",
        &[("reduction", AttrValue::Str("mean".into())), no_log.clone()],
        &["x", "labels"],
        &[&[], &[2, 3]],
    );
    assert_eq!((loss.rank(), dlogits.shape()), (0, &[2usize, 3][..]));
    let g = popxl::constant(2.0f32, "g").unwrap();
    let sum = ops::NllLossOptions { reduction: ops::Reduction::Sum, ignore_index: None, log_prob: false };
    ops::nll_loss_with_softmax_grad_with(&m.x, &labels, Some(&g), sum).unwrap();
    m.check(
        "NllLossWithSoftmaxGrad",
        &[("reduction", AttrValue::Str("sum".into())), no_log],
        &["x", "labels", "g"],
        &[&[], &[2, 3]],
    );
}

#[test]
fn shape_ops() {
    let m = main_with_x();
    m.x.reshape(&[3, -1]).unwrap();
    m.check("Reshape", &[("shape", ints(&[3, -1]))], &["x"], &[&[3, 2]]);
    m.x.flatten().unwrap();
    m.check("Reshape", &[("shape", ints(&[-1]))], &["x"], &[&[6]]);
    m.x.t().unwrap();
    m.check("Transpose", &[("perm", ints(&[]))], &["x"], &[&[3, 2]]);
    m.x.transpose(&[1, 0]).unwrap();
    m.check("Transpose", &[("perm", ints(&[1, 0]))], &["x"], &[&[3, 2]]);
    ops::slice(&m.x, &[1], &[3], &[], &[1]).unwrap();
    m.check(
        "Slice",
        &[("starts", ints(&[1])), ("ends", ints(&[3])), ("steps", ints(&[1])), ("axes", ints(&[1]))],
        &["x"],
        &[&[2, 2]],
    );
    let y = popxl::variable(Array2::<f32>::ones((1, 3)), "y").unwrap();
    ops::concat(&[&m.x, &y, &m.x], 0).unwrap();
    m.check("Concat", &[("axis", AttrValue::Int(0))], &["x", "y", "x"], &[&[5, 3]]);
    ops::squeeze(&y, &[]).unwrap();
    m.check("Squeeze", &[("axes", ints(&[]))], &["y"], &[&[3]]);
    let idx = popxl::variable(Array1::<i32>::zeros(4), "idx").unwrap();
    ops::gather(&m.x, &idx, 1).unwrap();
    m.check("Gather", &[("axis", AttrValue::Int(1)), ("zero_OOR", AttrValue::Bool(false))], &["x", "idx"], &[&[2, 4]]);
}

#[test]
fn indexing_is_slice_then_squeeze() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let a = popxl::variable(Array3::<f32>::zeros((4, 5, 6)), "a").unwrap();
    let main = ir.main_graph();
    let n0 = main.num_ops().unwrap();
    // a[1, 1..3] -> Slice(axes 0, 1) + Squeeze(axis 0)
    let y = a.index(&s![1, 1..3]).unwrap();
    assert_eq!(y.shape(), &[2, 6]);
    assert_eq!(main.num_ops().unwrap(), n0 + 2);
    let (ty, attrs, _, outs) = last_op(&ir, &main);
    assert_eq!((ty.as_str(), outs), ("Squeeze", vec![vec![2, 6]]));
    assert_eq!(attrs.ints("axes"), Some(&[0i64][..]));
    // Full ranges only: no op.
    assert_eq!(a.index(&s![.., ..]).unwrap(), a);
    // Negative index and reversed range with a step: a[-1, ::-2] has 3 columns... of axis 1 (5 -> 3).
    let y = a.index(&s![-1, popxl::SliceIndex::from(..).step(-2)]).unwrap();
    assert_eq!(y.shape(), &[3, 6]);
    // Inclusive ranges and open ends.
    assert_eq!(a.index(&s![1..=2, 3..]).unwrap().shape(), &[2, 2, 6]);
    assert_eq!(a.index(&s![..=-1, ..2]).unwrap().shape(), &[4, 2, 6]);
}

#[test]
fn in_place_updates_alias_input_zero() {
    let m = main_with_x();
    let g = popxl::constant(Array2::<f32>::ones((2, 3)), "g").unwrap();
    let f = popxl::constant(0.5f32, "f").unwrap();
    ops::add_(&m.x, &g).unwrap();
    m.check("AddInplace", &[], &["x", "g"], &[&[2, 3]]);
    ops::accumulate_(&m.x, &g, 0.25).unwrap();
    m.check("Accumulate", &[("factor", AttrValue::Float(0.25))], &["x", "g"], &[&[2, 3]]);
    ops::accumulate_(&m.x, &g, &f).unwrap();
    m.check("Accumulate", &[], &["x", "g", "f"], &[&[2, 3]]);
    ops::scaled_add_(&m.x, &g, 1.0, -0.01).unwrap();
    m.check(
        "ScaledAddInplace",
        &[("a", AttrValue::Float(1.0)), ("b", AttrValue::Float(-0.01))],
        &["x", "g"],
        &[&[2, 3]],
    );
    ops::scaled_add_(&m.x, &g, &f, 2.0).unwrap();
    m.check("ScaledAddInplace", &[("b", AttrValue::Float(2.0))], &["x", "g", "f"], &[&[2, 3]]);
    ops::copy_var_update_(&m.x, &g).unwrap();
    m.check("CopyVarUpdate", &[], &["x", "g"], &[&[2, 3]]);
    let modified = m.ir.with_ir(|core| {
        let g = core.main_graph();
        let last = *g.ops_in_creation_order().last().unwrap();
        g.op(last).unwrap().modified_inputs()
    });
    assert_eq!(modified, vec![0]);
}

#[test]
fn random_ops_take_an_explicit_seed() {
    let m = main_with_x();
    let seed = popxl::variable(Array1::<u32>::from(vec![0, 7]), "seed").unwrap();
    ops::random_uniform(&seed, &[2, 2], -1.0, 1.0, popxl::float32).unwrap();
    m.check(
        "RandomUniform",
        &[
            ("shape", ints(&[2, 2])),
            ("dtype", AttrValue::DType(popxl::float32)),
            ("low", AttrValue::Float(-1.0)),
            ("high", AttrValue::Float(1.0)),
        ],
        &["seed"],
        &[&[2, 2]],
    );
    ops::random_normal(&seed, &[3], 0.0, 0.02, popxl::float16).unwrap();
    m.check(
        "RandomNormal",
        &[
            ("shape", ints(&[3])),
            ("dtype", AttrValue::DType(popxl::float16)),
            ("mean", AttrValue::Float(0.0)),
            ("std", AttrValue::Float(0.02)),
        ],
        &["seed"],
        &[&[3]],
    );
    ops::dropout(&m.x, &seed, 0.5).unwrap();
    m.check("Dropout", &[("p", AttrValue::Float(0.5))], &["x", "seed"], &[&[2, 3]]);
    // A seed that is not uint32[2] is rejected by shape inference.
    assert!(ops::dropout(&m.x, &m.x, 0.5).is_err());
}

#[test]
fn host_io() {
    let m = main_with_x();
    let input = popxl::h2d_stream([2, 3], popxl::float32, "input").unwrap();
    let loaded = ops::host_load(&input, "loaded").unwrap();
    m.check("HostLoad", &[("stream", AttrValue::Str("input".into()))], &[], &[&[2, 3]]);
    assert_eq!(loaded.name(), "loaded");
    let out = popxl::d2h_stream([2, 3], popxl::float32, "out").unwrap();
    ops::host_store(&out, &loaded).unwrap();
    m.check("HostStore", &[("stream", AttrValue::Str("out".into()))], &["loaded"], &[]);
    assert_eq!(m.ir.h2d_streams(), vec![input]);
    assert_eq!(m.ir.d2h_streams(), vec![out]);
}

#[test]
fn conditional_deduplicates_parent_inputs() {
    let ir = Ir::new();
    let main = ir.main_graph();
    let _g = main.enter();
    let x = popxl::variable(Array1::<f32>::ones(2), "x").unwrap();
    let y = popxl::variable(Array1::<f32>::ones(2), "y").unwrap();
    let c = popxl::variable(true, "c").unwrap();
    let then_g = ir.create_graph_named("then", |a: Tensor, b: Tensor| &a - &b, (&x, &y)).unwrap();
    let else_g = ir.create_graph_named("else", |a: Tensor| -a, &y).unwrap();
    let out =
        ops::conditional_branches(&c, ops::Branch::new(&then_g, &[&x, &y]), ops::Branch::new(&else_g, &[&y])).unwrap();
    assert_eq!(out[0].shape(), &[2]);
    let (ty, attrs, ins, _) = last_op(&ir, &main);
    assert_eq!(ty, "If");
    assert_eq!(ins, ["c", "x", "y"]);
    assert_eq!(attrs.ints("then_inputs"), Some(&[1i64, 2][..]));
    assert_eq!(attrs.ints("else_inputs"), Some(&[2i64][..]));
    assert_eq!(attrs.graph("then_graph"), Some(then_g.id()));
    assert_eq!(attrs.graph("else_graph"), Some(else_g.id()));
    ir.with_ir(|core| core.verify()).unwrap();
}
