//! The cost of one execution of an op ([`OpDef::cost`](crate::OpDef::cost)):
//! FLOP and bytes from its tensor infos and attributes, and the engine that
//! does the arithmetic. The IPU model's timeline and performance counters read
//! it; so do the examples' model FLOP counts.

use crate::{Attributes, TensorInfo};

/// The unit an op's arithmetic runs on (the IPU's: the AMP matrix units or the
/// vector ALUs), which sets the FLOP rate a cost model applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CostEngine {
    /// Vector arithmetic (elementwise ops, reductions, data movement).
    Vector,
    /// Matrix multiply-accumulate (matmuls and convolutions).
    Matrix,
}

/// FLOP and bytes of one execution of an op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OpCost {
    /// Floating-point operations (a multiply-add counts 2).
    pub flops: u64,
    /// Bytes read and written: the sum of the arguments' sizes.
    pub bytes: u64,
    /// Where the arithmetic runs.
    pub engine: CostEngine,
}

/// What a cost is computed from: the infos of an op's connected inputs and
/// outputs (by index, sorted) and its attributes.
#[derive(Clone, Copy, Debug)]
pub struct CostContext<'a> {
    /// Connected inputs, sorted by index.
    pub inputs: &'a [(u32, &'a TensorInfo)],
    /// Connected outputs, sorted by index.
    pub outputs: &'a [(u32, &'a TensorInfo)],
    /// The op's attributes.
    pub attrs: &'a Attributes,
}

impl<'a> CostContext<'a> {
    /// The info of input `index`, if connected.
    pub fn input(&self, index: u32) -> Option<&'a TensorInfo> {
        self.inputs.iter().find(|(i, _)| *i == index).map(|(_, t)| *t)
    }

    /// The info of output `index`, if connected.
    pub fn output(&self, index: u32) -> Option<&'a TensorInfo> {
        self.outputs.iter().find(|(i, _)| *i == index).map(|(_, t)| *t)
    }

    /// Bytes of every input and output.
    pub fn arg_bytes(&self) -> u64 {
        self.inputs.iter().chain(self.outputs).fold(0u64, |acc, (_, t)| acc.saturating_add(t.nbytes() as u64))
    }

    /// The vector estimate, every op's default: one FLOP per element of its
    /// largest argument, its argument bytes.
    pub fn elementwise(&self) -> OpCost {
        let flops = self.inputs.iter().chain(self.outputs).map(|(_, t)| t.nelms() as u64).max().unwrap_or(0);
        OpCost { flops, bytes: self.arg_bytes(), engine: CostEngine::Vector }
    }

    /// A matrix-engine cost of `macs` multiply-adds (2 FLOP each).
    pub fn matrix(&self, macs: u64) -> OpCost {
        OpCost { flops: macs.saturating_mul(2), bytes: self.arg_bytes(), engine: CostEngine::Matrix }
    }

    /// Elements of input `index` (0 if not connected).
    pub fn input_elements(&self, index: u32) -> u64 {
        self.input(index).map_or(0, |t| t.nelms() as u64)
    }

    /// Elements of output `index` (0 if not connected).
    pub fn output_elements(&self, index: u32) -> u64 {
        self.output(index).map_or(0, |t| t.nelms() as u64)
    }

    /// The last dimension of input `index` (1 if not connected or a scalar):
    /// a matmul's contracted size.
    pub fn input_last_dim(&self, index: u32) -> u64 {
        self.input(index).and_then(|t| t.shape.last().copied()).unwrap_or(1) as u64
    }

    /// The product of input `index`'s dimensions after the first (1 if not
    /// connected): a convolution weight's window, input channels per group
    /// times the kernel's spatial size.
    pub fn input_window(&self, index: u32) -> u64 {
        self.input(index).map_or(1, |t| t.shape.iter().skip(1).fold(1u64, |a, &d| a.saturating_mul(d as u64)))
    }
}
