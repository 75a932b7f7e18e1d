//! The lowering algorithm.
//!
//! 1. **Reachable graphs** from the main graph, each scheduled once.
//! 2. **Call sites**: every `Call`, `Repeat` and `If` branch, with the caller tensor
//!    bound to each callee input and output.
//! 3. **Buffer classes** (union-find over every tensor of every reachable graph):
//!    - in-place ops put each `OpDef::aliases` (input, output) pair in one class;
//!    - *input elision*: when every call site of a graph (none of them a repeat)
//!      passes the same caller buffer at input `k`, and the graph does not write
//!      that input unless every site marks it modified, the callee reads the
//!      caller's buffer directly (no copy in, no copy back);
//!    - *output elision*: a graph with a single `Call` site writes output `j`
//!      straight into the caller's output when that output is an activation private
//!      to the graph (no copy out).
//! 4. **Timeline**: one global step numbering in which every call is expanded in
//!    place (copy-in step, callee body, copy-out step; a repeat adds a loop-copy
//!    step; an if lays out both branches). Each graph therefore has one or more
//!    *instances* (start steps), and a tensor of a graph is live over its local
//!    interval at each instance. Callee inputs are live from the copy-in step,
//!    outputs until the copy-out step; repeat bodies keep inputs live for the
//!    whole body (the loop-carried copies write them at its end, and the results
//!    are copied out of them after the last iteration).
//! 5. **Memory plan**: variables and constants first (always live), then every
//!    activation buffer at the lowest aligned offset not used by a buffer live at
//!    the same time (see [`crate::memory`]).
//! 6. **Programs**: functions (one per subgraph), the main program, init (constants)
//!    and the weight programs.

use std::collections::{HashMap, HashSet};

use popart_ir::{GraphId, Ir, Op, OpId, StreamDirection, TensorId, TensorInfo, TensorKind};

use crate::executable::*;
use crate::memory::{align_up, assign_offsets, normalize, Intervals};
use crate::LowerError;

/// Lower a prepared (verified, pruned) IR into an [`Executable`].
///
/// ```
/// use popart_ir::{AttrValue, Attributes, DataType, Ir, StreamDirection, TensorInfo, TensorKind};
/// let mut ir = Ir::new();
/// let main = ir.main_graph_id();
/// let info = TensorInfo::new(DataType::Float32, [4]);
/// let g = ir.main_graph_mut();
/// g.add_tensor("x", info.clone(), TensorKind::Stream(StreamDirection::HostToDevice)).unwrap();
/// g.add_tensor("y", info.clone(), TensorKind::Stream(StreamDirection::DeviceToHost)).unwrap();
/// let load = ir.create_op(main, "HostLoad", Attributes::new().with("stream", AttrValue::Str("x".into())), &[], "load").unwrap();
/// let x = ir.main_graph().op(load).unwrap().output(0).unwrap();
/// let relu = ir.create_op(main, "Relu", Attributes::new(), &[(0, x)], "relu").unwrap();
/// let y = ir.main_graph().op(relu).unwrap().output(0).unwrap();
/// ir.create_op(main, "HostStore", Attributes::new().with("stream", AttrValue::Str("y".into())), &[(0, y)], "store").unwrap();
/// let exe = popart_lower::lower(&ir).unwrap();
/// assert_eq!(exe.kernel_calls().len(), 1);
/// assert_eq!(exe.memory.arena_bytes, 128); // x and y are live together: two 64-byte buffers
/// ```
pub fn lower(ir: &Ir) -> Result<Executable, LowerError> {
    Lowerer::new(ir)?.run()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SiteKind {
    Call,
    Repeat,
    IfThen,
    IfElse,
}

/// One place where a graph is called.
#[derive(Clone, Debug)]
struct Site {
    caller: GraphId,
    op: OpId,
    callee: GraphId,
    kind: SiteKind,
    /// Caller tensor bound to callee input k.
    args: Vec<TensorId>,
    /// Caller tensor receiving callee output j.
    outs: Vec<TensorId>,
    /// Callee input positions the call site marks as modified (copied back).
    modified: Vec<usize>,
}

/// Union-find with member lists, over dense tensor keys.
struct Classes {
    parent: Vec<u32>,
    members: Vec<Vec<u32>>,
}

impl Classes {
    fn new(n: usize) -> Self {
        Classes { parent: (0..n as u32).collect(), members: (0..n as u32).map(|i| vec![i]).collect() }
    }

    fn find(&self, mut x: u32) -> u32 {
        while self.parent[x as usize] != x {
            x = self.parent[x as usize];
        }
        x
    }

    fn union(&mut self, a: u32, b: u32) -> u32 {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra == rb {
            return ra;
        }
        let (big, small) =
            if self.members[ra as usize].len() >= self.members[rb as usize].len() { (ra, rb) } else { (rb, ra) };
        self.parent[small as usize] = big;
        let moved = std::mem::take(&mut self.members[small as usize]);
        self.members[big as usize].extend(moved);
        big
    }
}

/// A source or destination of a planned copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Loc {
    Class(u32),
    Temp(usize),
}

#[derive(Clone, Copy, Debug)]
struct PlannedCopy {
    src: Loc,
    dst: Loc,
    bytes: usize,
}

