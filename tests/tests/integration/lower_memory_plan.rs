//! The memory plan of `popart-lower`: reuse across lifetimes, in-place aliasing,
//! views lowered to buffer sharing, determinism, and a randomized differential test:
//! random IRs with nested calls, repeats, in-place updates, views and host IO run on
//! the cpu device must match an independent reference interpreter exactly (a wrong
//! reuse, a wrongly shared view or a missing copy corrupts values). Plans that read
//! best as the lowered program's text (a chain reusing two buffers, in-place outputs
//! and permanent variables, a view chain across a call) are filetests in
//! `tests/filetests/lower/`.

use std::collections::HashMap;

use popart_ir::{
    AttrValue, Attributes, DataType, GraphId, HostTensor, Ir, OpId, StreamDirection, TensorId, TensorInfo, TensorKind,
};
use popxl::HostArray;
use popxl_session::Session;

const N: usize = 4;

fn vec4() -> TensorInfo {
    TensorInfo::new(DataType::Float32, [N])
}

fn out(ir: &Ir, g: GraphId, op: OpId) -> TensorId {
    ir.graph(g).unwrap().op(op).unwrap().output(0).unwrap()
}

fn stream_attrs(name: &str) -> Attributes {
    Attributes::new().with("stream", AttrValue::Str(name.into()))
}

#[test]
fn lowering_is_deterministic() {
    for seed in 0..8 {
        let a = random_model(seed);
        let b = random_model(seed);
        assert_eq!(popart_lower::lower(&a.ir).unwrap().dump(), popart_lower::lower(&b.ir).unwrap().dump());
    }
}

/// Runs `ir` once on the cpu device with `data` for every host-to-device stream
/// (all f32) and returns every device-to-host stream's values by name.
fn run_on_cpu(ir: &Ir, data: &[(&str, Vec<f32>)]) -> HashMap<String, Vec<f64>> {
    let ir = popxl::Ir::from_ir(ir.clone());
    let mut session = Session::new(ir.clone(), "cpu").unwrap();
    let mut inputs = popxl_session::Inputs::new();
    for s in session.expected_inputs() {
        let (_, v) = data.iter().find(|(n, _)| *n == s.name()).expect("data for every input stream");
        inputs.insert(s, HostArray::from(v.clone()));
    }
    let outputs = session.scope(|s| s.run(&inputs)).unwrap();
    ir.d2h_streams().into_iter().map(|s| (s.name().to_string(), outputs[&s].to_f64_vec())).collect()
}

fn add_stream(ir: &mut Ir, name: &str, shape: &[usize], direction: StreamDirection) {
    let info = TensorInfo::new(DataType::Float32, shape);
    ir.main_graph_mut().add_tensor(name, info, TensorKind::Stream(direction)).unwrap();
}

fn op1(ir: &mut Ir, g: GraphId, ty: &str, attrs: Attributes, inputs: &[TensorId], name: &str) -> (OpId, TensorId) {
    let ins: Vec<(u32, TensorId)> = inputs.iter().enumerate().map(|(i, &t)| (i as u32, t)).collect();
    let op = ir.create_op(g, ty, attrs, &ins, name).unwrap();
    (op, out(ir, g, op))
}

fn shape(v: &[i64]) -> Attributes {
    Attributes::new().with("shape", AttrValue::Ints(v.to_vec()))
}

