//! The kernels of one MNIST training step (`--suite mnist`).

use popart_ir::AttrValue;

use crate::case::Case;
use crate::f32s;

/// The step's kernels at batch `b`, hidden width `h`.
pub fn cases(b: usize, h: usize) -> Vec<Case> {
    let (x, w0, hid, bias) = (f32s(&[b, 784]), f32s(&[784, h]), f32s(&[b, h]), f32s(&[h]));
    let (w1, out) = (f32s(&[h, 10]), f32s(&[b, 10]));
    vec![
        Case::new("x @ W0", "MatMul", vec![x.clone(), w0.clone()], hid.clone()),
        Case::new("x^T @ dh", "MatMulRhsGrad", vec![hid.clone(), x.clone(), w0.clone()], w0.clone()),
        Case::new("h @ W1", "MatMul", vec![hid.clone(), w1.clone()], out.clone()),
        Case::new("h^T @ dy", "MatMulRhsGrad", vec![out.clone(), hid.clone(), w1.clone()], w1.clone()),
        Case::new("dy @ W1^T", "MatMulLhsGrad", vec![out.clone(), hid.clone(), w1.clone()], hid.clone()),
        Case::new("add bias", "Add", vec![hid.clone(), bias.clone()], hid.clone()),
        Case::new("gelu", "Gelu", vec![hid.clone()], hid.clone()),
        Case::new("gelu grad", "GeluGrad", vec![hid.clone(), hid.clone()], hid.clone()),
        Case::new("bias grad", "ReduceToShape", vec![hid.clone()], bias).attr("shape", AttrValue::Ints(vec![h as i64])),
        Case::new("sgd update W0", "ScaledAddInplace", vec![w0.clone(), w0.clone()], w0)
            .attr("a", AttrValue::Float(1.0))
            .attr("b", AttrValue::Float(-0.01))
            .alias(0, 0),
    ]
}
