//! Which forward tensors each op's gradient graph asks for (issue 32).
//!
//! PopXL code calls a gradient graph with the output gradients plus
//! `GradGraphInfo::inputs_dict`, or, when PopART's grad ops read no forward
//! tensor, with the output gradient alone (`ops.call(dgraph.graph, dy)`). So
//! the forward tensors our gradient graph expects must be the ones PopART's
//! grad ops read (their `gradInputInfo`), never one read for its shape only:
//! gradient ops take such shapes as attributes.
//!
//! One table row per differentiable op: a small graph of the op alone, the
//! forward tensors autodiff's `GradGraphInfo::expected_inputs` lists for it
//! (`in<i>`: graph input `i`; `out`: the graph's output; `aux`: another output
//! of the op, such as top-k's indices or a norm's statistics), and the ones
//! PopART's grad ops read. Ours must equal the row's set and be a subset of
//! PopART's (they differ only where PopART reads more, noted per row). Each
//! row then runs `gradcheck`: the gradient graph is called with the output
//! gradient plus `inputs_dict` and compared to central differences on `cpu`.

use std::collections::HashMap;

use super::harness::*;
use ndarray::{ArrayD, IxDyn};
use popxl::ops::{self, ConvOptions, GatherOptions, GroupedGatherOptions, PoolOptions, ScatterReduceOptions};
use popxl::transforms::{self, ExpectedConnectionType};
use popxl::{HostArray, Ir, Tensor, TensorSpec};

/// One row: op, arguments, function, our forward reads, PopART's.
struct Row {
    name: &'static str,
    args: Vec<Arg>,
    f: Box<Func>,
    ours: &'static [&'static str],
    popart: &'static [&'static str],
}

fn row(
    name: &'static str,
    args: Vec<Arg>,
    f: impl Fn(&[Tensor]) -> popxl::Result<Tensor> + 'static,
    ours: &'static [&'static str],
    popart: &'static [&'static str],
) -> Row {
    Row { name, args, f: Box::new(f), ours, popart }
}

fn int_arg(shape: &[usize], v: Vec<i32>) -> Arg {
    Arg::Fixed(HostArray::from(ArrayD::from_shape_vec(IxDyn(shape), v).expect("index shape")))
}

fn bool_arg(shape: &[usize], v: Vec<bool>) -> Arg {
    Arg::Fixed(HostArray::from(ArrayD::from_shape_vec(IxDyn(shape), v).expect("mask shape")))
}

/// The labels of the forward tensors autodiff's gradient graph of `f` expects.
fn fwd_reads(args: &[Arg], f: &Func) -> Vec<String> {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let specs: Vec<TensorSpec> = args
        .iter()
        .map(|a| match a {
            Arg::Diff(v) => TensorSpec::new(v.shape().to_vec(), popxl::float64),
            Arg::Fixed(h) => TensorSpec::new(h.shape().to_vec(), h.dtype()),
        })
        .collect();
    let graph = ir.create_graph(|ts: Vec<Tensor>| f(&ts), specs).expect("forward graph");
    let inputs = graph.inputs().expect("inputs");
    let out = graph.outputs().expect("outputs")[0].clone();
    let info = transforms::autodiff(&graph, Some(std::slice::from_ref(&out)), None, &HashMap::new(), false)
        .expect("autodiff")
        .grad_info;
    let mut labels: Vec<String> = info
        .expected_inputs()
        .expect("expected inputs")
        .iter()
        .filter(|e| e.connection_type() == ExpectedConnectionType::Fwd)
        .map(|e| match inputs.iter().position(|t| t == e.fwd_tensor()) {
            Some(i) => format!("in{i}"),
            None if e.fwd_tensor() == &out => "out".to_string(),
            None => "aux".to_string(),
        })
        .collect();
    labels.sort();
    labels
}

