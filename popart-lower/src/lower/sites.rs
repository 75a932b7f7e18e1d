//! Call sites: every `Call`, `Repeat` and `If` branch of a reachable graph, with the
//! caller tensor bound to each callee input and output.

use popart_ir::ops::control::{Call, CallAttrs, If, IfAttrs, Repeat, RepeatAttrs};
use popart_ir::{GraphId, Ir, Op, OpAttrs, OpId, TensorId};

use super::index::{GraphIndex, Idx, SiteId};
use crate::LowerError;

/// How a site calls its graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SiteKind {
    /// A `Call` op.
    Call,
    /// A `Repeat` op (the callee is a loop body).
    Repeat,
    /// The then branch of an `If` op.
    IfThen,
    /// The else branch of an `If` op.
    IfElse,
}

/// One place where a graph is called.
#[derive(Clone, Debug)]
pub(super) struct Site {
    /// The calling graph.
    pub(super) caller: GraphIndex,
    /// The calling op (of `caller`).
    pub(super) op: OpId,
    /// The called graph.
    pub(super) callee: GraphIndex,
    /// How it is called.
    pub(super) kind: SiteKind,
    /// Caller tensor bound to callee input k.
    pub(super) args: Vec<TensorId>,
    /// Caller tensor receiving callee output j.
    pub(super) outs: Vec<TensorId>,
    /// Callee input positions the call site marks as modified (copied back), sorted.
    pub(super) modified: Vec<usize>,
    /// Op input indices passed to the callee, sorted (read at the site's copy-in);
    /// only filled for if branches, the only sites that read a subset of the op's inputs.
    pub(super) reads: Vec<u32>,
}

impl Site {
    /// Whether the site marks callee input `k` as modified.
    pub(super) fn marks(&self, k: usize) -> bool {
        self.modified.binary_search(&k).is_ok()
    }
}

/// The (consecutive) sites of one op.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct SiteRange {
    start: usize,
    end: usize,
}

impl SiteRange {
    /// Sites `start..end`.
    pub(super) fn new(start: SiteId, end: SiteId) -> Self {
        SiteRange { start: start.index(), end: end.index() }
    }

    /// The first site, if any.
    pub(super) fn first(self) -> Option<SiteId> {
        (self.start < self.end).then(|| SiteId::from_index(self.start))
    }

    /// Every site, in order.
    pub(super) fn iter(self) -> impl Iterator<Item = SiteId> {
        (self.start..self.end).map(SiteId::from_index)
    }
}

/// A call of one op, before its callee has a [`GraphIndex`].
pub(super) struct OpCall {
    /// The called graph.
    pub(super) callee: GraphId,
    kind: SiteKind,
    args: Vec<TensorId>,
    outs: Vec<TensorId>,
    modified: Vec<usize>,
    reads: Vec<u32>,
}

impl OpCall {
    /// Whether the call is a repeat.
    pub(super) fn is_repeat(&self) -> bool {
        self.kind == SiteKind::Repeat
    }

    /// The site of this call by op `op` of `caller`, calling reachable graph `callee`.
    pub(super) fn into_site(self, caller: GraphIndex, op: OpId, callee: GraphIndex) -> Site {
        let OpCall { callee: _, kind, args, outs, modified, reads } = self;
        Site { caller, op, callee, kind, args, outs, modified, reads }
    }
}

fn sorted(mut v: Vec<u32>) -> Vec<u32> {
    v.sort_unstable();
    v.dedup();
    v
}

fn missing(op: &Op, what: &str) -> LowerError {
    LowerError::Internal(format!("op `{}` has no {what}", op.name))
}

/// Caller tensors receiving the outputs of `callee`.
fn outs(ir: &Ir, op: &Op, callee: GraphId) -> Result<Vec<TensorId>, LowerError> {
    let n = ir.graph(callee)?.outputs().len();
    (0..n as u32).map(|j| op.output(j).ok_or_else(|| missing(op, &format!("output {j}")))).collect()
}

/// The call of a `Call` or `Repeat` op.
fn call_like(ir: &Ir, op: &Op, kind: SiteKind) -> Result<OpCall, LowerError> {
    // Only `Call` and `Repeat` ops call one graph.
    let callee = match kind {
        SiteKind::Repeat => RepeatAttrs::of(op)?.graph,
        _ => CallAttrs::of(op)?.graph,
    };
    let n = ir.graph(callee)?.inputs().len();
    let args = (0..n as u32)
        .map(|k| op.input(k).ok_or_else(|| missing(op, &format!("input {k}"))))
        .collect::<Result<_, _>>()?;
    // A repeat marks only inputs past its loop-carried ones (checked by its inference).
    let modified = sorted(op.modified_inputs()).into_iter().map(|i| i as usize).collect();
    Ok(OpCall { callee, kind, args, outs: outs(ir, op, callee)?, modified, reads: Vec::new() })
}

/// The two branch calls of an `If` op.
fn if_branches(ir: &Ir, op: &Op) -> Result<Vec<OpCall>, LowerError> {
    let mut v = Vec::new();
    let a = IfAttrs::of(op)?;
    for (kind, callee, ikey, indices) in [
        (SiteKind::IfThen, a.then_graph, "then_inputs", &a.then_inputs),
        (SiteKind::IfElse, a.else_graph, "else_inputs", &a.else_inputs),
    ] {
        let n = ir.graph(callee)?.inputs().len();
        let pairs = (0..n)
            .map(|k| {
                // Op input index passed as branch input `k`.
                indices
                    .get(k)
                    .and_then(|&i| u32::try_from(i).ok())
                    .and_then(|i| Some((i, op.input(i)?)))
                    .ok_or_else(|| missing(op, &format!("{ikey}[{k}]")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let (indices, args): (Vec<u32>, Vec<_>) = pairs.into_iter().unzip();
        let outs = outs(ir, op, callee)?;
        v.push(OpCall { callee, kind, args, outs, modified: Vec::new(), reads: sorted(indices) });
    }
    Ok(v)
}

/// The graph calls of one op (none for ops that call no graph).
pub(super) fn calls_of(ir: &Ir, op: &Op) -> Result<Vec<OpCall>, LowerError> {
    if op.is::<Call>() {
        Ok(vec![call_like(ir, op, SiteKind::Call)?])
    } else if op.is::<Repeat>() {
        Ok(vec![call_like(ir, op, SiteKind::Repeat)?])
    } else if op.is::<If>() {
        if_branches(ir, op)
    } else {
        Ok(Vec::new())
    }
}
