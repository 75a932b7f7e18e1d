//! The few-positions forward pass (`dot`): its positions-major im2col and
//! dot-product tiles against the f64 loop, directly and through the kernel
//! builder.

use popart_ir::DataType;

use super::super::super::par::Simd;
use super::super::super::testutil::assert_close;
use super::super::dot;
use super::{check, inputs, Case};

/// Batch-1 shapes of fewer than 64 positions: stride 2 on 14² (49
/// positions: whole 7-position tiles), asymmetric padding and a dilation
/// (partial position tiles), taps not a multiple of 16 (a masked last step),
/// and output channels that leave 1- and 2-row tiles.
const CASES: [(Case, usize); 4] = [
    ((1, 1, 256, 130, 14, 14, 3, 3, [1, 1, 1, 1], [1, 1]), 2),
    ((1, 1, 100, 128, 13, 12, 3, 3, [2, 0, 1, 1], [1, 1]), 2),
    ((1, 1, 72, 97, 8, 9, 3, 3, [1, 1, 1, 1], [2, 1]), 1),
    ((1, 2, 60, 64, 11, 11, 2, 2, [0, 1, 1, 0], [1, 1]), 2),
];

#[test]
fn dot_tiles_match_a_naive_loop() {
    if Simd::best() != Simd::Avx512 {
        return;
    }
    for (i, &(c, s)) in CASES.iter().enumerate() {
        let inp = inputs(c, s, 900 + i as u64);
        let g = &inp.g;
        let (kdim, op, ip) = (g.kdim(), g.op(), g.ip());
        let (ci_g, co_g) = (g.ci_g, g.co_g);
        assert!(op < dot::MAX_POSITIONS, "{c:?}: {op} positions");
        let mut y = vec![f32::NAN; g.groups * co_g * op];
        // The transposed matrix padded by 3 columns: rows `ld` apart.
        let ld = kdim + 3;
        let mut colt = vec![f32::NAN; op * ld];
        for gi in 0..g.groups {
            // SAFETY: group `gi` of image 0; `colt` holds `op` rows of `ld >= kdim`;
            // `y` the group's `co_g` rows of `op`; the CPU has AVX-512.
            unsafe {
                dot::im2col_t(g, inp.x.as_ptr().add(gi * ci_g * ip), 0..op, colt.as_mut_ptr(), ld);
                let (w, y) = (inp.w.as_ptr().add(gi * co_g * kdim), y.as_mut_ptr().add(gi * co_g * op));
                let tiles = dot::Tiles { w, kdim, colt: colt.as_ptr(), ldc: ld, y, op };
                // Two calls: channel ranges as the tasks cut them.
                let half = co_g / 2;
                tiles.forward(0..half);
                tiles.forward(half..co_g);
            }
        }
        let got: Vec<f64> = y.iter().map(|&v| v as f64).collect();
        assert_close(&got, &inp.want[0], 1e-4);
    }
}

#[test]
fn few_position_convolutions_match_a_naive_loop() {
    // Through the builder: the forward pass takes the dot tiles where the
    // team has several threads (the gradients their own methods).
    for (i, &(c, s)) in CASES.iter().enumerate() {
        check(c, s, DataType::Float32, 920 + i as u64);
    }
}
