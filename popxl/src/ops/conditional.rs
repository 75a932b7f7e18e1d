//! `conditional` (op `If`): run one of two graphs by a bool scalar, and
//! [`ConditionalSiteInfo`] for its call site.

use std::fmt;

use popart_ir::ops::all as ir_ops;
use popart_ir::ops::control::IfAttrs;
use popart_ir::{OpAttrs, OpId};

use super::control::{control_flow_error, resolve_inputs};
use super::{target_graph, OpBuilder};
use crate::{Graph, PopXlError, Result, Tensor};

/// One branch of [`conditional_branches`]: a graph and its inputs.
///
/// ```
/// use popxl::{ops::Branch, Tensor};
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(1.0f32, "x").unwrap();
/// let g = ir.create_graph(|x: Tensor| -x, &x).unwrap();
/// let inputs = [&x];
/// let b = Branch::new(&g, &inputs);
/// assert_eq!(b.inputs.len(), 1);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Branch<'a> {
    /// The graph run by this branch.
    pub graph: &'a Graph,
    /// Positional inputs.
    pub inputs: &'a [&'a Tensor],
    /// (subgraph input, parent tensor) pairs.
    pub inputs_dict: &'a [(&'a Tensor, &'a Tensor)],
}

impl<'a> Branch<'a> {
    /// A branch with positional inputs only.
    ///
    /// ```
    /// # use popxl::{ops::Branch, Tensor};
    /// # let ir = popxl::Ir::new();
    /// # let g = ir.create_empty_graph("g").unwrap();
    /// let b = Branch::new(&g, &[]);
    /// assert!(b.inputs_dict.is_empty());
    /// ```
    pub fn new(graph: &'a Graph, inputs: &'a [&'a Tensor]) -> Self {
        Branch { graph, inputs, inputs_dict: &[] }
    }

    /// The same branch with `inputs_dict`.
    ///
    /// ```
    /// # use popxl::{ops::Branch, Tensor};
    /// # let ir = popxl::Ir::new();
    /// # let g = ir.create_empty_graph("g").unwrap();
    /// let b = Branch::new(&g, &[]).with_inputs_dict(&[]);
    /// assert!(b.inputs.is_empty());
    /// ```
    pub fn with_inputs_dict(mut self, inputs_dict: &'a [(&'a Tensor, &'a Tensor)]) -> Self {
        self.inputs_dict = inputs_dict;
        self
    }
}

/// Run `then_graph` if the bool scalar `condition` is true, else `else_graph`
/// (op `If`; PopXL's `ops.conditional`), and return the outputs of the branch
/// that ran. Both branches must have the same output shapes and types.
///
/// `inputs` are passed positionally to both branches; each `inputs_dict` pair
/// goes to the branch owning its subgraph tensor.
///
/// ```
/// use popxl::{ops, Ir, Tensor};
/// let ir = Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
/// let c = popxl::variable(true, "c").unwrap();
/// let then_g = ir.create_graph(|x: Tensor| &x * 2.0, &x).unwrap();
/// let else_g = ir.create_graph(|x: Tensor| -x, &x).unwrap();
/// let y = ops::conditional(&c, &then_g, &else_g, &[&x], &[]).unwrap();
/// assert_eq!(y[0].shape(), &[2]);
/// ```
pub fn conditional(
    condition: &Tensor,
    then_graph: &Graph,
    else_graph: &Graph,
    inputs: &[&Tensor],
    inputs_dict: &[(&Tensor, &Tensor)],
) -> Result<Vec<Tensor>> {
    let (mut then_dict, mut else_dict) = (Vec::new(), Vec::new());
    for &(k, v) in inputs_dict {
        if k.graph() == *then_graph {
            then_dict.push((k, v));
        } else if k.graph() == *else_graph {
            else_dict.push((k, v));
        } else {
            return Err(PopXlError::NotAGraphInput {
                tensor: k.name().to_string(),
                tensor_graph: k.graph().name().to_string(),
                graph: format!("{}` or `{}", then_graph.name(), else_graph.name()),
            });
        }
    }
    conditional_branches(
        condition,
        Branch { graph: then_graph, inputs, inputs_dict: &then_dict },
        Branch { graph: else_graph, inputs, inputs_dict: &else_dict },
    )
}

/// [`conditional`] with separate inputs per branch (PopXL's `then_inputs` /
/// `else_inputs` and their dicts).
///
/// ```
/// use popxl::{ops::{self, Branch}, Ir, Tensor};
/// let ir = Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(1.0f32, "x").unwrap();
/// let y = popxl::variable(2.0f32, "y").unwrap();
/// let c = popxl::variable(false, "c").unwrap();
/// let then_g = ir.create_graph(|x: Tensor| -x, &x).unwrap();
/// let else_g = ir.create_graph(|a: Tensor, b: Tensor| &a + &b, (&x, &y)).unwrap();
/// let out = ops::conditional_branches(&c, Branch::new(&then_g, &[&y]), Branch::new(&else_g, &[&x, &y])).unwrap();
/// assert_eq!(out.len(), 1);
/// ```
pub fn conditional_branches(
    condition: &Tensor,
    then_branch: Branch<'_>,
    else_branch: Branch<'_>,
) -> Result<Vec<Tensor>> {
    conditional_with_info(condition, then_branch, else_branch)?.outputs()
}

/// [`conditional_branches`], returning the call site ([`ConditionalSiteInfo`])
/// instead of the outputs (PopXL's `conditional_with_info`).
///
/// ```
/// use popxl::{ops::{self, Branch}, Ir, Tensor};
/// let ir = Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(1.0f32, "x").unwrap();
/// let c = popxl::variable(true, "c").unwrap();
/// let then_g = ir.create_graph(|x: Tensor| -x, &x).unwrap();
/// let else_g = ir.create_graph(|x: Tensor| &x * 2.0, &x).unwrap();
/// let info = ops::conditional_with_info(&c, Branch::new(&then_g, &[&x]), Branch::new(&else_g, &[&x])).unwrap();
/// assert_eq!(info.called_graphs(), (then_g.clone(), else_g));
/// assert_eq!(info.condition().unwrap(), c);
/// assert_eq!(info.parent_to_graph(&x).unwrap(), then_g.inputs().unwrap()[0]);
/// let y = info.parent_output(0).unwrap();
/// assert_eq!(info.graph_to_parent(&then_g.outputs().unwrap()[0]).unwrap(), y);
/// ```
pub fn conditional_with_info(
    condition: &Tensor,
    then_branch: Branch<'_>,
    else_branch: Branch<'_>,
) -> Result<ConditionalSiteInfo> {
    let mut all: Vec<&Tensor> = vec![condition];
    for b in [&then_branch, &else_branch] {
        all.extend(b.inputs.iter().copied());
        all.extend(b.inputs_dict.iter().map(|(_, p)| *p));
    }
    let parent = target_graph(&all, "conditional")?;
    let then_parents =
        resolve_inputs(then_branch.graph, &parent, then_branch.inputs, then_branch.inputs_dict, "conditional")?;
    let else_parents =
        resolve_inputs(else_branch.graph, &parent, else_branch.inputs, else_branch.inputs_dict, "conditional")?;
    // The IR's `If` inference runs the same check; running it first reports it as a typed error.
    then_branch
        .graph
        .read(|t| else_branch.graph.read(|e| ir_ops::check_branch_outputs(t, e)))??
        .map_err(|e| control_flow_error(e, then_branch.graph))?;
    // Op input 0 is the condition; each distinct parent tensor is connected once.
    let mut then_idx = Vec::new();
    let mut else_idx = Vec::new();
    let mut order: Vec<&Tensor> = vec![condition];
    for t in &then_parents {
        then_idx.push(position_or_push(&mut order, t)?);
    }
    for t in &else_parents {
        else_idx.push(position_or_push(&mut order, t)?);
    }
    let mut spec = OpBuilder::new("conditional", &ir_ops::If)
        .typed(&IfAttrs {
            then_graph: then_branch.graph.id,
            else_graph: else_branch.graph.id,
            then_inputs: then_idx,
            else_inputs: else_idx,
        })
        .in_graph(parent);
    for (i, t) in order.iter().enumerate() {
        spec = spec.input(super::input_index(i, "conditional")?, t);
    }
    let created = spec.create()?;
    Ok(ConditionalSiteInfo {
        parent: created.graph,
        op: created.op,
        then_graph: then_branch.graph.clone(),
        else_graph: else_branch.graph.clone(),
    })
}

/// A `conditional` call site (PopXL's `ConditionalSiteInfo`): the `If` op, its
/// parent graph and its two branch graphs. Op input 0 is the condition; each
/// distinct parent tensor passed to either branch is one op input after it;
/// op output `i` is output `i` of the branch that ran.
#[derive(Clone, PartialEq, Eq)]
pub struct ConditionalSiteInfo {
    parent: Graph,
    op: OpId,
    then_graph: Graph,
    else_graph: Graph,
}

impl fmt::Debug for ConditionalSiteInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ConditionalSiteInfo({} runs {} or {})",
            self.parent.name(),
            self.then_graph.name(),
            self.else_graph.name()
        )
    }
}

