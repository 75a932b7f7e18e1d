//! The reductions, scans, arg-reductions, top-k, histogram and lamb_square of
//! the PopXL catalogue, run on the `cpu` device against numpy: the expected
//! values in `ops_reduce/expected.rs` are printed by
//! `tests/fixtures/ops_reduce_gen.py` (inputs are multiples of 1/8, exact in
//! every float dtype). Each case runs in each dtype it lists; also float16
//! through the adapter, and the typed errors of bad axes, `k` and levels.

#[rustfmt::skip]
#[allow(clippy::approx_constant)]
mod expected;

use ndarray::{ArrayD, IxDyn};
use popxl::ops::{self, CumSumOptions};
use popxl::{DataType, HostArray, Ir, Tensor};
use popxl_session::{Inputs, Session};

/// One numpy case (fields unused by its op keep their defaults).
pub struct Case {
    pub name: &'static str,
    pub op: &'static str,
    pub shape: &'static [usize],
    pub x: &'static [f64],
    pub out_shape: &'static [usize],
    pub want: &'static [f64],
    /// Second output (indices of median and topk), if any.
    pub want2: &'static [f64],
    pub dtypes: &'static [&'static str],
    pub axes: &'static [i64],
    pub keepdims: bool,
    pub axis: i64,
    pub k: usize,
    pub largest: bool,
    pub sorted: bool,
    pub exclusive: bool,
    pub reverse: bool,
    pub levels: &'static [f64],
    pub absolute: bool,
}

fn dtype(name: &str) -> DataType {
    match name {
        "float16" => DataType::Float16,
        "float32" => DataType::Float32,
        "float64" => DataType::Float64,
        "int32" => DataType::Int32,
        other => panic!("dtype {other}"),
    }
}

/// The op of `c` on `x`: its outputs.
fn apply(c: &Case, x: &Tensor) -> popxl::Result<Vec<Tensor>> {
    let (a, k) = (c.axes, c.keepdims);
    let one = |t: popxl::Result<Tensor>| t.map(|t| vec![t]);
    match c.op {
        "prod" => one(ops::prod(x, a, k)),
        "l1" => one(ops::l1(x, a, k)),
        "l2" => one(ops::l2(x, a, k)),
        "logsum" => one(ops::logsum(x, a, k)),
        "logsumexp" => one(ops::logsumexp(x, a, k)),
        "sumsquare" => one(ops::sumsquare(x, a, k)),
        "median" => {
            // The indices output too (popxl's `median` returns the values only).
            let outs = ops::OpBuilder::new("median", &popart_ir::ops::all::ReduceMedian)
                .input(0, x)
                .attr("axes", popart_ir::AttrValue::Ints(a.to_vec()))
                .attr("keepdims", popart_ir::AttrValue::Bool(k))
                .create_all()?;
            assert_eq!(ops::median(x, a, k)?.shape(), outs[0].shape());
            Ok(outs)
        }
        "cumsum" => {
            let o = CumSumOptions { exclusive: c.exclusive, reverse: c.reverse };
            if o == CumSumOptions::default() {
                one(ops::cumsum(x, c.axis))
            } else {
                one(ops::cumsum_with(x, c.axis, o))
            }
        }
        "argmax" => one(ops::argmax(x, c.axis, k)),
        "argmin" => one(ops::argmin(x, c.axis, k)),
        "topk" => ops::topk(x, c.k, c.axis, c.largest, c.sorted).map(|(v, i)| vec![v, i]),
        "histogram" => one(ops::histogram(x, c.levels, c.absolute)),
        "lamb_square" => one(ops::lamb_square(x)),
        other => panic!("op {other}"),
    }
}

