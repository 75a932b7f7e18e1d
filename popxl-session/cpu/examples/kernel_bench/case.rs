//! One benchmarked kernel: an op type, attributes and tensor infos.

use std::collections::HashMap;

use popart_ir::{AttrValue, Attributes, TensorInfo};

/// A kernel to build and time.
pub struct Case {
    /// Row label (also the key of the numpy baseline).
    pub label: String,
    /// Registered op type.
    pub op: &'static str,
    /// Op attributes.
    pub attrs: Attributes,
    /// Input infos, at indices 0..n.
    pub inputs: Vec<TensorInfo>,
    /// Output infos, at indices 0..n.
    pub outputs: Vec<TensorInfo>,
    /// (input, output) pairs sharing a buffer (in-place ops).
    pub aliases: Vec<(usize, usize)>,
    /// Raw bytes for inputs that need valid values (indices); the others hold
    /// floats in [-0.5, 0.5).
    pub data: HashMap<usize, Vec<u8>>,
}

#[allow(dead_code)] // builders used by some families' rows only
impl Case {
    /// `op` on `inputs`, one output.
    pub fn new(label: impl Into<String>, op: &'static str, inputs: Vec<TensorInfo>, output: TensorInfo) -> Case {
        Case {
            label: label.into(),
            op,
            attrs: Attributes::new(),
            inputs,
            outputs: vec![output],
            aliases: Vec::new(),
            data: HashMap::new(),
        }
    }

    /// Set an attribute.
    pub fn attr(mut self, key: &str, value: AttrValue) -> Case {
        self.attrs.set(key, value);
        self
    }

    /// Add an output.
    pub fn output(mut self, info: TensorInfo) -> Case {
        self.outputs.push(info);
        self
    }

    /// Input `input` is updated in place through output `output`.
    pub fn alias(mut self, input: usize, output: usize) -> Case {
        self.aliases.push((input, output));
        self
    }

    /// Raw contents of input `input` (for example int32 indices as bytes).
    pub fn data(mut self, input: usize, bytes: Vec<u8>) -> Case {
        self.data.insert(input, bytes);
        self
    }
}
