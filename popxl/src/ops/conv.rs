//! Convolutions: [`conv`] and [`conv_transpose`] (NCHW, any number of spatial dims on `cpu`).

use popart_ir::ops::all as ir_ops;
pub use popart_ir::ops::conv::PadType;
use popart_ir::ops::conv::{ConvAttrs, ConvTransposeAttrs};

use super::OpBuilder;
use crate::{Result, Tensor};

/// PopXL's keyword arguments of [`conv_with`]: each list has one value per
/// spatial dimension (`padding`: the begins, then the ends); an empty list
/// means PopXL's default (stride 1, no padding, dilation 1).
///
/// ```
/// use popxl::ops::{ConvOptions, PadType};
/// let o = ConvOptions::default().stride([2, 2]).padding([1, 1, 1, 1]).groups(4);
/// assert_eq!((o.stride.as_slice(), o.groups, o.pad_type), (&[2, 2][..], 4, PadType::NotSet));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvOptions {
    /// Strides (default 1).
    pub stride: Vec<i64>,
    /// Padding `[begin_1.., end_1..]` (default 0); ignored unless `pad_type` is `NotSet`.
    pub padding: Vec<i64>,
    /// Dilations (default 1).
    pub dilation: Vec<i64>,
    /// Groups: the channels are split into this many independent convolutions
    /// (`groups == C_in` is a depthwise convolution). Default 1.
    pub groups: i64,
    /// How padding is chosen (default: the explicit `padding`).
    pub pad_type: PadType,
}

impl Default for ConvOptions {
    fn default() -> Self {
        ConvOptions {
            stride: Vec::new(),
            padding: Vec::new(),
            dilation: Vec::new(),
            groups: 1,
            pad_type: PadType::NotSet,
        }
    }
}

impl ConvOptions {
    /// Set the strides.
    pub fn stride(mut self, s: impl Into<Vec<i64>>) -> Self {
        self.stride = s.into();
        self
    }
    /// Set the padding (`[begin_1.., end_1..]`).
    pub fn padding(mut self, p: impl Into<Vec<i64>>) -> Self {
        self.padding = p.into();
        self
    }
    /// Set the dilations.
    pub fn dilation(mut self, d: impl Into<Vec<i64>>) -> Self {
        self.dilation = d.into();
        self
    }
    /// Set the number of groups.
    pub fn groups(mut self, g: i64) -> Self {
        self.groups = g;
        self
    }
    /// Set the pad type.
    pub fn pad_type(mut self, p: PadType) -> Self {
        self.pad_type = p;
        self
    }

    /// The op attributes of these options.
    pub(crate) fn attrs(&self) -> ConvAttrs {
        ConvAttrs {
            strides: Some(self.stride.clone()),
            pads: Some(self.padding.clone()),
            dilations: Some(self.dilation.clone()),
            group: self.groups,
            auto_pad: Some(self.pad_type.name().to_string()),
        }
    }
}

/// Convolution of `t` `[N, C_in, D..]` with `weight` `[C_out, C_in / groups, K..]`
/// (cross-correlation, no bias), default options (op `Conv`; PopXL `conv`).
/// Differentiable w.r.t. both operands.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::constant(ndarray::Array4::<f32>::ones((2, 3, 8, 8)), "x").unwrap();
/// let w = popxl::constant(ndarray::Array4::<f32>::ones((4, 3, 3, 3)), "w").unwrap();
/// assert_eq!(popxl::ops::conv(&x, &w).unwrap().shape(), &[2, 4, 6, 6]);
/// assert!(popxl::ops::conv(&w, &x).is_err());
/// ```
pub fn conv(t: &Tensor, weight: &Tensor) -> Result<Tensor> {
    conv_with(t, weight, &ConvOptions::default())
}

