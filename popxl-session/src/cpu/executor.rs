//! The `cpu` executor: runs the programs of a lowered [`Executable`].
//!
//! Compilation ([`CpuExecutor::new`]) happens once per session:
//! - one arena of `memory.arena_bytes` bytes, 64-byte aligned, is allocated;
//!   every buffer is a fixed pointer into it;
//! - every program and function becomes a flat block of instructions with the
//!   pointers and byte counts resolved; control flow refers to other blocks;
//! - every kernel call becomes a `Box<dyn Kernel>` built by the kernel factory,
//!   and its argument pointers are stored contiguously in two tables.
//!
//! Running a block is a loop over its instructions: no allocation, no lookup.
//! Host streams are bound by the caller ([`CpuExecutor::bind_stream`]) to host
//! memory before running and read or written as rings of `count` elements: the
//! k-th transfer of a stream in one execution uses element `k % count`.

use popart_lower::{Executable, Program, StreamId};

use super::kernel::{Kernel, KernelArgs, KernelError, KernelSpec};

/// Builds the kernel of one kernel call (the device's kernel library).
pub type KernelFactory<'a> = &'a dyn Fn(&KernelSpec<'_>) -> Result<Box<dyn Kernel>, KernelError>;

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u8; 64]);

/// One executable instruction with every address resolved.
#[derive(Clone, Copy, Debug)]
enum Instr {
    Kernel { kernel: u32, inputs: u32, n_inputs: u32, outputs: u32, n_outputs: u32 },
    Copy { src: *const u8, dst: *mut u8, len: usize },
    Call { block: u32 },
    Repeat { count: u64, block: u32 },
    If { cond: *const u8, then_block: u32, else_block: u32 },
    HostToDevice { stream: u32, dst: *mut u8, len: usize },
    DeviceToHost { stream: u32, src: *const u8, len: usize },
    WriteConstant { constant: u32, dst: *mut u8 },
}

/// Host side of one stream during an execution.
#[derive(Clone, Copy, Debug)]
struct StreamSlot {
    host: *mut u8,
    element_bytes: usize,
    count: usize,
    cursor: usize,
}

impl StreamSlot {
    const UNBOUND: StreamSlot = StreamSlot { host: std::ptr::null_mut(), element_bytes: 0, count: 0, cursor: 0 };
}

/// Which engine program to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineProgram {
    /// Write constants (after each attach).
    Init,
    /// Host weights -> device.
    WeightsFromHost,
    /// Device weights -> host.
    WeightsToHost,
    /// One `run`.
    Main,
}

/// Why a stream could not be bound.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BindError {
    /// The stream id is not a stream of the executable.
    #[error("stream s{0} does not exist")]
    UnknownStream(u32),
    /// The host memory is too small for `count` elements.
    #[error("stream s{stream}: host memory of {got} bytes cannot hold {count} elements of {element_bytes} bytes")]
    TooSmall {
        /// Stream id.
        stream: u32,
        /// Bytes given.
        got: usize,
        /// Elements requested.
        count: usize,
        /// Bytes per element.
        element_bytes: usize,
    },
}

/// Counters of executed work (debugging and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecCounters {
    /// Kernels run.
    pub kernels: u64,
    /// Device-side copies run.
    pub copies: u64,
    /// Host-to-device transfers (stream pops).
    pub host_to_device: u64,
    /// Device-to-host transfers (stream pushes).
    pub device_to_host: u64,
}

/// The compiled form of an [`Executable`] for the `cpu` device.
pub struct CpuExecutor {
    arena: Box<[Line]>,
    arena_bytes: usize,
    blocks: Vec<Vec<Instr>>,
    entry: [u32; 4],
    kernels: Vec<Box<dyn Kernel>>,
    kernel_names: Vec<String>,
    kernel_types: Vec<String>,
    in_ptrs: Vec<*const u8>,
    out_ptrs: Vec<*mut u8>,
    constants: Vec<Vec<u8>>,
    streams: Vec<StreamSlot>,
    stream_bytes: Vec<usize>,
    counters: ExecCounters,
    /// Per-kernel (calls, nanoseconds) while profiling; empty otherwise.
    profile: Vec<(u64, u64)>,
}

/// Time spent in one compiled kernel while profiling was on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelTime {
    /// Name of the op the kernel executes (scoped as in the lowered program).
    pub name: String,
    /// Op type.
    pub op_type: String,
    /// Executions.
    pub calls: u64,
    /// Total wall-clock time.
    pub total: std::time::Duration,
}

