//! Random ops and seeds on the `cpu` device: `popxl::create_seeds` bit-exact with
//! PopXL's numpy implementation (values printed by `tests/fixtures/create_seeds.py`),
//! reproducibility of `random_uniform`, `random_normal`, `dropout` and
//! `shaped_dropout` across runs and sessions, different streams for different
//! seeds, moments and mask statistics, and `split_random_seed`.

use popxl::ops;
use popxl::{Ir, SeedOptions, Tensor};
use popxl_session::{Inputs, Session};

/// (seed, offset, batches_per_step, gradient_accumulation_factor, replicas, shape, values)
type SeedCase = (u64, u64, usize, usize, usize, &'static [usize], &'static [u32]);

const SEED_CASES: [SeedCase; 9] = [
    (0, 0, 1, 1, 1, &[2], &[2735729615, 3653403231]),
    (1, 0, 1, 1, 1, &[2], &[2198257139, 2032329983]),
    (42, 0, 1, 1, 1, &[2], &[3324115917, 383329928]),
    (42, 7, 1, 1, 1, &[2], &[1558446889, 182541328]),
    (4294967301, 0, 1, 1, 1, &[2], &[3325181635, 568244433]),
    (18446744073709551615, 0, 1, 1, 1, &[2], &[2920692346, 2353485455]),
    (18446744073709551615, 10, 1, 1, 1, &[2], &[2409491281, 3328213236]),
    (
        123456789,
        0,
        2,
        3,
        1,
        &[2, 3, 2],
        &[
            119025308, 3869700412, 3894247085, 2513686221, 3785556492, 1462633145, 2683913361, 1255452294, 3396094254,
            551782610, 3547247911, 832313074,
        ],
    ),
    (
        7,
        3,
        1,
        2,
        2,
        &[2, 2, 2],
        &[4105996077, 3335203224, 891986582, 1133954368, 3558143688, 3404113237, 641161836, 2210723432],
    ),
];

#[test]
fn create_seeds_matches_numpy() {
    for (seed, offset, bps, gaf, rep, shape, values) in SEED_CASES {
        let opts = SeedOptions { offset, batches_per_step: bps, gradient_accumulation_factor: gaf, replicas: rep };
        let got = popxl::create_seeds_with(seed, opts).unwrap();
        assert_eq!(got.shape(), shape, "seed {seed} offset {offset}");
        assert_eq!(got.iter().copied().collect::<Vec<u32>>(), values, "seed {seed} offset {offset}");
        if (offset, bps, gaf, rep) == (0, 1, 1, 1) {
            assert_eq!(popxl::create_seeds(seed), got);
        }
    }
}

