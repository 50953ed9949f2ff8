//! NumPy arrays at the boundary: element types, and bytes borrowed in place.
//!
//! # Rules
//!
//! - **Element types map one to one**, by NumPy's dtype name: `float16`, `float32`,
//!   `float64`, `int8`…`int64`, `uint8`…`uint64` and `bool` are tessera's types of the same
//!   name, and `bfloat16`, `float8_e4m3fn` and `float8_e5m2` (the `ml_dtypes` package's)
//!   are its `bf16` and 8-bit floats. Any other dtype (complex, objects, strings,
//!   structured, non-native byte order) is a `TypeError`. Without `ml_dtypes`, arrays of
//!   those three types come back as their raw bits (`uint16`, `uint8`), and a raw-bits
//!   array of the same width is accepted as the destination of a copy.
//! - **Borrowed, not copied.** An array going to a device is read where NumPy keeps it,
//!   and an array filled from a device (the `_into` forms) is written where NumPy keeps
//!   it, as bytes: the only copy is the transfer itself. An array the runtime returns
//!   (weights, anchors) or a register's value becomes a NumPy array without a copy (NumPy
//!   takes the host's buffer); the runtime's named inputs (a step's streams, weights,
//!   optimizer state) are lent to it as views, each sample copied once, into its device
//!   (converted first when its type differs from the stream's).
//!   Copied once, as the Rust API takes them by value: `call`'s array arguments (at most
//!   one frame), `debug_set`'s value and `copy_to_workers`' arrays.
//! - **C order only.** An array that is not C-contiguous (a slice with steps, a transpose,
//!   Fortran order) is refused with a `ValueError` that says so, before anything moves:
//!   `numpy.ascontiguousarray` makes one that is. A silent copy would hide a cost the
//!   caller may not expect. (Alignment does not matter: bytes are bytes.)
//! - **Shapes** are at most [`MAX_SHAPE_RANK`] dimensions of at most `u32::MAX` each
//!   (`ValueError` otherwise); 0-d arrays and arrays with a zero dimension cross as such.
//! - An array written into must be writable and not borrowed elsewhere (`ValueError`).