// SAFETY: every raw pointer held points into `arena` (owned, never reallocated) or
// into host memory bound only for the duration of a `&mut self` call; kernels are
// `Send + Sync`.
unsafe impl Send for CpuExecutor {}

impl std::fmt::Debug for CpuExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuExecutor")
            .field("arena_bytes", &self.arena_bytes)
            .field("blocks", &self.blocks.len())
            .field("kernels", &self.kernel_names)
            .finish()
    }
}

struct Compiler<'e> {
    exe: &'e Executable,
    base: *mut u8,
    factory: KernelFactory<'e>,
    blocks: Vec<Vec<Instr>>,
    function_blocks: Vec<u32>,
    kernels: Vec<Box<dyn Kernel>>,
    kernel_names: Vec<String>,
    kernel_types: Vec<String>,
    in_ptrs: Vec<*const u8>,
    out_ptrs: Vec<*mut u8>,
}

impl Compiler<'_> {
    fn ptr(&self, b: popart_lower::BufferId) -> *mut u8 {
        // SAFETY: offsets are within the arena by construction of the memory plan.
        unsafe { self.base.add(self.exe.buffer(b).offset) }
    }

    fn new_block(&mut self) -> u32 {
        self.blocks.push(Vec::new());
        (self.blocks.len() - 1) as u32
    }

    fn block_of(&mut self, p: &Program) -> Result<u32, KernelError> {
        let b = self.new_block();
        let mut v = Vec::new();
        self.emit(p, &mut v)?;
        self.blocks[b as usize] = v;
        Ok(b)
    }

    fn emit(&mut self, p: &Program, out: &mut Vec<Instr>) -> Result<(), KernelError> {
        match p {
            Program::Sequence(v) => {
                for c in v {
                    self.emit(c, out)?;
                }
            }
            Program::Execute(k) => {
                let spec = KernelSpec {
                    def: k.def,
                    attrs: &k.attrs,
                    inputs: k.inputs.iter().map(|a| (a.index, a.info.clone())).collect(),
                    outputs: k.outputs.iter().map(|a| (a.index, a.info.clone())).collect(),
                };
                let kernel = (self.factory)(&spec).map_err(|e| KernelError {
                    op_type: e.op_type,
                    reason: format!("{} (op `{}`)", e.reason, k.name),
                })?;
                let inputs = self.in_ptrs.len() as u32;
                let outputs = self.out_ptrs.len() as u32;
                for a in &k.inputs {
                    let p = self.ptr(a.buffer) as *const u8;
                    self.in_ptrs.push(p);
                }
                for a in &k.outputs {
                    let p = self.ptr(a.buffer);
                    self.out_ptrs.push(p);
                }
                out.push(Instr::Kernel {
                    kernel: self.kernels.len() as u32,
                    inputs,
                    n_inputs: k.inputs.len() as u32,
                    outputs,
                    n_outputs: k.outputs.len() as u32,
                });
                self.kernels.push(kernel);
                self.kernel_names.push(k.name.clone());
                self.kernel_types.push(k.def.op_type().to_string());
            }
            Program::Copy { src, dst, bytes } => {
                if *bytes > 0 {
                    out.push(Instr::Copy { src: self.ptr(*src), dst: self.ptr(*dst), len: *bytes })
                }
            }
            Program::Call(f) => out.push(Instr::Call { block: self.function_blocks[f.index()] }),
            Program::Repeat { count, body } => {
                let block = self.block_of(body)?;
                out.push(Instr::Repeat { count: *count, block });
            }
            Program::If { cond, then_branch, else_branch } => {
                let then_block = self.block_of(then_branch)?;
                let else_block = self.block_of(else_branch)?;
                out.push(Instr::If { cond: self.ptr(*cond), then_block, else_block });
            }
            Program::HostToDevice { stream, dst } => out.push(Instr::HostToDevice {
                stream: stream.0,
                dst: self.ptr(*dst),
                len: self.exe.stream(*stream).info.nbytes(),
            }),
            Program::DeviceToHost { src, stream } => out.push(Instr::DeviceToHost {
                stream: stream.0,
                src: self.ptr(*src),
                len: self.exe.stream(*stream).info.nbytes(),
            }),
            Program::WriteConstant { constant } => {
                let c = &self.exe.constants[*constant];
                out.push(Instr::WriteConstant { constant: *constant as u32, dst: self.ptr(c.buffer) })
            }
            other => {
                return Err(KernelError {
                    op_type: format!("{other:?}").split([' ', '(', '{']).next().unwrap_or("?").to_string(),
                    reason: "this program type is not supported by the cpu device".into(),
                })
            }
        }
        Ok(())
    }
}

