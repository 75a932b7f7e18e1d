//! [`Ir`]: the cheap, cloneable handle to an IR being built.

use std::fmt;
use std::sync::Arc;

use popart_ir::{GraphId, StreamDirection, TensorKind};

use crate::build::{self, GraphFunction, IntoGraphArgs};
use crate::stream::{DeviceToHostStream, HostToDeviceStream};
use crate::{Graph, PopXlError, Result};

/// The state shared by every handle of one IR.
pub(crate) struct IrState {
    pub(crate) ir: popart_ir::Ir,
    pub(crate) frozen: bool,
    /// Graph inputs passed by reference (`graph_input_by_ref`, [`crate::TensorByRef`]):
    /// every call site marks the parent input modified.
    pub(crate) by_ref: std::collections::HashSet<(popart_ir::GraphId, popart_ir::TensorId)>,
}

impl IrState {
    /// Mutable access to the IR for building; an error once frozen.
    pub(crate) fn building(&mut self, what: &str) -> Result<&mut popart_ir::Ir> {
        if self.frozen {
            return Err(PopXlError::IrFrozen { what: what.to_string() });
        }
        Ok(&mut self.ir)
    }
}

/// The lock around an IR's state, shared by its handles across threads.
///
/// `borrow` takes a shared lock that a thread may take again while holding it
/// (code that reads the IR calls code that reads it too), `borrow_mut` an
/// exclusive one; a thread never asks for the exclusive lock while holding the
/// shared one (the same rule `RefCell` enforced when handles were single-threaded).
pub(crate) struct IrCell(parking_lot::RwLock<IrState>);

impl IrCell {
    fn new(state: IrState) -> Self {
        IrCell(parking_lot::RwLock::new(state))
    }

    /// Shared access; recursive, so a reader never waits behind a queued writer
    /// while it already holds the lock.
    pub(crate) fn borrow(&self) -> parking_lot::RwLockReadGuard<'_, IrState> {
        self.0.read_recursive()
    }

    /// Exclusive access.
    pub(crate) fn borrow_mut(&self) -> parking_lot::RwLockWriteGuard<'_, IrState> {
        self.0.write()
    }
}

/// An IR being built: one main graph plus subgraphs (PopXL's `popxl.Ir`).
///
/// A cheap handle (clones share the same IR). [`Graph`] and [`crate::Tensor`]
/// handles refer to it weakly: once every `Ir` handle is dropped, they report
/// [`PopXlError::IrDropped`].
///
/// ```
/// use popxl::{ops, Ir};
/// let ir = Ir::new();
/// let main = ir.main_graph();
/// let _g = main.enter();
/// let x = popxl::variable(ndarray::array![1.0f32, 2.0], "x").unwrap();
/// let y = ops::relu(&x).unwrap();
/// assert_eq!(y.shape(), &[2]);
/// assert_eq!(main.tensors().unwrap().len(), 2);
/// ```
#[derive(Clone)]
pub struct Ir {
    pub(crate) state: Arc<IrCell>,
    id: u64,
}

impl Default for Ir {
    fn default() -> Self {
        Self::new()
    }
}

impl PartialEq for Ir {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.state, &other.state)
    }
}

impl Eq for Ir {}

impl fmt::Debug for Ir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.state.borrow();
        f.debug_struct("Ir")
            .field("id", &self.id)
            .field("graphs", &st.ir.graphs().map(|g| g.name().to_string()).collect::<Vec<_>>())
            .field("frozen", &st.frozen)
            .finish()
    }
}

impl Ir {
    /// A new IR with an empty main graph.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// assert_eq!(ir.main_graph().name(), "main");
    /// ```
    pub fn new() -> Self {
        Self::from_ir(popart_ir::Ir::new())
    }

    /// Wrap an existing IR core (for example one parsed from its text form).
    /// Handles compare by IR id, so do not wrap two clones of one core.
    ///
    /// ```
    /// let core = popart_ir::Ir::new();
    /// let ir = popxl::Ir::from_ir(core);
    /// assert_eq!(ir.graphs().len(), 1);
    /// ```
    pub fn from_ir(ir: popart_ir::Ir) -> Self {
        let id = ir.id();
        Ir { state: Arc::new(IrCell::new(IrState { ir, frozen: false, by_ref: Default::default() })), id }
    }

