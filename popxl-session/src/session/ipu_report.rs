//! The `ipu_model` device's model of an IPU: the tile-memory check made by
//! `Session::new` and the report ([`Session::ipu_model_report`]). The model
//! itself is `popart_lower::ipu_model`, a pure function of the executable and
//! [`crate::SessionOptions::ipu_model`].

use popart_lower::ipu_model::{estimate, IpuModelReport};
use popart_lower::{Executable, IpuModelConfig};

use super::{Result, Session};
use crate::SessionError;

/// Fail with [`SessionError::TileMemoryExceeded`] when `exe` does not fit in the
/// tile memory `config` describes.
pub(super) fn check_fits(exe: &Executable, config: &IpuModelConfig) -> Result<()> {
    let report = estimate(exe, config)?;
    match report.memory.out_of_memory(&format!("ipu_model ({})", config.name)) {
        Some(oom) => Err(SessionError::TileMemoryExceeded(Box::new(oom))),
        None => Ok(()),
    }
}

impl Session {
    /// The `ipu_model` estimate of this session's program on the IPU of
    /// [`crate::SessionOptions::ipu_model`]: tile memory per program point (live
    /// tensors and code, in total and on the most loaded tile; the peak and what
    /// is live there) and the timeline of one run (compute and exchange cycles
    /// per program step, merged exchanges, overlap on IO tiles). Available on
    /// every device (a `cpu` session is modelled as lowered for `cpu`, that is
    /// with calls inlined); printing it (`Display`) gives the tables.
    ///
    /// ```
    /// use popxl::ops;
    /// let ir = popxl::Ir::new();
    /// {
    ///     let _g = ir.main_graph().enter();
    ///     let x = popxl::variable(ndarray::Array2::<f32>::ones((64, 64)), "x").unwrap();
    ///     let y = ops::matmul(&x, &x).unwrap();
    ///     let out = popxl::d2h_stream([64, 64], popxl::float32, "y").unwrap();
    ///     ops::host_store(&out, &y).unwrap();
    /// }
    /// let session = popxl_session::Session::new(ir, "ipu_model").unwrap();
    /// let report = session.ipu_model_report().unwrap();
    /// assert!(report.memory.fits());
    /// assert_eq!(report.timeline.totals.flops, 2 * 64 * 64 * 64);
    /// println!("{report}");
    /// ```
    pub fn ipu_model_report(&self) -> Result<IpuModelReport> {
        Ok(estimate(&self.exe, &self.options.ipu_model)?)
    }
}
