//! Subgraph ops: `Call`, `Repeat` and `If`. Their outputs are the called graph's outputs.

use super::op_types;
use crate::{Attributes, Graph, InferContext, OpDef, OpFlags, Result, TensorInfo};

op_types!(
    /// `Call{graph, modified}`: op input i -> graph input i; graph output j -> op output j.
    /// `modified` lists op input indices the graph writes in place (visible to the caller).
    Call,
    /// `Repeat{graph, count}`: loop-carried call; graph output k feeds graph input k of the
    /// next iteration; outputs of the last iteration are the op's outputs.
    Repeat,
    /// `If{then_graph, else_graph, then_inputs, else_inputs}`: input 0 is a bool scalar;
    /// `then_inputs[k]` is the op input index passed as then-graph input k (same for else).
    If,
);

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

impl OpDef for Call {
    fn op_type(&self) -> &'static str {
        "Call"
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let g = ctx.graph("graph")?;
        let inputs = contiguous_inputs(ctx)?;
        check_args(ctx, g, &inputs)?;
        if let Some(m) = ctx.attrs.ints("modified") {
            if let Some(bad) = m.iter().find(|&&i| i < 0 || i as usize >= inputs.len()) {
                return Err(ctx.error(format!("modified input {bad} is not an input of the call")));
            }
        }
        Ok(g.output_infos())
    }
    fn flags(&self, attrs: &Attributes) -> OpFlags {
        if attrs.ints("modified").is_some_and(|m| !m.is_empty()) {
            OpFlags::SUBGRAPH | OpFlags::MODIFIES_INPUTS
        } else {
            OpFlags::SUBGRAPH
        }
    }
    fn modified_inputs(&self, attrs: &Attributes) -> Vec<u32> {
        attrs.ints("modified").unwrap_or(&[]).iter().map(|&i| i as u32).collect()
    }
    fn grad(&self, _op: &crate::Op) -> crate::GradRule {
        crate::GradRule::Subgraph
    }
}

impl OpDef for Repeat {
    fn op_type(&self) -> &'static str {
        "Repeat"
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let g = ctx.graph("graph")?;
        let count = ctx.int("count")?;
        if count < 1 {
            return Err(ctx.error(format!("repeat count must be greater than 0, got {count}")));
        }
        let inputs = contiguous_inputs(ctx)?;
        check_args(ctx, g, &inputs)?;
        let (ins, outs) = (g.input_infos(), g.output_infos());
        if outs.len() > ins.len() {
            return Err(ctx.error(format!(
                "graph `{}` has {} outputs but only {} inputs; repeat needs at least as many inputs as outputs",
                g.name(),
                outs.len(),
                ins.len()
            )));
        }
        for (k, (o, i)) in outs.iter().zip(&ins).enumerate() {
            if o != i {
                return Err(ctx.error(format!(
                    "graph `{}` output {k} is {o} but input {k} is {i}; loop-carried values must match",
                    g.name()
                )));
            }
        }
        Ok(outs)
    }
    fn flags(&self, _: &Attributes) -> OpFlags {
        OpFlags::SUBGRAPH
    }
}

impl OpDef for If {
    fn op_type(&self) -> &'static str {
        "If"
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let c = ctx.input(0)?;
        if c.dtype != crate::DataType::Bool || c.nelms() != 1 {
            return Err(ctx.error(format!("the condition must be a bool scalar, got {c}")));
        }
        let (tg, eg) = (ctx.graph("then_graph")?, ctx.graph("else_graph")?);
        let as_idx = |key: &str| -> Vec<u32> { ctx.attrs.ints(key).unwrap_or(&[]).iter().map(|&i| i as u32).collect() };
        check_args(ctx, tg, &as_idx("then_inputs"))?;
        check_args(ctx, eg, &as_idx("else_inputs"))?;
        let (to, eo) = (tg.output_infos(), eg.output_infos());
        if to != eo {
            return Err(ctx.error(format!(
                "branches `{}` and `{}` have different outputs: {to:?} vs {eo:?}",
                tg.name(),
                eg.name()
            )));
        }
        Ok(to)
    }
    fn flags(&self, _: &Attributes) -> OpFlags {
        OpFlags::SUBGRAPH
    }
    fn grad(&self, _op: &crate::Op) -> crate::GradRule {
        crate::GradRule::Subgraph
    }
}

pub(crate) const ALL: &[&dyn OpDef] = &[&Call, &Repeat, &If];
