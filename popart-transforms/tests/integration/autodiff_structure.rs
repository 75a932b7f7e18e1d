//! Structure of the gradient graphs autodiff builds: the `GradGraphInfo` contract
//! and its call-site mappings, stitching, subgraphs, reuse and errors. Gradient graphs
//! whose whole text says it best (linear, subsets, sums, zeros, casts, detach, nested
//! calls) are text filetests in `tests/filetests/autodiff/`; numerical checks live in
//! `tests/tests/autodiff_*.rs`.

use popart_ir::{AttrValue, Attributes, DataType, GraphId, Ir, OpId, TensorId, TensorInfo};
use popart_transforms::autodiff::{
    autodiff, AutodiffError, CallSite, ExpectedConnection, GradGraphInfo, GradGraphInfos,
};

fn f32s(shape: &[usize]) -> TensorInfo {
    TensorInfo::new(DataType::Float32, shape)
}

fn input(ir: &mut Ir, g: GraphId, name: &str, info: TensorInfo) -> TensorId {
    ir.graph_mut(g).unwrap().add_input(name, info).unwrap()
}

/// Create an op and return its first output.
fn op(ir: &mut Ir, g: GraphId, ty: &str, attrs: Attributes, ins: &[TensorId]) -> TensorId {
    let ins: Vec<(u32, TensorId)> = ins.iter().enumerate().map(|(i, &t)| (i as u32, t)).collect();
    let id = ir.create_op(g, ty, attrs, &ins, &ty.to_lowercase()).unwrap();
    ir.graph(g).unwrap().op(id).unwrap().output(0).unwrap()
}

fn op0(ir: &mut Ir, g: GraphId, ty: &str, ins: &[TensorId]) -> TensorId {
    op(ir, g, ty, Attributes::new(), ins)
}

fn output(ir: &mut Ir, g: GraphId, t: TensorId) {
    ir.graph_mut(g).unwrap().add_output(t).unwrap();
}

fn call(ir: &mut Ir, parent: GraphId, callee: GraphId, ins: &[TensorId]) -> OpId {
    let ins: Vec<(u32, TensorId)> = ins.iter().enumerate().map(|(i, &t)| (i as u32, t)).collect();
    let attrs = Attributes::new().with("graph", AttrValue::Graph(callee));
    ir.create_op(parent, "Call", attrs, &ins, "call").unwrap()
}

fn op_types(ir: &Ir, g: GraphId) -> Vec<&'static str> {
    let g = ir.graph(g).unwrap();
    let mut v: Vec<_> = g.ops_in_creation_order().into_iter().map(|o| g.op(o).unwrap().op_type()).collect();
    v.sort_unstable();
    v
}

fn grad(ir: &mut Ir, g: GraphId) -> GradGraphInfo {
    autodiff(ir, g, None, None, &GradGraphInfos::new(), false).unwrap().grad_info
}

/// The Linear module of PopXL's Listing 10.1: `y = x @ W + b`.
fn linear(ir: &mut Ir) -> (GraphId, [TensorId; 4]) {
    let g = ir.create_graph("linear").unwrap();
    let x = input(ir, g, "x", f32s(&[2, 2]));
    let w = input(ir, g, "W", f32s(&[2, 2]));
    let b = input(ir, g, "b", f32s(&[2]));
    let xw = op0(ir, g, "MatMul", &[x, w]);
    let y = op0(ir, g, "Add", &[xw, b]);
    output(ir, g, y);
    (g, [x, w, b, y])
}

#[test]
fn call_site_mappings() {
    let mut ir = Ir::new();
    let (g, [x, w, b, _]) = linear(&mut ir);
    let main = ir.main_graph_id();
    let px = input(&mut ir, main, "px", f32s(&[2, 2]));
    let pw = input(&mut ir, main, "pw", f32s(&[2, 2]));
    let pb = input(&mut ir, main, "pb", f32s(&[2]));
    let fwd_call = call(&mut ir, main, g, &[px, pw, pb]);
    let info = grad(&mut ir, g);
    let fwd_site = CallSite { graph: main, op: fwd_call };

    let dict = info.inputs_dict(&ir, fwd_site).unwrap();
    let gg = ir.graph(info.graph).unwrap().inputs().to_vec();
    assert_eq!(dict, vec![(gg[1], px), (gg[2], pw)]);

    let seed = input(&mut ir, main, "seed", f32s(&[2, 2]));
    let mut ins = vec![seed];
    ins.extend(dict.iter().map(|(_, p)| *p));
    let grad_call = call(&mut ir, main, info.graph, &ins);
    let grad_site = CallSite { graph: main, op: grad_call };
    let outs: Vec<TensorId> = ir.graph(main).unwrap().op(grad_call).unwrap().outputs().tensors().collect();
    assert_eq!(
        info.fwd_graph_ins_to_grad_parent_outs(&ir, grad_site).unwrap(),
        vec![(x, outs[0]), (w, outs[1]), (b, outs[2])]
    );
    assert_eq!(
        info.fwd_parent_ins_to_grad_parent_outs(&ir, fwd_site, grad_site).unwrap(),
        vec![(px, outs[0]), (pw, outs[1]), (pb, outs[2])]
    );
    // A call site of another graph is rejected with a typed error.
    let err = info.inputs_dict(&ir, grad_site).unwrap_err();
    assert!(matches!(err, AutodiffError::InvalidGradGraphInfo { .. }), "{err}");
    ir.verify().unwrap();
}

