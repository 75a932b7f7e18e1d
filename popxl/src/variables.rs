//! Tensors that are not op outputs: variables, constants, graph inputs; graph outputs.

use popart_ir::{DataType, TensorInfo, TensorKind};

use crate::context;
use crate::tensor::check_in_graph;
use crate::{Graph, HostArray, PopXlError, Result, Tensor};

/// `name`, or `default` when `name` is empty.
fn name_or<'a>(name: &'a str, default: &'a str) -> &'a str {
    if name.is_empty() {
        default
    } else {
        name
    }
}

/// Add a tensor named (scoped, made unique) after `name` (`what` if empty) to `graph`.
pub(crate) fn add_tensor(graph: &Graph, name: &str, info: TensorInfo, kind: TensorKind, what: &str) -> Result<Tensor> {
    let state = graph.state()?;
    let mut st = state.borrow_mut();
    let g = st.building(what)?.graph_mut(graph.id)?;
    let unique = g.unique_tensor_name(&context::scoped(name_or(name, what)));
    let id = g.add_tensor(&unique, info, kind)?;
    Ok(Tensor::from_core(graph, g.tensor(id)?))
}

fn current(what: &str) -> Result<Graph> {
    context::try_current_graph().ok_or_else(|| PopXlError::NoGraphContext { what: what.to_string() })
}

/// A variable initialised with `data`, in the main graph (PopXL's `popxl.variable`).
///
/// The current graph must be the main graph: a variable in a subgraph is a
/// [`PopXlError::VariableInSubgraph`] error (pass it to the subgraph as an input
/// instead). As in PopXL, 64-bit data is downcast to 32 bits (`f64` to `f32`,
/// `i64` to `i32`, `u64` to `u32`), checked: a value the 32-bit type cannot
/// represent is a [`PopXlError::HostCast`] naming the variable (PopXL wraps
/// silently); use [`variable_as`] to choose the type.
/// The name gets the current name scope; a taken name gets a suffix (`w_1`).
///
/// ```
/// use popxl::Ir;
/// let ir = Ir::new();
/// let _g = ir.main_graph().enter();
/// let w = popxl::variable(ndarray::array![[1.0, 2.0], [3.0, 4.0]], "w").unwrap();
/// assert_eq!((w.name(), w.shape(), w.dtype()), ("w", &[2usize, 2][..], popxl::float32));
/// assert!(w.is_variable());
/// ```
pub fn variable(data: impl Into<HostArray>, name: &str) -> Result<Tensor> {
    let data = data.into().downcast_for(&format!("data of variable `{name}`"))?;
    create_variable(data, name)
}

/// A variable holding `data` converted to `dtype`, checked as by
/// [`HostArray::try_cast`] (a value `dtype` cannot represent is an error).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let w = popxl::variable_as(vec![1.0f64, 2.0], popxl::float64, "w").unwrap();
/// assert_eq!(w.dtype(), popxl::float64);
/// ```
pub fn variable_as(data: impl Into<HostArray>, dtype: DataType, name: &str) -> Result<Tensor> {
    let data = data.into().cast_as(dtype, &format!("data of variable `{name}`"), true)?;
    create_variable(data, name)
}

fn create_variable(data: HostArray, name: &str) -> Result<Tensor> {
    let graph = current("variable")?;
    variable_in_main(&graph, data, name)
}

/// A variable holding `data` in `graph`, which must be the main graph.
pub(crate) fn variable_in_main(graph: &Graph, data: HostArray, name: &str) -> Result<Tensor> {
    if !graph.state()?.borrow().ir.main_graph_id().eq(&graph.id) {
        return Err(PopXlError::VariableInSubgraph { name: name.to_string(), graph: graph.name().to_string() });
    }
    let host = data.host_tensor_for(&format!("data of variable `{name}`"))?;
    add_tensor(graph, name, host.info.clone(), TensorKind::Variable(host), "variable")
}

/// A constant holding `data`, in the current graph (PopXL's `popxl.constant`).
/// 64-bit data is downcast to 32 bits (checked) as for [`variable`]; see [`constant_as`].
///
/// ```
/// let ir = popxl::Ir::new();
/// let sub = ir.create_empty_graph("sub").unwrap();
/// let c = sub.with(|| popxl::constant(vec![1i64, 2], "c")).unwrap();
/// assert_eq!((c.dtype(), c.graph()), (popxl::int32, sub));
/// ```
pub fn constant(data: impl Into<HostArray>, name: &str) -> Result<Tensor> {
    let graph = current("constant")?;
    let data = data.into().downcast_for(&format!("data of constant `{name}`"))?;
    constant_in(&graph, data, name)
}

