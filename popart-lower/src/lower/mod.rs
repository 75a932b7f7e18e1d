//! The lowering algorithm, one module per concept:
//!
//! 1. **Reachable graphs** ([`graphs`]) from the main graph, each scheduled once,
//!    with their **call sites** ([`sites`]): every `Call`, `Repeat` and `If`
//!    branch, with the caller tensor bound to each callee input and output. Every
//!    tensor with a buffer gets a dense [`index::TensorKey`]; graphs,
//!    sites, alias classes and copy temporaries have typed indices too ([`index`]).
//! 2. **Buffer classes** ([`classes`], a union-find over every tensor of every
//!    reachable graph) merged by [`sharing`]: in-place aliases, input and output
//!    elision at call sites, and views lowered to buffer sharing.
//! 3. **Copy planning** ([`copies`]): the copies each call site still needs
//!    (copy-in, copy-out, copy-back, loop-carried), with temporaries where a
//!    repeat's loop copies would overwrite each other.
//! 4. **Timeline** ([`timeline`]): one global step numbering in which every call is
//!    expanded in place. Each graph has one or more *instances* (start steps), and
//!    a tensor of a graph is live over its local interval at each instance
//!    ([`liveness`]).
//! 5. **Buffers and memory plan** ([`buffers`]): one buffer per class that is
//!    permanent or live, numbered in program order, and per copy temporary;
//!    variables and constants first (always live), then every activation buffer at
//!    an aligned offset not used by a buffer live at the same time (see
//!    [`crate::memory`]).
//! 6. **Programs** ([`host`], [`emit`]): streams, weights and constants; functions
//!    (one per subgraph), the main program, init (constants) and the weight programs.
//!
//! 7. **Replica-invariant weights** ([`replica_invariant`]): fused
//!    data-parallel updates of weights every replica provably holds equal are
//!    marked ([`crate::KernelCall::weight_invariant`]) for the devices.
//!
//! [`Lowerer::run`] runs these steps in order and [`Lowerer::finish`] assembles the
//! [`Executable`]. Every step is linear in the size of the IR up to hashing and
//! sorting (graphs and tensors are indexed densely; no per-tensor scans of graph
//! inputs or outputs).

mod buffers;
mod classes;
mod code;
mod copies;
mod declarations;
mod emit;
mod graphs;
mod host;
mod index;
mod liveness;
mod replica_invariant;
mod sharing;
mod sites;
mod timeline;

use std::collections::HashSet;

use popart_ir::{Ir, Tensor, TensorId, TensorInfo, TensorKind};

use self::buffers::{BufferTable, Placement};
use self::classes::Classes;
use self::copies::{SitePlan, Temp};
use self::emit::Emitter;
use self::graphs::{GraphData, Reachable};
use self::host::HostIo;
use self::index::{ClassId, GraphIndex, IndexVec, SiteId, TempId, TensorKey};
use self::liveness::LocalSpans;
use self::sites::Site;
use crate::executable::{BufferId, Executable, Function, MemoryPlan, Program, Programs, BUFFER_ALIGNMENT};
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

/// The state of one lowering.
struct Lowerer<'a> {
    ir: &'a Ir,
    /// Reachable graphs, main first, then in discovery order.
    graphs: IndexVec<GraphIndex, GraphData<'a>>,
    /// The reachable graphs, every caller before its callees.
    callers_first: Vec<GraphIndex>,
    /// (graph, tensor) of every key.
    tensors: IndexVec<TensorKey, (GraphIndex, TensorId)>,
    /// Alias classes of the keys.
    classes: Classes,
    /// Every call site.
    sites: IndexVec<SiteId, Site>,
    /// Copy temporaries, made by copy planning.
    temps: IndexVec<TempId, Temp>,
}

impl<'a> Lowerer<'a> {
    fn new(ir: &'a Ir) -> Result<Self, LowerError> {
        let Reachable { mut graphs, sites, callers_first } = graphs::discover(ir)?;
        let tensors = graphs::key_tensors(ir, &mut graphs);
        let classes = Classes::new(tensors.len());
        Ok(Lowerer { ir, graphs, callers_first, tensors, classes, sites, temps: IndexVec::new() })
    }

