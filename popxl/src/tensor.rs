//! [`Tensor`] handles, [`TensorSpec`] and the tensor operators.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::{Add, AddAssign, Div, Mul, Neg, Sub};
use std::rc::Rc;

use popart_ir::{DataType, GraphId, TensorId, TensorInfo, TensorKind};

use crate::host::Wide;
use crate::{ops, Graph, PopXlError, Result, SliceIndex};

/// Shape and data type of a tensor (PopXL's `TensorSpec`), used to create graph
/// inputs without a tensor at hand.
///
/// ```
/// use popxl::{float32, TensorSpec};
/// let s = TensorSpec::new([2, 3], float32);
/// assert_eq!(s.nelms(), 6);
/// assert_eq!(s.to_string(), "float32[2,3]");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorSpec {
    /// Dimensions, outermost first.
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: DataType,
}

impl TensorSpec {
    /// A spec from a shape and a data type.
    ///
    /// ```
    /// let s = popxl::TensorSpec::new(vec![4], popxl::int32);
    /// assert_eq!(s.shape, vec![4]);
    /// ```
    pub fn new(shape: impl Into<Vec<usize>>, dtype: DataType) -> Self {
        TensorSpec { shape: shape.into(), dtype }
    }

    /// Number of dimensions.
    ///
    /// ```
    /// assert_eq!(popxl::TensorSpec::new([2, 3], popxl::float32).rank(), 2);
    /// ```
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements.
    ///
    /// ```
    /// assert_eq!(popxl::TensorSpec::new([], popxl::float32).nelms(), 1);
    /// ```
    pub fn nelms(&self) -> usize {
        self.shape.iter().product()
    }

    /// As an IR [`TensorInfo`].
    ///
    /// ```
    /// let info = popxl::TensorSpec::new([2], popxl::float16).to_info();
    /// assert_eq!(info.to_string(), "float16[2]");
    /// ```
    pub fn to_info(&self) -> TensorInfo {
        TensorInfo::new(self.dtype, self.shape.clone())
    }
}

impl From<TensorInfo> for TensorSpec {
    fn from(i: TensorInfo) -> Self {
        TensorSpec { shape: i.shape, dtype: i.dtype }
    }
}

impl From<&TensorInfo> for TensorSpec {
    fn from(i: &TensorInfo) -> Self {
        i.clone().into()
    }
}

impl From<TensorSpec> for TensorInfo {
    fn from(s: TensorSpec) -> Self {
        TensorInfo::new(s.dtype, s.shape)
    }
}

impl fmt::Display for TensorSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.to_info().fmt(f)
    }
}

#[derive(Debug)]
struct TensorMeta {
    name: String,
    info: TensorInfo,
}

/// A handle to a tensor of a graph (PopXL's `popxl.Tensor`).
///
/// Cheap to clone; knows its graph; compares and hashes by (IR, graph, tensor
/// id). Name, shape and data type never change and are available even after
/// the IR is dropped.
///
/// The operators `+ - * /` and unary `-` work on `&Tensor`, `Tensor` and
/// `f64` or `i64` scalars (so any float or integer literal; a scalar becomes a
/// constant of the tensor's data type) with numpy broadcasting; like `ndarray`'s operators they **panic** with a
/// clear message on a shape or type mismatch. Every operation is also a
/// fallible function in [`crate::ops`].
///
/// ```
/// use popxl::Ir;
/// let ir = Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(ndarray::array![[1.0f32, 2.0], [3.0, 4.0]], "x").unwrap();
/// let b = popxl::variable(ndarray::array![1.0f32, 2.0], "b").unwrap();
/// let y = &x.matmul(&x.t().unwrap()).unwrap() + &b * 2.0;
/// assert_eq!((y.shape(), y.dtype()), (&[2usize, 2][..], popxl::float32));
/// let z = 1 - -&y / 4;
/// assert_eq!(z.shape(), &[2, 2]);
/// assert_eq!(y.rank(), 2);
/// assert_eq!(y.nelms(), 4);
/// ```
#[derive(Clone)]
pub struct Tensor {
    graph: Graph,
    id: TensorId,
    meta: Rc<TensorMeta>,
}