/// A constant holding `data` converted to `dtype` (checked, as [`HostArray::try_cast`]).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let c = popxl::constant_as(1.5, popxl::float16, "c").unwrap();
/// assert_eq!(c.dtype(), popxl::float16);
/// ```
pub fn constant_as(data: impl Into<HostArray>, dtype: DataType, name: &str) -> Result<Tensor> {
    let graph = current("constant")?;
    let data = data.into().cast_as(dtype, &format!("data of constant `{name}`"), true)?;
    constant_in(&graph, data, name)
}

fn constant_in(graph: &Graph, data: HostArray, name: &str) -> Result<Tensor> {
    let host = data.host_tensor_for(&format!("data of constant `{name}`"))?;
    add_tensor(graph, name, host.info.clone(), TensorKind::Constant(host), "constant")
}

/// A constant for an operator on `like`: in the current graph if there is one, else in `like`'s graph.
pub(crate) fn constant_in_graph_of(like: &Tensor, data: HostArray, name: &str) -> Result<Tensor> {
    let graph = context::try_current_graph().unwrap_or_else(|| like.graph());
    constant_in(&graph, data, name)
}

/// Add an input to the current subgraph (PopXL's `popxl.graph_input`), after the
/// inputs that already exist. Used inside graph functions and
/// [`crate::Module::build`] to declare inputs beyond the traced arguments.
///
/// ```
/// use popxl::{ops, Ir, Tensor};
/// let ir = Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
/// let g = ir.create_graph(|x: Tensor| -> popxl::Result<Tensor> {
///     let value = popxl::graph_input(x.shape(), x.dtype(), "value")?;
///     Ok(&x + &value)
/// }, &x).unwrap();
/// let names: Vec<String> = g.inputs().unwrap().iter().map(|t| t.name().to_string()).collect();
/// assert_eq!(names, ["x", "value"]);
/// ```
pub fn graph_input(shape: impl Into<Vec<usize>>, dtype: DataType, name: &str) -> Result<Tensor> {
    let graph = current("graph_input")?;
    graph_input_in(&graph, TensorInfo::new(dtype, shape), name)
}

/// [`graph_input`] passed by reference (PopXL's `graph_input(..., by_ref=True)`):
/// in-place writes of the graph to this input reach the caller's tensor, as
/// every call site marks its parent input modified.
///
/// ```
/// use popxl::{ops, Tensor};
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(1.0f32, "x").unwrap();
/// let g = ir.create_graph(|| -> popxl::Result<()> {
///     let t = popxl::graph_input_by_ref([], popxl::float32, "t")?;
///     ops::add_(&t, &popxl::constant(1.0f32, "one")?)?;
///     Ok(())
/// }, ()).unwrap();
/// let info = ops::call_with_info(&g, &[&x], &[]).unwrap();
/// assert_eq!(info.modified_inputs().unwrap(), vec![0]);
/// ```
pub fn graph_input_by_ref(shape: impl Into<Vec<usize>>, dtype: DataType, name: &str) -> Result<Tensor> {
    let graph = current("graph_input_by_ref")?;
    graph_input_in_by(&graph, TensorInfo::new(dtype, shape), name, true)
}

pub(crate) fn graph_input_in(graph: &Graph, info: TensorInfo, name: &str) -> Result<Tensor> {
    graph_input_in_by(graph, info, name, false)
}

pub(crate) fn graph_input_in_by(graph: &Graph, info: TensorInfo, name: &str, by_ref: bool) -> Result<Tensor> {
    let state = graph.state()?;
    let mut st = state.borrow_mut();
    let ir = st.building("graph_input")?;
    if ir.main_graph_id() == graph.id {
        return Err(PopXlError::GraphInputInMainGraph { name: name.to_string() });
    }
    let g = ir.graph_mut(graph.id)?;
    let unique = g.unique_tensor_name(&context::scoped(name_or(name, "input")));
    let id = g.add_input(&unique, info)?;
    let t = Tensor::from_core(graph, g.tensor(id)?);
    if by_ref {
        st.by_ref.insert((graph.id, id));
    }
    Ok(t)
}

/// Append `t` to the outputs of its graph, the current graph (PopXL's `popxl.graph_output`).
/// Graph functions usually return their outputs instead.
///
/// ```
/// use popxl::Tensor;
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(1.0f32, "x").unwrap();
/// let g = ir.create_graph(|x: Tensor| popxl::graph_output(&(-&x)), &x).unwrap();
/// assert_eq!(g.outputs().unwrap().len(), 1);
/// ```
pub fn graph_output(t: &Tensor) -> Result<()> {
    let graph = context::try_current_graph().unwrap_or_else(|| t.graph());
    check_in_graph(t, &graph, "graph_output")?;
    let state = graph.state()?;
    let mut st = state.borrow_mut();
    st.building("graph_output")?.graph_mut(graph.id)?.add_output(t.tensor_id())?;
    Ok(())
}
