//! `popxl.Tensor` and the host streams.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use popxl::{ops, SliceIndex, Tensor};
use pyo3::exceptions::{PyIndexError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PySlice, PyTuple};

use crate::convert::{dtype_of, host_array, py_dtype, type_name};
use crate::errors::IntoPy;
use crate::graph::PyGraph;

/// A tensor of a graph (PopXL's `popxl.Tensor`): a handle naming an IR's tensor.
#[pyclass(name = "Tensor", module = "popxl", weakref)]
#[derive(Clone)]
pub struct PyTensor {
    pub t: Tensor,
}

/// Wrap a tensor handle.
pub fn wrap(py: Python<'_>, t: Tensor) -> PyResult<Py<PyTensor>> {
    Py::new(py, PyTensor { t })
}

/// The tensor behind a Python object, or a `TypeError` naming what was given.
pub fn tensor_of(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Tensor> {
    match obj.downcast::<PyTensor>() {
        Ok(t) => Ok(t.borrow().t.clone()),
        Err(_) => Err(PyTypeError::new_err(format!("{what} must be a popxl.Tensor, not {}", type_name(obj)))),
    }
}

/// `other` as a tensor: a tensor as is, anything numpy converts as a constant
/// of `like`'s dtype in `like`'s graph (PopXL's operator coercion).
pub fn coerce(like: &Tensor, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    if let Ok(t) = other.downcast::<PyTensor>() {
        return Ok(t.borrow().t.clone());
    }
    let data = host_array(other, Some(like.dtype()))?;
    like.graph().with(|| popxl::constant_as(data, like.dtype(), "")).py()
}

fn hash_of(v: &impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    v.hash(&mut h);
    h.finish()
}

fn slice_item(obj: &Bound<'_, PyAny>) -> PyResult<Option<SliceIndex>> {
    if let Ok(s) = obj.downcast::<PySlice>() {
        let get = |name: &str| -> PyResult<Option<i64>> {
            let v = s.getattr(name)?;
            if v.is_none() {
                Ok(None)
            } else {
                v.extract::<i64>().map(Some).map_err(|_| PyTypeError::new_err("slice bounds must be ints or None"))
            }
        };
        let step = get("step")?.unwrap_or(1);
        if step == 0 {
            return Err(PyValueError::new_err("slice step cannot be zero"));
        }
        return Ok(Some(SliceIndex::Range { start: get("start")?, end: get("stop")?, step }));
    }
    if obj.is_instance_of::<pyo3::types::PyBool>() {
        return Ok(None);
    }
    if let Ok(i) = obj.extract::<i64>() {
        return Ok(Some(SliceIndex::Index(i)));
    }
    Ok(None)
}

impl PyTensor {
    fn binary(
        &self,
        other: &Bound<'_, PyAny>,
        reflected: bool,
        f: fn(&Tensor, &Tensor) -> popxl::Result<Tensor>,
    ) -> PyResult<Tensor> {
        let o = coerce(&self.t, other)?;
        if reflected { f(&o, &self.t) } else { f(&self.t, &o) }.py()
    }
}

#[pymethods]
impl PyTensor {
    /// The tensor's id, with its name scope (`layer0/x`).
    #[getter]
    fn id(&self) -> String {
        self.t.id().to_string()
    }
    /// The tensor's name.
    #[getter]
    fn name(&self) -> String {
        self.t.name().to_string()
    }
    /// The shape, a tuple of ints.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.t.shape())
    }
    /// The `popxl.dtype`.
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        py_dtype(py, self.t.dtype())
    }
    /// `TensorSpec(shape, dtype)`.
    #[getter]
    fn spec<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        py.import("popxl.tensor")?.getattr("TensorSpec")?.call1((self.shape(py)?, self.dtype(py)?))
    }
    /// The number of dimensions.
    #[getter]
    fn rank(&self) -> usize {
        self.t.rank()
    }
    /// The number of elements.
    #[getter]
    fn nelms(&self) -> usize {
        self.t.nelms()
    }
    /// The graph the tensor belongs to.
    #[getter]
    fn graph(&self) -> PyGraph {
        PyGraph::new(self.t.graph())
    }
    /// The IR.
    #[getter]
    fn ir(&self) -> PyResult<crate::graph::PyIr> {
        Ok(crate::graph::PyIr { ir: self.t.ir().py()? })
    }
    /// The IPU the tensor is placed on (`UndefinedValue` if never set).
    #[getter]
    fn ipu(&self) -> PyResult<u32> {
        self.t.ipu().py()
    }
    /// The meta shape of the tensor: for a replica-sharded tensor the shape of
    /// the whole tensor before replicated tensor sharding, else `()`.
    #[getter]
    fn meta_shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.t.meta_shape().py()?.unwrap_or_default())
    }
    /// The tile set (`compute` or `io`) that the tensor is assigned to
    /// (`UndefinedValue` if no op produces or consumes it).
    #[getter]
    fn tile_set(&self) -> PyResult<&'static str> {
        Ok(self.t.tile_set().py()?.name())
    }
    /// Copy the tensor to IPU `destination` (`ops.ipu_copy`); `source` defaults to
    /// the IPU of the tensor's producer.
    #[pyo3(signature = (destination, source=None))]
    fn copy_to_ipu(&self, destination: i64, source: Option<i64>) -> PyResult<PyTensor> {
        let destination = crate::ops::ipu_number(destination, "destination")?;
        let source = source.map(|s| crate::ops::ipu_number(s, "source")).transpose()?;
        Ok(PyTensor { t: self.t.copy_to_ipu(destination, source).py()? })
    }
    /// Element strides, in elements.
    fn strides(&self) -> Vec<usize> {
        self.t.strides()
    }
    /// The transpose with the axes reversed.
    #[getter(T)]
    fn t_upper(&self) -> PyResult<PyTensor> {
        Ok(PyTensor { t: self.t.t().py()? })
    }
    /// The in-place transpose (a view).
    #[getter(T_)]
    fn t_upper_(&self) -> PyResult<PyTensor> {
        Ok(PyTensor { t: self.t.t_().py()? })
    }
    /// Permute the axes (reversed when `permutation` is None).
    #[pyo3(signature = (permutation=None))]
    fn transpose(&self, permutation: Option<Vec<i64>>) -> PyResult<PyTensor> {
        Ok(PyTensor { t: self.t.transpose(&permutation.unwrap_or_default()).py()? })
    }
    /// In-place `transpose`.
    #[pyo3(signature = (permutation=None))]
    fn transpose_(&self, permutation: Option<Vec<i64>>) -> PyResult<PyTensor> {
        Ok(PyTensor { t: self.t.transpose_(&permutation.unwrap_or_default()).py()? })
    }
    /// A reshaped tensor (one dimension may be -1).
    fn reshape(&self, shape: Vec<i64>) -> PyResult<PyTensor> {
        Ok(PyTensor { t: self.t.reshape(&shape).py()? })
    }
    /// In-place `reshape`.
    fn reshape_(&self, shape: Vec<i64>) -> PyResult<PyTensor> {
        Ok(PyTensor { t: self.t.reshape_(&shape).py()? })
    }
    /// A 1-d tensor of the elements.
    fn flatten(&self) -> PyResult<PyTensor> {
        Ok(PyTensor { t: self.t.flatten().py()? })
    }
    /// In-place `flatten`.
    fn flatten_(&self) -> PyResult<PyTensor> {
        Ok(PyTensor { t: self.t.flatten_().py()? })
    }
    /// The same values, with no gradient flowing back.
    fn detach(&self) -> PyResult<PyTensor> {
        Ok(PyTensor { t: self.t.detach().py()? })
    }
    /// The diagonal of a 2-d tensor.
    fn diag(&self) -> PyResult<PyTensor> {
        Ok(PyTensor { t: self.t.diag().py()? })
    }

    fn __repr__(&self) -> String {
        format!("Tensor[{} popxl.dtypes.{} {:?}]", self.t.id(), self.t.dtype().name(), self.t.shape())
    }
    fn __hash__(&self) -> u64 {
        hash_of(&self.t)
    }
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.downcast::<PyTensor>().map(|o| o.borrow().t == self.t).unwrap_or(false)
    }
    fn __ne__(&self, other: &Bound<'_, PyAny>) -> bool {
        !self.__eq__(other)
    }
    fn __len__(&self) -> PyResult<usize> {
        self.t.len().map_err(|e| PyValueError::new_err(e.to_string()))
    }
    fn __iter__(&self) -> PyResult<()> {
        Err(PyTypeError::new_err(format!(
            "{} is not iterable. Use `len` and indexing (`t[i]`) or `ops.split` instead",
            self.t.id()
        )))
    }
    fn __contains__(&self, _item: &Bound<'_, PyAny>) -> PyResult<bool> {
        Err(PyTypeError::new_err(
            "unsupported operation: `in` on a popxl.Tensor (the values are not known while building)",
        ))
    }
    fn __bool__(&self) -> PyResult<bool> {
        Err(PyTypeError::new_err("a popxl.Tensor has no truth value while building; use ops.where or ops.conditional"))
    }

    fn __add__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        Ok(PyTensor { t: self.binary(o, false, ops::add)? })
    }
    fn __radd__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        Ok(PyTensor { t: self.binary(o, true, ops::add)? })
    }
    /// `t += x` is `ops.add_(t, x)`: `t` keeps its handle (PyO3 returns `self`).
    fn __iadd__(&self, o: &Bound<'_, PyAny>) -> PyResult<()> {
        let x = coerce(&self.t, o)?;
        ops::add_(&self.t, &x).py()?;
        Ok(())
    }
    fn __sub__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        Ok(PyTensor { t: self.binary(o, false, ops::sub)? })
    }
    fn __rsub__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        Ok(PyTensor { t: self.binary(o, true, ops::sub)? })
    }
    fn __mul__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        Ok(PyTensor { t: self.binary(o, false, ops::mul)? })
    }
    fn __rmul__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        Ok(PyTensor { t: self.binary(o, true, ops::mul)? })
    }
    fn __truediv__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        Ok(PyTensor { t: self.binary(o, false, ops::div)? })
    }
    fn __rtruediv__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        Ok(PyTensor { t: self.binary(o, true, ops::div)? })
    }
    fn __mod__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        Ok(PyTensor { t: self.binary(o, false, ops::fmod)? })
    }
    fn __rmod__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        Ok(PyTensor { t: self.binary(o, true, ops::fmod)? })
    }
    fn __pow__(&self, o: &Bound<'_, PyAny>, _modulo: Option<&Bound<'_, PyAny>>) -> PyResult<PyTensor> {
        Ok(PyTensor { t: self.binary(o, false, ops::pow)? })
    }
    fn __rpow__(&self, o: &Bound<'_, PyAny>, _modulo: Option<&Bound<'_, PyAny>>) -> PyResult<PyTensor> {
        Ok(PyTensor { t: self.binary(o, true, ops::pow)? })
    }
    fn __matmul__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        Ok(PyTensor { t: self.binary(o, false, ops::matmul)? })
    }
    fn __rmatmul__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        Ok(PyTensor { t: self.binary(o, true, ops::matmul)? })
    }
    fn __and__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        Ok(PyTensor { t: self.binary(o, false, ops::logical_and)? })
    }
    fn __rand__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        Ok(PyTensor { t: self.binary(o, true, ops::logical_and)? })
    }
    fn __or__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        Ok(PyTensor { t: self.binary(o, false, ops::logical_or)? })
    }
    fn __ror__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        Ok(PyTensor { t: self.binary(o, true, ops::logical_or)? })
    }
    fn __invert__(&self) -> PyResult<PyTensor> {
        Ok(PyTensor { t: ops::logical_not(&self.t).py()? })
    }
    fn __neg__(&self) -> PyResult<PyTensor> {
        Ok(PyTensor { t: ops::negate(&self.t).py()? })
    }
    fn __pos__(slf: PyRef<'_, Self>) -> Py<PyTensor> {
        slf.into()
    }

    /// `t[key]`: ints, slices and tuples of them slice (int axes squeezed);
    /// an int tensor or array gathers along axis 0; a bool tensor or array masks.
    fn __getitem__(&self, key: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let mut items = Vec::new();
        let basic = if let Ok(tuple) = key.downcast::<PyTuple>() {
            let mut ok = true;
            for k in tuple.iter() {
                match slice_item(&k)? {
                    Some(i) => items.push(i),
                    None => ok = false,
                }
            }
            ok
        } else {
            match slice_item(key)? {
                Some(i) => {
                    items.push(i);
                    true
                }
                None => false,
            }
        };
        if basic {
            if items.len() > self.t.rank() {
                return Err(PyIndexError::new_err(format!(
                    "too many indices for tensor {} of rank {}: {} given",
                    self.t.id(),
                    self.t.rank(),
                    items.len()
                )));
            }
            return Ok(PyTensor { t: ops::index(&self.t, &items).py()? });
        }
        let k = if let Ok(t) = key.downcast::<PyTensor>() {
            t.borrow().t.clone()
        } else {
            let data = host_array(key, None)?;
            let data = match data.dtype() {
                popart_ir::DataType::Int64 => data.try_cast(popart_ir::DataType::Int32).py()?,
                _ => data,
            };
            if !(data.dtype().is_int() || data.dtype() == popart_ir::DataType::Bool) {
                return Err(PyTypeError::new_err(format!(
                    "a tensor index must be an int or bool array, not {}",
                    data.dtype().name()
                )));
            }
            self.t.graph().with(|| popxl::constant(data, "index")).py()?
        };
        Ok(PyTensor { t: self.t.index(&k).py()? })
    }
}

