//! A shortened run of the MNIST example: the loss falls and the test accuracy is
//! far above chance (10%).

use super::resume::mnist::{app, data};

#[test]
fn short_mnist_training_learns() {
    // A larger learning rate than the guide's 0.005 gets past the initial plateau in few steps.
    let cfg = app::Config { limit_batches: Some(300), lr: 0.05, progress: false, ..app::Config::default() };
    let train_set = data::load_split(&cfg.data, "train").expect("bundled MNIST train split");
    let test_set = data::load_split(&cfg.data, "t10k").expect("bundled MNIST test split");
    assert_eq!((train_set.len(), test_set.len()), (8000, 2000));

    let report = app::train(&cfg, &train_set).expect("training runs");
    assert_eq!(report.losses.len(), 300);
    let mean = |s: &[f32]| s.iter().sum::<f32>() / s.len() as f32;
    let (first, last) = (mean(&report.losses[..50]), mean(&report.losses[250..]));
    // Untrained, the loss is about ln(10) = 2.30.
    assert!((first - 10f32.ln()).abs() < 0.3, "initial loss {first}");
    assert!(last < first - 1.0, "loss did not fall enough: {first} -> {last}");

    let accuracy = app::test(&cfg, &report.params, &test_set).expect("testing runs");
    assert!(accuracy > 75.0, "accuracy {accuracy}% after 300 steps");
}

#[test]
fn several_batches_per_run_match_one_batch_per_run() {
    // num_host_transfers only changes how batches are grouped into runs, not the maths.
    let base = app::Config { limit_batches: Some(40), progress: false, ..app::Config::default() };
    let train_set = data::load_split(&base.data, "train").expect("bundled MNIST train split");
    let one = app::train(&base, &train_set).expect("one batch per run");
    let four = app::train(&app::Config { host_transfers: 4, ..base }, &train_set).expect("four batches per run");
    assert_eq!(one.losses.len(), four.losses.len());
    for (a, b) in one.losses.iter().zip(&four.losses) {
        assert!((a - b).abs() < 1e-5, "{a} vs {b}");
    }
}

use popxl::checkpoint;

#[test]
fn weights_round_trip_through_npy_files_and_npz_archives() {
    let dir = std::env::temp_dir().join(format!("popxl-npy-{}", std::process::id()));
    let params = app::init_params(4, 7);
    let names = ["W0", "b0", "W1", "b1"];
    checkpoint::save(&dir, &params).expect("save");
    // The header numpy writes for a float32 [784, 4] array, padded to 64 bytes.
    let raw = std::fs::read(dir.join("W0.npy")).expect("read back");
    let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (784, 4), }";
    assert_eq!(&raw[..8], b"\x93NUMPY\x01\x00");
    assert_eq!(&raw[10..10 + header.len()], header.as_bytes());
    assert_eq!((raw.len() - 4 * 784 * 4) % 64, 0);
    let load = |p: &std::path::Path| checkpoint::select(p, checkpoint::load(p).expect("load"), &names);
    assert_eq!(load(&dir).expect("select"), params);
    // The same arrays as one .npz archive: stored members named `<name>.npy`, as numpy.savez.
    let npz = dir.join("weights.npz");
    checkpoint::save(&npz, &params).expect("save npz");
    let bytes = std::fs::read(&npz).expect("read npz");
    assert_eq!(&bytes[..4], b"PK\x03\x04");
    let w0_at = bytes.windows(6).position(|w| w == b"W0.npy").expect("member W0.npy");
    assert!(bytes[w0_at..].windows(8).any(|w| w == b"\x93NUMPY\x01\x00"), "stored, uncompressed");
    assert_eq!(load(&npz).expect("select npz"), params);
    let all = checkpoint::load(&npz).expect("load npz");
    assert!(matches!(checkpoint::select(&npz, all, &["W9"]), Err(checkpoint::CheckpointError::Missing { .. })));
    std::fs::remove_dir_all(&dir).ok();
}

/// Largest |a - b| / max(|b|, 1e-3 * max|b|) over two parameter sets.
fn max_rel_diff(a: &app::Params, b: &app::Params) -> f64 {
    let mut worst = 0.0f64;
    for ((na, xa), (nb, xb)) in a.iter().zip(b) {
        assert_eq!(na, nb);
        let (va, vb) = (xa.to_f64_vec(), xb.to_f64_vec());
        assert_eq!(va.len(), vb.len(), "{na}");
        let scale = vb.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        for (x, y) in va.iter().zip(&vb) {
            worst = worst.max((x - y).abs() / y.abs().max(1e-3 * scale));
        }
    }
    worst
}

#[test]
fn replicas_with_averaged_gradients_match_one_replica_with_the_global_batch() {
    // R replicas of batch b (gradients all-reduced with mean, or reduce-scattered
    // onto weight shards with RTS) train exactly as one replica of batch R * b.
    let base = app::Config {
        limit_batches: Some(12),
        batch: 16,
        hidden: 24,
        lr: 0.05,
        progress: false,
        ..app::Config::default()
    };
    let train_set = data::load_split(&base.data, "train").expect("bundled MNIST train split");
    let one = app::train(&base, &train_set).expect("one replica");
    for (replicas, rts, host_transfers) in
        [(2, false, 1), (4, false, 1), (2, true, 1), (4, true, 1), (2, false, 3), (2, true, 2)]
    {
        let cfg = app::Config { replicas, rts, host_transfers, ..base.clone() };
        let many = app::train(&cfg, &train_set).expect("replicated");
        assert_eq!(many.losses.len(), one.losses.len() / host_transfers * host_transfers);
        for (a, b) in many.losses.iter().zip(&one.losses) {
            assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "R {replicas} rts {rts}: loss {a} vs {b}");
        }
        if host_transfers == 1 {
            let d = max_rel_diff(&many.params, &one.params);
            assert!(d < 1e-5, "R {replicas} rts {rts}: weights differ by {d:e} (relative)");
        }
    }
}
