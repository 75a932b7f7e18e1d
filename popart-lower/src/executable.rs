//! The lowered form of an IR: device programs, functions, streams and a memory plan.

use std::collections::HashMap;

use popart_ir::{
    Attributes, GraphId, HostTensor, OpDef, RemoteBuffer, RemoteBufferId, RemoteSlot, StreamDirection, TensorId,
    TensorInfo, TileSet,
};

/// Alignment of every buffer in the arena, in bytes.
pub const BUFFER_ALIGNMENT: usize = 64;

/// Index of a [`Buffer`] in [`Executable::buffers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufferId(pub u32);

/// Index of a [`Function`] in [`Executable::functions`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FunctionId(pub u32);

/// Index of a [`Stream`] in [`Executable::streams`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamId(pub u32);

impl BufferId {
    /// As a vector index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl FunctionId {
    /// As a vector index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl StreamId {
    /// As a vector index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// What a buffer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufferKind {
    /// A variable: lives for the whole program, moved by the weight programs.
    Variable,
    /// A constant: lives for the whole program, written by the init program.
    Constant,
    /// Activations (op outputs, graph inputs) and copy temporaries: live over
    /// parts of the schedule; memory is reused between buffers whose lifetimes do
    /// not overlap.
    Activation,
}

impl BufferKind {
    /// Short name used by the dump: `var`, `const`, `act`.
    pub fn short_name(self) -> &'static str {
        match self {
            BufferKind::Variable => "var",
            BufferKind::Constant => "const",
            BufferKind::Activation => "act",
        }
    }
}

/// A tensor of the IR, named for humans.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorRef {
    /// Graph id in the lowered IR.
    pub graph: GraphId,
    /// Tensor id in that graph.
    pub tensor: TensorId,
    /// `graph name/tensor name`.
    pub name: String,
}

/// One region of device memory holding one or more IR tensors that share memory:
/// in-place aliases, views lowered without a kernel, and call arguments whose copies
/// were elided.
#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    /// Its id.
    pub id: BufferId,
    /// Type and shape (of the first member tensor).
    pub info: TensorInfo,
    /// Lifetime class.
    pub kind: BufferKind,
    /// Byte offset in the arena (a multiple of [`BUFFER_ALIGNMENT`]).
    pub offset: usize,
    /// Reserved bytes (`info.nbytes()` rounded up to [`BUFFER_ALIGNMENT`]).
    pub size: usize,
    /// IR tensors stored here; empty for copy temporaries.
    pub tensors: Vec<TensorRef>,
    /// The IPU whose tiles hold it (0 without `ipu(n)` placements): for the
    /// first member tensor with a known IPU, the IPU its producer writes it on
    /// ([`popart_ir::Op::output_ipu`]), or for a tensor without a producer
    /// (variable, constant, graph input) the IPU its first consumer reads it on
    /// ([`popart_ir::Op::input_ipu`]), as PopXL's `Tensor.ipu`; for a copy
    /// temporary, its source's. Devices with one memory ignore it; the
    /// [`crate::ipu_model`] maps the buffer onto that IPU's tiles.
    pub ipu: u32,
}

impl Buffer {
    /// A readable name: the first member tensor, or `tmp<id>` for temporaries.
    pub fn name(&self) -> String {
        self.tensors.first().map_or_else(|| format!("tmp{}", self.id.0), |t| t.name.clone())
    }
}

/// Whether a host stream carries per-run data or a weight.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum StreamKind {
    /// A user stream (`h2d_stream` / `d2h_stream`): `num_host_transfers` elements per run.
    Data,
    /// The host copy of a variable, used by the weight programs.
    Weight,
}

/// A host <-> device stream.
#[derive(Clone, Debug, PartialEq)]
pub struct Stream {
    /// Its id.
    pub id: StreamId,
    /// Stream tensor name for data streams; variable name for weight streams.
    pub name: String,
    /// Direction.
    pub direction: StreamDirection,
    /// Type and shape of one element.
    pub info: TensorInfo,
    /// Data or weight.
    pub kind: StreamKind,
    /// The IR tensor: the main-graph stream tensor, or the variable.
    pub tensor: TensorId,
    /// Graph of `tensor`.
    pub graph: GraphId,
}

/// A variable and where it lives.
///
/// Its initial value stays in the IR (`TensorKind::Variable` of [`Weight::tensor`]):
/// the executable never copies variable data, which can be most of a model's bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct Weight {
    /// The variable tensor.
    pub tensor: TensorRef,
    /// Its buffer.
    pub buffer: BufferId,
    /// Its host-to-device weight stream (weights_from_host).
    pub from_host: StreamId,
    /// Its device-to-host weight stream (weights_to_host).
    pub to_host: StreamId,
}