fn sorted(v: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

fn rows() -> Vec<Row> {
    let mut r = Rng(32);
    let mut u = |shape: &[usize]| r.array(shape, uniform);
    let x23 = u(&[2, 3]);
    let y23 = u(&[2, 3]);
    let pos23 = x23.mapv(|v| v.abs() + 0.5);
    let away = x23.mapv(|v| if v.abs() < 0.2 { v.signum().max(0.0) * 0.4 + 0.2 } else { v });
    let un = |op: UnaryOp| move |t: &[Tensor]| op(&t[0]);
    let bin = |op: BinaryOp| move |t: &[Tensor]| op(&t[0], &t[1]);
    let d = |a: &ArrayD<f64>| Arg::Diff(a.clone());
    let img = u(&[1, 2, 4, 4]);
    let w = u(&[3, 2, 3, 3]);
    vec![
        // Unary: PopART's grad ops read the output (relu exp sqrt tanh sigmoid) or the input.
        row("neg", vec![d(&x23)], un(ops::negate), &[], &[]),
        row("relu", vec![d(&away)], un(ops::relu), &["out"], &["out"]),
        row("exp", vec![d(&x23)], un(ops::exp), &["out"], &["out"]),
        row("sqrt", vec![d(&pos23)], un(ops::sqrt), &["out"], &["out"]),
        row("tanh", vec![d(&x23)], un(ops::tanh), &["out"], &["out"]),
        row("sigmoid", vec![d(&x23)], un(ops::sigmoid), &["out"], &["out"]),
        row("log", vec![d(&pos23)], un(ops::log), &["in0"], &["in0"]),
        row("abs", vec![d(&away)], un(ops::abs), &["in0"], &["in0"]),
        row("sin", vec![d(&x23)], un(ops::sin), &["in0"], &["in0"]),
        row("gelu", vec![d(&x23)], un(ops::gelu), &["in0"], &["in0"]),
        row("identity", vec![d(&x23)], |t| ops::identity(&t[0], "id"), &[], &[]),
        row("clip", vec![d(&x23)], |t| ops::clip(&t[0], Some(-0.5), Some(0.5)), &["out"], &["out"]),
        row("cast", vec![d(&x23)], |t| ops::cast(&t[0], popxl::float64), &[], &[]),
        // Binary: PopART's ElementWiseBinaryGradOp maps in0, in1 and out (its
        // patterns drop the unused ones); Add/Sub reduce the gradient only.
        row("add", vec![d(&x23), d(&y23)], bin(ops::add), &[], &[]),
        row("add (broadcast)", vec![d(&x23), d(&u(&[3]))], bin(ops::add), &[], &[]),
        row("sub", vec![d(&x23), d(&y23)], bin(ops::sub), &[], &[]),
        row("mul", vec![d(&x23), d(&y23)], bin(ops::mul), &["in0", "in1"], &["in0", "in1"]),
        row("div", vec![d(&x23), d(&pos23)], bin(ops::div), &["in0", "in1"], &["in0", "in1", "out"]),
        row("pow", vec![d(&pos23), d(&y23)], bin(ops::pow), &["in0", "in1", "out"], &["in0", "in1", "out"]),
        row(
            "maximum",
            vec![d(&x23), d(&y23)],
            |t| ops::maximum(&[&t[0], &t[1]]),
            &["in0", "in1", "out"],
            &["in0", "in1", "out"],
        ),
        row(
            "select",
            vec![bool_arg(&[2, 3], vec![true, false, true, false, false, true]), d(&x23), d(&y23)],
            |t| ops::select(&t[0], &t[1], &t[2]),
            &["in0"],
            &["in0"],
        ),
        row("matmul", vec![d(&x23), d(&u(&[3, 2]))], bin(ops::matmul), &["in0", "in1"], &["in0", "in1"]),
        // Shape ops: PopART's grad ops keep the forward shape as a member.
        row("reshape", vec![d(&x23)], |t| ops::reshape(&t[0], &[3, 2]), &[], &[]),
        row("squeeze", vec![d(&u(&[2, 1, 3]))], |t| ops::squeeze(&t[0], &[1]), &[], &[]),
        row("transpose", vec![d(&x23)], |t| ops::transpose(&t[0], &[1, 0]), &[], &[]),
        row("slice", vec![d(&u(&[4, 3]))], |t| ops::slice(&t[0], &[1], &[4], &[2], &[0]), &[], &[]),
        row("concat", vec![d(&x23), d(&u(&[1, 3]))], |t| ops::concat(&[&t[0], &t[1]], 0), &[], &[]),
        row("subsample", vec![d(&u(&[4, 3]))], |t| ops::subsample(&t[0], &[2, 2]), &[], &[]),
        // Indexing: the indices are read, the indexed tensor only for its shape.
        row(
            "gather",
            vec![d(&u(&[4, 3])), int_arg(&[3], vec![2, 0, 2])],
            |t| ops::gather(&t[0], &t[1], 0),
            &["in1"],
            &["in1"],
        ),
        row(
            "tied_gather",
            vec![d(&u(&[4, 3])), int_arg(&[2], vec![3, 1])],
            |t| ops::tied_gather(&t[0], &t[1], GatherOptions { axis: 0, ..Default::default() }),
            &["in1"],
            &["in1"],
        ),
        row(
            "groupedgather",
            vec![d(&u(&[2, 3, 2])), int_arg(&[2, 2], vec![0, 2, 1, 1])],
            |t| {
                let o = GroupedGatherOptions { axis: 1, group_size: 2, ..Default::default() };
                ops::groupedgather(&t[0], &t[1], o)
            },
            &["in1"],
            &["in1"],
        ),
        row(
            "dynamic_slice",
            vec![d(&u(&[4, 3])), int_arg(&[1], vec![1])],
            |t| ops::dynamic_slice(&t[0], &t[1], &[0], &[2], true),
            &["in1"],
            &["in1"],
        ),
        row(
            "dynamic_update",
            vec![d(&u(&[4, 3])), int_arg(&[1], vec![2]), d(&u(&[1, 3]))],
            |t| ops::dynamic_update(&t[0], &t[1], &t[2], &[0], &[1], false),
            &["in1"],
            &["in1"],
        ),
        row(
            "scatter",
            vec![d(&u(&[4, 3])), int_arg(&[2, 3], vec![0, 1, 3, 2, 0, 1]), d(&u(&[2, 3]))],
            |t| ops::scatter(&t[0], &t[1], &t[2], 0),
            &["in1"],
            &["in1"],
        ),
        row(
            "scatter_reduce sum",
            vec![d(&u(&[4, 3])), int_arg(&[4], vec![1, 0, 1, 2])],
            |t| {
                ops::scatter_reduce(
                    &t[0],
                    &t[1],
                    "sum",
                    ScatterReduceOptions { axis_size: Some(3), ..Default::default() },
                )
            },
            &["in1"],
            &["in1"],
        ),
        row(
            "scatter_reduce max",
            vec![d(&u(&[4, 3])), int_arg(&[4], vec![1, 0, 1, 2])],
            |t| {
                ops::scatter_reduce(
                    &t[0],
                    &t[1],
                    "max",
                    ScatterReduceOptions { axis_size: Some(3), ..Default::default() },
                )
            },
            &["in0", "in1", "out"],
            &["in0", "in1", "out"],
        ),
        row(
            "onehot",
            vec![int_arg(&[3], vec![0, 2, 1]), d(&u(&[2]))],
            |t| ops::onehot(&t[0], &popxl::constant(3i32, "classes")?, &t[1], -1),
            &["in0"],
            &["in0"],
        ),
        // Reductions: sum and mean read nothing (PopART's ReduceGradOp), the
        // others what their formula needs.
        row("reduce sum", vec![d(&x23)], |t| ops::sum(&t[0], &[1], false), &[], &[]),
        row("reduce mean", vec![d(&x23)], |t| ops::mean(&t[0], &[0], true), &[], &[]),
        row("reduce max", vec![d(&x23)], |t| ops::max(&t[0], &[1], false), &["in0", "out"], &["in0", "out"]),
        row("reduce min", vec![d(&x23)], |t| ops::min(&t[0], &[1], false), &["in0", "out"], &["in0", "out"]),
        row("reduce prod", vec![d(&x23)], |t| ops::prod(&t[0], &[1], false), &["in0"], &["in0"]),
        row("reduce l1", vec![d(&away)], |t| ops::l1(&t[0], &[1], false), &["in0"], &["in0"]),
        row("reduce l2", vec![d(&x23)], |t| ops::l2(&t[0], &[1], false), &["in0", "out"], &["in0", "out"]),
        row("reduce logsum", vec![d(&pos23)], |t| ops::logsum(&t[0], &[1], false), &["out"], &["out"]),
        row(
            "reduce logsumexp",
            vec![d(&x23)],
            |t| ops::logsumexp(&t[0], &[1], false),
            &["in0", "out"],
            &["in0", "out"],
        ),
        row("reduce sumsquare", vec![d(&x23)], |t| ops::sumsquare(&t[0], &[1], false), &["in0"], &["in0"]),
        row("reduce median", vec![d(&x23)], |t| ops::median(&t[0], &[1], false), &["aux"], &["aux"]),
        row("cumsum", vec![d(&x23)], |t| ops::cumsum(&t[0], 1), &[], &[]),
        row("topk", vec![d(&x23)], |t| ops::topk(&t[0], 2, 1, true, true).map(|(v, _)| v), &["aux"], &["aux"]),
        // NN.
        row("softmax", vec![d(&x23)], |t| ops::softmax(&t[0], 1), &["out"], &["out"]),
        row(
            "nll_loss",
            vec![d(&pos23.mapv(|v| v / 3.0)), int_arg(&[2], vec![2, 0])],
            |t| ops::nll_loss(&t[0], &t[1]),
            &["in0", "in1"],
            &["in0", "in1"],
        ),
        row(
            "interpolate",
            vec![d(&u(&[1, 1, 2, 3]))],
            |t| ops::interpolate(&t[0], &ops::InterpolateOptions::default().scale_factor([1.0, 1.0, 2.0, 2.0])),
            &[],
            &[],
        ),
        row(
            "max_pool",
            vec![d(&img)],
            |t| ops::max_pool_with(&t[0], &[2, 2], &PoolOptions::default().stride(vec![2, 2]), ops::StorageOrder::Row),
            &["in0", "out"],
            &["in0", "out"],
        ),
        // PopART's AveragePoolGradOp maps the pooled input and output (poplibs
        // wants them); ours reads the input for its shape only.
        row(
            "average_pool",
            vec![d(&img)],
            |t| ops::average_pool_with(&t[0], &[2, 2], &PoolOptions::default().stride(vec![2, 2])),
            &["in0"],
            &["in0", "out"],
        ),
        row(
            "conv",
            vec![d(&img), d(&w)],
            |t| ops::conv_with(&t[0], &t[1], &ConvOptions::default()),
            &["in0", "in1"],
            &["in0", "in1"],
        ),
        row(
            "group_norm",
            vec![d(&img), d(&u(&[2]).mapv(|v| v.abs() + 0.5)), d(&u(&[2]))],
            |t| ops::group_norm(&t[0], &t[1], &t[2], 2, 1e-3),
            &["aux", "aux", "in0", "in1"],
            &["aux", "aux", "in0", "in1"],
        ),
        row(
            // Training mode; the running statistics are constants. PopART's
            // `BatchNormGradOp` reads x, scale and the saved mean and variance
            // (ours: the saved inverse standard deviation).
            "batch_norm",
            vec![d(&img), d(&u(&[2]).mapv(|v| v.abs() + 0.5)), d(&u(&[2]))],
            |t| {
                let m = popxl::constant_as(vec![0.1f64, -0.2], popxl::float64, "running_mean")?;
                let v = popxl::constant_as(vec![1.5f64, 0.5], popxl::float64, "running_var")?;
                Ok(ops::batch_norm(&t[0], &t[1], &t[2], &m, &v, 1e-3, 0.9)?.y)
            },
            &["aux", "aux", "in0", "in1"],
            &["aux", "aux", "in0", "in1"],
        ),
    ]
}

#[test]
fn gradient_graphs_expect_the_forward_tensors_popart_reads() {
    let mut wrong = Vec::new();
    for (k, row) in rows().into_iter().enumerate() {
        let got = fwd_reads(&row.args, &*row.f);
        let (ours, popart) = (sorted(row.ours), sorted(row.popart));
        assert!(
            ours.iter().all(|t| popart.contains(t)),
            "{}: the table's {ours:?} is not in PopART's {popart:?}",
            row.name
        );
        if got != ours {
            wrong.push(format!("{}: expects {got:?}, the table says {ours:?}", row.name));
            continue;
        }
        if let Err(e) = gradcheck(&row.args, &*row.f, F64, 100 + k as u64) {
            wrong.push(format!("{}: {e}", row.name));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
