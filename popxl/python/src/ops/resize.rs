//! `popxl.ops` image resampling: `interpolate` and `roi_align`.

use popxl::ops::{self, InterpolateOptions};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use super::{t_of, Out};
use crate::errors::IntoPy;
use crate::tensor::wrap;

/// `ops.interpolate(t, scale_factor=(1.0, 1.0, 1.0, 1.0), mode='nearest',
/// nearest_mode='round_prefer_floor', coordinate_transformation_mode='half_pixel')`:
/// resize every dim of `t` by its scale (output dim `floor(input dim * scale)`).
/// `mode` 'nearest' or 'linear' ('cubic' is not provided); `nearest_mode`
/// 'round_prefer_floor', 'round_prefer_ceil', 'floor' or 'ceil';
/// `coordinate_transformation_mode` 'half_pixel', 'pytorch_half_pixel',
/// 'align_corners' or 'asymmetric'.
#[pyfunction]
#[pyo3(signature = (t, scale_factor=None, mode="nearest", nearest_mode="round_prefer_floor", coordinate_transformation_mode="half_pixel"))]
fn interpolate(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    scale_factor: Option<Vec<f64>>,
    mode: &str,
    nearest_mode: &str,
    coordinate_transformation_mode: &str,
) -> Out {
    let t = t_of(t)?;
    let scale_factor = scale_factor.unwrap_or_else(|| vec![1.0; 4]);
    if scale_factor.len() != t.rank() {
        return Err(PyValueError::new_err(format!(
            "interpolate: scale_factor has {} entries but the input has rank {} (one scale per dimension)",
            scale_factor.len(),
            t.rank()
        )));
    }
    if let Some(s) = scale_factor.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
        return Err(PyValueError::new_err(format!("interpolate: scales must be positive, not {s}")));
    }
    let options = InterpolateOptions {
        scale_factor,
        mode: mode.to_string(),
        nearest_mode: nearest_mode.to_string(),
        coordinate_transformation_mode: coordinate_transformation_mode.to_string(),
    };
    wrap(py, ops::interpolate(&t, &options).py()?)
}

/// `ops.roi_align(t, rois, batch_index, output_size, spatial_scale, sampling_ratio)`:
/// average pooling of `t` `[N, C, H, W]` over regions of interest `rois` `[R, 4]`
/// (`[x1, y1, x2, y2]`, scaled by `spatial_scale`) of the images `batch_index` `[R]`,
/// giving `[R, C, output_size[0], output_size[1]]`; each bin averages
/// `sampling_ratio`² bilinear samples (0: adaptive).
#[pyfunction]
fn roi_align(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    rois: &Bound<'_, PyAny>,
    batch_index: &Bound<'_, PyAny>,
    output_size: &Bound<'_, PyAny>,
    spatial_scale: f64,
    sampling_ratio: i64,
) -> Out {
    let size: Vec<i64> = output_size
        .extract()
        .map_err(|_| PyTypeError::new_err("roi_align: output_size must be a pair of ints (height, width)"))?;
    let [h, w] = size[..] else {
        return Err(PyValueError::new_err(format!(
            "roi_align: output_size must have 2 entries (height, width), not {}",
            size.len()
        )));
    };
    if sampling_ratio < 0 {
        return Err(PyValueError::new_err(format!("roi_align: sampling_ratio must be >= 0, not {sampling_ratio}")));
    }
    wrap(py, ops::roi_align(&t_of(t)?, &t_of(rois)?, &t_of(batch_index)?, [h, w], spatial_scale, sampling_ratio).py()?)
}

/// Register this family's functions in `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(interpolate, m)?)?;
    m.add_function(wrap_pyfunction!(roi_align, m)?)?;
    Ok(())
}
