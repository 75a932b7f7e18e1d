//! Graph building: contexts, in_sequence, name scopes, graph tracing, modules, call sites.

use ndarray::{Array1, Array2};
use popart_ir::{OpId, TensorKind};
use popxl::{float32, ops, Ir, Tensor, TensorSpec};
use tests::Linear;

/// (before, after) op names of every topological constraint of `graph`.
fn topo_cons(ir: &Ir, graph: &popxl::Graph) -> Vec<(String, String)> {
    ir.with_ir(|core| {
        let g = core.graph(graph.id()).unwrap();
        let name = |o: OpId| g.op(o).unwrap().name.clone();
        let mut v: Vec<_> = g.topo_cons().edges().map(|(a, b, _)| (name(a), name(b))).collect();
        v.sort();
        v
    })
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<_> = v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    v.sort();
    v
}

#[test]
fn contexts_nest_like_python_with() {
    let ir = Ir::new();
    let main = ir.main_graph();
    let sub = ir.create_empty_graph("sub").unwrap();
    assert!(popxl::current_graph().is_err());
    {
        let _m = main.enter();
        assert_eq!(popxl::current_graph().unwrap(), main);
        {
            let _s = sub.enter();
            assert_eq!(popxl::current_graph().unwrap(), sub);
            assert_eq!(popxl::current_main_graph().unwrap(), main);
        }
        assert_eq!(popxl::current_graph().unwrap(), main);
        let c = sub.with(|| popxl::constant(1.0f32, "c")).unwrap();
        assert_eq!(c.graph(), sub);
    }
    assert!(popxl::current_graph().is_err());
}

#[test]
fn guards_dropped_out_of_order_remove_their_own_entry() {
    let ir = Ir::new();
    let main = ir.main_graph();
    let sub = ir.create_empty_graph("sub").unwrap();
    let m = main.enter();
    let s = sub.enter();
    drop(m);
    assert_eq!(popxl::current_graph().unwrap(), sub);
    drop(s);
    assert!(popxl::current_graph().is_err());
}

#[test]
fn ops_without_context_go_into_their_inputs_graph() {
    let ir = Ir::new();
    let x = ir.main_graph().with(|| popxl::variable(1.0f32, "x")).unwrap();
    let y = &x + 1.0;
    assert_eq!(y.graph(), ir.main_graph());
    assert_eq!(ir.main_graph().constants().unwrap()[0].graph(), ir.main_graph());
}

#[test]
fn in_sequence_chains_ops_in_creation_order() {
    let ir = Ir::new();
    let main = ir.main_graph();
    let _g = main.enter();
    let x = popxl::variable(Array1::<f32>::ones(2), "x").unwrap();
    {
        let _s = popxl::in_sequence(true);
        ops::relu(&x).unwrap();
        ops::exp(&x).unwrap();
        ops::sin(&x).unwrap();
    }
    ops::cos(&x).unwrap(); // outside: unconstrained
    assert_eq!(topo_cons(&ir, &main), pairs(&[("Relu", "Exp"), ("Exp", "Sin")]));
    ir.with_ir(|core| {
        let order: Vec<String> = core
            .main_graph()
            .schedule()
            .unwrap()
            .into_iter()
            .map(|o| core.main_graph().op(o).unwrap().name.clone())
            .collect();
        let pos = |n: &str| order.iter().position(|o| o == n).unwrap();
        assert!(pos("Relu") < pos("Exp") && pos("Exp") < pos("Sin"));
    });
}

#[test]
fn in_sequence_false_block_is_one_unit() {
    let ir = Ir::new();
    let main = ir.main_graph();
    let _g = main.enter();
    let x = popxl::variable(Array1::<f32>::ones(2), "x").unwrap();
    let _s = popxl::in_sequence(true);
    ops::relu(&x).unwrap();
    {
        let _u = popxl::in_sequence(false);
        ops::exp(&x).unwrap();
        ops::sin(&x).unwrap();
    }
    ops::cos(&x).unwrap();
    assert_eq!(topo_cons(&ir, &main), pairs(&[("Relu", "Exp"), ("Relu", "Sin"), ("Exp", "Cos"), ("Sin", "Cos")]));
}

#[test]
fn nested_in_sequence_true_continues_the_chain() {
    let ir = Ir::new();
    let main = ir.main_graph();
    let _g = main.enter();
    let x = popxl::variable(Array1::<f32>::ones(2), "x").unwrap();
    let _s = popxl::in_sequence(true);
    ops::relu(&x).unwrap();
    {
        let _u = popxl::in_sequence(false);
        ops::exp(&x).unwrap();
        {
            let _v = popxl::in_sequence(true);
            ops::sin(&x).unwrap();
            ops::cos(&x).unwrap();
        }
    }
    ops::abs(&x).unwrap();
    // Exp and the (Sin -> Cos) chain form the unordered unit between Relu and Abs.
    assert_eq!(
        topo_cons(&ir, &main),
        pairs(&[("Relu", "Exp"), ("Relu", "Sin"), ("Sin", "Cos"), ("Exp", "Abs"), ("Cos", "Abs")])
    );
}

