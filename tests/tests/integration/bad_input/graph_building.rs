//! Graph building: call inputs, recursion, cycles through topological
//! constraints, foreign tensors, variables in subgraphs, control-flow bodies,
//! frozen and dropped IRs.

use popart_ir::IrError;
use popxl::{ops, Graph, Ir, PopXlError as E, Tensor, TensorSpec};
use popxl_session::{Session, SessionError};

use super::fixtures::{ones, var_ones};
use super::harness::{case, Case, Category::GraphBuilding};

/// Main graph with float32[2] variables `x`, `value` and graph
/// `increment_fn(x, value) = x + value`.
struct Fixture {
    ir: Ir,
    x: Tensor,
    value: Tensor,
    graph: Graph,
}

fn fixture() -> popxl::Result<Fixture> {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x = var_ones(&[2], "x")?;
    let value = var_ones(&[2], "value")?;
    let graph = ir.create_graph_named("increment_fn", |x: Tensor, v: Tensor| ops::add(&x, &v), (&x, &value))?;
    drop(_g);
    Ok(Fixture { ir, x, value, graph })
}

/// `neg(x)` over float32[2].
fn neg_graph(ir: &Ir, like: &Tensor, name: &str) -> popxl::Result<Graph> {
    ir.create_graph_named(name, |x: Tensor| ops::negate(&x), like)
}

