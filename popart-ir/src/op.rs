//! Ops: their data ([`Op`]), their behaviour ([`OpDef`]) and the registry of op types.

use std::fmt;
use std::sync::{OnceLock, RwLock};

use crate::hash::FxHashMap;
use crate::{Attributes, GraphId, Ir, IrError, OpId, Result, TensorId, TensorInfo};

bitflags::bitflags! {
    /// Properties of an op that passes must respect.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct OpFlags: u32 {
        /// An effect beyond its outputs and modified inputs (host IO, code load...): never pruned.
        const SIDE_EFFECT = 1 << 0;
        /// Writes to at least one of its inputs in place (see
        /// `<dyn OpDef>::modified_inputs`). Derived from [`OpDef::aliases`]: an [`AliasKind::Modified`] entry.
        const MODIFIES_INPUTS = 1 << 1;
        /// An output is the memory of an input (in-place updates, in-place views).
        /// Derived from [`OpDef::aliases`]: an entry with an output that is not
        /// [`AliasKind::Copy`].
        const INPLACE = 1 << 2;
        /// Calls other graphs (call, repeat, if).
        const SUBGRAPH = 1 << 3;
        /// Output 0 holds exactly the bytes of input 0 (reshapes, identity): lowering
        /// lets it share the input's buffer and runs no kernel when neither is
        /// written in place. Derived from [`OpDef::aliases`]: an
        /// [`AliasKind::Identical`] or [`AliasKind::Copy`] entry from input 0 to output 0.
        const VIEW = 1 << 4;
        /// Moves data between host and device.
        const HOST_IO = 1 << 5;
        /// Depends on a random seed input.
        const RANDOM = 1 << 6;
    }
}

impl OpFlags {
    /// The flags derived from an op's [`OpDef::aliases`] declaration, never
    /// from [`OpDef::properties`].
    pub const ALIAS_FACTS: OpFlags = OpFlags::MODIFIES_INPUTS.union(OpFlags::INPLACE).union(OpFlags::VIEW);
}

/// How an output of an op relates to the memory of one of its inputs: the kind
/// of one [`Alias`] entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AliasKind {
    /// The op writes the input in place; the output, if any, is the input's
    /// memory after the write (in-place updates: `AddInplace`, `Accumulate`,
    /// `RemoteLoadInplace`). Without an output, the input is only written
    /// (`AdamUpdater`'s step, a `Call`'s or `Repeat`'s `modified` inputs, which
    /// the builder reads off the called graph).
    Modified,
    /// The output is the input's memory, unwritten, byte for byte in the same
    /// order (`ReshapeInplace`, `DetachInplace`).
    Identical,
    /// The output is the input's memory or a part of it, unwritten, in another
    /// layout or at an offset (`TransposeInplace`, `SliceInplace`, each input of
    /// `ConcatInplace`).
    Region,
    /// Not an alias in the IR: the output is a tensor of its own holding the
    /// input's bytes in the same order (`Reshape`, `Identity`). Lowering may let
    /// it share the input's buffer and run no kernel when neither is written.
    Copy,
}

/// One entry of an op type's in-place and view declaration ([`OpDef::aliases`]):
/// the single statement from which [`OpFlags::MODIFIES_INPUTS`],
/// [`OpFlags::INPLACE`], [`OpFlags::VIEW`], the modified inputs and the alias
/// pairs of the alias model are derived.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Alias {
    /// The input index.
    pub input: u32,
    /// The output index; `None` only for an input written without an output
    /// ([`AliasKind::Modified`]).
    pub output: Option<u32>,
    /// How the output relates to the input.
    pub kind: AliasKind,
}

impl Alias {
    /// Input `input` is updated in place and output `output` is its memory.
    pub const fn modified(input: u32, output: u32) -> Alias {
        Alias { input, output: Some(output), kind: AliasKind::Modified }
    }

    /// Input `input` is written in place and no output names it.
    pub const fn written(input: u32) -> Alias {
        Alias { input, output: None, kind: AliasKind::Modified }
    }

    /// Output `output` is input `input`'s memory, byte for byte, unwritten.
    pub const fn identical(input: u32, output: u32) -> Alias {
        Alias { input, output: Some(output), kind: AliasKind::Identical }
    }

    /// Output `output` is (part of) input `input`'s memory in another layout, unwritten.
    pub const fn region(input: u32, output: u32) -> Alias {
        Alias { input, output: Some(output), kind: AliasKind::Region }
    }

