//! Constants as in-place targets (refused when the op is created) and host
//! stream tensors used directly as op inputs (refused, pointing at `host_load`).

use popart_ir::IrError;
use popxl::{ops, Ir, PopXlError as E, Tensor};

use super::fixtures::{ones, var_ones};
use super::harness::{case, Case, CaseResult, Category::ConstantsStreams};

fn in_main<T>(f: impl FnOnce() -> T) -> T {
    let ir = Ir::new();
    let main = ir.main_graph();
    main.with(f)
}

/// The stream tensor of a new h2d stream `s` of float32[2].
fn stream_tensor() -> popxl::Result<Tensor> {
    Ok(popxl::h2d_stream([2], popxl::float32, "s")?.tensor().clone())
}

pub fn cases() -> Vec<Case> {
    vec![
        case(ConstantsStreams, "add_inplace_on_constant", || {
            in_main(|| {
                let c = ones(&[2], "c")?;
                let x = var_ones(&[2], "x")?;
                expect_err!(ops::add_(&c, &x), E::Ir(IrError::ModifiesConstant { .. }), ["`c`", "AddInplace"])
            })
        }),
        case(ConstantsStreams, "accumulate_on_constant", || {
            in_main(|| {
                let c = ones(&[2], "acc")?;
                let x = var_ones(&[2], "x")?;
                expect_err!(ops::accumulate_(&c, &x, 1.0f32), E::Ir(IrError::ModifiesConstant { .. }), ["`acc`"])
            })
        }),
        case(ConstantsStreams, "scaled_add_on_constant", || {
            in_main(|| {
                let c = ones(&[2], "weight_const")?;
                let x = var_ones(&[2], "x")?;
                expect_err!(
                    ops::scaled_add_(&c, &x, 1.0f32, -0.1f32),
                    E::Ir(IrError::ModifiesConstant { .. }),
                    ["`weight_const`"]
                )
            })
        }),
        case(ConstantsStreams, "copy_var_update_on_constant", || {
            in_main(|| {
                let c = ones(&[2], "c")?;
                let x = var_ones(&[2], "x")?;
                expect_err!(ops::copy_var_update_(&c, &x), E::Ir(IrError::ModifiesConstant { .. }), ["`c`"])
            })
        }),
        case(ConstantsStreams, "add_inplace_on_constant_in_subgraph", || {
            let ir = Ir::new();
            let g = ir.create_empty_graph("sub")?;
            g.with(|| {
                let c = ones(&[2], "c")?;
                let x = popxl::graph_input([2], popxl::float32, "x")?;
                expect_err!(ops::add_(&c, &x), E::Ir(IrError::ModifiesConstant { .. }), ["`c`", "`sub`"])
            })
        }),
        case(ConstantsStreams, "add_inplace_on_variable_is_fine", || {
            in_main(|| -> CaseResult {
                let w = var_ones(&[2], "w")?;
                let c = ones(&[2], "c")?;
                ops::add_(&w, &c)?;
                Ok(())
            })
        }),
        case(ConstantsStreams, "constant_as_in_place_target_leaves_no_op", || {
            let ir = Ir::new();
            let main = ir.main_graph();
            main.with(|| -> CaseResult {
                let c = ones(&[2], "c")?;
                let x = var_ones(&[2], "x")?;
                let _ = ops::add_(&c, &x);
                super::harness::ensure(main.num_ops()? == 0, || "the refused op stayed in the graph".into())
            })
        }),
        case(ConstantsStreams, "in_place_builder_on_constant", || {
            in_main(|| {
                let c = ones(&[2], "c")?;
                let x = var_ones(&[2], "x")?;
                let r = ops::OpBuilder::new("custom_add_", &popart_ir::ops::all::AddInplace)
                    .input(0, &c)
                    .input(1, &x)
                    .create1();
                expect_err!(r, E::Ir(IrError::ModifiesConstant { .. }), ["`c`"])
            })
        }),
        case(ConstantsStreams, "stream_as_add_input", || {
            in_main(|| {
                let s = stream_tensor()?;
                let x = var_ones(&[2], "x")?;
                expect_err!(ops::add(&s, &x), E::Ir(IrError::StreamAsInput { .. }), ["`s`", "host_load", "Add"])
            })
        }),
        case(ConstantsStreams, "stream_as_matmul_input", || {
            in_main(|| {
                let s = popxl::h2d_stream([2, 2], popxl::float32, "s2")?.tensor().clone();
                let w = var_ones(&[2, 2], "w")?;
                expect_err!(ops::matmul(&w, &s), E::Ir(IrError::StreamAsInput { .. }), ["`s2`", "host_load"])
            })
        }),
        case(ConstantsStreams, "stream_as_unary_input", || {
            in_main(|| {
                let s = stream_tensor()?;
                expect_err!(ops::relu(&s), E::Ir(IrError::StreamAsInput { .. }), ["`s`", "host_load"])
            })
        }),
        case(ConstantsStreams, "stream_as_call_input", || {
            let ir = Ir::new();
            let _g = ir.main_graph().enter();
            let x = var_ones(&[2], "x")?;
            let g = ir.create_graph_named("neg", |x: Tensor| -> popxl::Result<Tensor> { ops::negate(&x) }, &x)?;
            let s = stream_tensor()?;
            expect_err!(ops::call(&g, &[&s], &[]), E::Ir(IrError::StreamAsInput { .. }), ["`s`", "host_load"])
        }),
        case(ConstantsStreams, "stream_stored_directly", || {
            in_main(|| {
                let s = stream_tensor()?;
                let out = popxl::d2h_stream([2], popxl::float32, "out")?;
                expect_err!(ops::host_store(&out, &s), E::Ir(IrError::StreamAsInput { .. }), ["`s`", "host_load"])
            })
        }),
        case(ConstantsStreams, "stream_as_in_place_target", || {
            in_main(|| {
                let s = stream_tensor()?;
                let x = var_ones(&[2], "x")?;
                expect_err!(
                    ops::add_(&s, &x),
                    E::Ir(IrError::StreamAsInput { .. } | IrError::ModifiesConstant { .. }),
                    ["`s`"]
                )
            })
        }),
        case(ConstantsStreams, "d2h_stream_as_op_input", || {
            in_main(|| {
                let s = popxl::d2h_stream([2], popxl::float32, "sink")?.tensor().clone();
                expect_err!(ops::negate(&s), E::Ir(IrError::StreamAsInput { .. }), ["`sink`"])
            })
        }),
        case(ConstantsStreams, "host_store_shape_mismatch", || {
            in_main(|| {
                let out = popxl::d2h_stream([3], popxl::float32, "out")?;
                let x = var_ones(&[2], "x")?;
                expect_err!(ops::host_store(&out, &x), E::HostStoreShapeMismatch { .. }, ["`out`", "`x`"])
            })
        }),
        case(ConstantsStreams, "host_store_dtype_mismatch", || {
            in_main(|| {
                let out = popxl::d2h_stream([2], popxl::int32, "out")?;
                let x = var_ones(&[2], "x")?;
                expect_err!(
                    ops::host_store(&out, &x),
                    E::HostStoreDtypeMismatch { .. },
                    ["`out`", "`x`", "int32", "float32"]
                )
            })
        }),
        case(ConstantsStreams, "h2d_stream_from_a_variable_tensor", || {
            in_main(|| {
                let x = var_ones(&[2], "x")?;
                expect_err!(popxl::HostToDeviceStream::from_tensor(x), E::NotAStream { .. }, ["`x`"])
            })
        }),
    ]
}
