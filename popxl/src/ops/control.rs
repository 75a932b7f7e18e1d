//! Subgraph ops: `call`, `call_with_info` ([`CallSiteInfo`]) and `repeat`
//! (`conditional` is in its own file).

use popart_ir::ops::all as ir_ops;
use std::fmt;

use popart_ir::ops::control::{CallAttrs, RepeatAttrs};
use popart_ir::{Attributes, Op, OpAttrs, OpDef, OpId, TensorInfo};

use super::{target_graph, OpBuilder};
use crate::tensor::check_in_graph;
use crate::{Graph, PopXlError, Result, Tensor};

/// Check `called` can be called from `parent`.
fn check_callable(called: &Graph, parent: &Graph, what: &str) -> Result<()> {
    if called.ir_id != parent.ir_id {
        return Err(PopXlError::ForeignIr { name: called.name().to_string(), what: what.to_string() });
    }
    if called.id == parent.id {
        return Err(PopXlError::RecursiveCall { graph: called.name().to_string() });
    }
    Ok(())
}

/// The parent tensor for every input of `called`, in input order, from the
/// positional `inputs` and the `inputs_dict` pairs (subgraph input, parent tensor).
pub(super) fn resolve_inputs(
    called: &Graph,
    parent: &Graph,
    inputs: &[&Tensor],
    inputs_dict: &[(&Tensor, &Tensor)],
    what: &str,
) -> Result<Vec<Tensor>> {
    check_callable(called, parent, what)?;
    let graph_inputs = called.inputs()?;
    let n = graph_inputs.len();
    if inputs.len() > n {
        return Err(PopXlError::TooManyCallInputs {
            graph: called.name().to_string(),
            expected: n,
            given: inputs.len(),
            extra: inputs[n..].iter().map(|t| t.name().to_string()).collect(),
        });
    }
    let mut slots: Vec<Option<Tensor>> = vec![None; n];
    for (slot, t) in slots.iter_mut().zip(inputs) {
        *slot = Some((*t).clone());
    }
    for (key, value) in inputs_dict {
        let Some(i) = graph_inputs.iter().position(|g| g == *key) else {
            return Err(PopXlError::NotAGraphInput {
                tensor: key.name().to_string(),
                tensor_graph: key.graph().name().to_string(),
                graph: called.name().to_string(),
            });
        };
        if slots[i].is_some() {
            return Err(PopXlError::DuplicateCallInput {
                graph: called.name().to_string(),
                input: key.name().to_string(),
            });
        }
        slots[i] = Some((*value).clone());
    }
    let missing: Vec<String> =
        slots.iter().zip(&graph_inputs).filter(|(s, _)| s.is_none()).map(|(_, g)| g.name().to_string()).collect();
    if !missing.is_empty() {
        return Err(PopXlError::MissingCallInputs { graph: called.name().to_string(), missing });
    }
    // Every slot is filled (checked above).
    let parents: Vec<Tensor> = slots.into_iter().flatten().collect();
    for (p, g) in parents.iter().zip(&graph_inputs) {
        check_in_graph(p, parent, what)?;
        if p.info() != g.info() {
            return Err(PopXlError::CallInputMismatch {
                graph: called.name().to_string(),
                input: g.name().to_string(),
                expected: Box::new(g.spec()),
                parent: p.name().to_string(),
                got: Box::new(p.spec()),
            });
        }
    }
    Ok(parents)
}

/// The graph a call-like op goes into.
fn parent_graph(inputs: &[&Tensor], inputs_dict: &[(&Tensor, &Tensor)], what: &str) -> Result<Graph> {
    let all: Vec<&Tensor> = inputs.iter().copied().chain(inputs_dict.iter().map(|(_, p)| *p)).collect();
    target_graph(&all, what)
}

