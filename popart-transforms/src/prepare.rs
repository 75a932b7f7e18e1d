//! Session preparation: the mandatory steps between a user-built IR and lowering.
//!
//! 1. [`Ir::verify`]: every structural invariant, shape inference, schedulability
//!    (a topological-constraint cycle is reported here);
//! 2. [`prune`]: drop ops without side effects whose outputs
//!    nobody needs;
//! 3. patterns ([`crate::patterns`]), unless [`PrepareOptions::patterns`] is off: no
//!    pattern is mandatory (every op type has a direct lowering), they only make the
//!    program faster or smaller;
//! 4. verify again, so lowering only ever sees a valid IR.

use popart_ir::{Ir, Result};

use crate::prune::{prune, PruneReport};

/// What [`prepare`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrepareReport {
    /// What pruning removed.
    pub pruned: PruneReport,
    /// `ScaledAddInplace` ops folded into their gradient's matmul (`graph/op` names).
    pub fused_weight_updates: Vec<String>,
}

/// Options of [`prepare_with`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrepareOptions {
    /// Apply the optimisation patterns (default true).
    pub patterns: bool,
}

impl Default for PrepareOptions {
    fn default() -> Self {
        PrepareOptions { patterns: true }
    }
}

/// Prepare an IR for lowering (see the module docs). On error the IR may have been
/// partly pruned but is otherwise unchanged.
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
/// ```
pub fn prepare(ir: &mut Ir) -> Result<PrepareReport> {
    prepare_with(ir, PrepareOptions::default())
}

/// [`prepare`] with options.
pub fn prepare_with(ir: &mut Ir, options: PrepareOptions) -> Result<PrepareReport> {
    ir.verify()?;
    let pruned = prune(ir)?;
    let fused_weight_updates = if options.patterns { crate::patterns::fuse_weight_updates(ir)? } else { Vec::new() };
    ir.verify()?;
    Ok(PrepareReport { pruned, fused_weight_updates })
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
        ir.main_graph_mut().add_topo_con(b, a).unwrap();
        match prepare(&mut ir) {
            Err(IrError::Cycle { graph, ops }) => {
                assert_eq!(graph, "main");
                let mut ops = ops;
                ops.sort();
                assert_eq!(ops, vec!["a", "b"]);
            }
            other => panic!("expected a cycle error, got {other:?}"),
        }
    }
}
