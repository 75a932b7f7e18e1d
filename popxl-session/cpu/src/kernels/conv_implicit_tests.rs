//! Tests of the implicit-GEMM convolution ([`super`]): its plans run
//! directly and through the kernel builder, against the f64 loop.

use popart_ir::DataType;

use super::super::conv::{Pass, Task};
use super::super::conv_tests::{check, inputs, Case, Inputs};
use super::super::par::Simd;
use super::super::testutil::assert_close;
use super::Implicit;

/// Cases the implicit kernel takes: channel counts that leave partial
/// tiles, groups, asymmetric and large padding, dilation, small planes
/// whose tiles span images, a 1-d plane, many input channels (several
/// blocks of `k`), enough weights for several blocks of channels,
/// pointwise data gradients, and data gradients of few positions (the
/// last four: transposed).
const CASES: [Case; 13] = [
    (2, 1, 16, 24, 20, 20, 3, 3, [1, 1, 1, 1], [1, 1]),
    (3, 2, 5, 17, 9, 11, 3, 3, [1, 0, 2, 1], [1, 1]),
    (2, 1, 20, 16, 12, 13, 5, 5, [2, 2, 2, 2], [2, 2]),
    (5, 1, 3, 20, 7, 7, 3, 3, [1, 1, 1, 1], [1, 1]),
    (4, 1, 8, 32, 1, 40, 1, 5, [0, 2, 0, 2], [1, 1]),
    (4, 1, 300, 20, 6, 7, 3, 3, [1, 1, 1, 1], [1, 1]),
    (7, 1, 460, 300, 4, 5, 3, 3, [1, 1, 1, 1], [1, 1]),
    (4, 1, 24, 18, 6, 6, 1, 1, [0, 0, 0, 0], [1, 1]),
    (3, 1, 17, 19, 8, 8, 2, 4, [0, 3, 1, 0], [1, 1]),
    (1, 1, 40, 24, 5, 7, 1, 1, [0, 0, 0, 0], [1, 1]),
    (2, 2, 20, 37, 3, 4, 1, 1, [0, 0, 0, 0], [1, 1]),
    (1, 1, 24, 20, 4, 5, 3, 3, [1, 1, 1, 1], [1, 1]),
    (2, 2, 16, 17, 3, 5, 3, 2, [2, 1, 0, 1], [1, 2]),
];

/// Stride-2 cases: a stem, groups with asymmetric padding, dilation, and
/// wide planes whose inner panels split their input rows (a 7x7 stem and
/// a dilated 3x5).
const STRIDE2: [Case; 6] = [
    (2, 1, 3, 16, 6, 80, 7, 7, [3, 3, 3, 3], [1, 1]),
    (2, 1, 5, 16, 8, 70, 3, 5, [1, 2, 1, 2], [1, 2]),
    (2, 1, 16, 24, 20, 20, 3, 3, [1, 1, 1, 1], [1, 1]),
    (1, 1, 3, 20, 40, 37, 7, 7, [3, 3, 2, 2], [1, 1]),
    (3, 2, 5, 17, 17, 19, 3, 3, [1, 0, 2, 1], [1, 1]),
    (4, 1, 8, 16, 12, 13, 2, 3, [0, 1, 0, 1], [2, 1]),
];

/// Runs the implicit plans of case `c` (stride `s`) directly, the
/// positions cut into `pieces` tasks, and checks the forward pass and the
/// data gradient against [`naive`].
fn check_direct(c: Case, s: usize, pieces: usize, seed: u64) {
    let groups = c.1;
    let Inputs { g, want: [want_y, want_dx, _], x, w, dy } = inputs(c, s, seed);
    let mut y = vec![f32::NAN; want_y.len()];
    let mut dx = vec![f32::NAN; want_dx.len()];
    let mut ran = [false; 2];
    for pass in [Pass::Forward, Pass::Data] {
        // Data gradients with fewer than MIN_CHANNELS input channels are left to
        // im2col, pointwise forward passes to `Method::Pointwise`, forward
        // passes of few positions to im2col.
        let Some(im) = Implicit::for_tier(&g, pass, Simd::Avx2) else {
            let few = g.n * g.op() < super::MIN_POSITIONS;
            assert!(pass == Pass::Data || g.pointwise() || few, "the implicit plan refused {c:?}");
            continue;
        };
        ran[(pass == Pass::Data) as usize] = true;
        let mut scratch = vec![0.0f32; im.scratch_len()];
        let (src, dst) = if pass == Pass::Forward { (&x, &mut y) } else { (&dy, &mut dx) };
        let (p, m) = (im.f.n * im.f.op(), im.f.co_g);
        let step = p.div_ceil(pieces);
        for gi in 0..groups {
            for lo in (0..p).step_by(step) {
                for o0 in [0, m / 2] {
                    let o1 = if o0 == 0 { m / 2 } else { m };
                    let t = Task { n: 0, g: gi, lo, hi: (lo + step).min(p), o0, o1 };
                    // SAFETY: the CPU has AVX2 and FMA (checked by the caller); the
                    // slices hold the whole tensors; tasks write disjoint outputs.
                    unsafe {
                        let (x, w, y, sc) = (src.as_ptr(), w.as_ptr(), dst.as_mut_ptr(), scratch.as_mut_ptr());
                        if im.trans {
                            im.run_trans(t, x, w, y, sc)
                        } else {
                            im.run(t, x, w, y, sc)
                        }
                    };
                }
            }
        }
    }
    assert!(ran[0] || ran[1], "the implicit plan refused both passes of {c:?}");
    let back = |v: &[f32]| v.iter().map(|&a| a as f64).collect::<Vec<f64>>();
    if ran[0] {
        assert_close(&back(&y), &want_y, 1e-4);
    }
    if ran[1] {
        assert_close(&back(&dx), &want_dx, 1e-4);
    }
}

#[test]
fn implicit_gemm_matches_a_naive_loop() {
    if Simd::best() < Simd::Avx2 {
        return;
    }
    for (i, c) in CASES.into_iter().enumerate() {
        for pieces in [1, 3] {
            check_direct(c, 1, pieces, 600 + i as u64);
        }
    }
    for (i, c) in STRIDE2.into_iter().enumerate() {
        for pieces in [1, 3] {
            check_direct(c, 2, pieces, 650 + i as u64);
        }
    }
}

#[test]
fn convolutions_the_implicit_plan_takes_match_a_naive_loop() {
    // Through the kernel builder: on an AVX2 CPU these run the implicit
    // method (the weight gradient runs im2col), elsewhere the others.
    for (i, c) in CASES.into_iter().enumerate() {
        check(c, 1, DataType::Float32, 700 + i as u64);
    }
    for (i, c) in STRIDE2.into_iter().enumerate() {
        check(c, 2, DataType::Float32, 750 + i as u64);
    }
}