use numpy::{
    PyArray1, PyArrayMethods, PyReadonlyArray1, PyReadwriteArray1, PyUntypedArray,
    PyUntypedArrayMethods,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use tessera_core::dtype::DataType;
use tessera_core::wire::MAX_SHAPE_RANK;
use tessera_host::array::{ArrayView, ArrayViewMut, AsViewMut, HostArray};

/// The tessera element type of `array`'s dtype (see the module's rules).
pub(crate) fn data_type(array: &Bound<'_, PyUntypedArray>) -> PyResult<DataType> {
    let dtype = array.dtype();
    let name = dtype.to_string();
    let native = dtype.getattr("isnative")?.extract::<bool>()?;
    match from_name(&name) {
        Some(found) if native => Ok(found),
        Some(_) => Err(PyTypeError::new_err(format!(
            "a {} array in non-native byte order: tessera's arrays are little-endian \
             (array.astype(array.dtype.newbyteorder('=')) converts it)",
            dtype.str()?
        ))),
        None => Err(PyTypeError::new_err(format!(
            "tessera has no element type for NumPy's {name} (it takes float16, bfloat16, \
             float32, float64, int8-int64, uint8-uint64, bool, float8_e4m3fn and float8_e5m2)"
        ))),
    }
}

/// tessera's element type of NumPy's dtype `name`.
pub(crate) fn from_name(name: &str) -> Option<DataType> {
    Some(match name {
        "float16" => DataType::F16,
        "bfloat16" => DataType::BF16,
        "float32" => DataType::F32,
        "float64" => DataType::F64,
        "int8" => DataType::I8,
        "int16" => DataType::I16,
        "int32" => DataType::I32,
        "int64" => DataType::I64,
        "uint8" => DataType::U8,
        "uint16" => DataType::U16,
        "uint32" => DataType::U32,
        "uint64" => DataType::U64,
        "bool" => DataType::Bool,
        "float8_e4m3fn" => DataType::F8E4M3,
        "float8_e5m2" => DataType::F8E5M2,
        _ => return None,
    })
}

/// The NumPy dtype of `dtype`: `ml_dtypes`' for bf16 and the 8-bit floats when it is
/// installed, else their raw bits.
fn numpy_dtype(py: Python<'_>, dtype: DataType) -> PyResult<Bound<'_, PyAny>> {
    let (name, foreign) = match dtype {
        DataType::F16 => ("float16", None),
        DataType::BF16 => ("uint16", Some("bfloat16")),
        DataType::F32 => ("float32", None),
        DataType::F64 => ("float64", None),
        DataType::I8 => ("int8", None),
        DataType::I16 => ("int16", None),
        DataType::I32 => ("int32", None),
        DataType::I64 => ("int64", None),
        DataType::U8 => ("uint8", None),
        DataType::U16 => ("uint16", None),
        DataType::U32 => ("uint32", None),
        DataType::U64 => ("uint64", None),
        DataType::Bool => ("bool", None),
        DataType::F8E4M3 => ("uint8", Some("float8_e4m3fn")),
        DataType::F8E5M2 => ("uint8", Some("float8_e5m2")),
    };
    let numpy = py.import("numpy")?;
    if let Some(foreign) = foreign {
        if let Ok(ml_dtypes) = py.import("ml_dtypes") {
            return numpy.call_method1("dtype", (ml_dtypes.getattr(foreign)?,));
        }
    }
    numpy.call_method1("dtype", (name,))
}

/// True when an array of `held` may receive `register`'s elements: the same type, or the
/// raw bits of a type NumPy has no name for without `ml_dtypes`.
pub(crate) fn receives(held: DataType, register: DataType) -> bool {
    held == register
        || matches!(
            (held, register),
            (DataType::U16, DataType::BF16) | (DataType::U8, DataType::F8E4M3 | DataType::F8E5M2)
        )
}

/// `array`'s shape as tessera's (checked: rank and each dimension).
pub(crate) fn shape_of(array: &Bound<'_, PyUntypedArray>) -> PyResult<Vec<u32>> {
    shape(array.shape())
}

/// `dims` as tessera's shape (checked: rank and each dimension).
pub(crate) fn shape(dims: &[usize]) -> PyResult<Vec<u32>> {
    if dims.len() > MAX_SHAPE_RANK {
        return Err(PyValueError::new_err(format!(
            "an array has at most {MAX_SHAPE_RANK} dimensions, not {}",
            dims.len()
        )));
    }
    dims.iter()
        .map(|&d| {
            u32::try_from(d)
                .map_err(|_| PyValueError::new_err(format!("a dimension of {d} exceeds 2^32 - 1")))
        })
        .collect()
}

/// `array`'s bytes as a flat `uint8` array over the same memory, once it is known to be
/// C-contiguous (see the rules; `what` names it in the error).
fn bytes_of<'py>(
    array: &Bound<'py, PyUntypedArray>,
    what: &str,
) -> PyResult<Bound<'py, PyArray1<u8>>> {
    if !array.is_c_contiguous() {
        return Err(PyValueError::new_err(format!(
            "{what} is not C-contiguous (shape {:?}, strides {:?}): tessera reads and writes \
             arrays in place; numpy.ascontiguousarray({what}) makes one it can",
            array.shape(),
            array.strides()
        )));
    }
    // A C-contiguous array reshaped flat is a view, and so is its view as bytes.
    let flat = array
        .call_method1("reshape", (-1,))?
        .call_method1("view", ("uint8",))?;
    Ok(flat.cast_into::<PyArray1<u8>>()?)
}

/// NumPy's refusal to lend `what` (not writable, borrowed elsewhere) as a `ValueError`
/// naming it.
fn refused<E: std::fmt::Display>(what: &str) -> impl Fn(E) -> PyErr + '_ {
    move |e| PyValueError::new_err(format!("{what}: {e}"))
}

/// `array`'s element type, shape and bytes, each checked by the module's rules (`what`
/// names it in errors).
fn checked<'py>(
    array: &Bound<'py, PyUntypedArray>,
    what: &str,
) -> PyResult<(DataType, Vec<u32>, Bound<'py, PyArray1<u8>>)> {
    Ok((data_type(array)?, shape_of(array)?, bytes_of(array, what)?))
}

/// A NumPy array lent for reading: NumPy refuses it to writers through Rust until this is
/// dropped. Its [`ArrayView`] can cross into code that runs without the GIL.
pub(crate) struct Borrowed<'py> {
    dtype: DataType,
    shape: Vec<u32>,
    bytes: PyReadonlyArray1<'py, u8>,
    what: String,
}

impl<'py> Borrowed<'py> {
    /// `array`, named `what` in errors, checked by the module's rules.
    pub(crate) fn new(array: &Bound<'py, PyUntypedArray>, what: &str) -> PyResult<Self> {
        let (dtype, shape, bytes) = checked(array, what)?;
        let bytes = bytes.try_readonly().map_err(refused(what))?;
        Ok(Self {
            dtype,
            shape,
            bytes,
            what: what.to_string(),
        })
    }

