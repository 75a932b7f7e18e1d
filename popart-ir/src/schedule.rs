//! The scheduler: a deterministic order of a graph's ops that honours data edges
//! and topological constraints, preferring low peak liveness of activations.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use slotmap::SecondaryMap;

use crate::{Graph, GraphId, Ir, IrError, OpId, Result, TensorId, TensorKind};

/// How to schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScheduleOptions {
    /// Prefer orders with low live activation memory (PopART's `RequireOptimalSchedule::Yes`).
    /// When false, ready ops are taken in creation order.
    pub optimize_liveness: bool,
}

impl Default for ScheduleOptions {
    fn default() -> Self {
        ScheduleOptions { optimize_liveness: true }
    }
}

impl Ir {
    /// The schedule of graph `graph`: see [`Graph::schedule`].
    pub fn schedule(&self, graph: GraphId) -> Result<Vec<OpId>> {
        self.graph(graph)?.schedule()
    }
}

/// Bytes of a tensor as the liveness cost counts them (saturating at `i64::MAX`).
fn bytes_of(t: &crate::Tensor) -> i64 {
    i64::try_from(t.info.nbytes()).unwrap_or(i64::MAX)
}

/// The dependency structure of a graph with ops numbered densely in creation order:
/// successor lists (data edges and constraints) in CSR form, and in-degrees.
struct Deps {
    /// Dense index -> op, in creation order.
    order: Vec<OpId>,
    /// Op -> dense index.
    dense: SecondaryMap<OpId, u32>,
    succ_start: Vec<u32>,
    succ: Vec<u32>,
    indegree: Vec<u32>,
}

/// Largest number of remaining uses of a tensor for which the scheduler re-ranks
/// the tensor's ready consumers (a consumer frees a tensor once the remaining uses
/// are all its own, which in practice means one or two).
const RERANK_MAX_REMAINING: u32 = 4;

impl Graph {
    fn deps(&self) -> Deps {
        let n = self.ops.len();
        // Dense numbering in creation order, so ties break deterministically.
        let mut order: Vec<OpId> = self.ops.keys().collect();
        order.sort_unstable_by_key(|&o| self.ops[o].seq);
        let mut dense: SecondaryMap<OpId, u32> = SecondaryMap::with_capacity(n);
        for (i, &o) in order.iter().enumerate() {
            dense.insert(o, i as u32);
        }
        // Duplicate edges are fine: in-degrees count them too.
        let mut indegree = vec![0u32; n];
        let mut succ_start = Vec::with_capacity(n + 1);
        succ_start.push(0u32);
        let mut succ: Vec<u32> = Vec::with_capacity(n * 2);
        for &o in &order {
            let op = &self.ops[o];
            for t in op.outputs.tensors() {
                for c in &self.tensors[t].consumers {
                    let s = dense[c.op];
                    indegree[s as usize] += 1;
                    succ.push(s);
                }
            }
            for c in self.topo_cons.afters(o) {
                let s = dense[c.op];
                indegree[s as usize] += 1;
                succ.push(s);
            }
            succ_start.push(succ.len() as u32);
        }
        Deps { order, dense, succ_start, succ, indegree }
    }

    /// A deterministic topological order of the ops (data edges and topoCons), with
    /// tied constraints kept adjacent where possible, preferring at each step the
    /// ready op that adds the fewest live activation bytes (outputs created minus
    /// inputs freed), then creation order. A cycle is an error naming its ops.
    ///
    /// ```
    /// use popart_ir::{Attributes, DataType, Ir, TensorInfo};
    /// let mut ir = Ir::new();
    /// let main = ir.main_graph_id();
    /// let x = ir.main_graph_mut().add_input("x", TensorInfo::new(DataType::Float32, [2])).unwrap();
    /// let a = ir.create_op(main, "Neg", Attributes::new(), &[(0, x)], "a").unwrap();
    /// let b = ir.create_op(main, "Relu", Attributes::new(), &[(0, x)], "b").unwrap();
    /// ir.main_graph_mut().add_topo_con(b, a).unwrap();
    /// assert_eq!(ir.main_graph().schedule().unwrap(), vec![b, a]);
    /// ```
    pub fn schedule(&self) -> Result<Vec<OpId>> {
        self.schedule_with(ScheduleOptions::default())
    }

