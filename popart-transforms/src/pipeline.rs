//! Passes and the pipeline that runs them: the one visible sequence of steps
//! between a user-built IR and lowering.
//!
//! A [`Pass`] is anything that rewrites (or only checks) a whole [`Ir`]: a
//! transform such as [`crate::prune::Prune`], a pattern such as
//! [`crate::patterns::FuseWeightUpdates`] (PopART's op-local rewrites; here a
//! pattern is simply a pass that preserves every graph's values), or a check such
//! as [`Verify`]. A [`Pipeline`] is an ordered list of named passes (names should
//! be unique: lookups by name find the first); the session's preparation
//! ([`crate::prepare::prepare`]) runs [`Pipeline::default_for`] its options:
//!
//! ```text
//! verify, inplace-ambiguity, prune, materialize-views, fuse-all-reduce-update, fuse-weight-update, fuse-masked-softmax, fuse-matmul-bias, fuse-adam, fuse-residual-grad, fuse-bias-grad, verify-final
//! ```
//!
//! Users start from that pipeline and insert their own passes, by position
//! ([`Pipeline::insert_before`], [`Pipeline::insert_after`]) or with the other
//! patterns ([`Pipeline::with_pattern`]: after the last pattern, before the final
//! verification, which then checks what the new pass did).
//!
//! ```
//! use popart_ir::Ir;
//! use popart_transforms::pipeline::{Pass, PassOutcome, Pipeline};
//! use popart_transforms::Result;
//! use popart_transforms::prepare::PrepareOptions;
//!
//! /// Counts ops; changes nothing.
//! struct CountOps;
//! impl Pass for CountOps {
//!     fn name(&self) -> &str {
//!         "count-ops"
//!     }
//!     fn run(&self, ir: &mut Ir) -> Result<PassOutcome> {
//!         let n: usize = ir.graphs().map(|g| g.num_ops()).sum();
//!         Ok(PassOutcome::unchanged().with_note(format!("{n} ops")))
//!     }
//! }
//!
//! let pipeline = Pipeline::default_for(PrepareOptions::default()).with_pattern(CountOps);
//! assert_eq!(pipeline.to_string(), "verify, inplace-ambiguity, prune, materialize-views, fuse-all-reduce-update, fuse-weight-update, fuse-masked-softmax, fuse-matmul-bias, fuse-adam, fuse-residual-grad, fuse-bias-grad, count-ops, verify-final");
//! let report = pipeline.run(&mut Ir::new()).unwrap();
//! assert_eq!(report.pass("count-ops").unwrap().notes, vec!["0 ops".to_string()]);
//! ```
//!
//! Passes are `Send + Sync` and a pipeline is cheap to clone (the passes are
//! shared), so one pipeline can be kept in options and run from several threads.
//!
//! With a `tracing` subscriber at debug level, [`Pipeline::run`] logs the pipeline
//! and each pass's name, wall time and whether it changed the IR (target
//! `popart_transforms::pipeline`). The library installs no subscriber.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use popart_ir::Ir;

use crate::{Result, TransformError};

use crate::inline::InlineCalls;
use crate::patterns::{
    FuseAdam, FuseAllReduceUpdate, FuseBiasGrad, FuseMaskedSoftmax, FuseMatMulBias, FuseResidualGrad, FuseWeightUpdates,
};
use crate::prepare::{PrepareOptions, PrepareReport};
use crate::prune::{Prune, PruneReport};
use crate::views::{InplaceAmbiguityCheck, MaterializeViews};

/// Environment variable that, set to `1`, makes new pipelines verify the IR after
/// every pass in release builds too (see [`Pipeline::with_verify_each_pass`]).
pub const VERIFY_EACH_PASS_ENV: &str = "POPART_VERIFY_EACH_PASS";

/// One step of a [`Pipeline`]: a transform, pattern or check over a whole IR.
///
/// A pass that fails may leave the IR partly rewritten; the pipeline stops there.
/// A pass that returns `Ok` must leave the IR valid ([`Ir::verify`]); the default
/// pipeline's final [`Verify`] catches one that does not.
pub trait Pass: Send + Sync {
    /// The pass's name, unique within a pipeline (lower-case, dash-separated by
    /// convention, e.g. `fuse-weight-update`).
    fn name(&self) -> &str;