/// Call `graph` once (op `Call`; PopXL's `ops.call`) and return its outputs.
///
/// `inputs` feed the graph inputs in order; `inputs_dict` pairs (subgraph input,
/// parent tensor) give the rest, e.g. inputs created by [`crate::graph_input`].
/// Missing, extra or duplicate inputs, inputs of the wrong shape or type and
/// tensors of another graph or IR are errors naming the culprit. Inputs are
/// passed by value: the parent does not see in-place changes unless marked with
/// [`CallSiteInfo::set_parent_input_modified`].
///
/// ```
/// use popxl::{ops, Ir, Tensor};
/// let ir = Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
/// let value = popxl::variable(vec![1.0f32, 1.0], "value").unwrap();
/// let mut value_input = None;
/// let g = ir.create_graph(|x: Tensor| -> popxl::Result<Tensor> {
///     let v = popxl::graph_input(x.shape(), x.dtype(), "value")?;
///     value_input = Some(v.clone());
///     Ok(&x + &v)
/// }, &x).unwrap();
/// let o1 = ops::call(&g, &[&x, &value], &[]).unwrap();
/// let o2 = ops::call(&g, &[&o1[0]], &[(value_input.as_ref().unwrap(), &value)]).unwrap();
/// assert_eq!(o2[0].shape(), &[2]);
/// assert!(ops::call(&g, &[&x], &[]).is_err()); // `value` is missing
/// ```
pub fn call(graph: &Graph, inputs: &[&Tensor], inputs_dict: &[(&Tensor, &Tensor)]) -> Result<Vec<Tensor>> {
    Ok(create_call(graph, inputs, inputs_dict, "call")?.outputs)
}

fn create_call(
    graph: &Graph,
    inputs: &[&Tensor],
    inputs_dict: &[(&Tensor, &Tensor)],
    what: &'static str,
) -> Result<super::CreatedOp> {
    let parent = parent_graph(inputs, inputs_dict, what)?;
    let parents = resolve_inputs(graph, &parent, inputs, inputs_dict, what)?;
    let modified = by_ref_inputs(graph)?;
    let mut spec = OpBuilder::new(what, &ir_ops::Call).typed(&CallAttrs { graph: graph.id, modified }).in_graph(parent);
    for (i, p) in parents.iter().enumerate() {
        spec = spec.input(super::input_index(i, what)?, p);
    }
    spec.create()
}

/// Positions of `graph`'s inputs passed by reference.
fn by_ref_inputs(graph: &Graph) -> Result<Vec<i64>> {
    let state = graph.state()?;
    let st = state.borrow();
    let g = st.ir.graph(graph.id)?;
    let mut v = Vec::new();
    for (k, &t) in g.inputs().iter().enumerate() {
        if st.by_ref.contains(&(graph.id, t)) {
            v.push(super::to_i64(k, || "by-ref input position".to_string())?);
        }
    }
    Ok(v)
}

/// [`call`], returning a [`CallSiteInfo`] describing the call site (PopXL's `ops.call_with_info`).
///
/// ```
/// use popxl::{ops, Ir, Tensor};
/// let ir = Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(1.0f32, "x").unwrap();
/// let g = ir.create_graph(|x: Tensor| -x, &x).unwrap();
/// let info = ops::call_with_info(&g, &[&x], &[]).unwrap();
/// assert_eq!(info.called_graph(), g);
/// assert_eq!(info.parent_input(0).unwrap(), x);
/// assert_eq!(info.outputs().unwrap().len(), 1);
/// ```
pub fn call_with_info(graph: &Graph, inputs: &[&Tensor], inputs_dict: &[(&Tensor, &Tensor)]) -> Result<CallSiteInfo> {
    let created = create_call(graph, inputs, inputs_dict, "call_with_info")?;
    Ok(CallSiteInfo { parent: created.graph, op: created.op, called: graph.clone() })
}

/// A call site: the `Call` op, its graph and the graph it calls (PopXL's `CallSiteInfo`).
///
/// Maps between the parent's tensors and the called graph's inputs and outputs,
/// and marks inputs as modified (the call's in-place changes become visible
/// in the parent).
///
/// ```
/// use popxl::{ops, Ir, Tensor};
/// let ir = Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(1.0f32, "x").unwrap();
/// let g = ir.create_graph(|x: Tensor| -x, &x).unwrap();
/// let info = ops::call_with_info(&g, &[&x], &[]).unwrap();
/// let gx = info.parent_to_graph(&x).unwrap();
/// assert_eq!(gx, g.inputs().unwrap()[0]);
/// assert_eq!(info.graph_to_parent(&gx).unwrap(), x);
/// let out = info.parent_output(0).unwrap();
/// assert_eq!(info.graph_to_parent(&g.outputs().unwrap()[0]).unwrap(), out);
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct CallSiteInfo {
    parent: Graph,
    op: OpId,
    called: Graph,
}

impl fmt::Debug for CallSiteInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CallSiteInfo({} calls {})", self.parent.name(), self.called.name())
    }
}

