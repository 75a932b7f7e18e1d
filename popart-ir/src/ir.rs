//! The IR: owner of all graphs.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use slotmap::SlotMap;

use crate::hash::FxHashMap;
use crate::{Attributes, Graph, GraphId, IrError, OpDef, OpId, OpTypeRef, Result, TensorId, TensorInfo};

static NEXT_IR_ID: AtomicU64 = AtomicU64::new(1);

/// The name of the main graph.
pub const MAIN_GRAPH_NAME: &str = "main";

/// An IR: one main graph and any number of subgraphs. Several IRs can live in
/// one process; each has a process-unique [`Ir::id`].
///
/// ```
/// use popart_ir::{Ir, Attributes, DataType, TensorInfo};
/// let mut ir = Ir::new();
/// let main = ir.main_graph_id();
/// let x = ir.graph_mut(main).unwrap().add_input("x", TensorInfo::new(DataType::Float32, [2])).unwrap();
/// let op = ir.create_op(main, "Relu", Attributes::new(), &[(0, x)], "relu").unwrap();
/// let g = ir.graph(main).unwrap();
/// let y = g.op(op).unwrap().output(0).unwrap();
/// assert_eq!(g.tensor(y).unwrap().info, TensorInfo::new(DataType::Float32, [2]));
/// ir.verify().unwrap();
/// ```
#[derive(Clone, Debug)]
pub struct Ir {
    id: u64,
    graphs: SlotMap<GraphId, Graph>,
    /// Graph ids in creation order (main first); arena order is not creation order
    /// once a removed graph's slot is reused.
    order: Vec<GraphId>,
    graph_names: FxHashMap<String, GraphId>,
    main: GraphId,
    /// Host-load executions per stream per `run` (PopXL's `num_host_transfers`).
    pub num_host_transfers: usize,
    /// Number of replicas (PopXL's `replication_factor`), of every process.
    pub replication_factor: usize,
    /// The processes the replicas are split between, and this one's place
    /// (PopXL's `popdist` instances; one process by default). Not part of the
    /// program: the text form leaves it out.
    pub instances: Instances,
    /// Remote buffers and remote variables ([`crate::remote`]).
    pub(crate) remote: crate::remote::RemoteState,
    /// Replicated variables ([`crate::VariableSettings`]).
    pub(crate) settings: crate::variable_settings::SettingsState,
}

/// The processes (instances) a program's replicas are split between, as
/// `poprun`/`mpirun` starts them: process `index` of `count` runs replicas
/// `index * r..(index + 1) * r` of the `replication_factor`, where `r =
/// replication_factor / count` is the instance replication factor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Instances {
    /// This process, `0..count`.
    pub index: usize,
    /// Number of processes, at least 1.
    pub count: usize,
}

impl Default for Instances {
    fn default() -> Self {
        Instances { index: 0, count: 1 }
    }
}

impl Instances {
    /// Replicas per process (`replication_factor / count`), or `None` when
    /// `count` is 0, `index` is not below it, or it does not divide
    /// `replication_factor`.
    ///
    /// ```
    /// use popart_ir::Instances;
    /// assert_eq!(Instances { index: 1, count: 2 }.replicas_per_instance(4), Some(2));
    /// assert_eq!(Instances { index: 0, count: 3 }.replicas_per_instance(4), None);
    /// ```
    pub fn replicas_per_instance(self, replication_factor: usize) -> Option<usize> {
        if self.count == 0 || self.index >= self.count || !replication_factor.is_multiple_of(self.count) {
            return None;
        }
        Some(replication_factor / self.count)
    }
}

impl Default for Ir {
    fn default() -> Self {
        Self::new()
    }
}