#[derive(Clone, Debug, Default)]
struct SitePlan {
    copy_in: Vec<PlannedCopy>,
    copy_out: Vec<PlannedCopy>,
    copy_back: Vec<PlannedCopy>,
    loop_copies: Vec<PlannedCopy>,
}

struct Temp {
    info: TensorInfo,
    graph: GraphId,
    step: i64,
}

struct Lowerer<'a> {
    ir: &'a Ir,
    main: GraphId,
    /// Reachable graphs, main first, then in discovery order.
    order: Vec<GraphId>,
    /// Reachable graphs, every caller before its callees.
    callers_first: Vec<GraphId>,
    sched: HashMap<GraphId, Vec<OpId>>,
    keys: HashMap<(GraphId, TensorId), u32>,
    tensors: Vec<(GraphId, TensorId)>,
    classes: Classes,
    sites: Vec<Site>,
    sites_of_op: HashMap<(GraphId, OpId), Vec<usize>>,
    sites_of_callee: HashMap<GraphId, Vec<usize>>,
    len: HashMap<GraphId, i64>,
    start: HashMap<(GraphId, OpId), i64>,
    repeat_bodies: HashSet<GraphId>,
    temps: Vec<Temp>,
}

impl<'a> Lowerer<'a> {
    fn new(ir: &'a Ir) -> Result<Self, LowerError> {
        let main = ir.main_graph_id();
        let callees_first = ir.graphs_callees_first()?;
        if let Some(&t) = ir.main_graph().inputs().first() {
            return Err(LowerError::MainGraphInput(ir.main_graph().tensor(t)?.name.clone()));
        }
        let mut l = Lowerer {
            ir,
            main,
            order: vec![main],
            callers_first: Vec::new(),
            sched: HashMap::new(),
            keys: HashMap::new(),
            tensors: Vec::new(),
            classes: Classes::new(0),
            sites: Vec::new(),
            sites_of_op: HashMap::new(),
            sites_of_callee: HashMap::new(),
            len: HashMap::new(),
            start: HashMap::new(),
            repeat_bodies: HashSet::new(),
            temps: Vec::new(),
        };
        // Reachable graphs and call sites, breadth first from main.
        let mut seen: HashSet<GraphId> = HashSet::from([main]);
        let mut i = 0;
        while i < l.order.len() {
            let g = l.order[i];
            let graph = ir.graph(g)?;
            let schedule = graph.schedule()?;
            for &o in &schedule {
                let op = graph.op(o)?;
                for site in sites_of(ir, g, op)? {
                    if seen.insert(site.callee) {
                        l.order.push(site.callee);
                    }
                    if site.kind == SiteKind::Repeat {
                        l.repeat_bodies.insert(site.callee);
                    }
                    let idx = l.sites.len();
                    l.sites_of_op.entry((g, o)).or_default().push(idx);
                    l.sites_of_callee.entry(site.callee).or_default().push(idx);
                    l.sites.push(site);
                }
            }
            l.sched.insert(g, schedule);
            i += 1;
        }
        l.callers_first = callees_first.into_iter().rev().filter(|g| seen.contains(g)).collect();
        for &g in &l.order {
            for t in ir.graph(g)?.tensors() {
                if !matches!(t.kind, TensorKind::Stream(_)) {
                    l.keys.insert((g, t.id), l.tensors.len() as u32);
                    l.tensors.push((g, t.id));
                }
            }
        }
        l.classes = Classes::new(l.tensors.len());
        Ok(l)
    }

    fn key(&self, g: GraphId, t: TensorId) -> Result<u32, LowerError> {
        self.keys.get(&(g, t)).copied().ok_or_else(|| {
            let name =
                self.ir.graph(g).and_then(|gr| gr.tensor(t)).map_or_else(|_| format!("{t:?}"), |x| x.name.clone());
            LowerError::Internal(format!("tensor `{name}` has no buffer (a stream used as an op argument?)"))
        })
    }

    fn class(&self, g: GraphId, t: TensorId) -> Result<u32, LowerError> {
        Ok(self.classes.find(self.key(g, t)?))
    }

    fn kind_of(&self, key: u32) -> &TensorKind {
        let (g, t) = self.tensors[key as usize];
        &self.ir.graph(g).expect("reachable").tensor(t).expect("keyed").kind
    }

    fn info(&self, g: GraphId, t: TensorId) -> Result<TensorInfo, LowerError> {
        Ok(self.ir.graph(g)?.tensor(t)?.info.clone())
    }

    fn run(mut self) -> Result<Executable, LowerError> {
        self.compute_timeline()?;
        self.merge_aliases()?;
        let modifies_input = self.inputs_modified_by_graphs()?;
        self.elide_inputs(&modifies_input)?;
        self.elide_outputs()?;
        let plans = self.plan_copies()?;
        let (locals, bases) = self.local_intervals_and_instances()?;
        self.finish(plans, locals, bases)
    }

    // ----- timeline lengths -----

    fn compute_timeline(&mut self) -> Result<(), LowerError> {
        for g in self.callers_first.clone().into_iter().rev() {
            let mut t = 0i64;
            for &o in &self.sched[&g] {
                self.start.insert((g, o), t);
                t += self.op_len(g, o);
            }
            self.len.insert(g, t);
        }
        Ok(())
    }

    fn site_len(&self, idx: usize) -> i64 {
        self.len[&self.sites[idx].callee]
    }

