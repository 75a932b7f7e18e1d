//! The empty-input case of each op type.

use std::collections::HashMap;

use popart_ir::{AttrValue, Attributes, DataType, HostTensor, TensorInfo};

/// One op's inputs (by input index), attributes and the values of its non-empty outputs.
#[derive(Clone)]
pub struct Case {
    pub inputs: Vec<(u32, TensorInfo)>,
    pub attrs: Attributes,
    /// Values of inputs that are not empty (by position in `inputs`); others are ones.
    pub values: HashMap<usize, Vec<f64>>,
    /// Expected values of the non-empty outputs, by output index.
    pub expected: HashMap<u32, Vec<f64>>,
    /// Gradients of the inputs (by position) that are not zeros, for a seed of ones.
    pub grads: HashMap<usize, Vec<f64>>,
    /// The shape rule refuses the case with a typed error containing this text
    /// (numpy raises: no value is defined).
    pub refused: Option<&'static str>,
}

impl Case {
    pub fn new(inputs: Vec<(u32, TensorInfo)>) -> Case {
        Case {
            inputs,
            attrs: Attributes::new(),
            values: HashMap::new(),
            expected: HashMap::new(),
            grads: HashMap::new(),
            refused: None,
        }
    }

    /// Set an attribute.
    pub fn attr(mut self, key: &str, value: AttrValue) -> Case {
        self.attrs.set(key, value);
        self
    }

    /// The values of input `k` (by position), when not empty.
    pub fn values(mut self, k: usize, v: Vec<f64>) -> Case {
        self.values.insert(k, v);
        self
    }

    /// The expected values of output `o` (numpy's).
    pub fn expect(mut self, o: u32, v: Vec<f64>) -> Case {
        self.expected.insert(o, v);
        self
    }

    /// The gradient of input `k` (by position) for a seed of ones, when not zeros.
    pub fn grad(mut self, k: usize, v: Vec<f64>) -> Case {
        self.grads.insert(k, v);
        self
    }

    /// Another input.
    pub fn with_input(mut self, input: (u32, TensorInfo)) -> Case {
        self.inputs.push(input);
        self
    }

    /// The shape rule must refuse the case, with an error containing `why`.
    pub fn refused(mut self, why: &'static str) -> Case {
        self.refused = Some(why);
        self
    }

    /// Input `k`'s host value: its stated values, else ones.
    pub fn input_value(&self, k: usize) -> HostTensor {
        let info = &self.inputs[k].1;
        let v = self.values.get(&k).cloned().unwrap_or_else(|| vec![1.0; info.nelms()]);
        HostTensor::from_f64_values(info.dtype, &info.shape, &v)
    }
}

pub fn f32s(shape: &[usize]) -> TensorInfo {
    TensorInfo::new(DataType::Float32, shape)
}

pub fn u32s(shape: &[usize]) -> TensorInfo {
    TensorInfo::new(DataType::Uint32, shape)
}

pub fn bools(shape: &[usize]) -> TensorInfo {
    TensorInfo::new(DataType::Bool, shape)
}

pub fn i32s(shape: &[usize]) -> TensorInfo {
    TensorInfo::new(DataType::Int32, shape)
}

fn ints(v: &[i64]) -> AttrValue {
    AttrValue::Ints(v.to_vec())
}

/// Attribute-free cases tried in order on op types without an explicit case.
pub fn generic() -> Vec<Case> {
    let f = f32s(&[2, 0, 3]);
    let b = TensorInfo::new(DataType::Bool, [2, 0, 3]);
    let i = i32s(&[2, 0, 3]);
    vec![
        Case::new(vec![(0, f.clone())]),
        Case::new(vec![(0, f.clone()), (1, f.clone())]),
        Case::new(vec![(0, f.clone()), (1, f.clone()), (2, f.clone())]),
        Case::new(vec![(0, b.clone()), (1, f.clone()), (2, f.clone())]),
        Case::new(vec![(0, b.clone())]),
        Case::new(vec![(0, b.clone()), (1, b.clone())]),
        Case::new(vec![(0, i.clone())]),
        Case::new(vec![(0, i.clone()), (1, i.clone())]),
    ]
}