impl CpuExecutor {
    /// Compile `exe`: allocate the arena, resolve every address and build every kernel.
    pub fn new(exe: &Executable, factory: KernelFactory<'_>) -> Result<Self, KernelError> {
        let arena_bytes = exe.memory.arena_bytes;
        let mut arena = vec![Line([0; 64]); arena_bytes.div_ceil(64).max(1)].into_boxed_slice();
        let base = arena.as_mut_ptr() as *mut u8;
        let mut c = Compiler {
            exe,
            base,
            factory,
            blocks: Vec::new(),
            function_blocks: Vec::new(),
            kernels: Vec::new(),
            kernel_names: Vec::new(),
            kernel_types: Vec::new(),
            in_ptrs: Vec::new(),
            out_ptrs: Vec::new(),
        };
        // Reserve a block per function first so calls can refer to any of them.
        for _ in &exe.functions {
            let b = c.new_block();
            c.function_blocks.push(b);
        }
        for f in &exe.functions {
            let mut v = Vec::new();
            c.emit(&f.body, &mut v)?;
            let b = c.function_blocks[f.id.index()];
            c.blocks[b as usize] = v;
        }
        let p = &exe.programs;
        let entry = [
            c.block_of(&p.init)?,
            c.block_of(&p.weights_from_host)?,
            c.block_of(&p.weights_to_host)?,
            c.block_of(&p.main)?,
        ];
        Ok(CpuExecutor {
            arena,
            arena_bytes,
            blocks: c.blocks,
            entry,
            kernels: c.kernels,
            kernel_names: c.kernel_names,
            kernel_types: c.kernel_types,
            in_ptrs: c.in_ptrs,
            out_ptrs: c.out_ptrs,
            constants: exe.constants.iter().map(|k| k.data.bytes.clone()).collect(),
            streams: vec![StreamSlot::UNBOUND; exe.streams.len()],
            stream_bytes: exe.streams.iter().map(|s| s.info.nbytes()).collect(),
            counters: ExecCounters::default(),
            profile: Vec::new(),
        })
    }

    /// Arena size in bytes.
    pub fn arena_bytes(&self) -> usize {
        self.arena_bytes
    }

    /// Number of compiled kernels.
    pub fn num_kernels(&self) -> usize {
        self.kernels.len()
    }

    /// Work counters since creation.
    pub fn counters(&self) -> ExecCounters {
        self.counters
    }

    /// Turn per-kernel timing on (clearing earlier timings) or off. While on,
    /// every kernel execution is timed with a monotonic clock (~20-40 ns each).
    pub fn set_profiling(&mut self, on: bool) {
        self.profile = if on { vec![(0, 0); self.kernels.len()] } else { Vec::new() };
    }

    /// Timings gathered since profiling was turned on, one entry per compiled
    /// kernel that ran, slowest first. Empty when profiling is off.
    pub fn kernel_profile(&self) -> Vec<KernelTime> {
        let mut v: Vec<KernelTime> = self
            .profile
            .iter()
            .enumerate()
            .filter(|(_, p)| p.0 > 0)
            .map(|(i, &(calls, ns))| KernelTime {
                name: self.kernel_names[i].clone(),
                op_type: self.kernel_types[i].clone(),
                calls,
                total: std::time::Duration::from_nanos(ns),
            })
            .collect();
        v.sort_by(|a, b| b.total.cmp(&a.total).then_with(|| a.name.cmp(&b.name)));
        v
    }

    /// Fill device memory with zeros (what a fresh attach sees).
    pub fn clear_memory(&mut self) {
        self.arena.fill(Line([0; 64]));
    }