impl Ir {
    /// A new IR with an empty main graph.
    pub fn new() -> Self {
        let mut graphs = SlotMap::with_key();
        let main = graphs.insert_with_key(|id| Graph::new(id, MAIN_GRAPH_NAME.to_string()));
        let mut graph_names = FxHashMap::default();
        graph_names.insert(MAIN_GRAPH_NAME.to_string(), main);
        Ir {
            id: NEXT_IR_ID.fetch_add(1, Ordering::Relaxed),
            graphs,
            order: vec![main],
            graph_names,
            main,
            num_host_transfers: 1,
            replication_factor: 1,
            instances: Instances::default(),
            remote: Default::default(),
            settings: Default::default(),
        }
    }

    /// Process-unique id of this IR (clones share it).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The main graph's id.
    pub fn main_graph_id(&self) -> GraphId {
        self.main
    }

    /// The main graph.
    pub fn main_graph(&self) -> &Graph {
        &self.graphs[self.main]
    }

    /// The main graph, mutably.
    pub fn main_graph_mut(&mut self) -> &mut Graph {
        &mut self.graphs[self.main]
    }

    /// Create an empty subgraph; `name` must be unique in the IR.
    pub fn create_graph(&mut self, name: &str) -> Result<GraphId> {
        if self.graph_names.contains_key(name) {
            return Err(IrError::DuplicateGraphName(name.to_string()));
        }
        let id = self.graphs.insert_with_key(|id| Graph::new(id, name.to_string()));
        self.graph_names.insert(name.to_string(), id);
        self.order.push(id);
        Ok(id)
    }

    /// A graph name not yet used in this IR, derived from `base` (`base`, `base_1`, ...).
    pub fn unique_graph_name(&self, base: &str) -> String {
        if !self.graph_names.contains_key(base) {
            return base.to_string();
        }
        // At most `graph_names.len()` candidates are taken, so one of these is free.
        let mut i = 1usize;
        loop {
            let n = format!("{base}_{i}");
            if !self.graph_names.contains_key(&n) {
                return n;
            }
            i += 1;
        }
    }

    /// A graph by id.
    pub fn graph(&self, id: GraphId) -> Result<&Graph> {
        self.graphs.get(id).ok_or_else(|| IrError::UnknownGraph(format!("{id:?}")))
    }

    /// A graph by id, mutably.
    pub fn graph_mut(&mut self, id: GraphId) -> Result<&mut Graph> {
        self.graphs.get_mut(id).ok_or_else(|| IrError::UnknownGraph(format!("{id:?}")))
    }

    /// A graph by name.
    pub fn graph_by_name(&self, name: &str) -> Result<&Graph> {
        self.graph_names.get(name).map(|id| &self.graphs[*id]).ok_or_else(|| IrError::UnknownGraph(name.to_string()))
    }

    /// True if `id` is a graph of this IR.
    pub fn contains_graph(&self, id: GraphId) -> bool {
        self.graphs.contains_key(id)
    }

    /// Every graph, main graph first, then subgraphs in creation order.
    pub fn graphs(&self) -> impl Iterator<Item = &Graph> {
        self.order.iter().map(|&id| &self.graphs[id])
    }

    /// Ids of every graph, main first, then subgraphs in creation order.
    pub fn graph_ids(&self) -> Vec<GraphId> {
        self.order.clone()
    }

    /// Remove a subgraph that no op calls. The main graph cannot be removed.
    pub fn remove_graph(&mut self, id: GraphId) -> Result<Graph> {
        let name = self.graph(id)?.name.clone();
        if id == self.main {
            return Err(IrError::MainGraphRemoval);
        }
        for g in self.graphs.values() {
            if let Some(op) = g.ops().find(|o| o.called_graphs().contains(&id)) {
                return Err(IrError::GraphStillCalled { graph: name, op: op.name.clone(), caller: g.name.clone() });
            }
        }
        self.graph_names.remove(&name);
        self.order.retain(|&g| g != id);
        self.graphs.remove(id).ok_or(IrError::UnknownGraph(name))
    }