/// Run `f` on `x` (a constant of `dt`) on the cpu device; its outputs as host arrays.
fn run(shape: &[usize], x: &[f64], dt: DataType, f: impl Fn(&Tensor) -> popxl::Result<Vec<Tensor>>) -> Vec<HostArray> {
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let host = HostArray::from(ArrayD::from_shape_vec(IxDyn(shape), x.to_vec()).unwrap());
    let xt = popxl::constant_as(host, dt, "x").unwrap();
    let outs = f(&xt).unwrap();
    let streams: Vec<_> = outs
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let s = popxl::d2h_stream(o.shape(), o.dtype(), &format!("out{i}")).unwrap();
            ops::host_store(&s, o).unwrap();
            s
        })
        .collect();
    drop(g);
    let mut session = Session::new(ir, "cpu").unwrap();
    let mut results = session.scope(|s| s.run(&Inputs::new())).unwrap();
    streams.iter().map(|s| results.remove(s).unwrap()).collect()
}

fn check(name: &str, got: &HostArray, shape: &[usize], want: &[f64], tol: f64) {
    assert_eq!(got.shape(), shape, "{name}: shape");
    for (i, (g, w)) in got.to_f64_vec().iter().zip(want).enumerate() {
        let ok = (g - w).abs() <= tol * (1.0 + w.abs()) || (g == w);
        assert!(ok, "{name}: element {i}: got {g}, want {w}");
    }
}

#[test]
fn numpy_cases_in_every_listed_dtype() {
    let mut runs = 0;
    for c in expected::CASES {
        for &dn in c.dtypes {
            let dt = dtype(dn);
            let name = format!("{} [{dn}]", c.name);
            let outs = run(c.shape, c.x, dt, |x| apply(c, x));
            let tol = match dt {
                DataType::Float32 => 2e-6,
                DataType::Float64 if c.op == "lamb_square" => 2e-6,
                DataType::Float64 => 1e-12,
                _ => 0.0,
            };
            let value_dtype = match c.op {
                "argmax" | "argmin" => DataType::Int32,
                "histogram" => DataType::Uint32,
                "lamb_square" => DataType::Float32,
                _ => dt,
            };
            assert_eq!(outs[0].dtype(), value_dtype, "{name}: output dtype");
            check(&name, &outs[0], c.out_shape, c.want, tol);
            if !c.want2.is_empty() {
                assert_eq!(outs[1].dtype(), DataType::Int32, "{name}: index dtype");
                check(&format!("{name} indices"), &outs[1], c.out_shape, c.want2, 0.0);
            }
            runs += 1;
        }
    }
    assert!(runs > 500, "{runs} runs");
}

#[test]
fn float16_through_the_adapter() {
    // Values exact in float16; results compared at float16 precision.
    for c in expected::CASES.iter().filter(|c| c.dtypes.contains(&"float32") && c.op != "lamb_square") {
        if c.op == "prod" || c.op.starts_with("log") || c.op == "l2" || c.op == "histogram" {
            continue; // rounded intermediate results; covered in float32 and float64
        }
        let outs = run(c.shape, c.x, DataType::Float16, |x| apply(c, x));
        let name = format!("{} [float16]", c.name);
        check(&name, &outs[0], c.out_shape, c.want, 2e-3);
        if !c.want2.is_empty() {
            check(&format!("{name} indices"), &outs[1], c.out_shape, c.want2, 0.0);
        }
    }
}

