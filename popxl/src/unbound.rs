//! Unbound handles: [`Tensor`] and stream handles made from an IR core that no
//! [`crate::Ir`] handle wraps.
//!
//! Code that keeps its own copy of a frozen IR's core, such as a session, uses
//! these constructors to hand handles back to its caller. An unbound handle compares and hashes equal to the handles of the IR
//! the core was cloned from (same IR id, graph id and tensor id) and knows its
//! name, shape and data type; methods that read the IR (for example
//! [`Tensor::kind`]) report [`crate::PopXlError::IrDropped`].

use std::sync::Weak;

use popart_ir::{GraphId, StreamDirection, TensorId, TensorKind};

use crate::{DeviceToHostStream, Graph, HostToDeviceStream, PopXlError, Result, Tensor};

impl Tensor {
    /// An unbound handle to tensor `tensor` of graph `graph` of the IR core `core`
    /// (see the [`crate::Tensor`] docs on handles; unbound handles have no IR).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let c = ir.main_graph().with(|| popxl::constant(1.0f32, "c")).unwrap();
    /// let core = ir.with_ir(|core| core.clone());
    /// let u = popxl::Tensor::unbound(&core, c.graph_id(), c.tensor_id()).unwrap();
    /// assert_eq!((&u, u.name(), u.shape()), (&c, "c", &[][..]));
    /// assert!(matches!(u.kind(), Err(popxl::PopXlError::IrDropped { .. })));
    /// ```
    pub fn unbound(core: &popart_ir::Ir, graph: GraphId, tensor: TensorId) -> Result<Tensor> {
        let g = core.graph(graph)?;
        let handle = Graph::new(Weak::new(), core.id(), graph, g.name().to_string());
        Ok(Tensor::from_core(&handle, g.tensor(tensor)?))
    }
}

/// The main-graph stream tensor `tensor` of `core`, unbound, if its direction is `dir`.
fn unbound_stream(core: &popart_ir::Ir, tensor: TensorId, dir: StreamDirection, label: &'static str) -> Result<Tensor> {
    let main = core.main_graph();
    match main.tensor(tensor)?.kind {
        TensorKind::Stream(d) if d == dir => Tensor::unbound(core, main.id(), tensor),
        _ => Err(PopXlError::NotAStream { tensor: main.tensor(tensor)?.name.clone(), kind: label }),
    }
}

impl HostToDeviceStream {
    /// An unbound handle to the host-to-device stream `tensor` of the main graph
    /// of `core`; an error for any other tensor (see [`Tensor::unbound`]).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let s = ir.main_graph().with(|| popxl::h2d_stream([2], popxl::float32, "in")).unwrap();
    /// let core = ir.with_ir(|core| core.clone());
    /// let tensor = s.tensor().tensor_id();
    /// assert_eq!(popxl::HostToDeviceStream::unbound(&core, tensor).unwrap(), s);
    /// assert!(popxl::DeviceToHostStream::unbound(&core, tensor).is_err());
    /// ```
    pub fn unbound(core: &popart_ir::Ir, tensor: TensorId) -> Result<Self> {
        let t = unbound_stream(core, tensor, StreamDirection::HostToDevice, "h2d_stream")?;
        Ok(Self::from_tensor_unchecked(t))
    }
}

impl DeviceToHostStream {
    /// An unbound handle to the device-to-host stream `tensor` of the main graph
    /// of `core`; an error for any other tensor (see [`Tensor::unbound`]).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let s = ir.main_graph().with(|| popxl::d2h_stream([2], popxl::float32, "out")).unwrap();
    /// let core = ir.with_ir(|core| core.clone());
    /// let u = popxl::DeviceToHostStream::unbound(&core, s.tensor().tensor_id()).unwrap();
    /// assert_eq!((&u, u.shape()), (&s, &[2][..]));
    /// ```
    pub fn unbound(core: &popart_ir::Ir, tensor: TensorId) -> Result<Self> {
        let t = unbound_stream(core, tensor, StreamDirection::DeviceToHost, "d2h_stream")?;
        Ok(Self::from_tensor_unchecked(t))
    }
}