    /// Create an op of a registered type in `graph`, connect `inputs`
    /// (`(index, tensor)` pairs), run shape inference and create its outputs
    /// (named `<op name>:<index>`, made unique). Nothing is changed on error.
    pub fn create_op(
        &mut self,
        graph: GraphId,
        op_type: impl OpTypeRef,
        attrs: Attributes,
        inputs: &[(u32, TensorId)],
        name: &str,
    ) -> Result<OpId> {
        let def = op_type.resolve()?;
        self.create_op_with_def(graph, def, attrs, inputs, name)
    }

    /// [`Ir::create_op`] with the definition given directly.
    pub fn create_op_with_def(
        &mut self,
        graph: GraphId,
        def: &'static dyn OpDef,
        attrs: Attributes,
        inputs: &[(u32, TensorId)],
        name: &str,
    ) -> Result<OpId> {
        let infos = self.infer_outputs(graph, def, &attrs, inputs, name)?;
        self.create_op_with_outputs(graph, def, attrs, inputs, infos, &[], name)
    }

    /// Run shape inference for an op that would be created with these inputs.
    pub fn infer_outputs(
        &self,
        graph: GraphId,
        def: &'static dyn OpDef,
        attrs: &Attributes,
        inputs: &[(u32, TensorId)],
        name: &str,
    ) -> Result<Vec<TensorInfo>> {
        crate::op::check_attributes(def, name, attrs)?;
        let g = self.graph(graph)?;
        for &(_, t) in inputs {
            g.tensor(t)?;
        }
        for called in attrs.graphs() {
            self.graph(called)?;
        }
        self.check_not_recursive(graph, attrs)?;
        crate::verify::check_input_kinds(g, name, def, attrs, inputs.iter().copied())?;
        with_input_infos(g, inputs.iter().copied(), |in_infos| {
            if let Some(w) = in_infos.windows(2).find(|w| w[0].0 == w[1].0) {
                return Err(IrError::IndexTaken { op: name.to_string(), side: "input", index: w[0].0 });
            }
            crate::op::run_infer(def, name, in_infos, attrs, self)
        })
    }

    /// Create and connect an op whose output infos are already known (used by the
    /// parser and by passes that clone ops). `output_names` are made unique; missing
    /// names default to `<op name>:<index>`.
    #[allow(clippy::too_many_arguments)]
    pub fn create_op_with_outputs(
        &mut self,
        graph: GraphId,
        def: &'static dyn OpDef,
        attrs: Attributes,
        inputs: &[(u32, TensorId)],
        output_infos: Vec<TensorInfo>,
        output_names: &[String],
        name: &str,
    ) -> Result<OpId> {
        if graph == self.main {
            if let Some(&(_, t)) = inputs.iter().find(|&&(_, t)| self.remote.variables.contains_key(&t)) {
                let tname = self.main_graph().tensor(t).map_or_else(|_| format!("{t:?}"), |t| t.name.clone());
                return Err(crate::RemoteError::ReadByOp { variable: tname, op: name.to_string() }.into());
            }
        }
        let g = self.graph_mut(graph)?;
        for &(_, t) in inputs {
            g.tensor(t)?;
        }
        // Sizes first, so that nothing is created when an output is too large.
        if let Some((i, info)) = output_infos.iter().enumerate().find(|(_, info)| info.checked_nbytes().is_none()) {
            let tensor = output_names.get(i).cloned().unwrap_or_else(|| format!("{name}:{i}"));
            return Err(IrError::TensorTooLarge { graph: g.name.clone(), tensor, info: info.clone() });
        }
        let op = g.add_op(def, attrs, name);
        g.ops[op].inputs.reserve_exact(inputs.len());
        g.ops[op].outputs.reserve_exact(output_infos.len());
        for &(i, t) in inputs {
            if let Err(e) = g.connect_input(op, i, t) {
                g.erase_op(op)?;
                return Err(e);
            }
        }
        for (i, info) in output_infos.into_iter().enumerate() {
            let base = match output_names.get(i) {
                Some(n) => n.clone(),
                None => {
                    let op_name = &g.ops[op].name;
                    let mut n = String::with_capacity(op_name.len() + 3);
                    n.push_str(op_name);
                    n.push(':');
                    crate::graph::push_decimal(&mut n, i as u64);
                    n
                }
            };
            g.create_output_owned(op, i as u32, base, info)?;
        }
        Ok(op)
    }