impl CallSiteInfo {
    /// A call site from an existing `Call` op of `graph` (for transforms).
    ///
    /// ```
    /// use popxl::{ops, Tensor};
    /// let ir = popxl::Ir::new();
    /// let main = ir.main_graph();
    /// let _g = main.enter();
    /// let x = popxl::variable(1.0f32, "x").unwrap();
    /// let g = ir.create_graph(|x: Tensor| -x, &x).unwrap();
    /// let info = ops::call_with_info(&g, &[&x], &[]).unwrap();
    /// let again = popxl::ops::CallSiteInfo::from_op(&main, info.op_id()).unwrap();
    /// assert_eq!(again, info);
    /// ```
    pub fn from_op(graph: &Graph, op: OpId) -> Result<CallSiteInfo> {
        let called = graph.read(|g| -> Result<_> {
            let o = g.op(op)?;
            if !o.is::<ir_ops::Call>() {
                return Err(PopXlError::WrongOpType {
                    op: o.name.clone(),
                    op_type: o.op_type().to_string(),
                    expected: "Call",
                });
            }
            Ok(CallAttrs::of(o)?.graph)
        })??;
        let called = graph.ir()?.graph_handle(called);
        Ok(CallSiteInfo { parent: graph.clone(), op, called })
    }

    /// The graph being called.
    ///
    /// ```
    /// # use popxl::{ops, Tensor};
    /// # let ir = popxl::Ir::new();
    /// # let _g = ir.main_graph().enter();
    /// # let x = popxl::variable(1.0f32, "x").unwrap();
    /// let g = ir.create_graph(|x: Tensor| -x, &x).unwrap();
    /// assert_eq!(ops::call_with_info(&g, &[&x], &[]).unwrap().called_graph(), g);
    /// ```
    pub fn called_graph(&self) -> Graph {
        self.called.clone()
    }

    /// The graph containing the call op (the parent).
    ///
    /// ```
    /// # use popxl::{ops, Tensor};
    /// # let ir = popxl::Ir::new();
    /// # let _g = ir.main_graph().enter();
    /// # let x = popxl::variable(1.0f32, "x").unwrap();
    /// # let g = ir.create_graph(|x: Tensor| -x, &x).unwrap();
    /// assert_eq!(ops::call_with_info(&g, &[&x], &[]).unwrap().graph(), ir.main_graph());
    /// ```
    pub fn graph(&self) -> Graph {
        self.parent.clone()
    }

    /// The id of the `Call` op in [`CallSiteInfo::graph`].
    ///
    /// ```
    /// # use popxl::{ops, Tensor};
    /// # let ir = popxl::Ir::new();
    /// # let _g = ir.main_graph().enter();
    /// # let x = popxl::variable(1.0f32, "x").unwrap();
    /// # let g = ir.create_graph(|x: Tensor| -x, &x).unwrap();
    /// let info = ops::call_with_info(&g, &[&x], &[]).unwrap();
    /// let ty = ir.with_ir(|core| core.main_graph().op(info.op_id()).unwrap().op_type());
    /// assert_eq!(ty, "Call");
    /// ```
    pub fn op_id(&self) -> OpId {
        self.op
    }

    fn op_tensors(&self, outputs: bool) -> Result<Vec<Tensor>> {
        let st = self.parent.state()?;
        let st = st.borrow();
        let g = st.ir.graph(self.parent.id)?;
        let op = g.op(self.op)?;
        let map = if outputs { op.outputs() } else { op.inputs() };
        map.tensors().map(|t| Ok(Tensor::from_core(&self.parent, g.tensor(t)?))).collect()
    }

    /// The parent tensors passed as inputs, in graph-input order.
    ///
    /// ```
    /// # use popxl::{ops, Tensor};
    /// # let ir = popxl::Ir::new();
    /// # let _g = ir.main_graph().enter();
    /// # let x = popxl::variable(1.0f32, "x").unwrap();
    /// # let g = ir.create_graph(|x: Tensor| -x, &x).unwrap();
    /// assert_eq!(ops::call_with_info(&g, &[&x], &[]).unwrap().inputs().unwrap(), vec![x]);
    /// ```
    pub fn inputs(&self) -> Result<Vec<Tensor>> {
        self.op_tensors(false)
    }

    /// The parent tensors holding the outputs, in graph-output order.
    ///
    /// ```
    /// # use popxl::{ops, Tensor};
    /// # let ir = popxl::Ir::new();
    /// # let _g = ir.main_graph().enter();
    /// # let x = popxl::variable(1.0f32, "x").unwrap();
    /// # let g = ir.create_graph(|x: Tensor| -x, &x).unwrap();
    /// assert_eq!(ops::call_with_info(&g, &[&x], &[]).unwrap().outputs().unwrap()[0].shape(), x.shape());
    /// ```
    pub fn outputs(&self) -> Result<Vec<Tensor>> {
        self.op_tensors(true)
    }