#[test]
fn in_sequence_is_per_graph() {
    let ir = Ir::new();
    let main = ir.main_graph();
    let _g = main.enter();
    let _s = popxl::in_sequence(true);
    let x = popxl::variable(Array1::<f32>::ones(2), "x").unwrap();
    ops::relu(&x).unwrap();
    let g = ir.create_graph_named("sub", |x: Tensor| (ops::exp(&x).unwrap(), ops::sin(&x).unwrap()), &x).unwrap();
    ops::call(&g, &[&x], &[]).unwrap();
    assert_eq!(topo_cons(&ir, &main), pairs(&[("Relu", "Call")]));
    assert_eq!(topo_cons(&ir, &g), pairs(&[("Exp", "Sin")]));
}

#[test]
fn name_scopes_prefix_tensors_and_ops() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let _outer = popxl::name_scope("model");
    let w = {
        let _inner = popxl::name_scope("layer0");
        assert_eq!(popxl::current_name_scope(), "model/layer0");
        let w = popxl::variable(Array1::<f32>::ones(2), "w").unwrap();
        let y = ops::relu(&w).unwrap();
        assert_eq!(y.name(), "model/layer0/Relu:0");
        w
    };
    assert_eq!(w.name(), "model/layer0/w");
    assert_eq!(w.base_name(), "w");
    let w2 = popxl::variable(1.0f32, "w").unwrap();
    assert_eq!(w2.name(), "model/w");
}

#[test]
fn user_names_are_exact_and_made_unique_when_taken() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let a = popxl::variable(1.0f32, "w").unwrap();
    let b = popxl::variable(1.0f32, "w").unwrap();
    assert_eq!((a.name(), b.name()), ("w", "w_1"));
    let s = popxl::h2d_stream([1], float32, "w").unwrap();
    assert_eq!(s.name(), "w_2");
    // Empty names fall back to what the tensor is.
    assert_eq!(popxl::variable(1.0f32, "").unwrap().name(), "variable");
    assert_eq!(popxl::constant(1.0f32, "").unwrap().name(), "constant");
    let g = ir.create_graph(|| popxl::graph_input([1], float32, ""), ()).unwrap();
    assert_eq!(g.inputs().unwrap()[0].name(), "input");
}

#[test]
fn variables_downcast_64_bit_data_like_popxl() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    assert_eq!(popxl::variable(Array1::<f64>::ones(2), "a").unwrap().dtype(), popxl::float32);
    assert_eq!(popxl::variable(1i64, "b").unwrap().dtype(), popxl::int32);
    assert_eq!(popxl::variable(1u64, "c").unwrap().dtype(), popxl::uint32);
    assert_eq!(popxl::variable_as(1.0, popxl::float64, "d").unwrap().dtype(), popxl::float64);
    let w = popxl::variable(ndarray::array![[1.5f64, 2.5]], "w").unwrap();
    let TensorKind::Variable(data) = w.kind().unwrap() else { panic!() };
    assert_eq!(data.info.to_string(), "float32[1,2]");
    assert_eq!(data.to_f64_vec(), vec![1.5, 2.5]);
}

#[test]
fn streams_are_always_in_the_main_graph() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x = popxl::variable(1.0f32, "x").unwrap();
    let mut stream = None;
    let g = ir
        .create_graph(
            |x: Tensor| -> popxl::Result<Tensor> {
                let s = popxl::d2h_stream(x.shape(), x.dtype(), "from_sub")?;
                ops::host_store(&s, &x)?;
                stream = Some(s);
                Ok(-x)
            },
            &x,
        )
        .unwrap();
    let s = stream.unwrap();
    assert_eq!(s.tensor().graph(), ir.main_graph());
    assert_eq!(s.tensor().kind().unwrap(), TensorKind::Stream(popart_ir::StreamDirection::DeviceToHost));
    assert_eq!(g.num_ops().unwrap(), 2); // HostStore and Neg live in the subgraph
}

#[test]
fn create_graph_from_specs_names_inputs_argi() {
    let ir = Ir::new();
    let g = ir
        .create_graph(
            |a: Tensor, b: Tensor| a.matmul(&b),
            (TensorSpec::new([2, 3], float32), TensorSpec::new([3], float32)),
        )
        .unwrap();
    let inputs = g.inputs().unwrap();
    assert_eq!(inputs.iter().map(Tensor::name).collect::<Vec<_>>(), ["arg0", "arg1"]);
    assert_eq!(g.outputs().unwrap()[0].spec(), TensorSpec::new([2], float32));
    assert_eq!(g.name(), "graph");
}

#[test]
fn variadic_graph_functions_and_graph_input_ordering() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x = popxl::variable(Array1::<f32>::ones(2), "x").unwrap();
    let y = popxl::variable(Array1::<f32>::ones(2), "y").unwrap();
    let g = ir
        .create_graph_named(
            "sum_all",
            |xs: Vec<Tensor>| -> popxl::Result<Tensor> {
                let extra = popxl::graph_input([2], float32, "extra")?;
                let mut acc = extra;
                for x in &xs {
                    acc = &acc + x;
                }
                Ok(acc)
            },
            vec![&x, &y],
        )
        .unwrap();
    let names: Vec<String> = g.inputs().unwrap().iter().map(|t| t.name().to_string()).collect();
    assert_eq!(names, ["x", "y", "extra"]);
}