    /// [`IrError::RecursiveGraph`] if an op of `graph` calling the graphs named in
    /// `attrs` would make `graph` call itself, directly or through other graphs.
    /// Walks the graphs reachable from those callees once each.
    fn check_not_recursive(&self, graph: GraphId, attrs: &Attributes) -> Result<()> {
        let mut seen: slotmap::SecondaryMap<GraphId, ()> = slotmap::SecondaryMap::new();
        let mut work: Vec<GraphId> = attrs.graphs().collect();
        while let Some(g) = work.pop() {
            if g == graph {
                return Err(IrError::RecursiveGraph(
                    self.graphs.get(graph).map_or_else(String::new, |g| g.name.clone()),
                ));
            }
            if seen.insert(g, ()).is_some() {
                continue;
            }
            if let Some(callee) = self.graphs.get(g) {
                work.extend(callee.ops.values().flat_map(|op| op.attrs.graphs()));
            }
        }
        Ok(())
    }

    /// Graphs in an order where every called graph comes before its callers
    /// (callees first); an error names a graph that calls itself.
    pub fn graphs_callees_first(&self) -> Result<Vec<GraphId>> {
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            None,
            Active,
            Done,
        }
        let mut marks: HashMap<GraphId, Mark> = self.graphs.keys().map(|g| (g, Mark::None)).collect();
        let mut order = Vec::new();
        for &root in &self.order {
            if marks[&root] != Mark::None {
                continue;
            }
            // Iterative DFS: (graph, callees, next index).
            let mut stack: Vec<(GraphId, Vec<GraphId>, usize)> = vec![(root, self.graphs[root].called_graphs(), 0)];
            marks.insert(root, Mark::Active);
            while let Some((g, callees, i)) = stack.last_mut() {
                if *i < callees.len() {
                    let c = callees[*i];
                    *i += 1;
                    match marks.get(&c).copied().unwrap_or(Mark::Done) {
                        Mark::Active => return Err(IrError::RecursiveGraph(self.graphs[c].name.clone())),
                        Mark::None => {
                            marks.insert(c, Mark::Active);
                            let cc = self.graphs[c].called_graphs();
                            stack.push((c, cc, 0));
                        }
                        Mark::Done => {}
                    }
                } else {
                    let g = *g;
                    marks.insert(g, Mark::Done);
                    order.push(g);
                    stack.pop();
                }
            }
        }
        Ok(order)
    }
}

thread_local! {
    /// Reused buffer of input infos for shape inference (avoids allocating per op).
    static INFER_SCRATCH: Cell<Vec<(u32, TensorInfo)>> = const { Cell::new(Vec::new()) };
}

/// Call `f` with the infos of `inputs` (`(index, tensor)` pairs of graph `g`, which
/// must all exist), sorted by index. Reuses a thread-local buffer, including the
/// shape allocations of earlier calls; re-entrant calls get a fresh buffer.
pub(crate) fn with_input_infos<R>(
    g: &Graph,
    inputs: impl Iterator<Item = (u32, TensorId)>,
    f: impl FnOnce(&[(u32, TensorInfo)]) -> R,
) -> R {
    let mut buf = INFER_SCRATCH.take();
    let mut n = 0;
    for (i, t) in inputs {
        let info = &g.tensors[t].info;
        if n < buf.len() {
            let slot = &mut buf[n];
            slot.0 = i;
            slot.1.dtype = info.dtype;
            slot.1.shape.clone_from(&info.shape);
        } else {
            buf.push((i, info.clone()));
        }
        n += 1;
    }
    let infos = &mut buf[..n];
    if !infos.windows(2).all(|w| w[0].0 <= w[1].0) {
        infos.sort_by_key(|(i, _)| *i);
    }
    let r = f(infos);
    INFER_SCRATCH.set(buf);
    r
}
