//! `--suite ops` rows of the var updates and random ops. Labels match
//! `bench/numpy_kernels/var_random.py`.

use popart_ir::{AttrValue, DataType, TensorInfo};

use crate::case::Case;
use crate::f32s;

/// Rows at `n` elements.
pub fn cases(n: usize) -> Vec<Case> {
    let x = f32s(&[n]);
    let scalar = f32s(&[]);
    let f = |v: f64| AttrValue::Float(v);
    // Positive second moments (the default fill is [-0.5, 0.5)).
    let v_bytes: Vec<u8> = (0..n).flat_map(|i| (0.01f32 + (i % 97) as f32 * 1e-3).to_le_bytes()).collect();
    let rows = (n / 1024).max(1);
    let seed = TensorInfo::new(DataType::Uint32, [2]);
    vec![
        // Adam with weight decay and bias correction: inputs w, m, v, step.
        Case::new("adam_updater", "AdamUpdater", vec![x.clone(), x.clone(), x.clone(), scalar], x.clone())
            .attr("mode", AttrValue::Str("adam".into()))
            .attr("weight_decay", f(0.01))
            .attr("beta1", f(0.9))
            .attr("beta2", f(0.999))
            .attr("epsilon", f(1e-7))
            .data(2, v_bytes),
        Case::new("adam_var_update", "AdamVarUpdate", vec![x.clone(), x.clone()], x.clone())
            .attr("learning_rate", f(1e-3))
            .alias(0, 0),
        Case::new("accumulate_moving_average_", "Accumulate", vec![x.clone(), x.clone()], x.clone())
            .attr("type", AttrValue::Str("moving_average".into()))
            .attr("factor", f(0.9))
            .alias(0, 0),
        Case::new(
            "shaped_dropout [n/1024,1024] mask [n/1024,1]",
            "ShapedDropout",
            vec![f32s(&[rows, 1024]), seed.clone()],
            f32s(&[rows, 1024]),
        )
        .attr("ratio", f(0.1))
        .attr("shape", AttrValue::Ints(vec![rows as i64, 1]))
        .data(1, [1u32, 2].iter().flat_map(|v| v.to_le_bytes()).collect()),
        Case::new("random_normal", "RandomNormal", vec![seed], x)
            .attr("shape", AttrValue::Ints(vec![n as i64]))
            .attr("dtype", AttrValue::DType(DataType::Float32))
            .data(0, [3u32, 4].iter().flat_map(|v| v.to_le_bytes()).collect()),
    ]
}