    fn op_sites(&self, g: GraphId, o: OpId) -> &[usize] {
        self.sites_of_op.get(&(g, o)).map_or(&[], Vec::as_slice)
    }

    fn op_len(&self, g: GraphId, o: OpId) -> i64 {
        let sites = self.op_sites(g, o);
        match sites.first().map(|&s| self.sites[s].kind) {
            None => 1,
            Some(SiteKind::Call) => 2 + self.site_len(sites[0]),
            Some(SiteKind::Repeat) => 3 + self.site_len(sites[0]),
            Some(SiteKind::IfThen | SiteKind::IfElse) => 4 + sites.iter().map(|&s| self.site_len(s)).sum::<i64>(),
        }
    }

    /// (then length, else length) of an if op.
    fn if_lens(&self, g: GraphId, o: OpId) -> (i64, i64) {
        let mut lt = 0;
        let mut le = 0;
        for &s in self.op_sites(g, o) {
            match self.sites[s].kind {
                SiteKind::IfThen => lt = self.site_len(s),
                SiteKind::IfElse => le = self.site_len(s),
                _ => {}
            }
        }
        (lt, le)
    }

    /// Step, relative to the op's start, at which the callee of site `s` starts.
    fn callee_offset(&self, s: usize) -> i64 {
        let site = &self.sites[s];
        match site.kind {
            SiteKind::Call | SiteKind::Repeat | SiteKind::IfThen => 1,
            SiteKind::IfElse => 3 + self.if_lens(site.caller, site.op).0,
        }
    }

    /// Local step at which op `o` (starting at `s`) writes its outputs.
    fn def_time(&self, g: GraphId, o: OpId, s: i64) -> i64 {
        let sites = self.op_sites(g, o);
        match sites.first().map(|&x| self.sites[x].kind) {
            None => s,
            Some(SiteKind::Call) => s + 1 + self.site_len(sites[0]),
            Some(SiteKind::Repeat) => s + 2 + self.site_len(sites[0]),
            Some(SiteKind::IfThen | SiteKind::IfElse) => s + 1 + self.if_lens(g, o).0,
        }
    }

    /// Last local step at which op `o` (starting at `s`) writes its outputs: an if
    /// writes them in each branch, the else branch's copy-out coming last.
    fn last_write_time(&self, g: GraphId, o: OpId, s: i64) -> i64 {
        let sites = self.op_sites(g, o);
        match sites.first().map(|&x| self.sites[x].kind) {
            Some(SiteKind::IfThen | SiteKind::IfElse) => {
                let (lt, le) = self.if_lens(g, o);
                s + 3 + lt + le
            }
            _ => self.def_time(g, o, s),
        }
    }

    /// Last local step at which op `o` (starting at `s`) reads its input `idx`.
    fn use_time(&self, g: GraphId, op: &Op, idx: u32, s: i64) -> i64 {
        let sites = self.op_sites(g, op.id);
        let mut last = s;
        for &x in sites {
            let site = &self.sites[x];
            match site.kind {
                SiteKind::Call => {
                    if site.modified.contains(&(idx as usize)) {
                        last = last.max(s + 1 + self.site_len(x));
                    }
                }
                SiteKind::Repeat | SiteKind::IfThen => {}
                SiteKind::IfElse => {
                    let passed =
                        site.args.iter().enumerate().any(|(k, _)| if_arg_index(op, "else_inputs", k) == Some(idx));
                    if passed {
                        last = last.max(s + 2 + self.if_lens(g, op.id).0);
                    }
                }
            }
        }
        last
    }

    // ----- buffer classes -----

    fn merge_aliases(&mut self) -> Result<(), LowerError> {
        for &g in &self.order.clone() {
            let graph = self.ir.graph(g)?;
            for &o in &self.sched[&g] {
                let op = graph.op(o)?;
                for (i, j) in op.def().aliases(&op.attrs) {
                    if let (Some(a), Some(b)) = (op.input(i), op.output(j)) {
                        let (ka, kb) = (self.key(g, a)?, self.key(g, b)?);
                        self.classes.union(ka, kb);
                    }
                }
            }
        }
        Ok(())
    }

    /// For every graph, which of its inputs it writes (itself or through its alias
    /// classes, including calls that mark them modified).
    fn inputs_modified_by_graphs(&self) -> Result<HashMap<GraphId, Vec<bool>>, LowerError> {
        let mut out = HashMap::new();
        for &g in &self.order {
            let graph = self.ir.graph(g)?;
            let mut written: HashSet<u32> = HashSet::new();
            for op in graph.ops() {
                for i in op.modified_inputs() {
                    if let Some(t) = op.input(i) {
                        written.insert(self.class(g, t)?);
                    }
                }
            }
            let v = graph
                .inputs()
                .iter()
                .map(|&t| self.class(g, t).map(|c| written.contains(&c)))
                .collect::<Result<_, _>>()?;
            out.insert(g, v);
        }
        Ok(out)
    }

