//! `--suite ops` rows of the reductions, scans, arg-reductions and top-k. Labels
//! match `bench/numpy_kernels/reduce.py`.

use popart_ir::{AttrValue, DataType, TensorInfo};

use crate::case::Case;
use crate::f32s;

/// Rows at `n` elements: `[n / 1024, 1024]`, reduced over the last axis and over axis 0.
pub fn cases(n: usize) -> Vec<Case> {
    let rows = (n / 1024).max(1);
    let x = f32s(&[rows, 1024]);
    let mut v = vec![Case::new("sum last axis", "ReduceSum", vec![x.clone()], f32s(&[rows]))
        .attr("axes", AttrValue::Ints(vec![-1]))
        .attr("keepdims", AttrValue::Bool(false))];
    // Attention-sized softmax rows (128 wide) and their gradient.
    let att = f32s(&[(n / 128).max(1), 128]);
    v.push(
        Case::new("softmax rows of 128", "Softmax", vec![att.clone()], att.clone()).attr("axis", AttrValue::Int(-1)),
    );
    v.push(
        Case::new("softmax_grad rows of 128", "SoftmaxGrad", vec![att.clone(), att.clone()], att.clone())
            .attr("axis", AttrValue::Int(-1)),
    );
    let reductions = [
        ("prod", "ReduceProd"),
        ("l1", "ReduceL1"),
        ("l2", "ReduceL2"),
        ("logsum", "ReduceLogSum"),
        ("logsumexp", "ReduceLogSumExp"),
        ("sumsquare", "ReduceSumSquare"),
        ("median", "ReduceMedian"),
    ];
    for (name, op) in reductions {
        for (axis, kept, where_) in [(-1i64, rows, "last axis"), (0, 1024, "axis 0")] {
            let mut c = Case::new(format!("{name} {where_}"), op, vec![x.clone()], f32s(&[kept]))
                .attr("axes", AttrValue::Ints(vec![axis]))
                .attr("keepdims", AttrValue::Bool(false));
            if op == "ReduceMedian" {
                c = c.output(TensorInfo::new(DataType::Int32, [kept]));
            }
            v.push(c);
        }
    }
    for (axis, where_) in [(-1i64, "last axis"), (0, "axis 0")] {
        v.push(
            Case::new(format!("cumsum {where_}"), "CumSum", vec![x.clone()], x.clone())
                .attr("axis", AttrValue::Int(axis)),
        );
        let kept = if axis == 0 { 1024 } else { rows };
        v.push(
            Case::new(format!("argmax {where_}"), "ArgMax", vec![x.clone()], TensorInfo::new(DataType::Int32, [kept]))
                .attr("axis", AttrValue::Int(axis))
                .attr("keepdims", AttrValue::Bool(false)),
        );
    }
    v.push(
        Case::new("topk k=8 last axis", "TopK", vec![x.clone()], f32s(&[rows, 8]))
            .output(TensorInfo::new(DataType::Int32, [rows, 8]))
            .attr("k", AttrValue::Int(8))
            .attr("axis", AttrValue::Int(-1)),
    );
    v
}
