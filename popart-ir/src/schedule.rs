//! The scheduler: a deterministic order of a graph's ops that honours data edges
//! and topological constraints, preferring low peak liveness of activations.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use slotmap::SecondaryMap;

use crate::{Graph, Ir, IrError, OpId, Result, TensorKind};

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
    pub fn schedule(&self, graph: crate::GraphId) -> Result<Vec<OpId>> {
        self.graph(graph)?.schedule()
    }
}

impl Graph {
    /// A deterministic topological order of the ops (data edges and topoCons), with
    /// tied constraints kept adjacent where possible, preferring at each step the
    /// ready op that adds the fewest live activation bytes (outputs created minus
    /// inputs freed), then creation order. A cycle is an error naming its ops.
    pub fn schedule(&self) -> Result<Vec<OpId>> {
        self.schedule_with(ScheduleOptions::default())
    }

    /// [`Graph::schedule`] with options.
    pub fn schedule_with(&self, options: ScheduleOptions) -> Result<Vec<OpId>> {
        let n = self.ops.len();
        // Dense numbering in creation order, so ties break deterministically.
        let mut order: Vec<OpId> = self.ops.keys().collect();
        order.sort_unstable_by_key(|&o| self.ops[o].seq);
        let mut dense: SecondaryMap<OpId, u32> = SecondaryMap::with_capacity(n);
        for (i, &o) in order.iter().enumerate() {
            dense.insert(o, i as u32);
        }
        // Successor lists in CSR form; duplicate edges are fine as long as counts match.
        let mut indegree = vec![0u32; n];
        let mut succ_start = vec![0u32; n + 1];
        let mut succ: Vec<u32> = Vec::with_capacity(n * 2);
        for (i, &o) in order.iter().enumerate() {
            let op = &self.ops[o];
            for (_, t) in op.outputs.iter() {
                for c in &self.tensors[t].consumers {
                    succ.push(dense[c.op]);
                }
            }
            for c in self.topo_cons.afters(o) {
                succ.push(dense[c.op]);
            }
            succ_start[i + 1] = succ.len() as u32;
        }
        for &s in &succ {
            indegree[s as usize] += 1;
        }
        // Remaining unscheduled consumers per tensor, for the liveness heuristic.
        let mut remaining: SecondaryMap<crate::TensorId, u32> = SecondaryMap::with_capacity(self.tensors.len());
        let freeable = |t: crate::TensorId| -> bool {
            matches!(self.tensors[t].kind, TensorKind::ActGrad) && !self.outputs.contains(&t)
        };
        if options.optimize_liveness {
            for (id, t) in self.tensors.iter() {
                remaining.insert(id, t.consumers.len() as u32);
            }
        }
        let cost = |i: usize, remaining: &SecondaryMap<crate::TensorId, u32>| -> i64 {
            if !options.optimize_liveness {
                return 0;
            }
            let op = &self.ops[order[i]];
            let created: i64 = op.outputs.tensors().map(|t| self.tensors[t].info.nbytes() as i64).sum();
            let mut freed = 0i64;
            for (idx, t) in op.inputs.iter() {
                // Count each tensor once, at its first index on this op.
                if op.inputs.indices_of(t).next() != Some(idx) || !freeable(t) {
                    continue;
                }
                let uses_here = op.inputs.indices_of(t).count() as u32;
                if remaining[t] == uses_here {
                    freed += self.tensors[t].info.nbytes() as i64;
                }
            }
            created - freed
        };

        let mut heap: BinaryHeap<Reverse<(i64, u32)>> = BinaryHeap::new();
        for i in 0..n {
            if indegree[i] == 0 {
                heap.push(Reverse((cost(i, &remaining), i as u32)));
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
                let fresh = cost(i, &remaining);
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
                    remaining[t] -= 1;
                    // The last remaining consumer may now free this tensor: re-rank it.
                    if remaining[t] > 0 && freeable(t) {
                        for c in &self.tensors[t].consumers {
                            let j = dense[c.op] as usize;
                            if !scheduled[j] && indegree[j] == 0 {
                                heap.push(Reverse((cost(j, &remaining), j as u32)));
                            }
                        }
                    }
                }
            }
            for k in succ_start[i]..succ_start[i + 1] {
                let s = succ[k as usize] as usize;
                indegree[s] -= 1;
                if indegree[s] == 0 {
                    let tied = self.topo_cons.afters(o).iter().any(|c| c.tied && dense[c.op] as usize == s);
                    if tied {
                        next_forced.push(s);
                    } else {
                        heap.push(Reverse((cost(s, &remaining), s as u32)));
                    }
                }
            }
        }
        if out.len() != n {
            return Err(self.find_cycle(&order, &dense, &scheduled));
        }
        Ok(out)
    }

    /// Names the ops of one cycle among the unscheduled ops (each has an unscheduled predecessor).
    fn find_cycle(&self, order: &[OpId], dense: &SecondaryMap<OpId, u32>, scheduled: &[bool]) -> IrError {
        let preds = |o: OpId| -> Vec<OpId> {
            let op = &self.ops[o];
            let mut v: Vec<OpId> = op.inputs.tensors().filter_map(|t| self.tensors[t].producer.map(|p| p.op)).collect();
            v.extend(self.topo_cons.befores(o).iter().map(|c| c.op));
            v
        };
        let start = order.iter().copied().find(|&o| !scheduled[dense[o] as usize]).expect("a cycle exists");
        let mut path = vec![start];
        let mut pos: SecondaryMap<OpId, usize> = SecondaryMap::new();
        pos.insert(start, 0);
        let mut cur = start;
        loop {
            let p = preds(cur)
                .into_iter()
                .find(|&p| !scheduled[dense[p] as usize])
                .expect("an unscheduled op has an unscheduled predecessor");
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
