//! The `cpu` executor: runs the programs of a lowered [`Executable`].
//!
//! Compilation ([`CpuExecutor::new`]) happens once per session:
//! - one arena of `memory.arena_bytes` bytes, 64-byte aligned, is allocated
//!   (fallibly: a refused allocation is [`CpuError::OutOfMemory`]); every
//!   buffer is a fixed pointer into it, checked to lie within it;
//! - every program and function becomes a flat block of instructions with the
//!   pointers and byte counts resolved; control flow refers to other blocks;
//! - every kernel call becomes a `Box<dyn Kernel>` built by the kernel factory,
//!   and its argument pointers are stored contiguously in two tables.
//!
//! Running a block is a loop over its instructions: no allocation, no lookup.
//! Host streams are bound by the caller ([`CpuExecutor::bind_stream`]) to host
//! memory before running and read or written as rings of `count` elements: the
//! k-th transfer of a stream in one execution uses element `k % count`.
//!
//! A run fails only when a kernel fails ([`KernelRunError`]: run-time checks)
//! or a remote transfer's run-time offset is out of range; it then stops at
//! once ([`ExecError`]). Whatever the program wrote before is left as it is
//! until the caller restores the copy it saved ([`CpuExecutor::save_state`]:
//! see the `snapshot` module and `Session::run_with_outputs`). A stream the
//! program transfers but the caller left unbound is found before anything runs.

use popart_ir::RemoteBufferId;
use popart_lower::{Executable, Program, RemoteOffset, StreamId};

use crate::kernel::{Kernel, KernelArgs, KernelError, KernelRunError, KernelSpec};
use crate::CpuError;