#[test]
fn intermediates_become_forward_outputs_and_call_sites_grow() {
    // y = tanh(x) * w: the gradient of w reads h = tanh(x), an intermediate.
    let mut ir = Ir::new();
    let g = ir.create_graph("f").unwrap();
    let x = input(&mut ir, g, "x", f32s(&[3]));
    let w = input(&mut ir, g, "w", f32s(&[3]));
    let h = op0(&mut ir, g, "Tanh", &[x]);
    let y = op0(&mut ir, g, "Mul", &[h, w]);
    output(&mut ir, g, y);
    let main = ir.main_graph_id();
    let (px, pw) = (input(&mut ir, main, "px", f32s(&[3])), input(&mut ir, main, "pw", f32s(&[3])));
    let c1 = call(&mut ir, main, g, &[px, pw]);
    let other = ir.create_graph("other").unwrap();
    let (ox, ow) = (input(&mut ir, other, "ox", f32s(&[3])), input(&mut ir, other, "ow", f32s(&[3])));
    let c2 = call(&mut ir, other, g, &[ox, ow]);

    let info = grad(&mut ir, g);
    assert!(info.expected_inputs.contains(&ExpectedConnection::fwd(h)));
    assert_eq!(ir.graph(g).unwrap().outputs(), &[y, h]);
    for (pg, c) in [(main, c1), (other, c2)] {
        let o = ir.graph(pg).unwrap().op(c).unwrap();
        assert_eq!(o.outputs().len(), 2, "every call site gets the new output");
        let dict = info.inputs_dict(&ir, CallSite { graph: pg, op: c }).unwrap();
        assert!(dict.iter().any(|&(_, p)| Some(p) == o.output(1)), "h maps to the new call output");
    }
    ir.verify().unwrap();
}

/// A graph with two outputs: `loss = sum(exp(x))` and `acc = mean(sin(x))`.
fn loss_and_accuracy(ir: &mut Ir, name: &str) -> (GraphId, [TensorId; 2]) {
    let g = ir.create_graph(name).unwrap();
    let x = input(ir, g, "x", f32s(&[4]));
    let e = op0(ir, g, "Exp", &[x]);
    let loss = op0(ir, g, "ReduceSum", &[e]);
    let s = op0(ir, g, "Sin", &[x]);
    let acc = op0(ir, g, "ReduceMean", &[s]);
    output(ir, g, loss);
    output(ir, g, acc);
    (g, [loss, acc])
}

#[test]
fn grads_provided_subset() {
    // Gradients are provided for the loss only.
    let mut ir = Ir::new();
    let (g, [loss, acc]) = loss_and_accuracy(&mut ir, "f");
    let out = autodiff(&mut ir, g, Some(&[loss]), None, &GradGraphInfos::new(), false).unwrap();
    let info = out.grad_info;
    assert_eq!(info.expected_inputs[0], ExpectedConnection::fwd_grad(loss));
    assert!(!info.expected_inputs.iter().any(|e| e.fwd_tensor == acc), "no gradient input for the accuracy");
    assert_eq!(op_types(&ir, info.graph), ["ExpGrad", "ReduceGrad"], "the sin branch is not differentiated");
    assert!(out.all.is_empty());

    // With every output provided, both branches are differentiated and summed.
    let (g, [loss, acc]) = loss_and_accuracy(&mut ir, "f2");
    let info = grad(&mut ir, g);
    assert_eq!(info.expected_inputs[..2], [ExpectedConnection::fwd_grad(loss), ExpectedConnection::fwd_grad(acc)]);
    assert_eq!(op_types(&ir, info.graph), ["ExpGrad", "ReduceGrad", "ReduceGrad", "SinGrad", "Sum"]);
    ir.verify().unwrap();
}

