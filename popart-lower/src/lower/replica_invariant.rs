//! Weights every replica provably holds the same value of.
//!
//! In a data-parallel program most variables are replica-invariant: every
//! replica starts from the same host value and applies the same update, the
//! all-reduced gradient. A fused update of such a weight
//! (`ReplicatedScaledAddMatMulRhsGradInplace`) can then accumulate its chunk
//! of the product straight into its own copy of the weight and copy the
//! updated rows to the other members. Without the guarantee, it must build the
//! reduced product in a scratch block and add that block to every member's
//! weight. [`mark_invariant_updates`] finds those weights and sets
//! [`KernelCall::weight_invariant`] on their updates, the last step of
//! lowering.
//!
//! A variable's buffer is replica-invariant when:
//! - the variable is plain: it has no [`popart_ir::VariableSettings`], so every
//!   replica receives the same host value from `weights_from_host` and
//!   `write_variable_data`; and
//! - every write to its buffer in the main program and in every function is a
//!   fused data-parallel update over one group of all replicas
//!   (`ReplicatedAllReduceScaledAddInplace`,
//!   `ReplicatedScaledAddMatMulRhsGradInplace`). Each adds the same reduced
//!   value to every member's copy.
//!
//! Any other write excludes the buffer: an in-place op, a copy (such as a
//! call's copy back of a modified input), a host or remote load. So does a
//! fused update over smaller groups.

use std::collections::HashSet;

use popart_ir::ops::all::{ReplicatedAllReduceScaledAddInplace, ReplicatedScaledAddMatMulRhsGradInplace};
use popart_ir::ops::collectives::AllReduceUpdateAttrs;
use popart_ir::{Ir, OpAttrs};

use crate::executable::{BufferId, BufferKind, Executable, KernelCall, Program};

/// Which buffers of `exe` (by index) hold a replica-invariant variable, for a
/// program of `rf` replicas lowered from `ir`. All false when `rf` is 1.
pub(crate) fn invariant_buffers(exe: &Executable, ir: &Ir, rf: usize) -> Vec<bool> {
    let mut shared = vec![false; exe.buffers.len()];
    if rf < 2 {
        return shared;
    }
    for w in &exe.weights {
        let plain = w.tensor.graph == ir.main_graph_id() && ir.variable_settings(w.tensor.tensor).is_none();
        let is_variable = exe.buffers.get(w.buffer.index()).is_some_and(|b| b.kind == BufferKind::Variable);
        if plain && is_variable {
            shared[w.buffer.index()] = true;
        }
    }
    let mut excluded = HashSet::new();
    let mut visit = |p: &Program| excluded.extend(non_uniform_writes(p, rf));
    exe.programs.main.visit(&mut |p| visit(p));
    for f in &exe.functions {
        f.body.visit(&mut |p| visit(p));
    }
    for b in excluded {
        if let Some(s) = shared.get_mut(b.index()) {
            *s = false;
        }
    }
    shared
}

/// The buffers `p` itself (not its children) writes other than by a fused
/// update over all `rf` replicas.
fn non_uniform_writes(p: &Program, rf: usize) -> Vec<BufferId> {
    match p {
        Program::Execute(k) if uniform_update(k, rf) => Vec::new(),
        Program::Execute(k) => {
            let modified = k.def.modified_inputs(&k.attrs);
            let inputs = k.inputs.iter().filter(|a| modified.contains(&a.index)).map(|a| a.buffer);
            k.outputs.iter().map(|a| a.buffer).chain(inputs).collect()
        }
        Program::Copy { dst, .. } | Program::HostToDevice { dst, .. } | Program::RemoteLoad { dst, .. } => {
            vec![*dst]
        }
        _ => Vec::new(),
    }
}

/// True for a fused data-parallel update whose one group holds all `rf`
/// replicas: every replica adds the same value to the weight.
fn uniform_update(k: &KernelCall, rf: usize) -> bool {
    let fused =
        k.def.is::<ReplicatedAllReduceScaledAddInplace>() || k.def.is::<ReplicatedScaledAddMatMulRhsGradInplace>();
    // Both fused updates take the attributes of an all-reduce update.
    let group = || AllReduceUpdateAttrs::from_attrs(&k.attrs).ok().map(|a| (a.stride, a.group_size));
    fused && group() == Some((1, rf as i64))
}

