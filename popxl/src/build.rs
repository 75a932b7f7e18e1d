//! Creating subgraphs by tracing functions and modules (PopXL's `ir.create_graph`).

use crate::variables::graph_input_in_by;
use crate::{Graph, Ir, PopXlError, Result, Tensor, TensorSpec};

/// One argument of [`Ir::create_graph`]: the spec of a graph input and,
/// optionally, its name. A tensor gives its spec and base name; a
/// [`TensorSpec`] gives no name (the input is called `arg<i>`).
///
/// ```
/// use popxl::{GraphArg, TensorSpec};
/// let a = GraphArg::from(TensorSpec::new([2], popxl::float32)).named("x");
/// assert_eq!(a.name.as_deref(), Some("x"));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct GraphArg {
    /// Shape and type of the graph input.
    pub spec: TensorSpec,
    /// Name of the graph input (`None`: `arg<i>`).
    pub name: Option<String>,
    /// Pass by reference (see [`TensorByRef`]).
    pub by_ref: bool,
}

/// A tensor argument of [`Ir::create_graph`] whose graph input is passed by
/// reference (PopXL's `TensorByRef`): in-place writes of the graph to it reach
/// the caller's tensor, as every call site marks its parent input modified.
///
/// ```
/// use popxl::{ops, Tensor, TensorByRef};
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(1.0f32, "x").unwrap();
/// let g = ir.create_graph(|t: Tensor| ops::add_(&t, &popxl::constant(1.0f32, "one")?), TensorByRef(x.clone())).unwrap();
/// let info = ops::call_with_info(&g, &[&x], &[]).unwrap();
/// assert_eq!(info.modified_inputs().unwrap(), vec![0]);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct TensorByRef(pub Tensor);

impl From<TensorByRef> for GraphArg {
    fn from(t: TensorByRef) -> Self {
        GraphArg { by_ref: true, ..GraphArg::from(&t.0) }
    }
}

impl From<&TensorByRef> for GraphArg {
    fn from(t: &TensorByRef) -> Self {
        GraphArg { by_ref: true, ..GraphArg::from(&t.0) }
    }
}

impl GraphArg {
    /// The same argument with a name.
    ///
    /// ```
    /// let a = popxl::GraphArg::from(popxl::TensorSpec::new([], popxl::int32)).named("n");
    /// assert_eq!(a.name.unwrap(), "n");
    /// ```
    pub fn named(mut self, name: &str) -> Self {
        self.name = Some(name.to_string());
        self
    }
}

impl From<&Tensor> for GraphArg {
    fn from(t: &Tensor) -> Self {
        GraphArg { spec: t.spec(), name: Some(t.base_name().to_string()), by_ref: false }
    }
}

impl From<Tensor> for GraphArg {
    fn from(t: Tensor) -> Self {
        GraphArg::from(&t)
    }
}

impl From<TensorSpec> for GraphArg {
    fn from(spec: TensorSpec) -> Self {
        GraphArg { spec, name: None, by_ref: false }
    }
}

impl From<&TensorSpec> for GraphArg {
    fn from(spec: &TensorSpec) -> Self {
        GraphArg { spec: spec.clone(), name: None, by_ref: false }
    }
}

/// The argument list of [`Ir::create_graph`]: a single tensor or spec, a tuple
/// of them, an array, a slice or a `Vec`, or `()` for none.
///
/// ```
/// use popxl::{IntoGraphArgs, TensorSpec};
/// let s = TensorSpec::new([2], popxl::float32);
/// assert_eq!((s.clone(), &s).into_graph_args().len(), 2);
/// assert_eq!(().into_graph_args().len(), 0);
/// ```
pub trait IntoGraphArgs {
    /// The arguments, in order.
    ///
    /// ```
    /// use popxl::{IntoGraphArgs, TensorSpec};
    /// let args = [TensorSpec::new([1], popxl::int8)].into_graph_args();
    /// assert_eq!(args[0].spec.dtype, popxl::int8);
    /// ```
    fn into_graph_args(self) -> Vec<GraphArg>;
}

macro_rules! single_arg {
    ($($t:ty),*) => {$(
        impl IntoGraphArgs for $t {
            fn into_graph_args(self) -> Vec<GraphArg> {
                vec![GraphArg::from(self)]
            }
        }
    )*};
}
single_arg!(&Tensor, Tensor, TensorSpec, &TensorSpec, GraphArg, TensorByRef, &TensorByRef);

