//! Cross-crate integration and snapshot tests live in `tests/` (and the text
//! filetests of the transforms in `filetests/`, run by `tests/filetests.rs`).
//!
//! This library holds what several test files share: PopXL's [`Linear`] module and
//! [`assert_close`]. `popxl`'s own integration tests use it too (a dev-dependency).

#![warn(missing_docs)]

use popxl::{Module, Tensor};

/// PopXL's `Linear` module (listings 9.6 and 10.1): `y = x @ W + b`, with the weight
/// `W` (`[x.shape[-1], out_features]`, float32) and the bias `b` (`[out_features]`)
/// as graph inputs named `W` and `b`, kept on the module after the graph is built
/// (for `inputs_dict`-style call arguments).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(ndarray::Array2::<f32>::ones((4, 3)), "x").unwrap();
/// let mut linear = tests::Linear::new(2);
/// let graph = ir.create_graph(&mut linear, &x).unwrap();
/// assert_eq!(graph.name(), "Linear");
/// assert_eq!(linear.w().shape(), &[3, 2]);
/// assert_eq!(graph.outputs().unwrap()[0].shape(), &[4, 2]);
/// ```
#[derive(Clone, Debug)]
pub struct Linear {
    /// Number of output features (columns of `W`).
    pub out_features: usize,
    /// Whether there is a bias `b`.
    pub bias: bool,
    /// Declare `W` and `b` before the matmul (instead of `b` after it, as the listings
    /// do). The graph computes the same; only the creation order of its tensors,
    /// visible in the IR text and the lowered program, differs.
    pub inputs_first: bool,
    /// The weight graph input, set by `build`.
    pub w: Option<Tensor>,
    /// The bias graph input, set by `build` when there is a bias.
    pub b: Option<Tensor>,
}

impl Linear {
    /// A layer with `out_features` outputs and a bias, built in the listings' order.
    pub fn new(out_features: usize) -> Self {
        Linear { out_features, bias: true, inputs_first: false, w: None, b: None }
    }

    /// A layer without bias: `y = x @ W`.
    pub fn without_bias(out_features: usize) -> Self {
        Linear { bias: false, ..Linear::new(out_features) }
    }

    /// The same layer, declaring `W` and `b` before any op (see [`Linear::inputs_first`]).
    pub fn with_inputs_first(self) -> Self {
        Linear { inputs_first: true, ..self }
    }

    /// The weight graph input. Panics before the graph is built.
    pub fn w(&self) -> &Tensor {
        self.w.as_ref().expect("Linear::w: the graph is not built yet")
    }

    /// The bias graph input. Panics before the graph is built or without bias.
    pub fn b(&self) -> &Tensor {
        self.b.as_ref().expect("Linear::b: the graph is not built yet, or has no bias")
    }
}

impl Module for Linear {
    type Inputs = Tensor;
    type Outputs = Tensor;
    fn build(&mut self, x: Tensor) -> popxl::Result<Tensor> {
        let bias = |out_features: usize| popxl::graph_input([out_features], popxl::float32, "b");
        let w = popxl::graph_input([x.shape()[x.rank() - 1], self.out_features], popxl::float32, "W")?;
        let early_b = if self.bias && self.inputs_first { Some(bias(self.out_features)?) } else { None };
        let mut y = x.matmul(&w)?;
        self.w = Some(w);
        if self.bias {
            let b = match early_b {
                Some(b) => b,
                None => bias(self.out_features)?,
            };
            y = &y + &b;
            self.b = Some(b);
        }
        Ok(y)
    }
}

/// Assert `got` and `want` have the same length and agree elementwise within
/// `tol · (1 + |want|)`; `what` names the values in the failure message.
///
/// ```
/// tests::assert_close(&[1.0, 2.0000001], &[1.0, 2.0], 1e-6, "values");
/// ```
#[track_caller]
pub fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: {} values, want {}", got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{what}[{i}]: got {g}, want {w}\n got {got:?}\nwant {want:?}");
    }
}