    /// Run the pass over `ir`, reporting whether it changed anything and what.
    fn run(&self, ir: &mut Ir) -> Result<PassOutcome>;
}

impl<P: Pass + ?Sized> Pass for Box<P> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn run(&self, ir: &mut Ir) -> Result<PassOutcome> {
        (**self).run(ir)
    }
}

impl<P: Pass + ?Sized> Pass for Arc<P> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn run(&self, ir: &mut Ir) -> Result<PassOutcome> {
        (**self).run(ir)
    }
}

/// What one run of a [`Pass`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PassOutcome {
    /// Whether the IR changed.
    pub changed: bool,
    /// What changed, for the built-in passes whose results [`PrepareReport`] collects.
    pub details: PassDetails,
    /// Anything else worth reporting, one line each (e.g. names of rewritten ops).
    pub notes: Vec<String>,
}

impl PassOutcome {
    /// Nothing changed.
    pub fn unchanged() -> Self {
        PassOutcome::default()
    }

    /// The IR changed iff `changed`.
    pub fn changed(changed: bool) -> Self {
        PassOutcome { changed, ..PassOutcome::default() }
    }

    /// Add a note.
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }
}

/// Structured results of the built-in passes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum PassDetails {
    /// Nothing structured (checks and custom passes).
    #[default]
    None,
    /// What [`Prune`] removed.
    Pruned(PruneReport),
    /// The `ScaledAddInplace` ops [`FuseWeightUpdates`] folded away (`graph/op`).
    FusedWeightUpdates(Vec<String>),
}

/// What one pass did in one [`Pipeline::run`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassRecord {
    /// The pass's name.
    pub name: String,
    /// Whether it changed the IR.
    pub changed: bool,
    /// Its wall time.
    pub elapsed: Duration,
    /// Its structured results, if a built-in pass.
    pub details: PassDetails,
    /// Its notes.
    pub notes: Vec<String>,
}

/// Check every invariant of the IR ([`Ir::verify`]); changes nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verify {
    name: String,
}

impl Verify {
    /// A verification pass called `name` (the default pipeline has `verify` first
    /// and `verify-final` last).
    pub fn named(name: impl Into<String>) -> Self {
        Verify { name: name.into() }
    }
}

impl Default for Verify {
    /// A verification pass called `verify`.
    fn default() -> Self {
        Verify::named(Pipeline::VERIFY)
    }
}

impl Pass for Verify {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(&self, ir: &mut Ir) -> Result<PassOutcome> {
        ir.verify()?;
        Ok(PassOutcome::unchanged())
    }
}

/// No pass of this name in the pipeline ([`Pipeline::insert_before`] and friends).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no pass named `{0}` in the pipeline")]
pub struct UnknownPass(pub String);

/// An ordered list of named passes (see the module docs).
///
/// [`Pipeline::default`] is the default preparation pipeline, [`Pipeline::new`] an
/// empty one. Cloning shares the passes. [`fmt::Display`] prints the names in
/// order, comma separated.
#[derive(Clone)]
pub struct Pipeline {
    passes: Vec<Arc<dyn Pass>>,
    /// Verify the IR after every pass (see [`Pipeline::with_verify_each_pass`]).
    verify_each_pass: bool,
    /// Names of the passes [`Pipeline::with_pattern`] inserts after (the last of
    /// them still present).
    patterns: Vec<String>,
}

impl Pipeline {
    /// Name of the first verification of the default pipeline.
    pub const VERIFY: &'static str = "verify";
    /// Name of [`Prune`].
    pub const PRUNE: &'static str = "prune";
    /// Name of [`FuseWeightUpdates`].
    pub const FUSE_WEIGHT_UPDATE: &'static str = "fuse-weight-update";
    /// Name of the last verification of the default pipeline.
    pub const VERIFY_FINAL: &'static str = "verify-final";

    /// An empty pipeline.
    pub fn new() -> Self {
        let verify_each_pass =
            cfg!(debug_assertions) || std::env::var_os(VERIFY_EACH_PASS_ENV).is_some_and(|v| v == "1");
        Pipeline { passes: Vec::new(), verify_each_pass, patterns: Vec::new() }
    }

