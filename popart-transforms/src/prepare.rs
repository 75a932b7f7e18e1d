//! Session preparation: the mandatory steps between a user-built IR and lowering.
//!
//! 1. [`Ir::verify`]: every structural invariant, shape inference, schedulability
//!    (a topological-constraint cycle is reported here);
//! 2. [`prune`](crate::prune::prune): drop ops without side effects whose outputs
//!    nobody needs;
//! 3. mandatory patterns: none are needed by the current op set (every op type has a
//!    direct lowering), so this step is empty;
//! 4. verify again, so lowering only ever sees a valid IR.

use popart_ir::{Ir, Result};

use crate::prune::{prune, PruneReport};

/// What [`prepare`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrepareReport {
    /// What pruning removed.
    pub pruned: PruneReport,
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
    ir.verify()?;
    let pruned = prune(ir)?;
    ir.verify()?;
    Ok(PrepareReport { pruned })
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