#[test]
fn integer_paths_carry_no_gradient() {
    let mut ir = Ir::new();
    let g = ir.create_graph("f").unwrap();
    let x = input(&mut ir, g, "x", f32s(&[3]));
    let w = input(&mut ir, g, "w", f32s(&[3]));
    let to_i = Attributes::new().with("to", AttrValue::DType(DataType::Int32));
    let to_f = Attributes::new().with("to", AttrValue::DType(DataType::Float32));
    let xi = op(&mut ir, g, "Cast", to_i, &[x]);
    let xf = op(&mut ir, g, "Cast", to_f, &[xi]);
    let y = op0(&mut ir, g, "Mul", &[xf, w]);
    output(&mut ir, g, y);
    // Default: only w gets a gradient.
    let info = grad(&mut ir, g);
    assert_eq!(info.expected_outputs, vec![ExpectedConnection::fwd_grad(w)]);
    // Requiring x is an error naming it.
    let err = autodiff(&mut ir, g, None, Some(&[x]), &GradGraphInfos::new(), false).unwrap_err();
    assert_eq!(err, AutodiffError::NoGradientPath { graph: "f".into(), tensor: "x".into() });
    // A tensor listed twice is an error naming it and the list.
    let err = autodiff(&mut ir, g, Some(&[y, y]), None, &GradGraphInfos::new(), false).unwrap_err();
    assert_eq!(err, AutodiffError::Duplicate { graph: "f".into(), tensor: y_name(&ir, g, y), list: "grads_provided" });
    let err = autodiff(&mut ir, g, None, Some(&[w, w]), &GradGraphInfos::new(), false).unwrap_err();
    assert_eq!(err, AutodiffError::Duplicate { graph: "f".into(), tensor: "w".into(), list: "grads_required" });
    ir.verify().unwrap();
}

/// `outer(x, w) = middle(x, w) * 2`, `middle(x, w) = inner(x, w) + x`, `inner(x, w) = relu(x @ w)`.
fn nested(ir: &mut Ir) -> [GraphId; 3] {
    let inner = ir.create_graph("inner").unwrap();
    let x = input(ir, inner, "x", f32s(&[2, 2]));
    let w = input(ir, inner, "w", f32s(&[2, 2]));
    let m = op0(ir, inner, "MatMul", &[x, w]);
    let r = op0(ir, inner, "Relu", &[m]);
    output(ir, inner, r);

    let middle = ir.create_graph("middle").unwrap();
    let x = input(ir, middle, "x", f32s(&[2, 2]));
    let w = input(ir, middle, "w", f32s(&[2, 2]));
    let c = call(ir, middle, inner, &[x, w]);
    let o = ir.graph(middle).unwrap().op(c).unwrap().output(0).unwrap();
    let s = op0(ir, middle, "Add", &[o, x]);
    output(ir, middle, s);

    let outer = ir.create_graph("outer").unwrap();
    let x = input(ir, outer, "x", f32s(&[2, 2]));
    let w = input(ir, outer, "w", f32s(&[2, 2]));
    let c = call(ir, outer, middle, &[x, w]);
    let o = ir.graph(outer).unwrap().op(c).unwrap().output(0).unwrap();
    let s = op0(ir, outer, "Mul", &[o, o]);
    output(ir, outer, s);
    [inner, middle, outer]
}

#[test]
fn nested_calls_two_levels() {
    let mut ir = Ir::new();
    let [inner, middle, outer] = nested(&mut ir);
    let out = autodiff(&mut ir, outer, None, None, &GradGraphInfos::new(), true).unwrap();
    assert_eq!(out.all.keys().copied().collect::<Vec<_>>().len(), 3);
    let (gi, gm, go) = (&out.all[&inner], &out.all[&middle], &out.all[&outer]);
    assert_eq!(go, &out.grad_info);
    let calls = |g: GraphId| -> Vec<GraphId> {
        let g = ir.graph(g).unwrap();
        g.ops().filter(|o| o.op_type() == "Call").filter_map(|o| o.attrs.graph("graph")).collect()
    };
    assert_eq!(calls(go.graph), vec![gm.graph]);
    assert_eq!(calls(gm.graph), vec![gi.graph]);
    // relu's gradient reads relu's output, an intermediate of `inner` made its output;
    // the call in `middle` grew it and `middle` passes it on as its own output.
    assert_eq!(ir.graph(inner).unwrap().outputs().len(), 1, "relu output is already the graph output");
    let middle_call = ir.graph(middle).unwrap().ops().find(|o| o.op_type() == "Call").unwrap().outputs().len();
    assert_eq!(middle_call, ir.graph(inner).unwrap().outputs().len());
    assert_eq!(gi.expected_outputs.len(), 2);
    assert_eq!(gm.expected_outputs.len(), 2);
    assert_eq!(go.expected_outputs.len(), 2);
    ir.verify().unwrap();
}