#[test]
fn nan_inf_and_empty_edge_cases() {
    let f = |shape: &[usize], x: &[f64], op: &dyn Fn(&Tensor) -> popxl::Result<Tensor>| {
        run(shape, x, DataType::Float64, |t| op(t).map(|o| vec![o])).remove(0).to_f64_vec()
    };
    let nan = f64::NAN;
    let (inf, ninf) = (f64::INFINITY, f64::NEG_INFINITY);
    // logsumexp: all -inf gives -inf, +inf gives +inf, NaN propagates.
    let y = f(&[3, 2], &[ninf, ninf, inf, 1.0, nan, 1.0], &|t| ops::logsumexp(t, &[1], false));
    assert_eq!(&y[..2], &[ninf, inf]);
    assert!(y[2].is_nan());
    // argmax/argmin pick the first NaN, as numpy.
    assert_eq!(f(&[4], &[1.0, nan, 3.0, nan], &|t| ops::argmax(t, 0, false)), vec![1.0]);
    assert_eq!(f(&[4], &[1.0, nan, 3.0, nan], &|t| ops::argmin(t, 0, false)), vec![1.0]);
    // Long rows (the vectorised path): infinities, NaN after them, ties across lanes.
    let n = 150;
    let row = |set: &[(usize, f64)]| {
        let mut v: Vec<f64> = (0..n).map(|i| ((i * 37) % 101) as f64 / 10.0).collect();
        for &(i, x) in set {
            v[i] = x;
        }
        v
    };
    for dt in [DataType::Float32, DataType::Float64] {
        let g = |x: &[f64], max: bool| {
            run(&[n], x, dt, |t| if max { ops::argmax(t, 0, false) } else { ops::argmin(t, 0, false) }.map(|o| vec![o]))
                .remove(0)
                .to_f64_vec()
        };
        let first_max = |x: &[f64]| x.iter().enumerate().fold(0, |b, (i, &v)| if v > x[b] { i } else { b }) as f64;
        let first_min = |x: &[f64]| x.iter().enumerate().fold(0, |b, (i, &v)| if v < x[b] { i } else { b }) as f64;
        for x in [
            row(&[]),
            row(&[(40, inf)]),
            row(&[(40, ninf), (90, ninf)]),
            row(&[(40, inf), (70, nan)]),
            row(&[(3, 50.0), (133, 50.0), (140, -50.0), (7, -50.0)]),
            row(&[(149, nan)]),
            // Ties across lanes and blocks of the vectorised pass (blocks of 64, 8 lanes).
            row(&[(70, 50.0), (9, 50.0), (65, 50.0), (71, -50.0), (10, -50.0)]),
            row(&[(64, 60.0), (7, 60.0), (127, -60.0), (56, -60.0)]),
        ] {
            let want = x.iter().position(|v| v.is_nan()).map(|p| p as f64);
            assert_eq!(g(&x, true), vec![want.unwrap_or_else(|| first_max(&x))], "argmax {dt} {x:?}");
            assert_eq!(g(&x, false), vec![want.unwrap_or_else(|| first_min(&x))], "argmin {dt} {x:?}");
        }
    }
    // median of a group with NaN is NaN.
    assert!(f(&[3], &[1.0, nan, 3.0], &|t| ops::median(t, &[], false))[0].is_nan());
    // Reductions with an identity over an empty axis.
    assert_eq!(f(&[2, 0], &[], &|t| ops::prod(t, &[1], false)), vec![1.0, 1.0]);
    assert_eq!(f(&[2, 0], &[], &|t| ops::logsumexp(t, &[1], false)), vec![ninf, ninf]);
    assert_eq!(f(&[2, 0], &[], &|t| ops::l2(t, &[1], false)), vec![0.0, 0.0]);
    // Histogram of NaN: the last bin.
    let h = run(&[3], &[nan, -1.0, 5.0], DataType::Float32, |t| ops::histogram(t, &[0.0, 1.0], false).map(|o| vec![o]));
    assert_eq!(h[0].to_f64_vec(), vec![1.0, 0.0, 2.0]);
}