impl PartialEq for Tensor {
    fn eq(&self, other: &Self) -> bool {
        self.graph == other.graph && self.id == other.id
    }
}

impl Eq for Tensor {}

impl Hash for Tensor {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.graph.hash(state);
        self.id.hash(state);
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor({}: {} in {})", self.meta.name, self.meta.info, self.graph.name())
    }
}

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.meta.name)
    }
}

impl Tensor {
    pub(crate) fn from_core(graph: &Graph, t: &popart_ir::Tensor) -> Tensor {
        Tensor {
            graph: graph.clone(),
            id: t.id,
            meta: Rc::new(TensorMeta { name: t.name.clone(), info: t.info.clone() }),
        }
    }

    /// The tensor's name in its graph (PopXL's `id`: includes the name scope).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// assert_eq!(popxl::constant(1.0f32, "one").unwrap().id(), "one");
    /// ```
    pub fn id(&self) -> &str {
        &self.meta.name
    }

    /// Same as [`Tensor::id`]: the full (scoped) name.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let _s = popxl::name_scope("s");
    /// assert_eq!(popxl::constant(1.0f32, "one").unwrap().name(), "s/one");
    /// ```
    pub fn name(&self) -> &str {
        &self.meta.name
    }

    /// The name without its name scope (the part after the last `/`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let _s = popxl::name_scope("s");
    /// assert_eq!(popxl::constant(1.0f32, "one").unwrap().base_name(), "one");
    /// ```
    pub fn base_name(&self) -> &str {
        self.meta.name.rsplit('/').next().unwrap_or(&self.meta.name)
    }

    /// The shape, outermost dimension first.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// assert_eq!(popxl::constant(vec![1.0f32, 2.0], "c").unwrap().shape(), &[2]);
    /// ```
    pub fn shape(&self) -> &[usize] {
        &self.meta.info.shape
    }

    /// The element data type.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// assert_eq!(popxl::constant(1i32, "c").unwrap().dtype(), popxl::int32);
    /// ```
    pub fn dtype(&self) -> DataType {
        self.meta.info.dtype
    }

    /// Shape and data type.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let c = popxl::constant(vec![1.0f32, 2.0], "c").unwrap();
    /// assert_eq!(c.spec(), popxl::TensorSpec::new([2], popxl::float32));
    /// ```
    pub fn spec(&self) -> TensorSpec {
        self.meta.info.clone().into()
    }

    /// Shape and data type as an IR [`TensorInfo`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// assert_eq!(popxl::constant(1.0f32, "c").unwrap().info().to_string(), "float32[]");
    /// ```
    pub fn info(&self) -> &TensorInfo {
        &self.meta.info
    }

    /// Number of dimensions.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// assert_eq!(popxl::constant(1.0f32, "c").unwrap().rank(), 0);
    /// ```
    pub fn rank(&self) -> usize {
        self.meta.info.rank()
    }

    /// Number of elements.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// assert_eq!(popxl::constant(ndarray::Array2::<f32>::zeros((2, 3)), "c").unwrap().nelms(), 6);
    /// ```
    pub fn nelms(&self) -> usize {
        self.meta.info.nelms()
    }

    /// The graph that owns this tensor.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let c = ir.main_graph().with(|| popxl::constant(1.0f32, "c")).unwrap();
    /// assert_eq!(c.graph(), ir.main_graph());
    /// ```
    pub fn graph(&self) -> Graph {
        self.graph.clone()
    }

    /// The tensor's id in the IR core (within [`Tensor::graph_id`]).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let c = ir.main_graph().with(|| popxl::constant(1.0f32, "c")).unwrap();
    /// let name = ir.with_ir(|core| core.main_graph().tensor(c.tensor_id()).unwrap().name.clone());
    /// assert_eq!(name, "c");
    /// ```
    pub fn tensor_id(&self) -> TensorId {
        self.id
    }

    /// The id of the owning graph in the IR core.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let c = ir.main_graph().with(|| popxl::constant(1.0f32, "c")).unwrap();
    /// assert_eq!(c.graph_id(), ir.main_graph().id());
    /// ```
    pub fn graph_id(&self) -> GraphId {
        self.graph.id
    }