#[test]
fn nested_intermediate_in_inner_graph_propagates_outputs() {
    // inner(x) = sin(tanh(x)): sin's gradient reads tanh(x), inner's intermediate.
    let mut ir = Ir::new();
    let inner = ir.create_graph("inner").unwrap();
    let x = input(&mut ir, inner, "x", f32s(&[3]));
    let h = op0(&mut ir, inner, "Tanh", &[x]);
    let y = op0(&mut ir, inner, "Sin", &[h]);
    output(&mut ir, inner, y);
    let outer = ir.create_graph("outer").unwrap();
    let ox = input(&mut ir, outer, "x", f32s(&[3]));
    let c = call(&mut ir, outer, inner, &[ox]);
    let cy = ir.graph(outer).unwrap().op(c).unwrap().output(0).unwrap();
    output(&mut ir, outer, cy);

    let out = autodiff(&mut ir, outer, None, None, &GradGraphInfos::new(), true).unwrap();
    assert_eq!(ir.graph(inner).unwrap().outputs(), &[y, h]);
    let call_op = ir.graph(outer).unwrap().op(c).unwrap();
    let ch = call_op.output(1).expect("the call in outer grew an output");
    // outer's gradient graph reads that new call output, so it is an output of outer too.
    assert_eq!(ir.graph(outer).unwrap().outputs(), &[cy, ch]);
    assert!(out.grad_info.expected_inputs.contains(&ExpectedConnection::fwd(ch)));
    ir.verify().unwrap();
}

#[test]
fn shared_callee_gradient_graph_is_built_once() {
    // A and B both call C.
    let mut ir = Ir::new();
    let c = ir.create_graph("C").unwrap();
    let cx = input(&mut ir, c, "x", f32s(&[3]));
    let cy = op0(&mut ir, c, "Sin", &[cx]);
    output(&mut ir, c, cy);
    let mut make = |name: &str| {
        let g = ir.create_graph(name).unwrap();
        let x = input(&mut ir, g, "x", f32s(&[3]));
        let k = call(&mut ir, g, c, &[x]);
        let y = ir.graph(g).unwrap().op(k).unwrap().output(0).unwrap();
        let z = op0(&mut ir, g, "Exp", &[y]);
        output(&mut ir, g, z);
        g
    };
    let a = make("A");
    let b = make("B");

    let from_b = autodiff(&mut ir, b, None, None, &GradGraphInfos::new(), true).unwrap();
    assert_eq!(from_b.all.keys().copied().collect::<std::collections::BTreeSet<_>>(), [b, c].into());
    let from_a = autodiff(&mut ir, a, None, None, &from_b.all, true).unwrap();
    assert_eq!(from_a.all[&c], from_b.all[&c], "C's gradient graph is reused");
    let c_grads = ir.graphs().filter(|g| g.name().starts_with("C_grad")).count();
    assert_eq!(c_grads, 1, "C's gradient graph exists once");
    let a_grad = ir.graph(from_a.grad_info.graph).unwrap();
    let called: Vec<GraphId> = a_grad.ops().flat_map(|o| o.called_graphs()).collect();
    assert_eq!(called, vec![from_b.all[&c].graph]);

    // Without the info, autodiff of A would make a second gradient graph for C.
    autodiff(&mut ir, a, None, None, &GradGraphInfos::new(), false).unwrap();
    assert_eq!(ir.graphs().filter(|g| g.name().starts_with("C_grad")).count(), 2);
    ir.verify().unwrap();
}

/// `f(c, x, w) = if c { tanh(x) * w } else { x + x }` with outputs and the If op.
fn conditional(ir: &mut Ir) -> (GraphId, [TensorId; 3], OpId) {
    let then_g = ir.create_graph("then").unwrap();
    let tx = input(ir, then_g, "x", f32s(&[3]));
    let tw = input(ir, then_g, "w", f32s(&[3]));
    let th = op0(ir, then_g, "Tanh", &[tx]);
    let ty = op0(ir, then_g, "Mul", &[th, tw]);
    output(ir, then_g, ty);
    let else_g = ir.create_graph("else").unwrap();
    let ex = input(ir, else_g, "x", f32s(&[3]));
    let ey = op0(ir, else_g, "Add", &[ex, ex]);
    output(ir, else_g, ey);

    let f = ir.create_graph("f").unwrap();
    let c = input(ir, f, "c", TensorInfo::new(DataType::Bool, []));
    let x = input(ir, f, "x", f32s(&[3]));
    let w = input(ir, f, "w", f32s(&[3]));
    let attrs = Attributes::new()
        .with("then_graph", AttrValue::Graph(then_g))
        .with("else_graph", AttrValue::Graph(else_g))
        .with("then_inputs", AttrValue::Ints(vec![1, 2]))
        .with("else_inputs", AttrValue::Ints(vec![1]));
    let iff = ir.create_op(f, "If", attrs, &[(0, c), (1, x), (2, w)], "if").unwrap();
    let y = ir.graph(f).unwrap().op(iff).unwrap().output(0).unwrap();
    output(ir, f, y);
    (f, [c, x, w], iff)
}

