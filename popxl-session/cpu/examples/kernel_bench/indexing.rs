//! `--suite ops` rows of the shape and indexing ops. Labels match
//! `bench/numpy_kernels/indexing.py`.

use popart_ir::{AttrValue, DataType, TensorInfo};

use crate::case::Case;
use crate::f32s;

/// int32 indices as the raw bytes of an input.
fn i32_bytes(v: impl IntoIterator<Item = i32>) -> Vec<u8> {
    v.into_iter().flat_map(i32::to_le_bytes).collect()
}

fn i32s(shape: &[usize]) -> TensorInfo {
    TensorInfo::new(DataType::Int32, shape)
}

/// A fixed pseudo-random sequence (the numpy side builds the same one).
fn lcg(n: usize, modulo: usize) -> impl Iterator<Item = i32> {
    (0..n).map(move |i| ((i * 7919 + 13) % modulo) as i32)
}

/// Rows at `n` elements (`[n / 1024, 1024]` tensors).
pub fn cases(n: usize) -> Vec<Case> {
    let rows = (n / 1024).max(4);
    let x = f32s(&[rows, 1024]);
    let half = rows / 2;
    let ints = |v: Vec<i64>| AttrValue::Ints(v);
    let quarter = rows / 4;
    let mut split = Case::new("split 4 parts axis 1", "Split", vec![x.clone()], f32s(&[rows, 256]))
        .attr("axis", AttrValue::Int(1))
        .attr("split", ints(vec![256; 4]));
    for _ in 0..3 {
        split = split.output(f32s(&[rows, 256]));
    }
    vec![
        Case::new("subsample 2x2", "Subsample", vec![x.clone()], f32s(&[half, 512])).attr("strides", ints(vec![2, 2])),
        split,
        Case::new("scatter rows", "Scatter", vec![x.clone(), i32s(&[half]), f32s(&[half, 1024])], x.clone())
            .data(1, i32_bytes(lcg(half, rows)))
            .attr("axis", AttrValue::Int(0)),
        Case::new("scatter_reduce sum rows", "ScatterReduce", vec![x.clone(), i32s(&[rows])], f32s(&[quarter, 1024]))
            .data(1, i32_bytes(lcg(rows, quarter)))
            .attr("axis", AttrValue::Int(0))
            .attr("axis_size", AttrValue::Int(quarter as i64))
            .attr("reduction", AttrValue::Str("sum".into())),
        Case::new("dynamic_slice rows", "DynamicSlice", vec![f32s(&[2 * rows, 1024]), i32s(&[1])], x.clone())
            .data(1, i32_bytes([half as i32]))
            .attr("axes", ints(vec![0]))
            .attr("sizes", ints(vec![rows as i64])),
        Case::new(
            "dynamic_update_ rows",
            "DynamicUpdateInplace",
            vec![f32s(&[2 * rows, 1024]), i32s(&[1]), x.clone()],
            f32s(&[2 * rows, 1024]),
        )
        .data(1, i32_bytes([half as i32]))
        .alias(0, 0)
        .attr("axes", ints(vec![0]))
        .attr("sizes", ints(vec![rows as i64])),
        Case::new("onehot 1024 classes", "Onehot", vec![i32s(&[rows]), i32s(&[]), f32s(&[2])], f32s(&[rows, 1024]))
            .data(0, i32_bytes(lcg(rows, 1024)))
            .data(1, i32_bytes([1024]))
            .attr("num_classes", AttrValue::Int(1024))
            .attr("axis", AttrValue::Int(-1)),
    ]
}