    /// Output `output` is a new tensor holding input `input`'s bytes in order.
    pub const fn copy(input: u32, output: u32) -> Alias {
        Alias { input, output: Some(output), kind: AliasKind::Copy }
    }

    /// The (input, output) pair of the alias model: an output that is the
    /// input's memory (every kind but [`AliasKind::Copy`]).
    pub fn memory_pair(&self) -> Option<(u32, u32)> {
        match (self.kind, self.output) {
            (AliasKind::Copy, _) | (_, None) => None,
            (_, Some(o)) => Some((self.input, o)),
        }
    }
}

/// Where an input of a gradient op comes from (PopART's `GradInOutMapper`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GradSource {
    /// The forward op's input at this index.
    FwdInput(u32),
    /// The forward op's output at this index.
    FwdOutput(u32),
    /// The gradient of the forward op's output at this index.
    GradOfOutput(u32),
}

/// One gradient op, declared by a forward op's [`OpDef::grad`]: which op to create,
/// what it consumes and which forward inputs its outputs are gradients of.
/// Autodiff does all the wiring; if an output's shape differs from its forward
/// input's (broadcasting), autodiff reduces it to the input's shape by summation,
/// and if its dtype differs (`Cast`), autodiff casts it to the input's dtype.
/// An `Identity` of one output gradient is not created: the gradient is forwarded.
#[derive(Clone, Debug, PartialEq)]
pub struct GradOpSpec {
    /// Definition of the gradient op (registered or not: autodiff creates it directly).
    pub op: &'static dyn OpDef,
    /// Its attributes.
    pub attrs: Attributes,
    /// Gradient-op input index -> source.
    pub inputs: Vec<(u32, GradSource)>,
    /// Gradient-op output index -> index of the forward input it is the gradient of.
    pub outputs: Vec<(u32, u32)>,
}

/// What a gradient rule sees ([`OpDef::grad`]): the forward op and the
/// shapes of its tensors. A gradient op that needs a forward tensor's shape
/// takes it from here into its typed attributes, so the gradient graph does
/// not ask for the tensor (PopART's grad ops keep such shapes as members).
#[derive(Clone, Copy)]
pub struct GradContext<'a> {
    /// The forward op.
    pub op: &'a Op,
    graph: &'a crate::Graph,
}

impl<'a> GradContext<'a> {
    /// The context of `op`, an op of `graph`.
    pub fn new(op: &'a Op, graph: &'a crate::Graph) -> Self {
        GradContext { op, graph }
    }

    /// The shape of the forward input `index`, if connected.
    pub fn input_shape(&self, index: u32) -> Option<Vec<i64>> {
        self.shape_of(self.op.input(index)?)
    }

    /// The shape of the forward output `index`, if connected.
    pub fn output_shape(&self, index: u32) -> Option<Vec<i64>> {
        self.shape_of(self.op.output(index)?)
    }

    fn shape_of(&self, t: crate::TensorId) -> Option<Vec<i64>> {
        Some(self.graph.tensor(t).ok()?.info.shape.iter().map(|&d| d as i64).collect())
    }
}

/// How an op type is differentiated.
#[derive(Clone, Debug, PartialEq)]
pub enum GradRule {
    /// Not differentiable: an error if a required gradient flows through it.
    None,
    /// Gradient is zero everywhere (sign, floor, comparisons...).
    Zero,
    /// Stops gradients by design (detach): gradients of the inputs are absent, not an error.
    Stop,
    /// Gradient ops to create.
    Ops(Vec<GradOpSpec>),
    /// A subgraph op (call, repeat, if): autodiff differentiates the called graphs itself.
    Subgraph,
}

/// What shape inference sees: the op's inputs, attributes and the IR (for called graphs).
///
/// The context records which inputs inference reads; a connected input that it
/// never reads (a third input of `Add`, say) is an error naming the op, so that
/// no op silently ignores a tensor it was given.
pub struct InferContext<'a> {
    pub(crate) op_name: &'a str,
    pub(crate) op_type: &'static str,
    pub(crate) inputs: &'a [(u32, TensorInfo)],
    /// The op's attributes.
    pub attrs: &'a Attributes,
    /// The IR, to read the signatures of called graphs.
    pub ir: &'a Ir,
    /// Positions in `inputs` read so far (bit k: `inputs[k]`); all of them once
    /// [`InferContext::inputs`] has been called.
    read: std::cell::Cell<u128>,
    read_all: std::cell::Cell<bool>,
}

