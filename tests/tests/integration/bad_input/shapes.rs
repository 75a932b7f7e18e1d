//! Shapes and checked arithmetic: reshape products, slice steps and bounds,
//! concat, broadcasting, matmul, huge repeat counts, dimensions above `i64::MAX`.

use popart_ir::IrError;
use popxl::{ops, s, Ir, PopXlError as E, SliceIndex, Tensor};

use super::fixtures::{ones, store_model, values};
use super::harness::{case, ensure, Case, CaseResult, Category::Shapes};

/// Run `f` with a fresh IR's main graph as the current graph.
fn in_main<T>(f: impl FnOnce() -> T) -> T {
    let ir = Ir::new();
    let main = ir.main_graph();
    main.with(f)
}

/// A graph `x -> x + 1` over float32[2] (for repeat).
fn body(ir: &Ir, x: &Tensor) -> popxl::Result<popxl::Graph> {
    ir.create_graph_named("body", |x: Tensor| -> popxl::Result<Tensor> { ops::add(&x, &ones(&[2], "one")?) }, x)
}

fn repeat_count(count: usize) -> Result<Vec<Tensor>, E> {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x = ones(&[2], "x")?;
    let g = body(&ir, &x)?;
    ops::repeat(&g, count, &[&x], &[])
}

pub fn cases() -> Vec<Case> {
    vec![
        case(Shapes, "reshape_product_mismatch", || {
            in_main(|| {
                let a = ones(&[2, 3], "a")?;
                expect_err!(ops::reshape(&a, &[4, 2]), E::Ir(IrError::Inference { .. }), ["Reshape"])
            })
        }),
        case(Shapes, "reshape_inferred_dim_not_integral", || {
            in_main(|| {
                let a = ones(&[2, 3], "a")?;
                expect_err!(ops::reshape(&a, &[4, -1]), E::Ir(IrError::Inference { .. }), ["Reshape"])
            })
        }),
        case(Shapes, "reshape_two_inferred_dims", || {
            in_main(|| {
                let a = ones(&[2, 3], "a")?;
                expect_err!(ops::reshape(&a, &[-1, -1]), E::Ir(IrError::Inference { .. }), ["Reshape"])
            })
        }),
        case(Shapes, "reshape_negative_dim", || {
            in_main(|| {
                let a = ones(&[2, 3], "a")?;
                expect_err!(ops::reshape(&a, &[-2, -3]), E::Ir(IrError::Inference { .. }), ["Reshape"])
            })
        }),
        case(Shapes, "reshape_product_overflows_i64", || {
            in_main(|| {
                let a = ones(&[4], "a")?;
                expect_err!(
                    ops::reshape(&a, &[i64::MAX, i64::MAX]),
                    E::Ir(IrError::Inference { .. } | IrError::TensorTooLarge { .. }),
                    ["Reshape"]
                )
            })
        }),
        case(Shapes, "reshape_product_wraps_to_the_element_count", || {
            // 2^32 * 2^32 * 4 wraps to 0 in u64; 2^62 * 4 wraps to 0 too: must not match an empty tensor.
            in_main(|| {
                let a = ones(&[0], "a")?;
                expect_err!(
                    ops::reshape(&a, &[1 << 62, 4]),
                    E::Ir(IrError::Inference { .. } | IrError::TensorTooLarge { .. }),
                    ["Reshape"]
                )
            })
        }),
        case(Shapes, "reshape_inferred_dim_with_zero", || {
            // numpy: "cannot reshape array of size 0 into shape (-1,0)".
            in_main(|| {
                let a = ones(&[0, 5], "a")?;
                expect_err!(ops::reshape(&a, &[-1, 0]), E::Ir(IrError::Inference { .. }), ["Reshape"])
            })
        }),
        case(Shapes, "slice_step_zero", || {
            in_main(|| {
                let a = ones(&[4], "a")?;
                expect_err!(ops::slice(&a, &[0], &[4], &[0], &[0]), E::Ir(IrError::Inference { .. }), ["Slice"])
            })
        }),
        case(Shapes, "index_step_zero", || {
            in_main(|| {
                let a = ones(&[4], "a")?;
                expect_err!(a.index(&[SliceIndex::from(..).step(0)]), E::ValueOutOfRange { .. }, ["step", "axis 0"])
            })
        }),
        case(Shapes, "slice_step_i64_min_is_empty_like_numpy", || {
            in_main(|| {
                let a = ones(&[4], "a")?;
                let s = ops::slice(&a, &[0], &[4], &[i64::MIN], &[0])?;
                ensure(s.shape() == [0], || format!("a[0:4:i64::MIN] has shape {:?}, numpy gives (0,)", s.shape()))
            })
        }),
        case(Shapes, "slice_step_i64_min_backwards", || {
            in_main(|| {
                let a = ones(&[4], "a")?;
                let s = ops::slice(&a, &[3], &[0], &[i64::MIN], &[0])?;
                ensure(s.shape() == [1], || format!("a[3:0:i64::MIN] has shape {:?}, numpy gives (1,)", s.shape()))
            })
        }),
        case(Shapes, "slice_extreme_bounds_clamp_like_numpy", || {
            in_main(|| {
                let a = ones(&[4], "a")?;
                let s = ops::slice(&a, &[i64::MIN], &[i64::MAX], &[1], &[0])?;
                ensure(s.shape() == [4], || format!("a[MIN:MAX] has shape {:?}, numpy gives (4,)", s.shape()))
            })
        }),
        case(Shapes, "slice_reverse_extreme_bounds_clamp_like_numpy", || {
            in_main(|| {
                let a = ones(&[4], "a")?;
                let s = ops::slice(&a, &[i64::MAX], &[i64::MIN], &[-1], &[0])?;
                ensure(s.shape() == [4], || format!("a[MAX:MIN:-1] has shape {:?}, numpy gives (4,)", s.shape()))
            })
        }),
        case(Shapes, "slice_step_i64_max", || {
            in_main(|| {
                let a = ones(&[4], "a")?;
                let s = ops::slice(&a, &[1], &[i64::MAX], &[i64::MAX], &[0])?;
                ensure(s.shape() == [1], || format!("a[1::MAX] has shape {:?}, numpy gives (1,)", s.shape()))
            })
        }),
        case(Shapes, "slice_values_with_negative_step", || {
            let (ir, out) = store_model(|| {
                let a = popxl::constant(vec![0.0f32, 1.0, 2.0, 3.0, 4.0], "a")?;
                ops::slice(&a, &[-1], &[i64::MIN], &[-2], &[0])
            })?;
            let got = values(&super::fixtures::run_once(ir)?, &out);
            ensure(got == [4.0, 2.0, 0.0], || format!("a[-1::-2] = {got:?}, numpy gives [4, 2, 0]"))
        }),
        case(Shapes, "slice_mismatched_attribute_lengths", || {
            in_main(|| {
                let a = ones(&[4, 4], "a")?;
                expect_err!(ops::slice(&a, &[0, 1], &[4], &[], &[]), E::Ir(IrError::Inference { .. }), ["Slice"])
            })
        }),
        case(Shapes, "index_usize_max", || {
            in_main(|| {
                let a = ones(&[4], "a")?;
                expect_err!(a.index(&s![usize::MAX]), E::IndexOutOfRange { .. }, ["axis 0", "`a`"])
            })
        }),
        case(Shapes, "index_i64_min", || {
            in_main(|| {
                let a = ones(&[4], "a")?;
                expect_err!(a.index(&s![i64::MIN]), E::IndexOutOfRange { .. }, ["axis 0", "`a`"])
            })
        }),
        case(Shapes, "index_inclusive_range_to_i64_max", || {
            in_main(|| {
                let a = ones(&[4], "a")?;
                let s = a.index(&s![1..=i64::MAX])?;
                ensure(s.shape() == [3], || format!("a[1..=MAX] has shape {:?}", s.shape()))
            })
        }),
        case(Shapes, "index_too_many_items", || {
            in_main(|| {
                let a = ones(&[4], "a")?;
                expect_err!(a.index(&s![0, 0]), E::TooManyAxes { .. }, ["`a`", "rank 1"])
            })
        }),
        case(Shapes, "concat_mismatched_dims", || {
            in_main(|| {
                let a = ones(&[2, 3], "a")?;
                let b = ones(&[2, 4], "b")?;
                expect_err!(ops::concat(&[&a, &b], 0), E::Ir(IrError::Inference { .. }), ["Concat"])
            })
        }),
        case(Shapes, "concat_no_inputs", || {
            in_main(|| expect_err!(ops::concat(&[], 0), E::Ir(IrError::Inference { .. }), ["Concat"]))
        }),
        case(Shapes, "concat_mismatched_rank", || {
            in_main(|| {
                let a = ones(&[2, 3], "a")?;
                let b = ones(&[3], "b")?;
                expect_err!(ops::concat(&[&a, &b], 0), E::Ir(IrError::Inference { .. }), ["Concat"])
            })
        }),
        case(Shapes, "broadcast_incompatible", || {
            in_main(|| {
                let a = ones(&[2, 3], "a")?;
                let b = ones(&[4], "b")?;
                expect_err!(ops::add(&a, &b), E::Ir(IrError::Inference { .. }), ["Add", "[2, 3]", "[4]"])
            })
        }),
        case(Shapes, "broadcast_dtype_mismatch", || {
            in_main(|| {
                let a = ones(&[2], "a")?;
                let b = popxl::constant(vec![1i32, 2], "b")?;
                expect_err!(ops::mul(&a, &b), E::Ir(IrError::Inference { .. }), ["Mul"])
            })
        }),
        case(Shapes, "matmul_inner_mismatch", || {
            in_main(|| {
                let a = ones(&[2, 3], "a")?;
                let b = ones(&[4, 5], "b")?;
                expect_err!(ops::matmul(&a, &b), E::Ir(IrError::Inference { .. }), ["MatMul"])
            })
        }),
        case(Shapes, "matmul_scalar_operand", || {
            in_main(|| {
                let a = ones(&[], "a")?;
                let b = ones(&[2, 2], "b")?;
                expect_err!(ops::matmul(&a, &b), E::Ir(IrError::Inference { .. }), ["MatMul"])
            })
        }),
        case(Shapes, "matmul_batch_dims_incompatible", || {
            in_main(|| {
                let a = ones(&[3, 2, 2], "a")?;
                let b = ones(&[4, 2, 2], "b")?;
                expect_err!(ops::matmul(&a, &b), E::Ir(IrError::Inference { .. }), ["MatMul"])
            })
        }),
        case(Shapes, "repeat_count_usize_max", || {
            expect_err!(repeat_count(usize::MAX), E::RepeatCountTooLarge { .. }, ["body", usize::MAX])
        }),
        case(Shapes, "repeat_count_just_above_i64_max", || {
            let count = (i64::MAX as usize) + 1;
            expect_err!(repeat_count(count), E::RepeatCountTooLarge { .. }, ["body", count])
        }),
        case(Shapes, "repeat_count_zero", || expect_err!(repeat_count(0), E::RepeatCountZero { .. }, ["body"])),
        case(Shapes, "transpose_perm_out_of_range", || {
            in_main(|| {
                let a = ones(&[2, 3], "a")?;
                expect_err!(ops::transpose(&a, &[0, 5]), E::Ir(IrError::Inference { .. }), ["Transpose"])
            })
        }),
        case(Shapes, "transpose_perm_wrong_length", || {
            in_main(|| {
                let a = ones(&[2, 3], "a")?;
                expect_err!(ops::transpose(&a, &[0]), E::Ir(IrError::Inference { .. }), ["Transpose"])
            })
        }),
        case(Shapes, "random_shape_dim_above_i64_max", || {
            in_main(|| {
                let seed = popxl::variable(vec![0u32, 1], "seed")?;
                expect_err!(
                    ops::random_uniform(&seed, &[usize::MAX], 0.0, 1.0, popxl::float32),
                    E::IntegerOutOfRange { .. },
                    ["dimension 0", usize::MAX]
                )
            })
        }),
        case(Shapes, "index_dim_above_i64_max_of_an_empty_tensor", || {
            // [0, 2^63] has no bytes, so the IR admits it; its dimension does not fit an i64 bound.
            in_main(|| -> CaseResult {
                let g = Ir::new();
                let sub = g.create_empty_graph("sub")?;
                let _c = sub.enter();
                let x = popxl::graph_input([0usize, 1 << 63], popxl::float32, "x")?;
                expect_err!(x.index(&s![.., 0]), E::IntegerOutOfRange { .. }, ["dimension 1", "`x`"])
            })
        }),
    ]
}