    /// [`Graph::schedule`] with options.
    pub fn schedule_with(&self, options: ScheduleOptions) -> Result<Vec<OpId>> {
        let Deps { order, dense, succ_start, succ, mut indegree } = self.deps();
        let n = order.len();

        // Liveness bookkeeping per tensor: remaining unscheduled uses, and the bytes
        // freed when the last use is scheduled (0 for tensors that are never freed:
        // non-activations and graph outputs).
        struct Live {
            remaining: u32,
            bytes: i64,
        }
        let mut live: SecondaryMap<TensorId, Live> = SecondaryMap::new();
        let mut created = Vec::new();
        if options.optimize_liveness {
            live = SecondaryMap::with_capacity(self.tensors.len());
            for (id, t) in self.tensors.iter() {
                let bytes = if matches!(t.kind, TensorKind::ActGrad) { bytes_of(t) } else { 0 };
                live.insert(id, Live { remaining: t.consumers.len() as u32, bytes });
            }
            for &o in &self.outputs {
                if let Some(l) = live.get_mut(o) {
                    l.bytes = 0;
                }
            }
            created = order
                .iter()
                .map(|&o| {
                    // Saturating: each size fits an i64, several may not.
                    self.ops[o].outputs.tensors().fold(0i64, |acc, t| acc.saturating_add(bytes_of(&self.tensors[t])))
                })
                .collect();
        }
        // Bytes op `i` would add to the live set if scheduled now.
        let cost = |i: usize, live: &SecondaryMap<TensorId, Live>| -> i64 {
            if !options.optimize_liveness {
                return 0;
            }
            let ins = &self.ops[order[i]].inputs;
            let mut freed = 0i64;
            if ins.len() > 16 {
                // Many inputs (a call passing every parameter): group equal tensors by
                // sorting rather than comparing all pairs.
                let mut ts: Vec<TensorId> = ins.tensors().collect();
                ts.sort_unstable();
                for uses in ts.chunk_by(|a, b| a == b) {
                    let l = &live[uses[0]];
                    if l.bytes != 0 && l.remaining == uses.len() as u32 {
                        freed = freed.saturating_add(l.bytes);
                    }
                }
                return created[i].saturating_sub(freed);
            }
            for (k, (_, t)) in ins.iter().enumerate() {
                let l = &live[t];
                if l.bytes == 0 || ins.iter().take(k).any(|(_, u)| u == t) {
                    continue; // never freed, or counted at its first index on this op
                }
                let uses_here = ins.iter().skip(k).filter(|(_, u)| *u == t).count() as u32;
                if l.remaining == uses_here {
                    freed = freed.saturating_add(l.bytes);
                }
            }
            created[i].saturating_sub(freed)
        };

        let mut heap: BinaryHeap<Reverse<(i64, u32)>> = BinaryHeap::new();
        for (i, &d) in indegree.iter().enumerate() {
            if d == 0 {
                heap.push(Reverse((cost(i, &live), i as u32)));
            }
        }
        let mut scheduled = vec![false; n];
        let mut out = Vec::with_capacity(n);
        let mut next_forced: Vec<usize> = Vec::new();
        loop {
            let i = if let Some(i) = next_forced.pop() {
                i
            } else if let Some(Reverse((c, i))) = heap.pop() {
                let i = i as usize;
                if scheduled[i] {
                    continue;
                }
                // Costs only fall as other consumers get scheduled; refresh stale entries.
                let fresh = cost(i, &live);
                if fresh != c {
                    heap.push(Reverse((fresh, i as u32)));
                    continue;
                }
                i
            } else {
                break;
            };
            scheduled[i] = true;
            let o = order[i];
            out.push(o);
            if options.optimize_liveness {
                for t in self.ops[o].inputs.tensors() {
                    let l = &mut live[t];
                    l.remaining -= 1;
                    // A remaining consumer may now free this tensor: re-rank the ready ones.
                    if l.remaining > 0 && l.remaining <= RERANK_MAX_REMAINING && l.bytes > 0 {
                        for c in &self.tensors[t].consumers {
                            let j = dense[c.op] as usize;
                            if !scheduled[j] && indegree[j] == 0 {
                                heap.push(Reverse((cost(j, &live), j as u32)));
                            }
                        }
                    }
                }
            }
            let afters = self.topo_cons.afters(o);
            for &s in &succ[succ_start[i] as usize..succ_start[i + 1] as usize] {
                let s = s as usize;
                indegree[s] -= 1;
                if indegree[s] == 0 {
                    let tied = afters.iter().any(|c| c.tied && dense[c.op] as usize == s);
                    if tied {
                        next_forced.push(s);
                    } else {
                        heap.push(Reverse((cost(s, &live), s as u32)));
                    }
                }
            }
        }
        if out.len() != n {
            return Err(self.find_cycle(&order, |o| scheduled[dense[o] as usize]));
        }
        Ok(out)
    }

