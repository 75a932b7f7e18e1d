//! The two layer ops the network needs, on top of `popxl::ops`.

use popxl::ops::{self, ConvOptions, PoolOptions, StorageOrder};
use popxl::Tensor;

/// 2-D convolution, NCHW input and [C_out, C_in, k, k] weight, stride 1,
/// `pad` zeros on every side.
pub fn conv2d(x: &Tensor, w: &Tensor, pad: usize) -> popxl::Result<Tensor> {
    let p = pad as i64;
    ops::conv_with(x, w, &ConvOptions::default().padding([p, p, p, p]))
}

/// 2x2 max pooling with stride 2.
pub fn max_pool2(x: &Tensor) -> popxl::Result<Tensor> {
    ops::max_pool_with(x, &[2, 2], &PoolOptions::default().stride([2, 2]), StorageOrder::Row)
}
