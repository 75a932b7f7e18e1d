//! Property and fuzz tests of the text form and the IR loader.
//!
//! (a) Random valid IRs (random registered ops with random attributes, kept when
//! shape inference accepts them; subgraphs called by `Call`, `Repeat` and `If`;
//! variables and constants of every dtype with arbitrary bit patterns; streams;
//! constraints; awkward names) print, parse back to an equal IR and print
//! identically. (b) Mutated texts (byte flips, token deletion, duplication and
//! swaps, extreme numbers, huge shapes, line edits) never make the parser, the
//! verifier, the scheduler or the printer panic, and what parses round-trips.
//!
//! `POPART_FUZZ_CASES` sets the number of generated IRs per test (default 64),
//! `POPART_FUZZ_MUTATIONS` the mutated texts per generated IR (default 16).
//! A long run: `POPART_FUZZ_CASES=200000 cargo test --release -p popart-ir --test
//! fuzz_text -- --nocapture` (each test prints how many inputs it tried).

use std::sync::atomic::{AtomicU64, Ordering};

use popart_ir::{
    registered_ops, text, AttrKind, AttrValue, Attributes, DataType, GraphId, HostTensor, Ir, OpDef, StreamDirection,
    TensorId, TensorInfo, TensorKind,
};
use proptest::prelude::*;

fn env_or(key: &str, default: u32) -> u32 {
    std::env::var(key).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn config() -> ProptestConfig {
    ProptestConfig { cases: env_or("POPART_FUZZ_CASES", 64), failure_persistence: None, ..ProptestConfig::default() }
}

/// A small deterministic generator (xorshift*), seeded by proptest.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len())]
    }
}

const NAMES: &[&str] = &["t", "x", "w", "a b", "q\"uote", "arrow->x", "é", "tab\tname", "", "-1", "graph", "@x"];

fn name(rng: &mut Rng, base: &str) -> String {
    if rng.chance(15) {
        format!("{}{}", rng.pick(NAMES), rng.below(100))
    } else {
        format!("{base}{}", rng.below(1000))
    }
}

fn random_info(rng: &mut Rng) -> TensorInfo {
    let dtype = *rng.pick(&DataType::ALL);
    let rank = rng.below(4);
    let shape: Vec<usize> = (0..rank).map(|_| *rng.pick(&[1, 1, 2, 2, 3, 4, 0])).collect();
    TensorInfo::new(dtype, shape)
}

/// Arbitrary bytes of `info` (every bit pattern, NaN payloads included; bools 0/1).
fn random_data(rng: &mut Rng, info: &TensorInfo) -> HostTensor {
    let bytes: Vec<u8> = (0..info.nbytes())
        .map(|_| if info.dtype == DataType::Bool { (rng.next() & 1) as u8 } else { rng.next() as u8 })
        .collect();
    HostTensor::from_bytes(info.clone(), bytes).expect("valid data")
}

/// A random value for attribute `key` (right type most of the time).
fn random_attr(rng: &mut Rng, key: &str, graphs: &[GraphId], streams: &[String]) -> AttrValue {
    let small = |rng: &mut Rng| rng.below(7) as i64 - 3;
    let ints = |rng: &mut Rng| (0..rng.below(4)).map(|_| rng.below(7) as i64 - 3).collect::<Vec<_>>();
    match key {
        "axis" | "index" | "count" | "ignore_index" | "arg" => AttrValue::Int(small(rng)),
        "axes" | "perm" | "starts" | "ends" | "steps" | "modified" | "then_inputs" | "else_inputs" => {
            AttrValue::Ints(ints(rng))
        }
        "shape" => AttrValue::Ints((0..rng.below(4)).map(|_| rng.below(5) as i64 - 1).collect()),
        "keepdims" => AttrValue::Bool(rng.chance(50)),
        "to" | "dtype" => AttrValue::DType(*rng.pick(&DataType::ALL)),
        "a" | "b" | "factor" | "low" | "high" | "mean" | "std" | "p" => {
            AttrValue::Float(*rng.pick(&[0.0, 0.5, 1.0, -2.0, 1e-8, f64::INFINITY, f64::NAN, -0.0]))
        }
        "graph" | "then_graph" | "else_graph" if !graphs.is_empty() => AttrValue::Graph(*rng.pick(graphs)),
        "stream" if !streams.is_empty() => AttrValue::Str(rng.pick(streams).clone()),
        "reduction" => AttrValue::Str(rng.pick(&["mean", "sum", "none", "max", "l2", "logsum"]).to_string()),
        "derivative" => AttrValue::Str(rng.pick(&["div_rhs", "pow_rhs", "max_lhs", "min_rhs", "Relu"]).to_string()),
        _ => AttrValue::Floats(vec![0.25, -1.0]),
    }
}

