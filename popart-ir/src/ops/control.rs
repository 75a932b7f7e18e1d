//! Subgraph ops: `Call`, `Repeat` and `If`. Their outputs are the called graph's outputs.

use super::{infer_error, op_types};
use crate::{
    op_attrs, Alias, AttrSpec, Attributes, Graph, GraphId, InferContext, OpAttrs, OpDef, OpFlags, Result, TensorInfo,
};

op_attrs! {
    /// Attributes of `Call`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct CallAttrs {
        /// The called graph.
        pub graph: GraphId,
        /// Inputs the callee writes.
        pub modified: Vec<i64> = Vec::new(),
    }
}

op_attrs! {
    /// Attributes of `Repeat`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct RepeatAttrs {
        /// The repeated graph.
        pub graph: GraphId,
        /// Iterations.
        pub count: i64,
        /// Inputs the body writes.
        pub modified: Vec<i64> = Vec::new(),
    }
}

op_attrs! {
    /// Attributes of `If`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct IfAttrs {
        /// Called when true.
        pub then_graph: GraphId,
        /// Called when false.
        pub else_graph: GraphId,
        /// Op inputs passed to `then_graph`.
        pub then_inputs: Vec<i64> = Vec::new(),
        /// Op inputs passed to `else_graph`.
        pub else_inputs: Vec<i64> = Vec::new(),
    }
}

op_types!(
    /// `Call{graph, modified}`: op input i -> graph input i; graph output j -> op output j.
    /// `modified` lists op input indices the graph writes in place (visible to the caller).
    Call,
    /// `Repeat{graph, count, modified}`: loop-carried call; graph output k feeds graph input k
    /// of the next iteration; outputs of the last iteration are the op's outputs. `modified`
    /// lists inputs past the loop-carried ones that the body writes in place: the writes
    /// of every iteration reach the caller's tensor (PopXL's `TensorByRef` in `repeat`).
    Repeat,
    /// `If{then_graph, else_graph, then_inputs, else_inputs}`: input 0 is a bool scalar;
    /// `then_inputs[k]` is the op input index passed as then-graph input k (same for else).
    If,
);

/// Why a graph cannot be repeated, or the branches of a conditional do not
/// match. These are the checks of the `Repeat` and `If` shape inference,
/// public so that front ends can run them before building the op and report
/// them in their own terms.
///
/// ```
/// use popart_ir::ops::control::{check_repeat_count, ControlFlowError};
/// assert_eq!(check_repeat_count(0), Err(ControlFlowError::RepeatCount { count: 0 }));
/// assert_eq!(check_repeat_count(0).unwrap_err().to_string(), "repeat count must be greater than 0, got 0");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ControlFlowError {
    /// A repeat count below 1.
    #[error("repeat count must be greater than 0, got {count}")]
    RepeatCount {
        /// The count given.
        count: i64,
    },
    /// A repeated graph with more outputs than inputs (each output feeds the
    /// input of the same index in the next iteration).
    #[error(
        "graph `{graph}` has {outputs} outputs but only {inputs} inputs; repeat needs at least as many inputs as outputs"
    )]
    RepeatFewerInputs {
        /// The repeated graph.
        graph: String,
        /// Its number of inputs.
        inputs: usize,
        /// Its number of outputs.
        outputs: usize,
    },
    /// A repeated graph whose output `index` differs in type or shape from its
    /// input `index`, which it feeds in the next iteration.
    #[error("graph `{graph}` output {index} is {output} but input {index} is {input}; loop-carried values must match")]
    RepeatCarriedMismatch {
        /// The repeated graph.
        graph: String,
        /// Index of the loop-carried pair.
        index: usize,
        /// The graph input.
        input: TensorInfo,
        /// The graph output.
        output: TensorInfo,
    },
    /// Branches of a conditional whose outputs differ in number, type or shape.
    #[error("branches `{then_graph}` and `{else_graph}` have different outputs: {then_outputs:?} vs {else_outputs:?}")]
    BranchOutputsMismatch {
        /// The then branch.
        then_graph: String,
        /// The else branch.
        else_graph: String,
        /// Outputs of the then branch.
        then_outputs: Vec<TensorInfo>,
        /// Outputs of the else branch.
        else_outputs: Vec<TensorInfo>,
    },
}