    /// The array's own bytes, viewed.
    pub(crate) fn view(&self) -> PyResult<ArrayView<'_>> {
        let what = self.what.as_str();
        let slice = self.bytes.as_slice().map_err(refused(what))?;
        ArrayView::new(self.dtype, &self.shape, slice).map_err(refused(what))
    }
}

/// A NumPy array lent for writing, with its type and shape: the runtime fills it in place
/// (weights to host into the caller's arrays).
pub(crate) struct BorrowedMut<'py> {
    dtype: DataType,
    shape: Vec<u32>,
    bytes: PyReadwriteArray1<'py, u8>,
    what: String,
}

/// A [`BorrowedMut`]'s bytes, typed and shaped, for code that runs without the GIL.
pub(crate) struct Filled<'a> {
    dtype: DataType,
    shape: &'a [u32],
    bytes: &'a mut [u8],
}

impl AsViewMut for Filled<'_> {
    fn dtype(&self) -> DataType {
        self.dtype
    }

    fn shape(&self) -> &[u32] {
        self.shape
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        self.bytes
    }
}

impl<'py> BorrowedMut<'py> {
    /// `array`, named `what` in errors, checked by the module's rules (writable too).
    pub(crate) fn new(array: &Bound<'py, PyUntypedArray>, what: &str) -> PyResult<Self> {
        let (dtype, shape, bytes) = checked(array, what)?;
        let bytes = bytes.try_readwrite().map_err(refused(what))?;
        Ok(Self {
            dtype,
            shape,
            bytes,
            what: what.to_string(),
        })
    }

    /// The array's own bytes, to fill.
    pub(crate) fn filled(&mut self) -> PyResult<Filled<'_>> {
        let bytes = self.bytes.as_slice_mut().map_err(refused(&self.what))?;
        Ok(Filled {
            dtype: self.dtype,
            shape: &self.shape,
            bytes,
        })
    }
}

/// Runs `f` on `array` (named `what` in errors) as an [`ArrayView`] of its own bytes.
pub(crate) fn with_view<R>(
    array: &Bound<'_, PyUntypedArray>,
    what: &str,
    f: impl FnOnce(ArrayView<'_>) -> R,
) -> PyResult<R> {
    let borrowed = Borrowed::new(array, what)?;
    Ok(f(borrowed.view()?))
}

/// Runs `f` on `array`'s own bytes (named `what` in errors) as room for elements of
/// `dtype`, which must be as wide as the array's own.
pub(crate) fn with_view_mut<R>(
    array: &Bound<'_, PyUntypedArray>,
    what: &str,
    dtype: DataType,
    f: impl FnOnce(ArrayViewMut<'_>) -> R,
) -> PyResult<R> {
    let bytes = bytes_of(array, what)?;
    let mut borrowed = bytes.try_readwrite().map_err(refused(what))?;
    let slice = borrowed.as_slice_mut().map_err(refused(what))?;
    let view = ArrayViewMut::new(dtype, slice).map_err(refused(what))?;
    Ok(f(view))
}

/// A new zeroed NumPy array of `dtype` and `shape` (NumPy's `MemoryError` if it cannot be
/// had).
pub(crate) fn zeros<'py>(
    py: Python<'py>,
    dtype: DataType,
    shape: &[u32],
) -> PyResult<Bound<'py, PyUntypedArray>> {
    let dims = PyTuple::new(py, shape)?;
    let array = py
        .import("numpy")?
        .call_method1("zeros", (dims, numpy_dtype(py, dtype)?))?;
    Ok(array.cast_into::<PyUntypedArray>()?)
}

/// `array` as a NumPy array over its own bytes (no copy unless another host array shares
/// them).
pub(crate) fn to_numpy<'py>(
    py: Python<'py>,
    array: HostArray,
) -> PyResult<Bound<'py, PyUntypedArray>> {
    let dtype = numpy_dtype(py, array.dtype())?;
    let dims = PyTuple::new(py, array.shape())?;
    let bytes = PyArray1::from_vec(py, array.into_bytes());
    let typed = bytes
        .call_method1("view", (dtype,))?
        .call_method1("reshape", (dims,))?;
    Ok(typed.cast_into::<PyUntypedArray>()?)
}

/// A host array holding a copy of `array` (for the Rust calls that take arrays by value).
pub(crate) fn to_host(array: &Bound<'_, PyUntypedArray>, what: &str) -> PyResult<HostArray> {
    with_view(array, what, |view| {
        HostArray::new(view.dtype(), view.shape(), view.bytes().to_vec())
    })?
    .map_err(refused(what))
}
