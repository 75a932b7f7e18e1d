//! Resizing: [`interpolate`] (PopXL `interpolate`, nearest and linear).

use popart_ir::ops::all as ir_ops;
use popart_ir::ops::resize::ResizeAttrs;

use super::OpBuilder;
use crate::{Result, Tensor};

/// PopXL's keyword arguments of [`interpolate`] (names and defaults as PopXL's;
/// the enum-like settings are PopXL's strings: `mode` `nearest` | `linear`
/// (`cubic` is refused), `nearest_mode` `round_prefer_floor` |
/// `round_prefer_ceil` | `floor` | `ceil`, `coordinate_transformation_mode`
/// `half_pixel` | `pytorch_half_pixel` | `align_corners` | `asymmetric`
/// (`tf_crop_and_resize` is refused)).
///
/// ```
/// let o = popxl::ops::InterpolateOptions::default().scale_factor([1.0, 1.0, 2.0, 2.0]).mode("linear");
/// assert_eq!(o.nearest_mode, "round_prefer_floor");
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct InterpolateOptions {
    /// One scale per dim of the input (empty: all 1); each output dim is
    /// `floor(input_dim · scale)`.
    pub scale_factor: Vec<f64>,
    /// `nearest` (default) or `linear`.
    pub mode: String,
    /// Rounding of `nearest` (default `round_prefer_floor`).
    pub nearest_mode: String,
    /// Output-to-input coordinate map (default `half_pixel`).
    pub coordinate_transformation_mode: String,
}

impl Default for InterpolateOptions {
    fn default() -> Self {
        InterpolateOptions {
            scale_factor: Vec::new(),
            mode: "nearest".into(),
            nearest_mode: "round_prefer_floor".into(),
            coordinate_transformation_mode: "half_pixel".into(),
        }
    }
}

impl InterpolateOptions {
    /// Set the scales.
    pub fn scale_factor(mut self, s: impl Into<Vec<f64>>) -> Self {
        self.scale_factor = s.into();
        self
    }
    /// Set the mode.
    pub fn mode(mut self, m: &str) -> Self {
        self.mode = m.into();
        self
    }
    /// Set the nearest mode.
    pub fn nearest_mode(mut self, m: &str) -> Self {
        self.nearest_mode = m.into();
        self
    }
    /// Set the coordinate transformation mode.
    pub fn coordinate_transformation_mode(mut self, m: &str) -> Self {
        self.coordinate_transformation_mode = m.into();
        self
    }
}

/// Resizes every dim of `t` by its scale (op `Resize`; PopXL `interpolate`):
/// see [`InterpolateOptions`] and `popart_ir::ops::resize` for the exact
/// coordinate and rounding rules. Differentiable (the exact adjoint).
///
/// ```
/// use popxl::ops::{interpolate, InterpolateOptions};
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::constant(ndarray::Array4::<f32>::ones((1, 2, 3, 5)), "x").unwrap();
/// let o = InterpolateOptions::default().scale_factor([1.0, 1.0, 2.0, 1.5]);
/// assert_eq!(interpolate(&x, &o).unwrap().shape(), &[1, 2, 6, 7]);
/// assert!(interpolate(&x, &o.clone().mode("cubic")).is_err());
/// ```
pub fn interpolate(t: &Tensor, options: &InterpolateOptions) -> Result<Tensor> {
    let scales = if options.scale_factor.is_empty() { vec![1.0; t.rank()] } else { options.scale_factor.clone() };
    OpBuilder::new("interpolate", &ir_ops::Resize)
        .input(0, t)
        .typed(&ResizeAttrs {
            scales: Some(scales),
            mode: options.mode.clone(),
            nearest_mode: options.nearest_mode.clone(),
            coordinate_transformation_mode: options.coordinate_transformation_mode.clone(),
        })
        .create1()
}