    /// Verify the IR after every pass that succeeds, reporting a pass that leaves
    /// an invalid IR as [`TransformError::InvalidAfterPass`] with its name. On by default
    /// in debug builds (`cfg(debug_assertions)`) and when the environment variable
    /// [`VERIFY_EACH_PASS_ENV`] is `1`; otherwise off in release builds, where
    /// only the pipeline's own verification passes run; tests turn it on. Costs one
    /// linear verification per pass.
    pub fn with_verify_each_pass(mut self, on: bool) -> Self {
        self.verify_each_pass = on;
        self
    }

    /// Whether the IR is verified after every pass.
    pub fn verifies_each_pass(&self) -> bool {
        self.verify_each_pass
    }

    /// The pipeline [`crate::prepare::prepare_with`] runs for `options`: `verify`,
    /// `prune`, the patterns (`fuse-all-reduce-update`, `fuse-weight-update`, ...) if [`PrepareOptions::patterns`],
    /// `verify-final`.
    pub fn default_for(options: PrepareOptions) -> Self {
        let mut p = Pipeline::new().with_pass(Verify::named(Self::VERIFY));
        if options.check_inplace_ambiguity {
            p = p.with_pass(InplaceAmbiguityCheck);
        }
        p = p.with_pass(Prune).with_pass(MaterializeViews);
        if options.patterns {
            p = p
                .with_pattern(FuseAllReduceUpdate)
                .with_pattern(FuseWeightUpdates)
                .with_pattern(FuseMaskedSoftmax)
                .with_pattern(FuseMatMulBias)
                .with_pattern(FuseAdam)
                .with_pattern(FuseResidualGrad)
                .with_pattern(FuseBiasGrad);
        }
        if options.inline_calls {
            p = p.with_pass(InlineCalls);
        }
        p.with_pass(Verify::named(Self::VERIFY_FINAL))
    }

    /// Append `pass`.
    pub fn with_pass(mut self, pass: impl Pass + 'static) -> Self {
        self.push(pass);
        self
    }

    /// Append `pass`.
    pub fn push(&mut self, pass: impl Pass + 'static) {
        self.passes.push(Arc::new(pass));
    }

    /// Add a pattern: after the last pattern already there, else before
    /// `verify-final`, else at the end.
    pub fn with_pattern(mut self, pattern: impl Pass + 'static) -> Self {
        let at = match self.patterns.iter().rev().find_map(|p| self.position(p)) {
            Some(last) => last + 1,
            None => self.position(Self::VERIFY_FINAL).unwrap_or(self.passes.len()),
        };
        self.patterns.push(pattern.name().to_string());
        self.passes.insert(at, Arc::new(pattern));
        self
    }

    /// Insert `pass` just before the (first) pass called `name`.
    pub fn insert_before(mut self, name: &str, pass: impl Pass + 'static) -> std::result::Result<Self, UnknownPass> {
        let at = self.position(name).ok_or_else(|| UnknownPass(name.to_string()))?;
        self.passes.insert(at, Arc::new(pass));
        Ok(self)
    }

    /// Insert `pass` just after the (first) pass called `name`.
    pub fn insert_after(mut self, name: &str, pass: impl Pass + 'static) -> std::result::Result<Self, UnknownPass> {
        let at = self.position(name).ok_or_else(|| UnknownPass(name.to_string()))?;
        self.passes.insert(at + 1, Arc::new(pass));
        Ok(self)
    }

    /// Remove the (first) pass called `name`, returning it.
    pub fn remove(&mut self, name: &str) -> Option<Arc<dyn Pass>> {
        let at = self.position(name)?;
        Some(self.passes.remove(at))
    }