/// Check a `Repeat` count: at least 1.
///
/// ```
/// use popart_ir::ops::control::check_repeat_count;
/// assert!(check_repeat_count(1).is_ok());
/// assert!(check_repeat_count(-2).is_err());
/// ```
pub fn check_repeat_count(count: i64) -> std::result::Result<(), ControlFlowError> {
    if count < 1 {
        return Err(ControlFlowError::RepeatCount { count });
    }
    Ok(())
}

/// Check that `graph` can be the body of a `Repeat`: at least as many inputs as
/// outputs, and output `k` of the same type and shape as input `k` (the values
/// carried from one iteration to the next).
///
/// ```
/// use popart_ir::ops::control::{check_repeat_body, ControlFlowError};
/// use popart_ir::{DataType, Ir, TensorInfo};
/// let mut ir = Ir::new();
/// let g = ir.create_graph("body").unwrap();
/// let x = ir.graph_mut(g).unwrap().add_input("x", TensorInfo::new(DataType::Float32, [2])).unwrap();
/// ir.graph_mut(g).unwrap().add_output(x).unwrap();
/// assert_eq!(check_repeat_body(ir.graph(g).unwrap()), Ok(()));
/// ```
pub fn check_repeat_body(graph: &Graph) -> std::result::Result<(), ControlFlowError> {
    let (ins, outs) = (graph.input_infos(), graph.output_infos());
    if outs.len() > ins.len() {
        return Err(ControlFlowError::RepeatFewerInputs {
            graph: graph.name().to_string(),
            inputs: ins.len(),
            outputs: outs.len(),
        });
    }
    if let Some((index, (output, input))) = outs.into_iter().zip(ins).enumerate().find(|(_, (o, i))| o != i) {
        return Err(ControlFlowError::RepeatCarriedMismatch { graph: graph.name().to_string(), index, input, output });
    }
    Ok(())
}

/// Check that the branches of an `If` have the same outputs (number, types and
/// shapes), so the op's outputs do not depend on the branch taken.
pub fn check_branch_outputs(then_graph: &Graph, else_graph: &Graph) -> std::result::Result<(), ControlFlowError> {
    let (then_outputs, else_outputs) = (then_graph.output_infos(), else_graph.output_infos());
    if then_outputs != else_outputs {
        return Err(ControlFlowError::BranchOutputsMismatch {
            then_graph: then_graph.name().to_string(),
            else_graph: else_graph.name().to_string(),
            then_outputs,
            else_outputs,
        });
    }
    Ok(())
}

fn check_args(ctx: &InferContext<'_>, g: &Graph, inputs: &[u32]) -> Result<()> {
    let expected = g.input_infos();
    if inputs.len() != expected.len() {
        return Err(ctx.error(format!(
            "graph `{}` has {} inputs but {} were given",
            g.name(),
            expected.len(),
            inputs.len()
        )));
    }
    for (k, (&i, want)) in inputs.iter().zip(&expected).enumerate() {
        let got = ctx.input(i)?;
        if got != want {
            return Err(ctx.error(format!("input {i} is {got} but graph `{}` input {k} is {want}", g.name())));
        }
    }
    Ok(())
}

fn contiguous_inputs(ctx: &InferContext<'_>) -> Result<Vec<u32>> {
    let idx: Vec<u32> = ctx.inputs().iter().map(|(i, _)| *i).collect();
    if idx.iter().enumerate().any(|(k, &i)| i as usize != k) {
        return Err(ctx.error("inputs must be at indices 0..n"));
    }
    Ok(idx)
}

/// Subgraph ops call exactly the graphs of the attributes they read (`keys`): no
/// other graph-valued attribute, which every pass would take for a call.
fn check_graph_attrs(ctx: &InferContext<'_>, keys: &[&str]) -> Result<()> {
    match ctx.attrs.iter().find(|(k, v)| matches!(v, crate::AttrValue::Graph(_)) && !keys.contains(k)) {
        Some((k, _)) => Err(ctx.error(format!("unexpected graph attribute `{k}` (expected {})", keys.join(", ")))),
        None => Ok(()),
    }
}

