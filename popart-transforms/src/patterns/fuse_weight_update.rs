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
//! as the weight) and the separate update pass disappear. The update now happens
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
//! existing schedule; in the callee the fused op reaches none of the readers.

use std::collections::{HashMap, HashSet};

use popart_ir::{AttrValue, Attributes, Graph, GraphId, Ir, OpId, Result, TensorId};

use crate::prune::AliasClasses;

/// A match: everything the rewrite needs.
struct Match {
    caller: GraphId,
    update: OpId,
    call: OpId,
    /// Call output (and callee output) index of the gradient.
    out: usize,
    /// Call input index of the weight.
    arg: usize,
    callee: GraphId,
    matmul: OpId,
    a: f64,
    b: f64,
    /// Caller ops touching the weight before the call / after the update.
    before_call: Vec<OpId>,
    after_update: Vec<OpId>,
    /// Callee ops reading the weight (none downstream of the matmul).
    callee_readers: Vec<OpId>,
    /// Constraints of the update: befores scheduled before the call, other befores, afters.
    befores_early: Vec<OpId>,
    befores_late: Vec<OpId>,
    afters: Vec<OpId>,
}

/// Apply the pattern everywhere it matches; returns the names (`graph/op`) of the
/// `ScaledAddInplace` ops folded away.
pub fn fuse_weight_updates(ir: &mut Ir) -> Result<Vec<String>> {
    let mut fused = Vec::new();
    for caller in ir.graph_ids() {
        while let Some(m) = find(ir, caller)? {
            let g = ir.graph(caller)?;
            fused.push(format!("{}/{}", g.name(), g.op(m.update)?.name));
            apply(ir, &m)?;
        }
    }
    Ok(fused)
}

/// Number of ops of the IR calling each graph.
fn call_sites(ir: &Ir) -> HashMap<GraphId, usize> {
    let mut n = HashMap::new();
    for g in ir.graphs() {
        for op in g.ops() {
            for c in op.called_graphs() {
                *n.entry(c).or_insert(0) += 1;
            }
        }
    }
    n
}

/// Ops reachable from `from` through data edges and topological constraints.
fn reachable_from(g: &Graph, from: OpId) -> Result<HashSet<OpId>> {
    let mut seen = HashSet::new();
    let mut work = vec![from];
    while let Some(o) = work.pop() {
        let op = g.op(o)?;
        let mut next: Vec<OpId> = g.topo_cons().afters(o).iter().map(|c| c.op).collect();
        for t in op.outputs().tensors() {
            next.extend(g.tensor(t)?.consumers().iter().map(|p| p.op));
        }
        for n in next {
            if seen.insert(n) {
                work.push(n);
            }
        }
    }
    Ok(seen)
}

fn find(ir: &Ir, caller: GraphId) -> Result<Option<Match>> {
    let g = ir.graph(caller)?;
    if !g.ops().any(|op| op.op_type() == "ScaledAddInplace") {
        return Ok(None);
    }
    let sites = call_sites(ir);
    let schedule = g.schedule()?;
    let pos: HashMap<OpId, usize> = schedule.iter().enumerate().map(|(i, &o)| (o, i)).collect();
    let classes = AliasClasses::new(g);
    for &u in &schedule {
        let op = g.op(u)?;
        if op.op_type() != "ScaledAddInplace" || op.inputs().len() != 2 {
            continue;
        }
        let (Some(a), Some(b)) = (op.attrs.float("a"), op.attrs.float("b")) else { continue };
        let (Some(w), Some(dw)) = (op.input(0), op.input(1)) else { continue };
        let (wt, dwt) = (g.tensor(w)?, g.tensor(dw)?);
        if wt.info != dwt.info || !wt.info.dtype.is_floating_point() || g.outputs().contains(&dw) {
            continue;
        }
        if dwt.consumers().len() != 1 {
            continue;
        }
        let Some(prod) = dwt.producer() else { continue };
        let call = g.op(prod.op)?;
        if call.op_type() != "Call" {
            continue;
        }
        let callee_id = call.called_graphs()[0];
        if sites.get(&callee_id) != Some(&1) {
            continue;
        }
        // The weight goes in at exactly one input, and no other input aliases it.
        let class = classes.class_of(w);
        let in_class = |t: TensorId| t == w || classes.class_of(t) == class;
        let args: Vec<u32> = call.inputs().iter().filter(|&(_, t)| in_class(t)).map(|(i, _)| i).collect();
        let [arg] = args[..] else { continue };
        if call.modified_inputs().contains(&arg) {
            continue;
        }
        // The callee side.
        let f = ir.graph(callee_id)?;
        let out = prod.index as usize;
        let dw_f = f.outputs()[out];
        let wf = f.inputs()[arg as usize];
        let dw_ft = f.tensor(dw_f)?;
        if f.outputs().iter().filter(|&&t| t == dw_f).count() != 1 || !dw_ft.consumers().is_empty() {
            continue;
        }
        let Some(mm) = dw_ft.producer() else { continue };
        let mm_op = f.op(mm.op)?;
        if mm_op.op_type() != "MatMulRhsGrad" || f.outputs().contains(&wf) {
            continue;
        }
        let f_classes = AliasClasses::new(f);
        if !f_classes.members(f_classes.class_of(wf)).is_empty() {
            continue; // written in place or aliased inside the callee
        }
        let mut callee_readers: Vec<OpId> = f.tensor(wf)?.consumers().iter().map(|p| p.op).collect();
        callee_readers.retain(|&r| r != mm.op);
        callee_readers.sort();
        callee_readers.dedup();
        // Each reader must be able to go before the update: the matmul must not reach it.
        let downstream = reachable_from(f, mm.op)?;
        if callee_readers.iter().any(|r| downstream.contains(r)) {
            continue;
        }
        // The caller side: nothing else touches the weight between the call and the update.
        let (pc, pu) = (pos[&prod.op], pos[&u]);
        let mut touching: Vec<OpId> = Vec::new();
        for &t in std::iter::once(&w).chain(classes.members(class)) {
            let tensor = g.tensor(t)?;
            touching.extend(tensor.consumers().iter().map(|p| p.op));
            touching.extend(tensor.producer().map(|p| p.op));
        }
        touching.sort_by_key(|o| pos[o]);
        touching.dedup();
        touching.retain(|&o| o != u && o != prod.op);
        if touching.iter().any(|o| pc < pos[o] && pos[o] < pu) {
            continue;
        }
        let (before_call, after_update): (Vec<OpId>, Vec<OpId>) = touching.iter().partition(|o| pos[*o] < pc);
        let tc = g.topo_cons();
        let befores: Vec<OpId> = tc.befores(u).iter().map(|c| c.op).filter(|&o| o != prod.op).collect();
        let (befores_early, befores_late) = befores.iter().partition(|o| pos[*o] < pc);
        return Ok(Some(Match {
            caller,
            update: u,
            call: prod.op,
            out,
            arg: arg as usize,
            callee: callee_id,
            matmul: mm.op,
            a,
            b,
            before_call,
            after_update,
            callee_readers,
            befores_early,
            befores_late,
            afters: tc.afters(u).iter().map(|c| c.op).collect(),
        }));
    }
    Ok(None)
}

