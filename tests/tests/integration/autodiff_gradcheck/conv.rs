//! Gradient checks of `conv` (PopXL ✓, `ConvDataGrad` and `ConvWeightsGrad`)
//! w.r.t. the input and the weight, over random 1-d and 2-d geometries:
//! stride, asymmetric padding, dilation, groups (depthwise included) and
//! every pad type. `conv_transpose` has no gradient (PopXL ✗).

use super::harness::Rng;
use super::harness::*;
use popxl::ops::{self, ConvOptions, PadType};
use proptest::prelude::*;

/// A random convolution: (x shape, w shape, options), always valid.
fn geometry() -> impl Strategy<Value = (Vec<usize>, Vec<usize>, ConvOptions)> {
    let dims = prop::sample::select(vec![1usize, 2]);
    (dims, 1usize..3, 1usize..3, 1usize..3, 0usize..4, any::<u64>()).prop_map(|(nd, n, cig, cog, mode, bits)| {
        let groups = 1 + (bits % 3) as usize;
        let mut r = Rng(bits);
        let k: Vec<usize> = (0..nd).map(|_| 1 + r.below(3)).collect();
        let s: Vec<usize> = (0..nd).map(|_| 1 + r.below(2)).collect();
        let d: Vec<usize> = (0..nd).map(|_| 1 + r.below(2)).collect();
        let p: Vec<usize> = (0..2 * nd).map(|_| r.below(3)).collect();
        let size: Vec<usize> = (0..nd).map(|i| (k[i] - 1) * d[i] + 1 + r.below(4)).collect();
        let pad_type = [PadType::NotSet, PadType::SameUpper, PadType::SameLower, PadType::Valid][mode];
        // Depthwise (C_in / groups == 1) one time in two.
        let cig = if bits >> 40 & 1 == 1 { 1 } else { cig };
        let x = [vec![n, cig * groups], size].concat();
        let w = [vec![cog * groups, cig], k].concat();
        let i64s = |v: &[usize]| v.iter().map(|&v| v as i64).collect::<Vec<_>>();
        let o = ConvOptions::default()
            .stride(i64s(&s))
            .padding(i64s(&p))
            .dilation(i64s(&d))
            .groups(groups as i64)
            .pad_type(pad_type);
        (x, w, o)
    })
}

proptest! {
    #![proptest_config(cfg(24))]

    #[test]
    fn conv((xs, ws, o) in geometry(), seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let (x, w) = (rng.array(&xs, uniform), rng.array(&ws, uniform));
        let f = move |t: &[popxl::Tensor]| ops::conv_with(&t[0], &t[1], &o);
        gradcheck(&[Arg::Diff(x), Arg::Diff(w)], &f, F64, seed)?;
    }
}

/// A 1x1 depthwise convolution padded only at the end (found by the property test
/// above): its output is wider than its input, so it is not a pointwise product.
#[test]
fn one_by_one_conv_with_end_padding() {
    let o = ConvOptions::default()
        .stride(vec![1])
        .padding(vec![0, 2])
        .dilation(vec![1])
        .groups(3)
        .pad_type(PadType::NotSet);
    let seed = 161949765u64;
    let mut rng = Rng(seed);
    let (x, w) = (rng.array(&[1, 3, 2], uniform), rng.array(&[3, 1, 1], uniform));
    let f = move |t: &[popxl::Tensor]| ops::conv_with(&t[0], &t[1], &o);
    gradcheck(&[Arg::Diff(x), Arg::Diff(w)], &f, F64, seed).expect("gradients match");
}