    /// The parent tensor passed as graph input `index`.
    ///
    /// ```
    /// # use popxl::{ops, Tensor};
    /// # let ir = popxl::Ir::new();
    /// # let _g = ir.main_graph().enter();
    /// # let x = popxl::variable(1.0f32, "x").unwrap();
    /// # let g = ir.create_graph(|x: Tensor| -x, &x).unwrap();
    /// let info = ops::call_with_info(&g, &[&x], &[]).unwrap();
    /// assert_eq!(info.parent_input(0).unwrap(), x);
    /// assert!(info.parent_input(1).is_err());
    /// ```
    pub fn parent_input(&self, index: usize) -> Result<Tensor> {
        let v = self.inputs()?;
        let len = v.len();
        v.into_iter().nth(index).ok_or(PopXlError::IndexOutOfRange { what: "call input".into(), index, len })
    }

    /// The parent tensor holding graph output `index`.
    ///
    /// ```
    /// # use popxl::{ops, Tensor};
    /// # let ir = popxl::Ir::new();
    /// # let _g = ir.main_graph().enter();
    /// # let x = popxl::variable(1.0f32, "x").unwrap();
    /// # let g = ir.create_graph(|x: Tensor| -x, &x).unwrap();
    /// let info = ops::call_with_info(&g, &[&x], &[]).unwrap();
    /// assert_eq!(info.parent_output(0).unwrap(), info.outputs().unwrap()[0]);
    /// ```
    pub fn parent_output(&self, index: usize) -> Result<Tensor> {
        let v = self.outputs()?;
        let len = v.len();
        v.into_iter().nth(index).ok_or(PopXlError::IndexOutOfRange { what: "call output".into(), index, len })
    }

    fn not_here(&self, t: &Tensor) -> PopXlError {
        let op =
            self.parent.read(|g| g.op(self.op).map(|o| o.name.clone())).ok().and_then(|r| r.ok()).unwrap_or_default();
        PopXlError::NotACallSiteTensor { tensor: t.name().to_string(), graph: self.called.name().to_string(), op }
    }

    /// The called graph's input (or output) connected to parent tensor `t`
    /// (an input, or an output, of the call).
    ///
    /// ```
    /// # use popxl::{ops, Tensor};
    /// # let ir = popxl::Ir::new();
    /// # let _g = ir.main_graph().enter();
    /// # let x = popxl::variable(1.0f32, "x").unwrap();
    /// # let g = ir.create_graph(|x: Tensor| -x, &x).unwrap();
    /// let info = ops::call_with_info(&g, &[&x], &[]).unwrap();
    /// assert_eq!(info.parent_to_graph(&x).unwrap().graph(), g);
    /// ```
    pub fn parent_to_graph(&self, t: &Tensor) -> Result<Tensor> {
        if let Some(i) = self.inputs()?.iter().position(|p| p == t) {
            return Ok(self.called.inputs()?.swap_remove(i));
        }
        if let Some(i) = self.outputs()?.iter().position(|p| p == t) {
            return Ok(self.called.outputs()?.swap_remove(i));
        }
        Err(self.not_here(t))
    }

    /// The parent tensor connected to `t`, an input or output of the called graph.
    ///
    /// ```
    /// # use popxl::{ops, Tensor};
    /// # let ir = popxl::Ir::new();
    /// # let _g = ir.main_graph().enter();
    /// # let x = popxl::variable(1.0f32, "x").unwrap();
    /// # let g = ir.create_graph(|x: Tensor| -x, &x).unwrap();
    /// let info = ops::call_with_info(&g, &[&x], &[]).unwrap();
    /// assert_eq!(info.graph_to_parent(&g.inputs().unwrap()[0]).unwrap(), x);
    /// ```
    pub fn graph_to_parent(&self, t: &Tensor) -> Result<Tensor> {
        if let Some(i) = self.called.inputs()?.iter().position(|g| g == t) {
            return self.parent_input(i);
        }
        if let Some(i) = self.called.outputs()?.iter().position(|g| g == t) {
            return self.parent_output(i);
        }
        Err(self.not_here(t))
    }

