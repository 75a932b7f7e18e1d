//! Memory safety against custom op definitions (issue 35): whatever a custom
//! `OpDef` declares about aliases and views, a session is either built with
//! every kernel inside its buffers or refused when it is built, with
//! `LowerError::Declaration` naming the op.
//!
//! `hostile.*` ops produce outputs of the shapes their `infer` states (some
//! twice their input) and declare aliases that do not fit them. Their kernel
//! trusts the declared shapes (reads `n`, writes every output through the
//! pointers it is given), so a buffer smaller than a declared shape would be
//! overrun.

use popart_ir::{Alias, Attributes, InferContext, OpDef, OpFlags, Result as IrResult, TensorInfo};
use popart_lower::LowerError;
use popxl::ops::OpBuilder;
use popxl_session::cpu::kernel::{Kernel, KernelArgs, KernelError, KernelResult, KernelSpec};
use popxl_session::{Session, SessionError};

/// One hostile (or, for the controls, honest) declaration.
struct Decl {
    name: &'static str,
    /// Inputs connected (each a copy of `x`, float32 `[3]`).
    inputs: u32,
    /// Output element counts, as multiples of the input's.
    outputs: &'static [usize],
    aliases: fn() -> Vec<Alias>,
    /// What `OpDef::properties` claims.
    flags: OpFlags,
    /// Whether the declaration is refused.
    refused: bool,
}

const NONE: OpFlags = OpFlags::empty();

const DECLS: &[Decl] = &[
    // Views and aliases larger than the input they are declared to be.
    Decl {
        name: "hostile.GrowView",
        inputs: 1,
        outputs: &[2],
        aliases: || vec![Alias::copy(0, 0)],
        flags: NONE,
        refused: true,
    },
    Decl {
        name: "hostile.GrowRegion",
        inputs: 1,
        outputs: &[2],
        aliases: || vec![Alias::region(0, 0)],
        flags: NONE,
        refused: true,
    },
    Decl {
        name: "hostile.GrowIdentical",
        inputs: 1,
        outputs: &[2],
        aliases: || vec![Alias::identical(0, 0)],
        flags: NONE,
        refused: true,
    },
    Decl {
        name: "hostile.GrowModified",
        inputs: 1,
        outputs: &[2],
        aliases: || vec![Alias::modified(0, 0)],
        flags: NONE,
        refused: true,
    },
    // Ports the op does not have.
    Decl {
        name: "hostile.MissingInput",
        inputs: 1,
        outputs: &[1],
        aliases: || vec![Alias::region(3, 0)],
        flags: NONE,
        refused: true,
    },
    Decl {
        name: "hostile.MissingOutput",
        inputs: 1,
        outputs: &[1],
        aliases: || vec![Alias::identical(0, 5)],
        flags: NONE,
        refused: true,
    },
    Decl {
        name: "hostile.ModifiedMissing",
        inputs: 1,
        outputs: &[1],
        aliases: || vec![Alias::modified(4, 0)],
        flags: NONE,
        refused: true,
    },
    // One output the memory of two inputs; one input the memory of two outputs.
    Decl {
        name: "hostile.TwoInputsOneOutput",
        inputs: 2,
        outputs: &[1],
        aliases: || vec![Alias::identical(0, 0), Alias::modified(1, 0)],
        flags: NONE,
        refused: true,
    },
    Decl {
        name: "hostile.OneInputTwoOutputs",
        inputs: 1,
        outputs: &[1, 1],
        aliases: || vec![Alias::modified(0, 0), Alias::identical(0, 1)],
        flags: NONE,
        refused: true,
    },
    // Regions of two inputs making an output larger than both.
    Decl {
        name: "hostile.GrowConcat",
        inputs: 2,
        outputs: &[3],
        aliases: || vec![Alias::region(0, 0), Alias::region(1, 0)],
        flags: NONE,
        refused: true,
    },
    // Honest controls: a view of the same size, an in-place update.
    Decl {
        name: "honest.View",
        inputs: 1,
        outputs: &[1],
        aliases: || vec![Alias::copy(0, 0)],
        flags: NONE,
        refused: false,
    },
    Decl {
        name: "honest.Inplace",
        inputs: 1,
        outputs: &[1],
        aliases: || vec![Alias::modified(0, 0)],
        flags: NONE,
        refused: false,
    },
    // Flags claiming a view, an in-place update, host IO, a subgraph: the alias
    // facts are derived from `aliases` only, the others move no memory, so the
    // op (output twice its input) runs as a plain op in its own buffers.
    Decl {
        name: "honest.ClaimsEveryFlag",
        inputs: 1,
        outputs: &[2],
        aliases: Vec::new,
        flags: OpFlags::all(),
        refused: false,
    },
    // Written when connected (as `AdamUpdater`'s optional step): absent, nothing is written.
    Decl {
        name: "honest.WrittenOptional",
        inputs: 1,
        outputs: &[1],
        aliases: || vec![Alias::written(4)],
        flags: NONE,
        refused: false,
    },
];

/// The op type of declaration `K` of [`DECLS`].
struct Custom<const K: usize>;