/// Set [`KernelCall::weight_invariant`] on every
/// `ReplicatedScaledAddMatMulRhsGradInplace` of `exe` whose weight is
/// replica-invariant ([`invariant_buffers`]).
pub(crate) fn mark_invariant_updates(exe: &mut Executable, ir: &Ir, rf: usize) {
    let invariant = invariant_buffers(exe, ir, rf);
    let mut mark = |k: &mut KernelCall| {
        let weight = k.outputs.first().map(|a| a.buffer.index());
        if k.def.is::<ReplicatedScaledAddMatMulRhsGradInplace>()
            && weight.is_some_and(|b| invariant.get(b).copied().unwrap_or(false))
        {
            k.weight_invariant = true;
        }
    };
    for_each_call_mut(&mut exe.programs.main, &mut mark);
    for f in &mut exe.functions {
        for_each_call_mut(&mut f.body, &mut mark);
    }
}

/// Call `f` on every kernel call in `p`.
fn for_each_call_mut(p: &mut Program, f: &mut impl FnMut(&mut KernelCall)) {
    match p {
        Program::Execute(k) => f(k),
        Program::Sequence(v) => v.iter_mut().for_each(|p| for_each_call_mut(p, f)),
        Program::Repeat { body, .. } => for_each_call_mut(body, f),
        Program::If { then_branch, else_branch, .. } => {
            for_each_call_mut(then_branch, f);
            for_each_call_mut(else_branch, f);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ZEROS: &str = "[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]";

    /// `W` is only updated by a fused update over both replicas; `V` too, but
    /// then also by an in-place op; `U`'s update runs over groups of one;
    /// `g` and `x` are only read.
    fn program(rf: usize) -> String {
        format!(
            r#"ir num_host_transfers=1 replication_factor={rf}

graph main
  inputs []
  outputs []
  tensor g var float32[2,3] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
  tensor x var float32[2,4] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
  tensor W var float32[4,3] = {ZEROS}
  tensor V var float32[4,3] = {ZEROS}
  tensor U var float32[4,3] = {ZEROS}
  tensor Wn act float32[4,3]
  tensor Vn act float32[4,3]
  tensor Vm act float32[4,3]
  tensor Un act float32[4,3]
  op w ReplicatedScaledAddMatMulRhsGradInplace {{b=-0.1, group_size={rf}, op="mean", stride=1}} in[0=g, 1=x, 2=W] out[0=Wn]
  op v ReplicatedScaledAddMatMulRhsGradInplace {{b=-0.1, group_size={rf}, op="mean", stride=1}} in[0=g, 1=x, 2=V] out[0=Vn]
  op s ScaledAddInplace {{a=2.0, b=1.0}} in[0=Vn, 1=Wn] out[0=Vm]
  op u ReplicatedScaledAddMatMulRhsGradInplace {{b=-0.1, group_size=1, op="mean", stride=1}} in[0=g, 1=x, 2=U] out[0=Un]
"#
        )
    }

    /// Whether each named variable's buffer is invariant, and the names of the
    /// updates lowering marked, for a program of `rf` replicas.
    fn analyse(rf: usize) -> (Vec<(String, bool)>, Vec<String>) {
        let ir = popart_ir::text::parse(&program(rf)).unwrap();
        let exe = crate::lower(&ir).unwrap();
        let invariant = invariant_buffers(&exe, &ir, rf);
        let mut vars: Vec<(String, bool)> =
            exe.weights.iter().map(|w| (w.tensor.name.clone(), invariant[w.buffer.index()])).collect();
        vars.sort();
        let mut marked: Vec<String> = exe
            .programs
            .main
            .kernel_calls()
            .into_iter()
            .filter(|k| k.weight_invariant)
            .map(|k| k.name.clone())
            .collect();
        marked.sort();
        (vars, marked)
    }

    #[test]
    fn only_weights_every_write_keeps_equal_are_invariant() {
        let (vars, marked) = analyse(2);
        let expect = [("U", false), ("V", false), ("W", true), ("g", true), ("x", true)];
        let got: Vec<(&str, bool)> =
            vars.iter().map(|(n, b)| (n.rsplit('/').next().unwrap_or(n.as_str()), *b)).collect();
        assert_eq!(got, expect);
        assert_eq!(marked, ["main/w"]);
    }

    #[test]
    fn one_replica_marks_nothing() {
        let (vars, marked) = analyse(1);
        assert!(vars.iter().all(|(_, b)| !b));
        assert!(marked.is_empty());
    }
}