    /// The key of tensor `t` of graph `g` (an error for streams, which have none).
    fn key(&self, g: GraphIndex, t: TensorId) -> Result<TensorKey, LowerError> {
        self.graphs[g].keys.get(t).copied().ok_or_else(|| {
            let name = self.graphs[g].graph.tensor(t).map_or_else(|_| format!("{t:?}"), |x| x.name.clone());
            LowerError::Internal(format!("tensor `{name}` has no buffer (a stream used as an op argument?)"))
        })
    }

    /// The current class of tensor `t` of graph `g`.
    fn class(&self, g: GraphIndex, t: TensorId) -> Result<ClassId, LowerError> {
        Ok(self.classes.find(self.key(g, t)?))
    }

    /// The tensor of `key`.
    // Keys are made only for tensors of the reachable graphs (`graphs`), which
    // the lowering never removes: the lookup cannot fail.
    #[allow(clippy::expect_used)]
    fn tensor(&self, key: TensorKey) -> &'a Tensor {
        let (g, t) = self.tensors[key];
        self.graphs[g].graph.tensor(t).expect("keyed tensors exist")
    }

    fn kind_of(&self, key: TensorKey) -> &'a TensorKind {
        &self.tensor(key).kind
    }

    fn info(&self, g: GraphIndex, t: TensorId) -> Result<TensorInfo, LowerError> {
        Ok(self.graphs[g].graph.tensor(t)?.info.clone())
    }

    /// The lowering steps, in order.
    fn run(mut self) -> Result<Executable, LowerError> {
        self.check_declarations()?;
        self.compute_timeline();
        self.merge_aliases()?;
        self.elide_carried()?;
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

    /// Buffers, memory plan, streams and programs.
    fn finish(self, plans: IndexVec<SiteId, SitePlan>, locals: LocalSpans) -> Result<Executable, LowerError> {
        let lifetimes = self.class_lifetimes(&locals);
        let mut table = self.buffers(lifetimes)?;
        let placement = table.place()?;
        let host = HostIo::collect(self.ir, &table.buffers)?;
        let emitter = Emitter { l: &self, plans: &plans, buffers: &table, host: &host };
        let functions = emitter.functions()?;
        let programs = emitter.programs()?;
        let code = self.code_liveness()?;
        let memory = memory_plan(&table, placement, &programs, &functions);
        let HostIo { streams, weights, constants, remote_weights, .. } = host;
        let BufferTable { buffers, tensor_buffers, lives, .. } = table;
        let mut exe = Executable {
            buffers,
            functions,
            streams,
            weights,
            constants,
            remote_buffers: self.ir.remote_buffers().to_vec(),
            remote_weights,
            code,
            timeline_steps: u64::try_from(self.graphs[GraphIndex::MAIN].len).unwrap_or(0),
            programs,
            memory,
            num_host_transfers: self.ir.num_host_transfers,
            replication_factor: self.ir.replication_factor,
            tensor_buffers,
            lives,
        };
        replica_invariant::mark_invariant_updates(&mut exe, self.ir, self.ir.replication_factor.max(1));
        Ok(exe)
    }
}

/// The memory plan's summary: the placement, the no-reuse total, and the landing
/// buffers of host loads (the analogue of a compiled function's arguments).
fn memory_plan(table: &BufferTable, placement: Placement, programs: &Programs, functions: &[Function]) -> MemoryPlan {
    let mut landing: HashSet<BufferId> = HashSet::new();
    let mut note = |p: &Program| {
        if let Program::HostToDevice { dst, .. } = p {
            landing.insert(*dst);
        }
    };
    programs.main.visit(&mut note);
    functions.iter().for_each(|f| f.body.visit(&mut note));
    let buffers = &table.buffers;
    let Placement { permanent_bytes, end } = placement;
    MemoryPlan {
        alignment: BUFFER_ALIGNMENT,
        permanent_bytes,
        arena_bytes: end.max(permanent_bytes),
        no_reuse_bytes: buffers.iter().map(|b| b.size).sum(),
        host_load_bytes: landing.iter().map(|b| buffers[b.index()].size).sum(),
    }
}
