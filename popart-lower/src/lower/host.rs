//! Host side: data streams (the main graph's stream tensors), and the variables and
//! constants of the buffers with their weight streams.

use std::collections::HashMap;

use popart_ir::{Ir, StreamDirection, TensorKind};

use crate::executable::{Buffer, Constant, Stream, StreamId, StreamKind, TensorRef, Weight};
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
        let mut io =
            HostIo { streams: Vec::new(), data_streams: HashMap::new(), weights: Vec::new(), constants: Vec::new() };
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
        Ok(io)
    }

    /// Variable `r` stored in buffer `b`, with its two weight streams.
    fn add_weight(&mut self, ir: &Ir, r: &TensorRef, b: &Buffer) -> Result<(), LowerError> {
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
        self.weights.push(Weight { tensor: r.clone(), buffer: b.id, from_host, to_host });
        Ok(())
    }
}
