//! In-place semantics before lowering: the in-place ambiguity check and the
//! materialisation of strided views.
//!
//! - [`InplaceAmbiguityCheck`] (pass `inplace-ambiguity`) runs
//!   [`popart_ir::alias::check_inplace_ambiguity`] on every graph: an in-place
//!   write that another op's use of an alias is not ordered against is an
//!   error, as in PopXL.
//! - [`MaterializeViews`] (pass `materialize-views`) rewrites every strided view
//!   (`TransposeInplace`, `SliceInplace`, `ConcatInplace`,
//!   [`popart_ir::ops::view::is_strided_view`]) into its out-of-place op, which
//!   owns its buffer, and keeps the view and its bases equal the way aliasing
//!   would: right after every op that writes a tensor of such a family in place,
//!   it inserts the copies that propagate the write (refresh a view from its
//!   bases: `Transpose`/`Slice`/`Concat` then `CopyVarUpdate`; write a view back
//!   into a base: the inverse `Transpose`, `SliceUpdateInplace`, or a `Slice` of
//!   a concatenation), ordered before every op that comes after the write. The
//!   result computes what the aliased program computes, in every schedule the
//!   ambiguity check allows. Byte-identical views (`ReshapeInplace`) and
//!   in-place updates need nothing: lowering gives them their input's buffer.

use std::collections::{HashMap, HashSet, VecDeque};

use popart_ir::alias::{ordered_from, AliasGroups};
use popart_ir::ops::all::{
    Concat, ConcatInplace, CopyVarUpdate, Reshape, Slice, SliceInplace, SliceUpdateInplace, Transpose,
};
use popart_ir::ops::shape::{transpose_perm, ConcatAttrs, ReshapeAttrs, SliceAttrs, TransposeAttrs};
use popart_ir::ops::view::{is_strided_view, ConcatInplaceAttrs};
use popart_ir::ops::{normalize_axis, AxisError};
use popart_ir::{Attributes, GraphId, Ir, Op, OpAttrs, OpDef, OpId, TensorId};

use crate::{Malformed, Result, TransformError};

use crate::pipeline::{Pass, PassOutcome};

/// The `inplace-ambiguity` pass (see the module docs); changes nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InplaceAmbiguityCheck;

impl Pass for InplaceAmbiguityCheck {
    fn name(&self) -> &str {
        "inplace-ambiguity"
    }
    fn run(&self, ir: &mut Ir) -> Result<PassOutcome> {
        for g in ir.graphs() {
            popart_ir::alias::check_inplace_ambiguity(g)?;
        }
        Ok(PassOutcome::unchanged())
    }
}

/// The `materialize-views` pass (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MaterializeViews;

impl Pass for MaterializeViews {
    fn name(&self) -> &str {
        "materialize-views"
    }
    fn run(&self, ir: &mut Ir) -> Result<PassOutcome> {
        let mut notes = Vec::new();
        for g in ir.graph_ids() {
            let n = materialize_graph(ir, g)?;
            if n > 0 {
                notes.push(format!("{}: {n} strided views", ir.graph(g)?.name()));
            }
        }
        Ok(PassOutcome { changed: !notes.is_empty(), notes, ..PassOutcome::default() })
    }
}

/// A strided view: its op, kind, bases (inputs in order) and view (output 0).
struct Edge {
    op: OpId,
    name: String,
    kind: ViewKind,
    /// The op's attributes: a slice's and a transpose's out-of-place op takes them as they are.
    attrs: Attributes,
    bases: Vec<TensorId>,
    view: TensorId,
}

/// The strided view ops, with their decoded attributes.
enum ViewKind {
    Transpose(TransposeAttrs),
    Slice,
    Concat(ConcatInplaceAttrs),
}

impl ViewKind {
    fn of(op: &Op) -> Result<Self> {
        Ok(if op.is::<ConcatInplace>() {
            ViewKind::Concat(ConcatInplaceAttrs::of(op)?)
        } else if op.is::<SliceInplace>() {
            ViewKind::Slice
        } else {
            ViewKind::Transpose(TransposeAttrs::of(op)?)
        })
    }
}