#[test]
fn large_reductions_match_naive_sums() {
    // Long rows exercise the pairwise folds, the threaded paths and the row accumulation.
    let (r, c) = (300, 1100);
    let x: Vec<f64> = (0..r * c).map(|i| ((i * 7919) % 257) as f64 / 128.0 - 1.0).collect();
    for axis in [0i64, 1] {
        let outs = run(&[r, c], &x, DataType::Float64, |t| {
            Ok(vec![
                ops::l1(t, &[axis], false)?,
                ops::sumsquare(t, &[axis], false)?,
                ops::logsumexp(t, &[axis], false)?,
                ops::cumsum(t, axis)?,
                ops::argmax(t, axis, false)?,
                ops::median(t, &[axis], false)?,
            ])
        });
        let at = |i: usize, j: usize| x[i * c + j];
        let (n, m) = if axis == 0 { (c, r) } else { (r, c) };
        let get = |o: usize, k: usize| if axis == 0 { at(k, o) } else { at(o, k) };
        for o in 0..n {
            let vals: Vec<f64> = (0..m).map(|k| get(o, k)).collect();
            let l1: f64 = vals.iter().map(|v| v.abs()).sum();
            let ss: f64 = vals.iter().map(|v| v * v).sum();
            let mx = vals.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let lse = mx + vals.iter().map(|v| (v - mx).exp()).sum::<f64>().ln();
            let am = vals.iter().position(|&v| v == mx).unwrap();
            let mut sorted = vals.clone();
            sorted.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let med = sorted[(m - 1) / 2];
            assert!((outs[0].to_f64_vec()[o] - l1).abs() < 1e-9 * l1.max(1.0));
            assert!((outs[1].to_f64_vec()[o] - ss).abs() < 1e-9 * ss.max(1.0));
            assert!((outs[2].to_f64_vec()[o] - lse).abs() < 1e-12 * lse.abs().max(1.0));
            assert_eq!(outs[4].to_f64_vec()[o], am as f64);
            assert_eq!(outs[5].to_f64_vec()[o], med);
        }
        let cs = outs[3].to_f64_vec();
        let last = |o: usize| if axis == 0 { cs[(r - 1) * c + o] } else { cs[o * c + c - 1] };
        for o in 0..n {
            let s: f64 = (0..m).map(|k| get(o, k)).sum();
            assert!((last(o) - s).abs() < 1e-9, "cumsum total of lane {o}");
        }
    }
}

#[test]
fn bad_axes_k_and_levels_are_typed_errors() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x = popxl::constant(ndarray::Array2::<f32>::ones((2, 3)), "x").unwrap();
    let xi = popxl::constant(ndarray::Array2::<i32>::ones((2, 3)), "xi").unwrap();
    let empty = popxl::constant(ndarray::Array2::<f32>::ones((2, 0)), "e").unwrap();
    let is_inference = |r: popxl::Result<Tensor>| {
        let e = r.expect_err("must fail");
        // Inference or (typed attribute values, issue 34) attribute errors.
        use popart_ir::IrError;
        assert!(matches!(e, popxl::PopXlError::Ir(IrError::Inference { .. } | IrError::Attribute { .. })), "{e:?}");
    };
    for f in [ops::prod, ops::median, ops::l1, ops::l2, ops::logsum, ops::logsumexp, ops::sumsquare] {
        is_inference(f(&x, &[2], false));
        is_inference(f(&x, &[-3], false));
        is_inference(f(&x, &[1, -1], false));
    }
    // Float-only reductions refuse integers; median has no identity for an empty axis.
    is_inference(ops::l2(&xi, &[], false));
    is_inference(ops::logsum(&xi, &[], false));
    is_inference(ops::logsumexp(&xi, &[], false));
    is_inference(ops::median(&empty, &[1], false));
    is_inference(ops::cumsum(&x, 2));
    is_inference(ops::cumsum(&x, -3));
    is_inference(ops::argmax(&x, 2, false));
    is_inference(ops::argmin(&empty, 1, false));
    is_inference(ops::topk(&x, 4, -1, true, true).map(|(v, _)| v));
    is_inference(ops::topk(&x, 1, 2, true, true).map(|(v, _)| v));
    is_inference(ops::histogram(&x, &[1.0, 0.5], false));
    is_inference(ops::histogram(&x, &[f64::NAN], false));
    is_inference(ops::histogram(&xi, &[1.0], false));
    is_inference(ops::lamb_square(&xi));
    // k = the axis size is fine.
    assert_eq!(ops::topk(&x, 3, -1, false, false).unwrap().0.shape(), &[2, 3]);
}