/// Run `def`'s shape inference on `inputs` (sorted by index) and check that it
/// read every connected input.
pub(crate) fn run_infer(
    def: &dyn OpDef,
    op_name: &str,
    inputs: &[(u32, TensorInfo)],
    attrs: &Attributes,
    ir: &Ir,
) -> Result<Vec<TensorInfo>> {
    check_attributes(def, op_name, attrs)?;
    let ctx = InferContext {
        op_name,
        op_type: def.op_type(),
        inputs,
        attrs,
        ir,
        read: std::cell::Cell::new(0),
        read_all: std::cell::Cell::new(false),
    };
    // Which graphs an op calls is read off its graph-valued attributes (the
    // recursion check, call sites, lowering): only subgraph ops may have them.
    if let Some((key, _)) = attrs.iter().find(|(_, v)| matches!(v, crate::AttrValue::Graph(_))) {
        if !def.flags(attrs).contains(OpFlags::SUBGRAPH) {
            return Err(ctx.error(format!("graph attribute `{key}` on an op that calls no graph")));
        }
    }
    let out = def.infer(&ctx)?;
    if !ctx.read_all.get() {
        let read = ctx.read.get();
        if let Some((k, (i, _))) = inputs.iter().enumerate().find(|(k, _)| *k >= 128 || read & (1u128 << k) == 0) {
            let what = if k >= 128 { "too many inputs" } else { "unexpected input" };
            return Err(ctx.error(format!("{what} at index {i} (this op type does not use it)")));
        }
    }
    Ok(out)
}

/// Check `attrs` against `def`'s declared attributes ([`OpDef::attributes`]):
/// unknown keys, wrong kinds and missing required keys are
/// [`IrError::Attribute`] errors naming the op and the attribute.
pub fn check_attributes(def: &dyn OpDef, op_name: &str, attrs: &Attributes) -> Result<()> {
    crate::attr::check_schema(def.attributes(), attrs).map_err(|error| IrError::Attribute {
        op: op_name.to_string(),
        op_type: def.op_type().to_string(),
        error: Box::new(error),
    })
}

impl<'a> InferContext<'a> {
    /// An attribute error of this op ([`IrError::Attribute`]).
    pub fn attr_error(&self, error: crate::AttrError) -> IrError {
        IrError::Attribute { op: self.op_name.to_string(), op_type: self.op_type.to_string(), error: Box::new(error) }
    }

    /// Number of connected inputs.
    pub fn num_inputs(&self) -> usize {
        self.inputs.len()
    }

    /// The info of input `index`, or an error naming the op if it is not connected.
    pub fn input(&self, index: u32) -> Result<&'a TensorInfo> {
        self.optional_input(index).ok_or_else(|| self.error(format!("missing input at index {index}")))
    }

    /// The info of input `index` if connected.
    pub fn optional_input(&self, index: u32) -> Option<&'a TensorInfo> {
        // Sorted by index (both `Ir::infer_outputs` and the verifier sort them).
        let k = self.inputs.binary_search_by_key(&index, |(i, _)| *i).ok()?;
        if k < 128 {
            self.read.set(self.read.get() | (1u128 << k));
        }
        self.inputs.get(k).map(|(_, info)| info)
    }

    /// Every connected input, by index (variadic ops: inference that calls this
    /// takes responsibility for every input).
    pub fn inputs(&self) -> &'a [(u32, TensorInfo)] {
        self.read_all.set(true);
        self.inputs
    }

    /// An inference error naming this op.
    pub fn error(&self, message: impl Into<String>) -> IrError {
        IrError::Inference { op: self.op_name.to_string(), op_type: self.op_type.to_string(), message: message.into() }
    }
}

