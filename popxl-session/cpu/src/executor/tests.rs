//! Executor tests with a few trivial kernels of their own (f32 only).

use super::*;
use crate::kernel::KernelResult;

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
use popart_ir::ops::control::{IfAttrs, RepeatAttrs};
use popart_ir::ops::io::StreamAttrs;
use popart_ir::{
    Attributes, DataType, HostTensor, Ir, OpAttrs, OpId, StreamDirection, TensorId, TensorInfo, TensorKind,
};

struct AddF32(usize);
impl Kernel for AddF32 {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let (a, b) = (args.inputs[0] as *const f32, args.inputs[1] as *const f32);
        let y = args.outputs[0] as *mut f32;
        for i in 0..self.0 {
            // SAFETY: the three buffers hold the kernel's `self.0` floats (`KernelArgs`).
            unsafe { *y.add(i) = *a.add(i) + *b.add(i) };
        }
        Ok(())
    }
}
struct AddInplaceF32(usize);
impl Kernel for AddInplaceF32 {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let (b, y) = (args.inputs[1] as *const f32, args.outputs[0] as *mut f32);
        for i in 0..self.0 {
            // SAFETY: both buffers hold the kernel's `self.0` floats (`KernelArgs`).
            unsafe { *y.add(i) += *b.add(i) };
        }
        Ok(())
    }
}
struct GreaterScalar;
impl Kernel for GreaterScalar {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        // SAFETY: the inputs are scalar floats and the output a bool byte (`KernelArgs`).
        unsafe {
            let (a, b) = (*(args.inputs[0] as *const f32), *(args.inputs[1] as *const f32));
            *args.outputs[0] = (a > b) as u8;
        }
        Ok(())
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
    StreamAttrs { stream: name.into() }.to_attrs()
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
    let zero =
        ir.main_graph_mut().add_tensor("zero", info.clone(), TensorKind::Constant(HostTensor::zeros(info))).unwrap();
    let r = ir
        .create_op(
            main,
            "Repeat",
            RepeatAttrs { graph: body, count: 3, modified: vec![] }.to_attrs(),
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
    ex.run(EngineProgram::Init).unwrap();
    // Two elements for three pops: the third pop wraps to element 0.
    let mut input = bytes(&[1.0, 2.0, 10.0, 20.0]);
    let mut output = vec![0u8; 8];
    // SAFETY: both buffers hold the elements bound and outlive the run.
    unsafe {
        ex.bind_stream(StreamId(0), input.as_mut_ptr(), input.len(), 2).unwrap();
        ex.bind_stream(StreamId(1), output.as_mut_ptr(), output.len(), 1).unwrap();
    }
    ex.run(EngineProgram::Main).unwrap();
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
    let CpuError::Kernel(err) = CpuExecutor::new(&exe, &factory).unwrap_err() else { panic!("a kernel error") };
    assert_eq!(err.op_type, "Exp");
    assert!(err.reason.contains("main/my_exp"), "{}", err.reason);
}

#[test]
fn binding_checks_sizes() {
    let exe = popart_lower::lower(&repeat_ir()).unwrap();
    let mut ex = CpuExecutor::new(&exe, &factory).unwrap();
    let mut small = vec![0u8; 4];
    // SAFETY: the bindings are refused (and `small` outlives the executor's use).
    let err = unsafe { ex.bind_stream(StreamId(0), small.as_mut_ptr(), 4, 1) }.unwrap_err();
    assert_eq!(err, BindError::TooSmall { stream: 0, got: 4, count: 1, element_bytes: 8 });
    // SAFETY: as above.
    let err = unsafe { ex.bind_stream(StreamId(9), small.as_mut_ptr(), 4, 1) };
    assert_eq!(err, Err(BindError::UnknownStream(9)));
}

#[test]
fn if_runs_one_branch() {
    // out = (a > b) ? a + b : a (+)= b in place on a copy.
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let s = f32s(1);
    for (n, d) in [
        ("in_a", StreamDirection::HostToDevice),
        ("in_b", StreamDirection::HostToDevice),
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
    let la = ir.create_op(main, "HostLoad", stream_attrs("in_a"), &[], "la").unwrap();
    let lb = ir.create_op(main, "HostLoad", stream_attrs("in_b"), &[], "lb").unwrap();
    let a = ir.main_graph().op(la).unwrap().output(0).unwrap();
    let b = ir.main_graph().op(lb).unwrap().output(0).unwrap();
    let gt = ir.create_op(main, "Greater", Attributes::new(), &[(0, a), (1, b)], "gt").unwrap();
    let c = ir.main_graph().op(gt).unwrap().output(0).unwrap();
    let attrs =
        IfAttrs { then_graph: then_g, else_graph: else_g, then_inputs: vec![1, 2], else_inputs: vec![1, 2] }.to_attrs();
    let iff = ir.create_op(main, "If", attrs, &[(0, c), (1, a), (2, b)], "if").unwrap();
    let o = ir.main_graph().op(iff).unwrap().output(0).unwrap();
    ir.create_op(main, "HostStore", stream_attrs("out"), &[(0, o)], "store").unwrap();
    ir.verify().unwrap();
    let exe = popart_lower::lower(&ir).unwrap();
    let mut ex = CpuExecutor::new(&exe, &factory).unwrap();
    for (a, b, want) in [(5.0f32, 1.0f32, 6.0f32), (1.0, 5.0, 11.0)] {
        let (mut ia, mut ib, mut out) = (bytes(&[a]), bytes(&[b]), vec![0u8; 4]);
        // SAFETY: each buffer holds one f32 and outlives the run.
        unsafe {
            ex.bind_stream(StreamId(0), ia.as_mut_ptr(), 4, 1).unwrap();
            ex.bind_stream(StreamId(1), ib.as_mut_ptr(), 4, 1).unwrap();
            ex.bind_stream(StreamId(2), out.as_mut_ptr(), 4, 1).unwrap();
        }
        ex.run(EngineProgram::Main).unwrap();
        ex.unbind_streams();
        assert_eq!(floats(&out), vec![want], "a={a} b={b}");
    }
}

/// main: y = s + s with s = dynamic_slice(w, idx) of `rows` rows of the
/// stacked constant w [4, 16] (w[i, j] = 100 i + j): the slice is read in
/// place, unless an offset needs the copy (out of range, or wrapping).
fn slice_ir(rows: i64) -> Ir {
    use popart_ir::ops::indexing::DynamicSliceAttrs;
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let w_info = TensorInfo::new(DataType::Float32, [4, 16]);
    let w: Vec<f32> = (0..64).map(|i| (100 * (i / 16) + i % 16) as f32).collect();
    let w = ir
        .main_graph_mut()
        .add_tensor("w", w_info.clone(), TensorKind::Constant(HostTensor { info: w_info, bytes: bytes(&w) }))
        .unwrap();
    let idx_info = TensorInfo::new(DataType::Int32, [1]);
    let y_info = TensorInfo::new(DataType::Float32, [rows as usize, 16]);
    let g = ir.main_graph_mut();
    g.add_tensor("idx", idx_info, TensorKind::Stream(StreamDirection::HostToDevice)).unwrap();
    g.add_tensor("y", y_info, TensorKind::Stream(StreamDirection::DeviceToHost)).unwrap();
    let l = ir.create_op(main, "HostLoad", stream_attrs("idx"), &[], "load").unwrap();
    let idx = ir.main_graph().op(l).unwrap().output(0).unwrap();
    let attrs = DynamicSliceAttrs { axes: vec![0], sizes: vec![rows], no_overlap: false }.to_attrs();
    let ds = ir.create_op(main, "DynamicSlice", attrs, &[(0, w), (1, idx)], "slice").unwrap();
    let s = ir.main_graph().op(ds).unwrap().output(0).unwrap();
    let add = ir.create_op(main, "Add", Attributes::new(), &[(0, s), (1, s)], "twice").unwrap();
    let y = ir.main_graph().op(add).unwrap().output(0).unwrap();
    ir.create_op(main, "HostStore", stream_attrs("y"), &[(0, y)], "store").unwrap();
    ir.verify().unwrap();
    ir
}

#[test]
fn dynamic_slices_are_read_in_place_with_the_kernels_values() {
    let real = |spec: &KernelSpec<'_>| crate::kernels::build_kernel(spec);
    for rows in [1i64, 2] {
        let exe = popart_lower::lower(&slice_ir(rows)).unwrap();
        let mut ex = CpuExecutor::new(&exe, &real).unwrap();
        assert_eq!(ex.num_views(), 1, "the slice of {rows} row(s) is a view");
        ex.run(EngineProgram::Init).unwrap();
        // In range (a view), the last fitting row, out of range (popops: row 0)
        // and, for two rows, a slice that wraps (rows 3 and 0): the copy.
        for at in [1i32, 4 - rows as i32, 7, -1, 3] {
            let mut idx = at.to_le_bytes().to_vec();
            let mut out = vec![0u8; rows as usize * 64];
            // SAFETY: the buffers hold one element each and outlive the run.
            unsafe {
                ex.bind_stream(StreamId(0), idx.as_mut_ptr(), 4, 1).unwrap();
                ex.bind_stream(StreamId(1), out.as_mut_ptr(), out.len(), 1).unwrap();
            }
            ex.run(EngineProgram::Main).unwrap();
            ex.unbind_streams();
            let start = if (0..4).contains(&at) { at as usize } else { 0 };
            let want: Vec<f32> = (0..rows as usize)
                .flat_map(|r| (0..16).map(move |j| 2.0 * (100 * ((start + r) % 4) + j) as f32))
                .collect();
            assert_eq!(floats(&out), want, "{rows} row(s) at {at}");
        }
    }
}

#[test]
fn a_slice_another_op_writes_is_copied() {
    // An in-place add into the slice: reading in place would write `w`.
    use popart_ir::ops::indexing::DynamicSliceAttrs;
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let info = TensorInfo::new(DataType::Float32, [4, 16]);
    let w = ir.main_graph_mut().add_tensor("w", info.clone(), TensorKind::Constant(HostTensor::zeros(info))).unwrap();
    let idx_info = TensorInfo::new(DataType::Int32, [1]);
    let z = ir
        .main_graph_mut()
        .add_tensor("idx", idx_info.clone(), TensorKind::Constant(HostTensor::zeros(idx_info)))
        .unwrap();
    let attrs = DynamicSliceAttrs { axes: vec![0], sizes: vec![1], no_overlap: false }.to_attrs();
    let ds = ir.create_op(main, "DynamicSlice", attrs, &[(0, w), (1, z)], "slice").unwrap();
    let s = ir.main_graph().op(ds).unwrap().output(0).unwrap();
    let add = ir.create_op(main, "AddInplace", Attributes::new(), &[(0, s), (1, s)], "twice").unwrap();
    let y = ir.main_graph().op(add).unwrap().output(0).unwrap();
    ir.main_graph_mut()
        .add_tensor("y", TensorInfo::new(DataType::Float32, [1, 16]), TensorKind::Stream(StreamDirection::DeviceToHost))
        .unwrap();
    ir.create_op(main, "HostStore", stream_attrs("y"), &[(0, y)], "store").unwrap();
    ir.verify().unwrap();
    let exe = popart_lower::lower(&ir).unwrap();
    let real = |spec: &KernelSpec<'_>| crate::kernels::build_kernel(spec);
    assert_eq!(CpuExecutor::new(&exe, &real).unwrap().num_views(), 0);
}

/// main: x = a + a (a [1, 16] = 0..16), st = dynamic_update_inplace(zeros
/// [4, 16], idx, x), y = x + x read after the update: `x` is written straight
/// into the row of `st` when the offset is in range.
fn update_ir() -> Ir {
    use popart_ir::ops::grad::InitAttrs;
    use popart_ir::ops::indexing::DynamicSliceAttrs;
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let a_info = TensorInfo::new(DataType::Float32, [1, 16]);
    let a: Vec<f32> = (0..16).map(|j| j as f32).collect();
    let a = ir
        .main_graph_mut()
        .add_tensor("a", a_info.clone(), TensorKind::Constant(HostTensor { info: a_info.clone(), bytes: bytes(&a) }))
        .unwrap();
    let g = ir.main_graph_mut();
    g.add_tensor("idx", TensorInfo::new(DataType::Int32, [1]), TensorKind::Stream(StreamDirection::HostToDevice))
        .unwrap();
    let st_info = TensorInfo::new(DataType::Float32, [4, 16]);
    g.add_tensor("st", st_info, TensorKind::Stream(StreamDirection::DeviceToHost)).unwrap();
    g.add_tensor("y", a_info, TensorKind::Stream(StreamDirection::DeviceToHost)).unwrap();
    let init = InitAttrs { shape: vec![4, 16], dtype: DataType::Float32, init_type: None }.to_attrs();
    let z_op = ir.create_op(main, "Init", init, &[], "zeros").unwrap();
    let z = ir.main_graph().op(z_op).unwrap().output(0).unwrap();
    let l = ir.create_op(main, "HostLoad", stream_attrs("idx"), &[], "load").unwrap();
    let idx = ir.main_graph().op(l).unwrap().output(0).unwrap();
    let x_op = ir.create_op(main, "Add", Attributes::new(), &[(0, a), (1, a)], "x").unwrap();
    let x = ir.main_graph().op(x_op).unwrap().output(0).unwrap();
    let attrs = DynamicSliceAttrs { axes: vec![0], sizes: vec![1], no_overlap: false }.to_attrs();
    let u = ir.create_op(main, "DynamicUpdateInplace", attrs, &[(0, z), (1, idx), (2, x)], "update").unwrap();
    let st = ir.main_graph().op(u).unwrap().output(0).unwrap();
    let y_op = ir.create_op(main, "Add", Attributes::new(), &[(0, x), (1, x)], "y").unwrap();
    let y = ir.main_graph().op(y_op).unwrap().output(0).unwrap();
    // The zeros first, the reader after the update and before the stash is
    // stored (as a repeat's body runs).
    ir.main_graph_mut().add_topo_con(z_op, x_op).unwrap();
    ir.main_graph_mut().add_topo_con(u, y_op).unwrap();
    let store = ir.create_op(main, "HostStore", stream_attrs("st"), &[(0, st)], "store_st").unwrap();
    ir.main_graph_mut().add_topo_con(y_op, store).unwrap();
    ir.create_op(main, "HostStore", stream_attrs("y"), &[(0, y)], "store_y").unwrap();
    ir.verify().unwrap();
    ir
}

#[test]
fn dynamic_updates_are_written_in_place_with_the_kernels_values() {
    let real = |spec: &KernelSpec<'_>| crate::kernels::build_kernel(spec);
    let exe = popart_lower::lower(&update_ir()).unwrap();
    let mut ex = CpuExecutor::new(&exe, &real).unwrap();
    assert_eq!(ex.num_places(), (1, 1), "the update is written in place");
    ex.run(EngineProgram::Init).unwrap();
    // In range (in place), out of range (popops: row 0, the copy), in place again.
    for at in [1i32, 3, 7, -1, 2] {
        let mut idx = at.to_le_bytes().to_vec();
        let (mut st, mut y) = (vec![0u8; 4 * 64], vec![0u8; 64]);
        // SAFETY: the buffers hold one element each and outlive the run.
        unsafe {
            ex.bind_stream(StreamId(0), idx.as_mut_ptr(), 4, 1).unwrap();
            ex.bind_stream(StreamId(1), st.as_mut_ptr(), st.len(), 1).unwrap();
            ex.bind_stream(StreamId(2), y.as_mut_ptr(), y.len(), 1).unwrap();
        }
        ex.run(EngineProgram::Main).unwrap();
        ex.unbind_streams();
        let row = if (0..4).contains(&at) { at as usize } else { 0 };
        let want: Vec<f32> = (0..64).map(|e| if e / 16 == row { 2.0 * (e % 16) as f32 } else { 0.0 }).collect();
        assert_eq!(floats(&st), want, "the stash at {at}");
        assert_eq!(floats(&y), (0..16).map(|j| 4.0 * j as f32).collect::<Vec<_>>(), "the reader at {at}");
    }
}

/// [`update_ir`] with `reader(ir, x, idx, stash)`'s ops (returning the first
/// and last of them and the last one's output, `shape`) between the producer
/// and the update, that output stored after `y`: only kernels up to `x`'s
/// last reader, so the reader alone decides. Returns the executor.
fn update_with_reader(
    shape: [usize; 2],
    reader: impl FnOnce(&mut Ir, TensorId, TensorId, TensorId) -> (OpId, OpId, TensorId),
) -> CpuExecutor {
    let mut ir = update_ir();
    let main = ir.main_graph_id();
    let g = ir.main_graph();
    let find = |name: &str| g.ops().find(|o| o.name == name).unwrap().id;
    let (x_op, u_op, y_op) = (find("x"), find("update"), find("y"));
    let input = |i: u32| g.op(u_op).unwrap().input(i).unwrap();
    let (stash, idx, x) = (input(0), input(1), input(2));
    let (first, last, out) = reader(&mut ir, x, idx, stash);
    ir.main_graph_mut().add_topo_con(x_op, first).unwrap();
    ir.main_graph_mut().add_topo_con(last, u_op).unwrap();
    let info = TensorInfo::new(DataType::Float32, shape);
    ir.main_graph_mut().add_tensor("s", info, TensorKind::Stream(StreamDirection::DeviceToHost)).unwrap();
    let store = ir.create_op(main, "HostStore", stream_attrs("s"), &[(0, out)], "store_s").unwrap();
    ir.main_graph_mut().add_topo_con(y_op, store).unwrap();
    ir.verify().unwrap();
    let exe = popart_lower::lower(&ir).unwrap();
    let real = |spec: &KernelSpec<'_>| crate::kernels::build_kernel(spec);
    CpuExecutor::new(&exe, &real).unwrap()
}

#[test]
fn an_update_whose_stash_is_read_before_it_copies() {
    // The stash read between the producer and the update: writing the block
    // early would change what that reader sees.
    let ex = update_with_reader([4, 16], |ir, _, _, stash| {
        let main = ir.main_graph_id();
        let r = ir.create_op(main, "Add", Attributes::new(), &[(0, stash), (1, stash)], "reads_stash").unwrap();
        (r, r, ir.main_graph().op(r).unwrap().output(0).unwrap())
    });
    assert_eq!(ex.num_places().0, 0);
}

#[test]
fn an_update_whose_tensor_is_sliced_in_place_copies() {
    // y = dynamic_slice(x, idx) read in place: its view points into `x`'s own
    // buffer, which a placed producer would not write.
    use popart_ir::ops::indexing::DynamicSliceAttrs;
    let ex = update_with_reader([1, 16], |ir, x, idx, _| {
        let main = ir.main_graph_id();
        let attrs = DynamicSliceAttrs { axes: vec![0], sizes: vec![1], no_overlap: false }.to_attrs();
        let ds = ir.create_op(main, "DynamicSlice", attrs, &[(0, x), (1, idx)], "slice_x").unwrap();
        let s = ir.main_graph().op(ds).unwrap().output(0).unwrap();
        let r = ir.create_op(main, "Add", Attributes::new(), &[(0, s), (1, s)], "reads_slice").unwrap();
        (ds, r, ir.main_graph().op(r).unwrap().output(0).unwrap())
    });
    assert_eq!((ex.num_views(), ex.num_places().0), (1, 0));
}