    /// Index of the call input `t` is connected to: `t` is a parent tensor
    /// passed to the call or an input of the called graph.
    fn input_index(&self, t: &Tensor) -> Result<usize> {
        let pos = if t.graph() == self.called {
            self.called.inputs()?.iter().position(|g| g == t)
        } else {
            self.inputs()?.iter().position(|p| p == t)
        };
        pos.ok_or_else(|| self.not_here(t))
    }

    /// Mark the call input connected to `t` as modified: the called graph's
    /// in-place changes to it become visible in the parent after the call.
    /// `t` is the parent tensor or the called graph's input.
    ///
    /// ```
    /// use popxl::{ops, Tensor};
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let x = popxl::variable(1.0f32, "x").unwrap();
    /// let one = popxl::constant(1.0f32, "one").unwrap();
    /// let g = ir.create_graph(|mut x: Tensor, v: Tensor| { x += &v; }, (&x, &one)).unwrap();
    /// let info = ops::call_with_info(&g, &[&x, &one], &[]).unwrap();
    /// info.set_parent_input_modified(&x).unwrap();
    /// assert_eq!(info.modified_inputs().unwrap(), vec![0]);
    /// ```
    pub fn set_parent_input_modified(&self, t: &Tensor) -> Result<()> {
        let i = super::to_i64(self.input_index(t)?, || format!("input index of tensor `{}`", t.name()))?;
        let st = self.parent.state()?;
        let mut st = st.borrow_mut();
        let g = st.building("set_parent_input_modified")?.graph_mut(self.parent.id)?;
        let op = g.op(self.op)?;
        let mut modified = modified_of(op)?;
        if !modified.contains(&i) {
            modified.push(i);
            modified.sort_unstable();
        }
        let attrs = with_modified(op, modified)?;
        *g.op_attrs_mut(self.op)? = attrs;
        Ok(())
    }

    /// Indices of the call inputs marked modified, sorted.
    ///
    /// ```
    /// # use popxl::{ops, Tensor};
    /// # let ir = popxl::Ir::new();
    /// # let _g = ir.main_graph().enter();
    /// # let x = popxl::variable(1.0f32, "x").unwrap();
    /// # let g = ir.create_graph(|x: Tensor| -x, &x).unwrap();
    /// assert!(ops::call_with_info(&g, &[&x], &[]).unwrap().modified_inputs().unwrap().is_empty());
    /// ```
    pub fn modified_inputs(&self) -> Result<Vec<usize>> {
        self.parent.read(|g| -> Result<Vec<usize>> {
            let modified = modified_of(g.op(self.op)?)?;
            // Negative indices (only from hand-written IR text) name no input.
            Ok(modified.into_iter().filter_map(|i| usize::try_from(i).ok()).collect())
        })?
    }
}

/// The `modified` inputs of a call site's op (a `Repeat`, else a `Call`).
fn modified_of(op: &Op) -> Result<Vec<i64>> {
    Ok(if op.op_type() == ir_ops::Repeat.op_type() {
        RepeatAttrs::of(op)?.modified
    } else {
        CallAttrs::of(op)?.modified
    })
}

/// The attributes of a call site's op with `modified` replaced.
fn with_modified(op: &Op, modified: Vec<i64>) -> Result<Attributes> {
    Ok(if op.op_type() == ir_ops::Repeat.op_type() {
        RepeatAttrs { modified, ..RepeatAttrs::of(op)? }.to_attrs()
    } else {
        CallAttrs { modified, ..CallAttrs::of(op)? }.to_attrs()
    })
}

/// Call `graph` `count` times in a loop (op `Repeat`; PopXL's `ops.repeat`).
///
/// Inputs (positional and `inputs_dict`) are loop-carried: copied into the graph
/// inputs before the first iteration; after each iteration, output k becomes
/// input k of the next; the outputs of the last iteration are returned. Inputs
/// beyond the number of outputs keep their value. `count` must be greater than 0
/// (else [`PopXlError::RepeatCountZero`]) and at most `i64::MAX` (else
/// [`PopXlError::RepeatCountTooLarge`]), and the graph needs at least as many inputs as outputs, with output k of the
/// same shape and type as input k.
///
/// ```
/// use popxl::{ops, Ir, Tensor};
/// let ir = Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(vec![1.0f32, 1.0], "x").unwrap();
/// let value = popxl::variable(vec![1.0f32, 1.0], "value").unwrap();
/// let g = ir.create_graph(|x: Tensor, v: Tensor| &x + &v, (&x, &value)).unwrap();
/// let o = ops::repeat(&g, 2, &[&x, &value], &[]).unwrap();
/// assert_eq!(o.len(), 1);
/// assert!(ops::repeat(&g, 0, &[&x, &value], &[]).is_err());
/// ```
pub fn repeat(
    graph: &Graph,
    count: usize,
    inputs: &[&Tensor],
    inputs_dict: &[(&Tensor, &Tensor)],
) -> Result<Vec<Tensor>> {
    Ok(create_repeat(graph, count, inputs, inputs_dict)?.outputs)
}