/// The behaviour of an op type: shape inference, properties and the gradient rule.
/// Lowering rules live in `popart-lower` and kernels in the device crates, keyed by
/// [`OpDef::op_type`].
///
/// Builtin op types are registered by the crate; a custom op implements this trait
/// on a (usually zero-sized) type and registers a `&'static` instance with
/// [`register_op`], without editing this crate:
///
/// ```
/// use popart_ir::{register_op, InferContext, OpDef, Result, TensorInfo, Ir, Attributes};
/// struct Twice;
/// impl OpDef for Twice {
///     fn op_type(&self) -> &'static str { "example.Twice" }
///     fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
///         Ok(vec![ctx.input(0)?.clone()])
///     }
/// }
/// static TWICE: Twice = Twice;
/// register_op(&TWICE).unwrap();
/// let mut ir = Ir::new();
/// let main = ir.main_graph_id();
/// let x = ir.graph_mut(main).unwrap().add_input("x", TensorInfo::new(popart_ir::DataType::Float32, [3])).unwrap();
/// let op = ir.create_op(main, "example.Twice", Attributes::new(), &[(0, x)], "twice").unwrap();
/// assert_eq!(ir.graph(main).unwrap().op(op).unwrap().op_type(), "example.Twice");
/// ```
pub trait OpDef: AsAny + Send + Sync + 'static {
    /// The type name, unique across the registry (`Add`, `MatMul`, `Call`...).
    fn op_type(&self) -> &'static str;

    /// Output infos for outputs 0..n, from the inputs and attributes. Errors name the op.
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>>;

    /// The attributes an op of this type may carry (name, kind, required): every
    /// op is checked against it when created, parsed or verified, so an unknown
    /// key or a value of the wrong kind is an [`IrError::Attribute`]. Declare it
    /// with [`op_attrs!`](crate::op_attrs) and return `XAttrs::SCHEMA`
    /// ([`crate::OpAttrs::SCHEMA`]). Default: no attributes.
    fn attributes(&self) -> &'static [crate::AttrSpec] {
        &[]
    }

    /// The property flags that are not alias facts (side effect, subgraph, host
    /// IO, random). [`OpFlags::ALIAS_FACTS`] returned here are ignored: they
    /// are derived from [`OpDef::aliases`] by `<dyn OpDef>::flags`.
    fn properties(&self, _attrs: &Attributes) -> OpFlags {
        OpFlags::empty()
    }

    /// The in-place and view behaviour of an op of this type, declared once:
    /// which inputs it writes, which outputs are an input's memory and which
    /// hold an input's bytes ([`Alias`]). `<dyn OpDef>::flags`,
    /// `<dyn OpDef>::modified_inputs` and `<dyn OpDef>::alias_pairs` derive
    /// from it. Default: none.
    ///
    /// ```
    /// use popart_ir::{Alias, Attributes, InferContext, OpDef, OpFlags, Result, TensorInfo};
    /// /// `x += 1` in place.
    /// struct Bump;
    /// impl OpDef for Bump {
    ///     fn op_type(&self) -> &'static str { "example.Bump" }
    ///     fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
    ///         Ok(vec![ctx.input(0)?.clone()])
    ///     }
    ///     fn aliases(&self, _: &Attributes) -> Vec<Alias> {
    ///         vec![Alias::modified(0, 0)]
    ///     }
    /// }
    /// let def: &dyn OpDef = &Bump;
    /// let attrs = Attributes::new();
    /// assert_eq!(def.flags(&attrs), OpFlags::MODIFIES_INPUTS | OpFlags::INPLACE);
    /// assert_eq!(def.modified_inputs(&attrs), vec![0]);
    /// assert_eq!(def.alias_pairs(&attrs), vec![(0, 0)]);
    /// ```
    fn aliases(&self, _attrs: &Attributes) -> Vec<Alias> {
        Vec::new()
    }

    /// FLOP and bytes of one execution, from the argument infos and the
    /// attributes, and the engine doing the arithmetic: read by the IPU
    /// model's timeline and counters and by model FLOP counts. Default: the
    /// vector estimate, one FLOP per element of the largest argument
    /// ([`CostContext::elementwise`]); matmuls and convolutions count their
    /// multiply-adds on the matrix engine.
    fn cost(&self, ctx: &crate::CostContext<'_>) -> crate::OpCost {
        ctx.elementwise()
    }

    /// How to differentiate an op of this type: the gradient ops, with
    /// typed attributes built from the forward op's ([`GradContext`]).
    fn grad(&self, _cx: &GradContext<'_>) -> GradRule {
        GradRule::None
    }

    /// For an op type that moves tensors between IPUs (`IpuCopy`): the IPU its
    /// inputs are on and the IPU its outputs are written on, from its
    /// attributes. `None` (the default, and for malformed attributes, which
    /// inference refuses): inputs and outputs are on the op's own IPU, its
    /// [`crate::Placement`]. See [`Op::input_ipu`] and [`Op::output_ipu`].
    fn ipu_route(&self, _attrs: &Attributes) -> Option<crate::IpuRoute> {
        None
    }
}

