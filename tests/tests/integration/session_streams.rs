//! Host streams: `num_host_transfers`, host arrays shaped
//! `[num_host_transfers, replication_factor, *shape]` (size-1 dims dropped), host
//! loads and stores inside repeats, and unevenly used streams wrapping around.

use ndarray::{s, Array1, Array2, Array3, ArrayD, IxDyn};
use popxl::{ops, DeviceToHostStream, HostArray, HostToDeviceStream, Ir, Module, Tensor};
use popxl_session::{Inputs, Outputs, Session, SessionError};

/// The `Linear` module of repeat_graph_2.py: loads `x` from a stream, computes
/// `x @ W + b` and stores it, every iteration.
struct StreamingLinear {
    x_h2d: HostToDeviceStream,
    y_d2h: DeviceToHostStream,
    w: Option<Tensor>,
    b: Option<Tensor>,
}

impl Module for StreamingLinear {
    type Inputs = Tensor;
    type Outputs = Tensor;
    fn build(&mut self, _carried: Tensor) -> popxl::Result<Tensor> {
        let x = ops::host_load(&self.x_h2d, "x")?;
        let w = popxl::graph_input([x.shape()[1], 2], popxl::float32, "W")?;
        let b = popxl::graph_input([2], popxl::float32, "b")?;
        let y = ops::add(&x.matmul(&w)?, &b)?;
        ops::host_store(&self.y_d2h, &y)?;
        self.w = Some(w);
        self.b = Some(b);
        Ok(y)
    }
}

#[test]
fn repeat_graph_2_host_load_and_store_inside_a_repeat() {
    const REPEATS: usize = 8;
    let ir = Ir::new();
    let (x_h2d, y_d2h, w_data, b_data) = {
        let _g = ir.main_graph().enter();
        let x_h2d = popxl::h2d_stream([2, 2], popxl::float32, "x_stream").unwrap();
        let y_d2h = popxl::d2h_stream([2, 2], popxl::float32, "y_stream").unwrap();
        let w_data = ndarray::array![[1.0f32, -2.0], [0.5, 3.0]];
        let b_data = ndarray::array![0.25f32, -1.0];
        let w = popxl::variable(w_data.clone(), "W").unwrap();
        let b = popxl::variable(b_data.clone(), "b").unwrap();
        let x = popxl::constant(Array2::<f32>::zeros((2, 2)), "init").unwrap();
        let mut linear = StreamingLinear { x_h2d: x_h2d.clone(), y_d2h: y_d2h.clone(), w: None, b: None };
        let graph = ir.create_graph(&mut linear, &x).unwrap();
        let (gw, gb) = (linear.w.clone().unwrap(), linear.b.clone().unwrap());
        ops::repeat(&graph, REPEATS, &[&x], &[(&gw, &w), (&gb, &b)]).unwrap();
        (x_h2d, y_d2h, w_data, b_data)
    };
    ir.set_num_host_transfers(REPEATS).unwrap();
    let x_data = Array3::from_shape_fn((REPEATS, 2, 2), |(i, j, k)| (i as f32) * 0.5 - (j as f32) + 0.25 * k as f32);
    let mut session = Session::new(ir, "ipu_model").unwrap();
    let outputs = session.scope(|s| s.run(&[(x_h2d, HostArray::from(x_data.clone()))].into())).unwrap();
    let y = outputs[&y_d2h].as_f32().unwrap();
    assert_eq!(y.shape(), &[REPEATS, 2, 2]);
    for i in 0..REPEATS {
        for r in 0..2 {
            for c in 0..2 {
                let want = x_data[[i, r, 0]] * w_data[[0, c]] + x_data[[i, r, 1]] * w_data[[1, c]] + b_data[c];
                assert!((y[[i, r, c]] - want).abs() < 1e-5, "transfer {i}: {} vs {want}", y[[i, r, c]]);
            }
        }
    }
}

/// Main graph: `repeat(count_a) { acc_a += load(a) }`, `repeat(count_b) { acc_b += load(b) }`,
/// then store both sums; the first loop also stores its running sum each iteration.
struct Uneven {
    ir: Ir,
    a: HostToDeviceStream,
    b: HostToDeviceStream,
    sum_a: DeviceToHostStream,
    sum_b: DeviceToHostStream,
    seen_a: DeviceToHostStream,
}