macro_rules! stream_class {
    ($py:ident, $rust:ty, $pyname:literal) => {
        /// A host stream of the main graph (PopXL's `h2d_stream` / `d2h_stream`).
        #[pyclass(name = $pyname, module = "popxl")]
        #[derive(Clone)]
        pub struct $py {
            pub s: $rust,
        }

        #[pymethods]
        impl $py {
            /// The stream's shape.
            #[getter]
            fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
                PyTuple::new(py, self.s.shape())
            }
            /// The stream's dtype.
            #[getter]
            fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                py_dtype(py, self.s.dtype())
            }
            /// `TensorSpec(shape, dtype)`.
            #[getter]
            fn spec<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                py.import("popxl.tensor")?.getattr("TensorSpec")?.call1((self.shape(py)?, self.dtype(py)?))
            }
            /// The id of the stream's tensor.
            #[getter]
            fn tensor_id(&self) -> String {
                self.s.tensor().id().to_string()
            }
            fn __hash__(&self) -> u64 {
                hash_of(&self.s)
            }
            fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
                other.downcast::<$py>().map(|o| o.borrow().s == self.s).unwrap_or(false)
            }
            fn __repr__(&self) -> String {
                format!("{}({} popxl.dtypes.{} {:?})", $pyname, self.s.name(), self.s.dtype().name(), self.s.shape())
            }
        }
    };
}