/// Builds the kernel of one kernel call (the device's kernel library).
pub type KernelFactory<'a> = &'a dyn Fn(&KernelSpec<'_>) -> Result<Box<dyn Kernel>, KernelError>;

/// Whether the kernel built from a spec may fail at run time (a kernel
/// library's knowledge of its kernels; `|_| true` when unknown).
pub type MayFail<'a> = &'a dyn Fn(&KernelSpec<'_>) -> bool;

/// Alignment (and size granularity) of the arena: one cache line.
const LINE: usize = 64;

/// One executable instruction with every address resolved.
#[derive(Clone, Copy, Debug)]
enum Instr {
    Kernel {
        kernel: u32,
        inputs: u32,
        n_inputs: u32,
        outputs: u32,
        n_outputs: u32,
    },
    Copy {
        src: *const u8,
        dst: *mut u8,
        len: usize,
    },
    /// A dynamic slice read in place ([`views`]): `views[view]`.
    View {
        view: u32,
    },
    /// Before a kernel writing an update in place ([`places`]): points its
    /// output and the readers at the block of `places[place]` this run.
    Place {
        place: u32,
    },
    /// A dynamic update written in place ([`places`]): its copy kernel,
    /// skipped when `places[place]`'s producer wrote the block this run.
    Placed {
        place: u32,
        kernel: u32,
        inputs: u32,
        n_inputs: u32,
        outputs: u32,
        n_outputs: u32,
    },
    Call {
        block: u32,
    },
    Repeat {
        count: u64,
        block: u32,
    },
    If {
        cond: *const u8,
        then_block: u32,
        else_block: u32,
    },
    HostToDevice {
        stream: u32,
        dst: *mut u8,
        len: usize,
    },
    DeviceToHost {
        stream: u32,
        src: *const u8,
        len: usize,
    },
    WriteConstant {
        constant: u32,
        dst: *mut u8,
    },
    /// Remote buffer `buffer`'s entry `offset` -> `dst` (`len` bytes: one entry).
    RemoteLoad {
        buffer: u32,
        offset: Offset,
        dst: *mut u8,
        len: usize,
    },
    /// `src` -> remote buffer `buffer`'s entry `offset`.
    RemoteStore {
        src: *const u8,
        buffer: u32,
        offset: Offset,
        len: usize,
    },
    /// Weight stream -> remote entry.
    HostToRemote {
        stream: u32,
        buffer: u32,
        entry: usize,
        len: usize,
    },
    /// Remote entry -> weight stream.
    RemoteToHost {
        buffer: u32,
        entry: usize,
        stream: u32,
        len: usize,
    },
    /// A code load: nothing to do on a cpu (counted).
    CodeLoad,
}

/// The entry of a remote transfer: known at compile time (and checked then),
/// or read from an int32 or uint32 scalar in the arena and checked when it runs.
#[derive(Clone, Copy, Debug)]
enum Offset {
    Entry(usize),
    Tensor { ptr: *const u8, signed: bool },
}

/// Host side of one stream during an execution.
#[derive(Clone, Copy, Debug)]
struct StreamSlot {
    host: *mut u8,
    element_bytes: usize,
    count: usize,
    cursor: usize,
    /// Transfer `k` uses element `(k % count) * stride + first` of the host memory.
    stride: usize,
    first: usize,
}

impl StreamSlot {
    const UNBOUND: StreamSlot =
        StreamSlot { host: std::ptr::null_mut(), element_bytes: 0, count: 0, cursor: 0, stride: 1, first: 0 };

    /// Byte offset of the next transfer's element (advancing the cursor).
    #[inline(always)]
    fn next(&mut self) -> usize {
        let k = self.cursor % self.count;
        self.cursor += 1;
        (k * self.stride + self.first) * self.element_bytes
    }
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

/// [`ExecError`] before names are attached: what the run loop returns (no
/// allocation on the error path inside the loop).
#[derive(Clone, Copy, Debug)]
enum Stop {
    Kernel(u32, KernelRunError),
    UnboundStream(u32),
    /// (buffer index, offset).
    RemoteOffset(u32, i64),
}

/// A broken invariant of the compiled form (a bug, or an unverified executable).
fn internal(reason: String) -> CpuError {
    CpuError::MalformedExecutable { reason }
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
    /// Remote loads and stores (streaming memory transfers).
    pub remote_transfers: u64,
    /// Code loads.
    pub code_loads: u64,
}

/// The compiled form of an [`Executable`] for the `cpu` device.
pub struct CpuExecutor {
    arena: Arena,
    arena_bytes: usize,
    blocks: Vec<Vec<Instr>>,
    entry: [u32; 4],
    kernels: Vec<Box<dyn Kernel>>,
    kernel_names: Vec<String>,
    kernel_types: Vec<String>,
    in_ptrs: Vec<*const u8>,
    out_ptrs: Vec<*mut u8>,
    /// Dynamic slices read in place (their readers' `in_ptrs` set at run time).
    views: Vec<views::View>,
    /// Dynamic updates written in place (their producers' `out_ptrs` and
    /// readers' `in_ptrs` set at run time).
    places: Vec<places::Place>,
    constants: Vec<Vec<u8>>,
    streams: Vec<StreamSlot>,
    stream_bytes: Vec<usize>,
    /// Streaming memory: one zeroed allocation per remote buffer (entries x entry bytes).
    remote: Vec<Vec<u8>>,
    /// Bytes of one entry of each remote buffer.
    remote_entry_bytes: Vec<usize>,
    /// Entries of each remote buffer.
    remote_entries: Vec<usize>,
    counters: ExecCounters,
    /// Per-kernel (calls, nanoseconds) while profiling; empty otherwise.
    profile: Vec<(u64, u64)>,
    /// Kernel spans while tracing (never grown inside a run: `run` reserves
    /// room for the program's kernels first, up to [`MAX_TRACE_SPANS`]).
    trace: Vec<KernelSpan>,
    tracing: bool,
    /// Spans not recorded for want of room.
    trace_dropped: u64,
    /// Kernel executions of one run of each entry program (repeats counted,
    /// the larger branch of an `If`), saturating.
    kernels_per_run: [u64; 4],
    /// The streams each entry program transfers (checked bound before it runs).
    used_streams: [Vec<u32>; 4],
    /// The copy of the state a failed run restores; `None` when the programs cannot fail.
    saved: Option<snapshot::Saved>,
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

/// The most kernel spans an executor keeps while tracing (24 B each); later
/// ones are counted in [`CpuExecutor::trace_dropped`].
pub const MAX_TRACE_SPANS: usize = 1 << 22;

/// One kernel execution recorded while tracing: on the thread running the
/// program, between two readings of [`crate::team::clock_ns`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelSpan {
    /// The compiled kernel ([`CpuExecutor::kernel_name`], [`CpuExecutor::kernel_type`]).
    pub kernel: u32,
    /// Start, ns on [`crate::team::clock_ns`]'s clock.
    pub start_ns: u64,
    /// End (at least `start_ns`).
    pub end_ns: u64,
}

// SAFETY: every raw pointer held points into `arena` (owned, never reallocated or
// moved: it is held through a raw pointer) or
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
    arena_bytes: usize,
    check_indices: bool,
    factory: KernelFactory<'e>,
    may_fail: MayFail<'e>,
    /// Some kernel may fail, or some remote transfer has a run-time offset.
    fallible: bool,
    /// Remote buffers (by index) that some remote store writes.
    remote_written: Vec<bool>,
    blocks: Vec<Vec<Instr>>,
    function_blocks: Vec<u32>,
    kernels: Vec<Box<dyn Kernel>>,
    kernel_names: Vec<String>,
    kernel_types: Vec<String>,
    in_ptrs: Vec<*const u8>,
    out_ptrs: Vec<*mut u8>,
    /// References to each buffer and function anywhere in the executable.
    refs: views::Refs,
    views: Vec<views::View>,
    places: Vec<places::Place>,
    /// The buffer of each input pointer (to find the views' readers once all is compiled).
    in_bufs: Vec<popart_lower::BufferId>,
}

impl Compiler<'_> {
    /// Pointer to buffer `b`, checked to lie (with its whole size) within the
    /// arena and to hold its info's bytes: the invariant every instruction's
    /// `unsafe` relies on.
    fn ptr(&self, b: popart_lower::BufferId) -> Result<*mut u8, CpuError> {
        let buf = self.exe.buffers.get(b.index()).ok_or_else(|| internal(format!("buffer {b:?} does not exist")))?;
        let fits = buf.offset.checked_add(buf.size).is_some_and(|end| end <= self.arena_bytes);
        if !fits || buf.info.nbytes() > buf.size {
            return Err(internal(format!(
                "buffer {b:?} ({} bytes at {}) does not hold its info {} or lies outside the arena of {} bytes",
                buf.size, buf.offset, buf.info, self.arena_bytes
            )));
        }
        // SAFETY: `offset + size <= arena_bytes` (checked above): the result points
        // into (or one past) the arena allocation.
        Ok(unsafe { self.base.add(buf.offset) })
    }

    /// [`Compiler::ptr`] for an access of `len` bytes (copies, host transfers,
    /// constants), also checked against the buffer's size.
    fn ptr_for(&self, b: popart_lower::BufferId, len: usize) -> Result<*mut u8, CpuError> {
        let p = self.ptr(b)?;
        if len > self.exe.buffer(b).size {
            return Err(internal(format!(
                "an access of {len} bytes to buffer {b:?} of {} bytes",
                self.exe.buffer(b).size
            )));
        }
        Ok(p)
    }

    fn new_block(&mut self) -> u32 {
        self.blocks.push(Vec::new());
        (self.blocks.len() - 1) as u32
    }

    fn block_of(&mut self, p: &Program) -> Result<u32, CpuError> {
        let b = self.new_block();
        let mut v = Vec::new();
        self.emit(p, &mut v)?;
        self.blocks[b as usize] = v;
        Ok(b)
    }

    /// Build the kernel of `k` and its argument pointers: (kernel, inputs,
    /// n_inputs, outputs, n_outputs) as [`Instr::Kernel`] holds them.
    fn compile_kernel(&mut self, k: &popart_lower::KernelCall) -> Result<(u32, u32, u32, u32, u32), CpuError> {
        let spec = KernelSpec {
            def: k.def,
            attrs: &k.attrs,
            inputs: k.inputs.iter().map(|a| (a.index, a.info.clone())).collect(),
            outputs: k.outputs.iter().map(|a| (a.index, a.info.clone())).collect(),
            check_indices: self.check_indices,
            weight_invariant: k.weight_invariant,
        };
        self.fallible |= (self.may_fail)(&spec);
        let kernel = (self.factory)(&spec)
            .map_err(|e| KernelError { op_type: e.op_type, reason: format!("{} (op `{}`)", e.reason, k.name) })?;
        let inputs = self.in_ptrs.len() as u32;
        let outputs = self.out_ptrs.len() as u32;
        // Each argument's buffer holds its info (`ptr_for`): the sizes
        // `KernelArgs` promises kernels.
        for a in &k.inputs {
            let p = self.ptr_for(a.buffer, a.info.nbytes())? as *const u8;
            self.in_ptrs.push(p);
            self.in_bufs.push(a.buffer);
        }
        for a in &k.outputs {
            let p = self.ptr_for(a.buffer, a.info.nbytes())?;
            self.out_ptrs.push(p);
        }
        let index = self.kernels.len() as u32;
        self.kernels.push(kernel);
        self.kernel_names.push(k.name.clone());
        self.kernel_types.push(k.def.op_type().to_string());
        Ok((index, inputs, k.inputs.len() as u32, outputs, k.outputs.len() as u32))
    }

    /// The kernel call `k`, a dynamic slice read in place (`plan`): its copy
    /// kernel built as the fallback, its readers found as they are emitted.
    fn emit_view(
        &mut self,
        k: &popart_lower::KernelCall,
        plan: views::ViewPlan,
        out: &mut Vec<Instr>,
    ) -> Result<(), CpuError> {
        let (kernel, inputs, n_inputs, outputs, n_outputs) = self.compile_kernel(k)?;
        fn arg(k: &popart_lower::KernelCall, input: bool, i: u32) -> Result<&popart_lower::Arg, CpuError> {
            let args = if input { &k.inputs } else { &k.outputs };
            args.iter()
                .find(|a| a.index == i)
                .ok_or_else(|| internal(format!("dynamic slice `{}` lacks an argument", k.name)))
        }
        let (src, index, result) = (arg(k, true, 0)?, arg(k, true, 1)?, arg(k, false, 0)?);
        let view = views::View {
            kernel,
            inputs,
            n_inputs,
            outputs,
            n_outputs,
            src: self.ptr_for(src.buffer, src.info.nbytes())?,
            index: self.ptr_for(index.buffer, index.info.nbytes())?,
            out: self.ptr_for(result.buffer, result.info.nbytes())?,
            buffer: result.buffer,
            plan,
            slots: Vec::new(),
        };
        out.push(Instr::View { view: self.views.len() as u32 });
        self.views.push(view);
        Ok(())
    }

    /// The place of update `update` (`plan`), its producer `k` compiled with
    /// its outputs from position `outputs` and its inputs from `first_input`.
    fn place(
        &self,
        k: &popart_lower::KernelCall,
        update: &Program,
        plan: places::PlacePlan,
        outputs: u32,
        first_input: u32,
    ) -> Result<places::Place, CpuError> {
        let Program::Execute(u) = update else { return Err(internal("a place's update is no kernel".into())) };
        let arg = |args: &[popart_lower::Arg], i: u32| {
            args.iter()
                .find(|a| a.index == i)
                .cloned()
                .ok_or_else(|| internal(format!("`{}` lacks an argument", u.name)))
        };
        let (stash, index, x) = (arg(&u.inputs, 0)?, arg(&u.inputs, 1)?, arg(&u.inputs, 2)?);
        let at =
            k.outputs.iter().position(|o| o.index == plan.output).ok_or_else(|| internal("no placed output".into()))?;
        let sb = self.exe.buffer(stash.buffer);
        Ok(places::Place {
            stash: self.ptr_for(stash.buffer, stash.info.nbytes())?,
            index: self.ptr_for(index.buffer, index.info.nbytes())?,
            own: self.ptr_for(x.buffer, x.info.nbytes())?,
            buffer: x.buffer,
            stash_span: (sb.offset, sb.offset + sb.size),
            block: plan.block,
            out_slot: outputs + at as u32,
            in_range: (first_input, first_input),
            slots: Vec::new(),
            enabled: true,
            placed: false,
        })
    }

    fn emit(&mut self, p: &Program, out: &mut Vec<Instr>) -> Result<(), CpuError> {
        match p {
            Program::Sequence(v) => {
                // Updates written in place: (the update's position, its plan).
                let plans: Vec<(usize, places::PlacePlan)> =
                    (0..v.len()).filter_map(|at| Some((at, places::plan(self.exe, &self.refs, v, at)?))).collect();
                let mut place_of = vec![None; v.len()];
                for (i, c) in v.iter().enumerate() {
                    let producing: Vec<&(usize, places::PlacePlan)> =
                        plans.iter().filter(|(_, p)| p.producer == i).collect();
                    match (c, views::plan(self.exe, &self.refs, v, i)) {
                        (Program::Execute(k), Some(plan)) => self.emit_view(k, plan, out)?,
                        (Program::Execute(k), None) if !producing.is_empty() => {
                            let first_input = self.in_ptrs.len() as u32;
                            let (kernel, inputs, n_inputs, outputs, n_outputs) = self.compile_kernel(k)?;
                            for &&(at, plan) in &producing {
                                place_of[at] = Some(self.places.len() as u32);
                                out.push(Instr::Place { place: self.places.len() as u32 });
                                self.places.push(self.place(k, &v[at], plan, outputs, first_input)?);
                            }
                            out.push(Instr::Kernel { kernel, inputs, n_inputs, outputs, n_outputs });
                        }
                        (Program::Execute(k), None) if place_of[i].is_some() => {
                            let place = place_of[i].unwrap_or_default();
                            let (kernel, inputs, n_inputs, outputs, n_outputs) = self.compile_kernel(k)?;
                            if let Some(p) = self.places.get_mut(place as usize) {
                                p.in_range.1 = self.in_ptrs.len() as u32;
                            }
                            out.push(Instr::Placed { place, kernel, inputs, n_inputs, outputs, n_outputs });
                        }
                        _ => self.emit(c, out)?,
                    }
                }
            }
            Program::Execute(k) => {
                let (kernel, inputs, n_inputs, outputs, n_outputs) = self.compile_kernel(k)?;
                out.push(Instr::Kernel { kernel, inputs, n_inputs, outputs, n_outputs });
            }
            Program::Copy { src, dst, bytes } => {
                if *bytes > 0 {
                    if src == dst {
                        return Err(internal(format!("a copy of buffer {src:?} onto itself")));
                    }
                    out.push(Instr::Copy {
                        src: self.ptr_for(*src, *bytes)?,
                        dst: self.ptr_for(*dst, *bytes)?,
                        len: *bytes,
                    })
                }
            }
            Program::Call(f) => {
                let block =
                    *self.function_blocks.get(f.index()).ok_or_else(|| internal(format!("no function {f:?}")))?;
                out.push(Instr::Call { block })
            }
            Program::Repeat { count, body } => {
                let block = self.block_of(body)?;
                out.push(Instr::Repeat { count: *count, block });
            }
            Program::If { cond, then_branch, else_branch } => {
                let then_block = self.block_of(then_branch)?;
                let else_block = self.block_of(else_branch)?;
                if self.exe.buffers.get(cond.index()).is_none_or(|b| b.info.dtype != popart_ir::DataType::Bool) {
                    return Err(internal(format!("the condition buffer {cond:?} is not a bool")));
                }
                out.push(Instr::If { cond: self.ptr_for(*cond, 1)?, then_block, else_block });
            }
            Program::HostToDevice { stream, dst, .. } => {
                let len = self.stream_bytes(*stream)?;
                out.push(Instr::HostToDevice { stream: stream.0, dst: self.ptr_for(*dst, len)?, len })
            }
            Program::DeviceToHost { src, stream, .. } => {
                let len = self.stream_bytes(*stream)?;
                out.push(Instr::DeviceToHost { stream: stream.0, src: self.ptr_for(*src, len)?, len })
            }
            Program::RemoteLoad { buffer, offset, dst, .. } => {
                let (b, len, offset) = self.remote(*buffer, *offset)?;
                out.push(Instr::RemoteLoad { buffer: b, offset, dst: self.ptr_for(*dst, len)?, len })
            }
            Program::RemoteStore { src, buffer, offset, .. } => {
                let (b, len, offset) = self.remote(*buffer, *offset)?;
                if let Some(w) = self.remote_written.get_mut(b as usize) {
                    *w = true;
                }
                out.push(Instr::RemoteStore { src: self.ptr_for(*src, len)?, buffer: b, offset, len })
            }
            Program::HostToRemote { stream, buffer, entry } => {
                let (b, len, _) = self.remote(*buffer, RemoteOffset::Entry(*entry))?;
                if self.stream_bytes(*stream)? != len {
                    return Err(internal(format!(
                        "stream {stream:?} does not carry entries of remote buffer {buffer}"
                    )));
                }
                out.push(Instr::HostToRemote { stream: stream.0, buffer: b, entry: *entry, len })
            }
            Program::RemoteToHost { buffer, entry, stream } => {
                let (b, len, _) = self.remote(*buffer, RemoteOffset::Entry(*entry))?;
                if self.stream_bytes(*stream)? != len {
                    return Err(internal(format!(
                        "stream {stream:?} does not carry entries of remote buffer {buffer}"
                    )));
                }
                out.push(Instr::RemoteToHost { buffer: b, entry: *entry, stream: stream.0, len })
            }
            Program::CodeLoad { function, .. } => {
                if function.index() >= self.exe.functions.len() {
                    return Err(internal(format!("a code load of function {function:?}, which does not exist")));
                }
                out.push(Instr::CodeLoad)
            }
            Program::WriteConstant { constant } => {
                let c = self.exe.constants.get(*constant).ok_or_else(|| internal(format!("no constant {constant}")))?;
                let dst = self.ptr_for(c.buffer, c.data.bytes.len())?;
                let constant = u32::try_from(*constant).map_err(|_| internal("more than 2^32 constants".into()))?;
                out.push(Instr::WriteConstant { constant, dst })
            }
            other => {
                return Err(KernelError {
                    op_type: format!("{other:?}").split([' ', '(', '{']).next().unwrap_or("?").to_string(),
                    reason: "this program type is not supported by the cpu device".into(),
                }
                .into())
            }
        }
        Ok(())
    }

    /// Index and entry bytes of remote buffer `id`, and the offset of a transfer,
    /// checked: a constant entry in range, an offset tensor an int32 or uint32
    /// scalar buffer (a transfer that may fail).
    fn remote(&mut self, id: RemoteBufferId, offset: RemoteOffset) -> Result<(u32, usize, Offset), CpuError> {
        let r = self.exe.remote_buffer(id).ok_or_else(|| internal(format!("remote buffer {id} does not exist")))?;
        let offset = match offset {
            RemoteOffset::Entry(e) if e < r.entries => Offset::Entry(e),
            RemoteOffset::Entry(e) => {
                return Err(internal(format!("entry {e} of remote buffer {id} of {} entries", r.entries)))
            }
            RemoteOffset::Tensor(b) => {
                let info = &self.exe.buffer(b).info;
                let signed = match info.dtype {
                    popart_ir::DataType::Int32 => true,
                    popart_ir::DataType::Uint32 => false,
                    _ => {
                        return Err(internal(format!(
                            "the offset of remote buffer {id} is {info}, not a 32-bit integer"
                        )))
                    }
                };
                if info.nelms() != 1 {
                    return Err(internal(format!("the offset of remote buffer {id} is {info}, not a scalar")));
                }
                self.fallible = true;
                Offset::Tensor { ptr: self.ptr_for(b, 4)?, signed }
            }
        };
        Ok((id.0 - 1, r.info.nbytes(), offset))
    }

    /// Bytes of one element of stream `s`.
    fn stream_bytes(&self, s: StreamId) -> Result<usize, CpuError> {
        self.exe.streams.get(s.index()).map(|s| s.info.nbytes()).ok_or_else(|| internal(format!("no stream {s:?}")))
    }
}

impl CpuExecutor {
    /// Compile `exe`: allocate the arena, resolve every address and build every kernel.
    ///
    /// Errors: a kernel the factory cannot build ([`CpuError::Kernel`]), an
    /// arena or constant the allocator refuses ([`CpuError::OutOfMemory`]),
    /// and a malformed executable ([`CpuError::MalformedExecutable`]).
    pub fn new(exe: &Executable, factory: KernelFactory<'_>) -> Result<Self, CpuError> {
        Self::with_checks(exe, factory, false)
    }

    /// [`CpuExecutor::new`], building the kernels with run-time index checks
    /// when `check_indices` (see [`KernelSpec::check_indices`]).
    pub fn with_checks(exe: &Executable, factory: KernelFactory<'_>, check_indices: bool) -> Result<Self, CpuError> {
        Self::compile(exe, factory, check_indices, &|_| true)
    }

    /// [`CpuExecutor::with_checks`], told by `may_fail` which kernels may fail
    /// at run time: a program with such a kernel or a remote transfer at a
    /// run-time offset gets a copy of the state a failed run restores
    /// ([`CpuExecutor::may_fail`]).
    pub fn compile(
        exe: &Executable,
        factory: KernelFactory<'_>,
        check_indices: bool,
        may_fail: MayFail<'_>,
    ) -> Result<Self, CpuError> {
        let arena_bytes = exe.memory.arena_bytes;
        let arena = Arena::zeroed(arena_bytes)?;
        let base = arena.base();
        let mut constants = Vec::new();
        constants.try_reserve_exact(exe.constants.len()).map_err(|_| oom(exe.constants.len(), "the constant table"))?;
        for k in &exe.constants {
            let mut bytes = Vec::new();
            bytes.try_reserve_exact(k.data.bytes.len()).map_err(|_| oom(k.data.bytes.len(), "constant data"))?;
            bytes.extend_from_slice(&k.data.bytes);
            constants.push(bytes);
        }
        let mut remote = Vec::new();
        for r in &exe.remote_buffers {
            let n = r.checked_nbytes().ok_or_else(|| oom(usize::MAX, "a remote buffer"))?;
            remote.push(popart_ir::size::try_zeroed_bytes(n, "a remote buffer").map_err(CpuError::from)?);
        }
        let mut c = Compiler {
            exe,
            base,
            arena_bytes,
            check_indices,
            factory,
            may_fail,
            fallible: false,
            remote_written: vec![false; exe.remote_buffers.len()],
            blocks: Vec::new(),
            function_blocks: Vec::new(),
            kernels: Vec::new(),
            kernel_names: Vec::new(),
            kernel_types: Vec::new(),
            in_ptrs: Vec::new(),
            out_ptrs: Vec::new(),
            refs: views::count_refs(exe),
            views: Vec::new(),
            places: Vec::new(),
            in_bufs: Vec::new(),
        };
        // Reserve a block per function first so calls can refer to any of them.
        for _ in &exe.functions {
            let b = c.new_block();
            c.function_blocks.push(b);
        }
        for (i, f) in exe.functions.iter().enumerate() {
            if f.id.index() != i {
                return Err(internal(format!("function {:?} listed at position {i}", f.id)));
            }
            let mut v = Vec::new();
            c.emit(&f.body, &mut v)?;
            c.blocks[c.function_blocks[i] as usize] = v;
        }
        let p = &exe.programs;
        let entry = [
            c.block_of(&p.init)?,
            c.block_of(&p.weights_from_host)?,
            c.block_of(&p.weights_to_host)?,
            c.block_of(&p.main)?,
        ];
        // Each view's readers: every input pointer of its slice's buffer
        // (`views::plan` checked these are the only references to it).
        for (slot, b) in c.in_bufs.iter().enumerate() {
            for v in c.views.iter_mut().filter(|v| v.buffer == *b) {
                v.slots.push(slot as u32);
            }
            for p in c.places.iter_mut().filter(|p| p.buffer == *b) {
                p.slots.push(slot as u32);
            }
        }
        // A slice of a stash read in place while its block is being written early.
        let view_spans: Vec<(Vec<u32>, (usize, usize))> = c
            .views
            .iter()
            .map(|v| {
                let lo = v.src as usize - base as usize;
                (v.slots.clone(), (lo, lo + (v.plan.dim.max(0) as usize).saturating_mul(v.plan.step_bytes)))
            })
            .collect();
        places::disable_overlapping_views(&mut c.places, &view_spans);
        let used_streams = entry.map(|b| Self::streams_of(&c.blocks, b));
        if exe.memory.permanent_bytes > arena_bytes {
            return Err(internal(format!(
                "{} permanent bytes in an arena of {arena_bytes}",
                exe.memory.permanent_bytes
            )));
        }
        let saved = match c.fallible {
            true => Some(snapshot::Saved::allocate(exe.memory.permanent_bytes, &remote, &c.remote_written)?),
            false => None,
        };
        let kernels_per_run = entry.map(|b| kernels_in(&c.blocks, b, 0));
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
            views: c.views,
            places: c.places,
            constants,
            streams: vec![StreamSlot::UNBOUND; exe.streams.len()],
            stream_bytes: exe.streams.iter().map(|s| s.info.nbytes()).collect(),
            remote,
            remote_entry_bytes: exe.remote_buffers.iter().map(|r| r.info.nbytes()).collect(),
            remote_entries: exe.remote_buffers.iter().map(|r| r.entries).collect(),
            counters: ExecCounters::default(),
            profile: Vec::new(),
            trace: Vec::new(),
            tracing: false,
            trace_dropped: 0,
            kernels_per_run,
            used_streams,
            saved,
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

    /// Number of dynamic slices read in place (their readers pointed into the
    /// sliced tensor at run time, no copy; see the `views` module).
    pub fn num_views(&self) -> usize {
        self.views.len()
    }

    /// Number of dynamic updates written in place (their producers write the
    /// block, no copy; see the `places` module), of which `.1` can be taken
    /// (the others always copy).
    pub fn num_places(&self) -> (usize, usize) {
        (self.places.len(), self.places.iter().filter(|p| p.enabled).count())
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

    /// Turn the kernel timeline on (clearing earlier spans) or off (freeing
    /// them). While on, every kernel execution is recorded as a [`KernelSpan`]
    /// in a buffer that each [`CpuExecutor::run`] extends before running, so a
    /// step never allocates; spans beyond [`MAX_TRACE_SPANS`] are dropped.
    pub fn set_tracing(&mut self, on: bool) {
        self.tracing = on;
        self.trace = Vec::new();
        self.trace_dropped = 0;
    }

    /// The kernel spans recorded since tracing was turned on, in execution order.
    pub fn trace(&self) -> &[KernelSpan] {
        &self.trace
    }

    /// Kernel spans not recorded (the buffer was full).
    pub fn trace_dropped(&self) -> u64 {
        self.trace_dropped
    }

    /// The name of compiled kernel `kernel` (its op's, scoped), if it exists.
    pub fn kernel_name(&self, kernel: u32) -> Option<&str> {
        self.kernel_names.get(kernel as usize).map(String::as_str)
    }

    /// The op type of compiled kernel `kernel`, if it exists.
    pub fn kernel_type(&self, kernel: u32) -> Option<&str> {
        self.kernel_types.get(kernel as usize).map(String::as_str)
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

    /// Fill device memory (the arena and streaming memory) with zeros (what a
    /// fresh attach sees).
    pub fn clear_memory(&mut self) {
        self.arena.clear();
        self.remote.iter_mut().for_each(|r| r.fill(0));
    }

    /// Check that `offset..offset + len` lies within the arena.
    fn arena_range(&self, offset: usize, len: usize) -> Result<(), BindError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.arena_bytes => Ok(()),
            _ => Err(BindError::OutsideArena { offset, len, arena_bytes: self.arena_bytes }),
        }
    }

    /// Overwrite device memory at `offset` with `bytes` (single-variable writes);
    /// a range outside the arena is an error.
    pub fn write_buffer(&mut self, offset: usize, bytes: &[u8]) -> Result<(), BindError> {
        self.arena_range(offset, bytes.len())?;
        // SAFETY: checked to lie within the arena; no program is running (`&mut self`).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.arena.base().add(offset), bytes.len()) };
        Ok(())
    }

    /// Device memory at `offset`, `len` bytes; a range outside the arena is an error.
    pub fn read_buffer(&self, offset: usize, len: usize) -> Result<&[u8], BindError> {
        self.arena_range(offset, len)?;
        // SAFETY: checked to lie within the arena, which is initialised memory.
        Ok(unsafe { std::slice::from_raw_parts(self.arena.base().add(offset) as *const u8, len) })
    }

    /// Run one engine program. Every stream it transfers must be bound (else
    /// [`ExecError::UnboundStream`] before anything runs); a kernel built with
    /// run-time checks may fail ([`ExecError::Kernel`]), and a remote transfer
    /// at a run-time offset ([`ExecError::RemoteOffset`]). Either stops the
    /// program at once, leaving device memory as the instructions before left
    /// it ([`CpuExecutor::restore_state`] undoes them).
    pub fn run(&mut self, program: EngineProgram) -> Result<(), ExecError> {
        if let Some(&stream) =
            self.used_streams[program as usize].iter().find(|&&s| self.streams[s as usize].host.is_null())
        {
            return Err(ExecError::UnboundStream { stream });
        }
        let block = self.entry[program as usize];
        if self.tracing {
            // Room for this run's spans, outside the run.
            let room = MAX_TRACE_SPANS.saturating_sub(self.trace.len());
            let want = usize::try_from(self.kernels_per_run[program as usize]).unwrap_or(usize::MAX).min(room);
            self.trace.reserve(want);
        }
        self.exec(block).map_err(|stop| match stop {
            Stop::Kernel(k, error) => ExecError::Kernel {
                op: self.kernel_names.get(k as usize).cloned().unwrap_or_default(),
                op_type: self.kernel_types.get(k as usize).cloned().unwrap_or_default(),
                error,
            },
            Stop::UnboundStream(stream) => ExecError::UnboundStream { stream },
            Stop::RemoteOffset(k, offset) => ExecError::RemoteOffset {
                buffer: k + 1,
                offset,
                entries: self.remote_entries.get(k as usize).copied().unwrap_or(0),
            },
        })
    }

    /// Run compiled kernel `kernel` on its argument pointers (positions
    /// `inputs..inputs + n_inputs` and `outputs..outputs + n_outputs`).
    fn run_kernel(
        &mut self,
        kernel: u32,
        inputs: u32,
        n_inputs: u32,
        outputs: u32,
        n_outputs: u32,
    ) -> Result<(), Stop> {
        let (a, b) = (inputs as usize, outputs as usize);
        let args = KernelArgs {
            inputs: &self.in_ptrs[a..a + n_inputs as usize],
            outputs: &self.out_ptrs[b..b + n_outputs as usize],
        };
        let r = if self.profile.is_empty() && !self.tracing {
            // SAFETY: every pointer was checked at compile time to address
            // a buffer within the arena holding its info's bytes
            // (`ptr_for`); the memory plan keeps outputs disjoint from
            // inputs except declared aliases; the arena is 64-byte
            // aligned with 64-byte aligned offsets.
            unsafe { self.kernels[kernel as usize].run(&args) }
        } else {
            let start_ns = crate::team::clock_ns();
            // SAFETY: as above.
            let r = unsafe { self.kernels[kernel as usize].run(&args) };
            let end_ns = crate::team::clock_ns();
            if let Some(p) = self.profile.get_mut(kernel as usize) {
                p.0 += 1;
                p.1 += end_ns.saturating_sub(start_ns);
            }
            if self.tracing {
                // Never grows: `run` reserved the room.
                if self.trace.len() < self.trace.capacity() {
                    self.trace.push(KernelSpan { kernel, start_ns, end_ns });
                } else {
                    self.trace_dropped += 1;
                }
            }
            r
        };
        r.map_err(|e| Stop::Kernel(kernel, e))?;
        self.counters.kernels += 1;
        Ok(())
    }

    fn exec(&mut self, block: u32) -> Result<(), Stop> {
        // Block ids are made by the compiler (`new_block`): always in range.
        let n = self.blocks[block as usize].len();
        for i in 0..n {
            let instr = self.blocks[block as usize][i];
            match instr {
                Instr::Kernel { kernel, inputs, n_inputs, outputs, n_outputs } => {
                    self.run_kernel(kernel, inputs, n_inputs, outputs, n_outputs)?;
                }
                Instr::View { view } => {
                    let v = &self.views[view as usize];
                    // SAFETY: the view's pointers were compiled from its kernel's
                    // arguments (`Compiler::emit_view`).
                    let at = match unsafe { v.resolve() } {
                        Some(block) => {
                            self.counters.kernels += 1;
                            block
                        }
                        None => {
                            let (out, k) = (v.out, (v.kernel, v.inputs, v.n_inputs, v.outputs, v.n_outputs));
                            self.run_kernel(k.0, k.1, k.2, k.3, k.4)?;
                            out
                        }
                    };
                    for &slot in &self.views[view as usize].slots {
                        self.in_ptrs[slot as usize] = at;
                    }
                }
                Instr::Place { place } => {
                    let p = &self.places[place as usize];
                    // SAFETY: the place's pointers were compiled from its update's
                    // arguments (`Compiler::place`).
                    let (at, placed) = match unsafe { p.resolve() } {
                        Some(block) => (block, true),
                        None => (p.own, false),
                    };
                    self.out_ptrs[p.out_slot as usize] = at;
                    for &slot in &self.places[place as usize].slots {
                        self.in_ptrs[slot as usize] = at;
                    }
                    self.places[place as usize].placed = placed;
                }
                Instr::Placed { place, kernel, inputs, n_inputs, outputs, n_outputs } => {
                    if self.places[place as usize].placed {
                        self.counters.kernels += 1;
                    } else {
                        self.run_kernel(kernel, inputs, n_inputs, outputs, n_outputs)?;
                    }
                }
                Instr::Copy { src, dst, len } => {
                    // SAFETY: distinct buffers (checked at compile time), both holding
                    // `len` bytes within the arena (`ptr_for`).
                    unsafe { copy_bytes(src, dst, len) };
                    self.counters.copies += 1;
                }
                Instr::Call { block } => self.exec(block)?,
                Instr::Repeat { count, block } => {
                    for _ in 0..count {
                        self.exec(block)?;
                    }
                }
                Instr::If { cond, then_block, else_block } => {
                    // SAFETY: a one-byte bool buffer within the arena (checked at
                    // compile time); any byte value is read as a u8.
                    let c = unsafe { *cond } != 0;
                    self.exec(if c { then_block } else { else_block })?;
                }
                Instr::HostToDevice { stream, dst, len } => {
                    let s = &mut self.streams[stream as usize];
                    if s.host.is_null() {
                        return Err(Stop::UnboundStream(stream));
                    }
                    let at = s.next();
                    // SAFETY: `bind_stream` checked that the host memory holds
                    // element `(k % count) * stride + first` for every k; `len ==
                    // element_bytes` (both the stream's info bytes); `dst` holds
                    // `len` bytes within the arena (`ptr_for`).
                    unsafe { copy_bytes(s.host.add(at), dst, len) };
                    self.counters.host_to_device += 1;
                }
                Instr::DeviceToHost { stream, src, len } => {
                    let s = &mut self.streams[stream as usize];
                    if s.host.is_null() {
                        return Err(Stop::UnboundStream(stream));
                    }
                    let at = s.next();
                    // SAFETY: as above, for writes (the binding promises exclusive access).
                    unsafe { copy_bytes(src, s.host.add(at), len) };
                    self.counters.device_to_host += 1;
                }
                Instr::RemoteLoad { buffer, offset, dst, len } => {
                    let start = self.remote_start(buffer, offset, len)?;
                    // SAFETY: `remote_start` checked `start + len` lies within the
                    // remote buffer; `dst` holds `len` bytes of the arena (`ptr_for`).
                    unsafe { copy_bytes(self.remote[buffer as usize].as_ptr().add(start), dst, len) };
                    self.counters.remote_transfers += 1;
                }
                Instr::RemoteStore { src, buffer, offset, len } => {
                    let start = self.remote_start(buffer, offset, len)?;
                    // SAFETY: as above, the other way.
                    unsafe { copy_bytes(src, self.remote[buffer as usize].as_mut_ptr().add(start), len) };
                    self.counters.remote_transfers += 1;
                }
                Instr::HostToRemote { stream, buffer, entry, len } => {
                    let s = &mut self.streams[stream as usize];
                    if s.host.is_null() {
                        return Err(Stop::UnboundStream(stream));
                    }
                    let at = s.next();
                    let dst = &mut self.remote[buffer as usize][entry * len..(entry + 1) * len];
                    // SAFETY: `bind_stream` checked the host memory holds every
                    // element the cursor reaches, of `len` (= element_bytes) bytes.
                    unsafe { std::ptr::copy_nonoverlapping(s.host.add(at), dst.as_mut_ptr(), len) };
                }
                Instr::RemoteToHost { buffer, entry, stream, len } => {
                    let s = &mut self.streams[stream as usize];
                    if s.host.is_null() {
                        return Err(Stop::UnboundStream(stream));
                    }
                    let at = s.next();
                    let src = &self.remote[buffer as usize][entry * len..(entry + 1) * len];
                    // SAFETY: as above, for writes.
                    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), s.host.add(at), len) };
                }
                Instr::CodeLoad => self.counters.code_loads += 1,
                Instr::WriteConstant { constant, dst } => {
                    let data = &self.constants[constant as usize];
                    // SAFETY: the constant's buffer holds its bytes within the arena
                    // (`ptr_for` with the data's length, at compile time).
                    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
                }
            }
        }
        Ok(())
    }
}

