//! `fuse_weight_update`: fold an optimizer update into the matmul that computes
//! the weight's gradient, across the call of the gradient graph.
//!
//! The shape PopXL training code produces (autodiff of a layer, then SGD):
//!
//! ```text
//! caller:  (.., dW, ..) = Call{graph=F}(.., W, ..)        W passed as F input j
//!          W' = ScaledAddInplace{a, b}(W, dW)             dW used by nothing else
//! F:       dW_f = MatMulRhsGrad(g, x, w_j)                dW_f is F output o, unused in F
//! ```
//!
//! becomes
//!
//! ```text
//! caller:  (..) = Call{graph=F, modified=[.., j]}(.., W, ..)   output o removed
//! F:       w_j' = ScaledAddMatMulRhsGradInplace{a, b}(g, x, w_j)
//! ```
//!
//! so the GEMM accumulates straight into the weight: the gradient buffer (as big
//! as the weight) and the separate update pass disappear.
//!
//! Data-parallel SGD's update, `W' = ReplicatedAllReduceScaledAddInplace{op,
//! group, b}(W, dW)` (made by `fuse-all-reduce-update`, which runs first), fuses
//! the same way, for a weight of rank 1 or 2, into
//! `w_j' = ReplicatedScaledAddMatMulRhsGradInplace{op, group, b}(g, x, w_j)`:
//! each replica computes its rows of the reduced product from every member's
//! `x` and `g` and adds them into every member's weight. Every replica runs
//! the same program, so every replica moves its collective alike. The update now happens
//! inside the call, earlier than before, so the pattern only applies when that
//! cannot be observed:
//! - `F` has this one call site, and `w_j` is not written, aliased or output in `F`;
//!   every other reader of `w_j` in `F` is independent of the matmul's result
//!   and is constrained to run before the update;
//! - in the caller, no op other than the call and the update touches `W` (or a
//!   tensor aliasing it) between the two in the schedule; readers before the call
//!   are constrained to stay before it, users after the update to stay after it;
//! - the update's scalars are attributes, shapes and dtypes (float) match exactly.
//!
//! No constraint added can close a cycle: in the caller each agrees with the
//! existing schedule (so they are added unchecked, keeping the pass linear); in
//! the callee the fused op reaches none of the readers, checked against the
//! rewrites already made in the same callee, and the callee's constraints go
//! through the checked API.

use std::collections::{HashMap, HashSet};

use crate::{Malformed, Result};
use popart_ir::ops::collectives::{
    AllReduceUpdateAttrs, ReplicatedAllReduceScaledAddInplace, ReplicatedScaledAddMatMulRhsGradInplace,
};
use popart_ir::ops::control::{Call, CallAttrs};
use popart_ir::ops::grad::MatMulRhsGrad;
use popart_ir::ops::var_update::{ScaleAttrs, ScaledAddInplace, ScaledAddMatMulAttrs, ScaledAddMatMulRhsGradInplace};
use popart_ir::{Attributes, GraphId, Ir, Op, OpAttrs, OpDef, OpId, TensorId};
use slotmap::SecondaryMap;

use crate::pipeline::{Pass, PassDetails, PassOutcome, Pipeline};
use crate::prune::{call_sites, remove_call_outputs, AliasClasses};

use super::reachable_from;

/// [`fuse_weight_updates`] as a pipeline [`Pass`] (a pattern) called `fuse-weight-update`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FuseWeightUpdates;

impl Pass for FuseWeightUpdates {
    fn name(&self) -> &str {
        Pipeline::FUSE_WEIGHT_UPDATE
    }

    fn run(&self, ir: &mut Ir) -> Result<PassOutcome> {
        let fused = fuse_weight_updates(ir)?;
        Ok(PassOutcome {
            changed: !fused.is_empty(),
            details: PassDetails::FusedWeightUpdates(fused),
            notes: Vec::new(),
        })
    }
}

