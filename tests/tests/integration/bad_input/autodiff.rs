//! Autodiff misuse: duplicate, unknown, foreign and non-float tensors in
//! `grads_provided` / `grads_required`, grad infos of another IR, a frozen IR.

use std::collections::HashMap;

use popart_transforms::autodiff::AutodiffError as A;
use popxl::transforms::autodiff;
use popxl::{ops, Graph, Ir, PopXlError as E, Tensor};

use super::fixtures::var_ones;
use super::harness::{case, Case, CaseResult, Category::Autodiff};

/// `f(x, w) = x * w` (float32[2]) and the IR holding it; also an int32 input `n`
/// passed through to a second output.
struct Fwd {
    ir: Ir,
    graph: Graph,
    x: Tensor,
    w: Tensor,
    n: Tensor,
    y: Tensor,
    m: Tensor,
}

fn fwd() -> popxl::Result<Fwd> {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x = var_ones(&[2], "x")?;
    let n = popxl::variable(vec![1i32, 2], "n")?;
    let graph = ir.create_graph_named(
        "fwd",
        |x: Tensor, n: Tensor| -> popxl::Result<(Tensor, Tensor)> {
            let w = popxl::graph_input([2], popxl::float32, "w")?;
            let y = ops::mul(&x, &w)?;
            let m = ops::add(&n, &n)?;
            Ok((y, m))
        },
        (&x, &n),
    )?;
    let ins = graph.inputs()?;
    let outs = graph.outputs()?;
    drop(_g);
    Ok(Fwd {
        ir,
        graph,
        x: ins[0].clone(),
        n: ins[1].clone(),
        w: ins[2].clone(),
        y: outs[0].clone(),
        m: outs[1].clone(),
    })
}

fn run(f: &Fwd, provided: Option<&[Tensor]>, required: Option<&[Tensor]>) -> popxl::Result<()> {
    autodiff(&f.graph, provided, required, &HashMap::new(), false).map(|_| ())
}

pub fn cases() -> Vec<Case> {
    vec![
        case(Autodiff, "grads_provided_duplicate", || {
            let f = fwd()?;
            expect_err!(
                run(&f, Some(&[f.y.clone(), f.y.clone()]), Some(std::slice::from_ref(&f.x))),
                E::Autodiff(A::Duplicate { .. }),
                [f.y.name(), "fwd", "grads_provided"]
            )
        }),
        case(Autodiff, "grads_required_duplicate", || {
            let f = fwd()?;
            expect_err!(
                run(&f, None, Some(&[f.w.clone(), f.x.clone(), f.w.clone()])),
                E::Autodiff(A::Duplicate { .. }),
                ["`w`", "grads_required"]
            )
        }),
        case(Autodiff, "grads_provided_not_an_output", || {
            let f = fwd()?;
            expect_err!(
                run(&f, Some(std::slice::from_ref(&f.x)), None),
                E::Autodiff(A::ProvidedNotOutput { .. }),
                ["`x`", "fwd"]
            )
        }),
        case(Autodiff, "grads_required_not_an_input", || {
            let f = fwd()?;
            expect_err!(
                run(&f, None, Some(std::slice::from_ref(&f.y))),
                E::Autodiff(A::RequiredNotInput { .. }),
                [f.y.name(), "fwd"]
            )
        }),
        case(Autodiff, "grads_required_integer_input", || {
            let f = fwd()?;
            expect_err!(
                run(&f, None, Some(std::slice::from_ref(&f.n))),
                E::Autodiff(A::NotFloatingPoint { .. }),
                ["`n`", "int32"]
            )
        }),
        case(Autodiff, "grads_provided_integer_output", || {
            let f = fwd()?;
            expect_err!(
                run(&f, Some(std::slice::from_ref(&f.m)), Some(std::slice::from_ref(&f.x))),
                E::Autodiff(A::NotFloatingPoint { .. } | A::NoGradientPath { .. }),
                [f.m.name()]
            )
        }),
        case(Autodiff, "grads_required_tensor_of_another_graph", || {
            let f = fwd()?;
            let main = f.ir.main_graph().get_tensor("x")?;
            expect_err!(
                run(&f, None, Some(&[main])),
                E::Autodiff(A::RequiredNotInput { .. }) | E::TensorNotInGraph { .. },
                ["`x`"]
            )
        }),
        case(Autodiff, "grads_provided_tensor_of_another_ir", || {
            let f = fwd()?;
            let other = fwd()?;
            expect_err!(
                run(&f, Some(std::slice::from_ref(&other.y)), None),
                E::Autodiff(A::ProvidedNotOutput { .. }) | E::ForeignIr { .. },
                [other.y.name()]
            )
        }),
        case(Autodiff, "grads_required_tensor_of_another_ir", || {
            let f = fwd()?;
            let other = fwd()?;
            expect_err!(
                run(&f, None, Some(std::slice::from_ref(&other.x))),
                E::Autodiff(A::RequiredNotInput { .. }) | E::ForeignIr { .. },
                ["`x`"]
            )
        }),
        case(Autodiff, "called_graph_grad_info_of_another_ir", || {
            let f = fwd()?;
            let other = fwd()?;
            let info =
                autodiff(&other.graph, None, Some(std::slice::from_ref(&other.x)), &HashMap::new(), false)?.grad_info;
            let map = HashMap::from([(other.graph.clone(), info)]);
            expect_err!(
                autodiff(&f.graph, None, Some(std::slice::from_ref(&f.x)), &map, false),
                E::ForeignIr { .. },
                ["fwd", "autodiff"]
            )
        }),
        case(Autodiff, "no_gradient_path_to_required_input", || {
            let f = fwd()?;
            // Only `m` (from `n`) is provided: no gradient reaches `x`.
            expect_err!(
                run(&f, Some(std::slice::from_ref(&f.m)), Some(std::slice::from_ref(&f.x))),
                E::Autodiff(A::NoGradientPath { .. } | A::NotFloatingPoint { .. }),
                [f.m.name()]
            )
        }),
        case(Autodiff, "autodiff_of_a_frozen_ir", || {
            let f = fwd()?;
            f.ir.freeze();
            expect_err!(run(&f, None, Some(std::slice::from_ref(&f.x))), E::IrFrozen { .. }, ["frozen"])
        }),
        case(Autodiff, "autodiff_of_a_dropped_ir", || {
            let f = fwd()?;
            let Fwd { ir, graph, x, .. } = f;
            drop(ir);
            expect_err!(autodiff(&graph, None, Some(&[x]), &HashMap::new(), false), E::IrDropped { .. }, ["fwd"])
        }),
        case(Autodiff, "autodiff_succeeds_on_the_fixture", || -> CaseResult {
            let f = fwd()?;
            run(&f, Some(std::slice::from_ref(&f.y)), Some(&[f.x.clone(), f.w.clone()]))?;
            Ok(())
        }),
        case(Autodiff, "grads_provided_empty_list", || {
            let f = fwd()?;
            expect_err!(
                run(&f, Some(&[]), Some(std::slice::from_ref(&f.x))),
                E::Autodiff(A::NoGradientPath { .. }),
                ["`x`"]
            )
        }),
    ]
}