impl ConditionalSiteInfo {
    /// The `(then, else)` branch graphs (PopXL's `called_graph`).
    pub fn called_graphs(&self) -> (Graph, Graph) {
        (self.then_graph.clone(), self.else_graph.clone())
    }

    /// The graph containing the `If` op.
    pub fn graph(&self) -> Graph {
        self.parent.clone()
    }

    /// The id of the `If` op in [`ConditionalSiteInfo::graph`].
    pub fn op_id(&self) -> OpId {
        self.op
    }

    /// Read the op: its input tensors (condition first), output tensors and the
    /// op input index of each then/else graph input.
    fn read_op<R>(&self, f: impl FnOnce(&[Tensor], &[Tensor], &[i64], &[i64]) -> R) -> Result<R> {
        let st = self.parent.state()?;
        let st = st.borrow();
        let g = st.ir.graph(self.parent.id)?;
        let op = g.op(self.op)?;
        let wrap = |m: &popart_ir::TensorIndexMap| -> Result<Vec<Tensor>> {
            m.tensors().map(|t| Ok(Tensor::from_core(&self.parent, g.tensor(t)?))).collect()
        };
        let (ins, outs) = (wrap(op.inputs())?, wrap(op.outputs())?);
        let attrs = IfAttrs::of(op)?;
        Ok(f(&ins, &outs, &attrs.then_inputs, &attrs.else_inputs))
    }