/// Op types that cannot take an empty input, and why.
pub const NOT_EMPTY: &[(&str, &str)] = &[
    ("HostLoad", "host IO: run by the executor from a stream, no kernel"),
    ("HostStore", "host IO: run by the executor to a stream, no kernel"),
    ("Call", "control flow: runs a graph (its ops are covered one by one)"),
    ("Repeat", "control flow: runs a graph (its ops are covered one by one)"),
    ("If", "control flow: runs a graph (its ops are covered one by one)"),
    ("RemoteLoad", "remote IO: run by the executor from a remote buffer, no kernel"),
    ("RemoteLoadInplace", "remote IO: run by the executor from a remote buffer, no kernel"),
    ("RemoteStore", "remote IO: run by the executor to a remote buffer, no kernel"),
    ("RemoteCodeLoad", "loads a graph's code: no tensor input"),
    ("ModifyRandomSeed", "its inputs are a uint32[2] seed and a uint32 scalar, never empty"),
];

/// A reduction over axis 1 of `[2, 0, 3]`: six values of `v`.
fn reduce(v: f64) -> Case {
    Case::new(vec![(0, f32s(&[2, 0, 3]))]).attr("axes", ints(&[1])).expect(0, vec![v; 6])
}

/// Explicit cases, by op type (several where an op has distinct empty regimes).
pub fn explicit() -> HashMap<&'static str, Vec<Case>> {
    let nan = f64::NAN;
    let mut m: HashMap<&'static str, Vec<Case>> = HashMap::new();
    // Reductions of an empty axis give numpy's identity: sum 0, prod 1, mean NaN,
    // log(sum) -inf; max, min, median, argmax and argmin have no identity:
    // numpy raises, and so do their shape rules.
    m.insert("ReduceSum", vec![reduce(0.0)]);
    m.insert("ReduceProd", vec![reduce(1.0)]);
    m.insert("ReduceMean", vec![reduce(nan)]);
    m.insert("ReduceL1", vec![reduce(0.0)]);
    m.insert("ReduceL2", vec![reduce(0.0)]);
    m.insert("ReduceSumSquare", vec![reduce(0.0)]);
    m.insert("ReduceLogSum", vec![reduce(f64::NEG_INFINITY)]);
    m.insert("ReduceLogSumExp", vec![reduce(f64::NEG_INFINITY)]);
    m.insert("ReduceMax", vec![Case::new(vec![(0, f32s(&[2, 0, 3]))]).attr("axes", ints(&[1])).refused("no identity")]);
    m.insert("ReduceMin", vec![Case::new(vec![(0, f32s(&[2, 0, 3]))]).attr("axes", ints(&[1])).refused("no identity")]);
    // Products with an empty contraction are zeros; an empty batch is empty.
    m.insert(
        "MatMul",
        vec![
            Case::new(vec![(0, f32s(&[2, 0])), (1, f32s(&[0, 3]))]).expect(0, vec![0.0; 6]),
            Case::new(vec![(0, f32s(&[0, 2, 4])), (1, f32s(&[4, 3]))]),
        ],
    );
    // Convolutions: batch 0 (empty result), input channels 0 (zeros).
    m.insert(
        "Conv",
        vec![
            Case::new(vec![(0, f32s(&[0, 2, 5, 5])), (1, f32s(&[3, 2, 3, 3]))]),
            Case::new(vec![(0, f32s(&[1, 0, 4, 4])), (1, f32s(&[2, 0, 3, 3]))]).expect(0, vec![0.0; 8]),
            Case::new(vec![(0, f32s(&[2, 2, 0, 0])), (1, f32s(&[3, 2, 1, 1]))]).refused("larger than the padded input"),
            // 1-d and 3-d: an empty batch, and no input channels (zeros).
            Case::new(vec![(0, f32s(&[1, 0, 5])), (1, f32s(&[2, 0, 3]))]).expect(0, vec![0.0; 6]),
            Case::new(vec![(0, f32s(&[0, 2, 3, 3, 3])), (1, f32s(&[2, 2, 2, 2, 2]))]),
            Case::new(vec![(0, f32s(&[1, 0, 3, 3, 3])), (1, f32s(&[2, 0, 2, 2, 2]))]).expect(0, vec![0.0; 16]),
        ],
    );
    m.insert(
        "ConvTranspose",
        vec![
            Case::new(vec![(0, f32s(&[0, 2, 3, 3])), (1, f32s(&[2, 3, 3, 3]))]),
            Case::new(vec![(0, f32s(&[1, 0, 3, 3])), (1, f32s(&[0, 2, 3, 3]))]).expect(0, vec![0.0; 50]),
        ],
    );
    m.insert(
        "MaxPool",
        vec![
            Case::new(vec![(0, f32s(&[0, 2, 4, 4]))]).attr("kernel_shape", ints(&[2, 2])),
            Case::new(vec![(0, f32s(&[1, 0, 4, 4]))]).attr("kernel_shape", ints(&[2, 2])),
        ],
    );
    m.insert(
        "AveragePool",
        vec![
            Case::new(vec![(0, f32s(&[0, 2, 4, 4]))]).attr("kernel_shape", ints(&[2, 2])),
            Case::new(vec![(0, f32s(&[1, 0, 4, 4]))]).attr("kernel_shape", ints(&[2, 2])),
        ],
    );
    // Broadcasting against an empty tensor: the result is empty and the
    // gradient of the non-empty operand is a sum over nothing, zeros.
    let bcast = || Case::new(vec![(0, f32s(&[2, 0, 3])), (1, f32s(&[3]))]);
    m.insert("Add", vec![bcast()]);
    m.insert("Mul", vec![bcast()]);
    m.insert("Sub", vec![bcast()]);
    m.insert("Div", vec![bcast()]);
    m.insert("Softmax", vec![Case::new(vec![(0, f32s(&[2, 0]))]), Case::new(vec![(0, f32s(&[0, 3]))])]);
    m.insert(
        "Concat",
        vec![Case::new(vec![(0, f32s(&[2, 0])), (1, f32s(&[2, 3]))])
            .attr("axis", AttrValue::Int(1))
            .values(1, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
            .expect(0, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
            .grad(1, vec![1.0; 6])],
    );
    let seed = || u32s(&[2]);
    let f = |v: f64| AttrValue::Float(v);
    let i = |v: i64| AttrValue::Int(v);
    let s = |v: &str| AttrValue::Str(v.into());
    m.insert(
        "ReduceMedian",
        vec![
            Case::new(vec![(0, f32s(&[2, 0, 3]))]).attr("axes", ints(&[1])).refused("empty"),
            Case::new(vec![(0, f32s(&[2, 0, 3]))]).attr("axes", ints(&[0])),
        ],
    );
    m.insert("ArgMax", vec![Case::new(vec![(0, f32s(&[2, 0, 3]))]).attr("axis", i(1)).refused("empty")]);
    m.insert("ArgMin", vec![Case::new(vec![(0, f32s(&[2, 0, 3]))]).attr("axis", i(1)).refused("empty")]);
    m.insert("LambSquare", vec![Case::new(vec![(0, f32s(&[2, 0, 3]))]).expect(0, vec![0.0])]);
    m.insert(
        "ReduceToShape",
        vec![Case::new(vec![(0, f32s(&[0, 3]))]).attr("shape", ints(&[1, 3])).expect(0, vec![0.0; 3])],
    );
    // Normalisations: an empty batch is empty; group norm over an empty group
    // has numpy's NaN mean (0/0) and inverse deviation; batch norm refuses a
    // batch without values (its shape rule).
    m.insert(
        "GroupNorm",
        vec![
            Case::new(vec![(0, f32s(&[0, 4, 3])), (1, f32s(&[4])), (2, f32s(&[4]))]).attr("num_groups", i(2)),
            Case::new(vec![(0, f32s(&[2, 4, 0])), (1, f32s(&[4])), (2, f32s(&[4]))])
                .attr("num_groups", i(2))
                .expect(1, vec![nan; 4])
                .expect(2, vec![nan; 4]),
            Case::new(vec![(0, f32s(&[2, 0, 3])), (1, f32s(&[0])), (2, f32s(&[0]))])
                .attr("num_groups", i(1))
                .expect(1, vec![nan; 2])
                .expect(2, vec![nan; 2]),
        ],
    );
    m.insert(
        "BatchNorm",
        vec![
            Case::new(vec![(0, f32s(&[0, 3, 4])), (1, f32s(&[3])), (2, f32s(&[3])), (3, f32s(&[3])), (4, f32s(&[3]))])
                .refused("at least"),
            Case::new(vec![(0, f32s(&[2, 0, 4])), (1, f32s(&[0])), (2, f32s(&[0])), (3, f32s(&[0])), (4, f32s(&[0]))]),
        ],
    );
    // RoiAlign: an empty feature map samples zeros (every point lies outside);
    // no boxes give an empty result.
    let roi = |x: &[usize], boxes: usize| {
        Case::new(vec![(0, f32s(x)), (1, f32s(&[boxes, 4])), (2, i32s(&[boxes]))])
            .attr("output_height", i(2))
            .attr("output_width", i(2))
            .attr("sampling_ratio", i(1))
            .attr("spatial_scale", f(1.0))
    };
    m.insert(
        "RoiAlign",
        vec![
            roi(&[1, 2, 0, 0], 1).values(1, vec![0.0, 0.0, 1.0, 1.0]).values(2, vec![0.0]).expect(0, vec![0.0; 8]),
            roi(&[1, 2, 3, 3], 0),
        ],
    );
    // Losses: the sum over no samples is 0; the mean divides by the counted
    // rows, at least 1 (as when every label is ignored), so it is 0, not NaN.
    let nll = |r: &str| Case::new(vec![(0, f32s(&[0, 3])), (1, i32s(&[0]))]).attr("reduction", s(r));
    m.insert("NllLoss", vec![nll("mean").expect(0, vec![0.0]), nll("sum").expect(0, vec![0.0]), nll("none")]);
    m.insert(
        "NllLossWithSoftmaxGrad",
        vec![Case::new(vec![(0, f32s(&[0, 3])), (1, i32s(&[0]))]).attr("reduction", s("sum")).expect(0, vec![0.0])],
    );
    m.insert(
        "NllLossGrad",
        vec![Case::new(vec![(0, f32s(&[])), (1, f32s(&[0, 3])), (2, i32s(&[0]))]).attr("reduction", s("sum"))],
    );
    m.insert(
        "TopK",
        vec![Case::new(vec![(0, f32s(&[0, 3]))]).attr("k", i(2)), Case::new(vec![(0, f32s(&[2, 3]))]).attr("k", i(0))],
    );
    m.insert("Cast", vec![Case::new(vec![(0, f32s(&[2, 0, 3]))]).attr("to", AttrValue::DType(DataType::Float16))]);
    m.insert("Dropout", vec![Case::new(vec![(0, f32s(&[2, 0, 3])), (1, seed())]).attr("p", f(0.5))]);
    m.insert(
        "ShapedDropout",
        vec![Case::new(vec![(0, f32s(&[2, 0, 3])), (1, seed())]).attr("ratio", f(0.5)).attr("shape", ints(&[1, 0, 3]))],
    );
    m.insert("RandomUniform", vec![Case::new(vec![(0, seed())]).attr("shape", ints(&[0, 3]))]);
    m.insert("RandomNormal", vec![Case::new(vec![(0, seed())]).attr("shape", ints(&[0, 3]))]);
    m.insert(
        "Init",
        vec![Case::new(vec![]).attr("shape", ints(&[0, 3])).attr("dtype", AttrValue::DType(DataType::Float32))],
    );
    m.insert(
        "Onehot",
        vec![Case::new(vec![(0, i32s(&[0])), (1, i32s(&[])), (2, f32s(&[2]))])
            .values(1, vec![3.0])
            .values(2, vec![0.0, 1.0])
            .attr("num_classes", i(3))],
    );
    m.insert(
        "Histogram",
        vec![Case::new(vec![(0, f32s(&[0]))]).attr("levels", AttrValue::Floats(vec![0.5])).expect(0, vec![0.0, 0.0])],
    );
    // Attention: an empty batch or context is empty; heads of width 0 give
    // zero scores, so row `i` of a causal softmax spreads over `i + 1` keys.
    let attention = |qkv: &[usize]| Case::new(vec![(0, f32s(qkv))]).attr("heads", i(1)).attr("scale", f(1.0));
    m.insert(
        "Attention",
        vec![
            attention(&[0, 4, 6]),
            attention(&[2, 0, 6]),
            attention(&[2, 3, 0]).expect(1, [1f64, 2.0, 3.0, 1.0, 2.0, 3.0].map(f64::ln).to_vec()),
        ],
    );
    m.insert(
        "AttentionGrad",
        vec![Case::new(vec![
            (0, f32s(&[0, 4, 2])),
            (1, f32s(&[0, 4, 6])),
            (2, f32s(&[0, 4, 2])),
            (3, f32s(&[0, 1, 4])),
        ])
        .attr("heads", i(1))
        .attr("scale", f(1.0))],
    );
    m.insert(
        "MaskedSoftmax",
        vec![Case::new(vec![(0, f32s(&[2, 0])), (1, bools(&[2, 0]))]).attr("scale", f(1.0)).attr("fill", f(-1e4))],
    );
    m.insert(
        "MatMulAdd",
        vec![
            Case::new(vec![(0, f32s(&[2, 0])), (1, f32s(&[0, 3])), (2, f32s(&[3]))])
                .values(2, vec![1.0, 2.0, 3.0])
                .expect(0, vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0])
                .grad(2, vec![2.0; 3]),
            // With a residual: the bias, then the residual, over an empty product.
            Case::new(vec![(0, f32s(&[2, 0])), (1, f32s(&[0, 3])), (2, f32s(&[3])), (3, f32s(&[2, 3]))])
                .values(2, vec![1.0, 2.0, 3.0])
                .values(3, vec![10.0, 20.0, 30.0, 40.0, 50.0, 60.0])
                .expect(0, vec![11.0, 22.0, 33.0, 41.0, 52.0, 63.0]),
        ],
    );
    let gather = || Case::new(vec![(0, f32s(&[4, 0])), (1, i32s(&[2]))]).values(1, vec![0.0, 3.0]);
    m.insert("Gather", vec![gather(), Case::new(vec![(0, f32s(&[4, 3])), (1, i32s(&[0]))])]);
    m.insert("TiedGather", vec![gather()]);
    m.insert("GroupedGather", vec![Case::new(vec![(0, f32s(&[1, 4, 0])), (1, i32s(&[1, 2]))]).attr("axis", i(1))]);
    let t23 = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    m.insert(
        "Scatter",
        vec![Case::new(vec![(0, f32s(&[2, 3])), (1, i32s(&[0, 3])), (2, f32s(&[0, 3]))])
            .values(0, t23.clone())
            .expect(0, t23.clone())
            .grad(0, vec![1.0; 6])],
    );
    m.insert(
        "ScatterReduce",
        vec![Case::new(vec![(0, f32s(&[0, 3])), (1, i32s(&[0, 3]))]).attr("axis_size", i(2)).expect(0, vec![0.0; 6])],
    );
    let dynamic = |extra: Option<TensorInfo>| {
        let mut ins = vec![(0, f32s(&[4, 0])), (1, u32s(&[1]))];
        if let Some(u) = extra {
            ins = vec![(0, f32s(&[4, 0])), (1, u32s(&[1])), (2, u)];
        }
        Case::new(ins).values(1, vec![1.0]).attr("axes", ints(&[0])).attr("sizes", ints(&[2]))
    };
    m.insert("DynamicSlice", vec![dynamic(None)]);
    m.insert("DynamicUpdate", vec![dynamic(Some(f32s(&[2, 0])))]);
    m.insert("DynamicUpdateInplace", vec![dynamic(Some(f32s(&[2, 0])))]);
    m.insert(
        "Split",
        vec![
            Case::new(vec![(0, f32s(&[0, 3]))]).attr("axis", i(1)).attr("split", ints(&[1, 2])),
            Case::new(vec![(0, f32s(&[2, 3]))])
                .attr("axis", i(1))
                .attr("split", ints(&[0, 3]))
                .values(0, t23.clone())
                .expect(1, t23.clone()),
        ],
    );
    m.insert("Subsample", vec![Case::new(vec![(0, f32s(&[0, 4]))]).attr("strides", ints(&[1, 2]))]);
    m.insert("Reshape", vec![Case::new(vec![(0, f32s(&[2, 0, 3]))]).attr("shape", ints(&[3, 0]))]);
    m.insert("ReshapeInplace", vec![Case::new(vec![(0, f32s(&[2, 0, 3]))]).attr("shape", ints(&[3, 0]))]);
    let slice = |x: &[usize], st: i64, en: i64, ax: i64| {
        Case::new(vec![(0, f32s(x))]).attr("starts", ints(&[st])).attr("ends", ints(&[en])).attr("axes", ints(&[ax]))
    };
    m.insert("Slice", vec![slice(&[2, 0, 3], 0, 1, 0), slice(&[2, 3], 1, 1, 1)]);
    m.insert("SliceInplace", vec![slice(&[2, 0, 3], 0, 1, 0), slice(&[2, 3], 1, 1, 1)]);
    m.insert("SliceUpdateInplace", vec![slice(&[2, 0, 3], 0, 1, 0).with_input((1, f32s(&[1, 0, 3])))]);
    m.insert(
        "ConcatInplace",
        vec![Case::new(vec![(0, f32s(&[2, 0])), (1, f32s(&[2, 0]))]).attr("axis", i(1)).attr("num_inputs", i(2))],
    );
    m.insert("IpuCopy", vec![Case::new(vec![(0, f32s(&[2, 0, 3]))]).attr("source", i(0)).attr("destination", i(1))]);
    m.insert(
        "IncrementMod",
        vec![Case::new(vec![(0, f32s(&[2, 0, 3]))]).attr("increment", f(1.0)).attr("modulus", f(3.0))],
    );
    m.insert(
        "IncrementModInplace",
        vec![Case::new(vec![(0, f32s(&[2, 0, 3]))]).attr("increment", f(1.0)).attr("modulus", f(3.0))],
    );
    m.insert("AccumulatorScale", vec![Case::new(vec![(0, f32s(&[2, 0, 3]))]).attr("factor", f(0.5))]);
    m.insert(
        "SparseAccumulate",
        vec![Case::new(vec![(0, f32s(&[2, 0])), (1, f32s(&[2, 4])), (3, i32s(&[4]))])
            .attr("axis", i(1))
            .values(3, vec![0.0; 4])],
    );
    // One whole Adam step, the bias corrected with the step (written in place).
    let e = || f32s(&[2, 0]);
    m.insert(
        "AdamStep",
        vec![Case::new(vec![(0, e()), (1, e()), (2, e()), (3, e()), (4, f32s(&[]))])
            .attr("m_factor", f(0.9))
            .attr("v_factor", f(0.999))
            .attr("mode", AttrValue::Str("adam".into()))
            .attr("beta1", f(0.9))
            .attr("beta2", f(0.999))
            .attr("b", f(-0.1))],
    );
    m.insert(
        "AdamVarUpdate",
        vec![Case::new(vec![(0, f32s(&[2, 0])), (1, f32s(&[2, 0])), (2, f32s(&[])), (3, f32s(&[]))])
            .attr("learning_rate", f(0.1))],
    );
    // A weight update from an empty batch: only the scaling `a * w`.
    let wu = || {
        Case::new(vec![(0, f32s(&[0, 2])), (1, f32s(&[0, 3])), (2, f32s(&[3, 2]))])
            .values(2, t23.clone())
            .expect(0, t23.iter().map(|v| 0.5 * v).collect())
    };
    m.insert("ScaledAddMatMulRhsGradInplace", vec![wu().attr("a", f(0.5)).attr("b", f(-0.25))]);
    // A weight and bias gradient from an empty batch: zeros of both.
    m.insert(
        "MatMulRhsBiasGrad",
        vec![Case::new(vec![(0, f32s(&[0, 2])), (1, f32s(&[0, 3])), (2, f32s(&[3, 2]))])
            .expect(0, vec![0.0; 6])
            .expect(1, vec![0.0; 2])],
    );
    // The replicated update is `w + b * sum over replicas (x^T g)`.
    m.insert(
        "ReplicatedScaledAddMatMulRhsGradInplace",
        vec![Case::new(vec![(0, f32s(&[0, 2])), (1, f32s(&[0, 3])), (2, f32s(&[3, 2]))])
            .values(2, t23.clone())
            .expect(0, t23.clone())
            .attr("b", f(-0.25))
            .attr("stride", i(1))
            .attr("group_size", i(1))],
    );
    m.insert(
        "ReplicatedAllReduceScaledAddInplace",
        vec![Case::new(vec![(0, f32s(&[2, 0])), (1, f32s(&[2, 0]))])
            .attr("stride", i(1))
            .attr("group_size", i(1))
            .attr("b", f(1.0))],
    );
    let coll = || Case::new(vec![(0, f32s(&[2, 0, 3]))]).attr("stride", i(1)).attr("group_size", i(1));
    m.insert("ReplicatedAllReduce", vec![coll()]);
    m.insert("ReplicatedAllReduceInplace", vec![coll()]);
    m.insert("ReplicatedAllGather", vec![coll()]);
    m.insert(
        "ReplicatedReduceScatter",
        vec![Case::new(vec![(0, f32s(&[0]))]).attr("stride", i(1)).attr("group_size", i(1))],
    );
    m.insert("AllReduce", vec![Case::new(vec![(0, f32s(&[2, 0]))]).attr("ipus", ints(&[0]))]);
    // float8: casts and scaled products of empty tensors (the log2 scale is a scalar).
    let f8 = AttrValue::DType(DataType::Float8_143);
    m.insert(
        "CastThenPow2Scale",
        vec![Case::new(vec![(0, TensorInfo::new(DataType::Float8_143, [2, 0])), (1, i32s(&[]))])
            .attr("to", AttrValue::DType(DataType::Float32))],
    );
    m.insert("Pow2ScaleThenCast", vec![Case::new(vec![(0, f32s(&[2, 0])), (1, i32s(&[]))]).attr("to", f8.clone())]);
    let f8s = |sh: &[usize]| TensorInfo::new(DataType::Float8_143, sh);
    m.insert(
        "MatMulPow2Scaled",
        vec![Case::new(vec![(0, f8s(&[2, 0])), (1, f8s(&[0, 3])), (2, i32s(&[]))]).expect(0, vec![0.0; 6])],
    );
    m.insert("ConvPow2Scaled", vec![Case::new(vec![(0, f8s(&[0, 2, 5, 5])), (1, f8s(&[3, 2, 3, 3])), (2, i32s(&[]))])]);
    m.insert(
        "ConvTransposePow2Scaled",
        vec![Case::new(vec![(0, f8s(&[0, 2, 3, 3])), (1, f8s(&[2, 3, 3, 3])), (2, i32s(&[]))])],
    );
    m
}