    /// Overwrite device memory at `offset` with `bytes` (single-variable writes).
    /// Panics if the range is outside the arena.
    pub fn write_buffer(&mut self, offset: usize, bytes: &[u8]) {
        assert!(offset + bytes.len() <= self.arena_bytes, "write outside the arena");
        // SAFETY: checked to lie within the arena; no program is running (`&mut self`).
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), (self.arena.as_mut_ptr() as *mut u8).add(offset), bytes.len())
        };
    }

    /// Device memory at `offset`, `len` bytes. Panics if outside the arena.
    pub fn read_buffer(&self, offset: usize, len: usize) -> &[u8] {
        assert!(offset + len <= self.arena_bytes, "read outside the arena");
        // SAFETY: checked to lie within the arena, which is initialised memory.
        unsafe { std::slice::from_raw_parts((self.arena.as_ptr() as *const u8).add(offset), len) }
    }

    /// Bind stream `stream` to `count` elements of host memory at `host`
    /// (`bytes` long) for the next executions; resets its cursor.
    ///
    /// # Safety
    /// `host` must be valid for reads (host-to-device) or writes (device-to-host)
    /// of `bytes` bytes until the stream is unbound or rebound, and must not be
    /// accessed by anything else while a program runs.
    pub unsafe fn bind_stream(
        &mut self,
        stream: StreamId,
        host: *mut u8,
        bytes: usize,
        count: usize,
    ) -> Result<(), BindError> {
        let element_bytes = *self.stream_bytes.get(stream.index()).ok_or(BindError::UnknownStream(stream.0))?;
        if count == 0 || bytes < element_bytes * count {
            return Err(BindError::TooSmall { stream: stream.0, got: bytes, count, element_bytes });
        }
        self.streams[stream.index()] = StreamSlot { host, element_bytes, count, cursor: 0 };
        Ok(())
    }

    /// Forget every stream binding.
    pub fn unbind_streams(&mut self) {
        self.streams.fill(StreamSlot::UNBOUND);
    }

    /// Number of transfers made on `stream` since it was bound.
    pub fn stream_cursor(&self, stream: StreamId) -> usize {
        self.streams.get(stream.index()).map_or(0, |s| s.cursor)
    }

    /// Run one engine program. Every stream it transfers must be bound; a transfer
    /// on an unbound stream panics (a bug of the caller, not of the user).
    pub fn run(&mut self, program: EngineProgram) {
        let block = self.entry[program as usize];
        self.exec(block);
    }

    fn exec(&mut self, block: u32) {
        let n = self.blocks[block as usize].len();
        for i in 0..n {
            let instr = self.blocks[block as usize][i];
            match instr {
                Instr::Kernel { kernel, inputs, n_inputs, outputs, n_outputs } => {
                    let (a, b) = (inputs as usize, outputs as usize);
                    let args = KernelArgs {
                        inputs: &self.in_ptrs[a..a + n_inputs as usize],
                        outputs: &self.out_ptrs[b..b + n_outputs as usize],
                    };
                    // SAFETY: the pointers come from the memory plan, which keeps
                    // outputs disjoint from inputs except declared aliases, and the
                    // arena is 64-byte aligned with 64-byte aligned offsets.
                    if self.profile.is_empty() {
                        unsafe { self.kernels[kernel as usize].run(&args) };
                    } else {
                        let t = std::time::Instant::now();
                        // SAFETY: as above.
                        unsafe { self.kernels[kernel as usize].run(&args) };
                        let p = &mut self.profile[kernel as usize];
                        p.0 += 1;
                        p.1 += t.elapsed().as_nanos() as u64;
                    }
                    self.counters.kernels += 1;
                }
                Instr::Copy { src, dst, len } => {
                    // SAFETY: distinct buffers of the plan; both within the arena.
                    unsafe { copy_bytes(src, dst, len) };
                    self.counters.copies += 1;
                }
                Instr::Call { block } => self.exec(block),
                Instr::Repeat { count, block } => {
                    for _ in 0..count {
                        self.exec(block);
                    }
                }
                Instr::If { cond, then_block, else_block } => {
                    // SAFETY: a bool buffer of one byte in the arena.
                    let c = unsafe { *cond } != 0;
                    self.exec(if c { then_block } else { else_block });
                }
                Instr::HostToDevice { stream, dst, len } => {
                    let s = &mut self.streams[stream as usize];
                    assert!(!s.host.is_null(), "host-to-device stream s{stream} is not bound");
                    let k = s.cursor % s.count;
                    s.cursor += 1;
                    // SAFETY: binding guarantees `count * element_bytes` valid bytes; len == element_bytes.
                    unsafe { copy_bytes(s.host.add(k * s.element_bytes), dst, len) };
                    self.counters.host_to_device += 1;
                }
                Instr::DeviceToHost { stream, src, len } => {
                    let s = &mut self.streams[stream as usize];
                    assert!(!s.host.is_null(), "device-to-host stream s{stream} is not bound");
                    let k = s.cursor % s.count;
                    s.cursor += 1;
                    // SAFETY: as above, for writes.
                    unsafe { copy_bytes(src, s.host.add(k * s.element_bytes), len) };
                    self.counters.device_to_host += 1;
                }
                Instr::WriteConstant { constant, dst } => {
                    let data = &self.constants[constant as usize];
                    // SAFETY: the constant's buffer holds at least its bytes.
                    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
                }
            }
        }
    }
}

