//! [`Graph`]: a handle to one graph of an [`Ir`].

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Weak};

use popart_ir::{GraphId, OpId};

use crate::context::{self, GraphContext};
use crate::ir::IrCell;
use crate::{Ir, PopXlError, Result, Tensor};

/// A handle to a graph (the main graph or a subgraph) of an [`Ir`] (PopXL's `popxl.Graph`).
///
/// Cheap to clone; refers to its IR weakly. Obtain one from [`Ir::main_graph`],
/// [`Ir::create_graph`] or [`Ir::create_empty_graph`]. Make it the current graph
/// with [`Graph::enter`] (a guard) or [`Graph::with`] (a closure), the equivalent
/// of Python's `with graph:`.
///
/// ```
/// use popxl::{ops, Ir};
/// let ir = Ir::new();
/// let main = ir.main_graph();
/// let _g = main.enter();
/// let x = popxl::variable(1.0f32, "x").unwrap();
/// assert!(main.contains(&x));
/// assert_eq!(main.variables().unwrap(), vec![x.clone()]);
/// assert_eq!(main.get_tensor("x").unwrap(), x);
/// ```
#[derive(Clone)]
pub struct Graph {
    pub(crate) ir: Weak<IrCell>,
    pub(crate) ir_id: u64,
    pub(crate) id: GraphId,
    pub(crate) name: Arc<str>,
}

impl PartialEq for Graph {
    fn eq(&self, other: &Self) -> bool {
        self.ir_id == other.ir_id && self.id == other.id
    }
}

impl Eq for Graph {}

impl Hash for Graph {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.ir_id.hash(state);
        self.id.hash(state);
    }
}

impl fmt::Debug for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Graph({})", self.name)
    }
}

impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl Graph {
    pub(crate) fn new(ir: Weak<IrCell>, ir_id: u64, id: GraphId, name: String) -> Self {
        Graph { ir, ir_id, id, name: name.into() }
    }

    /// The graph's id in the IR core.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// assert_eq!(ir.main_graph().id(), ir.with_ir(|core| core.main_graph_id()));
    /// ```
    pub fn id(&self) -> GraphId {
        self.id
    }

    /// The graph's name, unique in its IR (`main` for the main graph).
    ///
    /// ```
    /// assert_eq!(popxl::Ir::new().main_graph().name(), "main");
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Id of the IR this graph belongs to (see [`Ir::id`]).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// assert_eq!(ir.main_graph().ir_id(), ir.id());
    /// ```
    pub fn ir_id(&self) -> u64 {
        self.ir_id
    }

    /// The IR, or [`PopXlError::IrDropped`] if every [`Ir`] handle is gone.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let main = ir.main_graph();
    /// assert_eq!(main.ir().unwrap(), ir);
    /// drop(ir);
    /// assert!(matches!(main.ir(), Err(popxl::PopXlError::IrDropped { .. })));
    /// ```
    pub fn ir(&self) -> Result<Ir> {
        Ok(Ir::from_state(self.state()?))
    }

    pub(crate) fn state(&self) -> Result<Arc<IrCell>> {
        self.ir.upgrade().ok_or_else(|| PopXlError::IrDropped { graph: self.name.to_string() })
    }

    /// Read the core graph.
    pub(crate) fn read<R>(&self, f: impl FnOnce(&popart_ir::Graph) -> R) -> Result<R> {
        let st = self.state()?;
        let st = st.borrow();
        Ok(f(st.ir.graph(self.id)?))
    }

    /// True for the main graph.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// assert!(ir.main_graph().is_main());
    /// assert!(!ir.create_empty_graph("g").unwrap().is_main());
    /// ```
    pub fn is_main(&self) -> bool {
        self.ir.upgrade().is_some_and(|s| s.borrow().ir.main_graph_id() == self.id)
    }

    /// Make this the current graph until the returned guard is dropped (Python's `with graph:`).
    /// Contexts nest: the innermost one is current.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let main = ir.main_graph();
    /// let _g = main.enter();
    /// let c = popxl::constant(2.0f32, "two").unwrap();
    /// assert_eq!(c.graph(), main);
    /// ```
    pub fn enter(&self) -> GraphContext {
        context::enter_graph(self)
    }

    /// Run `f` with this as the current graph.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let c = ir.main_graph().with(|| popxl::constant(2.0f32, "two")).unwrap();
    /// assert_eq!(c.name(), "two");
    /// ```
    pub fn with<R>(&self, f: impl FnOnce() -> R) -> R {
        let _guard = self.enter();
        f()
    }

    fn handles(&self, ids: impl IntoIterator<Item = popart_ir::TensorId>) -> Result<Vec<Tensor>> {
        let st = self.state()?;
        let st = st.borrow();
        let g = st.ir.graph(self.id)?;
        ids.into_iter().map(|t| Ok(Tensor::from_core(self, g.tensor(t)?))).collect()
    }

    /// The graph inputs, in order.
    ///
    /// ```
    /// use popxl::Tensor;
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let x = popxl::variable(1.0f32, "x").unwrap();
    /// let g = ir.create_graph(|x: Tensor| &x * 2.0, &x).unwrap();
    /// assert_eq!(g.inputs().unwrap()[0].name(), "x");
    /// ```
    pub fn inputs(&self) -> Result<Vec<Tensor>> {
        let ids = self.read(|g| g.inputs().to_vec())?;
        self.handles(ids)
    }

    /// The graph inputs by name.
    ///
    /// ```
    /// use popxl::Tensor;
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let x = popxl::variable(1.0f32, "x").unwrap();
    /// let g = ir.create_graph(|x: Tensor| &x * 2.0, &x).unwrap();
    /// assert!(g.inputs_by_name().unwrap().contains_key("x"));
    /// ```
    pub fn inputs_by_name(&self) -> Result<std::collections::BTreeMap<String, Tensor>> {
        Ok(self.inputs()?.into_iter().map(|t| (t.name().to_string(), t)).collect())
    }

    /// The graph outputs, in order.
    ///
    /// ```
    /// use popxl::Tensor;
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let x = popxl::variable(1.0f32, "x").unwrap();
    /// let g = ir.create_graph(|x: Tensor| (x.clone(), &x * 2.0), &x).unwrap();
    /// assert_eq!(g.outputs().unwrap().len(), 2);
    /// ```
    pub fn outputs(&self) -> Result<Vec<Tensor>> {
        let ids = self.read(|g| g.outputs().to_vec())?;
        self.handles(ids)
    }

    /// Every tensor of the graph (including variables, constants and streams).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// popxl::constant(1.0f32, "c").unwrap();
    /// assert_eq!(ir.main_graph().tensors().unwrap().len(), 1);
    /// ```
    pub fn tensors(&self) -> Result<Vec<Tensor>> {
        let ids = self.read(|g| g.tensors().map(|t| t.id).collect::<Vec<_>>())?;
        self.handles(ids)
    }

    /// The variables of the graph.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let w = popxl::variable(1.0f32, "w").unwrap();
    /// assert_eq!(ir.main_graph().variables().unwrap(), vec![w]);
    /// ```
    pub fn variables(&self) -> Result<Vec<Tensor>> {
        let ids = self.read(|g| g.variables().map(|t| t.id).collect::<Vec<_>>())?;
        self.handles(ids)
    }

    /// The constants of the graph.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let c = popxl::constant(1.0f32, "c").unwrap();
    /// assert_eq!(ir.main_graph().constants().unwrap(), vec![c]);
    /// ```
    pub fn constants(&self) -> Result<Vec<Tensor>> {
        let ids = self.read(|g| g.constants().map(|t| t.id).collect::<Vec<_>>())?;
        self.handles(ids)
    }

    /// The tensor with this (full, scoped) name.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let c = popxl::constant(1.0f32, "c").unwrap();
    /// assert_eq!(ir.main_graph().get_tensor("c").unwrap(), c);
    /// assert!(ir.main_graph().get_tensor("d").is_err());
    /// ```
    pub fn get_tensor(&self, name: &str) -> Result<Tensor> {
        let st = self.state()?;
        let st = st.borrow();
        let t = st.ir.graph(self.id)?.tensor_by_name(name)?;
        Ok(Tensor::from_core(self, t))
    }

    /// The handle of the tensor with core id `id` in this graph.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let main = ir.main_graph();
    /// let c = main.with(|| popxl::constant(1.0f32, "c")).unwrap();
    /// assert_eq!(main.tensor(c.tensor_id()).unwrap(), c);
    /// ```
    pub fn tensor(&self, id: popart_ir::TensorId) -> Result<Tensor> {
        let st = self.state()?;
        let st = st.borrow();
        let t = st.ir.graph(self.id)?.tensor(id)?;
        Ok(Tensor::from_core(self, t))
    }

    /// True if `t` is a tensor of this graph.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let sub = ir.create_empty_graph("sub").unwrap();
    /// let c = ir.main_graph().with(|| popxl::constant(1.0f32, "c")).unwrap();
    /// assert!(ir.main_graph().contains(&c));
    /// assert!(!sub.contains(&c));
    /// ```
    pub fn contains(&self, t: &Tensor) -> bool {
        t.graph() == *self
    }

    /// Graphs called by the ops of this graph (each once, in first-call order).
    ///
    /// ```
    /// use popxl::{ops, Tensor};
    /// let ir = popxl::Ir::new();
    /// let main = ir.main_graph();
    /// let _g = main.enter();
    /// let x = popxl::variable(1.0f32, "x").unwrap();
    /// let g = ir.create_graph(|x: Tensor| -x, &x).unwrap();
    /// ops::call(&g, &[&x], &[]).unwrap();
    /// assert_eq!(main.called_graphs().unwrap(), vec![g]);
    /// ```
    pub fn called_graphs(&self) -> Result<Vec<Graph>> {
        let ir = self.ir()?;
        let ids = self.read(|g| g.called_graphs())?;
        Ok(ids.into_iter().map(|g| ir.graph_handle(g)).collect())
    }

    /// Number of ops in the graph.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// assert_eq!(ir.main_graph().num_ops().unwrap(), 0);
    /// ```
    pub fn num_ops(&self) -> Result<usize> {
        self.read(|g| g.num_ops())
    }

    /// Require op `before` to run before op `after` (both ops of this graph).
    ///
    /// ```
    /// use popxl::ops;
    /// let ir = popxl::Ir::new();
    /// let main = ir.main_graph();
    /// let _g = main.enter();
    /// let x = popxl::variable(1.0f32, "x").unwrap();
    /// let a = ops::call_with_info(&ir.create_graph(|x: popxl::Tensor| -x, &x).unwrap(), &[&x], &[]).unwrap();
    /// let b = ops::call_with_info(&ir.create_graph(|x: popxl::Tensor| -x, &x).unwrap(), &[&x], &[]).unwrap();
    /// main.add_topo_con(b.op_id(), a.op_id()).unwrap();
    /// assert!(ir.with_ir(|core| core.main_graph().topo_cons().contains(b.op_id(), a.op_id())));
    /// ```
    pub fn add_topo_con(&self, before: OpId, after: OpId) -> Result<()> {
        let st = self.state()?;
        let mut st = st.borrow_mut();
        st.building("add_topo_con")?.graph_mut(self.id)?.add_topo_con(before, after)?;
        Ok(())
    }

    /// Call `hook` after each op the op functions create in this graph (PopXL's
    /// `Graph.register_op_created_hook`) on this thread, with the graph and the
    /// new op's id; returns a handle for [`Graph::remove_op_created_hook`]. An
    /// error from the hook is returned by the op function (the op stays created).
    ///
    /// ```
    /// use std::{cell::Cell, rc::Rc};
    /// let ir = popxl::Ir::new();
    /// let main = ir.main_graph();
    /// let _g = main.enter();
    /// let seen = Rc::new(Cell::new(0));
    /// let s = seen.clone();
    /// let h = main.register_op_created_hook(move |_, _| Ok(s.set(s.get() + 1)));
    /// let x = popxl::variable(vec![1.0f32], "x").unwrap();
    /// popxl::ops::relu(&popxl::ops::relu(&x).unwrap()).unwrap();
    /// main.remove_op_created_hook(h).unwrap();
    /// popxl::ops::relu(&x).unwrap();
    /// assert_eq!(seen.get(), 2);
    /// assert!(main.remove_op_created_hook(h).is_err());
    /// ```
    pub fn register_op_created_hook(&self, hook: impl Fn(&Graph, OpId) -> Result<()> + 'static) -> u64 {
        crate::context::register_op_created_hook(self.ir_id, self.id, std::rc::Rc::new(hook))
    }

    /// Remove a hook registered with [`Graph::register_op_created_hook`]; an
    /// unknown handle is [`PopXlError::UnknownHook`].
    pub fn remove_op_created_hook(&self, handle: u64) -> Result<()> {
        if crate::context::remove_op_created_hook(handle) {
            Ok(())
        } else {
            Err(PopXlError::UnknownHook { handle })
        }
    }
}