/// The Rust type behind a definition, as [`std::any::Any`]: a supertrait of
/// [`OpDef`] with one blanket implementation for every type, so no op type can
/// implement it itself or claim another type's identity. [`OpDefId`] and
/// `<dyn OpDef>::downcast_ref` rest on it (no `unsafe`).
///
/// A definition that tries to implement it, or to provide an identity hook, does
/// not compile:
///
/// ```compile_fail,E0119
/// use popart_ir::{AsAny, InferContext, OpDef, Result, TensorInfo};
/// struct Fake;
/// impl AsAny for Fake {
///     fn as_any(&self) -> &dyn std::any::Any { &popart_ir::ops::all::Relu }
/// }
/// ```
///
/// ```compile_fail,E0407
/// use popart_ir::{InferContext, OpDef, Result, TensorInfo};
/// struct Fake;
/// impl OpDef for Fake {
///     fn op_type(&self) -> &'static str { "example.Fake" }
///     fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> { Ok(vec![ctx.input(0)?.clone()]) }
///     fn def_type_id(&self) -> std::any::TypeId { std::any::TypeId::of::<popart_ir::ops::all::Relu>() }
/// }
/// ```
pub trait AsAny: std::any::Any {
    /// `self` as `&dyn Any` (its concrete type).
    fn as_any(&self) -> &dyn std::any::Any;
}

impl<T: std::any::Any> AsAny for T {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// The identity of an op type: the Rust type of its [`OpDef`]. Passes, lowering
/// and kernel registries compare and key op types by this id, never by name.
/// [`register_op`] guarantees one Rust type names exactly one op type.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpDefId(std::any::TypeId);

impl OpDefId {
    /// The id of the op type defined by `T`.
    pub fn of<T: OpDef>() -> OpDefId {
        OpDefId(std::any::TypeId::of::<T>())
    }
}

impl fmt::Debug for OpDefId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OpDefId({:?})", self.0)
    }
}

impl dyn OpDef {
    /// Property flags: [`OpDef::properties`] and the alias facts derived from
    /// [`OpDef::aliases`] ([`OpFlags::ALIAS_FACTS`]).
    pub fn flags(&self, attrs: &Attributes) -> OpFlags {
        let mut flags = self.properties(attrs).difference(OpFlags::ALIAS_FACTS);
        for a in self.aliases(attrs) {
            match a.kind {
                AliasKind::Modified => flags |= OpFlags::MODIFIES_INPUTS,
                AliasKind::Identical | AliasKind::Copy if a.input == 0 && a.output == Some(0) => flags |= OpFlags::VIEW,
                _ => {}
            }
            if a.memory_pair().is_some() {
                flags |= OpFlags::INPLACE;
            }
        }
        flags
    }

    /// Indices of the inputs written in place ([`AliasKind::Modified`] entries
    /// of [`OpDef::aliases`], in declaration order).
    pub fn modified_inputs(&self, attrs: &Attributes) -> Vec<u32> {
        self.aliases(attrs).into_iter().filter(|a| a.kind == AliasKind::Modified).map(|a| a.input).collect()
    }

    /// (input, output) pairs where the output is the input's memory (in-place
    /// updates and views; [`Alias::memory_pair`]): the alias model's edges.
    pub fn alias_pairs(&self, attrs: &Attributes) -> Vec<(u32, u32)> {
        self.aliases(attrs).iter().filter_map(Alias::memory_pair).collect()
    }

    /// This definition's identity.
    pub fn id(&self) -> OpDefId {
        OpDefId(<dyn OpDef as AsAny>::as_any(self).type_id())
    }

    /// True if this is the definition of type `T` (`def.is::<ops::control::Call>()`).
    pub fn is<T: OpDef>(&self) -> bool {
        <dyn OpDef as AsAny>::as_any(self).is::<T>()
    }

    /// This definition as a `T`, to read the fields of a definition that has some.
    pub fn downcast_ref<T: OpDef>(&self) -> Option<&T> {
        <dyn OpDef as AsAny>::as_any(self).downcast_ref::<T>()
    }
}

/// Definitions are equal when they define the same op type.
impl PartialEq for dyn OpDef {
    fn eq(&self, other: &Self) -> bool {
        self.id() == other.id()
    }
}

impl Eq for dyn OpDef {}

impl fmt::Debug for dyn OpDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OpDef({})", self.op_type())
    }
}

