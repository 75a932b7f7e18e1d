//! `--suite ops` rows of the var updates and random ops. Labels match
//! `bench/numpy_kernels/var_random.py`.

use crate::case::Case;

/// Rows at `n` elements.
pub fn cases(_n: usize) -> Vec<Case> {
    Vec::new()
}
