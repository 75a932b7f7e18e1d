//! The masked depthwise sweeps (`depthwise`): all three passes against the
//! f64 loop, directly and through the kernel builder.

use popart_ir::DataType;

use super::super::super::par::Simd;
use super::super::super::testutil::assert_close;
use super::super::depthwise::Masked;
use super::super::{Pass, Task};
use super::{check, inputs, Case, Inputs};

/// Depthwise stride-1 shapes whose output rows are as wide as the input's:
/// 7x7 and 14x14 planes (a masked last vector), a plane of more vectors
/// than one sweep holds (20x20: 25 vectors), 5x5 taps (weight-gradient taps
/// in runs of 9 and single ones), a dilation, padding on one side only (the
/// rows as well: a taller output than input), a 1-row plane, a 2x3 kernel
/// of 6 taps and a 1x1 one; the last is large enough for the team to split.
const CASES: [Case; 10] = [
    (3, 8, 1, 1, 7, 7, 3, 3, [1, 1, 1, 1], [1, 1]),
    (2, 5, 1, 1, 14, 14, 3, 3, [1, 1, 1, 1], [1, 1]),
    (2, 3, 1, 1, 20, 20, 3, 3, [1, 1, 1, 1], [1, 1]),
    (2, 4, 1, 1, 9, 6, 5, 5, [2, 2, 2, 2], [1, 1]),
    (3, 2, 1, 1, 11, 10, 3, 3, [2, 2, 2, 2], [2, 2]),
    (2, 3, 1, 1, 6, 9, 3, 3, [0, 2, 3, 0], [1, 1]),
    (4, 3, 1, 1, 1, 37, 1, 5, [0, 2, 0, 2], [1, 1]),
    (2, 3, 1, 1, 5, 7, 2, 3, [1, 1, 0, 1], [1, 1]),
    (2, 6, 1, 1, 4, 5, 1, 1, [0, 0, 0, 0], [1, 1]),
    (32, 64, 1, 1, 7, 7, 3, 3, [1, 1, 1, 1], [1, 1]),
];

#[test]
fn masked_depthwise_sweeps_match_a_naive_loop() {
    // Every tier the CPU has, whatever the planner picks for it.
    for simd in [Simd::Avx2, Simd::Avx512].into_iter().filter(|&s| s <= Simd::best()) {
        for (i, &c) in CASES.iter().enumerate() {
            sweeps_match(c, simd, 1000 + i as u64);
        }
    }
}

/// Runs the three masked passes of case `c` in the tier `simd` directly
/// (outputs starting as NaN) and checks them against [`super::naive`].
fn sweeps_match(c: Case, simd: Simd, seed: u64) {
    let (n, groups, ..) = c;
    let Inputs { g, want: [want_y, want_dx, want_dw], x, w, dy } = inputs(c, 1, seed);
    let all = |items: usize| Task { n: 0, g: 0, lo: 0, hi: items, o0: 0, o1: 1 };
    let plan = |pass| Masked::plan_for::<f32>(&g, pass, simd).unwrap_or_else(|| panic!("{c:?}: no masked plan"));
    let mut y = vec![f32::NAN; want_y.len()];
    let mut dx = vec![f32::NAN; want_dx.len()];
    let mut dw = vec![f32::NAN; want_dw.len()];
    // SAFETY: the CPU runs `simd` (the caller's filter); the vectors hold the
    // case's planes, weights and weight gradients.
    unsafe {
        plan(Pass::Forward).planes(all(n * groups), groups, x.as_ptr(), w.as_ptr(), y.as_mut_ptr());
        plan(Pass::Data).planes(all(n * groups), groups, dy.as_ptr(), w.as_ptr(), dx.as_mut_ptr());
        plan(Pass::Weights).channels(all(groups), (groups, n), x.as_ptr(), dy.as_ptr(), dw.as_mut_ptr());
    }
    let back = |v: &[f32]| v.iter().map(|&a| a as f64).collect::<Vec<f64>>();
    assert_close(&back(&y), &want_y, 1e-5);
    assert_close(&back(&dx), &want_dx, 1e-5);
    assert_close(&back(&dw), &want_dw, 1e-4);
}

#[test]
fn masked_depthwise_passes_through_the_kernel_builder_match_a_naive_loop() {
    for (i, &c) in CASES.iter().enumerate() {
        check(c, 1, DataType::Float32, 1100 + i as u64);
    }
}