impl<const K: usize> OpDef for Custom<K> {
    fn op_type(&self) -> &'static str {
        DECLS[K].name
    }
    fn infer(&self, ctx: &InferContext<'_>) -> IrResult<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        for i in 1..DECLS[K].inputs {
            ctx.input(i)?;
        }
        Ok(DECLS[K].outputs.iter().map(|m| TensorInfo::new(x.dtype, [x.nelms() * m])).collect())
    }
    fn aliases(&self, _: &Attributes) -> Vec<Alias> {
        (DECLS[K].aliases)()
    }
    fn properties(&self, _: &Attributes) -> OpFlags {
        DECLS[K].flags
    }
}

/// Output `o` element `i` is `x0[i % n] + o`: reads `n` elements of input 0 and
/// writes every output's declared count.
struct CustomKernel {
    n: usize,
    outputs: Vec<usize>,
}

impl Kernel for CustomKernel {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        // SAFETY: the executor gives buffers holding the declared infos.
        let x: Vec<f32> = (0..self.n).map(|i| unsafe { *(args.inputs[0] as *const f32).add(i) }).collect();
        for (o, &len) in self.outputs.iter().enumerate() {
            // SAFETY: as above.
            let y = unsafe { std::slice::from_raw_parts_mut(args.outputs[o] as *mut f32, len) };
            for (i, v) in y.iter_mut().enumerate() {
                *v = x[i % self.n] + o as f32;
            }
        }
        Ok(())
    }
}

fn build(spec: &KernelSpec<'_>) -> Result<Box<dyn Kernel>, KernelError> {
    Ok(Box::new(CustomKernel {
        n: spec.inputs[0].1.nelms(),
        outputs: spec.outputs.iter().map(|(_, t)| t.nelms()).collect(),
    }))
}

/// Build a session running declaration `def` on `x = [1, 2, 3]` beside a
/// variable `guard`; on success, run it and check the values and the guard.
fn check(def: &'static dyn OpDef, decl: &Decl) {
    popxl_session::register_custom_op(def, build).unwrap();
    let ir = popxl::Ir::new();
    let (outs, guard_out) = {
        let _g = ir.main_graph().enter();
        let xs: Vec<popxl::Tensor> =
            (0..decl.inputs).map(|i| popxl::variable(vec![1.0f32, 2.0, 3.0], &format!("x{i}")).unwrap()).collect();
        let guard = popxl::variable(vec![7.0f32; 8], "guard").unwrap();
        let mut b = OpBuilder::new("custom", def);
        for (i, x) in xs.iter().enumerate() {
            b = b.input(i as u32, x);
        }
        let ys = b.create_all().unwrap();
        let mut outs = Vec::new();
        for (o, y) in ys.iter().enumerate() {
            let z = popxl::ops::add(y, &popxl::constant(0.5f32, "half").unwrap()).unwrap();
            let s = popxl::d2h_stream(y.shape(), popxl::float32, &format!("out{o}")).unwrap();
            popxl::ops::host_store(&s, &z).unwrap();
            outs.push((s, y.shape()[0]));
        }
        let guard_out = popxl::d2h_stream([8], popxl::float32, "guard_out").unwrap();
        popxl::ops::host_store(&guard_out, &guard).unwrap();
        (outs, guard_out)
    };
    match (Session::new(ir, "cpu"), decl.refused) {
        (Err(SessionError::Lower(e @ LowerError::Declaration { .. })), true) => {
            let LowerError::Declaration { op_type, .. } = &e else { unreachable!() };
            assert_eq!(op_type, decl.name);
            assert!(e.to_string().contains(decl.name), "the error names the op: {e}");
        }
        (Ok(mut s), false) => {
            let o = s.scope(|s| s.run(&Default::default())).unwrap();
            let x = [1.0, 2.0, 3.0];
            for (k, (stream, len)) in outs.iter().enumerate() {
                let want: Vec<f64> = (0..*len).map(|i| x[i % 3] + k as f64 + 0.5).collect();
                assert_eq!(o[stream].to_f64_vec(), want, "{}", decl.name);
            }
            assert_eq!(o[&guard_out].to_f64_vec(), vec![7.0; 8], "{}", decl.name);
        }
        (Err(e), _) => panic!("{}: {e}", decl.name),
        (Ok(_), true) => panic!("{}: the session was built", decl.name),
    }
}

#[test]
fn custom_op_declarations_are_checked_when_a_session_is_built() {
    let defs: [&'static dyn OpDef; 14] = [
        &Custom::<0>,
        &Custom::<1>,
        &Custom::<2>,
        &Custom::<3>,
        &Custom::<4>,
        &Custom::<5>,
        &Custom::<6>,
        &Custom::<7>,
        &Custom::<8>,
        &Custom::<9>,
        &Custom::<10>,
        &Custom::<11>,
        &Custom::<12>,
        &Custom::<13>,
    ];
    assert_eq!(defs.len(), DECLS.len());
    for (def, decl) in defs.into_iter().zip(DECLS) {
        check(def, decl);
    }
}