    /// Position of the (first) pass called `name`.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.passes.iter().position(|p| p.name() == name)
    }

    /// True if a pass is called `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.position(name).is_some()
    }

    /// The pass names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> + '_ {
        self.passes.iter().map(|p| p.name())
    }

    /// The passes, in order.
    pub fn passes(&self) -> &[Arc<dyn Pass>] {
        &self.passes
    }

    /// Number of passes.
    pub fn len(&self) -> usize {
        self.passes.len()
    }

    /// True if there is no pass.
    pub fn is_empty(&self) -> bool {
        self.passes.is_empty()
    }

    /// Run every pass in order over `ir`; stops at the first error. The report
    /// has a [`PassRecord`] per pass, and collects what every [`Prune`] removed and
    /// every [`FuseWeightUpdates`] folded.
    pub fn run(&self, ir: &mut Ir) -> Result<PrepareReport> {
        tracing::debug!(pipeline = %self, "running pass pipeline");
        let start = Instant::now();
        let mut report = PrepareReport::default();
        for pass in &self.passes {
            let name = pass.name();
            let t = Instant::now();
            let outcome = {
                let _span = tracing::debug_span!("pass", name).entered();
                pass.run(ir)
            };
            let elapsed = t.elapsed();
            let outcome = match outcome {
                Ok(o) => o,
                Err(e) => {
                    tracing::debug!(pass = name, ?elapsed, error = %e, "pass failed");
                    return Err(e);
                }
            };
            tracing::debug!(pass = name, ?elapsed, changed = outcome.changed, "pass done");
            if self.verify_each_pass {
                if let Err(e) = ir.verify() {
                    tracing::debug!(pass = name, error = %e, "pass left an invalid IR");
                    return Err(TransformError::InvalidAfterPass { pass: name.to_string(), source: Box::new(e) });
                }
            }
            match &outcome.details {
                PassDetails::None => {}
                PassDetails::Pruned(r) => report.pruned.merge(r.clone()),
                PassDetails::FusedWeightUpdates(f) => report.fused_weight_updates.extend(f.iter().cloned()),
            }
            report.passes.push(PassRecord {
                name: name.to_string(),
                changed: outcome.changed,
                elapsed,
                details: outcome.details,
                notes: outcome.notes,
            });
        }
        tracing::debug!(elapsed = ?start.elapsed(), "pass pipeline done");
        Ok(report)
    }
}

impl Default for Pipeline {
    /// The default preparation pipeline: [`Pipeline::default_for`] the default options.
    fn default() -> Self {
        Pipeline::default_for(PrepareOptions::default())
    }
}

impl fmt::Display for Pipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (k, name) in self.names().enumerate() {
            if k > 0 {
                f.write_str(", ")?;
            }
            f.write_str(name)?;
        }
        Ok(())
    }
}