    pub(crate) fn from_state(state: Arc<IrCell>) -> Self {
        let id = state.borrow().ir.id();
        Ir { state, id }
    }

    /// Process-unique id of this IR.
    ///
    /// ```
    /// assert_ne!(popxl::Ir::new().id(), popxl::Ir::new().id());
    /// ```
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The main graph.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// assert!(ir.main_graph().is_main());
    /// ```
    pub fn main_graph(&self) -> Graph {
        let main = self.state.borrow().ir.main_graph_id();
        self.graph_handle(main)
    }

    pub(crate) fn graph_handle(&self, id: GraphId) -> Graph {
        let name = self.state.borrow().ir.graph(id).map(|g| g.name().to_string()).unwrap_or_default();
        Graph::new(Arc::downgrade(&self.state), self.id, id, name)
    }

    /// The handle of the graph with core id `id` (for example a graph created by a
    /// transform through [`Ir::with_ir_mut`]).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let id = ir.with_ir_mut(|core| core.create_graph("made_by_a_pass")).unwrap().unwrap();
    /// assert_eq!(ir.graph(id).unwrap().name(), "made_by_a_pass");
    /// ```
    pub fn graph(&self, id: GraphId) -> Result<Graph> {
        self.state.borrow().ir.graph(id)?;
        Ok(self.graph_handle(id))
    }

    /// Every graph, main graph first, then subgraphs in creation order.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// ir.create_empty_graph("sub").unwrap();
    /// let names: Vec<String> = ir.graphs().iter().map(|g| g.name().to_string()).collect();
    /// assert_eq!(names, ["main", "sub"]);
    /// ```
    pub fn graphs(&self) -> Vec<Graph> {
        let ids = self.state.borrow().ir.graph_ids();
        ids.into_iter().map(|g| self.graph_handle(g)).collect()
    }

    /// A graph by name.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// ir.create_empty_graph("sub").unwrap();
    /// assert_eq!(ir.graph_by_name("sub").unwrap().name(), "sub");
    /// assert!(ir.graph_by_name("nope").is_err());
    /// ```
    pub fn graph_by_name(&self, name: &str) -> Result<Graph> {
        let id = self.state.borrow().ir.graph_by_name(name)?.id();
        Ok(self.graph_handle(id))
    }

    /// Create a subgraph by tracing a function (PopXL's `ir.create_graph(fn, *args)`).
    ///
    /// `f` is a closure or function taking [`crate::Tensor`]s (one per argument)
    /// or a `&mut` [`crate::Module`]. `args` gives, per argument, a tensor (its
    /// spec is used and the input is named after it) or a [`crate::TensorSpec`];
    /// pass one value, a tuple, an array or a `Vec`. Each argument becomes a graph
    /// input, in order; [`crate::graph_input`] calls inside `f` add further inputs
    /// after them. `f` returns the graph outputs: nothing, a tensor, a tuple or
    /// `Vec` of tensors, or a `Result` of those.
    ///
    /// The graph is named after the function (made unique), and `f` runs with the
    /// new graph as the current graph. On error the partial graph is removed.
    ///
    /// ```
    /// use popxl::{Ir, Tensor};
    /// fn matmul_fn(x: Tensor, w: Tensor) -> popxl::Result<Tensor> {
    ///     x.matmul(&w)
    /// }
    /// let ir = Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let x = popxl::variable(ndarray::Array2::<f32>::ones((2, 2)), "x").unwrap();
    /// let w1 = popxl::variable(ndarray::Array2::<f32>::ones((2, 2)), "w1").unwrap();
    /// let w2 = popxl::variable(ndarray::Array1::<f32>::ones(2), "w2").unwrap();
    /// let g1 = ir.create_graph(matmul_fn, (&x, &w1)).unwrap();
    /// let g2 = ir.create_graph(matmul_fn, (&x, &w2)).unwrap();
    /// assert_eq!((g1.name(), g2.name()), ("matmul_fn", "matmul_fn_1"));
    /// assert_eq!(g2.outputs().unwrap()[0].shape(), &[2]);
    /// ```
    pub fn create_graph<M>(&self, f: impl GraphFunction<M>, args: impl IntoGraphArgs) -> Result<Graph> {
        let name = f.graph_name();
        build::create_graph(self, &name, f, args.into_graph_args())
    }