/// A random value of `kind` (for attributes `random_attr` does not know).
fn random_of_kind(rng: &mut Rng, kind: AttrKind, graphs: &[GraphId]) -> AttrValue {
    match kind {
        AttrKind::Int => AttrValue::Int(rng.below(7) as i64 - 3),
        AttrKind::Float => AttrValue::Float(*rng.pick(&[0.0, 0.5, 1.0, -2.0, 1e-8])),
        AttrKind::Ints => AttrValue::Ints((0..rng.below(4)).map(|_| rng.below(7) as i64 - 3).collect()),
        AttrKind::Floats => AttrValue::Floats(vec![0.25, -1.0]),
        AttrKind::Str => AttrValue::Str(rng.pick(&["mean", "sum", "none", "add", "max"]).to_string()),
        AttrKind::Bool => AttrValue::Bool(rng.chance(50)),
        AttrKind::DType => AttrValue::DType(*rng.pick(&DataType::ALL)),
        AttrKind::Graph if !graphs.is_empty() => AttrValue::Graph(*rng.pick(graphs)),
        AttrKind::Graph => AttrValue::Int(0),
    }
}

const KEYS: &[&str] = &[
    "axis",
    "axes",
    "keepdims",
    "shape",
    "perm",
    "starts",
    "ends",
    "steps",
    "to",
    "dtype",
    "a",
    "b",
    "factor",
    "graph",
    "then_graph",
    "else_graph",
    "then_inputs",
    "else_inputs",
    "count",
    "modified",
    "stream",
    "reduction",
    "derivative",
    "index",
    "low",
    "high",
    "mean",
    "std",
    "p",
    "ignore_index",
];

