//! Region-of-interest pooling: [`roi_align`].

use popart_ir::ops::all as ir_ops;
use popart_ir::ops::roi_align::RoiAlignAttrs;

use super::OpBuilder;
use crate::{PopXlError, Result, Tensor};

/// Average pooling over regions of interest (op `RoiAlign`; PopXL `roi_align`):
/// `t` `[N, C, H, W]`, `rois` `[R, 4]` as `[x1, y1, x2, y2]` in input-image
/// coordinates, `batch_index` `[R]` (the image of each ROI) give
/// `[R, C, output_size[0], output_size[1]]`. Each bin averages a grid of
/// `sampling_ratio²` bilinear samples (0: adaptive, `ceil(roi size / output
/// size)` per axis) of `t` at the ROI scaled by `spatial_scale`, as
/// torchvision's `RoIAlign(aligned=False)` (see `popart_ir::ops::roi_align`).
/// Differentiable w.r.t. `t`.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::constant(ndarray::Array4::<f32>::ones((2, 3, 8, 8)), "x").unwrap();
/// let rois = popxl::constant(ndarray::arr2(&[[0f32, 0.0, 4.0, 4.0], [2.0, 2.0, 7.0, 6.0]]), "rois").unwrap();
/// let idx = popxl::constant(ndarray::arr1(&[0i32, 1]), "idx").unwrap();
/// let y = popxl::ops::roi_align(&x, &rois, &idx, [2, 2], 1.0, 2).unwrap();
/// assert_eq!(y.shape(), &[2, 3, 2, 2]);
/// ```
pub fn roi_align(
    t: &Tensor,
    rois: &Tensor,
    batch_index: &Tensor,
    output_size: [i64; 2],
    spatial_scale: f64,
    sampling_ratio: i64,
) -> Result<Tensor> {
    if output_size.iter().any(|&d| d < 1) {
        return Err(PopXlError::ValueOutOfRange {
            what: "roi_align: output_size".to_string(),
            expected: "positive",
            got: format!("{output_size:?}"),
        });
    }
    OpBuilder::new("roi_align", &ir_ops::RoiAlign)
        .input(0, t)
        .input(1, rois)
        .input(2, batch_index)
        .typed(&RoiAlignAttrs {
            output_height: output_size[0],
            output_width: output_size[1],
            sampling_ratio,
            spatial_scale,
        })
        .create1()
}