/// A remote variable (PopXL's `remote_variable`): its home is an entry of a
/// remote buffer in streaming memory, written by `weights_from_host` and read
/// back by `weights_to_host`; it has no buffer in the arena.
#[derive(Clone, Debug, PartialEq)]
pub struct RemoteWeight {
    /// The variable tensor (of the main graph).
    pub tensor: TensorRef,
    /// Where it lives.
    pub slot: RemoteSlot,
    /// Its host-to-device weight stream (weights_from_host).
    pub from_host: StreamId,
    /// Its device-to-host weight stream (weights_to_host).
    pub to_host: StreamId,
}

/// The entry of a remote transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteOffset {
    /// Known when lowering (checked to be in range).
    Entry(usize),
    /// Read at run time from an int32 or uint32 scalar in this buffer; the device checks it.
    Tensor(BufferId),
}

impl std::fmt::Display for RemoteOffset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RemoteOffset::Entry(e) => write!(f, "{e}"),
            RemoteOffset::Tensor(b) => write!(f, "b{}", b.0),
        }
    }
}

/// When a function's code is live in tile memory (code loading, seed §9.7.2;
/// see [`crate::lower`]'s code-liveness analysis).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeLiveness {
    /// The function.
    pub function: FunctionId,
    /// Its graph's name.
    pub graph: String,
    /// Some `RemoteCodeLoad` loads it; when false its code is always live.
    pub loaded: bool,
    /// Timeline steps of its loads (every call instance of a loading graph).
    pub loads: Vec<u64>,
    /// Timeline steps (inclusive intervals, sorted, disjoint) on which its code is live.
    pub live: Vec<(u64, u64)>,
}

/// A constant and where it lives.
#[derive(Clone, Debug, PartialEq)]
pub struct Constant {
    /// The constant tensor.
    pub tensor: TensorRef,
    /// Its buffer.
    pub buffer: BufferId,
    /// Its value.
    pub data: HostTensor,
}

/// One kernel argument: op index, buffer and the tensor's info.
#[derive(Clone, Debug, PartialEq)]
pub struct Arg {
    /// Op input or output index.
    pub index: u32,
    /// Buffer holding the tensor.
    pub buffer: BufferId,
    /// Tensor type and shape.
    pub info: TensorInfo,
}

/// Execution of one op by a device kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelCall {
    /// The op's definition: devices pick the kernel by its identity (`def.id()`, an [`popart_ir::OpDefId`]).
    pub def: &'static dyn OpDef,
    /// `graph name/op name`.
    pub name: String,
    /// Op attributes.
    pub attrs: Attributes,
    /// Inputs, sorted by index.
    pub inputs: Vec<Arg>,
    /// Outputs, sorted by index. Outputs never share a buffer with each other or
    /// with inputs, except for the (input, output) alias pairs of in-place ops.
    pub outputs: Vec<Arg>,
    /// For a fused data-parallel weight update
    /// (`ReplicatedScaledAddMatMulRhsGradInplace`): every replica holds the
    /// same value of the weight it updates, so a device may accumulate into one
    /// member's copy and copy it to the others. Set by the last step of
    /// lowering from a whole-program analysis; false for every other call.
    pub weight_invariant: bool,
}

impl KernelCall {
    /// FLOP and bytes of one execution of this call ([`OpDef::cost`](popart_ir::OpDef::cost)
    /// of its op, from its argument infos and attributes).
    pub fn cost(&self) -> popart_ir::OpCost {
        let inputs: Vec<(u32, &TensorInfo)> = self.inputs.iter().map(|a| (a.index, &a.info)).collect();
        let outputs: Vec<(u32, &TensorInfo)> = self.outputs.iter().map(|a| (a.index, &a.info)).collect();
        self.def.cost(&popart_ir::CostContext { inputs: &inputs, outputs: &outputs, attrs: &self.attrs })
    }
}

