//! Pointwise passes on the folded GEMM (`folded`): taken where it says,
//! and matching the f64 loop through the kernel builder on one thread and
//! two.

use popart_ir::ops::conv::conv_geometry;
use popart_ir::DataType;

use super::super::super::par::{self, Simd};
use super::super::folded::Folded;
use super::super::Pass;
use super::{check, conv_attrs, Case};
use crate::team;

/// Batches of pointwise layers: 49 positions (the tile's columns cut
/// inside images), 15 in two groups, 196 over the team with more output
/// than input channels (the weight gradient cut by rows), 4 positions.
const CASES: [Case; 4] = [
    (3, 1, 70, 40, 7, 7, 1, 1, [0; 4], [1, 1]),
    (5, 2, 33, 17, 3, 5, 1, 1, [0; 4], [1, 1]),
    (2, 1, 130, 260, 14, 14, 1, 1, [0; 4], [1, 1]),
    (4, 1, 9, 600, 2, 2, 1, 1, [0; 4], [1, 1]),
];

#[test]
fn folded_pointwise_passes_match_a_naive_loop() {
    let here = Simd::best() == Simd::Avx512 && par::intel();
    for (i, &c) in CASES.iter().enumerate() {
        let (n, groups, ci_g, co_g, h, w, ..) = c;
        let geo = conv_geometry(&[n, groups * ci_g, h, w], &[groups * co_g, ci_g, 1, 1], &conv_attrs(c, 1)).unwrap();
        // The plan takes every pass of these on Intel's AVX-512 CPUs, none elsewhere.
        for pass in [Pass::Forward, Pass::Data, Pass::Weights] {
            assert_eq!(Folded::takes(&geo, pass), here, "{c:?} {pass:?}");
        }
        for threads in [1, 2] {
            team::with_max_threads(threads, || check(c, 1, DataType::Float32, 940 + i as u64));
        }
    }
    // One image or planes of 256 positions: the weight gradient only (the
    // per-image products of the others fill the tiles with no copy).
    let one: Case = (1, 1, 8, 24, 7, 7, 1, 1, [0; 4], [1, 1]);
    let large: Case = (2, 1, 40, 8, 16, 16, 1, 1, [0; 4], [1, 1]);
    for (i, c) in [one, large].into_iter().enumerate() {
        let (n, _, ci, co, h, w, ..) = c;
        let geo = conv_geometry(&[n, ci, h, w], &[co, ci, 1, 1], &conv_attrs(c, 1)).unwrap();
        assert!(!Folded::takes(&geo, Pass::Forward) && !Folded::takes(&geo, Pass::Data));
        assert_eq!(Folded::takes(&geo, Pass::Weights), here);
        for threads in [1, 2] {
            team::with_max_threads(threads, || check(c, 1, DataType::Float32, 950 + i as u64));
        }
    }
}