#[test]
fn conditional_branches() {
    let mut ir = Ir::new();
    let (f, [_, x, w], _) = conditional(&mut ir);
    let then_g = ir.graph_by_name("then").unwrap().id();
    let out = autodiff(&mut ir, f, None, None, &GradGraphInfos::new(), true).unwrap();
    let info = out.grad_info;
    // The bool condition gets no gradient.
    assert_eq!(info.expected_outputs, vec![ExpectedConnection::fwd_grad(x), ExpectedConnection::fwd_grad(w)]);
    assert_eq!(op_types(&ir, info.graph), ["If"]);
    // The then-branch is called by If, so its outputs cannot grow: tanh is recomputed.
    assert_eq!(ir.graph(then_g).unwrap().outputs().len(), 1);
    let then_grad = out.all[&then_g].graph;
    assert!(op_types(&ir, then_grad).contains(&"Tanh"));
    // Both wrappers return gradients for x and w (the else branch returns zeros for w).
    let gg = ir.graph(info.graph).unwrap();
    let if_op = gg.ops().next().unwrap();
    let (tw, ew) = (if_op.attrs.graph("then_graph").unwrap(), if_op.attrs.graph("else_graph").unwrap());
    assert_eq!(ir.graph(tw).unwrap().output_infos(), ir.graph(ew).unwrap().output_infos());
    assert!(op_types(&ir, ew).contains(&"Init"));
    ir.verify().unwrap();
}

#[test]
fn errors_name_graphs_tensors_and_ops() {
    let mut ir = Ir::new();
    let (g, [x, _, _, y]) = linear(&mut ir);
    let none = GradGraphInfos::new();
    let err = autodiff(&mut ir, g, Some(&[x]), None, &none, false).unwrap_err();
    assert_eq!(err, AutodiffError::ProvidedNotOutput { graph: "linear".into(), tensor: "x".into() });
    assert!(err.to_string().contains("`x` is not an output of graph `linear`"), "{err}");
    let err = autodiff(&mut ir, g, None, Some(&[y]), &none, false).unwrap_err();
    assert_eq!(err, AutodiffError::RequiredNotInput { graph: "linear".into(), tensor: y_name(&ir, g, y) });

    // An op without a gradient on the path: NllLossWithSoftmaxGrad.
    let h = ir.create_graph("h").unwrap();
    let p = input(&mut ir, h, "p", f32s(&[2, 3]));
    let l = input(&mut ir, h, "labels", TensorInfo::new(DataType::Int32, [2]));
    let loss = op0(&mut ir, h, "NllLossWithSoftmaxGrad", &[p, l]);
    output(&mut ir, h, loss);
    let graphs_before = ir.graph_ids().len();
    let err = autodiff(&mut ir, h, None, None, &none, false).unwrap_err();
    assert_eq!(
        err,
        AutodiffError::NotDifferentiable {
            graph: "h".into(),
            op: "nlllosswithsoftmaxgrad".into(),
            op_type: "NllLossWithSoftmaxGrad".into(),
            reason: String::new()
        }
    );
    assert_eq!(ir.graph_ids().len(), graphs_before, "nothing is created on error");
    let err = autodiff(&mut ir, h, None, Some(&[l]), &none, false).unwrap_err();
    assert!(matches!(err, AutodiffError::NotFloatingPoint { dtype: DataType::Int32, .. }), "{err}");

    // The same op off the required path is fine: the loss does not depend on `q`.
    let k = ir.create_graph("k").unwrap();
    let p = input(&mut ir, k, "p", f32s(&[2, 3]));
    let q = input(&mut ir, k, "q", f32s(&[2, 3]));
    let l = input(&mut ir, k, "labels", TensorInfo::new(DataType::Int32, [2]));
    let loss = op0(&mut ir, k, "NllLossWithSoftmaxGrad", &[p, l]);
    let other = op0(&mut ir, k, "ReduceSum", &[q]);
    output(&mut ir, k, loss);
    output(&mut ir, k, other);
    let info = autodiff(&mut ir, k, Some(&[other]), Some(&[q]), &none, false).unwrap().grad_info;
    assert_eq!(info.expected_outputs, vec![ExpectedConnection::fwd_grad(q)]);
    ir.verify().unwrap();
}

fn y_name(ir: &Ir, g: GraphId, y: TensorId) -> String {
    ir.graph(g).unwrap().tensor(y).unwrap().name.clone()
}

#[test]
fn bad_grad_graph_info_is_rejected() {
    let mut ir = Ir::new();
    let (g, _) = linear(&mut ir);
    let info = grad(&mut ir, g);
    let other = ir.create_graph("other").unwrap();
    let mut infos = GradGraphInfos::new();
    infos.insert(other, info);
    let err = autodiff(&mut ir, g, None, None, &infos, false).unwrap_err();
    assert!(matches!(err, AutodiffError::InvalidGradGraphInfo { ref graph, .. } if graph == "other"), "{err}");
}

