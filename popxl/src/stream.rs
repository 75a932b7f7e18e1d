//! Host streams: [`HostToDeviceStream`] and [`DeviceToHostStream`].

use std::fmt;

use popart_ir::{DataType, StreamDirection, TensorInfo, TensorKind};

use crate::variables::add_tensor;
use crate::{context, PopXlError, Result, Tensor, TensorSpec};

macro_rules! stream_type {
    ($(#[$doc:meta])* $name:ident, $dir:expr, $label:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash)]
        pub struct $name {
            tensor: Tensor,
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({}: {})", stringify!($name), self.tensor.name(), self.tensor.info())
            }
        }

        impl $name {
            pub(crate) fn from_tensor_unchecked(tensor: Tensor) -> Self {
                $name { tensor }
            }

            /// The stream's name (unique in the main graph).
            ///
            /// ```
            #[doc = concat!("let ir = popxl::Ir::new();")]
            #[doc = concat!("let _g = ir.main_graph().enter();")]
            #[doc = concat!("let s = popxl::", $label, "([2], popxl::float32, \"s\").unwrap();")]
            #[doc = concat!("assert_eq!(s.name(), \"s\");")]
            /// ```
            pub fn name(&self) -> &str {
                self.tensor.name()
            }

            /// Shape of one transfer.
            ///
            /// ```
            #[doc = concat!("let ir = popxl::Ir::new();")]
            #[doc = concat!("let _g = ir.main_graph().enter();")]
            #[doc = concat!("let s = popxl::", $label, "([2, 3], popxl::float32, \"s\").unwrap();")]
            #[doc = concat!("assert_eq!(s.shape(), &[2, 3]);")]
            /// ```
            pub fn shape(&self) -> &[usize] {
                self.tensor.shape()
            }

            /// Element type.
            ///
            /// ```
            #[doc = concat!("let ir = popxl::Ir::new();")]
            #[doc = concat!("let _g = ir.main_graph().enter();")]
            #[doc = concat!("let s = popxl::", $label, "([2], popxl::int32, \"s\").unwrap();")]
            #[doc = concat!("assert_eq!(s.dtype(), popxl::int32);")]
            /// ```
            pub fn dtype(&self) -> DataType {
                self.tensor.dtype()
            }

            /// Shape and element type.
            ///
            /// ```
            #[doc = concat!("let ir = popxl::Ir::new();")]
            #[doc = concat!("let _g = ir.main_graph().enter();")]
            #[doc = concat!("let s = popxl::", $label, "([2], popxl::int32, \"s\").unwrap();")]
            #[doc = concat!("assert_eq!(s.spec(), popxl::TensorSpec::new([2], popxl::int32));")]
            /// ```
            pub fn spec(&self) -> TensorSpec {
                self.tensor.spec()
            }

            /// The stream tensor in the main graph (kind `Stream`; ops never consume it directly).
            ///
            /// ```
            #[doc = concat!("let ir = popxl::Ir::new();")]
            #[doc = concat!("let _g = ir.main_graph().enter();")]
            #[doc = concat!("let s = popxl::", $label, "([2], popxl::int32, \"s\").unwrap();")]
            #[doc = concat!("assert_eq!(s.tensor().graph(), ir.main_graph());")]
            /// ```
            pub fn tensor(&self) -> &Tensor {
                &self.tensor
            }

            /// Wrap a main-graph stream tensor of this direction, e.g. one found with
            /// [`crate::Graph::get_tensor`]; an error for any other tensor.
            ///
            /// ```
            #[doc = concat!("let ir = popxl::Ir::new();")]
            #[doc = concat!("let _g = ir.main_graph().enter();")]
            #[doc = concat!("let s = popxl::", $label, "([2], popxl::int32, \"s\").unwrap();")]
            #[doc = concat!("let t = ir.main_graph().get_tensor(\"s\").unwrap();")]
            #[doc = concat!("assert_eq!(popxl::", stringify!($name), "::from_tensor(t).unwrap(), s);")]
            /// ```
            pub fn from_tensor(tensor: Tensor) -> Result<Self> {
                match tensor.kind()? {
                    TensorKind::Stream(d) if d == $dir => Ok($name { tensor }),
                    _ => Err(PopXlError::NotAStream { tensor: tensor.name().to_string(), kind: $label }),
                }
            }
        }
    };
}

stream_type!(
    /// A host-to-device stream (PopXL's `HostToDeviceStream`): data the host
    /// sends on every session `run`, read on the device by [`crate::ops::host_load`].
    ///
    /// ```
    /// use popxl::{ops, Ir};
    /// let ir = Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let input = popxl::h2d_stream([2, 2], popxl::float32, "input_stream").unwrap();
    /// let x = ops::host_load(&input, "x").unwrap();
    /// assert_eq!(x.spec(), input.spec());
    /// ```
    HostToDeviceStream,
    StreamDirection::HostToDevice,
    "h2d_stream"
);

stream_type!(
    /// A device-to-host stream (PopXL's `DeviceToHostStream`): data the device
    /// sends back with [`crate::ops::host_store`].
    ///
    /// ```
    /// use popxl::{ops, Ir};
    /// let ir = Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
    /// let out = popxl::d2h_stream(x.shape(), x.dtype(), "out").unwrap();
    /// ops::host_store(&out, &x).unwrap();
    /// ```
    DeviceToHostStream,
    StreamDirection::DeviceToHost,
    "d2h_stream"
);

fn create_stream(shape: Vec<usize>, dtype: DataType, name: &str, dir: StreamDirection, what: &str) -> Result<Tensor> {
    let current = context::try_current_graph().ok_or_else(|| PopXlError::NoGraphContext { what: what.to_string() })?;
    let main = current.ir()?.main_graph();
    add_tensor(&main, name, TensorInfo::new(dtype, shape), TensorKind::Stream(dir), what)
}

/// A host-to-device stream of `shape` and `dtype`, always created in the main
/// graph of the current graph's IR (PopXL's `popxl.h2d_stream`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let sub = ir.create_empty_graph("sub").unwrap();
/// let s = sub.with(|| popxl::h2d_stream([4], popxl::float32, "in")).unwrap();
/// assert_eq!(s.tensor().graph(), ir.main_graph());
/// ```
pub fn h2d_stream(shape: impl Into<Vec<usize>>, dtype: DataType, name: &str) -> Result<HostToDeviceStream> {
    let t = create_stream(shape.into(), dtype, name, StreamDirection::HostToDevice, "h2d_stream")?;
    Ok(HostToDeviceStream::from_tensor_unchecked(t))
}

/// A device-to-host stream of `shape` and `dtype`, always created in the main
/// graph (PopXL's `popxl.d2h_stream`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let s = popxl::d2h_stream([4], popxl::float32, "out").unwrap();
/// assert_eq!(s.shape(), &[4]);
/// ```
pub fn d2h_stream(shape: impl Into<Vec<usize>>, dtype: DataType, name: &str) -> Result<DeviceToHostStream> {
    let t = create_stream(shape.into(), dtype, name, StreamDirection::DeviceToHost, "d2h_stream")?;
    Ok(DeviceToHostStream::from_tensor_unchecked(t))
}
