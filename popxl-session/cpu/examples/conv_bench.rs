//! Convolution throughput of the `cpu` device: forward, data gradient and weight
//! gradient for ResNet-style and MobileNet-style float32 shapes (3x3 stride 1
//! and 2, 1x1, depthwise 3x3, the 7x7 stride-2 stem), batch 1 and 32, from
//! 56x56 down to 7x7. `--suite 3d` times 3-d (video, volume) shapes instead,
//! batch 1 and 2: 3x3x3 convolutions from 64 channels on 16x56x56 to 256 on
//! 4x14x14, a 3x3x3 stride-2 downsampling, a (3, 7, 7) stride-(1, 2, 2) stem
//! and a 1x1x1 pointwise convolution.
//!
//! Each kernel is built through `build_kernel` exactly as a session does and
//! timed with the worker team capped at `--threads` (median of `--reps`
//! measurements of at least `--min-time` seconds). GFLOP/s counts 2 FLOPs per
//! multiply-add of the direct convolution (the shapes the Winograd method
//! takes do 2.25x fewer, so they can exceed the peak); "peak" is the
//! fraction of this machine's fp32 FMA peak on that many threads, probed on
//! the worker team before the table and again
//! after it (`popxl_cpu::peak::PeakProbe`); when the two disagree by more than
//! 10% the output says the host was disturbed. With
//! `--torch bench/torch_conv_bench.py` PyTorch (oneDNN) times the same shapes
//! in the same run and the table prints PyTorch's time over ours (above 1:
//! we are faster). The script runs as a server and the measurements
//! alternate, ours then PyTorch's, `--reps` times per pass, so that both
//! sides see the same phases of a shared machine.
//!
//! ```text
//! cargo run --release --example conv_bench -- --threads 2 --torch bench/torch_conv_bench.py
//! cargo run --release --example conv_bench -- --suite 3d --torch bench/torch_conv_bench.py
//! ```
//!
//! `--cpu-time` (Linux, with `--threads 1`) times our kernels by the calling
//! thread's CPU clock instead of the wall clock: comparisons between builds
//! that survive other processes sharing the cores.

use std::time::Instant;

use popart_ir::{AttrValue, Attributes, DataType, TensorInfo};
use popxl_cpu::kernel::{Kernel, KernelArgs, KernelSpec};
use popxl_cpu::kernels::build_kernel;
use popxl_cpu::team;

#[path = "support/buffers.rs"]
mod buffers;
#[path = "support/torch_server.rs"]
mod torch_server;
use buffers::{buffer, parse_list, Line};
use torch_server::{median, TorchServer};

struct Options {
    threads: usize,
    batches: Vec<usize>,
    reps: usize,
    min_time: f64,
    only: String,
    torch: Option<String>,
    cpu_time: bool,
    /// `2d` (default) or `3d`.
    suite: String,
}

fn options() -> Options {
    let mut o = Options {
        threads: 2,
        batches: vec![1, 32],
        reps: 3,
        min_time: 0.2,
        only: String::new(),
        torch: None,
        cpu_time: false,
        suite: "2d".into(),
    };
    let mut batches_set = false;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--threads" => o.threads = value.parse().expect("--threads takes an integer"),
            "--batches" => {
                o.batches = parse_list(&value);
                batches_set = true;
            }
            "--suite" => o.suite = value,
            "--reps" => o.reps = value.parse().expect("--reps takes an integer"),
            "--min-time" => o.min_time = value.parse().expect("--min-time takes seconds"),
            "--only" => o.only = value,
            "--torch" => o.torch = Some(value),
            "--cpu-time" => {
                o.cpu_time = true;
                i += 1;
                continue;
            }
            other => panic!("unknown option {other}; see the example's doc comment"),
        }
        i += 2;
    }
    assert!(o.suite == "2d" || o.suite == "3d", "--suite takes 2d or 3d");
    if o.suite == "3d" && !batches_set {
        o.batches = vec![1, 2];
    }
    o
}

/// One shape of the list of `bench/torch_conv_bench.py`: label, N, C_in,
/// spatial sizes, C_out, kernel, strides, pads (per dim, both sides), groups.
struct Shape {
    label: String,
    n: usize,
    ci: usize,
    size: Vec<usize>,
    co: usize,
    k: Vec<usize>,
    s: Vec<usize>,
    p: Vec<usize>,
    g: usize,
}