    /// The bool condition tensor (op input 0).
    pub fn condition(&self) -> Result<Tensor> {
        self.parent_input(0)
    }

    /// The op's parent input tensors: the condition, then each distinct branch input.
    pub fn inputs(&self) -> Result<Vec<Tensor>> {
        self.read_op(|ins, _, _, _| ins.to_vec())
    }

    /// The parent tensors holding the outputs of the branch that ran.
    pub fn outputs(&self) -> Result<Vec<Tensor>> {
        self.read_op(|_, outs, _, _| outs.to_vec())
    }

    /// Op input `index` (0 is the condition); out of range is
    /// [`PopXlError::IndexOutOfRange`].
    pub fn parent_input(&self, index: usize) -> Result<Tensor> {
        let ins = self.inputs()?;
        let len = ins.len();
        ins.into_iter().nth(index).ok_or_else(|| PopXlError::IndexOutOfRange {
            what: "conditional inputs".into(),
            index,
            len,
        })
    }

    /// Op output `index`; out of range is [`PopXlError::IndexOutOfRange`].
    pub fn parent_output(&self, index: usize) -> Result<Tensor> {
        let outs = self.outputs()?;
        let len = outs.len();
        outs.into_iter().nth(index).ok_or_else(|| PopXlError::IndexOutOfRange {
            what: "conditional outputs".into(),
            index,
            len,
        })
    }

    /// The parent tensor of a branch-graph input or output: the op input it
    /// receives or the op output it becomes. Anything else is
    /// [`PopXlError::NotACallSiteTensor`].
    pub fn graph_to_parent(&self, graph_tensor: &Tensor) -> Result<Tensor> {
        for (graph, then) in [(&self.then_graph, true), (&self.else_graph, false)] {
            if let Some(i) = graph.inputs()?.iter().position(|t| t == graph_tensor) {
                let index = self.read_op(|_, _, t, e| if then { t.get(i).copied() } else { e.get(i).copied() })?;
                if let Some(index) = index.and_then(|k| usize::try_from(k).ok()) {
                    return self.parent_input(index);
                }
            }
            if let Some(i) = graph.outputs()?.iter().position(|t| t == graph_tensor) {
                return self.parent_output(i);
            }
        }
        Err(self.not_a_site_tensor(graph_tensor))
    }

    /// The branch-graph input that receives parent tensor `parent_tensor`: the
    /// then branch's if it takes it, else the else branch's (PopXL's order).
    /// A tensor neither branch takes is [`PopXlError::NotACallSiteTensor`].
    pub fn parent_to_graph(&self, parent_tensor: &Tensor) -> Result<Tensor> {
        let Some(k) = self.inputs()?.iter().skip(1).position(|t| t == parent_tensor).map(|k| k + 1) else {
            return Err(self.not_a_site_tensor(parent_tensor));
        };
        let k = super::to_i64(k, || "conditional input index".to_string())?;
        let (then_pos, else_pos) =
            self.read_op(|_, _, t, e| (t.iter().position(|&i| i == k), e.iter().position(|&i| i == k)))?;
        match (then_pos, else_pos) {
            (Some(i), _) => Ok(self.then_graph.inputs()?[i].clone()),
            (None, Some(i)) => Ok(self.else_graph.inputs()?[i].clone()),
            (None, None) => Err(self.not_a_site_tensor(parent_tensor)),
        }
    }

    fn not_a_site_tensor(&self, t: &Tensor) -> PopXlError {
        PopXlError::NotACallSiteTensor {
            tensor: t.name().to_string(),
            graph: format!("{}` or `{}", self.then_graph.name(), self.else_graph.name()),
            op: "conditional".to_string(),
        }
    }
}

/// Op input index of `t` in `order` (after the condition at 0), appending it if new.
fn position_or_push<'a>(order: &mut Vec<&'a Tensor>, t: &'a Tensor) -> Result<i64> {
    let index = match order.iter().skip(1).position(|p| *p == t) {
        Some(i) => i + 1,
        None => {
            order.push(t);
            order.len() - 1
        }
    };
    super::to_i64(index, || "conditional input index".to_string())
}
