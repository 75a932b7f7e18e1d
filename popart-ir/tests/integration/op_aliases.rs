//! The in-place and view declaration (`OpDef::aliases`) and what is derived
//! from it: the expected flags, modified inputs and alias pairs are the values
//! the ops stated by hand before the declaration became the single source.

use popart_ir::{lookup_op, Alias, AliasKind, AttrValue, Attributes, InferContext, OpDef, OpFlags, Result, TensorInfo};

const M: OpFlags = OpFlags::MODIFIES_INPUTS;
const I: OpFlags = OpFlags::INPLACE;
const V: OpFlags = OpFlags::VIEW;

/// (op type, attributes, flags, modified inputs, alias pairs).
type Row = (&'static str, Attributes, OpFlags, Vec<u32>, Vec<(u32, u32)>);

fn rows() -> Vec<Row> {
    let none = Attributes::new;
    // Subgraph ops always name their graph (and a repeat its count): the
    // declaration reads `modified` from attributes that decode.
    let graph = AttrValue::Graph(popart_ir::Ir::new().main_graph_id());
    let call = |m: Vec<i64>| Attributes::new().with("graph", graph.clone()).with("modified", AttrValue::Ints(m));
    let repeat = |m: Vec<i64>| call(m).with("count", AttrValue::Int(2));
    vec![
        // In-place unary ops and updates: input 0 written, output 0 its memory.
        ("ReluInplace", none(), M | I, vec![0], vec![(0, 0)]),
        ("ExpInplace", none(), M | I, vec![0], vec![(0, 0)]),
        ("IncrementModInplace", none(), M | I, vec![0], vec![(0, 0)]),
        ("AddInplace", none(), M | I, vec![0], vec![(0, 0)]),
        ("Accumulate", none(), M | I, vec![0], vec![(0, 0)]),
        ("CopyVarUpdate", none(), M | I, vec![0], vec![(0, 0)]),
        ("AdamVarUpdate", none(), M | I, vec![0], vec![(0, 0)]),
        ("DynamicUpdateInplace", none(), M | I, vec![0], vec![(0, 0)]),
        ("SliceUpdateInplace", none(), M | I, vec![0], vec![(0, 0)]),
        ("ReplicatedAllReduceInplace", none(), M | I, vec![0], vec![(0, 0)]),
        // The fused weight update writes its third input.
        ("ScaledAddMatMulRhsGradInplace", none(), M | I, vec![2], vec![(2, 0)]),
        ("ReplicatedScaledAddMatMulRhsGradInplace", none(), M | I, vec![2], vec![(2, 0)]),
        // Written without an output alias: Adam's step counter.
        ("AdamUpdater", none(), M, vec![3], vec![]),
        // One Adam step: the weight (output 0), both moments and the step.
        ("AdamStep", none(), M | I, vec![0, 2, 3, 4], vec![(0, 0)]),
        // Views: unwritten aliases; only the byte-identical ones are VIEW.
        ("ReshapeInplace", none(), I | V, vec![], vec![(0, 0)]),
        ("DetachInplace", none(), I | V, vec![], vec![(0, 0)]),
        ("TransposeInplace", none(), I, vec![], vec![(0, 0)]),
        ("SliceInplace", none(), I, vec![], vec![(0, 0)]),
        (
            "ConcatInplace",
            Attributes::new().with("axis", AttrValue::Int(0)).with("num_inputs", AttrValue::Int(3)),
            I,
            vec![],
            vec![(0, 0), (1, 0), (2, 0)],
        ),
        // Out-of-place ops holding their input's bytes: VIEW, no alias.
        ("Reshape", none(), V, vec![], vec![]),
        ("Squeeze", none(), V, vec![], vec![]),
        ("Identity", none(), V, vec![], vec![]),
        ("Detach", none(), V, vec![], vec![]),
        // Calls: modified inputs from the `modified` attribute (the called graph's writes).
        ("Call", call(vec![]), OpFlags::SUBGRAPH, vec![], vec![]),
        ("Call", call(vec![0, 2]), OpFlags::SUBGRAPH | M, vec![0, 2], vec![]),
        ("Repeat", repeat(vec![1]), OpFlags::SUBGRAPH | M, vec![1], vec![]),
        ("If", none(), OpFlags::SUBGRAPH, vec![], vec![]),
        // Remote and host IO keep their other properties.
        ("RemoteLoadInplace", none(), OpFlags::HOST_IO | M | I, vec![0], vec![(0, 0)]),
        ("RemoteLoad", none(), OpFlags::HOST_IO, vec![], vec![]),
        ("RemoteStore", none(), OpFlags::HOST_IO | OpFlags::SIDE_EFFECT, vec![], vec![]),
        ("HostLoad", none(), OpFlags::HOST_IO | OpFlags::SIDE_EFFECT, vec![], vec![]),
        ("Dropout", none(), OpFlags::RANDOM, vec![], vec![]),
        ("Add", none(), OpFlags::empty(), vec![], vec![]),
        ("MatMul", none(), OpFlags::empty(), vec![], vec![]),
    ]
}

#[test]
fn derived_flags_modified_inputs_and_pairs_match_the_hand_written_ones() {
    for (ty, attrs, flags, modified, pairs) in rows() {
        let def = lookup_op(ty).unwrap();
        assert_eq!(def.flags(&attrs), flags, "{ty} flags");
        assert_eq!(def.modified_inputs(&attrs), modified, "{ty} modified inputs");
        assert_eq!(def.alias_pairs(&attrs), pairs, "{ty} alias pairs");
    }
}

/// Invariants of every registered op's declaration: the flags say exactly what
/// the list says, and no entry without an output claims anything but a write.
#[test]
fn every_registered_op_declares_consistently() {
    let attrs = Attributes::new();
    for def in popart_ir::registered_ops() {
        let ty = def.op_type();
        let list = def.aliases(&attrs);
        let flags = def.flags(&attrs);
        assert_eq!(flags.contains(M), !def.modified_inputs(&attrs).is_empty(), "{ty}");
        assert_eq!(flags.contains(I), !def.alias_pairs(&attrs).is_empty(), "{ty}");
        for a in &list {
            assert!(a.output.is_some() || a.kind == AliasKind::Modified, "{ty}: {a:?}");
        }
        assert!(!def.properties(&attrs).intersects(OpFlags::ALIAS_FACTS), "{ty} states an alias fact by hand");
    }
}

/// A custom op cannot state alias facts beside its declaration: flags it
/// returns from `properties` that belong to the declaration are ignored.
struct Liar;

impl OpDef for Liar {
    fn op_type(&self) -> &'static str {
        "test.Liar"
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        Ok(vec![ctx.input(0)?.clone()])
    }
    fn properties(&self, _: &Attributes) -> OpFlags {
        OpFlags::all()
    }
    fn aliases(&self, _: &Attributes) -> Vec<Alias> {
        vec![Alias::region(0, 0)]
    }
}

#[test]
fn alias_facts_come_only_from_the_declaration() {
    let def: &dyn OpDef = &Liar;
    let attrs = Attributes::new();
    assert_eq!(def.flags(&attrs), (OpFlags::all() - OpFlags::ALIAS_FACTS) | OpFlags::INPLACE);
    assert!(def.modified_inputs(&attrs).is_empty());
    assert_eq!(def.alias_pairs(&attrs), vec![(0, 0)]);
}