#[test]
fn view_chains_share_one_buffer_and_run_no_kernel() {
    // main: x = load; r = x.reshape(2, 2); q = r.reshape(1, 4); s = squeeze(q);
    // y = f(s) where f(p) = identity(p).reshape(4); store relu(y).
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    add_stream(&mut ir, "in", &[4], StreamDirection::HostToDevice);
    add_stream(&mut ir, "out", &[4], StreamDirection::DeviceToHost);
    let f = ir.create_graph("f").unwrap();
    let p = ir.graph_mut(f).unwrap().add_input("p", vec4()).unwrap();
    let (_, i) = op1(&mut ir, f, "Identity", Attributes::new(), &[p], "id");
    let (_, fo) = op1(&mut ir, f, "Reshape", shape(&[4]), &[i], "flat");
    ir.graph_mut(f).unwrap().add_output(fo).unwrap();
    let (_, x) = op1(&mut ir, main, "HostLoad", stream_attrs("in"), &[], "load");
    let (_, r) = op1(&mut ir, main, "Reshape", shape(&[2, 2]), &[x], "r");
    let (_, q) = op1(&mut ir, main, "Reshape", shape(&[1, 4]), &[r], "q");
    let (_, sq) = op1(&mut ir, main, "Squeeze", Attributes::new(), &[q], "s");
    let (_, y) = op1(&mut ir, main, "Call", Attributes::new().with("graph", AttrValue::Graph(f)), &[sq], "call");
    let (_, z) = op1(&mut ir, main, "Relu", Attributes::new(), &[y], "relu");
    ir.create_op(main, "HostStore", stream_attrs("out"), &[(0, z)], "store").unwrap();
    let exe = popart_lower::lower(&ir).unwrap();

    let b = exe.buffer_of(main, x).unwrap();
    for (g, t) in [(main, r), (main, q), (main, sq), (main, y), (f, p), (f, i), (f, fo)] {
        assert_eq!(exe.buffer_of(g, t), Some(b), "{}", exe.dump());
    }
    let kernels: Vec<&str> = exe.kernel_calls().iter().map(|k| k.def.op_type()).collect();
    assert_eq!(kernels, ["Relu"]);
    assert!(!exe.dump().contains("copy "), "the call reads and writes the shared buffer");
    // The shared buffer and relu's output: 64 bytes each, live together at the relu.
    assert_eq!(exe.memory.arena_bytes, 128);
    assert_eq!(exe.memory.host_load_bytes, 64);
    let got = run_on_cpu(&ir, &[("in", vec![-1.0, 2.0, -3.0, 4.0])]);
    assert_eq!(got["out"], [0.0, 2.0, 0.0, 4.0]);
}

#[test]
fn views_of_tensors_written_in_place_keep_their_copy() {
    // x = load; y = x.reshape(4) before x += 1: y keeps the old value.
    // u = identity(w); u += 1 (u is written): w keeps its value.
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    for name in ["in", "in2"] {
        add_stream(&mut ir, name, &[4], StreamDirection::HostToDevice);
    }
    for name in ["old", "new", "w", "u"] {
        add_stream(&mut ir, name, &[4], StreamDirection::DeviceToHost);
    }
    let one = ir
        .main_graph_mut()
        .add_tensor("one", vec4(), TensorKind::Constant(HostTensor::from_f32(&[N], &[1.0; N])))
        .unwrap();
    let (_, x0) = op1(&mut ir, main, "HostLoad", stream_attrs("in"), &[], "load");
    let (_, x) = op1(&mut ir, main, "Exp", Attributes::new(), &[x0], "exp");
    let (view, y) = op1(&mut ir, main, "Reshape", shape(&[4]), &[x], "view");
    let (bump, x1) = op1(&mut ir, main, "AddInplace", Attributes::new(), &[x, one], "bump");
    ir.main_graph_mut().add_topo_con(view, bump).unwrap();
    let (_, w) = op1(&mut ir, main, "HostLoad", stream_attrs("in2"), &[], "load2");
    let (_, u) = op1(&mut ir, main, "Identity", Attributes::new(), &[w], "u");
    let (_, u1) = op1(&mut ir, main, "AddInplace", Attributes::new(), &[u, one], "bump_u");
    for (name, t) in [("old", y), ("new", x1), ("w", w), ("u", u1)] {
        ir.create_op(main, "HostStore", stream_attrs(name), &[(0, t)], &format!("store_{name}")).unwrap();
    }
    let exe = popart_lower::lower(&ir).unwrap();
    assert_ne!(exe.buffer_of(main, x), exe.buffer_of(main, y));
    assert_ne!(exe.buffer_of(main, w), exe.buffer_of(main, u));
    let kernels: Vec<&str> = exe.kernel_calls().iter().map(|k| k.def.op_type()).collect();
    assert_eq!(kernels.iter().filter(|&&k| k == "Reshape" || k == "Identity").count(), 2, "{kernels:?}");
    let xs = [0.0f32, 0.5, -1.0, 2.0];
    let got = run_on_cpu(&ir, &[("in", xs.to_vec()), ("in2", vec![1.0, 2.0, 3.0, 4.0])]);
    let exp: Vec<f64> = xs.iter().map(|&v| v.exp() as f64).collect();
    assert_eq!(got["old"], exp);
    assert_eq!(got["new"], xs.iter().map(|&v| (v.exp() + 1.0) as f64).collect::<Vec<_>>());
    assert_eq!(got["w"], [1.0, 2.0, 3.0, 4.0]);
    assert_eq!(got["u"], [2.0, 3.0, 4.0, 5.0]);
}