/// A device program: a tree in the style of Poplar's `program::Program`.
///
/// New device features (remote buffer loads and stores, code loading,
/// cross-replica collectives) will add variants, hence `#[non_exhaustive]`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Program {
    /// Run the children in order.
    Sequence(Vec<Program>),
    /// Run one kernel.
    Execute(KernelCall),
    /// Copy `bytes` bytes from `src` to `dst` (distinct buffers).
    Copy {
        /// Source.
        src: BufferId,
        /// Destination.
        dst: BufferId,
        /// Bytes copied.
        bytes: usize,
    },
    /// Call a function (outlined subgraph).
    Call(FunctionId),
    /// Run `body` `count` times.
    Repeat {
        /// Iterations (at least 1).
        count: u64,
        /// Loop body.
        body: Box<Program>,
    },
    /// Run `then_branch` if the bool scalar in `cond` is true, else `else_branch`.
    If {
        /// Condition buffer (bool, one element).
        cond: BufferId,
        /// Taken when true.
        then_branch: Box<Program>,
        /// Taken when false.
        else_branch: Box<Program>,
    },
    /// Pop the next element of a host-to-device stream into `dst`.
    HostToDevice {
        /// Stream.
        stream: StreamId,
        /// Destination buffer.
        dst: BufferId,
        /// Tiles the transfer runs on (the op's placement: IO tiles overlap it
        /// with compute in the `ipu_model` timeline; see [`crate::ipu_model`]).
        tiles: TileSet,
    },
    /// Push `src` as the next element of a device-to-host stream.
    DeviceToHost {
        /// Source buffer.
        src: BufferId,
        /// Stream.
        stream: StreamId,
        /// Tiles the transfer runs on (the op's placement: IO tiles overlap it
        /// with compute in the `ipu_model` timeline; see [`crate::ipu_model`]).
        tiles: TileSet,
    },
    /// Write constant `constant` (index into [`Executable::constants`]) into its buffer.
    WriteConstant {
        /// Index into [`Executable::constants`].
        constant: usize,
    },
    /// Copy entry `offset` of remote buffer `buffer` into `dst`.
    RemoteLoad {
        /// Remote buffer.
        buffer: RemoteBufferId,
        /// Entry.
        offset: RemoteOffset,
        /// Destination buffer.
        dst: BufferId,
        /// Tiles the transfer runs on (the op's placement: IO tiles overlap it
        /// with compute in the `ipu_model` timeline; see [`crate::ipu_model`]).
        tiles: TileSet,
    },
    /// Copy `src` into entry `offset` of remote buffer `buffer`.
    RemoteStore {
        /// Source buffer.
        src: BufferId,
        /// Remote buffer.
        buffer: RemoteBufferId,
        /// Entry.
        offset: RemoteOffset,
        /// Tiles the transfer runs on (the op's placement: IO tiles overlap it
        /// with compute in the `ipu_model` timeline; see [`crate::ipu_model`]).
        tiles: TileSet,
    },
    /// Pop the next element of a weight stream into an entry of a remote buffer
    /// (`weights_from_host` of a remote variable).
    HostToRemote {
        /// Stream.
        stream: StreamId,
        /// Remote buffer.
        buffer: RemoteBufferId,
        /// Entry.
        entry: usize,
    },
    /// Push an entry of a remote buffer to a weight stream (`weights_to_host`
    /// of a remote variable).
    RemoteToHost {
        /// Remote buffer.
        buffer: RemoteBufferId,
        /// Entry.
        entry: usize,
        /// Stream.
        stream: StreamId,
    },
    /// Load a function's code into tile memory from its code buffer
    /// (`RemoteCodeLoad`): no effect on values; see [`Executable::code`].
    CodeLoad {
        /// The function.
        function: FunctionId,
        /// Tiles the transfer runs on (the op's placement: IO tiles overlap it
        /// with compute in the `ipu_model` timeline; see [`crate::ipu_model`]).
        tiles: TileSet,
    },
}

impl Program {
    /// An empty sequence.
    pub fn empty() -> Self {
        Program::Sequence(Vec::new())
    }

    /// Call `f` on this program and every program nested in it, parents first.
    pub fn visit<'a>(&'a self, f: &mut impl FnMut(&'a Program)) {
        f(self);
        match self {
            Program::Sequence(v) => v.iter().for_each(|p| p.visit(f)),
            Program::Repeat { body, .. } => body.visit(f),
            Program::If { then_branch, else_branch, .. } => {
                then_branch.visit(f);
                else_branch.visit(f);
            }
            _ => {}
        }
    }

    /// Every kernel call in this program (not following calls), in program order.
    pub fn kernel_calls(&self) -> Vec<&KernelCall> {
        let mut out = Vec::new();
        self.visit(&mut |p| {
            if let Program::Execute(k) = p {
                out.push(k);
            }
        });
        out
    }
}