/// `f(x, w) = Repeat{body, 2}(x, w)` with `body(x, w) = sin(x) * w`: `x` is
/// loop-carried, `w` invariant.
fn repeat_of_sin(ir: &mut Ir, count: i64) -> (GraphId, GraphId, OpId) {
    let body = ir.create_graph("body").unwrap();
    let bx = input(ir, body, "x", f32s(&[3]));
    let bw = input(ir, body, "w", f32s(&[3]));
    let s = op0(ir, body, "Sin", &[bx]);
    let by = op0(ir, body, "Mul", &[s, bw]);
    output(ir, body, by);
    let f = ir.create_graph("f").unwrap();
    let x = input(ir, f, "x", f32s(&[3]));
    let w = input(ir, f, "w", f32s(&[3]));
    let attrs = Attributes::new().with("graph", AttrValue::Graph(body)).with("count", AttrValue::Int(count));
    let ins = [(0, x), (1, w)];
    let rep = ir.create_op(f, "Repeat", attrs, &ins, "repeat").unwrap();
    let y = ir.graph(f).unwrap().op(rep).unwrap().output(0).unwrap();
    output(ir, f, y);
    (body, f, rep)
}

#[test]
fn repeat_stashes_forward_and_loops_in_reverse() {
    let mut ir = Ir::new();
    let (body, f, rep) = repeat_of_sin(&mut ir, 2);
    let info = grad(&mut ir, f);
    ir.verify().unwrap();
    // The forward op now repeats a wrapper that stashes `x` (read by the gradient
    // of `Sin`) and calls a copy of the body that also outputs the body's
    // `Sin` (read by the gradient of `Mul`), stashed too: its outputs are the
    // body's, the final counter and the stashes `[2, 3]` of `x` and of `Sin`.
    let fg = ir.graph(f).unwrap();
    let op = fg.op(rep).unwrap();
    let wrapper = op.attrs.graph("graph").unwrap();
    assert_ne!(wrapper, body);
    let mut wrapper_ops = op_types(&ir, wrapper);
    wrapper_ops.dedup();
    assert_eq!(wrapper_ops, ["Add", "Call", "DynamicUpdateInplace", "Reshape"]);
    let call = ir.graph(wrapper).unwrap().ops().find(|o| o.op_type() == "Call").unwrap();
    let copy = call.attrs.graph("graph").unwrap();
    assert_ne!(copy, body);
    assert_eq!(ir.graph(copy).unwrap().outputs().len(), 2);
    let outs: Vec<TensorInfo> = op.outputs().tensors().map(|t| fg.tensor(t).unwrap().info.clone()).collect();
    assert_eq!(outs, [f32s(&[3]), TensorInfo::new(DataType::Int32, []), f32s(&[2, 3]), f32s(&[2, 3])]);
    // The stashes are forward outputs read by the gradient graph, which repeats the
    // backward wrapper twice; the body's gradient graph recomputes nothing.
    for j in [2, 3] {
        let stash = op.output(j).unwrap();
        assert!(fg.outputs().contains(&stash));
        assert!(info.expected_inputs.contains(&ExpectedConnection::fwd(stash)));
    }
    let gg = ir.graph(info.graph).unwrap();
    let back = gg.ops().find(|o| o.op_type() == "Repeat").unwrap();
    assert_eq!(back.attrs.int("count"), Some(2));
    let bw = back.attrs.graph("graph").unwrap();
    let mut bw_ops = op_types(&ir, bw);
    bw_ops.dedup();
    assert_eq!(bw_ops, ["Add", "Call", "DynamicSlice", "Reshape", "Sub"]);
    assert_eq!(info.expected_outputs.len(), 2);
    let body_grad = ir.graph(bw).unwrap().ops().find(|o| o.op_type() == "Call").unwrap().attrs.graph("graph").unwrap();
    assert!(!op_types(&ir, body_grad).contains(&"Sin"), "{:?}", op_types(&ir, body_grad));
}

#[test]
fn differentiating_a_stashing_repeat_again_is_a_typed_error() {
    let mut ir = Ir::new();
    let (_, f, _) = repeat_of_sin(&mut ir, 3);
    grad(&mut ir, f);
    let graphs_before = ir.graph_ids().len();
    let err = autodiff(&mut ir, f, None, None, &GradGraphInfos::new(), false).unwrap_err();
    assert!(
        matches!(err, AutodiffError::NotDifferentiable { ref op_type, ref reason, .. }
            if op_type == "DynamicUpdateInplace" && reason.contains("in place")),
        "{err}"
    );
    assert_eq!(ir.graph_ids().len(), graphs_before, "nothing is created on error");
    ir.verify().unwrap();
}