impl IntoGraphArgs for () {
    fn into_graph_args(self) -> Vec<GraphArg> {
        Vec::new()
    }
}

impl<T: Into<GraphArg>> IntoGraphArgs for Vec<T> {
    fn into_graph_args(self) -> Vec<GraphArg> {
        self.into_iter().map(Into::into).collect()
    }
}

impl<T: Into<GraphArg>, const N: usize> IntoGraphArgs for [T; N] {
    fn into_graph_args(self) -> Vec<GraphArg> {
        self.into_iter().map(Into::into).collect()
    }
}

impl<T: Into<GraphArg> + Clone> IntoGraphArgs for &[T] {
    fn into_graph_args(self) -> Vec<GraphArg> {
        self.iter().cloned().map(Into::into).collect()
    }
}

macro_rules! tuple_args {
    ($($t:ident),+) => {
        impl<$($t: Into<GraphArg>),+> IntoGraphArgs for ($($t,)+) {
            #[allow(non_snake_case)]
            fn into_graph_args(self) -> Vec<GraphArg> {
                let ($($t,)+) = self;
                vec![$($t.into()),+]
            }
        }
    };
}
tuple_args!(A);
tuple_args!(A, B);
tuple_args!(A, B, C);
tuple_args!(A, B, C, D);
tuple_args!(A, B, C, D, E);
tuple_args!(A, B, C, D, E, F);
tuple_args!(A, B, C, D, E, F, G);
tuple_args!(A, B, C, D, E, F, G, H);

/// What a graph function or [`Module::build`] receives: the traced graph inputs
/// as one tensor, a tuple of tensors, a `Vec` (any number) or `()`.
///
/// ```
/// use popxl::FromGraphInputs;
/// assert_eq!(<(popxl::Tensor, popxl::Tensor)>::arity(), Some(2));
/// assert_eq!(<Vec<popxl::Tensor>>::arity(), None);
/// ```
pub trait FromGraphInputs: Sized {
    /// Number of inputs taken (`None`: any number).
    ///
    /// ```
    /// use popxl::FromGraphInputs;
    /// assert_eq!(<popxl::Tensor as FromGraphInputs>::arity(), Some(1));
    /// ```
    fn arity() -> Option<usize>;
    /// Build from exactly [`FromGraphInputs::arity`] inputs; `None` for any
    /// other number.
    ///
    /// ```
    /// use popxl::FromGraphInputs;
    /// assert!(<Vec<popxl::Tensor>>::from_graph_inputs(Vec::new()).unwrap().is_empty());
    /// assert!(<popxl::Tensor as FromGraphInputs>::from_graph_inputs(Vec::new()).is_none());
    /// ```
    fn from_graph_inputs(inputs: Vec<Tensor>) -> Option<Self>;
}

impl FromGraphInputs for () {
    fn arity() -> Option<usize> {
        Some(0)
    }
    fn from_graph_inputs(inputs: Vec<Tensor>) -> Option<Self> {
        inputs.is_empty().then_some(())
    }
}

impl FromGraphInputs for Tensor {
    fn arity() -> Option<usize> {
        Some(1)
    }
    fn from_graph_inputs(inputs: Vec<Tensor>) -> Option<Self> {
        let [t]: [Tensor; 1] = inputs.try_into().ok()?;
        Some(t)
    }
}

impl FromGraphInputs for Vec<Tensor> {
    fn arity() -> Option<usize> {
        None
    }
    fn from_graph_inputs(inputs: Vec<Tensor>) -> Option<Self> {
        Some(inputs)
    }
}

macro_rules! tuple_inputs {
    ($n:literal; $($t:ident),+) => {
        impl FromGraphInputs for ($($t,)+) {
            fn arity() -> Option<usize> {
                Some($n)
            }
            #[allow(non_snake_case)]
            fn from_graph_inputs(inputs: Vec<Tensor>) -> Option<Self> {
                let [$($t),+]: [Tensor; $n] = inputs.try_into().ok()?;
                Some(($($t,)+))
            }
        }
    };
}
#[allow(unused_parens)]
mod tuple_input_impls {
    use super::*;
    type A = Tensor;
    type B = Tensor;
    type C = Tensor;
    type D = Tensor;
    type E = Tensor;
    type F = Tensor;
    type G = Tensor;
    type H = Tensor;
    tuple_inputs!(1; A);
    tuple_inputs!(2; A, B);
    tuple_inputs!(3; A, B, C);
    tuple_inputs!(4; A, B, C, D);
    tuple_inputs!(5; A, B, C, D, E);
    tuple_inputs!(6; A, B, C, D, E, F);
    tuple_inputs!(7; A, B, C, D, E, F, G);
    tuple_inputs!(8; A, B, C, D, E, F, G, H);
}

