//! `--suite ops` rows of the elementwise families (unary, binary, logical).
//! Labels match `bench/numpy_kernels/elementwise.py`.

use popart_ir::{AttrValue, DataType, TensorInfo};

use crate::case::Case;
use crate::f32s;

/// Rows at `n` elements.
pub fn cases(n: usize) -> Vec<Case> {
    let x = f32s(&[n]);
    let b = TensorInfo::new(DataType::Bool, [n]);
    // Valid bool bytes (0 or 1), alternating in runs of 3 and 5.
    let bits = |k: usize| (0..n).map(|i| u8::from((i / k) & 1 == 0)).collect::<Vec<u8>>();
    vec![
        Case::new("exp", "Exp", vec![x.clone()], x.clone()),
        Case::new("add", "Add", vec![x.clone(), x.clone()], x.clone()),
        Case::new("log2", "Log2", vec![x.clone()], x.clone()),
        Case::new("geluerf", "GeluErf", vec![x.clone()], x.clone()),
        Case::new("swish", "Swish", vec![x.clone()], x.clone()),
        Case::new("isnan", "IsNan", vec![x.clone()], b.clone()),
        Case::new("clip", "Clip", vec![x.clone()], x.clone())
            .attr("min", AttrValue::Float(-0.25))
            .attr("max", AttrValue::Float(0.25)),
        Case::new("fmod", "Fmod", vec![x.clone(), x.clone()], x.clone()),
        Case::new("logical_and", "LogicalAnd", vec![b.clone(), b.clone()], b).data(0, bits(3)).data(1, bits(5)),
        Case::new("maximum of 3", "Maximum", vec![x.clone(), x.clone(), x.clone()], x),
    ]
}