fn uneven(count_a: usize, count_b: usize, nht: usize) -> Uneven {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let a = popxl::h2d_stream([], popxl::float32, "a").unwrap();
    let b = popxl::h2d_stream([], popxl::float32, "b").unwrap();
    let seen_a = popxl::d2h_stream([], popxl::float32, "seen_a").unwrap();
    let sum_a = popxl::d2h_stream([], popxl::float32, "sum_a").unwrap();
    let sum_b = popxl::d2h_stream([], popxl::float32, "sum_b").unwrap();
    let zero = popxl::constant(0.0f32, "zero").unwrap();
    let (sa, sb) = (a.clone(), b.clone());
    let seen = seen_a.clone();
    let body_a = ir
        .create_graph(
            move |acc: Tensor| -> popxl::Result<Tensor> {
                let x = ops::host_load(&sa, "x")?;
                let sum = ops::add(&acc, &x)?;
                ops::host_store(&seen, &sum)?;
                Ok(sum)
            },
            &zero,
        )
        .unwrap();
    let body_b = ir
        .create_graph(move |acc: Tensor| -> popxl::Result<Tensor> { ops::add(&acc, &ops::host_load(&sb, "x")?) }, &zero)
        .unwrap();
    let ra = ops::repeat(&body_a, count_a, &[&zero], &[]).unwrap().remove(0);
    let rb = ops::repeat(&body_b, count_b, &[&zero], &[]).unwrap().remove(0);
    ops::host_store(&sum_a, &ra).unwrap();
    ops::host_store(&sum_b, &rb).unwrap();
    drop(_g);
    ir.set_num_host_transfers(nht).unwrap();
    Uneven { ir, a, b, sum_a, sum_b, seen_a }
}

#[test]
fn streams_used_fewer_times_than_num_host_transfers_take_the_first_elements() {
    // a is loaded 3 times, b 5 times; 5 transfers per run.
    let u = uneven(3, 5, 5);
    let a = Array1::from(vec![1.0f32, 2.0, 4.0, 8.0, 16.0]);
    let b = Array1::from(vec![100.0f32, 200.0, 400.0, 800.0, 1600.0]);
    let mut session = Session::new(u.ir, "cpu").unwrap();
    let inputs: Inputs = [(u.a, HostArray::from(a)), (u.b, HostArray::from(b))].into();
    let mut s = session.enter().unwrap();
    for _ in 0..2 {
        // Each run starts from element 0 again: data is per run.
        let out = s.run(&inputs).unwrap();
        assert_eq!(out[&u.sum_a].shape(), &[5]);
        assert_eq!(scalar_at(&out, &u.sum_a, 0), 1.0 + 2.0 + 4.0);
        assert_eq!(scalar_at(&out, &u.sum_b, 0), 3100.0);
        // `seen_a` was pushed 3 times: elements 0..3 written, the rest untouched (zero).
        assert_eq!(out[&u.seen_a].to_f64_vec(), vec![1.0, 3.0, 7.0, 0.0, 0.0]);
    }
}

fn scalar_at(outputs: &Outputs, s: &DeviceToHostStream, i: usize) -> f32 {
    outputs[s].as_f32().unwrap()[[i]]
}

#[test]
fn streams_used_more_times_than_num_host_transfers_wrap_around() {
    // a is loaded 6 times with 4 transfers: elements 0, 1, 2, 3, 0, 1.
    let u = uneven(6, 1, 4);
    let a = Array1::from(vec![1.0f32, 10.0, 100.0, 1000.0]);
    let b = Array1::from(vec![7.0f32, 0.0, 0.0, 0.0]);
    let mut session = Session::new(u.ir, "cpu").unwrap();
    let out = session.scope(|s| s.run(&[(u.a, HostArray::from(a)), (u.b, HostArray::from(b))].into())).unwrap();
    assert_eq!(scalar_at(&out, &u.sum_a, 0), 1111.0 + 11.0);
    assert_eq!(scalar_at(&out, &u.sum_b, 0), 7.0);
    // seen_a: six pushes of the running sum into four elements: the last two
    // (1112, 1122) overwrite elements 0 and 1.
    assert_eq!(out[&u.seen_a].to_f64_vec(), vec![1112.0, 1122.0, 111.0, 1111.0]);
}