impl fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use popart_ir::{AttrValue, Attributes, DataType, HostTensor, IrError, StreamDirection, TensorInfo, TensorKind};
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn assert_send_sync_clone<T: Send + Sync + Clone>() {}

    #[test]
    fn default_pipeline_names_in_order() {
        assert_send_sync_clone::<Pipeline>();
        let p = Pipeline::default_for(PrepareOptions::default());
        assert_eq!(
            p.names().collect::<Vec<_>>(),
            vec![
                "verify",
                "inplace-ambiguity",
                "prune",
                "materialize-views",
                "fuse-all-reduce-update",
                "fuse-weight-update",
                "fuse-masked-softmax",
                "fuse-matmul-bias",
                "fuse-adam",
                "fuse-residual-grad",
                "fuse-bias-grad",
                "verify-final"
            ]
        );
        assert_eq!(
            p.to_string(),
            "verify, inplace-ambiguity, prune, materialize-views, fuse-all-reduce-update, fuse-weight-update, fuse-masked-softmax, fuse-matmul-bias, fuse-adam, fuse-residual-grad, fuse-bias-grad, verify-final"
        );
        assert_eq!(
            format!("{p:?}"),
            r#"["verify", "inplace-ambiguity", "prune", "materialize-views", "fuse-all-reduce-update", "fuse-weight-update", "fuse-masked-softmax", "fuse-matmul-bias", "fuse-adam", "fuse-residual-grad", "fuse-bias-grad", "verify-final"]"#
        );
        let p = Pipeline::default_for(PrepareOptions { patterns: false, ..PrepareOptions::default() });
        assert_eq!(p.to_string(), "verify, inplace-ambiguity, prune, materialize-views, verify-final");
        assert_eq!(p.len(), 5);
        assert!(!p.contains(Pipeline::FUSE_WEIGHT_UPDATE));
        assert!(Pipeline::new().is_empty());
        assert_eq!(
            Pipeline::default().to_string(),
            "verify, inplace-ambiguity, prune, materialize-views, fuse-all-reduce-update, fuse-weight-update, fuse-masked-softmax, fuse-matmul-bias, fuse-adam, fuse-residual-grad, fuse-bias-grad, verify-final"
        );
    }

    /// Tags every op of the main graph with IPU `<k>` (its placement: attributes
    /// are the op type's own) and counts its runs.
    struct TagOps {
        runs: AtomicUsize,
    }

    impl Pass for TagOps {
        fn name(&self) -> &str {
            "tag-ops"
        }

        fn run(&self, ir: &mut Ir) -> Result<PassOutcome> {
            self.runs.fetch_add(1, Ordering::Relaxed);
            let g = ir.main_graph_mut();
            let ops = g.ops_in_creation_order();
            let mut outcome = PassOutcome::changed(!ops.is_empty());
            for (k, o) in ops.into_iter().enumerate() {
                g.set_op_placement(o, popart_ir::Placement { ipu: Some(k as u32), ..Default::default() })?;
                outcome.notes.push(format!("{} = {k}", g.op(o)?.name));
            }
            Ok(outcome)
        }
    }

    /// main: c -> Relu (kept: stored) and Exp (dead).
    fn small_ir() -> Ir {
        let mut ir = Ir::new();
        let main = ir.main_graph_id();
        let info = TensorInfo::new(DataType::Float32, [2]);
        let g = ir.main_graph_mut();
        let c = g.add_tensor("c", info.clone(), TensorKind::Constant(HostTensor::zeros(info.clone()))).unwrap();
        g.add_tensor("out", info, TensorKind::Stream(StreamDirection::DeviceToHost)).unwrap();
        let relu = ir.create_op(main, "Relu", Attributes::new(), &[(0, c)], "relu").unwrap();
        let y = ir.graph(main).unwrap().op(relu).unwrap().output(0).unwrap();
        let store = Attributes::new().with("stream", AttrValue::Str("out".into()));
        ir.create_op(main, "HostStore", store, &[(0, y)], "store").unwrap();
        ir.create_op(main, "Exp", Attributes::new(), &[(0, c)], "dead").unwrap();
        ir
    }

    #[test]
    fn custom_pass_runs_in_place_and_its_effect_is_visible() {
        let tag = Arc::new(TagOps { runs: AtomicUsize::new(0) });
        let p =
            Pipeline::default_for(PrepareOptions::default()).insert_after(Pipeline::PRUNE, Arc::clone(&tag)).unwrap();
        assert_eq!(
            p.to_string(),
            "verify, inplace-ambiguity, prune, tag-ops, materialize-views, fuse-all-reduce-update, fuse-weight-update, fuse-masked-softmax, fuse-matmul-bias, fuse-adam, fuse-residual-grad, fuse-bias-grad, verify-final"
        );
        let mut ir = small_ir();
        let report = p.run(&mut ir).unwrap();
        assert_eq!(tag.runs.load(Ordering::Relaxed), 1);
        // It ran after prune: the dead op is gone and was not tagged.
        assert_eq!(report.pruned.removed_ops, vec!["main/dead"]);
        let g = ir.main_graph();
        let tags: Vec<(&str, i64)> = g
            .ops_in_creation_order()
            .into_iter()
            .map(|o| g.op(o).unwrap())
            .map(|op| (op.name.as_str(), i64::from(op.placement.ipu.unwrap())))
            .collect();
        assert_eq!(tags, vec![("relu", 0), ("store", 1)]);
        let names: Vec<&str> = report.passes.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, p.names().collect::<Vec<_>>());
        let rec = report.pass("tag-ops").unwrap();
        assert!(rec.changed);
        assert_eq!(rec.notes, vec!["relu = 0", "store = 1"]);
        assert!(report.pass(Pipeline::PRUNE).unwrap().changed);
        assert!(!report.pass(Pipeline::VERIFY_FINAL).unwrap().changed);

        // A clone shares the pass; a boxed pass goes in as well.
        let p2 = p.clone().with_pattern(Box::new(Verify::named("verify-patterns")) as Box<dyn Pass>);
        assert_eq!(
            p2.to_string(),
            "verify, inplace-ambiguity, prune, tag-ops, materialize-views, fuse-all-reduce-update, fuse-weight-update, fuse-masked-softmax, fuse-matmul-bias, fuse-adam, fuse-residual-grad, fuse-bias-grad, verify-patterns, verify-final"
        );
        p2.run(&mut small_ir()).unwrap();
        assert_eq!(tag.runs.load(Ordering::Relaxed), 2);
        assert_eq!(p.insert_before("nope", Verify::default()).unwrap_err(), UnknownPass("nope".into()));
    }

    /// main -> Call(A) -> Call(B), each with two outputs of which the caller reads
    /// one: one prune pass drops the unread output of A, then (A's ops computing it
    /// gone) the one of B.
    #[test]
    fn prune_drops_unread_outputs_down_a_call_chain() {
        let mut ir = Ir::new();
        let main = ir.main_graph_id();
        let info = TensorInfo::new(DataType::Float32, [2]);
        let out = |ir: &Ir, g, op| ir.graph(g).unwrap().op(op).unwrap().output(0).unwrap();
        let call = |ir: &mut Ir, caller, callee, x, name: &str| {
            let attrs = Attributes::new().with("graph", AttrValue::Graph(callee));
            ir.create_op(caller, "Call", attrs, &[(0, x)], name).unwrap()
        };
        let b = ir.create_graph("B").unwrap();
        let bx = ir.graph_mut(b).unwrap().add_input("x", info.clone()).unwrap();
        for name in ["b0", "b1"] {
            let o = ir.create_op(b, "Relu", Attributes::new(), &[(0, bx)], name).unwrap();
            let t = out(&ir, b, o);
            ir.graph_mut(b).unwrap().add_output(t).unwrap();
        }
        let a = ir.create_graph("A").unwrap();
        let ax = ir.graph_mut(a).unwrap().add_input("x", info.clone()).unwrap();
        let cb = call(&mut ir, a, b, ax, "call_b");
        for (k, name) in ["a0", "a1"].into_iter().enumerate() {
            let t = ir.graph(a).unwrap().op(cb).unwrap().output(k as u32).unwrap();
            let o = ir.create_op(a, "Exp", Attributes::new(), &[(0, t)], name).unwrap();
            let t = out(&ir, a, o);
            ir.graph_mut(a).unwrap().add_output(t).unwrap();
        }
        let g = ir.main_graph_mut();
        let c = g.add_tensor("c", info.clone(), TensorKind::Constant(HostTensor::zeros(info.clone()))).unwrap();
        g.add_tensor("out", info, TensorKind::Stream(StreamDirection::DeviceToHost)).unwrap();
        let ca = call(&mut ir, main, a, c, "call_a");
        let a0 = ir.main_graph().op(ca).unwrap().output(0).unwrap();
        let store = Attributes::new().with("stream", AttrValue::Str("out".into()));
        ir.create_op(main, "HostStore", store, &[(0, a0)], "store").unwrap();

        let report = Pipeline::default().run(&mut ir).unwrap();
        // Reported in graph creation order (B first), whatever order prune visits them in.
        assert_eq!(report.pruned.removed_outputs, vec!["B/b1:0", "A/a1:0"]);
        assert_eq!(report.pruned.removed_ops, vec!["B/b1", "A/a1"]);
        assert_eq!(ir.graph(a).unwrap().outputs().len(), 1);
        assert_eq!(ir.graph(b).unwrap().outputs().len(), 1);
        assert_eq!(ir.graph(a).unwrap().op(cb).unwrap().outputs().len(), 1);
        // Nothing left to do.
        assert!(crate::prune::prune(&mut ir).unwrap().is_empty());
    }

    /// Disconnects the input of the first op that has one: the op's shape
    /// inference no longer holds.
    struct BreakIr;

    impl Pass for BreakIr {
        fn name(&self) -> &str {
            "break-ir"
        }

        fn run(&self, ir: &mut Ir) -> Result<PassOutcome> {
            let g = ir.main_graph_mut();
            let op = g.ops().find(|op| !op.inputs().is_empty()).map(|op| op.id).expect("an op with an input");
            g.disconnect_input(op, 0)?;
            Ok(PassOutcome::changed(true))
        }
    }

    #[test]
    fn final_verify_catches_a_pass_that_breaks_the_ir() {
        let p = Pipeline::default_for(PrepareOptions::default()).with_pattern(BreakIr);
        assert_eq!(
            p.to_string(),
            "verify, inplace-ambiguity, prune, materialize-views, fuse-all-reduce-update, fuse-weight-update, fuse-masked-softmax, fuse-matmul-bias, fuse-adam, fuse-residual-grad, fuse-bias-grad, break-ir, verify-final"
        );
        let err = p.run(&mut small_ir()).unwrap_err();
        assert!(matches!(&err, TransformError::Ir(IrError::Inference { op, .. }) if op == "relu"), "{err:?}");
        // Without the final verification nothing notices.
        let mut p = p;
        assert!(p.remove(Pipeline::VERIFY_FINAL).is_some());
        p.run(&mut small_ir()).unwrap();
    }
}
