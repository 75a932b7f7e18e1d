//! Gradient checks of the indexing ops: subsample, split, scatter,
//! scatter_reduce (sum, max, min, none; with and without initial values),
//! dynamic_slice and dynamic_update (wrapping slices included), onehot (its
//! values), groupedgather and tied_gather. Indices are fixed inputs.

use super::harness::Rng;
use super::harness::*;
use ndarray::{ArrayD, IxDyn};
use popxl::ops::{self, GatherOptions, GroupedGatherOptions, ScatterReduceOptions};
use popxl::{HostArray, Tensor};
use proptest::prelude::*;

fn idx(shape: &[usize], v: Vec<i32>) -> Arg {
    Arg::Fixed(HostArray::from(ArrayD::from_shape_vec(IxDyn(shape), v).expect("index shape")))
}

/// A shape of rank 1..=max_rank (dims 1..4).
fn nonscalar(max_rank: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..4, 1..=max_rank)
}

/// A random permutation of `0..n` (as indices, negative half the time).
fn permutation(rng: &mut Rng, n: usize) -> Vec<i32> {
    let mut p: Vec<i32> = (0..n as i32).collect();
    for i in (1..n).rev() {
        p.swap(i, rng.below(i + 1));
    }
    p.into_iter().map(|v| if rng.next_u64() & 1 == 1 { v - n as i32 } else { v }).collect()
}