#[test]
fn views_of_variables_share_their_buffer_unless_the_variable_is_updated() {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    add_stream(&mut ir, "a", &[2, 2], StreamDirection::DeviceToHost);
    add_stream(&mut ir, "b", &[4], StreamDirection::DeviceToHost);
    let data = HostTensor::from_f32(&[N], &[1.0, -2.0, 3.0, -4.0]);
    let frozen = ir.main_graph_mut().add_tensor("frozen", vec4(), TensorKind::Variable(data.clone())).unwrap();
    let trained = ir.main_graph_mut().add_tensor("trained", vec4(), TensorKind::Variable(data)).unwrap();
    let (_, a) = op1(&mut ir, main, "Reshape", shape(&[2, 2]), &[frozen], "a");
    let (_, ra) = op1(&mut ir, main, "Relu", Attributes::new(), &[a], "relu");
    let (view, b) = op1(&mut ir, main, "Detach", Attributes::new(), &[trained], "b");
    let (upd, _) = op1(&mut ir, main, "AddInplace", Attributes::new(), &[trained, frozen], "update");
    ir.main_graph_mut().add_topo_con(view, upd).unwrap();
    ir.create_op(main, "HostStore", stream_attrs("a"), &[(0, ra)], "store_a").unwrap();
    ir.create_op(main, "HostStore", stream_attrs("b"), &[(0, b)], "store_b").unwrap();
    let exe = popart_lower::lower(&ir).unwrap();
    assert_eq!(exe.buffer_of(main, a), exe.buffer_of(main, frozen));
    assert_ne!(exe.buffer_of(main, b), exe.buffer_of(main, trained));
    assert_eq!(exe.memory.permanent_bytes, 128, "a is no extra permanent buffer");
    let got = run_on_cpu(&ir, &[]);
    assert_eq!(got["a"], [1.0, 0.0, 3.0, 0.0]);
    assert_eq!(got["b"], [1.0, -2.0, 3.0, -4.0], "read before the update");
}

// ----- randomized differential test -----

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

struct Model {
    ir: Ir,
    nht: usize,
    inputs: Vec<String>,
    outputs: Vec<String>,
}

struct Sub {
    id: GraphId,
    n_in: usize,
    n_out: usize,
}

/// What ops of a graph may use besides its tensors.
struct Available<'a> {
    /// Graphs to call or repeat.
    subs: &'a [Sub],
    /// Streams to load from.
    streams: &'a [String],
    /// A bool condition for ifs.
    cond: Option<TensorId>,
}

