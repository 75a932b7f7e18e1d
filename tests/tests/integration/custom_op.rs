//! The `custom_op` example, run as a test: a custom op (leaky ReLU) registered from
//! outside the library crates, differentiated, run in a session, rewritten by a
//! custom pattern and round-tripped through the text form, all checked against
//! reference values computed in the example (it returns an error on a mismatch).

#[allow(clippy::module_inception)]
#[path = "../../../popxl-session/examples/custom_op.rs"]
mod custom_op;

#[test]
fn custom_op_example_checks_out() {
    custom_op::main().expect("the custom_op example's checks");
}

/// Custom ops whose declarations do not fit their shapes: `hostile.Grow*`
/// doubles its input (`[n] -> [2n]`) while declaring the output a view of the
/// input (`Alias::copy`: `OpFlags::VIEW`), an alias of it (`Alias::region`) or
/// both (`Alias::identical`). Its kernel
/// trusts the declared shapes (reads `n`, writes `2n` through the pointers it is
/// given), so any buffer smaller than a declared shape would be overrun.
mod hostile {
    use popart_ir::{Alias, InferContext, OpDef, Result as IrResult, TensorInfo};
    use popxl_session::cpu::kernel::{Kernel, KernelArgs, KernelError, KernelResult, KernelSpec};

    /// Variant `K`: 0 a view, 1 an alias, 2 both, 3 an alias naming ports that
    /// do not exist (one Rust type per registered op type).
    pub struct Grow<const K: u8>;

    impl<const K: u8> Grow<K> {
        pub const NAMES: [&'static str; 4] =
            ["hostile.GrowView", "hostile.GrowAlias", "hostile.GrowViewAlias", "hostile.GrowAliasMissing"];
    }

    impl<const K: u8> OpDef for Grow<K> {
        fn op_type(&self) -> &'static str {
            Self::NAMES[K as usize]
        }
        fn infer(&self, ctx: &InferContext<'_>) -> IrResult<Vec<TensorInfo>> {
            let x = ctx.input(0)?;
            Ok(vec![TensorInfo::new(x.dtype, [x.nelms() * 2])])
        }
        fn aliases(&self, _: &popart_ir::Attributes) -> Vec<Alias> {
            [
                vec![Alias::copy(0, 0)],
                vec![Alias::region(0, 0)],
                vec![Alias::identical(0, 0)],
                vec![Alias::region(3, 5)],
            ][K as usize]
                .clone()
        }
    }

    /// `y[i] = x[i % n]` for the declared `n` and `2n`.
    struct GrowKernel {
        n: usize,
    }

    impl Kernel for GrowKernel {
        unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
            // SAFETY: the executor gives buffers holding the declared infos: `n` inputs, `2n` outputs.
            let x: Vec<f32> = (0..self.n).map(|i| unsafe { *(args.inputs[0] as *const f32).add(i) }).collect();
            // SAFETY: as above.
            let y = unsafe { std::slice::from_raw_parts_mut(args.outputs[0] as *mut f32, 2 * self.n) };
            for (i, v) in y.iter_mut().enumerate() {
                *v = x[i % self.n];
            }
            Ok(())
        }
    }

    pub fn build(spec: &KernelSpec<'_>) -> Result<Box<dyn Kernel>, KernelError> {
        Ok(Box::new(GrowKernel { n: spec.inputs[0].1.nelms() }))
    }
}

/// Whatever a custom op declares, the session either runs it within its
/// buffers (the values are the kernel's, the variable next to it intact) or
/// refuses it when it is built, with an error naming the op.
#[test]
fn custom_ops_declaring_views_or_aliases_larger_than_their_input_stay_in_bounds() {
    use hostile::Grow;
    use popart_ir::OpDef;
    use popxl::ops::OpBuilder;
    use popxl_session::{Session, SessionError};
    let defs: [&'static dyn OpDef; 4] = [&Grow::<0>, &Grow::<1>, &Grow::<2>, &Grow::<3>];
    for def in defs {
        popxl_session::register_custom_op(def, hostile::build).unwrap();
        let ir = popxl::Ir::new();
        let (out, guard_out) = {
            let _g = ir.main_graph().enter();
            let x = popxl::variable(vec![1.0f32, 2.0, 3.0], "x").unwrap();
            let guard = popxl::variable(vec![7.0f32; 8], "guard").unwrap();
            let y = OpBuilder::new("grow", def).input(0, &x).create1().unwrap();
            let z = popxl::ops::add(&y, &popxl::constant(0.5f32, "half").unwrap()).unwrap();
            let out = popxl::d2h_stream([6], popxl::float32, "out").unwrap();
            popxl::ops::host_store(&out, &z).unwrap();
            let guard_out = popxl::d2h_stream([8], popxl::float32, "guard_out").unwrap();
            popxl::ops::host_store(&guard_out, &guard).unwrap();
            (out, guard_out)
        };
        match Session::new(ir, "cpu") {
            Ok(mut s) => {
                let o = s.scope(|s| s.run(&Default::default())).unwrap();
                assert_eq!(o[&out].to_f64_vec(), vec![1.5, 2.5, 3.5, 1.5, 2.5, 3.5], "{}", def.op_type());
                assert_eq!(o[&guard_out].to_f64_vec(), vec![7.0; 8], "{}", def.op_type());
            }
            Err(e @ SessionError::Lower(_)) => {
                let msg = e.to_string();
                assert!(
                    msg.contains("grow") && msg.contains(def.op_type()),
                    "{}: the error names the op: {msg}",
                    def.op_type()
                );
            }
            Err(e) => panic!("{}: {e:?}", def.op_type()),
        }
    }
}
