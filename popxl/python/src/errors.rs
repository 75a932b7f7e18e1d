//! Rust errors as the Python exceptions PopXL raises for the same mistakes.

use popxl::PopXlError;
use popxl_session::SessionError;
use pyo3::exceptions::{PyNotImplementedError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;

pyo3::create_exception!(
    _native,
    UndefinedValue,
    pyo3::exceptions::PyException,
    "A value that was never set was read (a tensor's ipu or tile set)."
);

/// A `popxl` build error as a Python exception.
pub fn build_err(e: PopXlError) -> PyErr {
    if matches!(&e, PopXlError::OpCreatedHook { message } if message == crate::hooks::HOOK_RAISED) {
        if let Some(hook_error) = crate::hooks::take_hook_error() {
            return hook_error;
        }
    }
    let msg = e.to_string();
    match e {
        PopXlError::UndefinedValue { .. } => UndefinedValue::new_err(msg),
        PopXlError::IrDropped { .. } | PopXlError::IrFrozen { .. } | PopXlError::NoGraphContext { .. } => {
            PyRuntimeError::new_err(msg)
        }
        PopXlError::HostCast { .. } => PyTypeError::new_err(msg),
        _ => PyValueError::new_err(msg),
    }
}

/// A session error as a Python exception (PopXL's types, §5 of the API notes).
pub fn session_err(e: SessionError) -> PyErr {
    let msg = e.to_string();
    match e {
        SessionError::NotVariableOrConstant { .. }
        | SessionError::NotAVariable { .. }
        | SessionError::WriteDTypeMismatch { .. }
        | SessionError::StreamDTypeMismatch { .. } => PyTypeError::new_err(msg),
        SessionError::WriteAllReplicas { .. } => PyNotImplementedError::new_err(msg),
        SessionError::NoOps { .. }
        | SessionError::AttachFailed { .. }
        | SessionError::InvalidIr(_)
        | SessionError::Transform(_)
        | SessionError::Lower(_)
        | SessionError::Kernel(_)
        | SessionError::OutOfMemory { .. }
        | SessionError::TileMemoryExceeded(_)
        | SessionError::IpuModel(_)
        | SessionError::Device(_)
        | SessionError::Internal { .. }
        | SessionError::Log2ScaleOutOfRange { .. }
        | SessionError::NoTransport { .. }
        | SessionError::Processes(_) => PyRuntimeError::new_err(msg),
        _ => PyValueError::new_err(msg),
    }
}

/// `Result<T, PopXlError>` to `PyResult<T>`.
pub trait IntoPy<T> {
    /// Convert the error.
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for Result<T, PopXlError> {
    fn py(self) -> PyResult<T> {
        self.map_err(build_err)
    }
}

impl<T> IntoPy<T> for Result<T, SessionError> {
    fn py(self) -> PyResult<T> {
        self.map_err(session_err)
    }
}