/// A match: everything the rewrite needs.
struct Match {
    update: OpId,
    call: OpId,
    /// Call output (and callee output) index of the gradient.
    out: usize,
    /// Call input index of the weight.
    arg: usize,
    callee: GraphId,
    matmul: OpId,
    /// The fused op's type and attributes.
    fused: (&'static dyn OpDef, Attributes),
    /// Caller ops touching the weight before the call / after the update.
    before_call: Vec<OpId>,
    after_update: Vec<OpId>,
    /// Callee ops reading the weight (none downstream of the matmul).
    callee_readers: Vec<OpId>,
}

/// Apply the pattern everywhere it matches; returns the names (`graph/op`) of the
/// `ScaledAddInplace` ops folded away. Linear in the size of the IR per round;
/// a round finds every match of a graph at once, and another round only runs when
/// an update was rejected because another op touched its weight between the call
/// and the update (the one check a rewrite can turn from failing to passing, when
/// that op was a fused update).
pub fn fuse_weight_updates(ir: &mut Ir) -> Result<Vec<String>> {
    let mut fused = Vec::new();
    // The pattern adds and removes no op calling a graph: the call sites stay valid.
    let sites = call_sites(ir);
    for caller in ir.graph_ids() {
        loop {
            let Found { matches, pos, retry } = find_all(ir, caller, &sites)?;
            if matches.is_empty() {
                break;
            }
            // Each match in schedule order; then each call loses its gradient
            // outputs in one pass (output indices stay valid until then).
            // (output index, weight input index) per call.
            let mut per_call: HashMap<OpId, Vec<(usize, usize)>> = HashMap::new();
            for m in &matches {
                // An earlier rewrite of this round in the same callee may have
                // ordered one of this weight's readers after this matmul (its
                // fused op inherits the earlier matmul's constraints): then the
                // readers could no longer go before this update.
                if !m.callee_readers.is_empty() {
                    let downstream = reachable_from(ir.graph(m.callee)?, m.matmul)?;
                    if m.callee_readers.iter().any(|r| downstream.contains(r)) {
                        continue;
                    }
                }
                let g = ir.graph(caller)?;
                fused.push(format!("{}/{}", g.name(), g.op(m.update)?.name));
                apply(ir, caller, m, &pos)?;
                per_call.entry(m.call).or_default().push((m.out, m.arg));
            }
            let mut calls: Vec<OpId> = per_call.keys().copied().collect();
            calls.sort_by_key(|&c| pos[c]);
            for call in calls {
                let (outs, args): (Vec<usize>, Vec<usize>) = per_call[&call].iter().copied().unzip();
                let gone = remove_call_outputs(ir, caller, call, &outs)?;
                ir.graph_mut(caller)?.remove_tensors(&gone)?;
                let mut call_attrs = CallAttrs::of(ir.graph(caller)?.op(call)?)?;
                call_attrs.modified.extend(args.iter().map(|&a| a as i64));
                call_attrs.modified.sort_unstable();
                *ir.graph_mut(caller)?.op_attrs_mut(call)? = call_attrs.to_attrs();
            }
            if !retry {
                break;
            }
        }
    }
    Ok(fused)
}

/// For an update the pattern fuses (`ScaledAddInplace(W, dW)` or
/// `ReplicatedAllReduceScaledAddInplace(W, dW)`), the fused op's type and attributes.
fn update_kind(op: &Op) -> Option<(&'static dyn OpDef, Attributes)> {
    if op.inputs().len() != 2 {
        return None;
    }
    if op.is::<ScaledAddInplace>() {
        // Two inputs: no scale inputs, the attributes (or their defaults) hold the scales.
        let (a, b) = ScaleAttrs::of(op).ok()?.constant_scales();
        return Some((&ScaledAddMatMulRhsGradInplace, ScaledAddMatMulAttrs { a, b }.to_attrs()));
    }
    if op.is::<ReplicatedAllReduceScaledAddInplace>() {
        // The fused op takes the same attributes.
        let attrs = AllReduceUpdateAttrs::of(op).ok()?.to_attrs();
        return Some((&ReplicatedScaledAddMatMulRhsGradInplace, attrs));
    }
    None
}

/// What one round of [`find_all`] found.
struct Found {
    /// Every match in the graph.
    matches: Vec<Match>,
    /// Schedule position of each op of the graph.
    pos: SecondaryMap<OpId, usize>,
    /// Whether an update was rejected only because another op touched its weight
    /// between the call and the update: once the matches are applied, a new round
    /// may match it.
    retry: bool,
}

/// Every match in `caller`, and the caller's schedule positions.
fn find_all(ir: &Ir, caller: GraphId, sites: &HashMap<GraphId, Vec<(GraphId, OpId)>>) -> Result<Found> {
    let g = ir.graph(caller)?;
    if !g.ops().any(|op| update_kind(op).is_some()) {
        return Ok(Found { matches: Vec::new(), pos: SecondaryMap::new(), retry: false });
    }
    let schedule = g.schedule()?;
    let mut pos: SecondaryMap<OpId, usize> = SecondaryMap::with_capacity(schedule.len());
    for (i, &o) in schedule.iter().enumerate() {
        pos.insert(o, i);
    }
    let classes = AliasClasses::new(g);
    let caller_outputs: HashSet<TensorId> = g.outputs().iter().copied().collect();
    // Per callee: alias classes and how often each tensor is an output. Per call:
    // by alias class, its first input index and how many inputs are in the class.
    // (Built once, so a round stays linear.)
    let mut callees: HashMap<GraphId, (AliasClasses, SecondaryMap<TensorId, usize>)> = HashMap::new();
    let mut call_args: SecondaryMap<OpId, SecondaryMap<TensorId, (u32, u32)>> = SecondaryMap::new();
    let mut matches = Vec::new();
    let mut retry = false;
    for &u in &schedule {
        let op = g.op(u)?;
        let Some(fused) = update_kind(op) else { continue };
        let (Some(w), Some(dw)) = (op.input(0), op.input(1)) else { continue };
        let (wt, dwt) = (g.tensor(w)?, g.tensor(dw)?);
        if wt.info != dwt.info || !wt.info.dtype.is_floating_point() || caller_outputs.contains(&dw) {
            continue;
        }
        if fused.0.is::<ReplicatedScaledAddMatMulRhsGradInplace>() && !(1..=2).contains(&wt.info.rank()) {
            continue;
        }
        if dwt.consumers().len() != 1 {
            continue;
        }
        let Some(prod) = dwt.producer() else { continue };
        let call = g.op(prod.op)?;
        if !call.is::<Call>() {
            continue;
        }
        let callee_id = crate::prune::call_callee(call)?;
        if sites.get(&callee_id).map(Vec::len) != Some(1) {
            continue;
        }
        // The weight goes in at exactly one input, and no other input aliases it.
        let class = classes.class_of(w);
        if !call_args.contains_key(prod.op) {
            let mut m: SecondaryMap<TensorId, (u32, u32)> = SecondaryMap::new();
            for (i, t) in call.inputs().iter() {
                let c = classes.class_of(t);
                match m.get_mut(c) {
                    Some((_, n)) => *n += 1,
                    None => {
                        m.insert(c, (i, 1));
                    }
                }
            }
            call_args.insert(prod.op, m);
        }
        let Some(&(arg, 1)) = call_args[prod.op].get(class) else { continue };
        if call.modified_inputs().contains(&arg) {
            continue;
        }
        // The callee side.
        let f = ir.graph(callee_id)?;
        let out = prod.index as usize;
        let dw_f = f.outputs()[out];
        let wf = f.inputs()[arg as usize];
        let dw_ft = f.tensor(dw_f)?;
        let (f_classes, f_outputs) = callees.entry(callee_id).or_insert_with(|| {
            let mut count: SecondaryMap<TensorId, usize> = SecondaryMap::new();
            for &t in f.outputs() {
                match count.get_mut(t) {
                    Some(n) => *n += 1,
                    None => {
                        count.insert(t, 1);
                    }
                }
            }
            (AliasClasses::new(f), count)
        });
        if f_outputs.get(dw_f) != Some(&1) || !dw_ft.consumers().is_empty() {
            continue;
        }
        let Some(mm) = dw_ft.producer() else { continue };
        let mm_op = f.op(mm.op)?;
        if !mm_op.is::<MatMulRhsGrad>() || f_outputs.contains_key(wf) {
            continue;
        }
        if !f_classes.members(f_classes.class_of(wf)).is_empty() {
            continue; // written in place or aliased inside the callee
        }
        let mut callee_readers: Vec<OpId> = f.tensor(wf)?.consumers().iter().map(|p| p.op).collect();
        callee_readers.retain(|&r| r != mm.op);
        callee_readers.sort();
        callee_readers.dedup();
        // Each reader must be able to go before the update: the matmul must not reach it.
        if !callee_readers.is_empty() {
            let downstream = reachable_from(f, mm.op)?;
            if callee_readers.iter().any(|r| downstream.contains(r)) {
                continue;
            }
        }
        // The caller side: nothing else touches the weight between the call and the update.
        let (pc, pu) = (pos[prod.op], pos[u]);
        let mut touching: Vec<OpId> = Vec::new();
        for &t in std::iter::once(&w).chain(classes.members(class)) {
            let tensor = g.tensor(t)?;
            touching.extend(tensor.consumers().iter().map(|p| p.op));
            touching.extend(tensor.producer().map(|p| p.op));
        }
        touching.sort_by_key(|&o| pos[o]);
        touching.dedup();
        touching.retain(|&o| o != u && o != prod.op);
        if touching.iter().any(|&o| pc < pos[o] && pos[o] < pu) {
            retry = true;
            continue;
        }
        let (before_call, after_update): (Vec<OpId>, Vec<OpId>) = touching.iter().partition(|&&o| pos[o] < pc);
        matches.push(Match {
            update: u,
            call: prod.op,
            out,
            arg: arg as usize,
            callee: callee_id,
            matmul: mm.op,
            fused,
            before_call,
            after_update,
            callee_readers,
        });
    }
    Ok(Found { matches, pos, retry })
}

fn apply(ir: &mut Ir, caller: GraphId, m: &Match, pos: &SecondaryMap<OpId, usize>) -> Result<()> {
    // Callee: the fused op replaces the matmul; the gradient output goes.
    let (g_in, x_in, wf, name) = {
        let f = ir.graph(m.callee)?;
        let mm = f.op(m.matmul)?;
        let (g_in, x_in) = match (mm.input(0), mm.input(1)) {
            (Some(g_in), Some(x_in)) => (g_in, x_in),
            (g_in, _) => {
                let index = if g_in.is_none() { 0 } else { 1 };
                return Err(Malformed::MissingInput { op: mm.name.clone(), index, context: "" }.into());
            }
        };
        (g_in, x_in, f.inputs()[m.arg], format!("{}_update", mm.name))
    };
    let name = ir.graph_mut(m.callee)?.unique_op_name(&name);
    let (def, attrs) = (m.fused.0, m.fused.1.clone());
    let fused = ir.create_op(m.callee, def, attrs, &[(0, g_in), (1, x_in), (2, wf)], &name)?;
    let f = ir.graph_mut(m.callee)?;
    f.transfer_topo_cons(m.matmul, fused)?;
    for &r in &m.callee_readers {
        f.add_topo_con(r, fused)?;
    }
    // The matmul's output stays a graph output (index `out`) until the round ends.
    f.erase_op(m.matmul)?;

    // Caller: the update goes, the call marks the weight modified and loses output `out`.
    let g = ir.graph_mut(caller)?;
    // (Ops erased by an earlier rewrite of this round have passed their order on.)
    for &x in &m.before_call {
        if g.op(x).is_ok() {
            g.add_topo_con_unchecked(x, m.call)?;
        }
    }
    for &x in &m.after_update {
        if g.op(x).is_ok() {
            g.add_topo_con_unchecked(m.call, x)?;
        }
    }
    // The update's constraints as they stand now (earlier rewrites may have moved
    // some onto it): keep every order through it, and move it onto the call.
    let tc = g.topo_cons();
    let befores: Vec<OpId> = tc.befores(m.update).iter().map(|c| c.op).filter(|&o| o != m.call).collect();
    let afters: Vec<OpId> = tc.afters(m.update).iter().map(|c| c.op).collect();
    for &y in &befores {
        if pos.get(y).is_some_and(|&p| p < pos[m.call]) {
            g.add_topo_con_unchecked(y, m.call)?;
        }
    }
    for &z in &afters {
        g.add_topo_con_unchecked(m.call, z)?;
        for &y in &befores {
            g.add_topo_con_unchecked(y, z)?;
        }
    }
    let (w, w2) = {
        let u = g.op(m.update)?;
        let w = u.input(0).ok_or_else(|| Malformed::MissingInput {
            op: u.name.clone(),
            index: 0,
            context: "the weight",
        })?;
        (w, u.output(0).ok_or_else(|| Malformed::NoOutput { op: u.name.clone() })?)
    };
    g.replace_all_uses(w2, w)?;
    g.erase_op_and_outputs(m.update)?;
    Ok(())
}
