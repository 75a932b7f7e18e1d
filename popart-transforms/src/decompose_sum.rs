//! `decompose_sum`: each `Sum` of more than two tensors (autodiff's sum of a
//! tensor's gradient contributions) becomes a chain of two-input `Add`s (PopART's
//! `DecomposeSum`, PopXL's `popxl.transforms.decompose_sum`).
//!
//! The inputs are added in the order their producers run (graph inputs and
//! other unproduced tensors first), so each contribution can be freed as soon as
//! it is added rather than all living until one `Sum` reads them. Values agree up
//! to the order of the floating-point additions.

use crate::Result;
use popart_ir::ops::all::Add;
use popart_ir::ops::grad::Sum;
use popart_ir::{Attributes, GraphId, Ir, OpId, TensorId, TensorKind};

/// Decompose every `Sum` of more than two inputs in graph `graph`; returns how
/// many were decomposed.
///
/// ```
/// use popart_ir::{Attributes, DataType, Ir, TensorInfo};
/// let mut ir = Ir::new();
/// let main = ir.main_graph_id();
/// let info = TensorInfo::new(DataType::Float32, [2]);
/// let ins: Vec<_> = (0..3).map(|i| ir.main_graph_mut().add_input(&format!("x{i}"), info.clone()).unwrap()).collect();
/// let conn: Vec<_> = ins.iter().enumerate().map(|(i, &t)| (i as u32, t)).collect();
/// ir.create_op(main, "Sum", Attributes::new(), &conn, "sum").unwrap();
/// assert_eq!(popart_transforms::decompose_sum::decompose_sum(&mut ir, main).unwrap(), 1);
/// let g = ir.main_graph();
/// assert_eq!(g.ops().filter(|o| o.op_type() == "Add").count(), 2);
/// assert_eq!(g.ops().filter(|o| o.op_type() == "Sum").count(), 0);
/// ```
pub fn decompose_sum(ir: &mut Ir, graph: GraphId) -> Result<usize> {
    let schedule = ir.schedule(graph)?;
    let g = ir.graph_mut(graph)?;
    let position = |op: OpId| schedule.iter().position(|&o| o == op).unwrap_or(usize::MAX);
    let sums: Vec<OpId> = schedule
        .iter()
        .copied()
        .filter(|&o| g.op(o).is_ok_and(|op| op.is::<Sum>() && op.inputs().tensors().count() > 2))
        .collect();
    for &sum in &sums {
        let op = g.op(sum)?;
        let (name, placement) = (op.name.clone(), op.placement);
        let mut inputs: Vec<(usize, TensorId)> = op
            .inputs()
            .tensors()
            .map(|t| Ok((g.tensor(t)?.producer().map_or(0, |p| position(p.op).saturating_add(1)), t)))
            .collect::<Result<_>>()?;
        inputs.sort_by_key(|&(pos, _)| pos);
        let y = g.disconnect_output(sum, 0)?;
        let info = g.tensor(y)?.info.clone();
        let Some(&(_, mut acc)) = inputs.first() else { continue };
        let last = inputs.len() - 1;
        let mut adds = Vec::with_capacity(last);
        for (k, &(_, t)) in inputs.iter().enumerate().skip(1) {
            let add = g.add_op(&Add, Attributes::new(), &format!("{name}_add{k}"));
            g.set_op_placement(add, placement)?;
            g.connect_input(add, 0, acc)?;
            g.connect_input(add, 1, t)?;
            acc = if k == last {
                g.connect_output(add, 0, y)?;
                y
            } else {
                let partial = g.add_tensor(&format!("{name}_partial{k}"), info.clone(), TensorKind::ActGrad)?;
                g.connect_output(add, 0, partial)?;
                partial
            };
            adds.push(add);
        }
        // Constraints on the sum hold for the whole chain: before its first op, after its last.
        if let (Some(&first), Some(&end)) = (adds.first(), adds.last()) {
            let before: Vec<OpId> = g.topo_cons().befores(sum).iter().map(|c| c.op).collect();
            let after: Vec<OpId> = g.topo_cons().afters(sum).iter().map(|c| c.op).collect();
            for b in before {
                g.add_topo_con(b, first)?;
            }
            for a in after {
                g.add_topo_con(end, a)?;
            }
        }
        g.erase_op_and_outputs(sum)?;
    }
    Ok(sums.len())
}