    /// Id of the owning IR (see [`crate::Ir::id`]).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let c = ir.main_graph().with(|| popxl::constant(1.0f32, "c")).unwrap();
    /// assert_eq!(c.ir_id(), ir.id());
    /// ```
    pub fn ir_id(&self) -> u64 {
        self.graph.ir_id
    }

    /// The tensor's kind in the IR core (activation, variable, constant, stream).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let w = ir.main_graph().with(|| popxl::variable(1.0f32, "w")).unwrap();
    /// assert!(matches!(w.kind().unwrap(), popart_ir::TensorKind::Variable(_)));
    /// ```
    pub fn kind(&self) -> Result<TensorKind> {
        let st = self.graph.state()?;
        let st = st.borrow();
        Ok(st.ir.graph(self.graph.id)?.tensor(self.id)?.kind.clone())
    }

    /// True for variables.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let w = ir.main_graph().with(|| popxl::variable(1.0f32, "w")).unwrap();
    /// assert!(w.is_variable());
    /// ```
    pub fn is_variable(&self) -> bool {
        matches!(self.kind(), Ok(TensorKind::Variable(_)))
    }

    /// True for constants.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let c = ir.main_graph().with(|| popxl::constant(1.0f32, "c")).unwrap();
    /// assert!(c.is_constant());
    /// ```
    pub fn is_constant(&self) -> bool {
        matches!(self.kind(), Ok(TensorKind::Constant(_)))
    }

    /// Matrix product (numpy `matmul`, PopXL's `@`). See [`ops::matmul`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(ndarray::Array2::<f32>::ones((2, 3)), "a").unwrap();
    /// let b = popxl::constant(ndarray::Array2::<f32>::ones((3, 4)), "b").unwrap();
    /// assert_eq!(a.matmul(&b).unwrap().shape(), &[2, 4]);
    /// ```
    pub fn matmul(&self, rhs: &Tensor) -> Result<Tensor> {
        ops::matmul(self, rhs)
    }

    /// Reverse the dimensions (PopXL's `T`). See [`ops::transpose`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(ndarray::Array2::<f32>::ones((2, 3)), "a").unwrap();
    /// assert_eq!(a.t().unwrap().shape(), &[3, 2]);
    /// ```
    pub fn t(&self) -> Result<Tensor> {
        ops::transpose(self, &[])
    }

    /// Permute the dimensions (`perm` empty = reverse). See [`ops::transpose`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(ndarray::Array3::<f32>::ones((2, 3, 4)), "a").unwrap();
    /// assert_eq!(a.transpose(&[1, 0, 2]).unwrap().shape(), &[3, 2, 4]);
    /// ```
    pub fn transpose(&self, perm: &[i64]) -> Result<Tensor> {
        ops::transpose(self, perm)
    }

    /// A new shape (one `-1` allowed). See [`ops::reshape`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(ndarray::Array2::<f32>::ones((2, 3)), "a").unwrap();
    /// assert_eq!(a.reshape(&[3, -1]).unwrap().shape(), &[3, 2]);
    /// ```
    pub fn reshape(&self, shape: &[i64]) -> Result<Tensor> {
        ops::reshape(self, shape)
    }

    /// Flatten to one dimension. See [`ops::flatten`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(ndarray::Array2::<f32>::ones((2, 3)), "a").unwrap();
    /// assert_eq!(a.flatten().unwrap().shape(), &[6]);
    /// ```
    pub fn flatten(&self) -> Result<Tensor> {
        ops::flatten(self)
    }

    /// Stop gradients. See [`ops::detach`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(1.0f32, "a").unwrap();
    /// assert_eq!(a.detach().unwrap().spec(), a.spec());
    /// ```
    pub fn detach(&self) -> Result<Tensor> {
        ops::detach(self)
    }

