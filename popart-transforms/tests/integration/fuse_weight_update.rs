//! `fuse_weight_update` never turns a valid IR into an invalid one.

use popart_ir::text;
use popart_transforms::patterns::fuse_weight_updates;
use popart_transforms::pipeline::Pipeline;

/// Two weights of one gradient graph, whose readers are each ordered after the
/// other weight's matmul (`mm1 -> r2`, `mm2 -> r1`). Each match alone is fine
/// (a matmul does not reach its own weight's reader), but fusing both orders
/// `r1` before the first update, which takes over `mm1 -> r2`, and `r2` before
/// the second, which takes over `mm2 -> r1`: a cycle. The pattern used to apply
/// both and leave a cyclic graph; now the second match sees the first rewrite's
/// constraints and is skipped.
const CROSSED_READERS: &str = r#"ir num_host_transfers=1 replication_factor=1

graph main
  inputs [g, x]
  outputs [y1, y2]
  tensor g act float32[2,3]
  tensor x act float32[2,4]
  tensor W1 var float32[4,3] = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
  tensor W2 var float32[4,3] = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
  tensor d1 act float32[4,3]
  tensor d2 act float32[4,3]
  tensor y1 act float32[4,3]
  tensor y2 act float32[4,3]
  tensor W1n act float32[4,3]
  tensor W2n act float32[4,3]
  op call Call {graph=@F} in[0=g, 1=x, 2=W1, 3=W2] out[0=d1, 1=d2, 2=y1, 3=y2]
  op u1 ScaledAddInplace {a=1.0, b=-0.1} in[0=W1, 1=d1] out[0=W1n]
  op u2 ScaledAddInplace {a=1.0, b=-0.1} in[0=W2, 1=d2] out[0=W2n]

graph F
  inputs [fg, fx, w1, w2]
  outputs [o1, o2, r1:0, r2:0]
  tensor fg act float32[2,3]
  tensor fx act float32[2,4]
  tensor w1 act float32[4,3]
  tensor w2 act float32[4,3]
  tensor o1 act float32[4,3]
  tensor o2 act float32[4,3]
  tensor r1:0 act float32[4,3]
  tensor r2:0 act float32[4,3]
  op mm1 MatMulRhsGrad in[0=fg, 1=fx, 2=w1] out[0=o1]
  op mm2 MatMulRhsGrad in[0=fg, 1=fx, 2=w2] out[0=o2]
  op r1 Neg in[0=w1] out[0=r1:0]
  op r2 Neg in[0=w2] out[0=r2:0]
  topocon mm1 -> r2
  topocon mm2 -> r1
"#;

#[test]
fn crossed_reader_constraints_do_not_make_a_cycle() {
    let mut ir = text::parse(CROSSED_READERS).unwrap();
    let fused = fuse_weight_updates(&mut ir).unwrap();
    assert_eq!(fused.len(), 1, "{fused:?}");
    ir.verify().unwrap();
    for g in ir.graphs() {
        g.schedule().unwrap();
    }
}

#[test]
fn the_default_pipeline_accepts_it() {
    let mut ir = text::parse(CROSSED_READERS).unwrap();
    let report = Pipeline::default().with_verify_each_pass(true).run(&mut ir).unwrap();
    assert_eq!(report.fused_weight_updates.len(), 1);
    ir.verify().unwrap();
}

/// A pass that breaks the IR is reported with its name when every pass is verified.
#[test]
fn a_pass_that_breaks_the_ir_is_named() {
    struct Breaker;
    impl popart_transforms::Pass for Breaker {
        fn name(&self) -> &str {
            "breaker"
        }
        fn run(&self, ir: &mut popart_ir::Ir) -> popart_transforms::Result<popart_transforms::PassOutcome> {
            // A constraint against a data edge, through the unchecked path.
            let (call, u1) = (ir.main_graph().op_by_name("call")?.id, ir.main_graph().op_by_name("u1")?.id);
            ir.main_graph_mut().add_topo_con_unchecked(u1, call)?;
            Ok(popart_transforms::PassOutcome::changed(true))
        }
    }
    let mut ir = text::parse(CROSSED_READERS).unwrap();
    let p = Pipeline::new().with_pass(Breaker).with_verify_each_pass(true);
    match p.run(&mut ir) {
        Err(popart_transforms::TransformError::InvalidAfterPass { pass, .. }) => assert_eq!(pass, "breaker"),
        other => panic!("expected the pass to be named, got {other:?}"),
    }
}

