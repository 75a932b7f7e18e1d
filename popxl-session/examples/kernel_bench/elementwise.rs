//! `--suite ops` rows of the elementwise families (unary, binary, logical).
//! Labels match `bench/numpy_kernels/elementwise.py`.

use crate::case::Case;
use crate::f32s;

/// Rows at `n` elements.
pub fn cases(n: usize) -> Vec<Case> {
    let x = f32s(&[n]);
    vec![
        Case::new("exp", "Exp", vec![x.clone()], x.clone()),
        Case::new("add", "Add", vec![x.clone(), x.clone()], x.clone()),
    ]
}
