//! The crate's error type: every build-time mistake, with the names involved.

use popart_ir::{DataType, HostDataError, IrError, SizeError};

use crate::TensorSpec;

/// Everything that can go wrong while building an IR with `popxl`.
///
/// Each variant names the graphs, tensors and values involved, so the message
/// alone says what to fix.
///
/// ```
/// use popxl::{Ir, PopXlError};
/// let ir = Ir::new();
/// let sub = ir.create_empty_graph("sub").unwrap();
/// let _g = sub.enter();
/// // Variables live in the main graph only.
/// let err = popxl::variable(1.0f32, "w").unwrap_err();
/// assert!(matches!(err, PopXlError::VariableInSubgraph { .. }));
/// assert_eq!(err.to_string(), "variable `w` cannot be created in subgraph `sub`: variables live in the main graph");
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PopXlError {
    /// An error reported by the IR core (shape inference, duplicate names...).
    #[error(transparent)]
    Ir(#[from] IrError),
    /// An invalid replica grouping, or one used where it cannot be.
    #[error(transparent)]
    ReplicaGrouping(#[from] popart_ir::ReplicaGroupingError),
    /// A graph given to `repeat` whose loop-carried input (one that takes an
    /// output of the previous iteration) is passed by reference.
    #[error(
        "input {input} of graph `{graph}` is passed by reference but is loop-carried in repeat (it takes output {input} of the previous iteration); pass it by value"
    )]
    ByRefInRepeat {
        /// The graph.
        graph: String,
        /// The input's position.
        input: i64,
    },
    /// A tensor's placement was read but never set (PopXL's `UndefinedValue`):
    /// `Tensor::ipu` of a tensor made outside any `ipu(n)` context, or
    /// `Tensor::tile_set` of a tensor no op produces or consumes.
    #[error("the {what} of tensor `{tensor}` is undefined: {reason}")]
    UndefinedValue {
        /// `IPU` or `tile set`.
        what: String,
        /// The tensor.
        tensor: String,
        /// Why.
        reason: String,
    },
    /// `ipu_copy` without a `source` of a tensor whose IPU cannot be inferred
    /// (PopXL's `ValueError`): no op placed on an IPU produces or consumes it.
    #[error(
        "Could not infer the ipu for tensor `{tensor}` to be copied. Please specify `source` when copying this tensor"
    )]
    IpuCopySourceUnknown {
        /// The tensor.
        tensor: String,
    },
    /// A matrix operation (`Tensor::diag`) on a tensor that is not 2-D (PopXL's
    /// `ValueError`, whose phrase the message starts with).
    #[error("{what} expected a 2d tensor. `{tensor}` has rank {rank}")]
    NotAMatrix {
        /// The operation.
        what: String,
        /// The tensor.
        tensor: String,
        /// Its rank.
        rank: usize,
    },
    /// Two inputs of an op on different IPUs or tile sets (PopXL's
    /// `check_tensor_ipu_and_tile_set`, a `ValueError`); copy one first
    /// (`ipu_copy`, `io_tile_copy`).
    #[error("{what}: the input tensors `{first}` and `{second}` are located on different {kind}: {places}")]
    PlacementMismatch {
        /// The popxl function.
        what: String,
        /// `IPUs` or `tile sets`.
        kind: &'static str,
        /// The first input with a known placement.
        first: String,
        /// The input that differs.
        second: String,
        /// Where they are: `<first's> != <second's>`.
        places: String,
    },
    /// A graph (or its context) was used after its [`crate::Ir`] was dropped.
    #[error("graph `{graph}` is no longer usable: its IR has been dropped")]
    IrDropped {
        /// Name of the graph whose IR is gone.
        graph: String,
    },
    /// The IR was handed to a session and can no longer be changed.
    #[error("the IR is frozen (a session owns it); {what} is not allowed any more")]
    IrFrozen {
        /// What was attempted.
        what: String,
    },
    /// An operation that needs a current graph was called outside any graph context.
    #[error("`{what}` needs a current graph: enter one first (`let _g = ir.main_graph().enter();`)")]
    NoGraphContext {
        /// The operation attempted.
        what: String,
    },
    /// A tensor used in a graph it does not belong to.
    #[error("tensor `{tensor}` belongs to graph `{tensor_graph}` and cannot be used by `{what}` in graph `{graph}`")]
    TensorNotInGraph {
        /// The tensor.
        tensor: String,
        /// The graph that owns the tensor.
        tensor_graph: String,
        /// The graph being built.
        graph: String,
        /// The operation attempted.
        what: String,
    },
    /// A tensor or graph of another IR.
    #[error("`{name}` belongs to another IR and cannot be used by `{what}` here")]
    ForeignIr {
        /// Name of the tensor or graph.
        name: String,
        /// The operation attempted.
        what: String,
    },
    /// `variable` called while a subgraph is the current graph.
    #[error("variable `{name}` cannot be created in subgraph `{graph}`: variables live in the main graph")]
    VariableInSubgraph {
        /// Requested variable name.
        name: String,
        /// The current (sub)graph.
        graph: String,
    },
    /// `graph_input` called while the main graph is the current graph.
    #[error("graph input `{name}` cannot be added to the main graph; create a subgraph with `create_graph`")]
    GraphInputInMainGraph {
        /// Requested input name.
        name: String,
    },
    /// A call-like op was not given every input of the called graph.
    #[error("Not enough inputs have been provided for the graph `{graph}`: call of graph `{graph}` is missing inputs [{}]", missing.join(", "))]
    MissingCallInputs {
        /// Called graph.
        graph: String,
        /// Names of the graph inputs that received no tensor.
        missing: Vec<String>,
    },
    /// More positional inputs than the called graph has.
    #[error("Too many inputs have been provided to the graph `{graph}`: it has {expected} inputs but {given} positional inputs were given (extra: [{}])", extra.join(", "))]
    TooManyCallInputs {
        /// Called graph.
        graph: String,
        /// Number of graph inputs.
        expected: usize,
        /// Number of positional inputs given.
        given: usize,
        /// Names of the extra parent tensors.
        extra: Vec<String>,
    },
    /// A graph input given twice (positionally and in `inputs_dict`, or twice in `inputs_dict`).
    #[error("input `{input}` of graph `{graph}` is given more than once")]
    DuplicateCallInput {
        /// Called graph.
        graph: String,
        /// The graph input given twice.
        input: String,
    },
    /// An `inputs_dict` key that is not an input of the called graph.
    #[error(
        "The graph input tensor `{tensor}` is not in the called graph `{graph}`: it belongs to graph `{tensor_graph}`"
    )]
    NotAGraphInput {
        /// The key tensor.
        tensor: String,
        /// The graph that owns it.
        tensor_graph: String,
        /// The called graph.
        graph: String,
    },
    /// A parent tensor whose shape or type does not match the graph input it feeds.
    #[error("input `{input}` of graph `{graph}` is {expected} but parent tensor `{parent}` is {got}")]
    CallInputMismatch {
        /// Called graph.
        graph: String,
        /// Graph input name.
        input: String,
        /// Graph input spec.
        expected: Box<TensorSpec>,
        /// Parent tensor name.
        parent: String,
        /// Parent tensor spec.
        got: Box<TensorSpec>,
    },
    /// A graph calling itself.
    #[error("graph `{graph}` cannot call itself")]
    RecursiveCall {
        /// The graph.
        graph: String,
    },
    /// `repeat` with a count of 0.
    #[error("repeat of graph `{graph}`: the repeat count must be greater than 0")]
    RepeatCountZero {
        /// Called graph.
        graph: String,
    },
    /// `repeat` with a count that does not fit the IR's trip count (an `i64`).
    #[error("repeat of graph `{graph}`: the repeat count {count} does not fit the IR's 64-bit signed trip count")]
    RepeatCountTooLarge {
        /// Called graph.
        graph: String,
        /// The count given.
        count: usize,
    },
    /// `repeat` of a graph with more outputs than inputs.
    #[error("repeat of graph `{graph}`: it has {outputs} outputs but only {inputs} inputs; repeat needs at least as many inputs as outputs")]
    RepeatFewerInputsThanOutputs {
        /// Called graph.
        graph: String,
        /// Number of graph inputs.
        inputs: usize,
        /// Number of graph outputs.
        outputs: usize,
    },
    /// `repeat` of a graph whose output k does not match its input k.
    #[error("repeat of graph `{graph}`: output {index} is {output} but input {index} is {input}; loop-carried values must match")]
    RepeatCarriedMismatch {
        /// Called graph.
        graph: String,
        /// Index of the loop-carried pair.
        index: usize,
        /// Graph input spec.
        input: TensorSpec,
        /// Graph output spec.
        output: TensorSpec,
    },
    /// The branches of a conditional produce different outputs.
    #[error("conditional: branches `{then_graph}` and `{else_graph}` have different outputs ([{then_outputs}] vs [{else_outputs}])")]
    BranchOutputsMismatch {
        /// Then branch.
        then_graph: String,
        /// Else branch.
        else_graph: String,
        /// Then outputs, printed.
        then_outputs: String,
        /// Else outputs, printed.
        else_outputs: String,
    },
    /// `host_store` of a tensor whose shape differs from the stream's.
    #[error(
        "host_store: tensor `{tensor}` has shape {tensor_shape:?} but stream `{stream}` has shape {stream_shape:?}"
    )]
    HostStoreShapeMismatch {
        /// Stream name.
        stream: String,
        /// Stream shape.
        stream_shape: Vec<usize>,
        /// Tensor name.
        tensor: String,
        /// Tensor shape.
        tensor_shape: Vec<usize>,
    },
    /// `host_store` of a tensor whose data type differs from the stream's.
    #[error("host_store: tensor `{tensor}` is {tensor_dtype} but stream `{stream}` is {stream_dtype}")]
    HostStoreDtypeMismatch {
        /// Stream name.
        stream: String,
        /// Stream data type.
        stream_dtype: DataType,
        /// Tensor name.
        tensor: String,
        /// Tensor data type.
        tensor_dtype: DataType,
    },
    /// A graph function called with a different number of arguments than it takes.
    #[error("graph function `{graph}` takes {expected} arguments but {given} were given")]
    ArgumentCountMismatch {
        /// The graph being created.
        graph: String,
        /// Arguments the function takes.
        expected: usize,
        /// Arguments given to `create_graph`.
        given: usize,
    },
    /// A graph function returned a tensor of another graph.
    #[error("graph function `{graph}` returned tensor `{tensor}` of graph `{tensor_graph}`; outputs must be tensors of the graph being built")]
    OutputNotInGraph {
        /// The graph being created.
        graph: String,
        /// The returned tensor.
        tensor: String,
        /// The graph that owns it.
        tensor_graph: String,
    },
    /// A tensor that is neither an input nor an output of a call site.
    #[error("tensor `{tensor}` is not an input or output of the call of graph `{graph}` by op `{op}`")]
    NotACallSiteTensor {
        /// The tensor.
        tensor: String,
        /// The called graph.
        graph: String,
        /// The call op.
        op: String,
    },
    /// An index past the end of a list.
    #[error("{what} index {index} is out of range (there are {len})")]
    IndexOutOfRange {
        /// What is indexed.
        what: String,
        /// The index.
        index: usize,
        /// The length.
        len: usize,
    },
    /// A user number that does not fit the integer type the IR stores it in
    /// (a dimension, an index or a count above `i64::MAX`, say).
    #[error("{what}: {value} does not fit in {ty}")]
    IntegerOutOfRange {
        /// What the number is, e.g. "dimension 1 of tensor `x`".
        what: String,
        /// The number, printed.
        value: String,
        /// The target type, e.g. "i64".
        ty: &'static str,
    },
    /// A size that overflows or a buffer that cannot be allocated (host data
    /// sized by the user), reported instead of aborting.
    #[error(transparent)]
    Size(#[from] SizeError),
    /// Host data that does not match its declared type and shape (byte length,
    /// bool bytes other than 0 and 1).
    #[error("{what}: {source}")]
    HostData {
        /// Whose data, e.g. "variable `w`".
        what: String,
        /// What is wrong with it.
        source: HostDataError,
    },
    /// A host value that the target data type cannot represent: an integer out
    /// of range, NaN or infinity to an integer, a finite float that would
    /// become infinite.
    #[error("{what}: element {index} ({value}) cannot be represented as {dtype}")]
    HostCast {
        /// Whose data, e.g. "data of variable `w`".
        what: String,
        /// Row-major index of the first offending element.
        index: usize,
        /// The element, printed.
        value: String,
        /// The target data type.
        dtype: DataType,
    },
    /// An axis argument outside the rank of its tensor.
    #[error("{what}: {source}")]
    AxisOutOfRange {
        /// The function and tensor, e.g. "split of tensor `a`".
        what: String,
        /// The axis and the rank.
        source: popart_ir::ops::AxisError,
    },
    /// More per-axis items (indices, strides) than the tensor has axes.
    #[error("{count} {what} for tensor `{tensor}` of rank {rank}")]
    TooManyAxes {
        /// The items, e.g. "subsample strides".
        what: &'static str,
        /// How many were given.
        count: usize,
        /// The tensor.
        tensor: String,
        /// Its rank.
        rank: usize,
    },
    /// A tensor, data or buffer whose shape (or type) does not fit.
    #[error("{what} must be {expected}, got {got}")]
    ShapeMismatch {
        /// The function and argument, e.g. "batch_norm_inference: the input".
        what: String,
        /// The accepted shapes, in words.
        expected: String,
        /// The shape given.
        got: String,
    },
    /// A tensor of a data type the function does not take.
    #[error("{what}: tensor `{tensor}` must be {expected}, not {got}")]
    DTypeMismatch {
        /// The function and argument, e.g. "index of tensor `a`".
        what: String,
        /// The tensor given.
        tensor: String,
        /// The accepted data types, in words.
        expected: &'static str,
        /// Its data type.
        got: DataType,
    },
    /// A size that must be a multiple of another (an equal split, a sharding).
    #[error("{what}: {len} is not a multiple of {divisor}")]
    NotDivisible {
        /// What is divided, e.g. "split of axis 1 of tensor `a` into 4 equal parts".
        what: String,
        /// The size divided.
        len: usize,
        /// The number or size of the parts.
        divisor: usize,
    },
    /// A number outside the values the function accepts.
    #[error("{what} must be {expected}, got {got}")]
    ValueOutOfRange {
        /// The function and argument, e.g. "num_host_transfers".
        what: String,
        /// The accepted values, in words.
        expected: &'static str,
        /// The value given.
        got: String,
    },
    /// A name that is none of the accepted ones.
    #[error("{what} `{got}` is not one of {}", accepted.join(", "))]
    UnknownName {
        /// The function and argument, e.g. "scatter_reduce reduction".
        what: &'static str,
        /// The name given.
        got: String,
        /// The accepted names.
        accepted: Vec<&'static str>,
    },
    /// An empty list where at least one item is needed.
    #[error("{what}: there must be {expected}")]
    EmptyArgument {
        /// The function.
        what: &'static str,
        /// What is needed, e.g. "at least one tensor".
        expected: &'static str,
    },
    /// Two lists of different lengths that must match one to one.
    #[error("{what}: {left} {left_name} but {right} {right_name}")]
    LengthMismatch {
        /// The function.
        what: &'static str,
        /// The length of the first list.
        left: usize,
        /// What it holds, e.g. "tensors".
        left_name: &'static str,
        /// The length of the second list.
        right: usize,
        /// What it holds, e.g. "IPUs".
        right_name: &'static str,
    },
    /// Options that do not go together, or one that another requires.
    #[error("{what}: {reason}")]
    IncompatibleOptions {
        /// The function.
        what: &'static str,
        /// Which options and why, e.g. "r1 and r2 go together".
        reason: &'static str,
    },
    /// A required argument of several alternatives is missing.
    #[error("{what} needs {needs}")]
    MissingArgument {
        /// The function.
        what: &'static str,
        /// The alternatives, e.g. "one of initial_values and axis_size".
        needs: &'static str,
    },
    /// A PopXL option the `cpu` device does not support.
    #[error("{what}: {feature} is not supported")]
    Unsupported {
        /// The function.
        what: &'static str,
        /// The option and value, e.g. "storage_order column".
        feature: &'static str,
    },
    /// A tensor whose value must be known when the op is built (it fixes a shape).
    #[error("{what} `{tensor}` must be a constant {expected} (its value fixes the output shape)")]
    NotConstant {
        /// The function and argument, e.g. "onehot num_classes".
        what: &'static str,
        /// The tensor given.
        tensor: String,
        /// The accepted values, e.g. "integer scalar".
        expected: &'static str,
    },
    /// A tensor that is not a replica-sharded tensor where one is needed.
    #[error("{what}: tensor `{tensor}` has no meta shape (it is not a replica-sharded tensor)")]
    NoMetaShape {
        /// The function.
        what: &'static str,
        /// The tensor.
        tensor: String,
    },
    /// A tensor used as a stream that is not one (of that direction).
    #[error("tensor `{tensor}` is not a {kind} stream")]
    NotAStream {
        /// The tensor.
        tensor: String,
        /// The stream kind, e.g. "h2d_stream".
        kind: &'static str,
    },
    /// An op of another type than the one expected.
    #[error("op `{op}` is a {op_type}, not a {expected}")]
    WrongOpType {
        /// The op's name.
        op: String,
        /// Its type.
        op_type: String,
        /// The type expected.
        expected: &'static str,
    },
    /// A call site that calls another graph than the one given with it.
    #[error("{what} must be a call of graph `{expected}`, but it calls `{got}`")]
    WrongCalledGraph {
        /// The function and argument.
        what: String,
        /// The graph given.
        expected: String,
        /// The graph the call site calls.
        got: String,
    },
    /// A remote buffer entry that already holds a remote variable.
    #[error("remote_variable `{name}`: entry {entry} of remote buffer {buffer} already holds a remote variable")]
    RemoteEntryTaken {
        /// The variable being created.
        name: String,
        /// The remote buffer.
        buffer: String,
        /// The entry.
        entry: usize,
    },
    /// `len()` of a scalar tensor.
    #[error("tensor `{tensor}` is a scalar and doesn't have a length")]
    ScalarHasNoLength {
        /// The tensor.
        tensor: String,
    },
    /// An op-created hook handle that is not (or no longer) registered.
    #[error("no op created hook with handle {handle}")]
    UnknownHook {
        /// The handle given.
        handle: u64,
    },
    /// An op-created hook failed: the op was created, the hook's error is
    /// returned to the function that created it (bindings keep the original
    /// exception aside and raise it instead).
    #[error("an op created hook failed: {message}")]
    OpCreatedHook {
        /// The hook's error.
        message: String,
    },
    /// Memory for host data could not be reserved.
    #[error("{what}: cannot allocate {bytes} bytes")]
    AllocationFailed {
        /// What was being allocated, e.g. "create_seeds: 10 seeds".
        what: String,
        /// The size asked for.
        bytes: usize,
    },
    /// `transforms::autodiff` could not differentiate a graph, or a `GradGraphInfo`
    /// does not fit a call site.
    #[error(transparent)]
    Autodiff(#[from] popart_transforms::autodiff::AutodiffError),
    /// A transform (`merge_exchange`, `decompose_sum`...) failed for another
    /// reason than an IR error (those are [`PopXlError::Ir`]).
    #[error(transparent)]
    Transform(popart_transforms::TransformError),
}

/// IR errors of a transform stay [`PopXlError::Ir`]; the others are
/// [`PopXlError::Transform`].
impl From<popart_transforms::TransformError> for PopXlError {
    fn from(e: popart_transforms::TransformError) -> Self {
        match e {
            popart_transforms::TransformError::Ir(e) => PopXlError::Ir(e),
            e => PopXlError::Transform(e),
        }
    }
}

/// Result alias of this crate.
///
/// ```
/// fn build() -> popxl::Result<()> {
///     let ir = popxl::Ir::new();
///     let _g = ir.main_graph().enter();
///     popxl::variable(1.0f32, "w")?;
///     Ok(())
/// }
/// build().unwrap();
/// ```
pub type Result<T, E = PopXlError> = std::result::Result<T, E>;