fn apply(ir: &mut Ir, m: &Match) -> Result<()> {
    // Callee: the fused op replaces the matmul; the gradient output goes.
    let (g_in, x_in, wf, name) = {
        let f = ir.graph(m.callee)?;
        let mm = f.op(m.matmul)?;
        let (Some(g_in), Some(x_in)) = (mm.input(0), mm.input(1)) else {
            return Err(popart_ir::IrError::Invalid(format!("`{}` lacks an input", mm.name)));
        };
        (g_in, x_in, f.inputs()[m.arg], format!("{}_update", mm.name))
    };
    let attrs = Attributes::new().with("a", AttrValue::Float(m.a)).with("b", AttrValue::Float(m.b));
    let name = ir.graph_mut(m.callee)?.unique_op_name(&name);
    let fused =
        ir.create_op(m.callee, "ScaledAddMatMulRhsGradInplace", attrs, &[(0, g_in), (1, x_in), (2, wf)], &name)?;
    let f = ir.graph_mut(m.callee)?;
    f.transfer_topo_cons(m.matmul, fused)?;
    for &r in &m.callee_readers {
        f.add_topo_con(r, fused)?;
    }
    f.remove_output(m.out)?;
    f.erase_op_and_outputs(m.matmul)?;

    // Caller: the update goes, the call marks the weight modified and loses output `out`.
    let g = ir.graph_mut(m.caller)?;
    for &x in &m.before_call {
        g.add_topo_con(x, m.call)?;
    }
    for &x in &m.after_update {
        g.add_topo_con(m.call, x)?;
    }
    for &y in &m.befores_early {
        g.add_topo_con(y, m.call)?;
    }
    for &z in &m.afters {
        g.add_topo_con(m.call, z)?;
        for &y in m.befores_early.iter().chain(&m.befores_late) {
            g.add_topo_con(y, z)?;
        }
    }
    let (w, w2) = {
        let u = g.op(m.update)?;
        (u.input(0), u.output(0))
    };
    let (Some(w), Some(w2)) = (w, w2) else {
        return Err(popart_ir::IrError::Invalid("the update lacks its tensor".into()));
    };
    g.replace_all_uses(w2, w)?;
    let dw = g.op(m.update)?.input(1);
    g.erase_op_and_outputs(m.update)?;
    let ends: Vec<u32> = g.op(m.call)?.outputs().iter().map(|(i, _)| i).filter(|&i| i as usize > m.out).collect();
    g.disconnect_output(m.call, m.out as u32)?;
    for i in ends {
        let t = g.disconnect_output(m.call, i)?;
        g.connect_output(m.call, i - 1, t)?;
    }
    if let Some(dw) = dw {
        g.remove_tensor(dw)?;
    }
    let attrs = g.op_attrs_mut(m.call)?;
    let mut modified: Vec<i64> = attrs.ints("modified").unwrap_or(&[]).to_vec();
    modified.push(m.arg as i64);
    modified.sort_unstable();
    attrs.set("modified", AttrValue::Ints(modified));
    Ok(())
}