/// A subgraph lowered once and called from every call site.
#[derive(Clone, Debug, PartialEq)]
pub struct Function {
    /// Its id.
    pub id: FunctionId,
    /// The graph's name.
    pub name: String,
    /// The graph it lowers.
    pub graph: GraphId,
    /// Buffer of each graph input, in input order.
    pub inputs: Vec<BufferId>,
    /// Buffer of each graph output, in output order.
    pub outputs: Vec<BufferId>,
    /// The body.
    pub body: Program,
}

/// The engine programs.
#[derive(Clone, Debug, PartialEq)]
pub struct Programs {
    /// Run when the executable is loaded on a device (after each attach): constants.
    pub init: Program,
    /// Host weights -> device variables.
    pub weights_from_host: Program,
    /// Device variables -> host weights.
    pub weights_to_host: Program,
    /// One `run`.
    pub main: Program,
}

/// Sizes of the memory plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Alignment of every buffer.
    pub alignment: usize,
    /// Bytes of variables and constants (always live, at the start of the arena).
    pub permanent_bytes: usize,
    /// Planned peak: the arena size, with buffers reused across lifetimes.
    pub arena_bytes: usize,
    /// What the arena would need without any reuse (sum of all buffer sizes).
    pub no_reuse_bytes: usize,
    /// Bytes of the activation buffers that host loads write (the landing buffers of
    /// host-to-device data streams, each counted once), included in `arena_bytes`.
    /// They play the part of a compiled function's argument buffers, which e.g. XLA
    /// reports apart from its temporaries.
    pub host_load_bytes: usize,
}

/// A lowered IR, ready for a device.
#[derive(Clone, Debug, PartialEq)]
pub struct Executable {
    /// Every buffer, by id.
    pub buffers: Vec<Buffer>,
    /// Every function, by id.
    pub functions: Vec<Function>,
    /// Every stream (data streams first, then weight streams), by id.
    pub streams: Vec<Stream>,
    /// Variables.
    pub weights: Vec<Weight>,
    /// Constants.
    pub constants: Vec<Constant>,
    /// Remote buffers of the IR (streaming memory), by id (id `k + 1` at position `k`).
    pub remote_buffers: Vec<RemoteBuffer>,
    /// Remote variables.
    pub remote_weights: Vec<RemoteWeight>,
    /// Code liveness of every function, in function order.
    pub code: Vec<CodeLiveness>,
    /// Steps of the timeline (the main program with every call expanded), on
    /// which buffer lifetimes and [`CodeLiveness::live`] are counted.
    pub timeline_steps: u64,
    /// The engine programs.
    pub programs: Programs,
    /// Arena sizes.
    pub memory: MemoryPlan,
    /// `num_host_transfers` of the IR.
    pub num_host_transfers: usize,
    /// `replication_factor` of the IR.
    pub replication_factor: usize,
    pub(crate) tensor_buffers: HashMap<(GraphId, TensorId), BufferId>,
    /// Live steps of each buffer (inclusive, normalized; empty for permanent buffers).
    pub(crate) lives: Vec<crate::memory::Intervals>,
}

impl Executable {
    /// The buffer holding tensor `tensor` of graph `graph`, if it has one
    /// (streams and unused tensors have none).
    pub fn buffer_of(&self, graph: GraphId, tensor: TensorId) -> Option<BufferId> {
        self.tensor_buffers.get(&(graph, tensor)).copied()
    }

    /// A buffer by id.
    pub fn buffer(&self, id: BufferId) -> &Buffer {
        &self.buffers[id.index()]
    }

    /// A remote buffer by id.
    pub fn remote_buffer(&self, id: RemoteBufferId) -> Option<&RemoteBuffer> {
        (id.0 as usize).checked_sub(1).and_then(|k| self.remote_buffers.get(k))
    }

    /// A stream by id.
    pub fn stream(&self, id: StreamId) -> &Stream {
        &self.streams[id.index()]
    }

    /// Data streams of the given direction, in id order.
    pub fn data_streams(&self, direction: StreamDirection) -> impl Iterator<Item = &Stream> {
        self.streams.iter().filter(move |s| s.kind == StreamKind::Data && s.direction == direction)
    }

    /// Every kernel call of every program and function.
    pub fn kernel_calls(&self) -> Vec<&KernelCall> {
        let p = &self.programs;
        let mut v = Vec::new();
        for prog in [&p.init, &p.weights_from_host, &p.weights_to_host, &p.main] {
            v.extend(prog.kernel_calls());
        }
        for f in &self.functions {
            v.extend(f.body.kernel_calls());
        }
        v
    }
}
