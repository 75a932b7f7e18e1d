//! [`Tensor`] handles, [`TensorSpec`] and the tensor operators.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use popart_ir::{DataType, GraphId, TensorId, TensorInfo, TensorKind};

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
    meta: Arc<TensorMeta>,
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
            meta: Arc::new(TensorMeta { name: t.name.clone(), info: t.info.clone() }),
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

    /// The size of dimension 0 (PopXL's `len(t)`); a scalar has none
    /// ([`PopXlError::ScalarHasNoLength`]).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// assert_eq!(popxl::constant(vec![1.0f32, 2.0], "c").unwrap().len().unwrap(), 2);
    /// assert!(popxl::constant(1.0f32, "s").unwrap().len().is_err());
    /// ```
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> Result<usize> {
        self.shape().first().copied().ok_or_else(|| PopXlError::ScalarHasNoLength { tensor: self.name().to_string() })
    }

    /// Bytes to step along each dimension of the row-major layout (PopXL's
    /// `strides()`, as numpy's `ndarray.strides`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(ndarray::Array2::<f32>::zeros((2, 3)), "a").unwrap();
    /// assert_eq!(a.strides(), vec![12, 4]);
    /// ```
    pub fn strides(&self) -> Vec<usize> {
        let mut strides = vec![0; self.rank()];
        let mut step = self.dtype().size_bytes();
        for (s, &d) in strides.iter_mut().zip(self.shape()).rev() {
            *s = step;
            step = step.saturating_mul(d);
        }
        strides
    }

    /// The IR this tensor belongs to (PopXL's `t.ir`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// assert_eq!(popxl::constant(1.0f32, "c").unwrap().ir().unwrap().id(), ir.id());
    /// ```
    pub fn ir(&self) -> Result<crate::Ir> {
        self.graph.ir()
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

    /// The placement of the op that produces this tensor, else of its first
    /// consumer (a variable or graph input takes its consumer's), else `None`
    /// (PopART's `getVirtualGraphIdAndTileSetUnsafe`). The IPU is the one the
    /// producer writes on or the consumer reads on: an `ipu_copy`'s output is
    /// on its destination, its input on its source.
    pub(crate) fn placement(&self) -> Result<Option<popart_ir::Placement>> {
        let st = self.graph.state()?;
        let st = st.borrow();
        let g = st.ir.graph(self.graph.id)?;
        let t = g.tensor(self.id)?;
        if let Some(p) = t.producer() {
            let op = g.op(p.op)?;
            return Ok(Some(popart_ir::Placement { ipu: op.output_ipu(), ..op.placement }));
        }
        let first = t.consumers().iter().min_by_key(|p| g.op(p.op).map_or(u64::MAX, |o| o.seq()));
        Ok(match first {
            Some(p) => {
                let op = g.op(p.op)?;
                Some(popart_ir::Placement { ipu: op.input_ipu(), ..op.placement })
            }
            None => None,
        })
    }

    /// The IPU this tensor is on (PopXL's `Tensor.ipu`): the `ipu(n)` context
    /// its producer (or, without one, its first consumer) was created in.
    /// Unset is [`PopXlError::UndefinedValue`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let x = popxl::variable(1.0f32, "x").unwrap();
    /// assert!(x.ipu().is_err()); // no op uses it yet
    /// let _p = popxl::ipu(2);
    /// let y = popxl::ops::exp(&x).unwrap();
    /// assert_eq!((x.ipu().unwrap(), y.ipu().unwrap()), (2, 2));
    /// ```
    pub fn ipu(&self) -> Result<u32> {
        let undefined = |reason: &str| PopXlError::UndefinedValue {
            what: "IPU".into(),
            tensor: self.name().to_string(),
            reason: reason.into(),
        };
        match self.placement()? {
            Some(p) => p.ipu.ok_or_else(|| undefined("its op was not created in an `ipu(n)` context")),
            None => Err(undefined("no op produces or consumes it")),
        }
    }

    /// The tile set this tensor is on (PopXL's `Tensor.tile_set`): IO inside an
    /// [`crate::io_tiles`] context, else compute; read from its producer or,
    /// without one, its first consumer. A tensor no op touches is
    /// [`PopXlError::UndefinedValue`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let x = popxl::variable(1.0f32, "x").unwrap();
    /// assert!(x.tile_set().is_err());
    /// let y = popxl::ops::exp(&x).unwrap();
    /// assert_eq!(y.tile_set().unwrap(), popxl::TileSet::Compute);
    /// ```
    pub fn tile_set(&self) -> Result<popart_ir::TileSet> {
        self.placement()?.map(|p| p.tile_set).ok_or_else(|| PopXlError::UndefinedValue {
            what: "tile set".into(),
            tensor: self.name().to_string(),
            reason: "no op produces or consumes it".into(),
        })
    }

    /// Copy this tensor to IPU `destination` (PopXL's `Tensor.copy_to_ipu`;
    /// `source` defaults to [`Tensor::ipu`]). See [`ops::ipu_copy`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
    /// let on_1 = x.copy_to_ipu(1, Some(0)).unwrap();
    /// assert_eq!((x.ipu().unwrap(), on_1.ipu().unwrap()), (0, 1));
    /// ```
    pub fn copy_to_ipu(&self, destination: u32, source: Option<u32>) -> Result<Tensor> {
        ops::ipu_copy(self, destination, source)
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
                what: "Diag".into(),
                tensor: self.name().to_string(),
                rank: self.rank(),
            });
        };
        let step = ops::to_i64(cols + 1, || "diag step".to_string())?;
        let n = ops::to_i64(self.nelms(), || "diag length".to_string())?;
        ops::slice(&self.flatten()?, &[0], &[n], &[step], &[0])
    }

    /// PopXL's `t[key]`. With integers and ranges ([`crate::s!`]): numpy-style
    /// slicing, see [`ops::index`] (integers pick and drop an axis, ranges slice
    /// with an optional step, missing trailing axes are kept whole). With a
    /// tensor: an integer tensor gathers rows (axis 0), a bool tensor masks
    /// (`where(mask, t, 0)`), see [`ops::index_with`].
    ///
    /// ```
    /// use popxl::{s, SliceIndex};
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(ndarray::Array3::<f32>::ones((4, 5, 6)), "a").unwrap();
    /// assert_eq!(a.index(&s![1, 1..3]).unwrap().shape(), &[2, 6]);
    /// assert_eq!(a.index(&s![.., -1, SliceIndex::from(..).step(2)]).unwrap().shape(), &[4, 3]);
    /// let rows = popxl::constant(vec![3i32, 0], "rows").unwrap();
    /// assert_eq!(a.index(&rows).unwrap().shape(), &[2, 5, 6]);
    /// let mask = popxl::constant(vec![true, false, true, true, false, false], "mask").unwrap();
    /// assert_eq!(a.index(&mask).unwrap().shape(), &[4, 5, 6]);
    /// ```
    pub fn index<'a>(&self, key: impl Into<IndexKey<'a>>) -> Result<Tensor> {
        match key.into() {
            IndexKey::Items(items) => ops::index(self, items),
            IndexKey::Tensor(t) => ops::index_with(self, t),
        }
    }

    /// Stop gradients, as an alias of `self`. See [`ops::detach_`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::variable(1.0f32, "a").unwrap();
    /// assert_eq!(a.detach_().unwrap().spec(), a.spec());
    /// ```
    pub fn detach_(&self) -> Result<Tensor> {
        ops::detach_(self)
    }

    /// `self ** exponent` (PopXL's `**`). See [`ops::pow`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(vec![2.0f32, 3.0], "a").unwrap();
    /// assert_eq!(a.pow(&a).unwrap().shape(), &[2]);
    /// ```
    pub fn pow(&self, exponent: &Tensor) -> Result<Tensor> {
        ops::pow(self, exponent)
    }

    /// `self > other` elementwise, bool output. See [`ops::greater`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(vec![1.0f32, 3.0], "a").unwrap();
    /// let b = popxl::constant(2.0f32, "b").unwrap();
    /// assert_eq!(a.greater(&b).unwrap().dtype(), popxl::bool);
    /// ```
    pub fn greater(&self, other: &Tensor) -> Result<Tensor> {
        ops::greater(self, other)
    }

    /// `self < other` elementwise, bool output (`greater(other, self)`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(vec![1.0f32, 3.0], "a").unwrap();
    /// let b = popxl::constant(2.0f32, "b").unwrap();
    /// assert_eq!(a.less(&b).unwrap().shape(), &[2]);
    /// ```
    pub fn less(&self, other: &Tensor) -> Result<Tensor> {
        ops::greater(other, self)
    }

    /// `self == other` elementwise, bool output. See [`ops::equal`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(vec![1i32, 2], "a").unwrap();
    /// assert_eq!(a.equal(&a).unwrap().dtype(), popxl::bool);
    /// ```
    pub fn equal(&self, other: &Tensor) -> Result<Tensor> {
        ops::equal(self, other)
    }
}

/// What [`Tensor::index`] accepts: integers and ranges, or an index tensor.
#[derive(Clone, Copy, Debug)]
pub enum IndexKey<'a> {
    /// Numpy-style basic indexing, one item per leading axis ([`crate::s!`]).
    Items(&'a [SliceIndex]),
    /// An integer tensor (gather along axis 0) or a bool mask (`where(mask, t, 0)`).
    Tensor(&'a Tensor),
}

impl<'a> From<&'a [SliceIndex]> for IndexKey<'a> {
    fn from(items: &'a [SliceIndex]) -> Self {
        IndexKey::Items(items)
    }
}

impl<'a, const N: usize> From<&'a [SliceIndex; N]> for IndexKey<'a> {
    fn from(items: &'a [SliceIndex; N]) -> Self {
        IndexKey::Items(items)
    }
}

impl<'a> From<&'a Vec<SliceIndex>> for IndexKey<'a> {
    fn from(items: &'a Vec<SliceIndex>) -> Self {
        IndexKey::Items(items)
    }
}

impl<'a> From<&'a Tensor> for IndexKey<'a> {
    fn from(t: &'a Tensor) -> Self {
        IndexKey::Tensor(t)
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