/// Random ops over f32[N] tensors of `g`, drawing operands from `pool`.
fn random_ops(ir: &mut Ir, g: GraphId, pool: &mut Vec<TensorId>, avail: &Available<'_>, rng: &mut Rng, n_ops: usize) {
    let Available { subs, streams, cond } = *avail;
    for i in 0..n_ops {
        let pick = |rng: &mut Rng, pool: &Vec<TensorId>| pool[rng.below(pool.len())];
        let name = format!("op{i}");
        match rng.below(14) {
            0..=2 => {
                let (a, b) = (pick(rng, pool), pick(rng, pool));
                let ty = ["Add", "Sub", "Add"][rng.below(3)];
                let op = ir.create_op(g, ty, Attributes::new(), &[(0, a), (1, b)], &name).unwrap();
                pool.push(out(ir, g, op));
            }
            3 => {
                let half = ir.graph_mut(g).unwrap().unique_tensor_name("half");
                let data = HostTensor::from_f32(&[N], &[0.5, -0.25, 0.75, 1.0]);
                let c = ir.graph_mut(g).unwrap().add_tensor(&half, vec4(), TensorKind::Constant(data)).unwrap();
                let op = ir.create_op(g, "Mul", Attributes::new(), &[(0, pick(rng, pool)), (1, c)], &name).unwrap();
                pool.push(out(ir, g, op));
            }
            4 => {
                let ty = ["Relu", "Neg"][rng.below(2)];
                let op = ir.create_op(g, ty, Attributes::new(), &[(0, pick(rng, pool))], &name).unwrap();
                pool.push(out(ir, g, op));
            }
            5 => {
                // In place on a tensor nobody else reads: it leaves the pool, its alias joins.
                let graph = ir.graph(g).unwrap();
                let free: Vec<usize> = (0..pool.len())
                    .filter(|&k| {
                        let t = graph.tensor(pool[k]).unwrap();
                        t.consumers().is_empty()
                            && t.kind == TensorKind::ActGrad
                            && graph.output_index(pool[k]).is_none()
                    })
                    .collect();
                if free.is_empty() || pool.len() < 2 {
                    continue;
                }
                let k = free[rng.below(free.len())];
                let t = pool.remove(k);
                let x = pick(rng, pool);
                let op = ir.create_op(g, "AddInplace", Attributes::new(), &[(0, t), (1, x)], &name).unwrap();
                pool.push(out(ir, g, op));
            }
            6..=8 if !subs.is_empty() => {
                let s = &subs[rng.below(subs.len())];
                let args: Vec<(u32, TensorId)> = (0..s.n_in).map(|k| (k as u32, pick(rng, pool))).collect();
                let repeat = s.n_out <= s.n_in && rng.chance(50);
                let attrs = if repeat {
                    Attributes::new()
                        .with("graph", AttrValue::Graph(s.id))
                        .with("count", AttrValue::Int(1 + rng.below(3) as i64))
                } else {
                    Attributes::new().with("graph", AttrValue::Graph(s.id))
                };
                let op = ir.create_op(g, if repeat { "Repeat" } else { "Call" }, attrs, &args, &name).unwrap();
                let outs: Vec<TensorId> = ir.graph(g).unwrap().op(op).unwrap().outputs().tensors().collect();
                pool.extend(outs);
            }
            9 if !streams.is_empty() => {
                let s = &streams[rng.below(streams.len())];
                let op = ir.create_op(g, "HostLoad", stream_attrs(s), &[], &name).unwrap();
                pool.push(out(ir, g, op));
            }
            10 if cond.is_some() && !subs.is_empty() => {
                let t = &subs[rng.below(subs.len())];
                let same: Vec<&Sub> = subs.iter().filter(|e| e.n_out == t.n_out).collect();
                let e = same[rng.below(same.len())];
                let mut args = vec![(0u32, cond.unwrap())];
                for k in 0..t.n_in + e.n_in {
                    args.push((1 + k as u32, pick(rng, pool)));
                }
                let then_inputs: Vec<i64> = (1..=t.n_in as i64).collect();
                let else_inputs: Vec<i64> = (1 + t.n_in as i64..=(t.n_in + e.n_in) as i64).collect();
                let attrs = Attributes::new()
                    .with("then_graph", AttrValue::Graph(t.id))
                    .with("else_graph", AttrValue::Graph(e.id))
                    .with("then_inputs", AttrValue::Ints(then_inputs))
                    .with("else_inputs", AttrValue::Ints(else_inputs));
                let op = ir.create_op(g, "If", attrs, &args, &name).unwrap();
                let outs: Vec<TensorId> = ir.graph(g).unwrap().op(op).unwrap().outputs().tensors().collect();
                pool.extend(outs);
            }
            11 => {
                // A view, sometimes through [2, 2] and back.
                let x = pick(rng, pool);
                let y = match rng.below(4) {
                    0 => op1(ir, g, ["Identity", "Detach"][rng.below(2)], Attributes::new(), &[x], &name).1,
                    1 if rng.chance(50) => op1(ir, g, "Reshape", shape(&[-1]), &[x], &name).1,
                    1 => op1(ir, g, "Squeeze", Attributes::new(), &[x], &name).1,
                    _ => {
                        let (_, r) = op1(ir, g, "Reshape", shape(&[2, 2]), &[x], &format!("{name}_2x2"));
                        if rng.chance(50) {
                            op1(ir, g, "Reshape", shape(&[4]), &[r], &name).1
                        } else {
                            let xs: Vec<i64> =
                                ir.graph(g).unwrap().tensor(x).unwrap().info.shape.iter().map(|&d| d as i64).collect();
                            op1(ir, g, "ReshapeGrad", shape(&xs), &[r], &name).1
                        }
                    }
                };
                pool.push(y);
            }
            12 => {
                // A view of a tensor that is then written in place: the view must
                // keep its own copy of the old value.
                let graph = ir.graph(g).unwrap();
                let targets: Vec<usize> = (0..pool.len())
                    .filter(|&k| {
                        graph.tensor(pool[k]).unwrap().kind == TensorKind::ActGrad
                            && graph.output_index(pool[k]).is_none()
                    })
                    .collect();
                if targets.is_empty() || pool.len() < 2 {
                    continue;
                }
                let x = pool.remove(targets[rng.below(targets.len())]);
                let ty = ["Identity", "Reshape"][rng.below(2)];
                let attrs = if ty == "Reshape" { shape(&[4]) } else { Attributes::new() };
                let (view, y) = op1(ir, g, ty, attrs, &[x], &format!("{name}_view"));
                pool.push(y);
                let other = pick(rng, pool);
                let (bump, x1) = op1(ir, g, "AddInplace", Attributes::new(), &[x, other], &name);
                ir.graph_mut(g).unwrap().add_topo_con(view, bump).unwrap();
                pool.push(x1);
            }
            _ => {
                let op = ir.create_op(g, "Relu", Attributes::new(), &[(0, pick(rng, pool))], &name).unwrap();
                pool.push(out(ir, g, op));
            }
        }
    }
}

