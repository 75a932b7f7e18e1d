//! `OpDef::cost`: matmuls and convolutions count the multiply-adds a naive loop
//! nest does (counted here by running the loops), on the matrix engine; their
//! gradients count the forward product's; other ops the vector estimate.

use popart_ir::{lookup_op, Attributes, CostContext, CostEngine, DataType, OpCost, TensorInfo};

fn info(shape: &[usize]) -> TensorInfo {
    TensorInfo::new(DataType::Float32, shape.to_vec())
}

fn cost(op: &str, inputs: &[&TensorInfo], outputs: &[&TensorInfo]) -> OpCost {
    let ins: Vec<(u32, &TensorInfo)> = inputs.iter().enumerate().map(|(i, t)| (i as u32, *t)).collect();
    let outs: Vec<(u32, &TensorInfo)> = outputs.iter().enumerate().map(|(i, t)| (i as u32, *t)).collect();
    let attrs = Attributes::new();
    lookup_op(op).unwrap().cost(&CostContext { inputs: &ins, outputs: &outs, attrs: &attrs })
}

fn bytes(ts: &[&TensorInfo]) -> u64 {
    ts.iter().map(|t| t.nbytes() as u64).sum()
}

/// Multiply-adds of a naive `[b, m, k] @ [b, k, n]` loop nest.
fn matmul_macs(b: usize, m: usize, k: usize, n: usize) -> u64 {
    let mut c = 0u64;
    for _ in 0..b {
        for _ in 0..m {
            for _ in 0..n {
                for _ in 0..k {
                    c += 1;
                }
            }
        }
    }
    c
}

/// Multiply-adds of a naive grouped 2-d convolution without padding.
fn conv_macs(
    n: usize,
    cin: usize,
    cout: usize,
    groups: usize,
    (h, w): (usize, usize),
    (kh, kw): (usize, usize),
) -> u64 {
    let (oh, ow) = (h - kh + 1, w - kw + 1);
    let mut c = 0u64;
    for _ in 0..n {
        for _ in 0..cout {
            for _ in 0..oh * ow {
                for _ in 0..cin / groups {
                    for _ in 0..kh * kw {
                        c += 1;
                    }
                }
            }
        }
    }
    c
}

#[test]
fn matmul_family_counts_the_products_multiply_adds() {
    let (a, b, y) = (info(&[2, 5, 7]), info(&[2, 7, 3]), info(&[2, 5, 3]));
    let macs = matmul_macs(2, 5, 7, 3);
    let c = cost("MatMul", &[&a, &b], &[&y]);
    assert_eq!(c, OpCost { flops: 2 * macs, bytes: bytes(&[&a, &b, &y]), engine: CostEngine::Matrix });
    // Gradients (g, a, b): the forward product again.
    for grad in ["MatMulLhsGrad", "MatMulRhsGrad"] {
        let out = if grad == "MatMulLhsGrad" { &a } else { &b };
        let c = cost(grad, &[&y, &a, &b], &[out]);
        assert_eq!((c.flops, c.engine), (2 * macs, CostEngine::Matrix), "{grad}");
    }
    // The fused weight update (g, x, w) -> w: x^T g.
    let (x, g, w) = (info(&[6, 4]), info(&[6, 9]), info(&[4, 9]));
    let c = cost("ScaledAddMatMulRhsGradInplace", &[&g, &x, &w], &[&w]);
    assert_eq!((c.flops, c.engine), (2 * matmul_macs(1, 6, 4, 9), CostEngine::Matrix));
}

#[test]
fn conv_family_counts_the_forward_convolutions_multiply_adds() {
    // Grouped: 6 input channels, 4 outputs, 2 groups, 3x2 kernel over 7x5.
    let (x, w, y) = (info(&[2, 6, 7, 5]), info(&[4, 3, 3, 2]), info(&[2, 4, 5, 4]));
    let macs = conv_macs(2, 6, 4, 2, (7, 5), (3, 2));
    let c = cost("Conv", &[&x, &w], &[&y]);
    assert_eq!(c, OpCost { flops: 2 * macs, bytes: bytes(&[&x, &w, &y]), engine: CostEngine::Matrix });
    // Data gradient (g, w) -> dx, weight gradient (g, x, w) -> dw.
    let c = cost("ConvDataGrad", &[&y, &w], &[&x]);
    assert_eq!((c.flops, c.engine), (2 * macs, CostEngine::Matrix));
    let c = cost("ConvWeightsGrad", &[&y, &x, &w], &[&w]);
    assert_eq!((c.flops, c.engine), (2 * macs, CostEngine::Matrix));
}

#[test]
fn other_ops_cost_one_flop_per_element_of_their_largest_argument() {
    let (x, s) = (info(&[3, 4]), info(&[4]));
    let c = cost("Add", &[&x, &s], &[&x]);
    assert_eq!(c, OpCost { flops: 12, bytes: 4 * (12 + 4 + 12), engine: CostEngine::Vector });
    let c = cost("ReduceSum", &[&x], &[&s]);
    assert_eq!(c, OpCost { flops: 12, bytes: 4 * (12 + 4), engine: CostEngine::Vector });
}