/// Bytes from which a copy is split over the worker team.
const PAR_COPY_MIN: usize = 1 << 18;

/// `copy_nonoverlapping` of `len` bytes, split over the worker team when large.
///
/// # Safety
/// As `std::ptr::copy_nonoverlapping`.
unsafe fn copy_bytes(src: *const u8, dst: *mut u8, len: usize) {
    let threads = super::team::num_threads();
    if len < PAR_COPY_MIN || threads < 2 {
        std::ptr::copy_nonoverlapping(src, dst, len);
        return;
    }
    struct Ptrs(*const u8, *mut u8);
    // SAFETY: the tasks copy disjoint ranges of buffers that outlive the call.
    unsafe impl Sync for Ptrs {}
    impl Ptrs {
        /// Copy bytes `start..start + n`.
        ///
        /// # Safety
        /// The range lies within both buffers.
        unsafe fn copy(&self, start: usize, n: usize) {
            std::ptr::copy_nonoverlapping(self.0.add(start), self.1.add(start), n)
        }
    }
    let p = Ptrs(src, dst);
    let chunk = len.div_ceil(threads).next_multiple_of(4096);
    super::team::run(len.div_ceil(chunk), &|i| {
        let start = i * chunk;
        // SAFETY: `start + n <= len`; ranges of different tasks are disjoint.
        unsafe { p.copy(start, chunk.min(len - start)) };
    });
}

#[cfg(test)]
mod tests {
    //! Executor tests with a few trivial kernels of their own (f32 only).
    use super::*;

    #[test]
    fn large_copies_split_over_threads_copy_every_byte() {
        for len in [PAR_COPY_MIN - 1, PAR_COPY_MIN, 3 * PAR_COPY_MIN + 4097] {
            let src: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let mut dst = vec![0u8; len + 1];
            // SAFETY: both buffers hold `len` bytes and do not overlap.
            unsafe { copy_bytes(src.as_ptr(), dst.as_mut_ptr(), len) };
            assert_eq!(&dst[..len], &src[..], "len {len}");
            assert_eq!(dst[len], 0, "no byte past the end");
        }
    }
    use popart_ir::{AttrValue, Attributes, DataType, HostTensor, Ir, StreamDirection, TensorInfo, TensorKind};

    struct AddF32(usize);
    impl Kernel for AddF32 {
        unsafe fn run(&self, args: &KernelArgs<'_>) {
            let (a, b) = (args.inputs[0] as *const f32, args.inputs[1] as *const f32);
            let y = args.outputs[0] as *mut f32;
            for i in 0..self.0 {
                *y.add(i) = *a.add(i) + *b.add(i);
            }
        }
    }
    struct AddInplaceF32(usize);
    impl Kernel for AddInplaceF32 {
        unsafe fn run(&self, args: &KernelArgs<'_>) {
            let (b, y) = (args.inputs[1] as *const f32, args.outputs[0] as *mut f32);
            for i in 0..self.0 {
                *y.add(i) += *b.add(i);
            }
        }
    }
    struct GreaterScalar;
    impl Kernel for GreaterScalar {
        unsafe fn run(&self, args: &KernelArgs<'_>) {
            let (a, b) = (*(args.inputs[0] as *const f32), *(args.inputs[1] as *const f32));
            *args.outputs[0] = (a > b) as u8;
        }
    }