/// A tensor from the last third of the pool (recent results keep long chains alive).
fn late(rng: &mut Rng, pool: &[TensorId]) -> TensorId {
    let from = pool.len() - pool.len().div_ceil(3);
    pool[from + rng.below(pool.len() - from)]
}

fn random_model(seed: u64) -> Model {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let inputs: Vec<String> = (0..2).map(|i| format!("in{i}")).collect();
    for s in &inputs {
        ir.main_graph_mut().add_tensor(s, vec4(), TensorKind::Stream(StreamDirection::HostToDevice)).unwrap();
    }
    let mut subs: Vec<Sub> = Vec::new();
    for k in 0..1 + rng.below(4) {
        let g = ir.create_graph(&format!("g{k}")).unwrap();
        let n_in = 1 + rng.below(3);
        let mut pool: Vec<TensorId> =
            (0..n_in).map(|i| ir.graph_mut(g).unwrap().add_input(&format!("i{i}"), vec4()).unwrap()).collect();
        let n_ops = 2 + rng.below(7);
        let streams = if rng.chance(30) { inputs.clone() } else { Vec::new() };
        let avail = Available { subs: &subs, streams: &streams, cond: None };
        random_ops(&mut ir, g, &mut pool, &avail, &mut rng, n_ops);
        let n_out = 1 + rng.below(2);
        for _ in 0..n_out {
            let t = late(&mut rng, &pool);
            ir.graph_mut(g).unwrap().add_output(t).unwrap();
        }
        subs.push(Sub { id: g, n_in, n_out });
    }
    let mut pool = Vec::new();
    for s in &inputs {
        let op = ir.create_op(main, "HostLoad", stream_attrs(s), &[], &format!("load_{s}")).unwrap();
        pool.push(out(&ir, main, op));
    }
    let n_ops = 8 + rng.below(17);
    ir.main_graph_mut()
        .add_tensor("c", TensorInfo::new(DataType::Bool, []), TensorKind::Stream(StreamDirection::HostToDevice))
        .unwrap();
    let load_c = ir.create_op(main, "HostLoad", stream_attrs("c"), &[], "load_c").unwrap();
    let cond = out(&ir, main, load_c);
    let avail = Available { subs: &subs, streams: &inputs, cond: Some(cond) };
    random_ops(&mut ir, main, &mut pool, &avail, &mut rng, n_ops);
    let mut outputs = Vec::new();
    for i in 0..2 + rng.below(3) {
        let name = format!("out{i}");
        ir.main_graph_mut().add_tensor(&name, vec4(), TensorKind::Stream(StreamDirection::DeviceToHost)).unwrap();
        let t = late(&mut rng, &pool);
        ir.create_op(main, "HostStore", stream_attrs(&name), &[(0, t)], &format!("store{i}")).unwrap();
        outputs.push(name);
    }
    let nht = 1 + rng.below(3);
    ir.num_host_transfers = nht;
    ir.verify().unwrap();
    Model { ir, nht, inputs, outputs }
}

