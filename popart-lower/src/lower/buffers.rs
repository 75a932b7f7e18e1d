//! Buffers: one per alias class that is permanent or live, numbered in program
//! order, then one per copy temporary; and their offsets in the arena (variables
//! and constants first, always live, then activations with reuse, see
//! [`crate::memory`]).

use std::collections::HashMap;

use popart_ir::size::{SizeError, MAX_TENSOR_BYTES};
use popart_ir::{GraphId, TensorId, TensorKind};

use super::index::{ClassId, GraphIndex, IndexVec, TempId, TensorKey};
use super::liveness::ClassLifetimes;
use super::Lowerer;
use crate::executable::{Buffer, BufferId, BufferKind, TensorRef, BUFFER_ALIGNMENT};
use crate::memory::{align_up, assign_offsets, normalize, Intervals};
use crate::LowerError;

/// The buffer of each class (`None`: the class has no buffer).
type ClassBuffers = IndexVec<ClassId, Option<BufferId>>;

/// The buffers of an executable and what they hold.
pub(super) struct BufferTable {
    /// Every buffer, in id order (offsets are set by [`BufferTable::place`]).
    pub(super) buffers: Vec<Buffer>,
    /// Normalized live steps of each buffer (empty for permanent buffers).
    pub(super) lives: Vec<Intervals>,
    /// Buffer of each class.
    pub(super) class_buffer: ClassBuffers,
    /// Buffer of each copy temporary.
    pub(super) temp_buffer: IndexVec<TempId, BufferId>,
    /// Buffer of every tensor that has one.
    pub(super) tensor_buffers: HashMap<(GraphId, TensorId), BufferId>,
}

/// Where [`BufferTable::place`] put the buffers.
pub(super) struct Placement {
    /// Bytes of the permanent buffers, at the bottom of the arena.
    pub(super) permanent_bytes: usize,
    /// End of the highest activation buffer.
    pub(super) end: usize,
}

// Ids are u32 like every dense index here: more than 2^32 buffers would need
// more than 2^32 tensors in memory, which no IR can hold.
#[allow(clippy::expect_used)]
fn buffer_id(i: usize) -> BufferId {
    BufferId(u32::try_from(i).expect("buffer count overflows u32"))
}