#[test]
fn host_array_shapes_follow_num_host_transfers() {
    let u = uneven(1, 1, 1);
    let session = Session::new(u.ir, "cpu").unwrap();
    let outs = session.create_host_outputs().unwrap();
    assert_eq!(outs[&u.sum_a].shape(), &[] as &[usize]);
    assert_eq!(session.host_shape(&[3, 4]), vec![3, 4]);
    let u = uneven(1, 1, 3);
    let session = Session::new(u.ir, "cpu").unwrap();
    assert_eq!(session.create_host_outputs().unwrap()[&u.sum_a].shape(), &[3]);
    assert_eq!(session.host_shape(&[3, 4]), vec![3, 3, 4]);
}

#[test]
fn num_host_transfers_dimension_must_be_large_enough() {
    let u = uneven(2, 2, 4);
    let mut session = Session::new(u.ir, "cpu").unwrap();
    let mut s = session.enter().unwrap();
    let short = HostArray::from(Array1::from(vec![1.0f32, 2.0, 3.0]));
    let ok = HostArray::from(Array1::from(vec![1.0f32; 4]));
    let err = s.run(&[(u.a.clone(), short), (u.b.clone(), ok.clone())].into()).unwrap_err();
    assert_eq!(
        err,
        SessionError::TooFewHostTransfers { role: "input", stream: "a".into(), got: 3, num_host_transfers: 4 }
    );
    // More than num_host_transfers elements: accepted, the first ones are used.
    let long = HostArray::from(Array1::from(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]));
    let out = s.run(&[(u.a, long), (u.b, ok)].into()).unwrap();
    assert_eq!(scalar_at(&out, &u.sum_a, 0), 3.0);
}

#[test]
fn size_one_dims_are_dropped_and_scalar_like_arrays_are_accepted() {
    // A stream of shape [1] with one transfer accepts [1] and [] arrays (PopXL's squeeze rule).
    let ir = Ir::new();
    let (x, out) = {
        let _g = ir.main_graph().enter();
        let x = popxl::h2d_stream([1], popxl::float32, "x").unwrap();
        let out = popxl::d2h_stream([1], popxl::float32, "y").unwrap();
        ops::host_store(&out, &ops::negate(&ops::host_load(&x, "x").unwrap()).unwrap()).unwrap();
        (x, out)
    };
    let mut session = Session::new(ir, "cpu").unwrap();
    let mut s = session.enter().unwrap();
    for arr in [HostArray::from(vec![2.0f32]), HostArray::from(2.0f32)] {
        let y = s.run(&[(x.clone(), arr)].into()).unwrap();
        assert_eq!(y[&out], HostArray::from(vec![-2.0f32]));
    }
    assert!(matches!(
        s.run(&[(x, HostArray::from(vec![1.0f32, 2.0]))].into()),
        Err(SessionError::StreamShapeMismatch { .. })
    ));
}

#[test]
fn run_with_outputs_writes_into_given_arrays_of_any_layout() {
    let ir = Ir::new();
    let (x, out) = {
        let _g = ir.main_graph().enter();
        let x = popxl::h2d_stream([2, 3], popxl::float32, "x").unwrap();
        let out = popxl::d2h_stream([3, 2], popxl::float32, "y").unwrap();
        let t = ops::transpose(&ops::host_load(&x, "x").unwrap(), &[1, 0]).unwrap();
        ops::host_store(&out, &t).unwrap();
        (x, out)
    };
    let data = Array2::from_shape_fn((2, 3), |(i, j)| (10 * i + j) as f32);
    let mut session = Session::new(ir, "cpu").unwrap();
    let mut s = session.enter().unwrap();
    // A non-standard-layout output array (a transposed view of a 2x3 array).
    let target = HostArray::F32(ArrayD::from_elem(IxDyn(&[2, 3]), -1.0f32).reversed_axes());
    let mut outputs: Outputs = [(out.clone(), target)].into();
    // Input given as a transposed (non-standard) array too.
    let input = HostArray::F32(data.t().to_owned().reversed_axes().into_dyn());
    s.run_with_outputs(&[(x.clone(), input)].into(), &mut outputs).unwrap();
    let y = outputs[&out].as_f32().unwrap();
    assert_eq!(y.shape(), &[3, 2]);
    assert_eq!(y.slice(s![.., 0]).to_vec(), vec![0.0, 1.0, 2.0]);
    assert_eq!(y.slice(s![.., 1]).to_vec(), vec![10.0, 11.0, 12.0]);
}