/// Host streams of the reference interpreter: rings of `nht` elements.
struct HostIo {
    nht: usize,
    inputs: HashMap<String, (Vec<[f32; N]>, usize)>,
    outputs: HashMap<String, (Vec<[f32; N]>, usize)>,
}

/// Evaluate graph `g` on `args` (by value), following the same schedule as lowering.
/// Returns the outputs and the final values of the inputs (in-place updates of an
/// input are visible there).
///
/// Repeat semantics: inputs are copied into the body once; after each iteration
/// output k becomes input k; inputs beyond the outputs keep their value, including
/// in-place changes made by the body (the body input is one buffer for the loop).
fn eval(ir: &Ir, g: GraphId, args: Vec<[f32; N]>, io: &mut HostIo) -> (Vec<[f32; N]>, Vec<[f32; N]>) {
    let graph = ir.graph(g).unwrap();
    let mut val: HashMap<TensorId, [f32; N]> = HashMap::new();
    // Alias root of in-place results. A tensor's value is its root's latest value:
    // an in-place write is seen through every alias, as on the device.
    let mut root: HashMap<TensorId, TensorId> = HashMap::new();
    for (t, v) in graph.inputs().iter().zip(args) {
        val.insert(*t, v);
    }
    for t in graph.tensors() {
        if let TensorKind::Constant(d) = &t.kind {
            let v: Vec<f64> = d.to_f64_vec();
            val.insert(t.id, std::array::from_fn(|i| v[i] as f32));
        }
    }
    for o in graph.schedule().unwrap() {
        let op = graph.op(o).unwrap();
        let input = |i: u32| {
            let t = op.input(i).unwrap();
            val[root.get(&t).unwrap_or(&t)]
        };
        let map2 =
            |a: [f32; N], b: [f32; N], f: fn(f32, f32) -> f32| -> [f32; N] { std::array::from_fn(|i| f(a[i], b[i])) };
        let result: Vec<[f32; N]> = match op.op_type() {
            "Add" => vec![map2(input(0), input(1), |a, b| a + b)],
            "AddInplace" => {
                let v = map2(input(0), input(1), |a, b| a + b);
                let t = op.input(0).unwrap();
                let r = *root.get(&t).unwrap_or(&t);
                root.insert(op.output(0).unwrap(), r);
                val.insert(r, v);
                vec![v]
            }
            "Sub" => vec![map2(input(0), input(1), |a, b| a - b)],
            "Mul" => vec![map2(input(0), input(1), |a, b| a * b)],
            "Relu" => vec![input(0).map(|a| a.max(0.0))],
            "Identity" | "Detach" | "Reshape" | "Squeeze" | "ReshapeGrad" => vec![input(0)],
            "Neg" => vec![input(0).map(|a| -a)],
            "HostLoad" => {
                let (data, cursor) = io.inputs.get_mut(op.attrs.str("stream").unwrap()).unwrap();
                let v = data[*cursor % io.nht];
                *cursor += 1;
                vec![v]
            }
            "HostStore" => {
                let (data, cursor) = io.outputs.get_mut(op.attrs.str("stream").unwrap()).unwrap();
                data[*cursor % io.nht] = input(0);
                *cursor += 1;
                vec![]
            }
            "Call" => {
                let args = (0..op.inputs().len() as u32).map(input).collect();
                eval(ir, op.attrs.graph("graph").unwrap(), args, io).0
            }
            "If" => {
                let (key, ins) = if input(0)[0] != 0.0 { ("then", "then_inputs") } else { ("else", "else_inputs") };
                let callee = op.attrs.graph(&format!("{key}_graph")).unwrap();
                let args = op.attrs.ints(ins).unwrap().iter().map(|&i| input(i as u32)).collect();
                eval(ir, callee, args, io).0
            }
            "Repeat" => {
                let callee = op.attrs.graph("graph").unwrap();
                let mut args: Vec<[f32; N]> = (0..op.inputs().len() as u32).map(input).collect();
                let mut outs = Vec::new();
                for _ in 0..op.attrs.int("count").unwrap() {
                    let (o, finals) = eval(ir, callee, args.clone(), io);
                    args = finals;
                    args[..o.len()].copy_from_slice(&o);
                    outs = o;
                }
                outs
            }
            other => panic!("the generator makes no {other}"),
        };
        for (j, v) in result.into_iter().enumerate() {
            val.insert(op.output(j as u32).unwrap(), v);
        }
    }
    let value = |t: &TensorId| val[root.get(t).unwrap_or(t)];
    let outs = graph.outputs().iter().map(value).collect();
    let finals = graph.inputs().iter().map(value).collect();
    (outs, finals)
}

