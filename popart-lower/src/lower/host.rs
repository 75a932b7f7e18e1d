//! Host side: data streams (the main graph's stream tensors), and the variables and
//! constants of the buffers with their weight streams.

use std::collections::HashMap;

use popart_ir::{Ir, StreamDirection, TensorKind};

use crate::executable::{Buffer, Constant, RemoteWeight, Stream, StreamId, StreamKind, TensorRef, Weight};
use crate::LowerError;

/// The streams, weights and constants of an executable.
pub(super) struct HostIo<'a> {
    /// Data streams (main-graph stream tensors, in creation order), then two weight
    /// streams (to and from the device) per variable.
    pub(super) streams: Vec<Stream>,
    /// Data stream of each (direction, name).
    pub(super) data_streams: HashMap<(StreamDirection, &'a str), StreamId>,
    /// Variables, in buffer order.
    pub(super) weights: Vec<Weight>,
    /// Constants, in buffer order.
    pub(super) constants: Vec<Constant>,
    /// Remote variables, in tensor creation order.
    pub(super) remote_weights: Vec<RemoteWeight>,
}

// Ids are u32 like every dense index here: more than 2^32 streams would need
// more than 2^32 tensors in memory, which no IR can hold.
#[allow(clippy::expect_used)]
fn stream_id(i: usize) -> StreamId {
    StreamId(u32::try_from(i).expect("stream count overflows u32"))
}

impl<'a> HostIo<'a> {
    /// The data streams of `ir`, and the variables and constants among the members
    /// of `buffers`.
    pub(super) fn collect(ir: &'a Ir, buffers: &[Buffer]) -> Result<Self, LowerError> {
        let mut io = HostIo {
            streams: Vec::new(),
            data_streams: HashMap::new(),
            weights: Vec::new(),
            constants: Vec::new(),
            remote_weights: Vec::new(),
        };
        let main = ir.main_graph();
        for t in main.tensors() {
            if let TensorKind::Stream(direction) = t.kind {
                let id = stream_id(io.streams.len());
                io.streams.push(Stream {
                    id,
                    name: t.name.clone(),
                    direction,
                    info: t.info.clone(),
                    kind: StreamKind::Data,
                    tensor: t.id,
                    graph: main.id(),
                });
                io.data_streams.insert((direction, t.name.as_str()), id);
            }
        }
        for b in buffers {
            for r in &b.tensors {
                match &ir.graph(r.graph)?.tensor(r.tensor)?.kind {
                    TensorKind::Variable(_) => io.add_weight(ir, r, b)?,
                    TensorKind::Constant(data) => {
                        io.constants.push(Constant { tensor: r.clone(), buffer: b.id, data: data.clone() })
                    }
                    _ => {}
                }
            }
        }
        let mut remote: Vec<_> = ir.remote_variables().collect();
        remote.sort_by_key(|&(t, _)| main.tensor(t).map_or(u64::MAX, |t| t.seq()));
        for (t, slot) in remote {
            let r =
                TensorRef { graph: main.id(), tensor: t, name: format!("{}/{}", main.name(), main.tensor(t)?.name) };
            let (from_host, to_host) = io.weight_streams(ir, &r)?;
            io.remote_weights.push(RemoteWeight { tensor: r, slot, from_host, to_host });
        }
        Ok(io)
    }

    /// Variable `r` stored in buffer `b`, with its two weight streams.
    fn add_weight(&mut self, ir: &Ir, r: &TensorRef, b: &Buffer) -> Result<(), LowerError> {
        let (from_host, to_host) = self.weight_streams(ir, r)?;
        self.weights.push(Weight { tensor: r.clone(), buffer: b.id, from_host, to_host });
        Ok(())
    }

    /// The two weight streams of variable `r`.
    fn weight_streams(&mut self, ir: &Ir, r: &TensorRef) -> Result<(StreamId, StreamId), LowerError> {
        let tensor = ir.graph(r.graph)?.tensor(r.tensor)?;
        let mut stream = |direction| {
            let id = stream_id(self.streams.len());
            self.streams.push(Stream {
                id,
                name: r.name.clone(),
                direction,
                info: tensor.info.clone(),
                kind: StreamKind::Weight,
                tensor: r.tensor,
                graph: r.graph,
            });
            id
        };
        let from_host = stream(StreamDirection::HostToDevice);
        let to_host = stream(StreamDirection::DeviceToHost);
        Ok((from_host, to_host))
    }
}