/// Build a program reading a `uint32[2]` seed variable, run it `runs` times in one
/// session and return the values of `read` after each run.
fn run(seed: [u32; 2], runs: usize, build: impl FnOnce(&Tensor) -> popxl::Result<Vec<Tensor>>) -> Vec<Vec<Vec<f64>>> {
    let ir = Ir::new();
    let outs = {
        let _g = ir.main_graph().enter();
        let _s = popxl::in_sequence(true);
        let s = popxl::variable(seed.to_vec(), "seed").unwrap();
        let ys = build(&s).unwrap();
        // Keep each result in a variable so the session can read it.
        ys.iter()
            .enumerate()
            .map(|(i, y)| {
                let v = popxl::variable_as(popxl::HostArray::full(y.info(), 0.0), y.dtype(), &format!("out{i}"))?;
                ops::copy_var_update_(&v, y)?;
                Ok(v)
            })
            .collect::<popxl::Result<Vec<_>>>()
            .unwrap()
    };
    let mut session = Session::new(ir, "cpu").unwrap();
    session
        .scope(|s| {
            (0..runs)
                .map(|_| {
                    s.run(&Inputs::new())?;
                    outs.iter().map(|t| s.get_tensor_data(t).map(|a| a.to_f64_vec())).collect::<Result<Vec<_>, _>>()
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .unwrap()
}

fn moments(v: &[f64]) -> (f64, f64) {
    let m = v.iter().sum::<f64>() / v.len() as f64;
    (m, v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / v.len() as f64)
}

const N: usize = 100_000;

fn random_program(s: &Tensor) -> popxl::Result<Vec<Tensor>> {
    let u = ops::random_uniform(s, &[N], -1.0, 3.0, popxl::float32)?;
    let z = ops::random_normal(s, &[N], 0.5, 2.0, popxl::float32)?;
    let x = popxl::constant(vec![1.0f32; N], "x")?;
    let d = ops::dropout(&x, s, 0.25)?;
    let x2 = popxl::constant(ndarray::Array2::<f32>::ones((1000, 100)), "x2")?;
    let sd = ops::shaped_dropout(&x2, s, &[1000, 1], 0.4)?;
    Ok(vec![u, z, d, sd])
}

#[test]
fn random_ops_are_reproducible_across_runs_and_sessions() {
    let a = run([1, 2], 2, random_program);
    let b = run([1, 2], 1, random_program);
    assert_eq!(a[0], a[1], "second run of the same session");
    assert_eq!(a[0], b[0], "another session");
    let c = run([1, 3], 1, random_program);
    for k in 0..4 {
        assert_ne!(a[0][k], c[0][k], "output {k} for another seed");
    }
}

#[test]
fn moments_and_mask_statistics() {
    let r = &run([7, 11], 1, random_program)[0];
    let (m, v) = moments(&r[0]);
    assert!(r[0].iter().all(|&x| (-1.0..3.0).contains(&x)));
    assert!((m - 1.0).abs() < 0.02 && (v - 16.0 / 12.0).abs() < 0.03, "uniform {m} {v}");
    let (m, v) = moments(&r[1]);
    assert!((m - 0.5).abs() < 0.03 && (v - 4.0).abs() < 0.08, "normal {m} {v}");
    // Dropout keeps 75%, scaled by 4/3.
    let kept = r[2].iter().filter(|&&x| x != 0.0).count() as f64 / N as f64;
    assert!((kept - 0.75).abs() < 0.01, "dropout keeps {kept}");
    assert!(r[2].iter().all(|&x| x == 0.0 || (x - 4.0 / 3.0).abs() < 1e-6));
    // Shaped dropout: rows of 100 kept or dropped together, 60% of 1000 kept.
    let rows: Vec<&[f64]> = r[3].chunks(100).collect();
    assert!(rows.iter().all(|row| row.iter().all(|&x| x == row[0])));
    let kept = rows.iter().filter(|row| row[0] != 0.0).count() as f64 / 1000.0;
    assert!((kept - 0.6).abs() < 0.05, "shaped dropout keeps {kept}");
    assert!(rows.iter().all(|row| row[0] == 0.0 || (row[0] - 1.0 / 0.6).abs() < 1e-6));
}

#[test]
fn split_random_seed_gives_distinct_reproducible_seeds() {
    let split = |s: &Tensor| -> popxl::Result<Vec<Tensor>> {
        let seeds = ops::split_random_seed(s, 3)?;
        let again = ops::split_random_seed(&seeds[0], 2)?;
        let x = popxl::constant(vec![1.0f32; 1000], "x")?;
        let d1 = ops::dropout(&x, &seeds[1], 0.5)?;
        let d2 = ops::dropout(&x, &seeds[2], 0.5)?;
        Ok(vec![seeds[0].clone(), seeds[1].clone(), seeds[2].clone(), again[0].clone(), d1, d2])
    };
    let a = &run([5, 9], 1, split)[0];
    let b = &run([5, 9], 1, split)[0];
    assert_eq!(a, b);
    // The first word is kept; the others differ.
    assert!(a[..4].iter().all(|s| s[0] == 5.0));
    assert!(a[0] != a[1] && a[1] != a[2] && a[0] != a[2] && a[3] != a[0]);
    assert_ne!(a[4], a[5], "dropout masks of split seeds");
    // Outside a graph with a non-seed input: a typed error.
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let bad = popxl::variable(vec![1u32, 2, 3], "bad").unwrap();
    assert!(ops::split_random_seed(&bad, 2).is_err());
}