    /// Check that the data edges and constraints form no cycle (a cheaper test than
    /// scheduling: Kahn's algorithm in any order); the error names the ops of one cycle.
    pub(crate) fn check_acyclic(&self) -> Result<()> {
        let mut indegree: SecondaryMap<OpId, u32> = SecondaryMap::with_capacity(self.ops.len());
        let mut ready: Vec<OpId> = Vec::new();
        for (id, op) in self.ops.iter() {
            let d = op.inputs.tensors().filter(|&t| self.tensors[t].producer.is_some()).count()
                + self.topo_cons.befores(id).len();
            indegree.insert(id, d as u32);
            if d == 0 {
                ready.push(id);
            }
        }
        let mut count = 0;
        while let Some(o) = ready.pop() {
            count += 1;
            let mut release = |s: OpId| {
                let d = &mut indegree[s];
                *d -= 1;
                if *d == 0 {
                    ready.push(s);
                }
            };
            for t in self.ops[o].outputs.tensors() {
                for c in &self.tensors[t].consumers {
                    release(c.op);
                }
            }
            for c in self.topo_cons.afters(o) {
                release(c.op);
            }
        }
        if count != self.ops.len() {
            let order = self.ops_in_creation_order();
            return Err(self.find_cycle(&order, |o| indegree[o] == 0));
        }
        Ok(())
    }

    /// Names the ops of one cycle among the ops not `done` (each of which has a
    /// predecessor that is not done either).
    fn find_cycle(&self, order: &[OpId], done: impl Fn(OpId) -> bool) -> IrError {
        let preds = |o: OpId| -> Vec<OpId> {
            let op = &self.ops[o];
            let mut v: Vec<OpId> = op.inputs.tensors().filter_map(|t| self.tensors[t].producer.map(|p| p.op)).collect();
            v.extend(self.topo_cons.befores(o).iter().map(|c| c.op));
            v
        };
        let cycle = |ops: Vec<String>| IrError::Cycle { graph: self.name.clone(), ops };
        // Callers only ask when some op is not done; without one there is nothing to name.
        let Some(start) = order.iter().copied().find(|&o| !done(o)) else { return cycle(Vec::new()) };
        let mut path = vec![start];
        let mut pos: SecondaryMap<OpId, usize> = SecondaryMap::new();
        pos.insert(start, 0);
        let mut cur = start;
        loop {
            // An op left out of a topological order has a predecessor left out.
            let Some(p) = preds(cur).into_iter().find(|&p| !done(p)) else {
                return cycle(path.iter().rev().map(|&o| self.ops[o].name.clone()).collect());
            };
            if let Some(&k) = pos.get(p) {
                // path[k..] walks backwards along edges; reverse it into edge order.
                let mut cyc: Vec<String> = path[k..].iter().map(|&o| self.ops[o].name.clone()).collect();
                cyc.reverse();
                return IrError::Cycle { graph: self.name.clone(), ops: cyc };
            }
            pos.insert(p, path.len());
            path.push(p);
            cur = p;
        }
    }
}