/// The op registry: names to definitions (for the text parser and creation by
/// name) and identities to names (one Rust type defines one op type).
#[derive(Default)]
struct Registry {
    by_name: FxHashMap<&'static str, &'static dyn OpDef>,
    names: FxHashMap<OpDefId, &'static str>,
}

fn registry() -> &'static RwLock<Registry> {
    static REGISTRY: OnceLock<RwLock<Registry>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut r = Registry::default();
        for def in crate::ops::builtin_ops() {
            r.by_name.insert(def.op_type(), *def);
            r.names.insert(def.id(), def.op_type());
        }
        RwLock::new(r)
    })
}

/// Register an op type so that it can be created by name and parsed from the text form.
/// Registering the same definition twice is allowed; a different definition under a
/// taken name, or the same Rust type under a second name, is an error.
pub fn register_op(def: &'static dyn OpDef) -> Result<()> {
    let mut r = registry().write().unwrap_or_else(|e| e.into_inner());
    // Compare types, not addresses: zero-sized definitions may share an address.
    if let Some(existing) = r.by_name.get(def.op_type()) {
        if existing.id() != def.id() {
            return Err(IrError::DuplicateOpType(def.op_type().to_string()));
        }
    }
    if let Some(name) = r.names.get(&def.id()) {
        if *name != def.op_type() {
            return Err(IrError::DuplicateOpType(format!(
                "{} (its definition type is already registered as `{name}`)",
                def.op_type()
            )));
        }
    }
    r.by_name.insert(def.op_type(), def);
    r.names.insert(def.id(), def.op_type());
    Ok(())
}

/// The registered definition of an op type.
pub fn lookup_op(op_type: &str) -> Result<&'static dyn OpDef> {
    registry()
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .by_name
        .get(op_type)
        .copied()
        .ok_or_else(|| IrError::UnknownOpType(op_type.to_string()))
}

/// Every registered op type name, sorted.
pub fn registered_op_types() -> Vec<&'static str> {
    let mut v: Vec<_> = registry().read().unwrap_or_else(|e| e.into_inner()).by_name.keys().copied().collect();
    v.sort_unstable();
    v
}

/// Every registered definition, sorted by name.
pub fn registered_ops() -> Vec<&'static dyn OpDef> {
    let r = registry().read().unwrap_or_else(|e| e.into_inner());
    let mut v: Vec<_> = r.by_name.values().copied().collect();
    v.sort_unstable_by_key(|d| d.op_type());
    v
}

/// An op type given to [`Ir::create_op`](crate::Ir::create_op): a definition
/// (`&ops::unary::Relu`, the way passes name op types) or a registered name
/// (`"Relu"`, as the text form and tests do).
pub trait OpTypeRef {
    /// The definition, looked up in the registry if given by name.
    fn resolve(self) -> Result<&'static dyn OpDef>;
}

impl OpTypeRef for &str {
    fn resolve(self) -> Result<&'static dyn OpDef> {
        lookup_op(self)
    }
}

impl OpTypeRef for &String {
    fn resolve(self) -> Result<&'static dyn OpDef> {
        lookup_op(self)
    }
}

impl OpTypeRef for &'static dyn OpDef {
    fn resolve(self) -> Result<&'static dyn OpDef> {
        Ok(self)
    }
}

impl<T: OpDef> OpTypeRef for &'static T {
    fn resolve(self) -> Result<&'static dyn OpDef> {
        Ok(self)
    }
}

/// Storage of a [`TensorIndexMap`]: up to two entries inline (most ops have one or
/// two inputs and one output), more on the heap.
#[derive(Clone)]
enum Entries {
    Inline { len: u8, items: [(u32, TensorId); 2] },
    Heap(Vec<(u32, TensorId)>),
}

impl Default for Entries {
    fn default() -> Self {
        Entries::Inline { len: 0, items: [(0, TensorId::default()); 2] }
    }
}

impl Entries {
    fn as_slice(&self) -> &[(u32, TensorId)] {
        match self {
            Entries::Inline { len, items } => &items[..*len as usize],
            Entries::Heap(v) => v,
        }
    }

    fn spill(&mut self, capacity: usize) -> &mut Vec<(u32, TensorId)> {
        if let Entries::Inline { len, items } = self {
            let mut v = Vec::with_capacity(capacity.max(*len as usize));
            v.extend_from_slice(&items[..*len as usize]);
            *self = Entries::Heap(v);
        }
        match self {
            Entries::Heap(v) => v,
            Entries::Inline { .. } => unreachable!("spilled above"),
        }
    }

