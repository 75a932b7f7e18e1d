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
//!      to the graph (no copy out);
//!    - *views*: a view op (flag `OpFlags::VIEW`: its output has the bytes of input 0 in
//!      the same order) lowers to no kernel at all, its output sharing input 0's
//!      buffer, when no op writes either class in place (in-place updates, calls
//!      marking an input modified). Members of such a class are only ever written
//!      when they are defined, with equal values, so the sharing cannot be observed.
//!      Otherwise the view stays a kernel (a copy).
//! 4. **Timeline**: one global step numbering in which every call is expanded in
//!    place (copy-in step, callee body, copy-out step; a repeat adds a loop-copy
//!    step; an if lays out both branches). Each graph therefore has one or more
//!    *instances* (start steps), and a tensor of a graph is live over its local
//!    interval at each instance. Callee inputs are live from the copy-in step,
//!    outputs until the copy-out step; repeat bodies keep inputs live for the
//!    whole body (the loop-carried copies write them at its end, and the results
//!    are copied out of them after the last iteration). A caller tensor passed to
//!    an elided input lives until its last use inside the callee.
//! 5. **Memory plan**: variables and constants first (always live), then every
//!    activation buffer at an aligned offset not used by a buffer live at the same
//!    time (see [`crate::memory`]).
//! 6. **Programs**: functions (one per subgraph), the main program, init (constants)
//!    and the weight programs.
//!
//! Every step is linear in the size of the IR up to hashing and sorting (graphs and
//! tensors are indexed densely; no per-tensor scans of graph inputs or outputs).

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use popart_ir::ops::control::{Call, If, Repeat};
use popart_ir::ops::io::{HostLoad, HostStore};
use popart_ir::{Graph, GraphId, Ir, Op, OpFlags, OpId, StreamDirection, Tensor, TensorId, TensorInfo, TensorKind};
use slotmap::SecondaryMap;

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
/// assert_eq!(exe.memory.host_load_bytes, 64); // x is where the host data lands
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

/// One place where a graph is called. Graphs are referred to by their index in
/// [`Lowerer::graphs`].
#[derive(Clone, Debug)]
struct Site {
    caller: usize,
    op: OpId,
    callee: usize,
    kind: SiteKind,
    /// Caller tensor bound to callee input k.
    args: Vec<TensorId>,
    /// Caller tensor receiving callee output j.
    outs: Vec<TensorId>,
    /// Callee input positions the call site marks as modified (copied back), sorted.
    modified: Vec<usize>,
    /// Op input indices passed to the callee, sorted (read at the site's copy-in).
    reads: Vec<u32>,
}

impl Site {
    fn marks(&self, k: usize) -> bool {
        self.modified.binary_search(&k).is_ok()
    }
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

    /// The class representative (union by size keeps chains logarithmic; after
    /// [`Classes::flatten`] it is one step).
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

    /// Point every key straight at its representative.
    fn flatten(&mut self) {
        for x in 0..self.parent.len() as u32 {
            self.parent[x as usize] = self.find(x);
        }
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
    graph: usize,
    step: i64,
}

/// What the lowering knows about one reachable graph.
struct GraphData<'a> {
    id: GraphId,
    graph: &'a Graph,
    /// The schedule.
    sched: Vec<OpId>,
    /// Local start step of every op.
    start: SecondaryMap<OpId, i64>,
    /// Call sites of each op that calls graphs (a range of [`Lowerer::sites`]).
    op_sites: SecondaryMap<OpId, Range<usize>>,
    /// Dense key of every tensor that has a buffer (all but streams).
    keys: SecondaryMap<TensorId, u32>,
    /// Sites calling this graph.
    callers: Vec<usize>,
    /// Steps of one instance.
    len: i64,
    /// Called by a repeat.
    repeat_body: bool,
    /// View ops lowered to buffer sharing (no kernel).
    shared_views: SecondaryMap<OpId, ()>,
    /// Global start step of each instance.
    instances: Vec<i64>,
}

impl<'a> GraphData<'a> {
    fn new(graph: &'a Graph) -> Self {
        GraphData {
            id: graph.id(),
            graph,
            sched: Vec::new(),
            start: SecondaryMap::new(),
            op_sites: SecondaryMap::new(),
            keys: SecondaryMap::new(),
            callers: Vec::new(),
            len: 0,
            repeat_body: false,
            shared_views: SecondaryMap::new(),
            instances: Vec::new(),
        }
    }
}

struct Lowerer<'a> {
    ir: &'a Ir,
    /// Reachable graphs, main first, then in discovery order.
    graphs: Vec<GraphData<'a>>,
    /// Indices of the reachable graphs, every caller before its callees.
    callers_first: Vec<usize>,
    /// (graph index, tensor) of every key.
    tensors: Vec<(usize, TensorId)>,
    classes: Classes,
    sites: Vec<Site>,
    temps: Vec<Temp>,
}