    /// [`Ir::create_graph`] with an explicit graph name (made unique if taken).
    ///
    /// ```
    /// use popxl::{Ir, Tensor};
    /// let ir = Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let x = popxl::variable(1.0f32, "x").unwrap();
    /// let g = ir.create_graph_named("double", |x: Tensor| &x + &x, &x).unwrap();
    /// assert_eq!(g.name(), "double");
    /// ```
    pub fn create_graph_named<M>(
        &self,
        name: &str,
        f: impl GraphFunction<M>,
        args: impl IntoGraphArgs,
    ) -> Result<Graph> {
        build::create_graph(self, name, f, args.into_graph_args())
    }

    /// An empty subgraph named `name` (made unique if taken), to fill by entering it
    /// (PopXL's `create_empty_graph`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let g = ir.create_empty_graph("body").unwrap();
    /// assert!(g.inputs().unwrap().is_empty());
    /// ```
    pub fn create_empty_graph(&self, name: &str) -> Result<Graph> {
        let id = {
            let mut st = self.state.borrow_mut();
            let ir = st.building("create_empty_graph")?;
            let unique = ir.unique_graph_name(name);
            ir.create_graph(&unique)?
        };
        Ok(self.graph_handle(id))
    }

    /// Number of host transfers per stream per session `run` (PopXL's
    /// `num_host_transfers`, default 1).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// ir.set_num_host_transfers(4).unwrap();
    /// assert_eq!(ir.num_host_transfers(), 4);
    /// ```
    pub fn num_host_transfers(&self) -> usize {
        self.state.borrow().ir.num_host_transfers
    }

    /// Set [`Ir::num_host_transfers`]; must be at least 1; an error once frozen.
    ///
    /// ```
    /// assert!(popxl::Ir::new().set_num_host_transfers(0).is_err());
    /// ```
    pub fn set_num_host_transfers(&self, n: usize) -> Result<()> {
        if n == 0 {
            return Err(PopXlError::ValueOutOfRange {
                what: "num_host_transfers".to_string(),
                expected: "at least 1",
                got: n.to_string(),
            });
        }
        self.state.borrow_mut().building("setting num_host_transfers")?.num_host_transfers = n;
        Ok(())
    }

    /// Number of replicas (PopXL's `replication_factor`, default 1).
    ///
    /// ```
    /// assert_eq!(popxl::Ir::new().replication_factor(), 1);
    /// ```
    pub fn replication_factor(&self) -> usize {
        self.state.borrow().ir.replication_factor
    }

    /// Set [`Ir::replication_factor`]; must be at least 1; an error once frozen.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// ir.set_replication_factor(2).unwrap();
    /// ir.freeze();
    /// assert!(ir.set_replication_factor(4).is_err());
    /// ```
    pub fn set_replication_factor(&self, n: usize) -> Result<()> {
        if n == 0 {
            return Err(PopXlError::ValueOutOfRange {
                what: "replication_factor".to_string(),
                expected: "at least 1",
                got: n.to_string(),
            });
        }
        self.state.borrow_mut().building("setting replication_factor")?.replication_factor = n;
        Ok(())
    }

    /// The processes the replicas are split between and this process's place
    /// (default: one process). See [`Ir::set_instances`].
    pub fn instances(&self) -> popart_ir::Instances {
        self.state.borrow().ir.instances
    }