    fn elide_inputs(&mut self, modifies_input: &HashMap<GraphId, Vec<bool>>) -> Result<(), LowerError> {
        for f in self.callers_first.clone() {
            if f == self.main {
                continue;
            }
            let sites: Vec<usize> = self.sites_of_callee.get(&f).cloned().unwrap_or_default();
            if sites.is_empty() || sites.iter().any(|&s| self.sites[s].kind == SiteKind::Repeat) {
                continue;
            }
            let inputs = self.ir.graph(f)?.inputs().to_vec();
            for (k, &input) in inputs.iter().enumerate() {
                let writes = modifies_input[&f][k];
                let marked_everywhere =
                    sites.iter().all(|&s| self.sites[s].kind == SiteKind::Call && self.sites[s].modified.contains(&k));
                if writes && !marked_everywhere {
                    continue;
                }
                let mut caller_class = None;
                let mut ok = true;
                for &s in &sites {
                    let site = &self.sites[s];
                    let c = self.class(site.caller, site.args[k])?;
                    if caller_class.is_some_and(|x| x != c) {
                        ok = false;
                        break;
                    }
                    caller_class = Some(c);
                    // The same buffer at two inputs: sharing is only safe if neither is written.
                    for (k2, &a2) in site.args.iter().enumerate() {
                        if k2 != k && self.class(site.caller, a2)? == c {
                            let touched = |kk: usize| modifies_input[&f][kk] || site.modified.contains(&kk);
                            if touched(k) || touched(k2) {
                                ok = false;
                            }
                        }
                    }
                }
                if let (true, Some(c)) = (ok, caller_class) {
                    let ki = self.key(f, input)?;
                    self.classes.union(c, ki);
                }
            }
        }
        Ok(())
    }

    fn elide_outputs(&mut self) -> Result<(), LowerError> {
        for f in self.callers_first.clone() {
            let sites: Vec<usize> = self.sites_of_callee.get(&f).cloned().unwrap_or_default();
            let [s] = sites[..] else { continue };
            if self.sites[s].kind != SiteKind::Call {
                continue;
            }
            let graph = self.ir.graph(f)?;
            let outputs = graph.outputs().to_vec();
            for (j, &o) in outputs.iter().enumerate() {
                let tensor = graph.tensor(o)?;
                if tensor.producer().is_none() || outputs.iter().filter(|&&x| x == o).count() != 1 {
                    continue;
                }
                let c = self.class(f, o)?;
                let other_outputs: HashSet<u32> =
                    outputs.iter().filter(|&&x| x != o).map(|&x| self.class(f, x)).collect::<Result<_, _>>()?;
                let private = !other_outputs.contains(&c)
                    && self.classes.members[c as usize].iter().all(|&m| {
                        let (mg, mt) = self.tensors[m as usize];
                        mg == f && graph.input_index(mt).is_none() && matches!(self.kind_of(m), TensorKind::ActGrad)
                    });
                if private {
                    let site = &self.sites[s];
                    let y = self.class(site.caller, site.outs[j])?;
                    self.classes.union(c, y);
                }
            }
        }
        Ok(())
    }

    // ----- copies -----

    fn copy(&self, src: (GraphId, TensorId), dst: (GraphId, TensorId)) -> Result<Option<PlannedCopy>, LowerError> {
        let (s, d) = (self.class(src.0, src.1)?, self.class(dst.0, dst.1)?);
        if s == d {
            return Ok(None);
        }
        let bytes = self.info(src.0, src.1)?.nbytes();
        Ok(Some(PlannedCopy { src: Loc::Class(s), dst: Loc::Class(d), bytes }))
    }

    fn plan_copies(&mut self) -> Result<Vec<SitePlan>, LowerError> {
        let mut plans = Vec::with_capacity(self.sites.len());
        for s in 0..self.sites.len() {
            let site = self.sites[s].clone();
            let callee = self.ir.graph(site.callee)?;
            let (cin, cout) = (callee.inputs().to_vec(), callee.outputs().to_vec());
            let mut plan = SitePlan::default();
            for (k, &a) in site.args.iter().enumerate() {
                plan.copy_in.extend(self.copy((site.caller, a), (site.callee, cin[k]))?);
            }
            for (j, &y) in site.outs.iter().enumerate() {
                // After a repeat's last loop-carried copy, input j holds the last
                // iteration's output j (the outputs themselves may be inputs that
                // the loop copies have overwritten).
                let src = if site.kind == SiteKind::Repeat { cin[j] } else { cout[j] };
                plan.copy_out.extend(self.copy((site.callee, src), (site.caller, y))?);
            }
            for &k in &site.modified {
                plan.copy_back.extend(self.copy((site.callee, cin[k]), (site.caller, site.args[k]))?);
            }
            if site.kind == SiteKind::Repeat {
                let mut loops = Vec::new();
                for (k, &o) in cout.iter().enumerate() {
                    loops.extend(self.copy((site.callee, o), (site.callee, cin[k]))?);
                }
                // Loop-carried copies happen "in parallel": if one reads what another
                // writes, stage every value through a temporary first.
                let dsts: HashSet<Loc> = loops.iter().map(|c| c.dst).collect();
                if loops.iter().any(|c| dsts.contains(&c.src)) {
                    let step = self.start[&(site.caller, site.op)] + 1 + self.site_len(s);
                    let mut staged = Vec::new();
                    let mut back = Vec::new();
                    for (k, c) in loops.iter().enumerate() {
                        let t = self.temps.len();
                        self.temps.push(Temp { info: self.info(site.callee, cout[k])?, graph: site.caller, step });
                        staged.push(PlannedCopy { src: c.src, dst: Loc::Temp(t), bytes: c.bytes });
                        back.push(PlannedCopy { src: Loc::Temp(t), dst: c.dst, bytes: c.bytes });
                    }
                    staged.extend(back);
                    loops = staged;
                }
                plan.loop_copies = loops;
            }
            plans.push(plan);
        }
        Ok(plans)
    }