impl Lowerer<'_> {
    /// Buffers of the classes and temporaries (not yet placed).
    pub(super) fn buffers(&self, mut lifetimes: ClassLifetimes) -> Result<BufferTable, LowerError> {
        let (class_buffer, buffer_classes) = self.number_buffers(&lifetimes)?;
        let mut table = BufferTable {
            buffers: Vec::with_capacity(buffer_classes.len() + self.temps.len()),
            lives: Vec::with_capacity(buffer_classes.len() + self.temps.len()),
            class_buffer,
            temp_buffer: IndexVec::with_capacity(self.temps.len()),
            tensor_buffers: HashMap::with_capacity(self.tensors.len()),
        };
        for &r in &buffer_classes {
            self.push_class_buffer(r, &mut table);
            table.lives.push(normalize(lifetimes.live[r].take().unwrap_or_default()));
        }
        self.temp_buffers(&mut table);
        Ok(table)
    }

    /// Number the classes that need a buffer in program order (graph by graph:
    /// inputs, each op's inputs and outputs, outputs; then any other tensor).
    /// Returns the buffer of each class and the class of each buffer.
    fn number_buffers(&self, lifetimes: &ClassLifetimes) -> Result<(ClassBuffers, Vec<ClassId>), LowerError> {
        let mut class_buffer: ClassBuffers = IndexVec::from_elem(None, self.tensors.len());
        let mut buffer_classes: Vec<ClassId> = Vec::new();
        let mut visit = |key: Option<&TensorKey>| {
            let Some(&k) = key else { return };
            let r = self.classes.find(k);
            if class_buffer[r].is_none() && lifetimes.has_buffer(r) {
                class_buffer[r] = Some(buffer_id(buffer_classes.len()));
                buffer_classes.push(r);
            }
        };
        for gd in &self.graphs {
            gd.graph.inputs().iter().for_each(|&t| visit(gd.keys.get(t)));
            for &o in &gd.sched {
                let op = gd.graph.op(o)?;
                op.inputs().tensors().for_each(|t| visit(gd.keys.get(t)));
                op.outputs().tensors().for_each(|t| visit(gd.keys.get(t)));
            }
            gd.graph.outputs().iter().for_each(|&t| visit(gd.keys.get(t)));
        }
        for gd in &self.graphs {
            for t in gd.graph.tensors() {
                visit(gd.keys.get(t.id));
            }
        }
        Ok((class_buffer, buffer_classes))
    }

    /// The IPU tensor `t` of graph `g` is on, if placed: where its producer
    /// writes it, else where its first consumer (by creation) reads it.
    pub(super) fn tensor_ipu(&self, (g, t): (GraphIndex, TensorId)) -> Option<u32> {
        let graph = self.graphs[g].graph;
        let tensor = graph.tensor(t).ok()?;
        if let Some(p) = tensor.producer() {
            return graph.op(p.op).ok()?.output_ipu();
        }
        let first = tensor.consumers().iter().filter_map(|p| graph.op(p.op).ok()).min_by_key(|op| op.seq());
        first.and_then(|op| op.input_ipu())
    }

    /// The tensor reference of key `k`, named `graph/tensor`.
    fn tensor_ref(&self, k: TensorKey) -> TensorRef {
        let (g, t) = self.tensors[k];
        let gd = &self.graphs[g];
        TensorRef { graph: gd.id, tensor: t, name: format!("{}/{}", gd.graph.name(), self.tensor(k).name) }
    }

    /// Append the buffer of class `r` (the next id) and record its tensors.
    fn push_class_buffer(&self, r: ClassId, table: &mut BufferTable) {
        let id = buffer_id(table.buffers.len());
        let mut members = self.classes.members(r).to_vec();
        members.sort_unstable();
        let kind = if members.iter().any(|&m| matches!(self.kind_of(m), TensorKind::Variable(_))) {
            BufferKind::Variable
        } else if members.iter().any(|&m| matches!(self.kind_of(m), TensorKind::Constant(_))) {
            BufferKind::Constant
        } else {
            BufferKind::Activation
        };
        let mut bytes = 0;
        let mut refs = Vec::with_capacity(members.len());
        for &m in &members {
            bytes = bytes.max(self.tensor(m).info.nbytes());
            let r = self.tensor_ref(m);
            table.tensor_buffers.insert((r.graph, r.tensor), id);
            refs.push(r);
        }
        // The class representative's own name first when it is a variable/constant.
        let first = members.iter().position(|&m| !matches!(self.kind_of(m), TensorKind::ActGrad)).unwrap_or(0);
        refs.swap(0, first);
        let ipu = members.iter().find_map(|&m| self.tensor_ipu(self.tensors[m])).unwrap_or(0);
        table.buffers.push(Buffer {
            id,
            info: self.tensor(members[first]).info.clone(),
            kind,
            offset: 0,
            size: align_up(bytes, BUFFER_ALIGNMENT),
            tensors: refs,
            ipu,
        });
    }

    /// Append one activation buffer per copy temporary, live at its step of every
    /// instance of its graph.
    fn temp_buffers(&self, table: &mut BufferTable) {
        for t in &self.temps {
            let id = buffer_id(table.buffers.len());
            table.temp_buffer.push(id);
            table.buffers.push(Buffer {
                id,
                info: t.info.clone(),
                kind: BufferKind::Activation,
                offset: 0,
                size: align_up(t.info.nbytes(), BUFFER_ALIGNMENT),
                tensors: Vec::new(),
                ipu: t.ipu,
            });
            let steps = self.graphs[t.graph].instances.iter().map(|&b| ((b + t.step) as u64, (b + t.step) as u64));
            table.lives.push(normalize(steps.collect()));
        }
    }
}

impl BufferTable {
    /// Set every offset: permanent buffers first, one after the other, then
    /// activations with reuse.
    ///
    /// The sum of every buffer's size (the no-reuse total) is checked first: it
    /// must fit in [`MAX_TENSOR_BYTES`], else the plan is a
    /// [`SizeError::Overflow`]. Every offset and end the strategies compute is at
    /// most that total, so their unchecked arithmetic cannot overflow.
    pub(super) fn place(&mut self) -> Result<Placement, SizeError> {
        let total =
            self.buffers.iter().try_fold(0usize, |acc, b| acc.checked_add(b.size)).filter(|&t| t <= MAX_TENSOR_BYTES);
        if total.is_none() {
            return Err(SizeError::Overflow {
                what: format!("the memory plan ({} buffers, sizes {:?}..)", self.buffers.len(), self.largest_sizes()),
            });
        }
        let mut permanent_bytes = 0;
        for b in self.buffers.iter_mut().filter(|b| b.kind != BufferKind::Activation) {
            b.offset = permanent_bytes;
            permanent_bytes += b.size;
        }
        let sizes: Vec<usize> =
            self.buffers.iter().map(|b| if b.kind == BufferKind::Activation { b.size } else { 0 }).collect();
        let (offsets, end) = assign_offsets(&sizes, &self.lives, permanent_bytes);
        for (b, off) in self.buffers.iter_mut().zip(offsets) {
            if b.kind == BufferKind::Activation {
                b.offset = off;
            }
        }
        Ok(Placement { permanent_bytes, end })
    }

    /// The three largest buffer sizes (for the overflow message).
    fn largest_sizes(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self.buffers.iter().map(|b| b.size).collect();
        v.sort_unstable_by(|a, b| b.cmp(a));
        v.truncate(3);
        v
    }
}