pub fn cases() -> Vec<Case> {
    vec![
        case(GraphBuilding, "call_missing_input", || {
            let f = fixture()?;
            let _g = f.ir.main_graph().enter();
            expect_err!(ops::call(&f.graph, &[&f.x], &[]), E::MissingCallInputs { .. }, ["increment_fn", "v"])
        }),
        case(GraphBuilding, "call_extra_input", || {
            let f = fixture()?;
            let _g = f.ir.main_graph().enter();
            expect_err!(
                ops::call(&f.graph, &[&f.x, &f.value, &f.x], &[]),
                E::TooManyCallInputs { .. },
                ["increment_fn", "x"]
            )
        }),
        case(GraphBuilding, "call_duplicate_input", || {
            let f = fixture()?;
            let _g = f.ir.main_graph().enter();
            let v_in = f.graph.inputs()?[1].clone();
            expect_err!(
                ops::call(&f.graph, &[&f.x, &f.value], &[(&v_in, &f.x)]),
                E::DuplicateCallInput { .. },
                ["increment_fn"]
            )
        }),
        case(GraphBuilding, "call_inputs_dict_key_not_an_input", || {
            let f = fixture()?;
            let _g = f.ir.main_graph().enter();
            expect_err!(
                ops::call(&f.graph, &[&f.x], &[(&f.value, &f.value)]),
                E::NotAGraphInput { .. },
                ["`value`", "increment_fn"]
            )
        }),
        case(GraphBuilding, "call_input_wrong_shape", || {
            let f = fixture()?;
            let _g = f.ir.main_graph().enter();
            let big = var_ones(&[3], "big")?;
            expect_err!(
                ops::call(&f.graph, &[&big, &f.value], &[]),
                E::CallInputMismatch { .. },
                ["increment_fn", "`big`"]
            )
        }),
        case(GraphBuilding, "call_input_wrong_dtype", || {
            let f = fixture()?;
            let _g = f.ir.main_graph().enter();
            let ints = popxl::variable(vec![1i32, 2], "ints")?;
            expect_err!(ops::call(&f.graph, &[&ints, &f.value], &[]), E::CallInputMismatch { .. }, ["`ints`", "int32"])
        }),
        case(GraphBuilding, "call_input_of_another_ir", || {
            let f = fixture()?;
            let other = fixture()?;
            let _g = f.ir.main_graph().enter();
            expect_err!(ops::call(&f.graph, &[&other.x, &f.value], &[]), E::ForeignIr { .. }, ["x"])
        }),
        case(GraphBuilding, "call_graph_of_another_ir", || {
            let f = fixture()?;
            let other = fixture()?;
            let _g = f.ir.main_graph().enter();
            expect_err!(
                ops::call(&other.graph, &[&f.x, &f.value], &[]),
                E::ForeignIr { .. } | E::Ir(IrError::UnknownGraph(_)) | E::Ir(IrError::Invalid(_)),
                ["increment_fn"]
            )
        }),
        case(GraphBuilding, "op_input_of_another_graph", || {
            let f = fixture()?;
            let sub = f.ir.create_empty_graph("sub")?;
            sub.with(|| expect_err!(ops::negate(&f.x), E::TensorNotInGraph { .. }, ["`x`", "main", "sub"]))
        }),
        case(GraphBuilding, "op_input_of_another_ir", || {
            let f = fixture()?;
            let other = fixture()?;
            f.ir.main_graph().with(|| expect_err!(ops::add(&f.x, &other.value), E::ForeignIr { .. }, ["value"]))
        }),
        case(GraphBuilding, "variable_in_subgraph", || {
            let ir = Ir::new();
            let sub = ir.create_empty_graph("sub")?;
            sub.with(|| expect_err!(popxl::variable(1.0f32, "w"), E::VariableInSubgraph { .. }, ["`w`", "`sub`"]))
        }),
        case(GraphBuilding, "graph_input_in_main_graph", || {
            let ir = Ir::new();
            ir.main_graph().with(|| {
                expect_err!(popxl::graph_input([2], popxl::float32, "in"), E::GraphInputInMainGraph { .. }, ["`in`"])
            })
        }),
        case(GraphBuilding, "variable_without_graph_context", || {
            expect_err!(popxl::variable(1.0f32, "w"), E::NoGraphContext { .. }, ["variable"])
        }),
        case(GraphBuilding, "graph_calls_itself", || {
            let ir = Ir::new();
            let g = ir.create_empty_graph("self_caller")?;
            g.with(|| {
                let x = popxl::graph_input([2], popxl::float32, "x")?;
                expect_err!(
                    ops::call(&g, &[&x], &[]),
                    E::RecursiveCall { .. } | E::Ir(IrError::RecursiveGraph(_)),
                    ["self_caller"]
                )
            })
        }),
        case(GraphBuilding, "mutual_recursion", || {
            let ir = Ir::new();
            let a = ir.create_empty_graph("a")?;
            let b = ir.create_empty_graph("b")?;
            a.with(|| -> super::harness::CaseResult {
                let x = popxl::graph_input([2], popxl::float32, "x")?;
                ops::call(&b, &[], &[])?;
                let _ = x;
                Ok(())
            })?;
            b.with(|| {
                expect_err!(
                    ops::call(&a, &[&popxl::graph_input([2], popxl::float32, "y")?], &[]),
                    E::Ir(IrError::RecursiveGraph(_)) | E::RecursiveCall { .. },
                    ["a"]
                )
            })
        }),
        case(GraphBuilding, "topo_con_cycle", || {
            let f = fixture()?;
            let main = f.ir.main_graph();
            let _g = main.enter();
            let neg = neg_graph(&f.ir, &f.x, "neg")?;
            let a = ops::call_with_info(&neg, &[&f.x], &[])?;
            let out = a.outputs()?[0].clone();
            let b = ops::call_with_info(&neg, &[&out], &[])?;
            expect_err!(main.add_topo_con(b.op_id(), a.op_id()), E::Ir(IrError::Cycle { .. }), ["main"])
        }),
        case(GraphBuilding, "topo_con_cycle_caught_by_session", || {
            let f = fixture()?;
            let main = f.ir.main_graph();
            let _g = main.enter();
            let neg = neg_graph(&f.ir, &f.x, "neg")?;
            let a = ops::call_with_info(&neg, &[&f.x], &[])?;
            let out = a.outputs()?[0].clone();
            let b = ops::call_with_info(&neg, &[&out], &[])?;
            let d2h = popxl::d2h_stream([2], popxl::float32, "out")?;
            ops::host_store(&d2h, &b.outputs()?[0])?;
            if main.add_topo_con(b.op_id(), a.op_id()).is_err() {
                return Ok(()); // refused early: even better
            }
            drop(_g);
            expect_err!(Session::new(f.ir, "cpu"), SessionError::InvalidIr(IrError::Cycle { .. }), ["main"])
        }),
        case(GraphBuilding, "topo_con_to_itself", || {
            let f = fixture()?;
            let main = f.ir.main_graph();
            let _g = main.enter();
            let a = ops::call_with_info(&f.graph, &[&f.x, &f.value], &[])?;
            expect_err!(main.add_topo_con(a.op_id(), a.op_id()), E::Ir(IrError::SelfConstraint(_)), ["Call"])
        }),
        case(GraphBuilding, "graph_function_returns_foreign_tensor", || {
            let f = fixture()?;
            let x = f.x.clone();
            let r = f.ir.create_graph_named("leaky", move |_a: Tensor| x.clone(), &f.value);
            expect_err!(r, E::OutputNotInGraph { .. }, ["leaky", "`x`"])
        }),
        case(GraphBuilding, "graph_function_argument_count", || {
            let f = fixture()?;
            let r = f.ir.create_graph_named("two", |a: Tensor, b: Tensor| ops::add(&a, &b), &f.x);
            expect_err!(r, E::ArgumentCountMismatch { expected: 2, given: 1, .. }, ["two"])
        }),
        case(GraphBuilding, "graph_function_build_graph_called_directly_with_wrong_count", || {
            use popxl::GraphFunction;
            let mut f = |a: Tensor, b: Tensor| ops::add(&a, &b);
            expect_err!(f.build_graph(Vec::new()), E::ArgumentCountMismatch { expected: 2, given: 0, .. }, ["graph"])
        }),
        case(GraphBuilding, "repeat_fewer_inputs_than_outputs", || {
            let f = fixture()?;
            let _g = f.ir.main_graph().enter();
            let g = f.ir.create_graph_named(
                "two_out",
                |x: Tensor| -> popxl::Result<(Tensor, Tensor)> { Ok((ops::negate(&x)?, ops::relu(&x)?)) },
                &f.x,
            )?;
            expect_err!(ops::repeat(&g, 2, &[&f.x], &[]), E::RepeatFewerInputsThanOutputs { .. }, ["two_out"])
        }),
        case(GraphBuilding, "repeat_carried_mismatch", || {
            let f = fixture()?;
            let _g = f.ir.main_graph().enter();
            let g = f.ir.create_graph_named("widen", |x: Tensor| ops::concat(&[&x, &x], 0), &f.x)?;
            expect_err!(ops::repeat(&g, 2, &[&f.x], &[]), E::RepeatCarriedMismatch { .. }, ["widen"])
        }),
        case(GraphBuilding, "conditional_branch_outputs_differ", || {
            let f = fixture()?;
            let _g = f.ir.main_graph().enter();
            let cond = popxl::variable(true, "cond")?;
            let then_g = neg_graph(&f.ir, &f.x, "then_g")?;
            let else_g = f.ir.create_graph_named("else_g", |x: Tensor| ops::concat(&[&x, &x], 0), &f.x)?;
            expect_err!(
                ops::conditional(&cond, &then_g, &else_g, &[&f.x], &[]),
                E::BranchOutputsMismatch { .. },
                ["then_g", "else_g"]
            )
        }),
        case(GraphBuilding, "conditional_non_bool_condition", || {
            let f = fixture()?;
            let _g = f.ir.main_graph().enter();
            let cond = popxl::variable(1i32, "cond")?;
            let g = neg_graph(&f.ir, &f.x, "branch")?;
            expect_err!(ops::conditional(&cond, &g, &g, &[&f.x], &[]), E::Ir(IrError::Inference { .. }), ["If"])
        }),
        case(GraphBuilding, "build_after_session_froze_the_ir", || {
            let m = super::fixtures::step_model()?;
            let ir2 = m.ir.clone();
            let _s = Session::new(m.ir, "cpu")?;
            ir2.main_graph().with(|| expect_err!(ones(&[2], "late"), E::IrFrozen { .. }, ["frozen"]))
        }),
        case(GraphBuilding, "graph_used_after_ir_dropped", || {
            let g = {
                let ir = Ir::new();
                ir.create_empty_graph("orphan")?
            };
            expect_err!(g.inputs(), E::IrDropped { .. }, ["orphan"])
        }),
        case(GraphBuilding, "duplicate_graph_name_is_made_unique_or_refused", || {
            let ir = Ir::new();
            let a = ir.create_empty_graph("g")?;
            match ir.create_empty_graph("g") {
                Ok(b) => {
                    super::harness::ensure(a != b && b.name() != "g", || format!("second graph named {}", b.name()))
                }
                Err(e) => expect_err!(Err::<(), _>(e), E::Ir(IrError::DuplicateGraphName(_)), ["g"]),
            }
        }),
        case(GraphBuilding, "graph_output_of_another_graph", || {
            let f = fixture()?;
            let sub = f.ir.create_empty_graph("sub")?;
            sub.with(|| expect_err!(popxl::graph_output(&f.x), E::TensorNotInGraph { .. }, ["`x`", "sub"]))
        }),
        case(GraphBuilding, "call_site_info_of_a_non_call_op", || {
            let f = fixture()?;
            let main = f.ir.main_graph();
            let _g = main.enter();
            let r = ops::repeat(&neg_graph(&f.ir, &f.x, "n")?, 1, &[&f.x], &[])?;
            let t = r[0].tensor_id();
            let op = f.ir.with_ir(|core| core.graph(main.id()).ok()?.tensor(t).ok()?.producer().map(|p| p.op));
            let Some(op) = op else {
                return Err(super::harness::Failure::WrongError("repeat output has no producer".into()));
            };
            expect_err!(ops::CallSiteInfo::from_op(&main, op), E::WrongOpType { .. }, ["not a Call"])
        }),
        case(GraphBuilding, "tensor_spec_input_with_overflowing_shape", || {
            let ir = Ir::new();
            let r = ir.create_graph_named(
                "huge_arg",
                |x: Tensor| ops::negate(&x),
                TensorSpec::new([usize::MAX, 2], popxl::float32),
            );
            expect_err!(r, E::Ir(IrError::TensorTooLarge { .. }), ["huge_arg"])
        }),
    ]
}
