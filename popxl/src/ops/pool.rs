//! Pooling: [`max_pool`] and [`average_pool`] (NCHW, any number of spatial dims on `cpu`).
//! Global pooling is a reduction over the spatial axes:
//! `ops::mean(t, &[2, 3], true)` (average) or `ops::max(t, &[2, 3], true)`.

use popart_ir::ops::all as ir_ops;
use popart_ir::ops::pool::PoolAttrs;

use super::conv::PadType;
use super::OpBuilder;
use crate::{PopXlError, Result, Tensor};

/// PopXL's keyword arguments of the pools: each list has one value per spatial
/// dimension (`padding`: the begins, then the ends); an empty list means PopXL's
/// default (stride 1, no padding, dilation 1). `out_pads` must stay 0 and
/// `in_dilations` 1 (anything else is refused when the op is created).
///
/// ```
/// let o = popxl::ops::PoolOptions::default().stride([2, 2]).ceil_mode(true);
/// assert_eq!(o.stride, vec![2, 2]);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolOptions {
    /// Strides (default 1).
    pub stride: Vec<i64>,
    /// Padding `[begin_1.., end_1..]` (default 0).
    pub padding: Vec<i64>,
    /// Output padding (must be 0).
    pub out_pads: Vec<i64>,
    /// Window dilations (default 1).
    pub dilation: Vec<i64>,
    /// Input dilations (must be 1).
    pub in_dilations: Vec<i64>,
    /// How padding is chosen (default: the explicit `padding`).
    pub auto_pad: PadType,
    /// Round output sizes up instead of down.
    pub ceil_mode: bool,
}

impl PoolOptions {
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
    /// Set the window dilations.
    pub fn dilation(mut self, d: impl Into<Vec<i64>>) -> Self {
        self.dilation = d.into();
        self
    }
    /// Set the pad type.
    pub fn auto_pad(mut self, p: PadType) -> Self {
        self.auto_pad = p;
        self
    }
    /// Set the rounding of output sizes.
    pub fn ceil_mode(mut self, c: bool) -> Self {
        self.ceil_mode = c;
        self
    }

    fn build<'a>(&self, b: OpBuilder<'a>, kernel_size: &[i64]) -> OpBuilder<'a> {
        b.typed(&PoolAttrs {
            kernel_shape: kernel_size.to_vec(),
            strides: Some(self.stride.clone()),
            pads: Some(self.padding.clone()),
            dilations: Some(self.dilation.clone()),
            auto_pad: Some(self.auto_pad.name().to_string()),
            ceil_mode: i64::from(self.ceil_mode),
            out_pads: Some(self.out_pads.clone()),
            in_dilations: Some(self.in_dilations.clone()),
        })
    }
}

/// How [`max_pool_with`] stores its tensors (PopXL `storage_order`): only
/// row-major is supported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StorageOrder {
    /// Row-major (PopXL's default).
    #[default]
    Row,
    /// Column-major (refused).
    Column,
}

/// Max pooling of `t` `[N, C, D..]` with windows of `kernel_size`, stride 1 and
/// no padding (op `MaxPool`; PopXL `max_pool`). The gradient goes to the first
/// maximum of each window.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::constant(ndarray::Array4::<f32>::ones((2, 3, 8, 8)), "x").unwrap();
/// assert_eq!(popxl::ops::max_pool(&x, &[2, 2]).unwrap().shape(), &[2, 3, 7, 7]);
/// ```
pub fn max_pool(t: &Tensor, kernel_size: &[i64]) -> Result<Tensor> {
    max_pool_with(t, kernel_size, &PoolOptions::default(), StorageOrder::Row)
}

/// [`max_pool`] with PopXL's keyword arguments.
///
/// ```
/// use popxl::ops::{max_pool_with, PoolOptions, StorageOrder};
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::constant(ndarray::Array4::<f32>::ones((2, 3, 8, 8)), "x").unwrap();
/// let o = PoolOptions::default().stride([2, 2]);
/// assert_eq!(max_pool_with(&x, &[2, 2], &o, StorageOrder::Row).unwrap().shape(), &[2, 3, 4, 4]);
/// assert!(max_pool_with(&x, &[2, 2], &o, StorageOrder::Column).is_err());
/// ```
pub fn max_pool_with(
    t: &Tensor,
    kernel_size: &[i64],
    options: &PoolOptions,
    storage_order: StorageOrder,
) -> Result<Tensor> {
    if storage_order == StorageOrder::Column {
        return Err(PopXlError::Unsupported { what: "max_pool", feature: "storage_order column" });
    }
    options.build(OpBuilder::new("max_pool", &ir_ops::MaxPool).input(0, t), kernel_size).create1()
}

/// Average pooling of `t` `[N, C, D..]` with windows of `kernel_size`, stride 1
/// and no padding (op `AveragePool`; PopXL `average_pool`). Each output is the
/// mean of its window's elements inside the input (padding is not counted).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::constant(ndarray::Array3::<f32>::ones((2, 3, 8)), "x").unwrap();
/// assert_eq!(popxl::ops::average_pool(&x, &[3]).unwrap().shape(), &[2, 3, 6]);
/// ```
pub fn average_pool(t: &Tensor, kernel_size: &[i64]) -> Result<Tensor> {
    average_pool_with(t, kernel_size, &PoolOptions::default())
}

/// [`average_pool`] with PopXL's keyword arguments.
///
/// ```
/// use popxl::ops::{average_pool_with, PoolOptions};
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::constant(ndarray::Array4::<f32>::ones((1, 1, 5, 5)), "x").unwrap();
/// let o = PoolOptions::default().stride([2, 2]).padding([1, 1, 1, 1]);
/// assert_eq!(average_pool_with(&x, &[3, 3], &o).unwrap().shape(), &[1, 1, 3, 3]);
/// ```
pub fn average_pool_with(t: &Tensor, kernel_size: &[i64], options: &PoolOptions) -> Result<Tensor> {
    options.build(OpBuilder::new("average_pool", &ir_ops::AveragePool).input(0, t), kernel_size).create1()
}