impl OpDef for Call {
    fn op_type(&self) -> &'static str {
        "Call"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        CallAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let a = CallAttrs::infer(ctx)?;
        check_graph_attrs(ctx, &["graph"])?;
        let g = ctx.ir.graph(a.graph)?;
        let inputs = contiguous_inputs(ctx)?;
        check_args(ctx, g, &inputs)?;
        check_modified(ctx, &a.modified, 0..inputs.len(), "call")?;
        Ok(g.output_infos())
    }
    fn properties(&self, _: &Attributes) -> OpFlags {
        OpFlags::SUBGRAPH
    }
    fn aliases(&self, attrs: &Attributes) -> Vec<Alias> {
        modified_attr(CallAttrs::from_attrs(attrs).ok().map(|a| a.modified))
    }
    fn grad(&self, _cx: &crate::GradContext<'_>) -> crate::GradRule {
        crate::GradRule::Subgraph
    }
}

impl OpDef for Repeat {
    fn op_type(&self) -> &'static str {
        "Repeat"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        RepeatAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let a = RepeatAttrs::infer(ctx)?;
        check_graph_attrs(ctx, &["graph"])?;
        let g = ctx.ir.graph(a.graph)?;
        check_repeat_count(a.count).map_err(infer_error(ctx))?;
        let inputs = contiguous_inputs(ctx)?;
        check_args(ctx, g, &inputs)?;
        check_repeat_body(g).map_err(infer_error(ctx))?;
        // Loop-carried inputs take the previous iteration's outputs: only the others
        // may be written through to the caller.
        check_modified(ctx, &a.modified, g.outputs().len()..inputs.len(), "repeat (past its loop-carried inputs)")?;
        Ok(g.output_infos())
    }
    fn properties(&self, _: &Attributes) -> OpFlags {
        OpFlags::SUBGRAPH
    }
    fn aliases(&self, attrs: &Attributes) -> Vec<Alias> {
        modified_attr(RepeatAttrs::from_attrs(attrs).ok().map(|a| a.modified))
    }
    fn grad(&self, _cx: &crate::GradContext<'_>) -> crate::GradRule {
        crate::GradRule::Subgraph
    }
}

/// Every entry of the `modified` attribute (`m`) lies in `allowed`.
fn check_modified(ctx: &InferContext<'_>, m: &[i64], allowed: std::ops::Range<usize>, what: &str) -> Result<()> {
    match m.iter().find(|&&i| usize::try_from(i).map_or(true, |i| !allowed.contains(&i))) {
        Some(bad) => Err(ctx.error(format!("modified input {bad} is not an input of the {what}"))),
        None => Ok(()),
    }
}

/// The `modified` attribute (`m`, of attributes that decode: others are
/// rejected by `infer`) as written inputs (out-of-range entries, rejected by
/// `infer`, are skipped). The builder sets it from what the called graph
/// writes: a call's or repeat's in-place behaviour depends on its graph, so it
/// is recorded on the op where the declaration can read it.
fn modified_attr(m: Option<Vec<i64>>) -> Vec<Alias> {
    m.unwrap_or_default().into_iter().filter_map(|i| u32::try_from(i).ok()).map(Alias::written).collect()
}

impl OpDef for If {
    fn op_type(&self) -> &'static str {
        "If"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        IfAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let c = ctx.input(0)?;
        if c.dtype != crate::DataType::Bool || c.nelms() != 1 {
            return Err(ctx.error(format!("the condition must be a bool scalar, got {c}")));
        }
        let a = IfAttrs::infer(ctx)?;
        check_graph_attrs(ctx, &["then_graph", "else_graph"])?;
        let (tg, eg) = (ctx.ir.graph(a.then_graph)?, ctx.ir.graph(a.else_graph)?);
        let as_idx = |key: &str, v: &[i64]| -> Result<Vec<u32>> {
            v.iter()
                .map(|&i| {
                    u32::try_from(i).map_err(|_| ctx.error(format!("`{key}` names input {i}, not an input index")))
                })
                .collect()
        };
        check_args(ctx, tg, &as_idx("then_inputs", &a.then_inputs)?)?;
        check_args(ctx, eg, &as_idx("else_inputs", &a.else_inputs)?)?;
        check_branch_outputs(tg, eg).map_err(infer_error(ctx))?;
        Ok(tg.output_infos())
    }
    fn properties(&self, _: &Attributes) -> OpFlags {
        OpFlags::SUBGRAPH
    }
    fn grad(&self, _cx: &crate::GradContext<'_>) -> crate::GradRule {
        crate::GradRule::Subgraph
    }
}

pub(crate) const ALL: &[&dyn OpDef] = &[&Call, &Repeat, &If];
