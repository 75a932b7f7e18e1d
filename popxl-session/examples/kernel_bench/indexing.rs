//! `--suite ops` rows of the shape and indexing ops. Labels match
//! `bench/numpy_kernels/indexing.py`.

use crate::case::Case;

/// Rows at `n` elements.
pub fn cases(_n: usize) -> Vec<Case> {
    Vec::new()
}
