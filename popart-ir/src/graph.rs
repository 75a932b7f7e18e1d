//! A graph: ops and tensors in arenas, ordered inputs and outputs, topological constraints.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use slotmap::SlotMap;

use crate::hash::{FxHashMap, FxHasher};

use crate::{
    Attributes, GraphId, IrError, Op, OpDef, OpId, Port, Result, Tensor, TensorId, TensorIndexMap, TensorInfo,
    TensorKind, TopoCons,
};

/// Something with a name, stored in a graph arena.
trait HasName {
    fn name(&self) -> &str;
}

impl HasName for Op {
    fn name(&self) -> &str {
        &self.name
    }
}

impl HasName for Tensor {
    fn name(&self) -> &str {
        &self.name
    }
}

/// The 64-bit hash of a name used by [`Names`] (FxHash, then a full-avalanche finaliser
/// so that every bit is usable as a hash-table index).
fn hash_name(name: &str) -> u64 {
    let mut h = FxHasher::default();
    h.write(name.as_bytes());
    let mut x = h.finish() ^ name.len() as u64;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// Index from names to ids of one arena. It stores only name hashes: the names
/// themselves live in the arena (one copy per name), which keeps adding ops cheap.
/// Also picks unique names: `base`, then `base_1`, `base_2`...
#[derive(Clone, Debug)]
struct Names<K> {
    by_hash: HashMap<u64, K, BuildHasherDefault<IdentityHasher>>,
    /// Names whose hash collides with another name's in `by_hash`, by hash. Not
    /// rare: FxHash collides systematically on names differing in digits that
    /// straddle an 8-byte boundary (`add_10619`, `add_10692`), a few percent of
    /// 100,000 numbered names; so a map, not a list scanned per lookup.
    overflow: HashMap<u64, Vec<K>, BuildHasherDefault<IdentityHasher>>,
    next_suffix: FxHashMap<String, usize>,
}

impl<K> Default for Names<K> {
    fn default() -> Self {
        Names { by_hash: HashMap::default(), overflow: HashMap::default(), next_suffix: FxHashMap::default() }
    }
}

impl<K: slotmap::Key> Names<K> {
    fn get<V: HasName>(&self, name: &str, arena: &SlotMap<K, V>) -> Option<K> {
        self.get_hashed(hash_name(name), name, arena)
    }

    fn get_hashed<V: HasName>(&self, h: u64, name: &str, arena: &SlotMap<K, V>) -> Option<K> {
        let k = *self.by_hash.get(&h)?;
        if arena.get(k).is_some_and(|v| v.name() == name) {
            return Some(k);
        }
        self.overflow.get(&h)?.iter().copied().find(|&kk| arena.get(kk).is_some_and(|v| v.name() == name))
    }

    /// Record that `k` (already in the arena) has the free name whose hash is `h`.
    fn insert_hashed(&mut self, h: u64, k: K) {
        match self.by_hash.entry(h) {
            Entry::Vacant(e) => {
                e.insert(k);
            }
            Entry::Occupied(_) => self.overflow.entry(h).or_default().push(k),
        }
    }

    /// Forget that `k` is named `name`.
    fn remove(&mut self, name: &str, k: K) {
        let h = hash_name(name);
        if self.by_hash.get(&h) == Some(&k) {
            // Promote a colliding name, if any.
            match self.overflow.get_mut(&h).and_then(Vec::pop) {
                Some(k2) => {
                    self.by_hash.insert(h, k2);
                }
                None => {
                    self.by_hash.remove(&h);
                }
            }
        } else if let Some(v) = self.overflow.get_mut(&h) {
            v.retain(|&kk| kk != k);
        }
        if self.overflow.get(&h).is_some_and(Vec::is_empty) {
            self.overflow.remove(&h);
        }
    }

    /// A free name derived from `base` (`base` itself if free), with its hash.
    fn unique<V: HasName>(&mut self, base: &str, arena: &SlotMap<K, V>) -> (String, u64) {
        let h = hash_name(base);
        if self.get_hashed(h, base, arena).is_none() {
            return (base.to_string(), h);
        }
        self.suffixed(base, arena)
    }

    /// [`Names::unique`] reusing `base`'s allocation when it is free.
    fn unique_owned<V: HasName>(&mut self, base: String, arena: &SlotMap<K, V>) -> (String, u64) {
        let h = hash_name(&base);
        if self.get_hashed(h, &base, arena).is_none() {
            return (base, h);
        }
        self.suffixed(&base, arena)
    }

    fn suffixed<V: HasName>(&mut self, base: &str, arena: &SlotMap<K, V>) -> (String, u64) {
        let mut n = self.next_suffix.get(base).copied().unwrap_or(1);
        let mut candidate = String::with_capacity(base.len() + 8);
        loop {
            candidate.clear();
            candidate.push_str(base);
            candidate.push('_');
            push_decimal(&mut candidate, n as u64);
            n += 1;
            let h = hash_name(&candidate);
            if self.get_hashed(h, &candidate, arena).is_none() {
                match self.next_suffix.get_mut(base) {
                    Some(m) => *m = n,
                    None => {
                        self.next_suffix.insert(base.to_string(), n);
                    }
                }
                return (candidate, h);
            }
        }
    }
}

/// Append `n` in decimal (cheaper than the formatting machinery on hot paths).
pub(crate) fn push_decimal(s: &mut String, mut n: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    s.extend(buf[i..].iter().map(|&b| b as char));
}

/// A hasher for keys that are already well-mixed 64-bit hashes.
#[derive(Clone, Copy, Default)]
struct IdentityHasher(u64);

impl Hasher for IdentityHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }

    fn write_u64(&mut self, i: u64) {
        self.0 = i;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A graph of ops and tensors. Owned by an [`crate::Ir`]; the main graph or a subgraph.
#[derive(Clone, Debug)]
pub struct Graph {
    pub(crate) id: GraphId,
    pub(crate) name: String,
    pub(crate) ops: SlotMap<OpId, Op>,
    pub(crate) tensors: SlotMap<TensorId, Tensor>,
    op_names: Names<OpId>,
    tensor_names: Names<TensorId>,
    pub(crate) inputs: Vec<TensorId>,
    pub(crate) outputs: Vec<TensorId>,
    pub(crate) topo_cons: TopoCons,
    next_seq: u64,
    next_tensor_seq: u64,
}

impl Graph {
    pub(crate) fn new(id: GraphId, name: String) -> Self {
        Graph {
            id,
            name,
            ops: SlotMap::with_key(),
            tensors: SlotMap::with_key(),
            op_names: Names::default(),
            tensor_names: Names::default(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            topo_cons: TopoCons::default(),
            next_seq: 0,
            next_tensor_seq: 0,
        }
    }

    /// This graph's id.
    pub fn id(&self) -> GraphId {
        self.id
    }

    /// This graph's name, unique in its IR.
    pub fn name(&self) -> &str {
        &self.name
    }

    // ----- lookup -----

    /// A tensor by id.
    pub fn tensor(&self, id: TensorId) -> Result<&Tensor> {
        self.tensors.get(id).ok_or_else(|| self.unknown_tensor(id))
    }

    /// A tensor by name.
    pub fn tensor_by_name(&self, name: &str) -> Result<&Tensor> {
        self.tensor_names
            .get(name, &self.tensors)
            .map(|id| &self.tensors[id])
            .ok_or_else(|| IrError::UnknownTensor { graph: self.name.clone(), tensor: name.to_string() })
    }

    /// Id of the tensor with this name.
    pub fn tensor_id(&self, name: &str) -> Result<TensorId> {
        self.tensor_by_name(name).map(|t| t.id)
    }

    /// True if `id` is a live tensor of this graph.
    pub fn contains_tensor(&self, id: TensorId) -> bool {
        self.tensors.contains_key(id)
    }

    /// An op by id.
    pub fn op(&self, id: OpId) -> Result<&Op> {
        self.ops.get(id).ok_or_else(|| self.unknown_op(id))
    }

    /// An op by name.
    pub fn op_by_name(&self, name: &str) -> Result<&Op> {
        self.op_names
            .get(name, &self.ops)
            .map(|id| &self.ops[id])
            .ok_or_else(|| IrError::UnknownOp { graph: self.name.clone(), op: name.to_string() })
    }

    /// Set where an op runs (an annotation; see [`crate::Placement`]).
    pub fn set_op_placement(&mut self, id: OpId, placement: crate::Placement) -> Result<()> {
        let Some(o) = self.ops.get_mut(id) else {
            return Err(self.unknown_op(id));
        };
        o.placement = placement;
        Ok(())
    }

    /// Mutable access to an op's attributes. Changing attributes does not re-run
    /// shape inference; passes that change shapes must re-create the op.
    pub fn op_attrs_mut(&mut self, id: OpId) -> Result<&mut Attributes> {
        if !self.ops.contains_key(id) {
            return Err(self.unknown_op(id));
        }
        Ok(&mut self.ops[id].attrs)
    }

    /// Every op, in arena order (use [`crate::Ir::schedule`] for execution order).
    pub fn ops(&self) -> impl Iterator<Item = &Op> {
        self.ops.values()
    }

    /// Ops in creation order.
    pub fn ops_in_creation_order(&self) -> Vec<OpId> {
        let mut v: Vec<&Op> = self.ops.values().collect();
        v.sort_unstable_by_key(|o| o.seq);
        v.into_iter().map(|o| o.id).collect()
    }

    /// Every tensor, in arena order.
    pub fn tensors(&self) -> impl Iterator<Item = &Tensor> {
        self.tensors.values()
    }

    /// Tensors in creation order.
    pub fn tensors_in_creation_order(&self) -> Vec<TensorId> {
        let mut v: Vec<&Tensor> = self.tensors.values().collect();
        v.sort_unstable_by_key(|t| t.seq);
        v.into_iter().map(|t| t.id).collect()
    }

    /// Number of ops.
    pub fn num_ops(&self) -> usize {
        self.ops.len()
    }

    /// Number of tensors.
    pub fn num_tensors(&self) -> usize {
        self.tensors.len()
    }

    /// Graph inputs, indexed from 0.
    pub fn inputs(&self) -> &[TensorId] {
        &self.inputs
    }

    /// Graph outputs, indexed from 0.
    pub fn outputs(&self) -> &[TensorId] {
        &self.outputs
    }

    /// Index of `t` among the graph inputs.
    pub fn input_index(&self, t: TensorId) -> Option<usize> {
        self.inputs.iter().position(|&x| x == t)
    }

    /// Index of `t` among the graph outputs (first occurrence).
    pub fn output_index(&self, t: TensorId) -> Option<usize> {
        self.outputs.iter().position(|&x| x == t)
    }

    /// Infos of the graph inputs, in order.
    pub fn input_infos(&self) -> Vec<TensorInfo> {
        self.inputs.iter().map(|t| self.tensors[*t].info.clone()).collect()
    }

    /// Infos of the graph outputs, in order.
    pub fn output_infos(&self) -> Vec<TensorInfo> {
        self.outputs.iter().map(|t| self.tensors[*t].info.clone()).collect()
    }

    /// The topological constraints.
    pub fn topo_cons(&self) -> &TopoCons {
        &self.topo_cons
    }

    /// Variables of this graph.
    pub fn variables(&self) -> impl Iterator<Item = &Tensor> {
        self.tensors.values().filter(|t| t.is_variable())
    }

    /// Constants of this graph.
    pub fn constants(&self) -> impl Iterator<Item = &Tensor> {
        self.tensors.values().filter(|t| t.is_constant())
    }

    /// Graphs called by the ops of this graph (each once, in first-seen creation order).
    pub fn called_graphs(&self) -> Vec<GraphId> {
        let mut out = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for op in self.ops_in_creation_order() {
            for g in self.ops[op].called_graphs() {
                if seen.insert(g) {
                    out.push(g);
                }
            }
        }
        out
    }

    // ----- tensors -----

    /// A name not yet used by a tensor of this graph, derived from `base`.
    pub fn unique_tensor_name(&mut self, base: &str) -> String {
        self.tensor_names.unique(base, &self.tensors).0
    }

    /// A name not yet used by an op of this graph, derived from `base`.
    pub fn unique_op_name(&mut self, base: &str) -> String {
        self.op_names.unique(base, &self.ops).0
    }

    /// Add a tensor with exactly this name; an error if the name is taken.
    pub fn add_tensor(&mut self, name: &str, info: TensorInfo, kind: TensorKind) -> Result<TensorId> {
        self.add_tensor_owned(name.to_string(), info, kind)
    }

    fn add_tensor_owned(&mut self, name: String, info: TensorInfo, kind: TensorKind) -> Result<TensorId> {
        let h = hash_name(&name);
        if self.tensor_names.get_hashed(h, &name, &self.tensors).is_some() {
            return Err(IrError::DuplicateTensorName { graph: self.name.clone(), name });
        }
        if info.checked_nbytes().is_none() {
            return Err(IrError::TensorTooLarge { graph: self.name.clone(), tensor: name, info });
        }
        if let Some(data) = kind.data() {
            if let Err(source) = data.validate() {
                return Err(IrError::HostData { graph: self.name.clone(), tensor: name, source });
            }
            if data.info != info {
                return Err(IrError::DataInfoMismatch {
                    graph: self.name.clone(),
                    tensor: name,
                    data: data.info.clone(),
                    declared: info,
                });
            }
        }
        Ok(self.insert_tensor(name, h, info, kind))
    }

    /// Add a tensor whose name (with hash `h`) is known to be free.
    fn insert_tensor(&mut self, name: String, h: u64, info: TensorInfo, kind: TensorKind) -> TensorId {
        let seq = self.next_tensor_seq;
        self.next_tensor_seq += 1;
        let id = self.tensors.insert_with_key(|id| Tensor {
            id,
            name,
            info,
            kind,
            producer: None,
            consumers: Vec::new(),
            seq,
        });
        self.tensor_names.insert_hashed(h, id);
        id
    }

    /// Append a graph input (an activation tensor) with exactly this name.
    pub fn add_input(&mut self, name: &str, info: TensorInfo) -> Result<TensorId> {
        let id = self.add_tensor(name, info, TensorKind::ActGrad)?;
        self.inputs.push(id);
        Ok(id)
    }

    /// Insert an existing, unproduced activation as graph input at `index`.
    pub fn insert_input(&mut self, index: usize, t: TensorId) -> Result<()> {
        let tensor = self.tensor(t)?;
        if tensor.producer.is_some() || tensor.kind != TensorKind::ActGrad || self.inputs.contains(&t) {
            return Err(IrError::NotAnInputCandidate { graph: self.name.clone(), tensor: tensor.name.clone() });
        }
        let index = index.min(self.inputs.len());
        self.inputs.insert(index, t);
        Ok(())
    }

    /// Remove graph input `index`; the tensor stays in the graph.
    pub fn remove_input(&mut self, index: usize) -> Result<TensorId> {
        if index >= self.inputs.len() {
            return Err(IrError::NoGraphPort { graph: self.name.clone(), side: "input", index });
        }
        Ok(self.inputs.remove(index))
    }

    /// Append `t` to the graph outputs.
    pub fn add_output(&mut self, t: TensorId) -> Result<()> {
        self.tensor(t)?;
        self.outputs.push(t);
        Ok(())
    }

    /// Remove graph output `index`; the tensor stays in the graph.
    pub fn remove_output(&mut self, index: usize) -> Result<TensorId> {
        if index >= self.outputs.len() {
            return Err(IrError::NoGraphPort { graph: self.name.clone(), side: "output", index });
        }
        Ok(self.outputs.remove(index))
    }

    /// Remove the graph outputs at `indices` (any order, duplicates ignored) in one
    /// pass, keeping the others in order; returns the removed tensors, which stay in
    /// the graph. Nothing changes if an index is out of range.
    pub fn remove_outputs(&mut self, indices: &[usize]) -> Result<Vec<TensorId>> {
        if let Some(&bad) = indices.iter().find(|&&i| i >= self.outputs.len()) {
            return Err(IrError::NoGraphPort { graph: self.name.clone(), side: "output", index: bad });
        }
        let mut drop = vec![false; self.outputs.len()];
        for &i in indices {
            drop[i] = true;
        }
        let mut removed = Vec::new();
        let mut k = 0;
        self.outputs.retain(|&t| {
            let d = drop[k];
            k += 1;
            if d {
                removed.push(t);
            }
            !d
        });
        Ok(removed)
    }

    /// Remove a tensor that has no producer, no consumers and is not a graph input or output.
    pub fn remove_tensor(&mut self, t: TensorId) -> Result<Tensor> {
        let boundary = self.inputs.contains(&t) || self.outputs.contains(&t);
        self.check_removable(t, boundary)?;
        self.remove_checked(t)
    }

    /// [`Graph::remove_tensor`] for several tensors, in one pass over the graph's
    /// inputs and outputs (linear however many are removed). Nothing is removed if
    /// one of them cannot be.
    pub fn remove_tensors(&mut self, ts: &[TensorId]) -> Result<()> {
        let boundary: std::collections::HashSet<TensorId> = self.inputs.iter().chain(&self.outputs).copied().collect();
        for &t in ts {
            self.check_removable(t, boundary.contains(&t))?;
        }
        for &t in ts {
            if self.tensors.contains_key(t) {
                self.remove_checked(t)?;
            }
        }
        Ok(())
    }

    fn check_removable(&self, t: TensorId, boundary: bool) -> Result<()> {
        let tensor = self.tensor(t)?;
        let reason = if tensor.producer.is_some() {
            Some("it has a producer")
        } else if !tensor.consumers.is_empty() {
            Some("it has consumers")
        } else if boundary {
            Some(if self.inputs.contains(&t) { "it is a graph input" } else { "it is a graph output" })
        } else {
            None
        };
        match reason {
            Some(reason) => Err(IrError::TensorInUse {
                graph: self.name.clone(),
                tensor: tensor.name.clone(),
                reason: reason.to_string(),
            }),
            None => Ok(()),
        }
    }

    fn remove_checked(&mut self, t: TensorId) -> Result<Tensor> {
        let tensor = self.tensors.remove(t).ok_or_else(|| self.unknown_tensor(t))?;
        self.tensor_names.remove(&tensor.name, t);
        Ok(tensor)
    }

    // ----- ops -----

    /// Add an op with no connections; the name is made unique.
    /// Prefer [`crate::Ir::create_op`], which connects and infers outputs.
    pub fn add_op(&mut self, def: &'static dyn OpDef, attrs: Attributes, name: &str) -> OpId {
        let (name, h) = self.op_names.unique(name, &self.ops);
        let seq = self.next_seq;
        self.next_seq += 1;
        let id = self.ops.insert_with_key(|id| Op {
            id,
            name,
            def,
            attrs,
            inputs: TensorIndexMap::default(),
            outputs: TensorIndexMap::default(),
            seq,
            placement: crate::Placement::default(),
        });
        self.op_names.insert_hashed(h, id);
        id
    }

    /// Connect `tensor` as input `index` of `op`.
    pub fn connect_input(&mut self, op: OpId, index: u32, tensor: TensorId) -> Result<()> {
        self.tensor(tensor)?;
        let Some(o) = self.ops.get_mut(op) else {
            return Err(self.unknown_op(op));
        };
        if !o.inputs.insert(index, tensor) {
            return Err(IrError::IndexTaken { op: o.name.clone(), side: "input", index });
        }
        let consumers = &mut self.tensors[tensor].consumers;
        if consumers.capacity() == 0 {
            // Most tensors have one or two consumers: start small.
            consumers.reserve_exact(2);
        }
        consumers.push(Port { op, index });
        Ok(())
    }

    /// Disconnect input `index` of `op`, returning the tensor that was there.
    pub fn disconnect_input(&mut self, op: OpId, index: u32) -> Result<TensorId> {
        let Some(o) = self.ops.get_mut(op) else {
            return Err(self.unknown_op(op));
        };
        let t = o.inputs.remove(index).ok_or_else(|| IrError::IndexNotConnected {
            op: o.name.clone(),
            side: "input",
            index,
        })?;
        let consumers = &mut self.tensors[t].consumers;
        // Connectivity is symmetric, so the entry is there.
        if let Some(pos) = consumers.iter().position(|p| *p == Port { op, index }) {
            consumers.swap_remove(pos);
        }
        Ok(t)
    }

    /// Connect an existing, unproduced activation as output `index` of `op`.
    pub fn connect_output(&mut self, op: OpId, index: u32, tensor: TensorId) -> Result<()> {
        let t = self.tensor(tensor)?;
        let op_name = self.op(op)?.name.clone();
        if let Some(p) = t.producer {
            return Err(IrError::AlreadyProduced {
                graph: self.name.clone(),
                tensor: t.name.clone(),
                producer: self.ops[p.op].name.clone(),
                op: op_name,
            });
        }
        let what = if self.inputs.contains(&tensor) {
            Some("graph input")
        } else {
            match t.kind {
                TensorKind::ActGrad => None,
                TensorKind::Variable(_) => Some("variable"),
                TensorKind::Constant(_) => Some("constant"),
                TensorKind::Stream(_) => Some("stream"),
            }
        };
        if let Some(what) = what {
            return Err(IrError::NotProducible { graph: self.name.clone(), tensor: t.name.clone(), what, op: op_name });
        }
        let o = &mut self.ops[op];
        if !o.outputs.insert(index, tensor) {
            return Err(IrError::IndexTaken { op: op_name, side: "output", index });
        }
        self.tensors[tensor].producer = Some(Port { op, index });
        Ok(())
    }

    /// Create a new activation named (uniquely) after `name` and connect it as output `index` of `op`.
    pub fn create_output(&mut self, op: OpId, index: u32, name: &str, info: TensorInfo) -> Result<TensorId> {
        self.create_output_owned(op, index, name.to_string(), info)
    }

    /// [`Graph::create_output`] taking the base name by value (no copy when it is free).
    pub(crate) fn create_output_owned(
        &mut self,
        op: OpId,
        index: u32,
        name: String,
        info: TensorInfo,
    ) -> Result<TensorId> {
        let Some(o) = self.ops.get(op) else {
            return Err(self.unknown_op(op));
        };
        if o.outputs.contains(index) {
            return Err(IrError::IndexTaken { op: o.name.clone(), side: "output", index });
        }
        let (name, h) = self.tensor_names.unique_owned(name, &self.tensors);
        // Every op output, inferred or given, passes through here: the one place
        // where the size invariant of op outputs is enforced.
        if info.checked_nbytes().is_none() {
            return Err(IrError::TensorTooLarge { graph: self.name.clone(), tensor: name, info });
        }
        let t = self.insert_tensor(name, h, info, TensorKind::ActGrad);
        // A fresh activation: not produced, not a graph input, index checked above.
        self.ops[op].outputs.insert(index, t);
        self.tensors[t].producer = Some(Port { op, index });
        Ok(t)
    }

    /// Disconnect output `index` of `op`; the tensor stays, unproduced.
    pub fn disconnect_output(&mut self, op: OpId, index: u32) -> Result<TensorId> {
        let Some(o) = self.ops.get_mut(op) else {
            return Err(self.unknown_op(op));
        };
        let t = o.outputs.remove(index).ok_or_else(|| IrError::IndexNotConnected {
            op: o.name.clone(),
            side: "output",
            index,
        })?;
        self.tensors[t].producer = None;
        Ok(t)
    }

    /// Remove the outputs of `op` at `indices` (any order; duplicates and unconnected
    /// indices are ignored) and renumber its other outputs 0..n in index order, in
    /// one pass (linear however many go). Returns the removed tensors, in index order:
    /// they stay in the graph, unproduced.
    pub fn remove_op_outputs(&mut self, op: OpId, indices: &[u32]) -> Result<Vec<TensorId>> {
        let Some(o) = self.ops.get_mut(op) else {
            return Err(self.unknown_op(op));
        };
        // Sorted indices, not a table up to the largest index (which may be u32::MAX).
        let mut drop = indices.to_vec();
        drop.sort_unstable();
        let removed = o.outputs.remove_and_renumber(|i| drop.binary_search(&i).is_ok());
        for (index, t) in o.outputs.iter() {
            self.tensors[t].producer = Some(Port { op, index });
        }
        Ok(removed
            .into_iter()
            .map(|(_, t)| {
                self.tensors[t].producer = None;
                t
            })
            .collect())
    }

    /// Disconnect every input and output of `op` and remove it with its topological
    /// constraints. Its output tensors stay in the graph, unproduced.
    pub fn erase_op(&mut self, op: OpId) -> Result<Op> {
        let o = self.op(op)?;
        // Last index first: each removal is then at the end of the index map.
        let mut ins: Vec<u32> = o.inputs.iter().map(|(i, _)| i).collect();
        let mut outs: Vec<u32> = o.outputs.iter().map(|(i, _)| i).collect();
        ins.reverse();
        outs.reverse();
        for i in ins {
            self.disconnect_input(op, i)?;
        }
        for i in outs {
            self.disconnect_output(op, i)?;
        }
        self.topo_cons.remove_op(op);
        let o = self.ops.remove(op).ok_or_else(|| self.unknown_op(op))?;
        self.op_names.remove(&o.name, op);
        Ok(o)
    }

    /// Erase `op` and all of its output tensors (which must have no consumers and not be graph outputs).
    pub fn erase_op_and_outputs(&mut self, op: OpId) -> Result<()> {
        let outs: Vec<TensorId> = self.op(op)?.outputs.tensors().collect();
        for &t in &outs {
            let tensor = &self.tensors[t];
            if !tensor.consumers.is_empty() || self.outputs.contains(&t) {
                return Err(IrError::TensorInUse {
                    graph: self.name.clone(),
                    tensor: tensor.name.clone(),
                    reason: "it is consumed or a graph output".into(),
                });
            }
        }
        self.erase_op(op)?;
        for t in outs {
            self.remove_tensor(t)?;
        }
        Ok(())
    }

    /// Move every consumer of `from` onto `to` (same indices); graph outputs that were
    /// `from` become `to`.
    pub fn replace_all_uses(&mut self, from: TensorId, to: TensorId) -> Result<()> {
        self.tensor(from)?;
        self.tensor(to)?;
        let consumers = std::mem::take(&mut self.tensors[from].consumers);
        for p in &consumers {
            self.ops[p.op].inputs.replace(p.index, to);
        }
        self.tensors[to].consumers.extend(consumers);
        for o in self.outputs.iter_mut() {
            if *o == from {
                *o = to;
            }
        }
        Ok(())
    }

    /// Replace op `old` by `new`: `new` takes over `old`'s inputs and outputs at the same
    /// indices (so consumers are untouched) and its topological constraints; `old` is erased.
    /// `new` must have no connections yet.
    pub fn replace_op(&mut self, old: OpId, new: OpId) -> Result<()> {
        let o = self.op(old)?.clone();
        let n = self.op(new)?;
        if !n.inputs.is_empty() || !n.outputs.is_empty() {
            return Err(IrError::ReplacementInUse { op: n.name.clone(), problem: "is already connected" });
        }
        // `new` takes `old`'s place exactly; constraints of its own could close a
        // cycle with `old`'s connections.
        if !self.topo_cons.befores(new).is_empty() || !self.topo_cons.afters(new).is_empty() {
            return Err(IrError::ReplacementInUse {
                op: n.name.clone(),
                problem: "already has topological constraints",
            });
        }
        self.topo_cons.transfer(old, new);
        self.erase_op(old)?;
        for (i, t) in o.inputs.iter() {
            self.connect_input(new, i, t)?;
        }
        for (i, t) in o.outputs.iter() {
            self.connect_output(new, i, t)?;
        }
        Ok(())
    }

    pub(crate) fn unknown_tensor(&self, id: TensorId) -> IrError {
        IrError::UnknownTensor { graph: self.name.clone(), tensor: format!("{id:?}") }
    }

    pub(crate) fn unknown_op(&self, id: OpId) -> IrError {
        IrError::UnknownOp { graph: self.name.clone(), op: format!("{id:?}") }
    }
}