#[test]
fn random_programs_match_a_reference_interpreter() {
    let mut tested = 0;
    // Subgraph calls lowered as functions, and inlined (the session's default):
    // the interpreter runs the IR prepared by the same pipeline as the session.
    for (seed, inline) in (0..200u64).flat_map(|s| [(s, false), (s, true)]) {
        let m = random_model(seed);
        let mut rng = Rng(seed + 1000);
        let data: HashMap<String, Vec<[f32; N]>> = m
            .inputs
            .iter()
            .map(|s| {
                (s.clone(), (0..m.nht).map(|_| std::array::from_fn(|_| (rng.below(17) as f32 - 8.0) * 0.25)).collect())
            })
            .collect();
        let conds: Vec<bool> = (0..m.nht).map(|_| rng.chance(50)).collect();
        let mut io = HostIo {
            nht: m.nht,
            inputs: data
                .iter()
                .map(|(k, v)| (k.clone(), (v.clone(), 0)))
                .chain([("c".to_string(), (conds.iter().map(|&b| [b as u8 as f32, 0.0, 0.0, 0.0]).collect(), 0))])
                .collect(),
            outputs: m.outputs.iter().map(|s| (s.clone(), (vec![[0.0; N]; m.nht], 0))).collect(),
        };
        // Interpret the prepared IR: pruning may change the schedule of the host loads.
        let mut prepared = m.ir.clone();
        prepare_unchecked(&mut prepared, inline);
        eval(&prepared, prepared.main_graph_id(), Vec::new(), &mut io);

        let ir = popxl::Ir::from_ir(m.ir.clone());
        let options = popxl_session::SessionOptions {
            check_inplace_ambiguity: false,
            inline_calls: Some(inline),
            ..popxl_session::SessionOptions::default()
        };
        let mut session = match Session::with_options(ir.clone(), "cpu", options) {
            Ok(s) => s,
            Err(e) => panic!("seed {seed}: {e}"),
        };
        let mut inputs = popxl_session::Inputs::new();
        for s in session.expected_inputs() {
            if s.name() == "c" {
                let shape = if m.nht > 1 { vec![m.nht] } else { vec![] };
                let a = ndarray::ArrayD::from_shape_vec(shape, conds.clone()).unwrap();
                inputs.insert(s, HostArray::from(a));
                continue;
            }
            let rows: Vec<f32> = data[s.name()].iter().flatten().copied().collect();
            let shape = if m.nht > 1 { vec![m.nht, N] } else { vec![N] };
            inputs.insert(s, HostArray::from(ndarray::ArrayD::from_shape_vec(shape, rows).unwrap()));
        }
        let outputs = session.scope(|s| s.run(&inputs)).unwrap();
        for s in ir.d2h_streams() {
            let want: Vec<f64> = io.outputs[s.name()].0.iter().flatten().map(|&v| v as f64).collect();
            let got = outputs[&s].to_f64_vec();
            assert_eq!(
                got,
                want,
                "seed {seed}, inline {inline}, stream {}:\n{}",
                s.name(),
                session.executable().dump()
            );
        }
        tested += 1;
    }
    assert_eq!(tested, 400);
}