/// Fill graph `gid` with random tensors and ops; `callees` may be called.
fn fill_graph(ir: &mut Ir, gid: GraphId, rng: &mut Rng, defs: &[&'static dyn OpDef], callees: &[GraphId]) {
    let is_main = gid == ir.main_graph_id();
    let mut pool: Vec<TensorId> = Vec::new();
    let mut streams: Vec<String> = Vec::new();
    for _ in 0..1 + rng.below(3) {
        let info = random_info(rng);
        if let Ok(t) = ir.graph_mut(gid).unwrap().add_input(&name(rng, "in"), info) {
            pool.push(t);
        }
    }
    for _ in 0..rng.below(4) {
        let info = random_info(rng);
        let data = random_data(rng, &info);
        let kind = if rng.chance(50) { TensorKind::Variable(data) } else { TensorKind::Constant(data) };
        if let Ok(t) = ir.graph_mut(gid).unwrap().add_tensor(&name(rng, "v"), info, kind) {
            pool.push(t);
        }
    }
    if rng.chance(30) {
        let seed = TensorInfo::new(DataType::Uint32, [2]);
        let data = random_data(rng, &seed);
        if let Ok(t) = ir.graph_mut(gid).unwrap().add_tensor(&name(rng, "seed"), seed, TensorKind::Variable(data)) {
            pool.push(t);
        }
    }
    if is_main {
        for _ in 0..rng.below(3) {
            let dir = if rng.chance(50) { StreamDirection::HostToDevice } else { StreamDirection::DeviceToHost };
            let n = name(rng, "s");
            if ir.main_graph_mut().add_tensor(&n, random_info(rng), TensorKind::Stream(dir)).is_ok() {
                streams.push(n);
            }
        }
    }
    let mut ops = Vec::new();
    // Ops whose inputs must match something exactly: subgraph calls, host IO,
    // gather (integer indices), matmul.
    for _ in 0..rng.below(4) {
        let (def, attrs, infos) = match rng.below(6) {
            0 | 1 if !callees.is_empty() => {
                let c = *rng.pick(callees);
                let cg = ir.graph(c).unwrap();
                let (ins, outs) = (cg.input_infos(), cg.output_infos());
                let attrs = Attributes::new().with("graph", AttrValue::Graph(c));
                let repeat = rng.chance(40) && outs.len() <= ins.len() && outs.iter().zip(&ins).all(|(o, i)| o == i);
                if repeat {
                    let def: &'static dyn OpDef = &popart_ir::ops::all::Repeat;
                    (def, attrs.with("count", AttrValue::Int(1 + rng.below(3) as i64)), ins)
                } else if rng.chance(30) {
                    // If with both branches the same graph and a bool condition first.
                    let def: &'static dyn OpDef = &popart_ir::ops::all::If;
                    let idx: Vec<i64> = (1..=ins.len() as i64).collect();
                    let attrs = Attributes::new()
                        .with("then_graph", AttrValue::Graph(c))
                        .with("else_graph", AttrValue::Graph(c))
                        .with("then_inputs", AttrValue::Ints(idx.clone()))
                        .with("else_inputs", AttrValue::Ints(idx));
                    let mut infos = vec![TensorInfo::new(DataType::Bool, Vec::<usize>::new())];
                    infos.extend(ins);
                    (def, attrs, infos)
                } else {
                    let def: &'static dyn OpDef = &popart_ir::ops::all::Call;
                    (def, attrs, ins)
                }
            }
            2 if !streams.is_empty() => {
                let s = rng.pick(&streams).clone();
                let t = ir.main_graph().tensor_by_name(&s).unwrap();
                let info = t.info.clone();
                let load = matches!(t.kind, TensorKind::Stream(StreamDirection::HostToDevice));
                let attrs = Attributes::new().with("stream", AttrValue::Str(s));
                if load {
                    let def: &'static dyn OpDef = &popart_ir::ops::all::HostLoad;
                    (def, attrs, vec![])
                } else {
                    let def: &'static dyn OpDef = &popart_ir::ops::all::HostStore;
                    (def, attrs, vec![info])
                }
            }
            5 => {
                let def: &'static dyn OpDef = &popart_ir::ops::all::Gather;
                let (rows, cols) = (1 + rng.below(3), 1 + rng.below(3));
                (
                    def,
                    Attributes::new().with("axis", AttrValue::Int(rng.below(2) as i64)),
                    vec![TensorInfo::new(DataType::Float32, [rows, cols]), TensorInfo::new(DataType::Int32, [2])],
                )
            }
            _ => {
                let (m, k, n) = (1 + rng.below(3), 1 + rng.below(3), 1 + rng.below(3));
                let def: &'static dyn OpDef = &popart_ir::ops::all::MatMul;
                (
                    def,
                    Attributes::new(),
                    vec![TensorInfo::new(DataType::Float32, [m, k]), TensorInfo::new(DataType::Float32, [k, n])],
                )
            }
        };
        // A tensor of the pool with each info, else a new graph input.
        let mut inputs = Vec::new();
        for (i, info) in infos.iter().enumerate() {
            let found = pool
                .iter()
                .copied()
                .find(|&t| ir.graph(gid).unwrap().tensor(t).unwrap().info == *info && rng.chance(70));
            let t = match found {
                Some(t) => t,
                None => match ir.graph_mut(gid).unwrap().add_input(&name(rng, "arg"), info.clone()) {
                    Ok(t) => {
                        pool.push(t);
                        t
                    }
                    Err(_) => continue,
                },
            };
            inputs.push((i as u32, t));
        }
        let op_name = name(rng, "sub");
        if let Ok(op) = ir.create_op_with_def(gid, def, attrs, &inputs, &op_name) {
            ops.push(op);
            pool.extend(ir.graph(gid).unwrap().op(op).unwrap().outputs().tensors());
        }
    }
    for _ in 0..4 + rng.below(24) {
        let def = *rng.pick(defs);
        let n_in = if rng.chance(10) { rng.below(6) } else { rng.below(4) };
        let inputs: Vec<(u32, TensorId)> =
            (0..n_in).filter(|_| !pool.is_empty()).map(|i| (i as u32, *rng.pick(&pool))).collect();
        let mut attrs = Attributes::new();
        // Mostly the op's own attributes (unknown keys are refused at
        // creation), sometimes any key of the list.
        let schema = def.attributes();
        for spec in schema {
            if !spec.required && !rng.chance(60) {
                continue;
            }
            let key = spec.name.strip_suffix('#').map_or_else(|| spec.name.to_string(), |stem| format!("{stem}0"));
            let value = random_attr(rng, &key, callees, &streams);
            let value = if spec.kind.accepts(&value) { value } else { random_of_kind(rng, spec.kind, callees) };
            attrs.set(&key, value);
        }
        if schema.is_empty() || rng.chance(10) {
            for _ in 0..rng.below(2) {
                let key = *rng.pick(KEYS);
                attrs.set(key, random_attr(rng, key, callees, &streams));
            }
        }
        let op_name = name(rng, "op");
        if let Ok(op) = ir.create_op_with_def(gid, def, attrs, &inputs, &op_name) {
            ops.push(op);
            pool.extend(ir.graph(gid).unwrap().op(op).unwrap().outputs().tensors());
        }
    }
    let g = ir.graph_mut(gid).unwrap();
    for _ in 0..rng.below(3) {
        if !pool.is_empty() {
            g.add_output(*rng.pick(&pool)).unwrap();
        }
    }
    for _ in 0..rng.below(4) {
        if ops.len() >= 2 {
            let (a, b) = (*rng.pick(&ops), *rng.pick(&ops));
            let _ = if rng.chance(30) { g.add_tied_topo_con(a, b) } else { g.add_topo_con(a, b) };
        }
    }
}

/// A random valid IR.
fn random_ir(seed: u64) -> Ir {
    let mut rng = Rng(seed | 1);
    let defs = registered_ops();
    let mut ir = Ir::new();
    ir.num_host_transfers = 1 + rng.below(3);
    ir.replication_factor = 1 + rng.below(2);
    let mut graphs = Vec::new();
    for k in 0..rng.below(3) {
        let n = if rng.chance(20) { format!("sub graph {k}") } else { format!("sub{k}") };
        let g = ir.create_graph(&n).unwrap();
        fill_graph(&mut ir, g, &mut rng, &defs, &graphs);
        graphs.push(g);
    }
    let main = ir.main_graph_id();
    fill_graph(&mut ir, main, &mut rng, &defs, &graphs);
    ir
}

/// Printing, parsing and printing again gives the same text and an equal IR.
fn check_round_trip(ir: &Ir) -> Result<(), TestCaseError> {
    let s = text::to_text(ir);
    let back = match text::parse(&s) {
        Ok(b) => b,
        Err(e) => return Err(TestCaseError::fail(format!("printed IR does not parse: {e}\n{s}"))),
    };
    prop_assert_eq!(text::to_text(&back), s.clone());
    prop_assert_eq!(text::structural_diff(ir, &back), None, "{}", s);
    prop_assert!(back.verify().is_ok());
    Ok(())
}

/// Everything a loaded IR goes through next: none of it may panic.
fn exercise(ir: &Ir) {
    let _ = ir.verify();
    let _ = ir.graphs_callees_first();
    for g in ir.graphs() {
        let _ = g.schedule();
    }
    let _ = popart_ir::dot::to_dot(ir);
}

/// Tokens of `s`: runs of word characters, or single other characters.
fn tokens(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let is_word = |c: char| c.is_ascii_alphanumeric() || "_.:/+-".contains(c);
    let mut in_word = false;
    for (i, c) in s.char_indices() {
        let w = is_word(c);
        if i > start && !(w && in_word) {
            out.push(&s[start..i]);
            start = i;
        }
        in_word = w;
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

const EXTREMES: &[&str] = &[
    "0",
    "-1",
    "1",
    "2",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "4294967295",
    "4294967296",
    "1e309",
    "-1e309",
    "NaN",
    "nan:0x7ff0000000000001",
    "inf",
    "-0.0",
    "true",
    "false",
    "2",
    "[4294967296,4294967296]",
    "[9223372036854775807]",
    "[]",
    "@main",
    "->",
    "tied",
    "float32",
    "bool",
    "\"",
    "=",
    ",",
];

/// One random edit of `s`.
fn mutate(rng: &mut Rng, s: &str) -> String {
    match rng.below(8) {
        0 => {
            let mut b = s.as_bytes().to_vec();
            if !b.is_empty() {
                let i = rng.below(b.len());
                b[i] = rng.next() as u8;
            }
            String::from_utf8_lossy(&b).into_owned()
        }
        1..=4 => {
            let mut t: Vec<String> = tokens(s).into_iter().map(str::to_string).collect();
            if t.is_empty() {
                return s.to_string();
            }
            let i = rng.below(t.len());
            match rng.below(4) {
                0 => {
                    t.remove(i);
                }
                1 => {
                    let d = t[i].clone();
                    t.insert(i, d);
                }
                2 => {
                    let j = rng.below(t.len());
                    t.swap(i, j);
                }
                _ => {
                    // Numbers mostly, so that shapes, indices and data get the extremes.
                    let numeric: Vec<usize> =
                        (0..t.len()).filter(|&k| t[k].starts_with(|c: char| c.is_ascii_digit() || c == '-')).collect();
                    let k = if numeric.is_empty() || rng.chance(20) { i } else { *rng.pick(&numeric) };
                    t[k] = rng.pick(EXTREMES).to_string();
                }
            }
            t.concat()
        }
        5 => {
            let mut lines: Vec<&str> = s.lines().collect();
            if !lines.is_empty() {
                let i = rng.below(lines.len());
                match rng.below(3) {
                    0 => {
                        lines.remove(i);
                    }
                    1 => lines.insert(i, lines[i]),
                    _ => {
                        let j = rng.below(lines.len());
                        lines.swap(i, j);
                    }
                }
            }
            lines.join("\n")
        }
        6 => {
            // Shapes only.
            s.replacen(
                "[",
                rng.pick::<&str>(&["[4294967296,", "[0,", "[18446744073709551615,", "[-1,", "[1,"]),
                1 + rng.below(3),
            )
        }
        _ => {
            let mut v = s.to_string();
            let at = rng.below(v.len() + 1);
            let at = (0..=at).rev().find(|&k| v.is_char_boundary(k)).unwrap_or(0);
            v.insert_str(at, rng.pick::<&str>(EXTREMES));
            v
        }
    }
}

static GENERATED: AtomicU64 = AtomicU64::new(0);
static MUTATED: AtomicU64 = AtomicU64::new(0);
static ACCEPTED: AtomicU64 = AtomicU64::new(0);

proptest! {
    #![proptest_config(config())]

    #[test]
    fn random_irs_round_trip(seed in any::<u64>()) {
        let ir = random_ir(seed);
        ir.verify().map_err(|e| TestCaseError::fail(format!("generated IR invalid: {e}\n{ir}")))?;
        check_round_trip(&ir)?;
        GENERATED.fetch_add(1, Ordering::Relaxed);
    }

    #[test]
    fn mutated_texts_never_panic(seed in any::<u64>()) {
        let ir = random_ir(seed);
        let base = text::to_text(&ir);
        let mut rng = Rng(seed.rotate_left(17) | 1);
        for _ in 0..env_or("POPART_FUZZ_MUTATIONS", 16) {
            let mut s = base.clone();
            for _ in 0..1 + rng.below(3) {
                s = mutate(&mut rng, &s);
            }
            MUTATED.fetch_add(1, Ordering::Relaxed);
            if let Ok(parsed) = text::parse(&s) {
                ACCEPTED.fetch_add(1, Ordering::Relaxed);
                exercise(&parsed);
                check_round_trip(&parsed)?;
            }
        }
    }
}

/// The generator reaches most of the registry, every control-flow op among
/// them (prints one sample IR and the op types with --nocapture).
#[test]
fn generator_covers_the_op_registry() {
    let mut ops = 0;
    let mut types = std::collections::BTreeSet::new();
    for seed in 0..400u64 {
        let ir = random_ir(seed * 7919 + 1);
        for g in ir.graphs() {
            ops += g.num_ops();
            types.extend(g.ops().map(|o| o.op_type()));
        }
        if seed == 3 {
            eprintln!("{ir}");
        }
    }
    eprintln!("{ops} ops in 400 IRs; types: {types:?}");
    eprintln!(
        "fuzz_text so far: {} generated IRs, {} mutated texts ({} accepted)",
        GENERATED.load(Ordering::Relaxed),
        MUTATED.load(Ordering::Relaxed),
        ACCEPTED.load(Ordering::Relaxed)
    );
    for needed in ["Call", "Repeat", "If", "HostLoad", "HostStore", "MatMul", "Gather", "Softmax"] {
        assert!(types.contains(needed), "the generator never builds {needed}: {types:?}");
    }
    assert!(types.len() >= 40, "only {} op types: {types:?}", types.len());
}

/// Every registered op with extreme attribute values (each key it declares and
/// the generic ones) on ordinary, empty, huge and image-shaped inputs: an error
/// or a shape, never a panic. popart-ir is built with `overflow-checks` in
/// every profile (Cargo.toml), so shape arithmetic that would wrap panics
/// here instead of giving a small wrong shape.
#[test]
fn extreme_attributes_never_panic() {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let infos = [
        TensorInfo::new(DataType::Float32, Vec::<usize>::new()),
        TensorInfo::new(DataType::Float32, [0]),
        TensorInfo::new(DataType::Float32, [2, 3]),
        TensorInfo::new(DataType::Float32, [1usize << 40]),
        TensorInfo::new(DataType::Bool, [usize::MAX / 4]),
        TensorInfo::new(DataType::Uint32, [2]),
        TensorInfo::new(DataType::Int64, [3]),
        // Images and kernels for the convolution and pooling geometry.
        TensorInfo::new(DataType::Float32, [1, 2, 5, 5]),
        TensorInfo::new(DataType::Float32, [2, 1, 3, 3]),
        TensorInfo::new(DataType::Float32, [1, 0, 4, 4]),
        TensorInfo::new(DataType::Float32, [0, 1, 3, 3]),
        TensorInfo::new(DataType::Float32, [1, 2, 3, 5, 5]),
        TensorInfo::new(DataType::Float32, [2, 2, 2, 3, 3]),
        TensorInfo::new(DataType::Float32, [1, 2, 1usize << 40, 3]),
        TensorInfo::new(DataType::Float32, [1, 4]),
    ];
    let ts: Vec<TensorId> = infos
        .iter()
        .enumerate()
        .map(|(i, info)| ir.main_graph_mut().add_input(&format!("t{i}"), info.clone()).unwrap())
        .collect();
    let values = [
        AttrValue::Int(i64::MIN),
        AttrValue::Int(i64::MAX),
        AttrValue::Int(-1),
        AttrValue::Ints(vec![i64::MIN]),
        AttrValue::Ints(vec![i64::MAX, i64::MAX]),
        AttrValue::Ints(vec![-1, -1]),
        AttrValue::Ints(vec![i64::MAX, 2, -1]),
        AttrValue::Ints(vec![1 << 62, 4, 0]),
        AttrValue::Ints(vec![1 << 62; 4]),
        AttrValue::Ints(vec![1 << 40; 2]),
        AttrValue::Ints(vec![1 << 40; 4]),
        AttrValue::Ints(vec![1 << 62; 3]),
        AttrValue::Ints(vec![1 << 62; 6]),
        AttrValue::Ints(vec![i64::MAX; 4]),
        AttrValue::Int(1 << 62),
        AttrValue::Float(f64::NAN),
        AttrValue::Str(String::new()),
        AttrValue::Graph(main),
    ];
    let input_sets: Vec<Vec<(u32, TensorId)>> = vec![
        vec![],
        vec![(0, ts[2])],
        vec![(0, ts[3])],
        vec![(0, ts[4])],
        vec![(0, ts[2]), (1, ts[2])],
        vec![(0, ts[3]), (1, ts[3]), (2, ts[3])],
        vec![(0, ts[4]), (1, ts[4]), (2, ts[4]), (3, ts[4]), (4, ts[4])],
        vec![(0, ts[5]), (1, ts[2])],
        vec![(0, ts[2]), (1, ts[6]), (2, ts[2])],
        vec![(0, ts[0]), (u32::MAX, ts[1])],
        vec![(0, ts[7]), (1, ts[8])],
        vec![(0, ts[7]), (1, ts[8]), (2, ts[7])],
        vec![(0, ts[7])],
        vec![(0, ts[9]), (1, ts[10])],
        vec![(0, ts[11]), (1, ts[12])],
        vec![(0, ts[11])],
        vec![(0, ts[13]), (1, ts[8])],
        vec![(0, ts[13])],
        vec![(0, ts[7]), (1, ts[14])],
    ];
    let mut created = 0;
    for def in registered_ops() {
        // Every key the op declares, and the generic ones (unknown keys are errors).
        let mut keys: Vec<&str> = KEYS.to_vec();
        keys.extend(def.attributes().iter().map(|a| a.name));
        for key in &keys {
            for v in &values {
                for ins in &input_sets {
                    let mut attrs = Attributes::new().with(key, v.clone());
                    // Pair slices' keys so that slice arithmetic runs with the extremes.
                    if ["starts", "ends", "steps"].contains(key) {
                        for k in ["starts", "ends", "steps", "axes"] {
                            if attrs.get(k).is_none() {
                                attrs.set(k, AttrValue::Ints(vec![0]));
                            }
                        }
                    }
                    if ir.create_op_with_def(main, def, attrs, ins, "op").is_ok() {
                        created += 1;
                    }
                }
            }
        }
    }
    assert!(created > 0);
    ir.verify().unwrap();
    check_round_trip(&ir).unwrap();
}