/// Kernel executions of one run of `block` (repeats counted, the larger
/// branch of an `If`), saturating; `depth` bounds the recursion (calls nest
/// no deeper than the program's graphs).
fn kernels_in(blocks: &[Vec<Instr>], block: u32, depth: usize) -> u64 {
    if depth > 256 {
        return 0;
    }
    let count = |b: u32| kernels_in(blocks, b, depth + 1);
    blocks.get(block as usize).map_or(0, |instrs| {
        instrs.iter().fold(0u64, |n, i| {
            n.saturating_add(match *i {
                Instr::Kernel { .. } | Instr::View { .. } | Instr::Placed { .. } => 1,
                Instr::Call { block } => count(block),
                Instr::Repeat { count: times, block } => times.saturating_mul(count(block)),
                Instr::If { then_block, else_block, .. } => count(then_block).max(count(else_block)),
                _ => 0,
            })
        })
    })
}

/// [`CpuError::OutOfMemory`] for `requested` bytes of `what`.
fn oom(requested: usize, what: &str) -> CpuError {
    CpuError::OutOfMemory { requested, what: what.to_string() }
}

mod error;
pub use error::{BindError, ExecError};
mod arena;
mod places;
mod remote;
mod snapshot;
mod streams;
mod views;
#[cfg(test)]
use arena::PAR_COPY_MIN;
use arena::{copy_bytes, Arena};

#[cfg(test)]
mod tests;