    // ----- liveness -----

    /// Local live intervals of every keyed tensor with a definition, and the
    /// instance start steps of every graph.
    #[allow(clippy::type_complexity)]
    fn local_intervals_and_instances(
        &self,
    ) -> Result<(HashMap<u32, (i64, i64)>, HashMap<GraphId, Vec<i64>>), LowerError> {
        let mut locals: HashMap<u32, (i64, i64)> = HashMap::new();
        for &g in &self.order {
            let graph = self.ir.graph(g)?;
            let l = self.len[&g];
            let repeat_body = self.repeat_bodies.contains(&g);
            let mut marked: HashSet<usize> = HashSet::new();
            for &s in self.sites_of_callee.get(&g).map_or(&[][..], Vec::as_slice) {
                marked.extend(self.sites[s].modified.iter().copied());
            }
            let mut live: HashMap<TensorId, (i64, i64)> = HashMap::new();
            for (k, &t) in graph.inputs().iter().enumerate() {
                // Repeat bodies: inputs are rewritten by the loop copies (step l) and
                // read by the copy-out (step l + 1). Modified inputs: copied back at l.
                let end = if repeat_body {
                    l + 1
                } else if marked.contains(&k) {
                    l
                } else {
                    -1
                };
                live.insert(t, (-1, end));
            }
            for &o in &self.sched[&g] {
                let op = graph.op(o)?;
                let s = self.start[&(g, o)];
                for (idx, t) in op.inputs().iter() {
                    let u = self.use_time(g, op, idx, s);
                    let e = live.entry(t).or_insert((u, u));
                    e.1 = e.1.max(u);
                }
                let d = self.def_time(g, o, s);
                let last_write = self.last_write_time(g, o, s);
                for t in op.outputs().tensors() {
                    let e = live.entry(t).or_insert((d, last_write));
                    e.0 = d;
                    e.1 = e.1.max(last_write);
                }
            }
            for &t in graph.outputs() {
                let e = live.entry(t).or_insert((l, l));
                e.1 = e.1.max(l);
            }
            for (t, iv) in live {
                if let Some(&k) = self.keys.get(&(g, t)) {
                    locals.insert(k, iv);
                }
            }
        }
        let mut bases: HashMap<GraphId, Vec<i64>> = HashMap::from([(self.main, vec![0])]);
        for &g in &self.callers_first {
            let mine = bases.get(&g).cloned().unwrap_or_default();
            for &o in &self.sched[&g] {
                for &s in self.op_sites(g, o) {
                    let off = self.start[&(g, o)] + self.callee_offset(s);
                    let callee = self.sites[s].callee;
                    let v = bases.entry(callee).or_default();
                    v.extend(mine.iter().map(|b| b + off));
                }
            }
        }
        Ok((locals, bases))
    }

    // ----- buffers, memory plan and programs -----