    /// Split the [`Ir::replication_factor`] replicas between `count`
    /// processes, this one being `index` (PopXL's `popdist` instances, as
    /// `poprun`/`mpirun` starts them): each process runs
    /// `replication_factor / count` replicas and meets the others' at
    /// collectives through a transport (MPI: see `popxl_session`). Errors: a
    /// `count` of 0 or an `index` not below it; an error once frozen. The
    /// replication factor must be a multiple of `count` when a session is made.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// ir.set_replication_factor(4).unwrap();
    /// ir.set_instances(1, 2).unwrap();
    /// assert_eq!(ir.instance_replication_factor(), 2);
    /// assert!(ir.set_instances(2, 2).is_err());
    /// ```
    pub fn set_instances(&self, index: usize, count: usize) -> Result<()> {
        if count == 0 || index >= count {
            return Err(PopXlError::ValueOutOfRange {
                what: "instances (index, count)".to_string(),
                expected: "a count of at least 1 and an index below it",
                got: format!("({index}, {count})"),
            });
        }
        self.state.borrow_mut().building("setting instances")?.instances = popart_ir::Instances { index, count };
        Ok(())
    }

    /// Replicas this process runs: `replication_factor / count` of
    /// [`Ir::instances`] (PopXL's `instance_replication_factor`; the whole
    /// replication factor when one process runs them all, or when the count
    /// does not divide it, which a session refuses).
    pub fn instance_replication_factor(&self) -> usize {
        let st = self.state.borrow();
        st.ir.instances.replicas_per_instance(st.ir.replication_factor).unwrap_or(st.ir.replication_factor)
    }

    /// A new IR whose replicas span the processes of the launch this process
    /// belongs to (PopXL's `Ir(replication="popdist")`): this process's rank
    /// and the number of processes come from the environment `mpirun` sets
    /// ([`instance_from_env`]), the replicas per process from
    /// `POPDIST_NUM_LOCAL_REPLICAS` (default 1), and `replication_factor =
    /// processes x replicas per process`. Outside a launch it is one process
    /// with that many replicas. Errors name a malformed variable.
    pub fn replication_from_env() -> Result<Ir> {
        let inst = instance_from_env()?;
        let local = env_count("POPDIST_NUM_LOCAL_REPLICAS")?.unwrap_or(1);
        let ir = Ir::new();
        let rf = inst.count.checked_mul(local).ok_or_else(|| PopXlError::ValueOutOfRange {
            what: "replication_factor (processes x POPDIST_NUM_LOCAL_REPLICAS)".to_string(),
            expected: "a product that fits in usize",
            got: format!("{} x {local}", inst.count),
        })?;
        ir.set_replication_factor(rf)?;
        ir.set_instances(inst.index, inst.count)?;
        Ok(ir)
    }

    /// The number of IPUs a session of this IR needs, as PopXL counts them:
    /// `2^ceil(log2((max ipu + 1) * replication_factor))` over every op of
    /// every graph (ops outside any [`crate::ipu`] context count as IPU 0; an
    /// `ipu_copy` counts its source and destination). See
    /// [`popart_ir::Ir::num_ipus`]; a count that overflows 64 bits is an error.
    ///
    /// ```
    /// use popxl::ops;
    /// let ir = popxl::Ir::new();
    /// assert_eq!(ir.num_ipus().unwrap(), 1);
    /// {
    ///     let _g = ir.main_graph().enter();
    ///     let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
    ///     let _p = popxl::ipu(2);
    ///     ops::relu(&x).unwrap();
    /// }
    /// assert_eq!(ir.num_ipus().unwrap(), 4); // IPUs 0..=2, rounded up
    /// ir.set_replication_factor(2).unwrap();
    /// assert_eq!(ir.num_ipus().unwrap(), 8);
    /// ```
    pub fn num_ipus(&self) -> Result<u64> {
        Ok(self.state.borrow().ir.num_ipus()?)
    }

    /// Read access to the IR core (used by sessions, lowering and tests).
    /// Do not call other `popxl` functions on this IR from inside `f`.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let n = ir.with_ir(|core| core.graphs().count());
    /// assert_eq!(n, 1);
    /// ```
    pub fn with_ir<R>(&self, f: impl FnOnce(&popart_ir::Ir) -> R) -> R {
        f(&self.state.borrow().ir)
    }

    /// Mutable access to the IR core (used by transforms such as autodiff);
    /// an error once frozen. Do not call other `popxl` functions on this IR from inside `f`.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let id = ir.with_ir_mut(|core| core.create_graph("g")).unwrap().unwrap();
    /// assert_eq!(ir.graphs()[1].id(), id);
    /// ```
    pub fn with_ir_mut<R>(&self, f: impl FnOnce(&mut popart_ir::Ir) -> R) -> Result<R> {
        let mut st = self.state.borrow_mut();
        Ok(f(st.building("editing the IR")?))
    }