/// Stacked weights `W [3, 2]` read through `DynamicSlice` at a carried counter: the
/// backward loop adds each iteration's slice gradient into its accumulator in place
/// (a copy of the body's gradient graph returns the slice and its index instead of
/// the zero-padded `DynamicSliceGrad`).
#[test]
fn stacked_weight_gradients_accumulate_in_place() {
    let mut ir = Ir::new();
    let body = ir.create_graph("body").unwrap();
    let bx = input(&mut ir, body, "x", f32s(&[1, 2]));
    let bi = input(&mut ir, body, "i", TensorInfo::new(DataType::Int32, []));
    let bw = input(&mut ir, body, "W", f32s(&[3, 2]));
    let slice = Attributes::new().with("axes", AttrValue::Ints(vec![0])).with("sizes", AttrValue::Ints(vec![1]));
    let wl = op(&mut ir, body, "DynamicSlice", slice, &[bw, bi]);
    let y = op0(&mut ir, body, "Mul", &[bx, wl]);
    let one = ir
        .graph_mut(body)
        .unwrap()
        .add_tensor(
            "one",
            TensorInfo::new(DataType::Int32, []),
            popart_ir::TensorKind::Constant(popart_ir::HostTensor::from_f64_values(DataType::Int32, &[], &[1.0])),
        )
        .unwrap();
    let next = op0(&mut ir, body, "Add", &[bi, one]);
    output(&mut ir, body, y);
    output(&mut ir, body, next);
    let f = ir.create_graph("f").unwrap();
    let x = input(&mut ir, f, "x", f32s(&[1, 2]));
    let i = input(&mut ir, f, "i", TensorInfo::new(DataType::Int32, []));
    let w = input(&mut ir, f, "W", f32s(&[3, 2]));
    let attrs = Attributes::new().with("graph", AttrValue::Graph(body)).with("count", AttrValue::Int(3));
    let rep = ir.create_op(f, "Repeat", attrs, &[(0, x), (1, i), (2, w)], "repeat").unwrap();
    let out = ir.graph(f).unwrap().op(rep).unwrap().output(0).unwrap();
    output(&mut ir, f, out);
    let info = grad(&mut ir, f);
    ir.verify().unwrap();
    let gg = ir.graph(info.graph).unwrap();
    let back = gg.ops().find(|o| o.op_type() == "Repeat").unwrap();
    let bw_graph = back.attrs.graph("graph").unwrap();
    let mut kinds = op_types(&ir, bw_graph);
    kinds.dedup();
    assert_eq!(kinds, ["Add", "Call", "DynamicSlice", "DynamicUpdateInplace", "Reshape", "Sub"]);
    let bwg = ir.graph(bw_graph).unwrap();
    let called = bwg.ops().find(|o| o.op_type() == "Call").unwrap().attrs.graph("graph").unwrap();
    assert!(!op_types(&ir, called).contains(&"DynamicSliceGrad"), "{:?}", op_types(&ir, called));
    // The accumulator (a [3, 2] input) is updated in place, never added whole.
    for o in bwg.ops().filter(|o| o.op_type() == "Add") {
        let t = o.output(0).unwrap();
        assert_ne!(bwg.tensor(t).unwrap().info.shape, [3, 2], "full-size add `{}`", o.name);
    }
}

#[test]
fn repeat_count_beyond_the_int32_counter_is_an_error() {
    let mut ir = Ir::new();
    let (_, f, _) = repeat_of_sin(&mut ir, i64::from(i32::MAX) + 1);
    let graphs_before = ir.graph_ids().len();
    let err = autodiff(&mut ir, f, None, None, &GradGraphInfos::new(), false).unwrap_err();
    assert!(
        matches!(err, AutodiffError::NotDifferentiable { ref op_type, ref reason, .. }
            if op_type == "Repeat" && reason.contains("count")),
        "{err}"
    );
    assert_eq!(ir.graph_ids().len(), graphs_before, "nothing is created on error");
    ir.verify().unwrap();
}