    fn finish(
        self,
        plans: Vec<SitePlan>,
        locals: HashMap<u32, (i64, i64)>,
        bases: HashMap<GraphId, Vec<i64>>,
    ) -> Result<Executable, LowerError> {
        let ir = self.ir;
        let permanent_reps: HashSet<u32> = (0..self.tensors.len() as u32)
            .filter(|&k| matches!(self.kind_of(k), TensorKind::Variable(_) | TensorKind::Constant(_)))
            .map(|k| self.classes.find(k))
            .collect();
        // Live intervals of every activation class.
        let mut class_lives: HashMap<u32, Intervals> = HashMap::new();
        for (&k, &(a, e)) in &locals {
            let rep = self.classes.find(k);
            if permanent_reps.contains(&rep) {
                continue;
            }
            let g = self.tensors[k as usize].0;
            let v = class_lives.entry(rep).or_default();
            for &b in bases.get(&g).map_or(&[][..], Vec::as_slice) {
                v.push(((b + a).max(0) as u64, (b + e).max(0) as u64));
            }
        }

        // Number buffers in program order.
        let mut class_buffer: HashMap<u32, BufferId> = HashMap::new();
        let mut buffer_classes: Vec<u32> = Vec::new();
        let mut visit = |t: (GraphId, TensorId), this: &Self| {
            let Some(&k) = this.keys.get(&t) else { return };
            let rep = this.classes.find(k);
            if class_buffer.contains_key(&rep) || !(permanent_reps.contains(&rep) || class_lives.contains_key(&rep)) {
                return;
            }
            class_buffer.insert(rep, BufferId(buffer_classes.len() as u32));
            buffer_classes.push(rep);
        };
        for &g in &self.order {
            let graph = ir.graph(g)?;
            graph.inputs().iter().for_each(|&t| visit((g, t), &self));
            for &o in &self.sched[&g] {
                let op = graph.op(o)?;
                op.inputs().tensors().for_each(|t| visit((g, t), &self));
                op.outputs().tensors().for_each(|t| visit((g, t), &self));
            }
            graph.outputs().iter().for_each(|&t| visit((g, t), &self));
        }
        for &g in &self.order {
            for t in ir.graph(g)?.tensors() {
                visit((g, t.id), &self);
            }
        }

        let name_of = |k: u32| -> TensorRef {
            let (g, t) = self.tensors[k as usize];
            let graph = ir.graph(g).expect("reachable");
            TensorRef {
                graph: g,
                tensor: t,
                name: format!("{}/{}", graph.name(), graph.tensor(t).expect("keyed").name),
            }
        };
        let mut buffers: Vec<Buffer> = Vec::new();
        let mut tensor_buffers = HashMap::new();
        for (i, &rep) in buffer_classes.iter().enumerate() {
            let mut members = self.classes.members[rep as usize].clone();
            members.sort_unstable();
            let kind = if members.iter().any(|&m| matches!(self.kind_of(m), TensorKind::Variable(_))) {
                BufferKind::Variable
            } else if members.iter().any(|&m| matches!(self.kind_of(m), TensorKind::Constant(_))) {
                BufferKind::Constant
            } else {
                BufferKind::Activation
            };
            let mut bytes = 0;
            let mut info = None;
            let mut refs = Vec::new();
            for &m in &members {
                let (g, t) = self.tensors[m as usize];
                let ti = self.info(g, t)?;
                bytes = bytes.max(ti.nbytes());
                info.get_or_insert(ti);
                tensor_buffers.insert((g, t), BufferId(i as u32));
                refs.push(name_of(m));
            }
            // The class representative's own name first when it is a variable/constant.
            if let Some(p) = members.iter().position(|&m| !matches!(self.kind_of(m), TensorKind::ActGrad)) {
                refs.swap(0, p);
                let (g, t) = self.tensors[members[p] as usize];
                info = Some(self.info(g, t)?);
            }
            buffers.push(Buffer {
                id: BufferId(i as u32),
                info: info.expect("classes are non-empty"),
                kind,
                offset: 0,
                size: align_up(bytes, BUFFER_ALIGNMENT),
                tensors: refs,
            });
        }
        let mut temp_buffer = Vec::new();
        let mut lives: Vec<Intervals> = Vec::new();
        for b in &buffers {
            lives.push(if b.kind == BufferKind::Activation {
                normalize(class_lives.remove(&buffer_classes[b.id.index()]).unwrap_or_default())
            } else {
                Vec::new()
            });
        }
        for t in &self.temps {
            let id = BufferId(buffers.len() as u32);
            temp_buffer.push(id);
            buffers.push(Buffer {
                id,
                info: t.info.clone(),
                kind: BufferKind::Activation,
                offset: 0,
                size: align_up(t.info.nbytes(), BUFFER_ALIGNMENT),
                tensors: Vec::new(),
            });
            let v = bases
                .get(&t.graph)
                .map_or(&[][..], Vec::as_slice)
                .iter()
                .map(|&b| ((b + t.step) as u64, (b + t.step) as u64));
            lives.push(normalize(v.collect()));
        }

        // Memory plan: permanent buffers first, then activations with reuse.
        let mut permanent = 0;
        for b in buffers.iter_mut().filter(|b| b.kind != BufferKind::Activation) {
            b.offset = permanent;
            permanent += b.size;
        }
        let sizes: Vec<usize> =
            buffers.iter().map(|b| if b.kind == BufferKind::Activation { b.size } else { 0 }).collect();
        let (offsets, end) = assign_offsets(&sizes, &lives, permanent);
        for (b, off) in buffers.iter_mut().zip(offsets) {
            if b.kind == BufferKind::Activation {
                b.offset = off;
            }
        }
        let memory = MemoryPlan {
            alignment: BUFFER_ALIGNMENT,
            permanent_bytes: permanent,
            arena_bytes: end.max(permanent),
            no_reuse_bytes: buffers.iter().map(|b| b.size).sum(),
        };

        // Streams, weights, constants.
        let mut streams = Vec::new();
        let main = ir.main_graph();
        for t in main.tensors() {
            if let TensorKind::Stream(direction) = t.kind {
                streams.push(Stream {
                    id: StreamId(streams.len() as u32),
                    name: t.name.clone(),
                    direction,
                    info: t.info.clone(),
                    kind: StreamKind::Data,
                    tensor: t.id,
                    graph: self.main,
                });
            }
        }
        let mut weights = Vec::new();
        let mut constants = Vec::new();
        for b in &buffers {
            for r in &b.tensors {
                let tensor = ir.graph(r.graph)?.tensor(r.tensor)?;
                match &tensor.kind {
                    TensorKind::Variable(data) => {
                        let mut stream = |direction| {
                            let id = StreamId(streams.len() as u32);
                            streams.push(Stream {
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
                        weights.push(Weight {
                            tensor: r.clone(),
                            buffer: b.id,
                            from_host,
                            to_host,
                            initial: data.clone(),
                        });
                    }
                    TensorKind::Constant(data) => {
                        constants.push(Constant { tensor: r.clone(), buffer: b.id, data: data.clone() })
                    }
                    _ => {}
                }
            }
        }

        let emitter = Emitter {
            l: &self,
            plans: &plans,
            class_buffer: &class_buffer,
            temp_buffer: &temp_buffer,
            streams: &streams,
            function_ids: self.order.iter().skip(1).enumerate().map(|(i, &g)| (g, FunctionId(i as u32))).collect(),
        };
        let mut functions = Vec::new();
        for (i, &g) in self.order.iter().enumerate().skip(1) {
            let graph = ir.graph(g)?;
            let inputs = graph.inputs().iter().map(|&t| emitter.buf(g, t)).collect::<Result<_, _>>()?;
            let outputs = graph.outputs().iter().map(|&t| emitter.buf(g, t)).collect::<Result<_, _>>()?;
            functions.push(Function {
                id: FunctionId(i as u32 - 1),
                name: graph.name().to_string(),
                graph: g,
                inputs,
                outputs,
                body: emitter.graph_body(g)?,
            });
        }
        let main_program = emitter.graph_body(self.main)?;
        let programs = Programs {
            init: Program::Sequence((0..constants.len()).map(|constant| Program::WriteConstant { constant }).collect()),
            weights_from_host: Program::Sequence(
                weights.iter().map(|w| Program::HostToDevice { stream: w.from_host, dst: w.buffer }).collect(),
            ),
            weights_to_host: Program::Sequence(
                weights.iter().map(|w| Program::DeviceToHost { src: w.buffer, stream: w.to_host }).collect(),
            ),
            main: main_program,
        };
        Ok(Executable {
            buffers,
            functions,
            streams,
            weights,
            constants,
            programs,
            memory,
            num_host_transfers: ir.num_host_transfers,
            replication_factor: ir.replication_factor,
            tensor_buffers,
        })
    }
}

/// Op input index passed as branch input `k` of an if op (`then_inputs`/`else_inputs`).
fn if_arg_index(op: &Op, key: &str, k: usize) -> Option<u32> {
    op.attrs.ints(key).and_then(|v| v.get(k)).map(|&i| i as u32)
}

/// The call sites of one op (none for ops that call no graph).
fn sites_of(ir: &Ir, g: GraphId, op: &Op) -> Result<Vec<Site>, LowerError> {
    let missing = |what: &str| LowerError::Internal(format!("op `{}` has no {what}", op.name));
    let outs = |callee: GraphId| -> Result<Vec<TensorId>, LowerError> {
        let n = ir.graph(callee)?.outputs().len();
        (0..n as u32).map(|j| op.output(j).ok_or_else(|| missing(&format!("output {j}")))).collect()
    };
    let call_like = |kind: SiteKind| -> Result<Site, LowerError> {
        let callee = op.attrs.graph("graph").ok_or_else(|| missing("`graph` attribute"))?;
        let n = ir.graph(callee)?.inputs().len();
        let args = (0..n as u32)
            .map(|k| op.input(k).ok_or_else(|| missing(&format!("input {k}"))))
            .collect::<Result<_, _>>()?;
        let modified = if kind == SiteKind::Call {
            op.modified_inputs().iter().map(|&i| i as usize).collect()
        } else {
            Vec::new()
        };
        Ok(Site { caller: g, op: op.id, callee, kind, args, outs: outs(callee)?, modified })
    };
    match op.op_type() {
        "Call" => Ok(vec![call_like(SiteKind::Call)?]),
        "Repeat" => Ok(vec![call_like(SiteKind::Repeat)?]),
        "If" => {
            let mut v = Vec::new();
            for (kind, gkey, ikey) in
                [(SiteKind::IfThen, "then_graph", "then_inputs"), (SiteKind::IfElse, "else_graph", "else_inputs")]
            {
                let callee = op.attrs.graph(gkey).ok_or_else(|| missing(gkey))?;
                let n = ir.graph(callee)?.inputs().len();
                let args = (0..n)
                    .map(|k| {
                        if_arg_index(op, ikey, k)
                            .and_then(|i| op.input(i))
                            .ok_or_else(|| missing(&format!("{ikey}[{k}]")))
                    })
                    .collect::<Result<_, _>>()?;
                v.push(Site { caller: g, op: op.id, callee, kind, args, outs: outs(callee)?, modified: Vec::new() });
            }
            Ok(v)
        }
        _ => Ok(Vec::new()),
    }
}

struct Emitter<'l, 'a> {
    l: &'l Lowerer<'a>,
    plans: &'l [SitePlan],
    class_buffer: &'l HashMap<u32, BufferId>,
    temp_buffer: &'l [BufferId],
    streams: &'l [Stream],
    function_ids: HashMap<GraphId, FunctionId>,
}

impl Emitter<'_, '_> {
    fn buf(&self, g: GraphId, t: TensorId) -> Result<BufferId, LowerError> {
        let c = self.l.class(g, t)?;
        self.class_buffer.get(&c).copied().ok_or_else(|| {
            LowerError::Internal(format!("tensor {t:?} of graph `{}` is used but has no buffer", self.graph_name(g)))
        })
    }

    fn graph_name(&self, g: GraphId) -> String {
        self.l.ir.graph(g).map_or_else(|_| format!("{g:?}"), |x| x.name().to_string())
    }

    fn loc(&self, l: Loc) -> BufferId {
        match l {
            Loc::Class(c) => self.class_buffer[&c],
            Loc::Temp(t) => self.temp_buffer[t],
        }
    }

    fn copies(&self, v: &[PlannedCopy], out: &mut Vec<Program>) {
        for c in v {
            out.push(Program::Copy { src: self.loc(c.src), dst: self.loc(c.dst), bytes: c.bytes });
        }
    }

    fn stream(&self, g: GraphId, op: &Op, direction: StreamDirection) -> Result<StreamId, LowerError> {
        let name = op.attrs.str("stream").unwrap_or("");
        self.streams
            .iter()
            .find(|s| s.kind == StreamKind::Data && s.direction == direction && s.name == name)
            .map(|s| s.id)
            .ok_or_else(|| LowerError::UnknownStream {
                graph: self.graph_name(g),
                op: op.name.clone(),
                stream: name.to_string(),
            })
    }

    fn graph_body(&self, g: GraphId) -> Result<Program, LowerError> {
        let graph = self.l.ir.graph(g)?;
        let mut seq = Vec::new();
        for &o in &self.l.sched[&g] {
            let op = graph.op(o)?;
            let sites = self.l.op_sites(g, o);
            match op.op_type() {
                "HostLoad" => {
                    let stream = self.stream(g, op, StreamDirection::HostToDevice)?;
                    let out =
                        op.output(0).ok_or_else(|| LowerError::Internal(format!("`{}` has no output", op.name)))?;
                    seq.push(Program::HostToDevice { stream, dst: self.buf(g, out)? });
                }
                "HostStore" => {
                    let stream = self.stream(g, op, StreamDirection::DeviceToHost)?;
                    let t = op.input(0).ok_or_else(|| LowerError::Internal(format!("`{}` has no input", op.name)))?;
                    seq.push(Program::DeviceToHost { src: self.buf(g, t)?, stream });
                }
                _ if !sites.is_empty() => self.emit_call_op(op, sites, &mut seq)?,
                _ => seq.push(Program::Execute(self.kernel_call(g, op)?)),
            }
        }
        Ok(Program::Sequence(seq))
    }

    fn emit_call_op(&self, op: &Op, sites: &[usize], seq: &mut Vec<Program>) -> Result<(), LowerError> {
        let site = &self.l.sites[sites[0]];
        let plan = &self.plans[sites[0]];
        match site.kind {
            SiteKind::Call => {
                self.copies(&plan.copy_in, seq);
                seq.push(Program::Call(self.function_ids[&site.callee]));
                self.copies(&plan.copy_out, seq);
                self.copies(&plan.copy_back, seq);
            }
            SiteKind::Repeat => {
                let count = op
                    .attrs
                    .int("count")
                    .filter(|&c| c >= 1)
                    .ok_or_else(|| LowerError::Internal(format!("repeat op `{}` has no count >= 1", op.name)))?
                    as u64;
                self.copies(&plan.copy_in, seq);
                let mut body = vec![Program::Call(self.function_ids[&site.callee])];
                self.copies(&plan.loop_copies, &mut body);
                seq.push(Program::Repeat { count, body: Box::new(Program::Sequence(body)) });
                self.copies(&plan.copy_out, seq);
            }
            SiteKind::IfThen | SiteKind::IfElse => {
                let cond_t =
                    op.input(0).ok_or_else(|| LowerError::Internal(format!("if op `{}` has no condition", op.name)))?;
                let cond = self.buf(site.caller, cond_t)?;
                let mut branches = Vec::new();
                for &s in sites {
                    let (site, plan) = (&self.l.sites[s], &self.plans[s]);
                    let mut b = Vec::new();
                    self.copies(&plan.copy_in, &mut b);
                    b.push(Program::Call(self.function_ids[&site.callee]));
                    self.copies(&plan.copy_out, &mut b);
                    branches.push(Program::Sequence(b));
                }
                let else_branch = branches.pop().unwrap_or_else(Program::empty);
                let then_branch = branches.pop().unwrap_or_else(Program::empty);
                seq.push(Program::If { cond, then_branch: Box::new(then_branch), else_branch: Box::new(else_branch) });
            }
        }
        Ok(())
    }

    fn kernel_call(&self, g: GraphId, op: &Op) -> Result<KernelCall, LowerError> {
        let graph = self.l.ir.graph(g)?;
        let arg = |(index, t): (u32, TensorId)| -> Result<Arg, LowerError> {
            Ok(Arg { index, buffer: self.buf(g, t)?, info: graph.tensor(t)?.info.clone() })
        };
        let inputs: Vec<Arg> = op.inputs().iter().map(arg).collect::<Result<_, _>>()?;
        let outputs: Vec<Arg> = op.outputs().iter().map(arg).collect::<Result<_, _>>()?;
        // Check the kernel contract: outputs share memory only with declared aliases.
        let aliases = op.def().aliases(&op.attrs);
        for (n, o) in outputs.iter().enumerate() {
            let declared = |b: BufferId| {
                aliases.iter().any(|&(i, j)| j == o.index && inputs.iter().any(|a| a.index == i && a.buffer == b))
            };
            let clash_out = outputs[..n].iter().any(|p| p.buffer == o.buffer);
            let clash_in = inputs.iter().any(|a| a.buffer == o.buffer && !declared(a.buffer));
            if clash_out || clash_in {
                return Err(LowerError::Internal(format!(
                    "op `{}` of graph `{}`: output {} shares buffer b{} with another argument",
                    op.name,
                    graph.name(),
                    o.index,
                    o.buffer.0
                )));
            }
        }
        Ok(KernelCall {
            op_type: op.op_type().to_string(),
            name: format!("{}/{}", graph.name(), op.name),
            attrs: op.attrs.clone(),
            inputs,
            outputs,
        })
    }
}