    /// Reverse the dimensions as an alias of `self` (PopXL's `T_`). See [`ops::transpose_`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::variable(ndarray::Array2::<f32>::ones((2, 3)), "a").unwrap();
    /// assert_eq!(a.t_().unwrap().shape(), &[3, 2]);
    /// ```
    #[doc(alias = "T_")]
    pub fn t_(&self) -> Result<Tensor> {
        ops::transpose_(self, &[])
    }

    /// Permute the dimensions as an alias of `self`. See [`ops::transpose_`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::variable(ndarray::Array3::<f32>::ones((2, 3, 4)), "a").unwrap();
    /// assert_eq!(a.transpose_(&[1, 0, 2]).unwrap().shape(), &[3, 2, 4]);
    /// ```
    pub fn transpose_(&self, perm: &[i64]) -> Result<Tensor> {
        ops::transpose_(self, perm)
    }

    /// A new shape as an alias of `self`. See [`ops::reshape_`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::variable(ndarray::Array2::<f32>::ones((2, 3)), "a").unwrap();
    /// assert_eq!(a.reshape_(&[3, -1]).unwrap().shape(), &[3, 2]);
    /// ```
    pub fn reshape_(&self, shape: &[i64]) -> Result<Tensor> {
        ops::reshape_(self, shape)
    }

    /// One dimension, as an alias of `self`. See [`ops::flatten_`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::variable(ndarray::Array2::<f32>::ones((2, 3)), "a").unwrap();
    /// assert_eq!(a.flatten_().unwrap().shape(), &[6]);
    /// ```
    pub fn flatten_(&self) -> Result<Tensor> {
        ops::flatten_(self)
    }

    /// The diagonal of a 2-D tensor (PopXL's `diag()`: `flatten()[::cols + 1]`);
    /// any other rank is [`PopXlError::NotAMatrix`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(ndarray::Array2::<f32>::ones((3, 2)), "a").unwrap();
    /// assert_eq!(a.diag().unwrap().shape(), &[2]);
    /// assert!(popxl::constant(vec![1.0f32, 2.0], "v").unwrap().diag().is_err());
    /// ```
    pub fn diag(&self) -> Result<Tensor> {
        let &[_, cols] = self.shape() else {
            return Err(PopXlError::NotAMatrix {
                what: "diag".into(),
                tensor: self.name().to_string(),
                rank: self.rank(),
            });
        };
        let step = ops::to_i64(cols + 1, || "diag step".to_string())?;
        let n = ops::to_i64(self.nelms(), || "diag length".to_string())?;
        ops::slice(&self.flatten()?, &[0], &[n], &[step], &[0])
    }

    /// Numpy-style indexing (PopXL's `t[key]`): integers pick (and drop) an axis,
    /// ranges slice (with an optional step); missing trailing axes are kept whole.
    /// See [`ops::index`] and the [`crate::s!`] macro.
    ///
    /// ```
    /// use popxl::{s, SliceIndex};
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(ndarray::Array3::<f32>::ones((4, 5, 6)), "a").unwrap();
    /// assert_eq!(a.index(&s![1, 1..3]).unwrap().shape(), &[2, 6]);
    /// assert_eq!(a.index(&s![.., -1, SliceIndex::from(..).step(2)]).unwrap().shape(), &[4, 3]);
    /// ```
    pub fn index(&self, items: &[SliceIndex]) -> Result<Tensor> {
        ops::index(self, items)
    }
}

fn expect_op(r: Result<Tensor>, what: &str, lhs: &str, rhs: &str) -> Tensor {
    match r {
        Ok(t) => t,
        Err(e) => {
            panic!("popxl: `{lhs} {what} {rhs}` failed: {e} (use the fallible `popxl::ops` functions to handle this)")
        }
    }
}

/// A scalar constant of `like`'s data type holding `value` (converted exactly,
/// or an error naming it), in the current graph (or `like`'s graph).
fn scalar_like(like: &Tensor, value: Wide) -> Result<Tensor> {
    let what = format!("scalar operand {value} of tensor `{}`", like.name());
    let data = crate::HostArray::scalar_of(like.dtype(), value, &what)?;
    crate::variables::constant_in_graph_of(like, data, "scalar")
}