stream_class!(PyH2D, popxl::HostToDeviceStream, "HostToDeviceStream");
stream_class!(PyD2H, popxl::DeviceToHostStream, "DeviceToHostStream");

/// `h2d_stream(shape, dtype, name=None)`.
#[pyfunction]
#[pyo3(signature = (shape, dtype, name=None))]
pub fn h2d_stream(shape: &Bound<'_, PyAny>, dtype: &Bound<'_, PyAny>, name: Option<String>) -> PyResult<PyH2D> {
    let shape = crate::convert::shape_of(shape)?;
    let s = popxl::h2d_stream(shape, dtype_of(dtype)?, name.as_deref().unwrap_or("h2d_stream")).py()?;
    Ok(PyH2D { s })
}

/// `d2h_stream(shape, dtype, name=None)`.
#[pyfunction]
#[pyo3(signature = (shape, dtype, name=None))]
pub fn d2h_stream(shape: &Bound<'_, PyAny>, dtype: &Bound<'_, PyAny>, name: Option<String>) -> PyResult<PyD2H> {
    let shape = crate::convert::shape_of(shape)?;
    let s = popxl::d2h_stream(shape, dtype_of(dtype)?, name.as_deref().unwrap_or("d2h_stream")).py()?;
    Ok(PyD2H { s })
}