    fn reserve_exact(&mut self, additional: usize) {
        match self {
            Entries::Inline { len, .. } if *len as usize + additional <= 2 => {}
            Entries::Inline { len, .. } => {
                let n = *len as usize + additional;
                self.spill(n);
            }
            Entries::Heap(v) => v.reserve_exact(additional),
        }
    }

    fn insert(&mut self, pos: usize, e: (u32, TensorId)) {
        match self {
            Entries::Inline { len, items } if (*len as usize) < 2 => {
                let n = *len as usize;
                items.copy_within(pos..n, pos + 1);
                items[pos] = e;
                *len += 1;
            }
            _ => {
                let n = self.as_slice().len();
                self.spill(n + 1).insert(pos, e);
            }
        }
    }

    fn remove(&mut self, pos: usize) -> (u32, TensorId) {
        match self {
            Entries::Inline { len, items } => {
                let e = items[pos];
                items.copy_within(pos + 1..*len as usize, pos);
                *len -= 1;
                e
            }
            Entries::Heap(v) => v.remove(pos),
        }
    }
}

impl PartialEq for Entries {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Entries {}

impl fmt::Debug for Entries {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

/// A map from index to tensor, for an op's inputs or outputs. Indices need not
/// start at 0 nor be contiguous; kept sorted by index.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TensorIndexMap {
    entries: Entries,
}

impl TensorIndexMap {
    /// The tensor at `index`.
    pub fn get(&self, index: u32) -> Option<TensorId> {
        let entries = self.entries.as_slice();
        entries.binary_search_by_key(&index, |(i, _)| *i).ok().map(|k| entries[k].1)
    }

    /// True if `index` is connected.
    pub fn contains(&self, index: u32) -> bool {
        self.get(index).is_some()
    }

    /// (index, tensor) pairs in index order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, TensorId)> + '_ {
        self.entries.as_slice().iter().copied()
    }

    /// Tensors in index order.
    pub fn tensors(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.entries.as_slice().iter().map(|(_, t)| *t)
    }

    /// Indices at which `tensor` is connected.
    pub fn indices_of(&self, tensor: TensorId) -> impl Iterator<Item = u32> + '_ {
        self.entries.as_slice().iter().filter(move |(_, t)| *t == tensor).map(|(i, _)| *i)
    }

    /// Number of connected indices.
    pub fn len(&self) -> usize {
        self.entries.as_slice().len()
    }

    /// True when nothing is connected.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Largest index + 1 (0 when empty); a `u64`, since an index may be `u32::MAX`.
    pub fn end(&self) -> u64 {
        self.entries.as_slice().last().map_or(0, |(i, _)| u64::from(*i) + 1)
    }

    pub(crate) fn reserve_exact(&mut self, additional: usize) {
        self.entries.reserve_exact(additional);
    }

    pub(crate) fn insert(&mut self, index: u32, tensor: TensorId) -> bool {
        let slice = self.entries.as_slice();
        let pos = if slice.last().is_none_or(|(i, _)| *i < index) {
            slice.len()
        } else {
            match slice.binary_search_by_key(&index, |(i, _)| *i) {
                Ok(_) => return false,
                Err(pos) => pos,
            }
        };
        self.entries.insert(pos, (index, tensor));
        true
    }

    pub(crate) fn remove(&mut self, index: u32) -> Option<TensorId> {
        let pos = self.entries.as_slice().binary_search_by_key(&index, |(i, _)| *i).ok()?;
        Some(self.entries.remove(pos).1)
    }

    /// Put `tensor` at the connected `index` in place; returns the tensor that was there.
    pub(crate) fn replace(&mut self, index: u32, tensor: TensorId) -> Option<TensorId> {
        let pos = self.entries.as_slice().binary_search_by_key(&index, |(i, _)| *i).ok()?;
        let slot = match &mut self.entries {
            Entries::Inline { items, .. } => &mut items[pos],
            Entries::Heap(v) => &mut v[pos],
        };
        Some(std::mem::replace(&mut slot.1, tensor))
    }

    /// Remove the entries whose index `drop` accepts and renumber the others 0..n in
    /// index order, in one pass. Returns the removed entries.
    pub(crate) fn remove_and_renumber(&mut self, mut drop: impl FnMut(u32) -> bool) -> Vec<(u32, TensorId)> {
        let mut removed = Vec::new();
        let mut kept = Vec::with_capacity(self.len());
        for (i, t) in self.iter() {
            if drop(i) {
                removed.push((i, t));
            } else {
                kept.push((kept.len() as u32, t));
            }
        }
        self.entries = Entries::default();
        self.entries.reserve_exact(kept.len());
        for (k, e) in kept.into_iter().enumerate() {
            self.entries.insert(k, e);
        }
        removed
    }
}