/// [`conv`] with PopXL's keyword arguments (stride, padding, dilation, groups, pad_type).
///
/// ```
/// use popxl::ops::{conv_with, ConvOptions, PadType};
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::constant(ndarray::Array4::<f32>::ones((1, 4, 9, 9)), "x").unwrap();
/// // Depthwise 3x3, stride 2, padded to keep ceil(9 / 2) = 5 outputs.
/// let w = popxl::constant(ndarray::Array4::<f32>::ones((4, 1, 3, 3)), "w").unwrap();
/// let o = ConvOptions::default().stride([2, 2]).groups(4).pad_type(PadType::SameUpper);
/// assert_eq!(conv_with(&x, &w, &o).unwrap().shape(), &[1, 4, 5, 5]);
/// ```
pub fn conv_with(t: &Tensor, weight: &Tensor, options: &ConvOptions) -> Result<Tensor> {
    OpBuilder::new("conv", &ir_ops::Conv).input(0, t).input(1, weight).typed(&options.attrs()).create1()
}

/// PopXL's keyword arguments of [`conv_transpose`]: those of [`ConvOptions`]
/// (dilation must be 1, as PopART) plus `output_padding` (extra size at the end
/// of each spatial dim) and `output_shape` (the spatial output size; padding is
/// then derived from it).
///
/// ```
/// let o = popxl::ops::ConvTransposeOptions::default().output_padding([1, 1]);
/// assert_eq!(o.output_padding, vec![1, 1]);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConvTransposeOptions {
    /// Stride, padding, dilation, groups and pad type.
    pub conv: ConvOptions,
    /// Extra output size at the end of each spatial dim (default 0).
    pub output_padding: Vec<i64>,
    /// The spatial output size (default: computed).
    pub output_shape: Vec<i64>,
}

impl ConvTransposeOptions {
    /// The op attributes of these options.
    pub(crate) fn attrs(&self) -> ConvTransposeAttrs {
        let ConvAttrs { strides, pads, dilations, group, auto_pad } = self.conv.attrs();
        ConvTransposeAttrs {
            strides,
            pads,
            dilations,
            group,
            auto_pad,
            output_padding: Some(self.output_padding.clone()),
            output_shape: Some(self.output_shape.clone()),
        }
    }
    /// Set the convolution options.
    pub fn conv(mut self, c: ConvOptions) -> Self {
        self.conv = c;
        self
    }
    /// Set the output padding.
    pub fn output_padding(mut self, p: impl Into<Vec<i64>>) -> Self {
        self.output_padding = p.into();
        self
    }
    /// Set the output shape.
    pub fn output_shape(mut self, s: impl Into<Vec<i64>>) -> Self {
        self.output_shape = s.into();
        self
    }
}

/// Transposed convolution of `t` `[N, C_in, D..]` with `weight`
/// `[C_in, C_out / groups, K..]`: the adjoint of [`conv_with`] with the same
/// options, giving `[N, C_out, O..]` with `O = stride·(D − 1) + output_padding + K − pads`
/// (op `ConvTranspose`; PopXL `conv_transpose`, no gradient as PopXL).
///
/// ```
/// use popxl::ops::{conv_transpose, ConvOptions, ConvTransposeOptions};
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::constant(ndarray::Array4::<f32>::ones((2, 4, 5, 5)), "x").unwrap();
/// let w = popxl::constant(ndarray::Array4::<f32>::ones((4, 6, 3, 3)), "w").unwrap();
/// let conv = ConvOptions::default().stride([2, 2]).padding([1, 1, 1, 1]);
/// let o = ConvTransposeOptions::default().conv(conv).output_padding([1, 1]);
/// assert_eq!(conv_transpose(&x, &w, &o).unwrap().shape(), &[2, 6, 10, 10]);
/// ```
pub fn conv_transpose(t: &Tensor, weight: &Tensor, options: &ConvTransposeOptions) -> Result<Tensor> {
    OpBuilder::new("conv_transpose", &ir_ops::ConvTranspose)
        .input(0, t)
        .input(1, weight)
        .typed(&options.attrs())
        .create1()
}
