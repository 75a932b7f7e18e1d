//! The typed errors of the transforms: a caller matches the variant, and IR
//! errors met by a pass stay `TransformError::Ir`.

use popart_ir::ops::view::ConcatInplaceAttrs;
use popart_ir::ops::AxisError;
use popart_ir::{Attributes, DataType, Ir, IrError, OpAttrs, TensorInfo};
use popart_transforms::views::MaterializeViews;
use popart_transforms::{Pass, TransformError};

/// Graph `g(x, y, z)`: `c = concat_(x, y)` along axis 0, then `c += z`; the
/// write must reach `x` and `y` through slices of `c` along the view's axis.
fn written_concat_view(ir: &mut Ir) -> (popart_ir::GraphId, popart_ir::OpId) {
    let g = ir.create_graph("g").unwrap();
    let f32s = |shape: &[usize]| TensorInfo::new(DataType::Float32, shape);
    let graph = ir.graph_mut(g).unwrap();
    let x = graph.add_input("x", f32s(&[2, 3])).unwrap();
    let y = graph.add_input("y", f32s(&[2, 3])).unwrap();
    let z = graph.add_input("z", f32s(&[4, 3])).unwrap();
    let attrs = ConcatInplaceAttrs { axis: 0, num_inputs: 2 }.to_attrs();
    let c = ir.create_op(g, "ConcatInplace", attrs, &[(0, x), (1, y)], "c").unwrap();
    let cv = ir.graph(g).unwrap().op(c).unwrap().output(0).unwrap();
    ir.create_op(g, "AddInplace", Attributes::new(), &[(0, cv), (1, z)], "add").unwrap();
    (g, c)
}

#[test]
fn a_view_whose_axis_does_not_fit_its_bases_is_a_view_axis_error() {
    let mut ir = Ir::new();
    let (g, c) = written_concat_view(&mut ir);
    // Valid, the pass materializes the view.
    let mut ok = ir.clone();
    assert!(MaterializeViews.run(&mut ok).unwrap().changed);
    // Edited past its inference: axis 5 of rank-2 bases.
    *ir.graph_mut(g).unwrap().op_attrs_mut(c).unwrap() = ConcatInplaceAttrs { axis: 5, num_inputs: 2 }.to_attrs();
    let err = MaterializeViews.run(&mut ir).unwrap_err();
    assert_eq!(err, TransformError::ViewAxis { op: "c".into(), error: AxisError::OutOfRange { axis: 5, rank: 2 } });
    assert!(err.to_string().starts_with("view `c`: "), "{err}");
}

#[test]
fn ir_errors_met_by_a_pass_stay_ir_errors() {
    let mut ir = Ir::new();
    let (g, c) = written_concat_view(&mut ir);
    // An attribute of the wrong kind: the view's typed decode names the op.
    ir.graph_mut(g).unwrap().op_attrs_mut(c).unwrap().set("axis", popart_ir::AttrValue::Str("0".into()));
    match MaterializeViews.run(&mut ir) {
        Err(TransformError::Ir(IrError::Attribute { op, op_type, .. })) => {
            assert_eq!((op.as_str(), op_type.as_str()), ("c", "ConcatInplace"));
        }
        other => panic!("expected an attribute error, got {other:?}"),
    }
}
