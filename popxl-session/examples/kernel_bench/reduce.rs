//! `--suite ops` rows of the reductions. Labels match `bench/numpy_kernels/reduce.py`.

use popart_ir::AttrValue;

use crate::case::Case;
use crate::f32s;

/// Rows at `n` elements (reduced over the last axis of `[n / 1024, 1024]`).
pub fn cases(n: usize) -> Vec<Case> {
    let rows = (n / 1024).max(1);
    let x = f32s(&[rows, 1024]);
    vec![Case::new("sum last axis", "ReduceSum", vec![x], f32s(&[rows]))
        .attr("axes", AttrValue::Ints(vec![-1]))
        .attr("keepdims", AttrValue::Bool(false))]
}