/// (label, C_in, H, C_out, k, stride, pad, groups).
type BaseShape = (&'static str, usize, usize, usize, usize, usize, usize, usize);

fn shapes(batches: &[usize]) -> Vec<Shape> {
    let base: [BaseShape; 13] = [
        ("stem7x7s2", 3, 224, 64, 7, 2, 3, 1),
        ("3x3s1_c64_56", 64, 56, 64, 3, 1, 1, 1),
        ("3x3s1_c128_28", 128, 28, 128, 3, 1, 1, 1),
        ("3x3s1_c256_14", 256, 14, 256, 3, 1, 1, 1),
        ("3x3s1_c512_7", 512, 7, 512, 3, 1, 1, 1),
        ("3x3s2_c64_56", 64, 56, 128, 3, 2, 1, 1),
        ("3x3s2_c256_14", 256, 14, 512, 3, 2, 1, 1),
        ("1x1_c256_56", 256, 56, 64, 1, 1, 0, 1),
        ("1x1_c1024_14", 1024, 14, 256, 1, 1, 0, 1),
        ("1x1_c2048_7", 2048, 7, 512, 1, 1, 0, 1),
        ("dw3x3_c64_56", 64, 56, 64, 3, 1, 1, 64),
        ("dw3x3_c256_14", 256, 14, 256, 3, 1, 1, 256),
        ("dw3x3_c512_7", 512, 7, 512, 3, 1, 1, 512),
    ];
    let mut v = Vec::new();
    for &n in batches {
        for (label, ci, h, co, k, s, p, g) in base {
            let label = format!("b{n}_{label}");
            v.push(Shape { label, n, ci, size: vec![h; 2], co, k: vec![k; 2], s: vec![s; 2], p: vec![p; 2], g });
        }
    }
    v
}

/// (label, C_in, [D, H, W], C_out, kernel, strides, pads, groups).
type Base3 = (&'static str, usize, [usize; 3], usize, [usize; 3], [usize; 3], [usize; 3], usize);

/// The 3-d list (`--suite 3d`).
fn shapes_3d(batches: &[usize]) -> Vec<Shape> {
    let base: [Base3; 6] = [
        ("stem3x7x7s122", 3, [16, 112, 112], 64, [3, 7, 7], [1, 2, 2], [1, 3, 3], 1),
        ("3x3x3_c64_16x56", 64, [16, 56, 56], 64, [3; 3], [1; 3], [1; 3], 1),
        ("3x3x3s2_c64_16x56", 64, [16, 56, 56], 128, [3; 3], [2; 3], [1; 3], 1),
        ("3x3x3_c128_8x28", 128, [8, 28, 28], 128, [3; 3], [1; 3], [1; 3], 1),
        ("3x3x3_c256_4x14", 256, [4, 14, 14], 256, [3; 3], [1; 3], [1; 3], 1),
        ("1x1x1_c256_8x28", 256, [8, 28, 28], 64, [1; 3], [1; 3], [0; 3], 1),
    ];
    let mut v = Vec::new();
    for &n in batches {
        for (label, ci, size, co, k, s, p, g) in base {
            let label = format!("b{n}_{label}");
            v.push(Shape { label, n, ci, size: size.into(), co, k: k.into(), s: s.into(), p: p.into(), g });
        }
    }
    v
}

/// Seconds on a clock: the wall clock, or the calling thread's CPU clock.
struct Clock {
    cpu: bool,
    wall: Instant,
}

impl Clock {
    fn new(cpu: bool) -> Self {
        Clock { cpu, wall: Instant::now() }
    }
    fn now(&self) -> f64 {
        if self.cpu {
            thread_cpu_seconds()
        } else {
            self.wall.elapsed().as_secs_f64()
        }
    }
}

/// CPU seconds of the calling thread (`CLOCK_THREAD_CPUTIME_ID`).
#[cfg(target_os = "linux")]
fn thread_cpu_seconds() -> f64 {
    #[repr(C)]
    struct Timespec {
        sec: i64,
        nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, tp: *mut Timespec) -> i32;
    }
    let mut t = Timespec { sec: 0, nsec: 0 };
    // SAFETY: `t` is a valid timespec; clock 3 is CLOCK_THREAD_CPUTIME_ID.
    unsafe { clock_gettime(3, &mut t) };
    t.sec as f64 + t.nsec as f64 * 1e-9
}

#[cfg(not(target_os = "linux"))]
fn thread_cpu_seconds() -> f64 {
    panic!("--cpu-time needs Linux")
}

/// One pass of one shape, built through `build_kernel` with its buffers.
struct Bench {
    kernel: Box<dyn Kernel>,
    inputs: Vec<Vec<Line>>,
    output: Vec<Line>,
}

impl Bench {
    fn new(op: &str, attrs: &Attributes, inputs: &[TensorInfo], out: &TensorInfo) -> Self {
        let spec = KernelSpec {
            def: popart_ir::lookup_op(op).expect("builtin op"),
            attrs,
            inputs: inputs.iter().enumerate().map(|(i, t)| (i as u32, t.clone())).collect(),
            outputs: vec![(0, out.clone())],
            check_indices: false,
            weight_invariant: false,
        };
        let kernel = build_kernel(&spec).expect("convolution kernel");
        let inputs = inputs.iter().enumerate().map(|(i, t)| buffer(t.nelms(), i as u64 + 1)).collect();
        let mut b = Bench { kernel, inputs, output: buffer(out.nelms(), 9) };
        b.run();
        b
    }

    fn run(&mut self) {
        let in_ptrs: Vec<*const u8> = self.inputs.iter().map(|b| b.as_ptr() as *const u8).collect();
        let out_ptrs = [self.output.as_mut_ptr() as *mut u8];
        let args = KernelArgs { inputs: &in_ptrs, outputs: &out_ptrs };
        // SAFETY: the buffers match the spec's infos, are 64-byte aligned and do not overlap.
        unsafe { self.kernel.run(&args) }.expect("no run-time checks");
    }

    /// Milliseconds of one call: one measurement of at least `min_time` seconds.
    fn measure(&mut self, min_time: f64, cpu: bool) -> f64 {
        let clock = Clock::new(cpu);
        let (mut iters, t0) = (0u32, clock.now());
        loop {
            self.run();
            iters += 1;
            let el = clock.now() - t0;
            if el >= min_time {
                return el / iters as f64 * 1e3;
            }
        }
    }
}

fn main() {
    let o = options();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let probe = popxl_cpu::peak::PeakProbe::before(o.threads);
    let peak = probe.before_gflops();
    println!(
        "{cpu}, {} threads; fp32 FMA peak {peak:.0} GFLOP/s before the table ({}; probed again after it)",
        o.threads,
        popxl_cpu::peak::isa()
    );
    let batches: Vec<String> = o.batches.iter().map(|b| b.to_string()).collect();
    let torch_args = [
        ("--threads", o.threads.to_string()),
        ("--batches", batches.join(",")),
        ("--min-time", o.min_time.to_string()),
        ("--suite", o.suite.clone()),
    ]
    .into_iter()
    .flat_map(|(k, v)| [k.to_string(), v])
    .collect::<Vec<_>>();
    let mut torch = o.torch.as_ref().and_then(|s| TorchServer::start(s, &torch_args));
    println!(
        "{:<22} {:>9} {:>9} {:>9} {:>7} {:>6} {:>6} {:>6} {:>6}",
        "shape", "fwd ms", "data ms", "wgt ms", "GFLOP/s", "peak", "t/fwd", "t/data", "t/wgt"
    );
    let f32s = |s: &[usize]| TensorInfo::new(DataType::Float32, s);
    let list = if o.suite == "3d" { shapes_3d(&o.batches) } else { shapes(&o.batches) };
    for Shape { label, n, ci, size, co, k, s, p, g } in list {
        if !label.contains(&o.only) {
            continue;
        }
        let ints = |v: &[usize]| AttrValue::Ints(v.iter().map(|&a| a as i64).collect());
        let attrs = Attributes::new()
            .with("strides", ints(&s))
            .with("pads", ints(&[p.clone(), p.clone()].concat()))
            .with("group", AttrValue::Int(g as i64));
        let out: Vec<usize> = (0..size.len()).map(|i| (size[i] + 2 * p[i] - k[i]) / s[i] + 1).collect();
        let (x, w, y) = (
            f32s(&[vec![n, ci], size.clone()].concat()),
            f32s(&[vec![co, ci / g], k.clone()].concat()),
            f32s(&[vec![n, co], out.clone()].concat()),
        );
        let flops = 2.0 * (n * co * (ci / g) * out.iter().product::<usize>() * k.iter().product::<usize>()) as f64;
        // Our measurements alternate with PyTorch's, `reps` each, medians kept.
        let mut time = |op: &str, ins: &[TensorInfo], out: &TensorInfo, pass: &str| {
            team::with_max_threads(o.threads, || {
                let mut b = Bench::new(op, &attrs, ins, out);
                let (mut ours, mut theirs) = (Vec::new(), Vec::new());
                for _ in 0..o.reps.max(1) {
                    ours.push(b.measure(o.min_time, o.cpu_time));
                    if let Some(t) = torch.as_mut().and_then(|t| t.measure(&label, pass)) {
                        theirs.push(t);
                    }
                }
                (median(ours), (!theirs.is_empty()).then(|| median(theirs)))
            })
        };
        let (fwd, tf) = time("Conv", &[x.clone(), w.clone()], &y, "fwd");
        let (data, td) = time("ConvDataGrad", &[y.clone(), w.clone(), x.clone()], &x, "data");
        let (wgt, tw) = time("ConvWeightsGrad", &[y.clone(), x.clone(), w.clone()], &w, "wgt");
        let theirs = [tf, td, tw];
        let gflops = 3.0 * flops / ((fwd + data + wgt) * 1e-3) / 1e9;
        let ratio = |i: usize, ours: f64| theirs[i].map_or("-".to_string(), |t| format!("{:.2}", t / ours));
        println!(
            "{label:<22} {fwd:>9.3} {data:>9.3} {wgt:>9.3} {gflops:>7.1} {:>5.0}% {:>6} {:>6} {:>6}",
            100.0 * gflops / peak,
            ratio(0, fwd),
            ratio(1, data),
            ratio(2, wgt)
        );
    }
    if torch.is_some() {
        println!("t/x: PyTorch's time over ours (above 1: faster than PyTorch), measurements alternated");
    }
    println!(
        "GFLOP/s and peak count the direct convolution's multiply-adds: the 3x3 stride-1 layers Winograd \
         takes do 2.25x fewer, so they can print above 100%"
    );
    let verdict = probe.after();
    println!("{}", verdict.describe());
    if verdict.peak().is_none() {
        println!("(the \"peak\" column above is a share of the probe before the table, which the host did not keep)");
    }
}