/// Index of the main graph in [`Lowerer::graphs`].
const MAIN: usize = 0;

impl<'a> Lowerer<'a> {
    fn new(ir: &'a Ir) -> Result<Self, LowerError> {
        let main = ir.main_graph_id();
        let callees_first = ir.graphs_callees_first()?;
        if let Some(&t) = ir.main_graph().inputs().first() {
            return Err(LowerError::MainGraphInput(ir.main_graph().tensor(t)?.name.clone()));
        }
        let mut graphs = vec![GraphData::new(ir.graph(main)?)];
        let mut index: HashMap<GraphId, usize> = HashMap::from([(main, MAIN)]);
        let mut sites: Vec<Site> = Vec::new();
        // Reachable graphs and call sites, breadth first from main.
        let mut i = 0;
        while i < graphs.len() {
            let graph = graphs[i].graph;
            let schedule = graph.schedule()?;
            for &o in &schedule {
                let op = graph.op(o)?;
                let first = sites.len();
                for (callee_id, mut site) in sites_of(ir, i, op)? {
                    let callee = match index.get(&callee_id) {
                        Some(&c) => c,
                        None => {
                            graphs.push(GraphData::new(ir.graph(callee_id)?));
                            index.insert(callee_id, graphs.len() - 1);
                            graphs.len() - 1
                        }
                    };
                    site.callee = callee;
                    if site.kind == SiteKind::Repeat {
                        graphs[callee].repeat_body = true;
                    }
                    graphs[callee].callers.push(sites.len());
                    sites.push(site);
                }
                if sites.len() > first {
                    graphs[i].op_sites.insert(o, first..sites.len());
                }
            }
            graphs[i].sched = schedule;
            i += 1;
        }
        let callers_first = callees_first.iter().rev().filter_map(|g| index.get(g).copied()).collect();
        let mut tensors = Vec::new();
        for (gi, gd) in graphs.iter_mut().enumerate() {
            for t in gd.graph.tensors() {
                if !matches!(t.kind, TensorKind::Stream(_)) {
                    gd.keys.insert(t.id, tensors.len() as u32);
                    tensors.push((gi, t.id));
                }
            }
        }
        Ok(Lowerer {
            ir,
            graphs,
            callers_first,
            classes: Classes::new(tensors.len()),
            tensors,
            sites,
            temps: Vec::new(),
        })
    }

    fn key(&self, g: usize, t: TensorId) -> Result<u32, LowerError> {
        self.graphs[g].keys.get(t).copied().ok_or_else(|| {
            let name = self.graphs[g].graph.tensor(t).map_or_else(|_| format!("{t:?}"), |x| x.name.clone());
            LowerError::Internal(format!("tensor `{name}` has no buffer (a stream used as an op argument?)"))
        })
    }

    fn class(&self, g: usize, t: TensorId) -> Result<u32, LowerError> {
        Ok(self.classes.find(self.key(g, t)?))
    }