/// An op of a graph: its type, name, attributes and connections.
#[derive(Clone, Debug)]
pub struct Op {
    /// Id within its graph.
    pub id: OpId,
    /// Name, unique within the graph.
    pub name: String,
    pub(crate) def: &'static dyn OpDef,
    /// Attributes (axes, scalars, called graphs...).
    pub attrs: Attributes,
    pub(crate) inputs: TensorIndexMap,
    pub(crate) outputs: TensorIndexMap,
    /// Creation sequence number within the graph: the scheduler's final tie-break.
    pub(crate) seq: u64,
    /// Where the op runs (an annotation; see [`crate::Placement`]).
    pub placement: crate::Placement,
}

impl Op {
    /// The op type name.
    pub fn op_type(&self) -> &'static str {
        self.def.op_type()
    }

    /// The op type's definition.
    pub fn def(&self) -> &'static dyn OpDef {
        self.def
    }

    /// The op type's identity.
    pub fn def_id(&self) -> OpDefId {
        self.def.id()
    }

    /// True if this op is of the type defined by `T` (`op.is::<ops::control::Call>()`).
    pub fn is<T: OpDef>(&self) -> bool {
        self.def.is::<T>()
    }

    /// Input index map.
    pub fn inputs(&self) -> &TensorIndexMap {
        &self.inputs
    }

    /// Output index map.
    pub fn outputs(&self) -> &TensorIndexMap {
        &self.outputs
    }

    /// The input tensor at `index`.
    pub fn input(&self, index: u32) -> Option<TensorId> {
        self.inputs.get(index)
    }

    /// The output tensor at `index`.
    pub fn output(&self, index: u32) -> Option<TensorId> {
        self.outputs.get(index)
    }

    /// Property flags of this op.
    pub fn flags(&self) -> OpFlags {
        self.def.flags(&self.attrs)
    }

    /// Graphs called by this op (its graph-valued attributes).
    pub fn called_graphs(&self) -> Vec<GraphId> {
        self.attrs.graphs().collect()
    }

    /// Input indices written in place.
    pub fn modified_inputs(&self) -> Vec<u32> {
        self.def.modified_inputs(&self.attrs)
    }

    /// The in-place and view declaration of this op ([`OpDef::aliases`]).
    pub fn aliases(&self) -> Vec<Alias> {
        self.def.aliases(&self.attrs)
    }

    /// (input, output) pairs where the output is the input's memory.
    pub fn alias_pairs(&self) -> Vec<(u32, u32)> {
        self.def.alias_pairs(&self.attrs)
    }

    /// Creation sequence number within the graph.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The IPU this op reads its inputs on: an `IpuCopy`'s source
    /// ([`OpDef::ipu_route`]), else its placement's IPU (PopART's
    /// `getIntrospectionInVirtualGraphId`).
    pub fn input_ipu(&self) -> Option<u32> {
        self.def.ipu_route(&self.attrs).map(|r| r.source).or(self.placement.ipu)
    }

    /// The IPU this op writes its outputs on: an `IpuCopy`'s destination
    /// ([`OpDef::ipu_route`]), else its placement's IPU (PopART's
    /// `getIntrospectionOutVirtualGraphId`).
    ///
    /// ```
    /// use popart_ir::{AttrValue, Attributes, DataType, Ir, TensorInfo};
    /// let mut ir = Ir::new();
    /// let main = ir.main_graph_id();
    /// let x = ir.main_graph_mut().add_input("x", TensorInfo::new(DataType::Float32, [2])).unwrap();
    /// let attrs = Attributes::new().with("source", AttrValue::Int(0)).with("destination", AttrValue::Int(1));
    /// let copy = ir.create_op(main, "IpuCopy", attrs, &[(0, x)], "copy").unwrap();
    /// let op = ir.main_graph().op(copy).unwrap();
    /// assert_eq!((op.input_ipu(), op.output_ipu()), (Some(0), Some(1)));
    /// ```
    pub fn output_ipu(&self) -> Option<u32> {
        self.def.ipu_route(&self.attrs).map(|r| r.destination).or(self.placement.ipu)
    }
}