/// What a graph function or [`Module::build`] returns: the graph outputs.
/// Nothing (`()`), a tensor, a tuple, a `Vec`, an `Option`, or a `Result` of those.
///
/// ```
/// use popxl::IntoGraphOutputs;
/// assert!(().into_graph_outputs().unwrap().is_empty());
/// ```
pub trait IntoGraphOutputs {
    /// The outputs, in order.
    ///
    /// ```
    /// use popxl::IntoGraphOutputs;
    /// let r: popxl::Result<()> = Ok(());
    /// assert!(r.into_graph_outputs().unwrap().is_empty());
    /// ```
    fn into_graph_outputs(self) -> Result<Vec<Tensor>>;
}

impl IntoGraphOutputs for () {
    fn into_graph_outputs(self) -> Result<Vec<Tensor>> {
        Ok(Vec::new())
    }
}

impl IntoGraphOutputs for Tensor {
    fn into_graph_outputs(self) -> Result<Vec<Tensor>> {
        Ok(vec![self])
    }
}

impl IntoGraphOutputs for Vec<Tensor> {
    fn into_graph_outputs(self) -> Result<Vec<Tensor>> {
        Ok(self)
    }
}

impl IntoGraphOutputs for Option<Tensor> {
    fn into_graph_outputs(self) -> Result<Vec<Tensor>> {
        Ok(self.into_iter().collect())
    }
}

impl<T: IntoGraphOutputs> IntoGraphOutputs for Result<T> {
    fn into_graph_outputs(self) -> Result<Vec<Tensor>> {
        self?.into_graph_outputs()
    }
}

macro_rules! tuple_outputs {
    ($($t:ident),+) => {
        impl IntoGraphOutputs for ($($t,)+) {
            #[allow(non_snake_case)]
            fn into_graph_outputs(self) -> Result<Vec<Tensor>> {
                let ($($t,)+) = self;
                Ok(vec![$($t),+])
            }
        }
    };
}
mod tuple_output_impls {
    use super::*;
    type A = Tensor;
    type B = Tensor;
    type C = Tensor;
    type D = Tensor;
    type E = Tensor;
    type F = Tensor;
    type G = Tensor;
    type H = Tensor;
    tuple_outputs!(A);
    tuple_outputs!(A, B);
    tuple_outputs!(A, B, C);
    tuple_outputs!(A, B, C, D);
    tuple_outputs!(A, B, C, D, E);
    tuple_outputs!(A, B, C, D, E, F);
    tuple_outputs!(A, B, C, D, E, F, G);
    tuple_outputs!(A, B, C, D, E, F, G, H);
}

/// A reusable piece of a model whose [`Module::build`] is traced into a graph
/// (PopXL's `popxl.Module`). Keep the tensors created by [`crate::graph_input`]
/// on `self` to connect them at the call site with `inputs_dict`.
///
/// Pass `&mut module` to [`Ir::create_graph`]; the graph is named after the type.
///
/// ```
/// use popxl::{ops, Ir, Module, Tensor};
///
/// struct Linear {
///     out_features: usize,
///     w: Option<Tensor>,
/// }
///
/// impl Module for Linear {
///     type Inputs = Tensor;
///     type Outputs = Tensor;
///     fn build(&mut self, x: Tensor) -> popxl::Result<Tensor> {
///         let w = popxl::graph_input([x.shape()[x.rank() - 1], self.out_features], popxl::float32, "W")?;
///         let y = x.matmul(&w)?;
///         self.w = Some(w);
///         Ok(y)
///     }
/// }
///
/// let ir = Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(ndarray::Array2::<f32>::ones((2, 3)), "x").unwrap();
/// let w = popxl::variable(ndarray::Array2::<f32>::ones((3, 4)), "W").unwrap();
/// let mut linear = Linear { out_features: 4, w: None };
/// let graph = ir.create_graph(&mut linear, &x).unwrap();
/// assert_eq!(graph.name(), "Linear");
/// let y = ops::call(&graph, &[&x], &[(linear.w.as_ref().unwrap(), &w)]).unwrap();
/// assert_eq!(y[0].shape(), &[2, 4]);
/// ```
pub trait Module {
    /// The traced inputs `build` receives (`Tensor`, a tuple of tensors, `Vec<Tensor>` or `()`).
    type Inputs: FromGraphInputs;
    /// What `build` returns (see [`IntoGraphOutputs`]).
    type Outputs: IntoGraphOutputs;
    /// Build the graph body; runs with the new graph as the current graph.
    /// See the [trait documentation](Module) for an example.
    fn build(&mut self, inputs: Self::Inputs) -> Result<Self::Outputs>;
}