    /// Freeze the IR: from now on every building call returns [`PopXlError::IrFrozen`].
    /// A session freezes the IR it is given.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// ir.freeze();
    /// assert!(ir.is_frozen());
    /// let _g = ir.main_graph().enter();
    /// assert!(matches!(popxl::constant(1.0f32, "c"), Err(popxl::PopXlError::IrFrozen { .. })));
    /// ```
    pub fn freeze(&self) {
        self.state.borrow_mut().frozen = true;
    }

    /// True once [`Ir::freeze`] has been called.
    ///
    /// ```
    /// assert!(!popxl::Ir::new().is_frozen());
    /// ```
    pub fn is_frozen(&self) -> bool {
        self.state.borrow().frozen
    }

    /// Every host-to-device stream, in creation order (PopXL's `get_all_h2d_streams`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let s = popxl::h2d_stream([2], popxl::float32, "in").unwrap();
    /// assert_eq!(ir.h2d_streams(), vec![s]);
    /// ```
    pub fn h2d_streams(&self) -> Vec<HostToDeviceStream> {
        self.streams(StreamDirection::HostToDevice).into_iter().map(HostToDeviceStream::from_tensor_unchecked).collect()
    }

    /// Every device-to-host stream, in creation order (PopXL's `get_all_d2h_streams`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let s = popxl::d2h_stream([2], popxl::float32, "out").unwrap();
    /// assert_eq!(ir.d2h_streams(), vec![s]);
    /// ```
    pub fn d2h_streams(&self) -> Vec<DeviceToHostStream> {
        self.streams(StreamDirection::DeviceToHost).into_iter().map(DeviceToHostStream::from_tensor_unchecked).collect()
    }

    fn streams(&self, dir: StreamDirection) -> Vec<crate::Tensor> {
        let main = self.main_graph();
        let st = self.state.borrow();
        let g = st.ir.main_graph();
        g.tensors().filter(|t| t.kind == TensorKind::Stream(dir)).map(|t| crate::Tensor::from_core(&main, t)).collect()
    }

    /// The whole IR in the stable text form of [`popart_ir::text`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// ir.main_graph().with(|| popxl::variable(1.0f32, "w")).unwrap();
    /// assert!(ir.to_text().contains("tensor w var float32[] = [1.0]"));
    /// ```
    pub fn to_text(&self) -> String {
        self.with_ir(popart_ir::text::to_text)
    }
}

/// A count from the environment variable `name`: `None` when unset; an error
/// when set but not a positive integer.
fn env_count(name: &str) -> Result<Option<usize>> {
    let Ok(v) = std::env::var(name) else { return Ok(None) };
    match v.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(Some(n)),
        _ => Err(PopXlError::ValueOutOfRange { what: name.to_string(), expected: "a positive integer", got: v }),
    }
}

/// This process's place in the launch it belongs to, from the variables MPI
/// launchers set: Open MPI's `OMPI_COMM_WORLD_RANK`/`OMPI_COMM_WORLD_SIZE`,
/// or the PMI ones (`PMI_RANK`/`PMI_SIZE`, MPICH and Slurm). One process
/// (`index 0 of 1`) when none is set; an error when a value is malformed or
/// the rank is not below the size.
pub fn instance_from_env() -> Result<popart_ir::Instances> {
    for (rank, size) in [("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE")] {
        let Some(count) = env_count(size)? else { continue };
        let index = match std::env::var(rank) {
            Ok(v) => v.trim().parse::<usize>().map_err(|_| PopXlError::ValueOutOfRange {
                what: rank.to_string(),
                expected: "a non-negative integer",
                got: v.clone(),
            })?,
            Err(_) => 0,
        };
        if index >= count {
            return Err(PopXlError::ValueOutOfRange {
                what: rank.to_string(),
                expected: "a rank below the launch's size",
                got: format!("{index} of {count}"),
            });
        }
        return Ok(popart_ir::Instances { index, count });
    }
    Ok(popart_ir::Instances::default())
}
