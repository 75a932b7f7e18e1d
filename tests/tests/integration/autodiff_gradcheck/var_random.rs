//! Gradient checks of the var_random ops: `shaped_dropout` (its gradient applies
//! the same mask: the function is linear for a fixed mask, so central differences
//! agree only if forward and backward drop the same slices), also with a seed
//! derived inside the differentiated graph by `split_random_seed` (no gradient
//! flows to seeds). The var updates have no gradient (PopXL marks them ✗).

#[allow(unused_imports)]
use super::harness::*;
use popxl::{ops, HostArray};
use proptest::prelude::*;

proptest! {
    #![proptest_config(cfg(16))]

    #[test]
    fn shaped_dropout((s, mask, _) in broadcast_pair(), ratio in prop::sample::select(vec![0.0, 0.25, 0.5]), seed in any::<u64>()) {
        let x = Rng(seed).array(&s, uniform);
        let rng_seed = HostArray::from(vec![(seed >> 32) as u32, seed as u32]);
        let args = [Arg::Diff(x), Arg::Fixed(rng_seed)];
        let f = move |t: &[popxl::Tensor]| ops::shaped_dropout(&t[0], &t[1], &mask, ratio);
        gradcheck(&args, &f, F64, seed)?;
    }

    #[test]
    fn shaped_dropout_with_a_split_seed(s in shape(3), seed in any::<u64>()) {
        let x = Rng(seed).array(&s, uniform);
        let rng_seed = HostArray::from(vec![(seed >> 32) as u32, seed as u32]);
        let args = [Arg::Diff(x), Arg::Fixed(rng_seed)];
        let mask: Vec<usize> = s.iter().map(|&d| if d > 2 { 1 } else { d }).collect();
        let f = move |t: &[popxl::Tensor]| {
            let seeds = ops::split_random_seed(&t[1], 2)?;
            ops::shaped_dropout(&t[0], &seeds[1], &mask, 0.5)
        };
        gradcheck(&args, &f, F64, seed)?;
    }
}