/// Rewrite the strided views of one graph; returns how many there were.
fn materialize_graph(ir: &mut Ir, gid: GraphId) -> Result<usize> {
    let graph = ir.graph(gid)?;
    let mut edges = Vec::new();
    for op in graph.ops().filter(|o| is_strided_view(o.def())) {
        let view = op.output(0).ok_or_else(|| Malformed::NoOutput { op: op.name.clone() })?;
        edges.push(Edge {
            op: op.id,
            name: op.name.clone(),
            kind: ViewKind::of(op)?,
            attrs: op.attrs.clone(),
            bases: op.inputs().tensors().collect(),
            view,
        });
    }
    if edges.is_empty() {
        return Ok(0);
    }
    edges.sort_by_key(|e| graph.op(e.op).map(|o| o.seq()).unwrap_or(0));
    // Nodes: tensors sharing a buffer after lowering (every alias pair but the strided views').
    let nodes = AliasGroups::of_ops(graph, |o| !is_strided_view(o.def()));
    let mut modifiers: Vec<(u64, OpId, Vec<TensorId>)> = graph
        .ops()
        .filter(|o| !o.modified_inputs().is_empty())
        .map(|o| (o.seq(), o.id, o.modified_inputs().iter().filter_map(|&i| o.input(i)).collect()))
        .collect();
    modifiers.sort_by_key(|m| m.0);
    for (_, m, written) in modifiers {
        propagate(ir, gid, &edges, &nodes, m, &written)?;
    }
    // The views now own their buffers: their out-of-place ops compute them.
    let n = edges.len();
    for e in edges {
        let (def, attrs) = out_of_place(&e);
        let g = ir.graph_mut(gid)?;
        let name = g.unique_op_name(&format!("{}_materialized", g.op(e.op)?.name));
        let new = g.add_op(def, attrs, &name);
        g.replace_op(e.op, new)?;
    }
    Ok(n)
}

/// After op `m` writes `written` in place, copy the write to every view and
/// base of the same family that exists before `m`, and order those copies
/// before every op after `m` that uses the family.
fn propagate(
    ir: &mut Ir,
    gid: GraphId,
    edges: &[Edge],
    nodes: &AliasGroups,
    m: OpId,
    written: &[TensorId],
) -> Result<()> {
    let graph = ir.graph(gid)?;
    let touches = |t: TensorId, node: TensorId| nodes.find(t) == node;
    let starts: Vec<TensorId> = written.iter().map(|&t| nodes.find(t)).collect();
    if !edges.iter().any(|e| starts.iter().any(|&s| touches(e.view, s) || e.bases.iter().any(|&b| touches(b, s)))) {
        return Ok(());
    }
    let after = ordered_from(graph, m, true)?;
    // The current value of each visited node: the tensor to read it from.
    let mut current: HashMap<TensorId, TensorId> = HashMap::new();
    let mop = graph.op(m)?;
    for &t in written {
        // The op's aliased output carries the data dependency on the write.
        let out = mop
            .modified_inputs()
            .into_iter()
            .filter(|&i| mop.input(i) == Some(t))
            .find_map(|i| mop.alias_pairs().into_iter().find(|&(a, _)| a == i).and_then(|(_, o)| mop.output(o)))
            .unwrap_or(t);
        current.insert(nodes.find(t), out);
    }
    let mut queue: VecDeque<TensorId> = current.keys().copied().collect();
    let mut created: Vec<OpId> = Vec::new();
    let mut befores: Vec<OpId> = Vec::new();
    while let Some(node) = queue.pop_front() {
        for e in edges {
            let view_node = nodes.find(e.view);
            if after.contains(&e.op) {
                continue; // computed from the written values anyway
            }
            if e.bases.iter().any(|&b| nodes.find(b) == node) && !current.contains_key(&view_node) {
                // Refresh the view from its bases.
                befores.push(e.op);
                let mut srcs: Vec<TensorId> = Vec::with_capacity(e.bases.len());
                for &b in &e.bases {
                    let src = match current.get(&nodes.find(b)) {
                        Some(&c) => shaped_like(ir, gid, c, b, &mut created)?,
                        None => b,
                    };
                    srcs.push(src);
                }
                let (def, attrs) = out_of_place(e);
                let inputs: Vec<(u32, TensorId)> = srcs.iter().enumerate().map(|(i, &t)| (i as u32, t)).collect();
                let tmp = op1(ir, gid, def, attrs, &inputs, "view_refresh", &mut created)?;
                let out = op1(
                    ir,
                    gid,
                    &CopyVarUpdate,
                    Attributes::new(),
                    &[(0, e.view), (1, tmp)],
                    "view_refresh_copy",
                    &mut created,
                )?;
                current.insert(view_node, out);
                queue.push_back(view_node);
            } else if view_node == node {
                // Write the view back into each base.
                let src = match current.get(&node) {
                    Some(&c) => shaped_like(ir, gid, c, e.view, &mut created)?,
                    None => e.view,
                };
                let mut offset = 0i64;
                for &b in &e.bases {
                    let base_node = nodes.find(b);
                    let len = base_len(ir, gid, e, b)?;
                    if current.contains_key(&base_node) {
                        offset += len;
                        continue;
                    }
                    // The write-back op: a slice update in place, or the inverse
                    // view of `src` copied into the base.
                    let (def, attrs): (&'static dyn OpDef, Attributes) = match &e.kind {
                        ViewKind::Slice => (&SliceUpdateInplace, e.attrs.clone()),
                        ViewKind::Concat(a) => {
                            let attrs = SliceAttrs {
                                starts: vec![offset],
                                ends: vec![offset + len],
                                steps: None,
                                axes: Some(vec![a.axis]),
                            };
                            (&Slice, attrs.to_attrs())
                        }
                        ViewKind::Transpose(a) => {
                            (&Transpose, TransposeAttrs { perm: inverse_perm(ir, gid, e, a)? }.to_attrs())
                        }
                    };
                    let out = if matches!(e.kind, ViewKind::Slice) {
                        op1(ir, gid, def, attrs, &[(0, b), (1, src)], "view_write_back", &mut created)?
                    } else {
                        let tmp = op1(ir, gid, def, attrs, &[(0, src)], "view_write_back", &mut created)?;
                        op1(
                            ir,
                            gid,
                            &CopyVarUpdate,
                            Attributes::new(),
                            &[(0, b), (1, tmp)],
                            "view_write_back_copy",
                            &mut created,
                        )?
                    };
                    offset += len;
                    current.insert(base_node, out);
                    queue.push_back(base_node);
                }
            }
        }
    }
    if created.is_empty() {
        return Ok(());
    }
    // Order: views used before the write, the write, its copies in creation
    // order, then every later use of the family.
    let g = ir.graph_mut(gid)?;
    let family: HashSet<TensorId> = current.keys().copied().collect();
    for v in befores {
        if v != m && !after.contains(&v) {
            g.add_topo_con(v, m)?;
        }
    }
    g.add_topo_con(m, created[0])?;
    for w in created.windows(2) {
        g.add_topo_con(w[0], w[1])?;
    }
    let last = created[created.len() - 1];
    let created_set: HashSet<OpId> = created.iter().copied().collect();
    let mut later: Vec<OpId> = Vec::new();
    for t in g.tensors() {
        if family.contains(&nodes.find(t.id)) {
            later.extend(t.consumers().iter().map(|p| p.op).filter(|o| after.contains(o) && !created_set.contains(o)));
        }
    }
    later.sort();
    later.dedup();
    for r in later {
        g.add_topo_con(last, r)?;
    }
    Ok(())
}

