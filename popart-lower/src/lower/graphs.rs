//! Reachable graphs: discovery from the main graph (with their call sites and
//! schedules) and the dense [`TensorKey`] of every tensor that has a buffer.

use std::collections::HashMap;

use popart_ir::{Graph, GraphId, Ir, OpId, TensorId, TensorKind};
use slotmap::SecondaryMap;

use super::index::{GraphIndex, Idx, IndexVec, SiteId, TensorKey};
use super::sites::{calls_of, Site, SiteRange};
use crate::LowerError;

/// What the lowering knows about one reachable graph.
pub(super) struct GraphData<'a> {
    /// Its id in the IR.
    pub(super) id: GraphId,
    /// The graph.
    pub(super) graph: &'a Graph,
    /// The schedule.
    pub(super) sched: Vec<OpId>,
    /// Local start step of every op.
    pub(super) start: SecondaryMap<OpId, i64>,
    /// Call sites of each op that calls graphs.
    pub(super) op_sites: SecondaryMap<OpId, SiteRange>,
    /// Dense key of every tensor that has a buffer (all but streams).
    pub(super) keys: SecondaryMap<TensorId, TensorKey>,
    /// Sites calling this graph.
    pub(super) callers: Vec<SiteId>,
    /// Steps of one instance.
    pub(super) len: i64,
    /// Called by a repeat.
    pub(super) repeat_body: bool,
    /// View ops lowered to buffer sharing (no kernel).
    pub(super) shared_views: SecondaryMap<OpId, ()>,
    /// Global start step of each instance.
    pub(super) instances: Vec<i64>,
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

/// The reachable part of an IR.
pub(super) struct Reachable<'a> {
    /// Reachable graphs, main first, then in discovery order.
    pub(super) graphs: IndexVec<GraphIndex, GraphData<'a>>,
    /// Every call site, in discovery order (graph by graph, op by op).
    pub(super) sites: IndexVec<SiteId, Site>,
    /// The reachable graphs, every caller before its callees.
    pub(super) callers_first: Vec<GraphIndex>,
}

/// Reachable graphs and call sites, breadth first from main; each graph is
/// scheduled once.
pub(super) fn discover(ir: &Ir) -> Result<Reachable<'_>, LowerError> {
    let main = ir.main_graph_id();
    let callees_first = ir.graphs_callees_first()?;
    if let Some(&t) = ir.main_graph().inputs().first() {
        return Err(LowerError::MainGraphInput(ir.main_graph().tensor(t)?.name.clone()));
    }
    let mut graphs: IndexVec<GraphIndex, GraphData> = IndexVec::new();
    graphs.push(GraphData::new(ir.graph(main)?));
    let mut index: HashMap<GraphId, GraphIndex> = HashMap::from([(main, GraphIndex::MAIN)]);
    let mut sites: IndexVec<SiteId, Site> = IndexVec::new();
    let mut next = 0;
    while next < graphs.len() {
        let i = GraphIndex::from_index(next);
        let graph = graphs[i].graph;
        let schedule = graph.schedule()?;
        for &o in &schedule {
            let first = sites.next_index();
            for call in calls_of(ir, graph.op(o)?)? {
                let callee = match index.get(&call.callee) {
                    Some(&c) => c,
                    None => {
                        let c = graphs.push(GraphData::new(ir.graph(call.callee)?));
                        index.insert(call.callee, c);
                        c
                    }
                };
                if call.is_repeat() {
                    graphs[callee].repeat_body = true;
                }
                let s = sites.push(call.into_site(i, o, callee));
                graphs[callee].callers.push(s);
            }
            let end = sites.next_index();
            if end > first {
                graphs[i].op_sites.insert(o, SiteRange::new(first, end));
            }
        }
        graphs[i].sched = schedule;
        next += 1;
    }
    let callers_first = callees_first.iter().rev().filter_map(|g| index.get(g).copied()).collect();
    Ok(Reachable { graphs, sites, callers_first })
}

/// Key every tensor that has a buffer, graph by graph; returns the (graph, tensor)
/// of every key.
/// Streams and remote variables (which live in streaming memory) have none.
pub(super) fn key_tensors(
    ir: &Ir,
    graphs: &mut IndexVec<GraphIndex, GraphData>,
) -> IndexVec<TensorKey, (GraphIndex, TensorId)> {
    let mut tensors = IndexVec::new();
    for (gi, gd) in graphs.iter_enumerated_mut() {
        let main = gi == GraphIndex::MAIN;
        for t in gd.graph.tensors() {
            let remote = main && ir.remote_variable(t.id).is_some();
            if !matches!(t.kind, TensorKind::Stream(_)) && !remote {
                gd.keys.insert(t.id, tensors.push((gi, t.id)));
            }
        }
    }
    tensors
}