/// Data-parallel SGD: the gradient of a called graph's matmul, all-reduced and
/// added to the weight. `fuse-all-reduce-update` and then `fuse-weight-update`
/// turn the three ops into one `ReplicatedScaledAddMatMulRhsGradInplace` in the
/// callee; a rank-3 weight keeps the unfused all-reduce update.
const REPLICATED_SGD: &str = r#"ir num_host_transfers=1 replication_factor=2

graph main
  inputs [g, x, g3, x3]
  outputs []
  tensor g act float32[2,3]
  tensor x act float32[2,4]
  tensor g3 act float32[5,2,3]
  tensor x3 act float32[5,2,4]
  tensor W var float32[4,3] = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
  tensor W3 var float32[5,4,3] = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
  tensor d act float32[4,3]
  tensor d3 act float32[5,4,3]
  tensor r act float32[4,3]
  tensor r3 act float32[5,4,3]
  tensor Wn act float32[4,3]
  tensor W3n act float32[5,4,3]
  op call Call {graph=@F} in[0=g, 1=x, 2=W, 3=g3, 4=x3, 5=W3] out[0=d, 1=d3]
  op ar ReplicatedAllReduceInplace {group_size=2, op="mean", stride=1} in[0=d] out[0=r]
  op u ScaledAddInplace {a=1.0, b=-0.1} in[0=W, 1=r] out[0=Wn]
  op ar3 ReplicatedAllReduceInplace {group_size=2, op="mean", stride=1} in[0=d3] out[0=r3]
  op u3 ScaledAddInplace {a=1.0, b=-0.1} in[0=W3, 1=r3] out[0=W3n]
  topocon call -> ar
  topocon ar -> u
  topocon u -> ar3
  topocon ar3 -> u3

graph F
  inputs [fg, fx, w, fg3, fx3, w3]
  outputs [o, o3]
  tensor fg act float32[2,3]
  tensor fx act float32[2,4]
  tensor w act float32[4,3]
  tensor fg3 act float32[5,2,3]
  tensor fx3 act float32[5,2,4]
  tensor w3 act float32[5,4,3]
  tensor o act float32[4,3]
  tensor o3 act float32[5,4,3]
  op mm MatMulRhsGrad in[0=fg, 1=fx, 2=w] out[0=o]
  op mm3 MatMulRhsGrad in[0=fg3, 1=fx3, 2=w3] out[0=o3]
"#;

#[test]
fn a_replicated_update_of_a_matmul_gradient_fuses_into_the_callee() {
    let mut ir = text::parse(REPLICATED_SGD).unwrap();
    let report = Pipeline::default().with_verify_each_pass(true).run(&mut ir).unwrap();
    assert_eq!(report.fused_weight_updates, ["main/ar_update"]);
    ir.verify().unwrap();
    let types = |name: &str| -> Vec<String> {
        let g = ir.graphs().find(|g| g.name() == name).unwrap();
        let mut v: Vec<String> = g.ops().map(|o| o.op_type().to_string()).collect();
        v.sort();
        v
    };
    assert_eq!(types("F"), ["MatMulRhsGrad", "ReplicatedScaledAddMatMulRhsGradInplace"]);
    assert_eq!(types("main"), ["Call", "ReplicatedAllReduceScaledAddInplace"]);
    let f = ir.graphs().find(|g| g.name() == "F").unwrap();
    let fused = f.ops().find(|o| o.op_type() == "ReplicatedScaledAddMatMulRhsGradInplace").unwrap();
    assert_eq!(fused.attrs.str("op"), Some("mean"));
    assert_eq!(fused.attrs.int("group_size"), Some(2));
    assert_eq!(fused.attrs.float("b"), Some(-0.1));
}