/// Structural invariants of the plan, independent of execution: no copy reads
/// memory it writes, and no kernel output overlaps another argument unless it is
/// the very same buffer (an in-place alias).
#[test]
fn random_programs_never_overlap_copy_or_kernel_arguments() {
    let (mut views, mut kept) = (0, 0);
    for seed in 0..200u64 {
        let m = random_model(seed);
        let mut prepared = m.ir.clone();
        prepare_unchecked(&mut prepared, false);
        let exe = popart_lower::lower(&prepared).unwrap();
        let is_view = |def: &'static dyn popart_ir::OpDef, attrs| def.flags(attrs).contains(popart_ir::OpFlags::VIEW);
        views += prepared.graphs().flat_map(|g| g.ops()).filter(|op| is_view(op.def(), &op.attrs)).count();
        kept += exe.kernel_calls().iter().filter(|k| is_view(k.def, &k.attrs)).count();
        let range = |b: popart_lower::BufferId, bytes: usize| (exe.buffer(b).offset, exe.buffer(b).offset + bytes);
        let overlap = |(a, b): (usize, usize), (c, d): (usize, usize)| a < d && c < b;
        let mut bad = Vec::new();
        let mut check = |p: &popart_lower::Program| match p {
            popart_lower::Program::Copy { src, dst, bytes } if overlap(range(*src, *bytes), range(*dst, *bytes)) => {
                bad.push(format!("copy b{} -> b{}", src.0, dst.0));
            }
            popart_lower::Program::Execute(k) => {
                for (n, o) in k.outputs.iter().enumerate() {
                    let ro = range(o.buffer, o.info.nbytes());
                    let others = k.inputs.iter().chain(&k.outputs[..n]);
                    for a in others.filter(|a| a.buffer != o.buffer) {
                        if overlap(ro, range(a.buffer, a.info.nbytes())) {
                            bad.push(format!("{}: b{} and b{}", k.name, o.buffer.0, a.buffer.0));
                        }
                    }
                }
            }
            _ => {}
        };
        exe.programs.main.visit(&mut check);
        for f in &exe.functions {
            f.body.visit(&mut check);
        }
        assert!(bad.is_empty(), "seed {seed}: {bad:?}\n{}", exe.dump());
    }
    // Both ways of lowering a view are exercised: sharing, and a kernel when the
    // view or its source is written in place.
    assert!(kept > 0 && kept < views, "{views} views, {kept} lowered as kernels");
}

/// Prepare without the in-place ambiguity check: the random programs write in
/// place without ordering every reader, and the scheduler's order defines what
/// they compute (the check would reject them, as PopXL does by default).
fn prepare_unchecked(ir: &mut popart_ir::Ir, inline_calls: bool) {
    let options = popart_transforms::prepare::PrepareOptions {
        check_inplace_ambiguity: false,
        inline_calls,
        ..popart_transforms::prepare::PrepareOptions::default()
    };
    popart_transforms::prepare::prepare_with(ir, options).unwrap();
}