proptest! {
    #![proptest_config(cfg(12))]

    #[test]
    fn subsample(s in shape(3), seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let strides: Vec<i64> = s.iter().map(|_| 1 + rng.below(3) as i64).collect();
        let x = rng.array(&s, uniform);
        gradcheck(&[Arg::Diff(x)], &move |t| ops::subsample(&t[0], &strides), F64, seed)?;
    }

    #[test]
    fn split_with_unused_parts(s in nonscalar(3), seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let axis = rng.below(s.len());
        let mut dims = s.clone();
        dims[axis] += 2;
        let first = 1 + rng.below(dims[axis] - 1);
        let sizes = vec![first, dims[axis] - first];
        let x = rng.array(&dims, uniform);
        let skip_first = rng.next_u64() & 1 == 1;
        let f = move |t: &[Tensor]| {
            let parts = ops::split(&t[0], sizes.clone(), axis as i64)?;
            // Scale one part, drop the other sometimes (its gradient is zero).
            let scaled = ops::add(&parts[1], &parts[1])?;
            if skip_first { Ok(scaled) } else { ops::concat(&[&scaled, &parts[0]], axis as i64) }
        };
        gradcheck(&[Arg::Diff(x)], &f, F64, seed)?;
    }

    #[test]
    fn scatter_elements_and_rows(n in 1usize..5, m in 1usize..4, axis in 0usize..2, rows in any::<bool>(), seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let tshape = [n + 1, m + 1];
        let k = 1 + rng.below(tshape[axis]);
        let mut vshape = tshape;
        vshape[axis] = k;
        vshape[1 - axis] = if axis == 0 { m } else { n };
        let t = rng.array(&tshape, uniform);
        let v = rng.array(&vshape, uniform);
        // Distinct targets per line along the axis: no write overwrites another.
        let indices = if rows {
            idx(&[k], permutation(&mut rng, tshape[axis])[..k].to_vec())
        } else {
            let lines = vshape[1 - axis];
            let mut vals = vec![0i32; k * lines];
            for l in 0..lines {
                let p = permutation(&mut rng, tshape[axis]);
                for (j, &target) in p.iter().take(k).enumerate() {
                    let pos = if axis == 0 { j * lines + l } else { l * k + j };
                    vals[pos] = target;
                }
            }
            idx(&vshape, vals)
        };
        let args = [Arg::Diff(t), indices, Arg::Diff(v)];
        gradcheck(&args, &move |t| ops::scatter(&t[0], &t[1], &t[2], axis as i64), F64, seed)?;
    }

    #[test]
    fn scatter_reduce(k in 1usize..6, m in 1usize..4, size in 1usize..4, red in 0usize..4, init in any::<bool>(), seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let reduction = ["sum", "max", "min", "none"][red];
        let data = rng.array(&[k, m], uniform);
        // `none` needs distinct targets (PopART's gradient credits every write).
        let (k, indices) = if reduction == "none" {
            let k = k.min(size);
            (k, permutation(&mut rng, size)[..k].to_vec())
        } else {
            (k, (0..k).map(|_| rng.below(2 * size) as i32 - size as i32).collect())
        };
        let data = data.slice_move(ndarray::s![..k, ..]).into_dyn();
        let mut args = vec![Arg::Diff(data), idx(&[k], indices)];
        if init {
            args.push(Arg::Diff(rng.array(&[size, m], uniform)));
        }
        let f = move |t: &[Tensor]| {
            let opts = ScatterReduceOptions {
                initial_values: t.get(2),
                axis_size: if init { None } else { Some(size) },
                ..Default::default()
            };
            ops::scatter_reduce(&t[0], &t[1], reduction, opts)
        };
        gradcheck(&args, &f, F64, seed)?;
    }

    #[test]
    fn scatter_reduce_elements_along_the_last_axis(n in 1usize..4, m in 1usize..5, seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let data = rng.array(&[n, m], uniform);
        let indices = (0..n * m).map(|_| rng.below(3) as i32).collect();
        let args = [Arg::Diff(data), idx(&[n, m], indices)];
        let f = |t: &[Tensor]| {
            let opts = ScatterReduceOptions { axis: -1, axis_size: Some(3), ..Default::default() };
            ops::scatter_reduce(&t[0], &t[1], "sum", opts)
        };
        gradcheck(&args, &f, F64, seed)?;
    }

    #[test]
    fn dynamic_slice_and_update(s in nonscalar(3), update in any::<bool>(), seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let axes: Vec<i64> = (0..s.len() as i64).filter(|_| rng.next_u64() & 1 == 1).collect();
        let sizes: Vec<i64> = axes.iter().map(|&a| 1 + rng.below(s[a as usize]) as i64).collect();
        // Any offset in [0, dim): slices past the end wrap around.
        let offsets: Vec<i32> = axes.iter().map(|&a| rng.below(s[a as usize]) as i32).collect();
        let mut slice_shape = s.clone();
        for (&a, &z) in axes.iter().zip(&sizes) {
            slice_shape[a as usize] = z as usize;
        }
        let t = rng.array(&s, uniform);
        let index = idx(&[axes.len()], offsets);
        if update {
            let u = rng.array(&slice_shape, uniform);
            let f = move |t: &[Tensor]| ops::dynamic_update(&t[0], &t[1], &t[2], &axes, &sizes, false);
            gradcheck(&[Arg::Diff(t), index, Arg::Diff(u)], &f, F64, seed)?;
        } else {
            let f = move |t: &[Tensor]| ops::dynamic_slice(&t[0], &t[1], &axes, &sizes, true);
            gradcheck(&[Arg::Diff(t), index], &f, F64, seed)?;
        }
    }

    #[test]
    fn onehot_values(s in shape(2), classes in 1usize..5, axis_pick in any::<u64>(), seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let n: usize = s.iter().product();
        // Indices in [-C - 1, C]: the ends are out of range (an all-off row).
        let indices = (0..n).map(|_| rng.below(2 * classes + 2) as i32 - classes as i32 - 1).collect();
        let axis = (axis_pick % (s.len() as u64 + 1)) as i64;
        let values = rng.array(&[2], uniform);
        let args = [Arg::Fixed(HostArray::from(ArrayD::from_shape_vec(IxDyn(&s), indices).expect("shape"))), Arg::Diff(values)];
        let f = move |t: &[Tensor]| {
            let c = popxl::constant(classes as i32, "classes")?;
            ops::onehot(&t[0], &c, &t[1], axis)
        };
        gradcheck(&args, &f, F64, seed)?;
    }

    #[test]
    fn grouped_and_tied_gathers(groups in 2usize..4, n in 1usize..4, m in 1usize..3, k in 1usize..4, seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let x = rng.array(&[groups, n, m], uniform);
        // Repeated and out-of-range (zero_OOR) indices included.
        let indices = (0..groups * k).map(|_| rng.below(2 * n + 1) as i32 - n as i32).collect();
        let args = [Arg::Diff(x), idx(&[groups, k], indices)];
        let f = move |t: &[Tensor]| {
            let o = GroupedGatherOptions { axis: 1, group_size: groups, zero_OOR: true, ..Default::default() };
            ops::groupedgather(&t[0], &t[1], o)
        };
        gradcheck(&args, &f, F64, seed)?;
        let x = rng.array(&[n, m], uniform);
        let indices = (0..k).map(|_| rng.below(n) as i32).collect();
        let args = [Arg::Diff(x), idx(&[k], indices)];
        let f = |t: &[Tensor]| ops::tied_gather(&t[0], &t[1], GatherOptions { axis: 0, ..Default::default() });
        gradcheck(&args, &f, F64, seed)?;
    }
}
