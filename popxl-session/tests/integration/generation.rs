//! `--sample`'s KV cache (the gpt example's `decode.rs`): sampling with and
//! without the cache from the same trained weights and seed gives the same
//! text, every step's logits within 1e-4 of the full-context program's, past
//! the end of the context (64 characters in a context of 24: the window
//! restarts, prefilled by the chunked decode program, five times).

use std::path::PathBuf;

use crate::resume::gpt::{self, decode, model::Shape};

fn data() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../data/tinyshakespeare/input.txt"))
}

/// Weights of a small model trained for 60 steps (so that the logits are far from uniform).
fn trained(s: &Shape) -> Vec<(String, popxl::HostArray)> {
    let dir = std::env::temp_dir().join(format!("popxl-generation-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let path = dir.join("w.npz");
    let args: Vec<String> = [
        "--layers",
        "2",
        "--heads",
        "2",
        "--width",
        "32",
        "--seq",
        "24",
        "--batch",
        "4",
        "--steps",
        "60",
        "--lr",
        "3e-3",
        "--eval-every",
        "0",
        "--eval-batches",
        "1",
        "--sample",
        "0",
        "--save",
    ]
    .iter()
    .map(|a| a.to_string())
    .chain([path.display().to_string()])
    .collect();
    gpt::run(args).expect("training");
    let names: Vec<String> = gpt::model::param_names(s.layers);
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let all = popxl::checkpoint::load(&path).expect("the saved weights");
    let w = popxl::checkpoint::select(&path, all, &refs).expect("every weight");
    std::fs::remove_dir_all(dir).ok();
    w
}

#[test]
fn sampling_with_the_kv_cache_equals_the_full_context() {
    let corpus = gpt::load_corpus(&data()).expect("the text");
    let s =
        Shape { layers: 2, heads: 2, width: 32, seq: 24, batch: 1, vocab: corpus.vocab.len(), fused_attention: true };
    let w = trained(&s);
    let (cached, gc) = gpt::sample(&corpus, &s, &w, 64, 0.8, 7, false).expect("with the cache");
    let (full, gf) = gpt::sample(&corpus, &s, &w, 64, 0.8, 7, true).expect("without the cache");
    assert_eq!(cached, full);
    assert_eq!(gc.ids, gf.ids);
    let mut worst = 0.0f64;
    for (a, b) in gc.logits.iter().zip(&gf.logits) {
        assert_eq!(a.len(), s.vocab);
        worst = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(worst, f64::max);
    }
    assert!(worst < 1e-4, "logits differ by {worst}");
    // Trained logits: far from uniform, so a different context would show.
    let spread = gf.logits[10].iter().cloned().fold(f64::NEG_INFINITY, f64::max)
        - gf.logits[10].iter().cloned().fold(f64::INFINITY, f64::min);
    assert!(spread > 3.0, "logits spread {spread}");
    // Another seed samples another text (the comparison above can fail).
    let (other, _) = gpt::sample(&corpus, &s, &w, 64, 0.8, 8, false).expect("with the cache");
    assert_ne!(other, cached);
}

#[test]
fn decode_program_checks_its_chunk_and_positions() {
    let s = Shape { layers: 1, heads: 2, width: 8, seq: 6, batch: 1, vocab: 5, fused_attention: true };
    let w = gpt::model::init_params(&s, 0);
    for chunk in [0, 7] {
        let err = decode::build(&s, &w, chunk).err().expect("a chunk out of range").to_string();
        assert!(err.contains(&format!("chunk of {chunk} positions")), "{err}");
    }
    let mut d = decode::build(&s, &w, 2).expect("the decode program");
    assert_eq!(d.run(&[1, 2], 4).expect("positions 4 and 5").len(), 5);
    let err = d.run(&[1, 2], 5).expect_err("position 6 is past the context").to_string();
    assert!(err.contains("2 tokens at position 5"), "{err}");
    let err = d.run(&[1], 0).expect_err("one token for a chunk of two").to_string();
    assert!(err.contains("1 tokens at position 0"), "{err}");
    let err = decode::build(&s, &w[1..], 1).err().expect("no wte").to_string();
    assert!(err.contains("no weight `wte`"), "{err}");
}
