//! Session preparation: the mandatory steps between a user-built IR and lowering,
//! run as a [`Pipeline`] (the default one: [`Pipeline::default_for`]):
//!
//! 1. `verify` ([`Ir::verify`]): every structural invariant, shape inference,
//!    schedulability (a topological-constraint cycle is reported here);
//! 2. `prune` ([`crate::prune`]): drop ops without side effects whose outputs
//!    nobody needs;
//! 3. the patterns ([`crate::patterns`]: `fuse-all-reduce-update`, `fuse-weight-update`, `fuse-masked-softmax`, `fuse-matmul-bias`, `fuse-adam`, `fuse-residual-grad`, `fuse-bias-grad`), unless
//!    [`PrepareOptions::patterns`] is off: no pattern is mandatory (every op type has
//!    a direct lowering), they only make the program faster or smaller;
//! 4. `inline-calls` ([`crate::inline`]) when [`PrepareOptions::inline_calls`] is on;
//! 5. `verify-final`, so lowering only ever sees a valid IR.
//!
//! To run passes of one's own, build a pipeline from the default one and run it
//! instead of [`prepare`] (see [`crate::pipeline`]).

use crate::Result;
use popart_ir::Ir;

use crate::pipeline::{PassRecord, Pipeline};
use crate::prune::PruneReport;

/// What [`prepare`] (or [`Pipeline::run`]) did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrepareReport {
    /// What pruning removed (every prune pass of the pipeline, merged).
    pub pruned: PruneReport,
    /// `ScaledAddInplace` ops folded into their gradient's matmul (`graph/op` names).
    pub fused_weight_updates: Vec<String>,
    /// Each pass that ran, in order: name, wall time, whether it changed the IR, its results.
    pub passes: Vec<PassRecord>,
}

impl PrepareReport {
    /// The record of the (first) pass called `name`.
    pub fn pass(&self, name: &str) -> Option<&PassRecord> {
        self.passes.iter().find(|r| r.name == name)
    }
}

/// Options of [`prepare_with`] and [`Pipeline::default_for`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrepareOptions {
    /// Apply the optimisation patterns (default true).
    pub patterns: bool,
    /// Reject ambiguous in-place writes (the `inplace-ambiguity` pass; default
    /// true, as PopXL).
    pub check_inplace_ambiguity: bool,
    /// Inline `Call`s into their callers (the `inline-calls` pass,
    /// [`crate::inline`]; default false: lowered programs keep PopART's one
    /// function per subgraph, called through copies). The `cpu` session turns it on.
    pub inline_calls: bool,
}

impl Default for PrepareOptions {
    fn default() -> Self {
        PrepareOptions { patterns: true, check_inplace_ambiguity: true, inline_calls: false }
    }
}

/// Prepare an IR for lowering: run the default pipeline (see the module docs). On
/// error the IR may have been partly rewritten by the passes up to the failing one
/// (an invalid input IR fails the first `verify`, before any change).
///
/// ```
/// use popart_ir::{Attributes, DataType, HostTensor, Ir, TensorInfo, TensorKind};
/// let mut ir = Ir::new();
/// let main = ir.main_graph_id();
/// let info = TensorInfo::new(DataType::Float32, [1]);
/// let c = ir.main_graph_mut().add_tensor("c", info.clone(), TensorKind::Constant(HostTensor::zeros(info))).unwrap();
/// ir.create_op(main, "Relu", Attributes::new(), &[(0, c)], "unused").unwrap();
/// let report = popart_transforms::prepare::prepare(&mut ir).unwrap();
/// assert_eq!(report.pruned.removed_ops, vec!["main/unused".to_string()]);
/// assert_eq!(report.passes.len(), 12);
/// ```
pub fn prepare(ir: &mut Ir) -> Result<PrepareReport> {
    prepare_with(ir, PrepareOptions::default())
}

impl PrepareOptions {
    /// The pipeline these options ask for: [`Pipeline::default_for`] them, or
    /// the `custom` pipeline given instead, with `inline-calls` added where the
    /// default pipeline has it (before `verify-final`, else at the end) when
    /// [`PrepareOptions::inline_calls`] is on and `custom` has none. The other
    /// options apply to the default pipeline only: a custom pipeline states
    /// its own patterns and checks.
    ///
    /// ```
    /// use popart_transforms::prepare::PrepareOptions;
    /// use popart_transforms::Pipeline;
    /// let options = PrepareOptions { inline_calls: true, ..PrepareOptions::default() };
    /// let custom = Pipeline::new().with_pass(popart_transforms::prune::Prune);
    /// assert_eq!(options.pipeline(Some(&custom)).names().collect::<Vec<_>>(), ["prune", "inline-calls"]);
    /// assert!(options.pipeline(None).contains("inline-calls"));
    /// ```
    pub fn pipeline(&self, custom: Option<&Pipeline>) -> Pipeline {
        use crate::inline::InlineCalls;
        let Some(custom) = custom else { return Pipeline::default_for(*self) };
        if !self.inline_calls || custom.contains(InlineCalls::NAME) {
            return custom.clone();
        }
        match custom.clone().insert_before(Pipeline::VERIFY_FINAL, InlineCalls) {
            Ok(p) => p,
            Err(_) => custom.clone().with_pass(InlineCalls),
        }
    }
}

/// [`prepare`] with options: runs [`Pipeline::default_for`] `options`.
pub fn prepare_with(ir: &mut Ir, options: PrepareOptions) -> Result<PrepareReport> {
    Pipeline::default_for(options).run(ir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use popart_ir::{Attributes, DataType, HostTensor, IrError, TensorInfo, TensorKind};

    #[test]
    fn reports_topocon_cycles() {
        let mut ir = Ir::new();
        let main = ir.main_graph_id();
        let info = TensorInfo::new(DataType::Float32, [1]);
        let c =
            ir.main_graph_mut().add_tensor("c", info.clone(), TensorKind::Constant(HostTensor::zeros(info))).unwrap();
        let a = ir.create_op(main, "Relu", Attributes::new(), &[(0, c)], "a").unwrap();
        let b = ir.create_op(main, "Exp", Attributes::new(), &[(0, c)], "b").unwrap();
        ir.main_graph_mut().add_topo_con(a, b).unwrap();
        // The checked API refuses the cycle; a pass or corruption could still add it.
        assert!(matches!(ir.main_graph_mut().add_topo_con(b, a), Err(IrError::Cycle { .. })));
        ir.main_graph_mut().add_topo_con_unchecked(b, a).unwrap();
        match prepare(&mut ir) {
            Err(crate::TransformError::Ir(IrError::Cycle { graph, ops })) => {
                assert_eq!(graph, "main");
                let mut ops = ops;
                ops.sort();
                assert_eq!(ops, vec!["a", "b"]);
            }
            other => panic!("expected a cycle error, got {other:?}"),
        }
    }
}