/// The out-of-place op computing a strided view from its bases, and its attributes.
fn out_of_place(e: &Edge) -> (&'static dyn OpDef, Attributes) {
    match &e.kind {
        ViewKind::Concat(a) => (&Concat, ConcatAttrs { axis: a.axis }.to_attrs()),
        ViewKind::Slice => (&Slice, e.attrs.clone()),
        ViewKind::Transpose(_) => (&Transpose, e.attrs.clone()),
    }
}

/// Create a one-output op in `gid`, record it, return its output.
fn op1(
    ir: &mut Ir,
    gid: GraphId,
    def: &'static dyn OpDef,
    attrs: Attributes,
    inputs: &[(u32, TensorId)],
    name: &str,
    created: &mut Vec<OpId>,
) -> Result<TensorId> {
    let name = ir.graph_mut(gid)?.unique_op_name(name);
    let op = ir.create_op_with_def(gid, def, attrs, inputs, &name)?;
    created.push(op);
    Ok(ir.graph(gid)?.op(op)?.output(0).ok_or(Malformed::NoOutput { op: name })?)
}

/// `value` as a tensor of `like`'s shape. A node groups tensors that share one
/// buffer, byte-identical reshapes among them (`ReshapeInplace`), so the node's
/// current value may have another member's shape: a `Reshape` (no kernel after
/// lowering) gives it `like`'s.
fn shaped_like(
    ir: &mut Ir,
    gid: GraphId,
    value: TensorId,
    like: TensorId,
    created: &mut Vec<OpId>,
) -> Result<TensorId> {
    let g = ir.graph(gid)?;
    let shape = g.tensor(like)?.info.shape.clone();
    if g.tensor(value)?.info.shape == shape {
        return Ok(value);
    }
    let dims = shape
        .iter()
        .map(|&d| i64::try_from(d).map_err(|_| TransformError::DimensionOverflow { dim: d }))
        .collect::<Result<Vec<i64>>>()?;
    op1(ir, gid, &Reshape, ReshapeAttrs { shape: dims }.to_attrs(), &[(0, value)], "view_reshape", created)
}

/// The length of base `b` along a concat edge's axis (0 for other edges).
fn base_len(ir: &Ir, gid: GraphId, e: &Edge, b: TensorId) -> Result<i64> {
    let ViewKind::Concat(a) = &e.kind else { return Ok(0) };
    let info = &ir.graph(gid)?.tensor(b)?.info;
    let axis = normalize_axis(a.axis, info.rank()).map_err(|error| view_axis(e, error))?;
    Ok(info.shape[axis] as i64)
}

/// The permutation undoing a transpose edge's.
fn inverse_perm(ir: &Ir, gid: GraphId, e: &Edge, a: &TransposeAttrs) -> Result<Vec<i64>> {
    let rank = ir.graph(gid)?.tensor(e.bases[0])?.info.rank();
    let perm = transpose_perm(&a.perm, rank).map_err(|error| view_axis(e, error))?;
    let mut inv = vec![0i64; rank];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i as i64;
    }
    Ok(inv)
}

/// The error of a view whose axis attributes do not fit its bases.
fn view_axis(e: &Edge, error: AxisError) -> TransformError {
    TransformError::ViewAxis { op: e.name.clone(), error }
}