    fn factory(spec: &KernelSpec<'_>) -> Result<Box<dyn Kernel>, KernelError> {
        let n = spec.outputs.first().map_or(0, |o| o.1.nelms());
        use popart_ir::ops::all as ir;
        if spec.is::<ir::Add>() {
            Ok(Box::new(AddF32(n)))
        } else if spec.is::<ir::AddInplace>() {
            Ok(Box::new(AddInplaceF32(n)))
        } else if spec.is::<ir::Greater>() {
            Ok(Box::new(GreaterScalar))
        } else {
            Err(KernelError { op_type: spec.op_type().into(), reason: "not in the test factory".into() })
        }
    }

    fn f32s(n: usize) -> TensorInfo {
        TensorInfo::new(DataType::Float32, [n])
    }

    fn stream_attrs(name: &str) -> Attributes {
        Attributes::new().with("stream", AttrValue::Str(name.into()))
    }

    fn bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn floats(b: &[u8]) -> Vec<f32> {
        b.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
    }

    /// main: x = load(in); repeat 3 { acc = acc + x (loaded again inside) }; store(acc).
    fn repeat_ir() -> Ir {
        let mut ir = Ir::new();
        let main = ir.main_graph_id();
        let info = f32s(2);
        ir.main_graph_mut().add_tensor("in", info.clone(), TensorKind::Stream(StreamDirection::HostToDevice)).unwrap();
        ir.main_graph_mut().add_tensor("out", info.clone(), TensorKind::Stream(StreamDirection::DeviceToHost)).unwrap();
        let body = ir.create_graph("body").unwrap();
        let acc = ir.graph_mut(body).unwrap().add_input("acc", info.clone()).unwrap();
        let l = ir.create_op(body, "HostLoad", stream_attrs("in"), &[], "load").unwrap();
        let x = ir.graph(body).unwrap().op(l).unwrap().output(0).unwrap();
        let a = ir.create_op(body, "Add", Attributes::new(), &[(0, acc), (1, x)], "add").unwrap();
        let y = ir.graph(body).unwrap().op(a).unwrap().output(0).unwrap();
        ir.graph_mut(body).unwrap().add_output(y).unwrap();
        let zero = ir
            .main_graph_mut()
            .add_tensor("zero", info.clone(), TensorKind::Constant(HostTensor::zeros(info)))
            .unwrap();
        let r = ir
            .create_op(
                main,
                "Repeat",
                Attributes::new().with("graph", AttrValue::Graph(body)).with("count", AttrValue::Int(3)),
                &[(0, zero)],
                "rep",
            )
            .unwrap();
        let o = ir.main_graph().op(r).unwrap().output(0).unwrap();
        ir.create_op(main, "HostStore", stream_attrs("out"), &[(0, o)], "store").unwrap();
        ir.verify().unwrap();
        ir
    }

    #[test]
    fn repeat_with_host_load_pops_each_iteration_and_wraps() {
        let ir = repeat_ir();
        let exe = popart_lower::lower(&ir).unwrap();
        let mut ex = CpuExecutor::new(&exe, &factory).unwrap();
        ex.run(EngineProgram::Init);
        // Two elements for three pops: the third pop wraps to element 0.
        let mut input = bytes(&[1.0, 2.0, 10.0, 20.0]);
        let mut output = vec![0u8; 8];
        unsafe {
            ex.bind_stream(StreamId(0), input.as_mut_ptr(), input.len(), 2).unwrap();
            ex.bind_stream(StreamId(1), output.as_mut_ptr(), output.len(), 1).unwrap();
        }
        ex.run(EngineProgram::Main);
        ex.unbind_streams();
        assert_eq!(floats(&output), vec![1.0 + 10.0 + 1.0, 2.0 + 20.0 + 2.0]);
        assert_eq!(ex.counters().host_to_device, 3);
        assert_eq!(ex.counters().kernels, 3);
    }

    #[test]
    fn unsupported_kernels_fail_at_compile_time_naming_the_op() {
        let mut ir = Ir::new();
        let main = ir.main_graph_id();
        let c = ir.main_graph_mut().add_tensor("c", f32s(1), TensorKind::Constant(HostTensor::zeros(f32s(1)))).unwrap();
        ir.create_op(main, "Exp", Attributes::new(), &[(0, c)], "my_exp").unwrap();
        let exe = popart_lower::lower(&ir).unwrap();
        let err = CpuExecutor::new(&exe, &factory).unwrap_err();
        assert_eq!(err.op_type, "Exp");
        assert!(err.reason.contains("main/my_exp"), "{}", err.reason);
    }