fn create_repeat(
    graph: &Graph,
    count: usize,
    inputs: &[&Tensor],
    inputs_dict: &[(&Tensor, &Tensor)],
) -> Result<super::CreatedOp> {
    // The IR's `Repeat` inference runs the same checks; running them first
    // reports them as typed errors, before the inputs are resolved.
    let count =
        i64::try_from(count).map_err(|_| PopXlError::RepeatCountTooLarge { graph: graph.name().to_string(), count })?;
    ir_ops::check_repeat_count(count).map_err(|e| control_flow_error(e, graph))?;
    graph.read(ir_ops::check_repeat_body)?.map_err(|e| control_flow_error(e, graph))?;
    // By-reference inputs are written through to the caller in every iteration (as
    // PopXL marks them modified at the loop's call site); a loop-carried input takes
    // the previous iteration's output instead, so it cannot be one.
    let by_ref = by_ref_inputs(graph)?;
    let carried = graph.read(|g| g.outputs().len())?;
    if let Some(&k) = by_ref.iter().find(|&&k| usize::try_from(k).is_ok_and(|k| k < carried)) {
        return Err(PopXlError::ByRefInRepeat { graph: graph.name().to_string(), input: k });
    }
    let parent = parent_graph(inputs, inputs_dict, "repeat")?;
    let parents = resolve_inputs(graph, &parent, inputs, inputs_dict, "repeat")?;
    let mut spec = OpBuilder::new("repeat", &ir_ops::Repeat)
        .typed(&RepeatAttrs { graph: graph.id, count, modified: by_ref })
        .in_graph(parent);
    for (i, p) in parents.iter().enumerate() {
        spec = spec.input(super::input_index(i, "repeat")?, p);
    }
    spec.create()
}

/// [`repeat`], returning the call site's [`CallSiteInfo`] (PopXL's
/// `ops.repeat_with_info`): the `Repeat` op, its parent graph and the body.
///
/// ```
/// use popxl::{ops, Ir, Tensor};
/// let ir = Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(1.0f32, "x").unwrap();
/// let g = ir.create_graph(|x: Tensor| &x * 2.0, &x).unwrap();
/// let info = ops::repeat_with_info(&g, 3, &[&x], &[]).unwrap();
/// assert_eq!(info.called_graph(), g);
/// assert_eq!(info.parent_input(0).unwrap(), x);
/// assert_eq!(info.outputs().unwrap().len(), 1);
/// ```
pub fn repeat_with_info(
    graph: &Graph,
    count: usize,
    inputs: &[&Tensor],
    inputs_dict: &[(&Tensor, &Tensor)],
) -> Result<CallSiteInfo> {
    let created = create_repeat(graph, count, inputs, inputs_dict)?;
    Ok(CallSiteInfo { parent: created.graph, op: created.op, called: graph.clone() })
}

/// The typed error of a failed IR control-flow check (`graph` is the repeated graph).
pub(super) fn control_flow_error(e: ir_ops::ControlFlowError, graph: &Graph) -> PopXlError {
    use ir_ops::ControlFlowError as E;
    match e {
        E::RepeatCount { .. } => PopXlError::RepeatCountZero { graph: graph.name().to_string() },
        E::RepeatFewerInputs { graph, inputs, outputs } => {
            PopXlError::RepeatFewerInputsThanOutputs { graph, inputs, outputs }
        }
        E::RepeatCarriedMismatch { graph, index, input, output } => {
            PopXlError::RepeatCarriedMismatch { graph, index, input: input.into(), output: output.into() }
        }
        E::BranchOutputsMismatch { then_graph, else_graph, then_outputs, else_outputs } => {
            let show = |v: &[TensorInfo]| v.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
            PopXlError::BranchOutputsMismatch {
                then_graph,
                else_graph,
                then_outputs: show(&then_outputs),
                else_outputs: show(&else_outputs),
            }
        }
    }
}