/// A scalar operand of the operators, widened without loss.
trait OperandScalar: Copy + std::fmt::Display {
    fn wide(self) -> Wide;
}

impl OperandScalar for f64 {
    fn wide(self) -> Wide {
        Wide::Float(self)
    }
}

impl OperandScalar for i64 {
    fn wide(self) -> Wide {
        Wide::Int(i128::from(self))
    }
}

macro_rules! binary_operator {
    ($trait:ident, $method:ident, $op:path, $sym:literal) => {
        impl $trait<&Tensor> for &Tensor {
            type Output = Tensor;
            fn $method(self, rhs: &Tensor) -> Tensor {
                expect_op($op(self, rhs), $sym, self.name(), rhs.name())
            }
        }
        impl $trait<Tensor> for Tensor {
            type Output = Tensor;
            fn $method(self, rhs: Tensor) -> Tensor {
                (&self).$method(&rhs)
            }
        }
        impl $trait<&Tensor> for Tensor {
            type Output = Tensor;
            fn $method(self, rhs: &Tensor) -> Tensor {
                (&self).$method(rhs)
            }
        }
        impl $trait<Tensor> for &Tensor {
            type Output = Tensor;
            fn $method(self, rhs: Tensor) -> Tensor {
                self.$method(&rhs)
            }
        }
        binary_operator!(@scalar $trait, $method, $op, $sym, f64);
        binary_operator!(@scalar $trait, $method, $op, $sym, i64);
    };
    (@scalar $trait:ident, $method:ident, $op:path, $sym:literal, $s:ty) => {
        impl $trait<$s> for &Tensor {
            type Output = Tensor;
            fn $method(self, rhs: $s) -> Tensor {
                let r = scalar_like(self, rhs.wide()).and_then(|c| $op(self, &c));
                expect_op(r, $sym, self.name(), &rhs.to_string())
            }
        }
        impl $trait<$s> for Tensor {
            type Output = Tensor;
            fn $method(self, rhs: $s) -> Tensor {
                (&self).$method(rhs)
            }
        }
        impl $trait<&Tensor> for $s {
            type Output = Tensor;
            fn $method(self, rhs: &Tensor) -> Tensor {
                let r = scalar_like(rhs, self.wide()).and_then(|c| $op(&c, rhs));
                expect_op(r, $sym, &self.to_string(), rhs.name())
            }
        }
        impl $trait<Tensor> for $s {
            type Output = Tensor;
            fn $method(self, rhs: Tensor) -> Tensor {
                self.$method(&rhs)
            }
        }
    };
}

binary_operator!(Add, add, ops::add, "+");
binary_operator!(Sub, sub, ops::sub, "-");
binary_operator!(Mul, mul, ops::mul, "*");
binary_operator!(Div, div, ops::div, "/");

impl Neg for &Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        match ops::negate(self) {
            Ok(t) => t,
            Err(e) => panic!("popxl: `-{}` failed: {e}", self.name()),
        }
    }
}

impl Neg for Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        -&self
    }
}

/// `t += x` is PopXL's in-place `add_`: `t` becomes the updated tensor (an alias
/// of the old one). Panics like the other operators; see [`ops::add_`].
impl AddAssign<&Tensor> for Tensor {
    fn add_assign(&mut self, rhs: &Tensor) {
        *self = expect_op(ops::add_(self, rhs), "+=", self.name(), rhs.name());
    }
}

impl AddAssign<Tensor> for Tensor {
    fn add_assign(&mut self, rhs: Tensor) {
        *self += &rhs;
    }
}

/// Ensure `t` belongs to the IR and graph of `graph`.
pub(crate) fn check_in_graph(t: &Tensor, graph: &Graph, what: &str) -> Result<()> {
    if t.ir_id() != graph.ir_id {
        return Err(PopXlError::ForeignIr { name: t.name().to_string(), what: what.to_string() });
    }
    if t.graph_id() != graph.id {
        return Err(PopXlError::TensorNotInGraph {
            tensor: t.name().to_string(),
            tensor_graph: t.graph.name().to_string(),
            graph: graph.name().to_string(),
            what: what.to_string(),
        });
    }
    Ok(())
}