    #[test]
    fn binding_checks_sizes() {
        let exe = popart_lower::lower(&repeat_ir()).unwrap();
        let mut ex = CpuExecutor::new(&exe, &factory).unwrap();
        let mut small = vec![0u8; 4];
        let err = unsafe { ex.bind_stream(StreamId(0), small.as_mut_ptr(), 4, 1) }.unwrap_err();
        assert_eq!(err, BindError::TooSmall { stream: 0, got: 4, count: 1, element_bytes: 8 });
        assert_eq!(unsafe { ex.bind_stream(StreamId(9), small.as_mut_ptr(), 4, 1) }, Err(BindError::UnknownStream(9)));
    }

    #[test]
    fn if_runs_one_branch() {
        // out = (a > b) ? a + b : a (+)= b in place on a copy.
        let mut ir = Ir::new();
        let main = ir.main_graph_id();
        let s = f32s(1);
        for (n, d) in [
            ("a", StreamDirection::HostToDevice),
            ("b", StreamDirection::HostToDevice),
            ("out", StreamDirection::DeviceToHost),
        ] {
            ir.main_graph_mut().add_tensor(n, s.clone(), TensorKind::Stream(d)).unwrap();
        }
        let mut branch = |name: &str, inplace: bool| {
            let g = ir.create_graph(name).unwrap();
            let x = ir.graph_mut(g).unwrap().add_input("x", s.clone()).unwrap();
            let y = ir.graph_mut(g).unwrap().add_input("y", s.clone()).unwrap();
            let op = ir
                .create_op(g, if inplace { "AddInplace" } else { "Add" }, Attributes::new(), &[(0, x), (1, y)], "add")
                .unwrap();
            let o = ir.graph(g).unwrap().op(op).unwrap().output(0).unwrap();
            // then: x + y; else: x + y + y (in place twice)
            let o = if inplace {
                let op2 = ir.create_op(g, "AddInplace", Attributes::new(), &[(0, o), (1, y)], "add2").unwrap();
                ir.graph(g).unwrap().op(op2).unwrap().output(0).unwrap()
            } else {
                o
            };
            ir.graph_mut(g).unwrap().add_output(o).unwrap();
            g
        };
        let then_g = branch("then", false);
        let else_g = branch("else", true);
        let la = ir.create_op(main, "HostLoad", stream_attrs("a"), &[], "la").unwrap();
        let lb = ir.create_op(main, "HostLoad", stream_attrs("b"), &[], "lb").unwrap();
        let a = ir.main_graph().op(la).unwrap().output(0).unwrap();
        let b = ir.main_graph().op(lb).unwrap().output(0).unwrap();
        let gt = ir.create_op(main, "Greater", Attributes::new(), &[(0, a), (1, b)], "gt").unwrap();
        let c = ir.main_graph().op(gt).unwrap().output(0).unwrap();
        let attrs = Attributes::new()
            .with("then_graph", AttrValue::Graph(then_g))
            .with("else_graph", AttrValue::Graph(else_g))
            .with("then_inputs", AttrValue::Ints(vec![1, 2]))
            .with("else_inputs", AttrValue::Ints(vec![1, 2]));
        let iff = ir.create_op(main, "If", attrs, &[(0, c), (1, a), (2, b)], "if").unwrap();
        let o = ir.main_graph().op(iff).unwrap().output(0).unwrap();
        ir.create_op(main, "HostStore", stream_attrs("out"), &[(0, o)], "store").unwrap();
        ir.verify().unwrap();
        let exe = popart_lower::lower(&ir).unwrap();
        let mut ex = CpuExecutor::new(&exe, &factory).unwrap();
        for (a, b, want) in [(5.0f32, 1.0f32, 6.0f32), (1.0, 5.0, 11.0)] {
            let (mut ia, mut ib, mut out) = (bytes(&[a]), bytes(&[b]), vec![0u8; 4]);
            unsafe {
                ex.bind_stream(StreamId(0), ia.as_mut_ptr(), 4, 1).unwrap();
                ex.bind_stream(StreamId(1), ib.as_mut_ptr(), 4, 1).unwrap();
                ex.bind_stream(StreamId(2), out.as_mut_ptr(), 4, 1).unwrap();
            }
            ex.run(EngineProgram::Main);
            ex.unbind_streams();
            assert_eq!(floats(&out), vec![want], "a={a} b={b}");
        }
    }
}