    fn tensor(&self, key: u32) -> &'a Tensor {
        let (g, t) = self.tensors[key as usize];
        self.graphs[g].graph.tensor(t).expect("keyed tensors exist")
    }

    fn kind_of(&self, key: u32) -> &'a TensorKind {
        &self.tensor(key).kind
    }

    fn info(&self, g: usize, t: TensorId) -> Result<TensorInfo, LowerError> {
        Ok(self.graphs[g].graph.tensor(t)?.info.clone())
    }

    fn run(mut self) -> Result<Executable, LowerError> {
        self.compute_timeline();
        self.merge_aliases()?;
        let modifies_input = self.inputs_modified_by_graphs()?;
        self.elide_inputs(&modifies_input)?;
        self.elide_outputs()?;
        self.share_views()?;
        self.classes.flatten();
        let plans = self.plan_copies()?;
        let locals = self.local_intervals()?;
        self.compute_instances();
        self.finish(plans, locals)
    }

    // ----- timeline lengths -----

    fn compute_timeline(&mut self) {
        for g in self.callers_first.clone().into_iter().rev() {
            let mut t = 0i64;
            let mut start = SecondaryMap::new();
            for &o in &self.graphs[g].sched {
                start.insert(o, t);
                t += self.op_len(g, o);
            }
            self.graphs[g].start = start;
            self.graphs[g].len = t;
        }
    }

    fn site_len(&self, idx: usize) -> i64 {
        self.graphs[self.sites[idx].callee].len
    }

    fn op_sites(&self, g: usize, o: OpId) -> Range<usize> {
        self.graphs[g].op_sites.get(o).cloned().unwrap_or(0..0)
    }

    fn first_site_kind(&self, g: usize, o: OpId) -> Option<(usize, SiteKind)> {
        let r = self.op_sites(g, o);
        (!r.is_empty()).then(|| (r.start, self.sites[r.start].kind))
    }

    fn op_len(&self, g: usize, o: OpId) -> i64 {
        match self.first_site_kind(g, o) {
            None => 1,
            Some((s, SiteKind::Call)) => 2 + self.site_len(s),
            Some((s, SiteKind::Repeat)) => 3 + self.site_len(s),
            Some((_, SiteKind::IfThen | SiteKind::IfElse)) => {
                4 + self.op_sites(g, o).map(|s| self.site_len(s)).sum::<i64>()
            }
        }
    }

    /// (then length, else length) of an if op.
    fn if_lens(&self, g: usize, o: OpId) -> (i64, i64) {
        let mut lt = 0;
        let mut le = 0;
        for s in self.op_sites(g, o) {
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
    fn def_time(&self, g: usize, o: OpId, s: i64) -> i64 {
        match self.first_site_kind(g, o) {
            None => s,
            Some((x, SiteKind::Call)) => s + 1 + self.site_len(x),
            Some((x, SiteKind::Repeat)) => s + 2 + self.site_len(x),
            Some((_, SiteKind::IfThen | SiteKind::IfElse)) => s + 1 + self.if_lens(g, o).0,
        }
    }

    /// Last local step at which op `o` (starting at `s`) writes its outputs: an if
    /// writes them in each branch, the else branch's copy-out coming last.
    fn last_write_time(&self, g: usize, o: OpId, s: i64) -> i64 {
        match self.first_site_kind(g, o) {
            Some((_, SiteKind::IfThen | SiteKind::IfElse)) => {
                let (lt, le) = self.if_lens(g, o);
                s + 3 + lt + le
            }
            _ => self.def_time(g, o, s),
        }
    }

    /// Last local step at which op `op` (starting at `s`) reads its input `idx`.
    fn use_time(&self, g: usize, op: &Op, idx: u32, s: i64) -> i64 {
        let mut last = s;
        for x in self.op_sites(g, op.id) {
            let site = &self.sites[x];
            match site.kind {
                SiteKind::Call => {
                    if site.marks(idx as usize) {
                        last = last.max(s + 1 + self.site_len(x));
                    }
                }
                SiteKind::Repeat | SiteKind::IfThen => {}
                SiteKind::IfElse => {
                    if site.reads.binary_search(&idx).is_ok() {
                        last = last.max(s + 2 + self.if_lens(g, op.id).0);
                    }
                }
            }
        }
        last
    }

    // ----- buffer classes -----

    fn merge_aliases(&mut self) -> Result<(), LowerError> {
        for g in 0..self.graphs.len() {
            let graph = self.graphs[g].graph;
            for n in 0..self.graphs[g].sched.len() {
                let op = graph.op(self.graphs[g].sched[n])?;
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

    /// Classes (representatives) some op of some graph writes in place: in-place
    /// updates and calls marking an input modified.
    fn written_classes(&self) -> Result<HashSet<u32>, LowerError> {
        let mut written = HashSet::new();
        for (g, gd) in self.graphs.iter().enumerate() {
            for &o in &gd.sched {
                let op = gd.graph.op(o)?;
                for i in op.modified_inputs() {
                    if let Some(t) = op.input(i) {
                        written.insert(self.class(g, t)?);
                    }
                }
            }
        }
        Ok(written)
    }

    /// For every graph, which of its inputs it writes (itself or through its alias
    /// classes, including calls that mark them modified).
    fn inputs_modified_by_graphs(&self) -> Result<Vec<Vec<bool>>, LowerError> {
        let written = self.written_classes()?;
        let mut out = Vec::with_capacity(self.graphs.len());
        for (g, gd) in self.graphs.iter().enumerate() {
            let v = gd
                .graph
                .inputs()
                .iter()
                .map(|&t| self.class(g, t).map(|c| written.contains(&c)))
                .collect::<Result<_, _>>()?;
            out.push(v);
        }
        Ok(out)
    }

    fn elide_inputs(&mut self, modifies_input: &[Vec<bool>]) -> Result<(), LowerError> {
        for f in self.callers_first.clone() {
            if f == MAIN {
                continue;
            }
            let callers = self.graphs[f].callers.clone();
            if callers.is_empty() || callers.iter().any(|&s| self.sites[s].kind == SiteKind::Repeat) {
                continue;
            }
            let writes = &modifies_input[f];
            let touched = |site: &Site, k: usize| writes[k] || site.marks(k);
            // Caller classes of every argument, taken before this graph's merges: those
            // join one callee input with one caller class each, never two caller classes.
            let mut arg_classes: Vec<Vec<u32>> = Vec::with_capacity(callers.len());
            // Per site: class -> (arguments in it, how many of them are written).
            let mut groups: Vec<HashMap<u32, (u32, u32)>> = Vec::with_capacity(callers.len());
            for &s in &callers {
                let site = &self.sites[s];
                let classes: Vec<u32> =
                    site.args.iter().map(|&a| self.class(site.caller, a)).collect::<Result<_, _>>()?;
                let mut group: HashMap<u32, (u32, u32)> = HashMap::new();
                for (k, &c) in classes.iter().enumerate() {
                    let e = group.entry(c).or_default();
                    e.0 += 1;
                    e.1 += u32::from(touched(site, k));
                }
                arg_classes.push(classes);
                groups.push(group);
            }
            let inputs = self.graphs[f].graph.inputs();
            for (k, &input) in inputs.iter().enumerate() {
                let marked_everywhere =
                    callers.iter().all(|&s| self.sites[s].kind == SiteKind::Call && self.sites[s].marks(k));
                if writes[k] && !marked_everywhere {
                    continue;
                }
                let c = arg_classes[0][k];
                if arg_classes.iter().any(|a| a[k] != c) {
                    continue;
                }
                // The same buffer at two inputs: sharing is only safe if neither is written.
                let clash = callers.iter().zip(&groups).any(|(&s, group)| {
                    let (count, written) = group[&c];
                    let me = u32::from(touched(&self.sites[s], k));
                    count > 1 && (me == 1 || written > me)
                });
                if !clash {
                    let ki = self.key(f, input)?;
                    self.classes.union(c, ki);
                }
            }
        }
        Ok(())
    }

    fn elide_outputs(&mut self) -> Result<(), LowerError> {
        for f in self.callers_first.clone() {
            let [s] = self.graphs[f].callers[..] else { continue };
            if self.sites[s].kind != SiteKind::Call {
                continue;
            }
            let graph = self.graphs[f].graph;
            let outputs = graph.outputs();
            let is_input: HashSet<TensorId> = graph.inputs().iter().copied().collect();
            // Output classes, taken before the merges below: each joins one private
            // class with one caller class, so no two output classes become one.
            let out_classes: Vec<u32> = outputs.iter().map(|&o| self.class(f, o)).collect::<Result<_, _>>()?;
            let mut tensor_count: HashMap<TensorId, u32> = HashMap::new();
            let mut class_count: HashMap<u32, u32> = HashMap::new();
            for (&o, &c) in outputs.iter().zip(&out_classes) {
                *tensor_count.entry(o).or_default() += 1;
                *class_count.entry(c).or_default() += 1;
            }
            for (j, &o) in outputs.iter().enumerate() {
                if graph.tensor(o)?.producer().is_none() || tensor_count[&o] != 1 {
                    continue;
                }
                let c = self.classes.find(out_classes[j]);
                let private = class_count[&out_classes[j]] == 1
                    && self.classes.members[c as usize].iter().all(|&m| {
                        let (mg, mt) = self.tensors[m as usize];
                        mg == f && !is_input.contains(&mt) && matches!(self.kind_of(m), TensorKind::ActGrad)
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

    /// Lower view ops to buffer sharing where no op writes either class in place.
    fn share_views(&mut self) -> Result<(), LowerError> {
        let written = self.written_classes()?;
        for g in 0..self.graphs.len() {
            let graph = self.graphs[g].graph;
            let mut shared = SecondaryMap::new();
            for &o in &self.graphs[g].sched {
                let op = graph.op(o)?;
                if !op.flags().contains(OpFlags::VIEW) {
                    continue;
                }
                let (Some(x), Some(y)) = (op.input(0), op.output(0)) else { continue };
                let (ix, iy) = (&graph.tensor(x)?.info, &graph.tensor(y)?.info);
                if ix.dtype != iy.dtype || ix.nbytes() != iy.nbytes() {
                    continue;
                }
                let (cx, cy) = (self.class(g, x)?, self.class(g, y)?);
                // Neither class is written, and merging two unwritten classes gives
                // an unwritten class: `written` stays exact for later views.
                if !written.contains(&cx) && !written.contains(&cy) {
                    self.classes.union(cx, cy);
                    shared.insert(o, ());
                }
            }
            self.graphs[g].shared_views = shared;
        }
        Ok(())
    }

    // ----- copies -----

    fn copy(&self, src: (usize, TensorId), dst: (usize, TensorId)) -> Result<Option<PlannedCopy>, LowerError> {
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
            let site = &self.sites[s];
            let (caller, callee, kind) = (site.caller, site.callee, site.kind);
            let callee_graph = self.graphs[callee].graph;
            let (cin, cout) = (callee_graph.inputs(), callee_graph.outputs());
            let mut plan = SitePlan::default();
            for (k, &a) in site.args.iter().enumerate() {
                plan.copy_in.extend(self.copy((caller, a), (callee, cin[k]))?);
            }
            for (j, &y) in site.outs.iter().enumerate() {
                // After a repeat's last loop-carried copy, input j holds the last
                // iteration's output j (the outputs themselves may be inputs that
                // the loop copies have overwritten).
                let src = if kind == SiteKind::Repeat { cin[j] } else { cout[j] };
                plan.copy_out.extend(self.copy((callee, src), (caller, y))?);
            }
            for &k in &site.modified {
                plan.copy_back.extend(self.copy((callee, cin[k]), (caller, site.args[k]))?);
            }
            if kind == SiteKind::Repeat {
                let mut loops = Vec::new();
                for (k, &o) in cout.iter().enumerate() {
                    loops.extend(self.copy((callee, o), (callee, cin[k]))?);
                }
                // Loop-carried copies happen "in parallel": if one reads what another
                // writes, stage every value through a temporary first.
                let dsts: HashSet<Loc> = loops.iter().map(|c| c.dst).collect();
                if loops.iter().any(|c| dsts.contains(&c.src)) {
                    let step = self.graphs[caller].start[site.op] + 1 + self.site_len(s);
                    let mut staged = Vec::new();
                    let mut back = Vec::new();
                    for (k, c) in loops.iter().enumerate() {
                        let t = self.temps.len();
                        self.temps.push(Temp { info: self.info(callee, cout[k])?, graph: caller, step });
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

    /// Local live interval of every key with a definition or use.
    fn local_intervals(&self) -> Result<Vec<Option<(i64, i64)>>, LowerError> {
        let mut locals: Vec<Option<(i64, i64)>> = vec![None; self.tensors.len()];
        for (g, gd) in self.graphs.iter().enumerate() {
            let graph = gd.graph;
            let l = gd.len;
            let mut marked = vec![false; graph.inputs().len()];
            for &s in &gd.callers {
                for &k in &self.sites[s].modified {
                    if let Some(m) = marked.get_mut(k) {
                        *m = true;
                    }
                }
            }
            for (k, &t) in graph.inputs().iter().enumerate() {
                // Repeat bodies: inputs are rewritten by the loop copies (step l) and
                // read by the copy-out (step l + 1). Modified inputs: copied back at l.
                let end = if gd.repeat_body {
                    l + 1
                } else if marked[k] {
                    l
                } else {
                    -1
                };
                if let Some(&key) = gd.keys.get(t) {
                    locals[key as usize] = Some((-1, end));
                }
            }
            for &o in &gd.sched {
                let op = graph.op(o)?;
                let s = gd.start[o];
                let shared_view = gd.shared_views.contains_key(o);
                for (idx, t) in op.inputs().iter() {
                    if shared_view && idx > 0 {
                        continue; // no kernel reads it
                    }
                    let u = self.use_time(g, op, idx, s);
                    if let Some(&key) = gd.keys.get(t) {
                        let e = locals[key as usize].get_or_insert((u, u));
                        e.1 = e.1.max(u);
                    }
                }
                let d = self.def_time(g, o, s);
                let last_write = self.last_write_time(g, o, s);
                for t in op.outputs().tensors() {
                    if let Some(&key) = gd.keys.get(t) {
                        let e = locals[key as usize].get_or_insert((d, last_write));
                        e.0 = d;
                        e.1 = e.1.max(last_write);
                    }
                }
            }
            for &t in graph.outputs() {
                if let Some(&key) = gd.keys.get(t) {
                    let e = locals[key as usize].get_or_insert((l, l));
                    e.1 = e.1.max(l);
                }
            }
        }
        Ok(locals)
    }

    /// Global start steps of every instance of every graph.
    fn compute_instances(&mut self) {
        self.graphs[MAIN].instances = vec![0];
        for g in self.callers_first.clone() {
            let mut calls = Vec::new();
            for &o in &self.graphs[g].sched {
                for s in self.op_sites(g, o) {
                    calls.push((self.sites[s].callee, self.graphs[g].start[o] + self.callee_offset(s)));
                }
            }
            let mine = self.graphs[g].instances.clone();
            for (callee, off) in calls {
                self.graphs[callee].instances.extend(mine.iter().map(|b| b + off));
            }
        }
    }

    // ----- buffers, memory plan and programs -----

    fn finish(self, plans: Vec<SitePlan>, locals: Vec<Option<(i64, i64)>>) -> Result<Executable, LowerError> {
        let ir = self.ir;
        let n = self.tensors.len();
        let rep = |k: u32| self.classes.find(k) as usize;
        let mut permanent = vec![false; n];
        for k in 0..n as u32 {
            if matches!(self.kind_of(k), TensorKind::Variable(_) | TensorKind::Constant(_)) {
                permanent[rep(k)] = true;
            }
        }
        // Live intervals of every activation class.
        let mut live = vec![false; n];
        let mut class_lives: Vec<Intervals> = vec![Vec::new(); n];
        for (k, local) in locals.iter().enumerate() {
            let Some((a, e)) = *local else { continue };
            let r = rep(k as u32);
            if permanent[r] {
                continue;
            }
            live[r] = true;
            for &b in &self.graphs[self.tensors[k].0].instances {
                class_lives[r].push(((b + a).max(0) as u64, (b + e).max(0) as u64));
            }
        }

        // Number buffers in program order.
        const NONE: u32 = u32::MAX;
        let mut class_buffer: Vec<u32> = vec![NONE; n];
        let mut buffer_classes: Vec<usize> = Vec::new();
        let mut visit = |g: usize, t: TensorId| {
            let Some(&k) = self.graphs[g].keys.get(t) else { return };
            let r = rep(k);
            if class_buffer[r] == NONE && (permanent[r] || live[r]) {
                class_buffer[r] = buffer_classes.len() as u32;
                buffer_classes.push(r);
            }
        };
        for (g, gd) in self.graphs.iter().enumerate() {
            gd.graph.inputs().iter().for_each(|&t| visit(g, t));
            for &o in &gd.sched {
                let op = gd.graph.op(o)?;
                op.inputs().tensors().for_each(|t| visit(g, t));
                op.outputs().tensors().for_each(|t| visit(g, t));
            }
            gd.graph.outputs().iter().for_each(|&t| visit(g, t));
        }
        for (g, gd) in self.graphs.iter().enumerate() {
            for t in gd.graph.tensors() {
                visit(g, t.id);
            }
        }

        let tensor_ref = |k: u32| -> TensorRef {
            let (g, t) = self.tensors[k as usize];
            let gd = &self.graphs[g];
            TensorRef { graph: gd.id, tensor: t, name: format!("{}/{}", gd.graph.name(), self.tensor(k).name) }
        };
        let mut buffers: Vec<Buffer> = Vec::with_capacity(buffer_classes.len() + self.temps.len());
        let mut tensor_buffers = HashMap::with_capacity(n);
        for (i, &r) in buffer_classes.iter().enumerate() {
            let mut members = self.classes.members[r].clone();
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
                let r = tensor_ref(m);
                tensor_buffers.insert((r.graph, r.tensor), BufferId(i as u32));
                refs.push(r);
            }
            // The class representative's own name first when it is a variable/constant.
            let first = members.iter().position(|&m| !matches!(self.kind_of(m), TensorKind::ActGrad)).unwrap_or(0);
            refs.swap(0, first);
            buffers.push(Buffer {
                id: BufferId(i as u32),
                info: self.tensor(members[first]).info.clone(),
                kind,
                offset: 0,
                size: align_up(bytes, BUFFER_ALIGNMENT),
                tensors: refs,
            });
        }
        let mut temp_buffer = Vec::with_capacity(self.temps.len());
        let mut lives: Vec<Intervals> = Vec::with_capacity(buffers.len() + self.temps.len());
        for &r in &buffer_classes {
            lives.push(normalize(std::mem::take(&mut class_lives[r])));
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
            let steps = self.graphs[t.graph].instances.iter().map(|&b| ((b + t.step) as u64, (b + t.step) as u64));
            lives.push(normalize(steps.collect()));
        }

        // Memory plan: permanent buffers first, then activations with reuse.
        let mut permanent_bytes = 0;
        for b in buffers.iter_mut().filter(|b| b.kind != BufferKind::Activation) {
            b.offset = permanent_bytes;
            permanent_bytes += b.size;
        }
        let sizes: Vec<usize> =
            buffers.iter().map(|b| if b.kind == BufferKind::Activation { b.size } else { 0 }).collect();
        let (offsets, end) = assign_offsets(&sizes, &lives, permanent_bytes);
        for (b, off) in buffers.iter_mut().zip(offsets) {
            if b.kind == BufferKind::Activation {
                b.offset = off;
            }
        }

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
                    graph: main.id(),
                });
            }
        }
        let data_streams: HashMap<(StreamDirection, &str), StreamId> =
            streams.iter().map(|s| ((s.direction, s.name.as_str()), s.id)).collect();
        let mut weights = Vec::new();
        let mut constants = Vec::new();
        let mut weight_streams = Vec::new();
        for b in &buffers {
            for r in &b.tensors {
                let tensor = ir.graph(r.graph)?.tensor(r.tensor)?;
                match &tensor.kind {
                    TensorKind::Variable(_) => {
                        let mut stream = |direction| {
                            let id = StreamId((streams.len() + weight_streams.len()) as u32);
                            weight_streams.push(Stream {
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
                        weights.push(Weight { tensor: r.clone(), buffer: b.id, from_host, to_host });
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
            data_streams: &data_streams,
        };
        let mut functions = Vec::new();
        for (g, gd) in self.graphs.iter().enumerate().skip(1) {
            let inputs = gd.graph.inputs().iter().map(|&t| emitter.buf(g, t)).collect::<Result<_, _>>()?;
            let outputs = gd.graph.outputs().iter().map(|&t| emitter.buf(g, t)).collect::<Result<_, _>>()?;
            functions.push(Function {
                id: function_id(g),
                name: gd.graph.name().to_string(),
                graph: gd.id,
                inputs,
                outputs,
                body: emitter.graph_body(g)?,
            });
        }
        let main_program = emitter.graph_body(MAIN)?;
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
        streams.extend(weight_streams);

        // Landing buffers of host loads (the analogue of a compiled function's arguments).
        let mut landing: HashSet<BufferId> = HashSet::new();
        let mut note = |p: &Program| {
            if let Program::HostToDevice { dst, .. } = p {
                landing.insert(*dst);
            }
        };
        programs.main.visit(&mut note);
        functions.iter().for_each(|f| f.body.visit(&mut note));
        let memory = MemoryPlan {
            alignment: BUFFER_ALIGNMENT,
            permanent_bytes,
            arena_bytes: end.max(permanent_bytes),
            no_reuse_bytes: buffers.iter().map(|b| b.size).sum(),
            host_load_bytes: landing.iter().map(|b| buffers[b.index()].size).sum(),
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

/// Function id of reachable graph `g` (not main).
fn function_id(g: usize) -> FunctionId {
    FunctionId(g as u32 - 1)
}

/// Op input index passed as branch input `k` of an if op (`then_inputs`/`else_inputs`).
fn if_arg_index(op: &Op, key: &str, k: usize) -> Option<u32> {
    op.attrs.ints(key).and_then(|v| v.get(k)).map(|&i| i as u32)
}

/// The call sites of one op of graph `caller` (none for ops that call no graph),
/// each with its callee's id (`Site::callee` is filled in by the caller).
fn sites_of(ir: &Ir, caller: usize, op: &Op) -> Result<Vec<(GraphId, Site)>, LowerError> {
    let missing = |what: &str| LowerError::Internal(format!("op `{}` has no {what}", op.name));
    let outs = |callee: GraphId| -> Result<Vec<TensorId>, LowerError> {
        let n = ir.graph(callee)?.outputs().len();
        (0..n as u32).map(|j| op.output(j).ok_or_else(|| missing(&format!("output {j}")))).collect()
    };
    let sorted = |mut v: Vec<u32>| {
        v.sort_unstable();
        v.dedup();
        v
    };
    let call_like = |kind: SiteKind| -> Result<(GraphId, Site), LowerError> {
        let callee = op.attrs.graph("graph").ok_or_else(|| missing("`graph` attribute"))?;
        let n = ir.graph(callee)?.inputs().len();
        let args = (0..n as u32)
            .map(|k| op.input(k).ok_or_else(|| missing(&format!("input {k}"))))
            .collect::<Result<_, _>>()?;
        let modified = if kind == SiteKind::Call {
            sorted(op.modified_inputs()).into_iter().map(|i| i as usize).collect()
        } else {
            Vec::new()
        };
        let site = Site { caller, op: op.id, callee: 0, kind, args, outs: outs(callee)?, modified, reads: Vec::new() };
        Ok((callee, site))
    };
    if op.is::<Call>() {
        Ok(vec![call_like(SiteKind::Call)?])
    } else if op.is::<Repeat>() {
        Ok(vec![call_like(SiteKind::Repeat)?])
    } else if op.is::<If>() {
        let mut v = Vec::new();
        for (kind, gkey, ikey) in
            [(SiteKind::IfThen, "then_graph", "then_inputs"), (SiteKind::IfElse, "else_graph", "else_inputs")]
        {
            let callee = op.attrs.graph(gkey).ok_or_else(|| missing(gkey))?;
            let n = ir.graph(callee)?.inputs().len();
            let indices = (0..n)
                .map(|k| {
                    if_arg_index(op, ikey, k)
                        .filter(|&i| op.input(i).is_some())
                        .ok_or_else(|| missing(&format!("{ikey}[{k}]")))
                })
                .collect::<Result<Vec<u32>, _>>()?;
            let args = indices.iter().map(|&i| op.input(i).expect("checked above")).collect();
            let site = Site {
                caller,
                op: op.id,
                callee: 0,
                kind,
                args,
                outs: outs(callee)?,
                modified: Vec::new(),
                reads: sorted(indices),
            };
            v.push((callee, site));
        }
        Ok(v)
    } else {
        Ok(Vec::new())
    }
}

struct Emitter<'l, 'a> {
    l: &'l Lowerer<'a>,
    plans: &'l [SitePlan],
    /// Buffer of each class representative (`u32::MAX`: none).
    class_buffer: &'l [u32],
    temp_buffer: &'l [BufferId],
    data_streams: &'l HashMap<(StreamDirection, &'l str), StreamId>,
}

impl Emitter<'_, '_> {
    fn buf(&self, g: usize, t: TensorId) -> Result<BufferId, LowerError> {
        let c = self.l.class(g, t)?;
        match self.class_buffer[c as usize] {
            u32::MAX => Err(LowerError::Internal(format!(
                "tensor {t:?} of graph `{}` is used but has no buffer",
                self.l.graphs[g].graph.name()
            ))),
            b => Ok(BufferId(b)),
        }
    }

    fn loc(&self, l: Loc) -> BufferId {
        match l {
            Loc::Class(c) => BufferId(self.class_buffer[c as usize]),
            Loc::Temp(t) => self.temp_buffer[t],
        }
    }

    fn copies(&self, v: &[PlannedCopy], out: &mut Vec<Program>) {
        for c in v {
            out.push(Program::Copy { src: self.loc(c.src), dst: self.loc(c.dst), bytes: c.bytes });
        }
    }

    fn stream(&self, g: usize, op: &Op, direction: StreamDirection) -> Result<StreamId, LowerError> {
        let name = op.attrs.str("stream").unwrap_or("");
        self.data_streams.get(&(direction, name)).copied().ok_or_else(|| LowerError::UnknownStream {
            graph: self.l.graphs[g].graph.name().to_string(),
            op: op.name.clone(),
            stream: name.to_string(),
        })
    }

    fn graph_body(&self, g: usize) -> Result<Program, LowerError> {
        let gd = &self.l.graphs[g];
        let mut seq = Vec::new();
        for &o in &gd.sched {
            if gd.shared_views.contains_key(o) {
                continue; // the output shares the input's buffer: nothing to run
            }
            let op = gd.graph.op(o)?;
            let sites = self.l.op_sites(g, o);
            match op.def() {
                def if def.is::<HostLoad>() => {
                    let stream = self.stream(g, op, StreamDirection::HostToDevice)?;
                    let out =
                        op.output(0).ok_or_else(|| LowerError::Internal(format!("`{}` has no output", op.name)))?;
                    seq.push(Program::HostToDevice { stream, dst: self.buf(g, out)? });
                }
                def if def.is::<HostStore>() => {
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

    fn emit_call_op(&self, op: &Op, sites: Range<usize>, seq: &mut Vec<Program>) -> Result<(), LowerError> {
        let site = &self.l.sites[sites.start];
        let plan = &self.plans[sites.start];
        match site.kind {
            SiteKind::Call => {
                self.copies(&plan.copy_in, seq);
                seq.push(Program::Call(function_id(site.callee)));
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
                let mut body = vec![Program::Call(function_id(site.callee))];
                self.copies(&plan.loop_copies, &mut body);
                seq.push(Program::Repeat { count, body: Box::new(Program::Sequence(body)) });
                self.copies(&plan.copy_out, seq);
            }
            SiteKind::IfThen | SiteKind::IfElse => {
                let cond_t =
                    op.input(0).ok_or_else(|| LowerError::Internal(format!("if op `{}` has no condition", op.name)))?;
                let cond = self.buf(site.caller, cond_t)?;
                let mut branches = Vec::new();
                for s in sites {
                    let (site, plan) = (&self.l.sites[s], &self.plans[s]);
                    let mut b = Vec::new();
                    self.copies(&plan.copy_in, &mut b);
                    b.push(Program::Call(function_id(site.callee)));
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

    fn kernel_call(&self, g: usize, op: &Op) -> Result<KernelCall, LowerError> {
        let graph = self.l.graphs[g].graph;
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
            def: op.def(),
            name: format!("{}/{}", graph.name(), op.name),
            attrs: op.attrs.clone(),
            inputs,
            outputs,
        })
    }
}