/// Every gradient rule yields a gradient graph that passes shape inference and the
/// verifier, with one gradient per floating point input, typed like that input.
#[test]
fn every_gradient_rule_builds_a_valid_graph() {
    let f = |s: &[usize]| f32s(s);
    let int = |s: &[usize]| TensorInfo::new(DataType::Int32, s);
    let ints = |v: &[i64]| AttrValue::Ints(v.to_vec());
    let a = Attributes::new;
    let cases: Vec<(&str, Attributes, Vec<TensorInfo>)> = vec![
        ("Neg", a(), vec![f(&[2, 3])]),
        ("Abs", a(), vec![f(&[2, 3])]),
        ("Exp", a(), vec![f(&[2, 3])]),
        ("Log", a(), vec![f(&[2, 3])]),
        ("Sqrt", a(), vec![f(&[2, 3])]),
        ("Relu", a(), vec![f(&[2, 3])]),
        ("Gelu", a(), vec![f(&[2, 3])]),
        ("Tanh", a(), vec![f(&[2, 3])]),
        ("Sigmoid", a(), vec![f(&[2, 3])]),
        ("Sin", a(), vec![f(&[2, 3])]),
        ("Cos", a(), vec![f(&[2, 3])]),
        ("Sign", a(), vec![f(&[2, 3])]),
        ("Floor", a(), vec![f(&[2, 3])]),
        ("Ceil", a(), vec![f(&[2, 3])]),
        ("Identity", a(), vec![f(&[2, 3])]),
        ("Cast", a().with("to", AttrValue::DType(DataType::Float64)), vec![f(&[2, 3])]),
        ("Add", a(), vec![f(&[2, 3]), f(&[3])]),
        ("Sub", a(), vec![f(&[2, 1]), f(&[1, 3])]),
        ("Mul", a(), vec![f(&[2, 3]), f(&[])]),
        ("Div", a(), vec![f(&[3]), f(&[2, 3])]),
        ("Pow", a(), vec![f(&[2, 3]), f(&[2, 3])]),
        ("Maximum", a(), vec![f(&[2, 3]), f(&[1])]),
        ("Minimum", a(), vec![f(&[2, 3]), f(&[2, 3])]),
        ("Where", a(), vec![TensorInfo::new(DataType::Bool, [2, 3]), f(&[2, 3]), f(&[3])]),
        ("MatMul", a(), vec![f(&[2, 3]), f(&[3, 4])]),
        ("MatMul", a(), vec![f(&[5, 2, 3]), f(&[3, 4])]),
        ("MatMul", a(), vec![f(&[3]), f(&[2, 3, 4])]),
        ("ReduceSum", a().with("axes", ints(&[1])), vec![f(&[2, 3])]),
        ("ReduceMean", a().with("axes", ints(&[0])).with("keepdims", AttrValue::Bool(true)), vec![f(&[2, 3])]),
        ("ReduceMax", a(), vec![f(&[2, 3])]),
        ("ReduceMin", a().with("axes", ints(&[-1])), vec![f(&[2, 3])]),
        ("Softmax", a().with("axis", AttrValue::Int(-1)), vec![f(&[2, 3])]),
        ("Reshape", a().with("shape", ints(&[3, -1])), vec![f(&[2, 3])]),
        ("Transpose", a().with("perm", ints(&[2, 0, 1])), vec![f(&[2, 3, 4])]),
        ("Transpose", a(), vec![f(&[2, 3])]),
        ("Slice", a().with("starts", ints(&[1])).with("ends", ints(&[3])).with("axes", ints(&[1])), vec![f(&[2, 4])]),
        ("Concat", a().with("axis", AttrValue::Int(1)), vec![f(&[2, 1]), f(&[2, 3]), f(&[2, 2])]),
        ("Squeeze", a().with("axes", ints(&[1])), vec![f(&[2, 1, 3])]),
        ("Gather", a().with("axis", AttrValue::Int(0)), vec![f(&[4, 3]), int(&[2])]),
        ("NllLoss", a().with("reduction", AttrValue::Str("mean".into())), vec![f(&[2, 3]), int(&[2])]),
        ("Dropout", a().with("p", AttrValue::Float(0.5)), vec![f(&[2, 3]), TensorInfo::new(DataType::Uint32, [2])]),
    ];
    for (ty, attrs, infos) in cases {
        let mut ir = Ir::new();
        let g = ir.create_graph("g").unwrap();
        let ins: Vec<TensorId> =
            infos.iter().enumerate().map(|(i, t)| input(&mut ir, g, &format!("in{i}"), t.clone())).collect();
        let y = op(&mut ir, g, ty, attrs, &ins);
        output(&mut ir, g, y);
        let info = autodiff(&mut ir, g, None, None, &GradGraphInfos::new(), false)
            .unwrap_or_else(|e| panic!("{ty}: {e}"))
            .grad_info;
        ir.verify().unwrap_or_else(|e| panic!("{ty}: {e}"));
        let floats: Vec<TensorId> = ins
            .iter()
            .copied()
            .filter(|&t| ir.graph(g).unwrap().tensor(t).unwrap().info.dtype.is_floating_point())
            .collect();
        assert_eq!(
            info.expected_outputs,
            floats.iter().map(|&t| ExpectedConnection::fwd_grad(t)).collect::<Vec<_>>(),
            "{ty}"
        );
        let want: Vec<TensorInfo> =
            floats.iter().map(|&t| ir.graph(g).unwrap().tensor(t).unwrap().info.clone()).collect();
        assert_eq!(ir.graph(info.graph).unwrap().output_infos(), want, "{ty}");
    }
}

#[test]
fn in_place_modification_of_a_gradient_path_tensor_is_rejected() {
    // h = relu(x); h += w (in place); y = h * 2: relu's gradient would read the modified h.
    let mut ir = Ir::new();
    let g = ir.create_graph("f").unwrap();
    let x = input(&mut ir, g, "x", f32s(&[3]));
    let w = input(&mut ir, g, "w", f32s(&[3]));
    let h = op0(&mut ir, g, "Relu", &[x]);
    let h2 = op0(&mut ir, g, "AddInplace", &[h, w]);
    let y = op0(&mut ir, g, "Mul", &[h2, h2]);
    output(&mut ir, g, y);
    let err = autodiff(&mut ir, g, None, None, &GradGraphInfos::new(), false).unwrap_err();
    assert!(
        matches!(err, AutodiffError::NotDifferentiable { ref op_type, ref reason, .. }
            if op_type == "AddInplace" && reason.contains("in place")),
        "{err}"
    );
}