#[test]
fn module_graphs_keep_their_inputs_on_self() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x = popxl::variable(Array2::<f32>::ones((4, 3)), "x").unwrap();
    let mut with_bias = Linear::new(2);
    let mut no_bias = Linear::without_bias(5);
    let g1 = ir.create_graph(&mut with_bias, &x).unwrap();
    let g2 = ir.create_graph(&mut no_bias, &x).unwrap();
    assert_eq!((g1.name(), g2.name()), ("Linear", "Linear_1"));
    assert_eq!(
        g1.inputs().unwrap(),
        vec![g1.inputs().unwrap()[0].clone(), with_bias.w().clone(), with_bias.b().clone()]
    );
    assert_eq!(g2.inputs().unwrap().len(), 2);
    assert!(no_bias.b.is_none());
    assert_eq!(g1.outputs().unwrap()[0].shape(), &[4, 2]);
    assert_eq!(g2.outputs().unwrap()[0].shape(), &[4, 5]);
}

#[test]
fn call_site_info_maps_and_modifies() {
    let ir = Ir::new();
    let main = ir.main_graph();
    let _g = main.enter();
    let x = popxl::variable(Array1::<f32>::ones(2), "x").unwrap();
    let v = popxl::constant(Array1::<f32>::ones(2), "v").unwrap();
    let g = ir
        .create_graph_named(
            "inc",
            |x: Tensor, v: Tensor| -> popxl::Result<Tensor> {
                let y = &x + &v;
                ops::copy_var_update_(&x, &y)?;
                Ok(y)
            },
            (&x, &v),
        )
        .unwrap();
    let info = ops::call_with_info(&g, &[&x, &v], &[]).unwrap();
    assert_eq!(info.inputs().unwrap(), vec![x.clone(), v.clone()]);
    let (gx, gv) = (g.inputs().unwrap()[0].clone(), g.inputs().unwrap()[1].clone());
    assert_eq!(info.parent_to_graph(&v).unwrap(), gv);
    assert_eq!(info.graph_to_parent(&gx).unwrap(), x);
    let out = info.parent_output(0).unwrap();
    assert_eq!(info.parent_to_graph(&out).unwrap(), g.outputs().unwrap()[0]);
    assert!(info.parent_output(1).is_err());
    // By subgraph tensor or by parent tensor; marking twice is idempotent.
    info.set_parent_input_modified(&gx).unwrap();
    info.set_parent_input_modified(&x).unwrap();
    assert_eq!(info.modified_inputs().unwrap(), vec![0]);
    let flags = ir.with_ir(|core| core.main_graph().op(info.op_id()).unwrap().modified_inputs());
    assert_eq!(flags, vec![0]);
    let stranger = popxl::constant(1.0f32, "stranger").unwrap();
    assert!(matches!(info.set_parent_input_modified(&stranger), Err(popxl::PopXlError::NotACallSiteTensor { .. })));
    ir.with_ir(|core| core.verify()).unwrap();
}

#[test]
fn repeat_op_carries_count_and_graph() {
    let ir = Ir::new();
    let main = ir.main_graph();
    let _g = main.enter();
    let x = popxl::variable(Array1::<f32>::ones(2), "x").unwrap();
    let v = popxl::variable(Array1::<f32>::ones(2), "v").unwrap();
    let g = ir.create_graph_named("inc", |x: Tensor, v: Tensor| &x + &v, (&x, &v)).unwrap();
    let out = ops::repeat(&g, 3, &[&x, &v], &[]).unwrap();
    assert_eq!(out.len(), 1);
    ir.with_ir(|core| {
        let m = core.main_graph();
        let op = m.op(m.ops_in_creation_order()[0]).unwrap();
        assert_eq!(op.op_type(), "Repeat");
        assert_eq!(op.attrs.int("count"), Some(3));
        assert_eq!(op.attrs.graph("graph"), Some(g.id()));
        core.verify().unwrap();
    });
}

#[test]
fn graph_queries() {
    let ir = Ir::new();
    let main = ir.main_graph();
    let _g = main.enter();
    let x = popxl::variable(1.0f32, "x").unwrap();
    let c = popxl::constant(2.0f32, "c").unwrap();
    let y = &x * &c;
    assert_eq!(main.variables().unwrap(), vec![x.clone()]);
    assert_eq!(main.constants().unwrap(), vec![c.clone()]);
    assert_eq!(main.tensors().unwrap(), vec![x.clone(), c.clone(), y.clone()]);
    assert_eq!(main.get_tensor("Mul:0").unwrap(), y);
    assert!(main.contains(&y));
    assert!(main.is_main());
    assert_eq!(ir.graphs(), vec![main.clone()]);
    assert_eq!(ir.graph_by_name("main").unwrap(), main);
}