/// Something [`Ir::create_graph`] can trace: a closure or function taking
/// 0 to 8 [`Tensor`]s (or one [`FromGraphInputs`] value such as a tuple or a
/// `Vec<Tensor>`), or `&mut` a [`Module`]. `Marker` only disambiguates the
/// implementations; it is inferred.
///
/// ```
/// use popxl::{GraphFunction, Tensor};
/// fn double(x: Tensor) -> Tensor { &x + &x }
/// assert_eq!(GraphFunction::graph_name(&double), "double");
/// ```
pub trait GraphFunction<Marker> {
    /// Default name of the created graph (the function or module type name;
    /// `graph` for closures).
    ///
    /// ```
    /// use popxl::{GraphFunction, Tensor};
    /// assert_eq!(GraphFunction::graph_name(&|x: Tensor| -x), "graph");
    /// ```
    fn graph_name(&self) -> String;
    /// Number of traced arguments taken (`None`: any number).
    ///
    /// ```
    /// use popxl::{GraphFunction, Tensor};
    /// assert_eq!(GraphFunction::arity(&|a: Tensor, b: Tensor| &a + &b), Some(2));
    /// ```
    fn arity(&self) -> Option<usize>;
    /// Build the body from the traced inputs (called with the new graph as the
    /// current graph); returns the outputs.
    ///
    /// ```
    /// use popxl::{GraphFunction, Tensor};
    /// let ir = popxl::Ir::new();
    /// let g = ir.create_empty_graph("g").unwrap();
    /// let _c = g.enter();
    /// let mut f = || popxl::constant(1.0f32, "one");
    /// assert_eq!(f.build_graph(Vec::new()).unwrap()[0].name(), "one");
    /// ```
    fn build_graph(&mut self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>>;
}

/// The last path segment of a type name, without references and generics;
/// closures get `graph`.
fn short_type_name<T: ?Sized>() -> String {
    let full = std::any::type_name::<T>().trim_start_matches('&').trim_start_matches("mut ");
    let no_generics = full.split('<').next().unwrap_or(full);
    let last = no_generics.rsplit("::").next().unwrap_or(no_generics);
    if last.is_empty() || last.contains('{') {
        "graph".to_string()
    } else {
        last.to_string()
    }
}

/// A graph function given `given` inputs where it takes `expected` (only when
/// `build_graph` is called directly: `create_graph` checks the arity first).
fn argument_count_mismatch(graph: &str, expected: usize, given: usize) -> PopXlError {
    let graph = crate::context::try_current_graph().map_or_else(|| graph.to_string(), |g| g.name().to_string());
    PopXlError::ArgumentCountMismatch { graph, expected, given }
}

/// Marker for [`Module`] implementations of [`GraphFunction`].
#[doc(hidden)]
pub struct ModuleMarker;

impl<M: Module> GraphFunction<ModuleMarker> for &mut M {
    fn graph_name(&self) -> String {
        short_type_name::<M>()
    }
    fn arity(&self) -> Option<usize> {
        M::Inputs::arity()
    }
    fn build_graph(&mut self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
        let given = inputs.len();
        let inputs = M::Inputs::from_graph_inputs(inputs)
            .ok_or_else(|| argument_count_mismatch(&self.graph_name(), M::Inputs::arity().unwrap_or(given), given))?;
        self.build(inputs)?.into_graph_outputs()
    }
}

impl<F, A, R> GraphFunction<fn(A) -> R> for F
where
    F: FnMut(A) -> R,
    A: FromGraphInputs,
    R: IntoGraphOutputs,
{
    fn graph_name(&self) -> String {
        short_type_name::<F>()
    }
    fn arity(&self) -> Option<usize> {
        A::arity()
    }
    fn build_graph(&mut self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
        let given = inputs.len();
        let inputs = A::from_graph_inputs(inputs)
            .ok_or_else(|| argument_count_mismatch(&self.graph_name(), A::arity().unwrap_or(given), given))?;
        self(inputs).into_graph_outputs()
    }
}

impl<F, R> GraphFunction<fn() -> R> for F
where
    F: FnMut() -> R,
    R: IntoGraphOutputs,
{
    fn graph_name(&self) -> String {
        short_type_name::<F>()
    }
    fn arity(&self) -> Option<usize> {
        Some(0)
    }
    fn build_graph(&mut self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
        if !inputs.is_empty() {
            return Err(argument_count_mismatch(&self.graph_name(), 0, inputs.len()));
        }
        self().into_graph_outputs()
    }
}

macro_rules! multi_arg_fn {
    ($n:literal; $($a:ident),+) => {
        impl<Func, R> GraphFunction<fn($($a),+) -> R> for Func
        where
            Func: FnMut($($a),+) -> R,
            R: IntoGraphOutputs,
        {
            fn graph_name(&self) -> String {
                short_type_name::<Func>()
            }
            fn arity(&self) -> Option<usize> {
                Some($n)
            }
            #[allow(non_snake_case)]
            fn build_graph(&mut self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
                let given = inputs.len();
                let [$($a),+]: [Tensor; $n] =
                    inputs.try_into().map_err(|_| argument_count_mismatch(&self.graph_name(), $n, given))?;
                self($($a),+).into_graph_outputs()
            }
        }
    };
}
mod multi_arg_impls {
    use super::*;
    type A = Tensor;
    type B = Tensor;
    type C = Tensor;
    type D = Tensor;
    type E = Tensor;
    type F = Tensor;
    type G = Tensor;
    type H = Tensor;
    multi_arg_fn!(2; A, B);
    multi_arg_fn!(3; A, B, C);
    multi_arg_fn!(4; A, B, C, D);
    multi_arg_fn!(5; A, B, C, D, E);
    multi_arg_fn!(6; A, B, C, D, E, F);
    multi_arg_fn!(7; A, B, C, D, E, F, G);
    multi_arg_fn!(8; A, B, C, D, E, F, G, H);
}

/// Create graph `name` (made unique), add the traced inputs, run `f` inside it
/// and set its outputs; on error, remove the partial graph.
pub(crate) fn create_graph<M>(ir: &Ir, name: &str, mut f: impl GraphFunction<M>, args: Vec<GraphArg>) -> Result<Graph> {
    let graph = ir.create_empty_graph(name)?;
    let result = (|| {
        if let Some(n) = f.arity() {
            if n != args.len() {
                return Err(PopXlError::ArgumentCountMismatch {
                    graph: graph.name().to_string(),
                    expected: n,
                    given: args.len(),
                });
            }
        }
        let _ctx = graph.enter();
        let mut inputs = Vec::with_capacity(args.len());
        for (i, a) in args.iter().enumerate() {
            let input_name = a.name.clone().unwrap_or_else(|| format!("arg{i}"));
            inputs.push(graph_input_in_by(&graph, a.spec.to_info(), &input_name, a.by_ref)?);
        }
        let outputs = f.build_graph(inputs)?;
        for t in &outputs {
            if t.ir_id() != graph.ir_id {
                return Err(PopXlError::ForeignIr { name: t.name().to_string(), what: "graph output".into() });
            }
            if t.graph_id() != graph.id {
                return Err(PopXlError::OutputNotInGraph {
                    graph: graph.name().to_string(),
                    tensor: t.name().to_string(),
                    tensor_graph: t.graph().name().to_string(),
                });
            }
        }
        let state = graph.state()?;
        let mut st = state.borrow_mut();
        let g = st.building("create_graph")?.graph_mut(graph.id)?;
        for t in &outputs {
            g.add_output(t.tensor_id())?;
        }
        Ok(())
    })();
    match result {
        Ok(()) => Ok(graph),
        Err(e) => {
            // Best effort: a graph already called by an op (inside `f`) stays.
            if let Ok(state) = graph.state() {
                let _ = state.borrow_mut().ir.remove_graph(graph.id);
            }
            Err(e)
        }
    }
}
