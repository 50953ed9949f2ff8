//! NumPy arrays at the boundary: element types, and bytes borrowed in place.
//!
//! # Rules
//!
//! - **Element types map one to one**, by NumPy's dtype name: `float16`, `bfloat16` (from
//!   `ml_dtypes`), `float32`, `float64`, `int8`…`int64`, `uint8`…`uint64` and `bool` are
//!   tessera's types of the same name; any other dtype (complex, objects, strings,
//!   big-endian) is a `TypeError`, and tessera's 8-bit floats come back as `uint8` bytes.
//! - **Borrowed, not copied.** An array going to a device is read where NumPy keeps it,
//!   and an array filled from a device (the `_into` forms) is written where NumPy keeps
//!   it: the only copy is the transfer itself. `bool` arrays are the exception, copied
//!   through bytes (a Rust `bool` may hold nothing but 0 or 1, which a device does not
//!   promise), and so is every array a new NumPy array is made for.
//! - **C order only.** An array that is not C-contiguous (a slice with steps, a
//!   transpose, Fortran order) or not aligned is refused with a `ValueError` that says
//!   so, before anything moves: `numpy.ascontiguousarray` makes one that is. A copy
//!   would hide a cost the caller may not expect; refusing it keeps every cost visible.
//! - **Shapes** are at most [`MAX_SHAPE_RANK`] dimensions of at most `u32::MAX` each
//!   (`ValueError` otherwise).
//! - An array written into must be writable and not borrowed elsewhere (`ValueError`).

use bytemuck::Pod;
use half::{bf16, f16};
use numpy::{
    Element, IxDyn, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray,
    PyUntypedArrayMethods,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use tessera_core::dtype::DataType;
use tessera_core::wire::MAX_SHAPE_RANK;
use tessera_host::array::{ArrayView, ArrayViewMut, HostArray};

/// The tessera element type of `array`'s dtype (see the module's rules).
pub(crate) fn data_type(array: &Bound<'_, PyUntypedArray>) -> PyResult<DataType> {
    let dtype = array.dtype();
    if dtype.is_native_byteorder() == Some(false) {
        return Err(PyTypeError::new_err(format!(
            "a {dtype} array in non-native byte order: tessera's arrays are little-endian \
             (array.astype(array.dtype.newbyteorder('=')) converts it)"
        )));
    }
    let name = dtype.to_string();
    from_name(&name).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "tessera has no element type for NumPy's {name} (it takes float16, bfloat16, \
             float32, float64, int8-int64, uint8-uint64 and bool)"
        ))
    })
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
        _ => return None,
    })
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

/// Refuses an array that is not C-contiguous (see the rules), naming `what`.
fn c_order(array: &Bound<'_, PyUntypedArray>, what: &str) -> PyResult<()> {
    if array.is_c_contiguous() {
        Ok(())
    } else {
        Err(PyValueError::new_err(format!(
            "{what} is not C-contiguous (shape {:?}, strides {:?}): tessera reads and writes \
             arrays in place; numpy.ascontiguousarray({what}) makes one it can",
            array.shape(),
            array.strides()
        )))
    }
}

/// Runs `f` on `array` (named `what` in errors) as an [`ArrayView`] of its own bytes.
pub(crate) fn with_view<R>(
    array: &Bound<'_, PyUntypedArray>,
    what: &str,
    f: impl FnOnce(ArrayView<'_>) -> R,
) -> PyResult<R> {
    let dtype = data_type(array)?;
    let shape = shape_of(array)?;
    c_order(array, what)?;
    match dtype {
        DataType::F16 => view_as::<f16, R>(array, what, dtype, &shape, f),
        DataType::BF16 => view_as::<bf16, R>(array, what, dtype, &shape, f),
        DataType::F32 => view_as::<f32, R>(array, what, dtype, &shape, f),
        DataType::F64 => view_as::<f64, R>(array, what, dtype, &shape, f),
        DataType::I8 => view_as::<i8, R>(array, what, dtype, &shape, f),
        DataType::I16 => view_as::<i16, R>(array, what, dtype, &shape, f),
        DataType::I32 => view_as::<i32, R>(array, what, dtype, &shape, f),
        DataType::I64 => view_as::<i64, R>(array, what, dtype, &shape, f),
        DataType::U8 | DataType::F8E4M3 | DataType::F8E5M2 => {
            view_as::<u8, R>(array, what, dtype, &shape, f)
        }
        DataType::U16 => view_as::<u16, R>(array, what, dtype, &shape, f),
        DataType::U32 => view_as::<u32, R>(array, what, dtype, &shape, f),
        DataType::U64 => view_as::<u64, R>(array, what, dtype, &shape, f),
        DataType::Bool => {
            let typed = array
                .cast::<PyArrayDyn<bool>>()?
                .try_readonly()
                .map_err(refused(what))?;
            let slice = typed.as_slice().map_err(refused(what))?;
            let bytes: Vec<u8> = slice.iter().map(|&b| u8::from(b)).collect();
            Ok(f(view(dtype, &shape, &bytes)?))
        }
    }
}

/// [`with_view`] for an element type that is plain bytes.
fn view_as<T: Element + Pod, R>(
    array: &Bound<'_, PyUntypedArray>,
    what: &str,
    dtype: DataType,
    shape: &[u32],
    f: impl FnOnce(ArrayView<'_>) -> R,
) -> PyResult<R> {
    let typed = array
        .cast::<PyArrayDyn<T>>()?
        .try_readonly()
        .map_err(refused(what))?;
    let bytes: &[u8] = bytemuck::cast_slice(typed.as_slice().map_err(refused(what))?);
    Ok(f(view(dtype, shape, bytes)?))
}

/// NumPy's refusal to lend `what` (not writable, borrowed elsewhere, misaligned) as a
/// `ValueError` naming it.
fn refused<E: std::fmt::Display>(what: &str) -> impl Fn(E) -> PyErr + '_ {
    move |e| PyValueError::new_err(format!("{what}: {e}"))
}

fn view<'a>(dtype: DataType, shape: &'a [u32], bytes: &'a [u8]) -> PyResult<ArrayView<'a>> {
    ArrayView::new(dtype, shape, bytes).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Runs `f` on `array`'s own bytes (named `what` in errors) as room to fill, then checks
/// what `f` wrote into a `bool` array.
pub(crate) fn with_view_mut<R>(
    array: &Bound<'_, PyUntypedArray>,
    what: &str,
    f: impl FnOnce(ArrayViewMut<'_>) -> R,
) -> PyResult<R> {
    let dtype = data_type(array)?;
    c_order(array, what)?;
    match dtype {
        DataType::F16 => fill_as::<f16, R>(array, what, dtype, f),
        DataType::BF16 => fill_as::<bf16, R>(array, what, dtype, f),
        DataType::F32 => fill_as::<f32, R>(array, what, dtype, f),
        DataType::F64 => fill_as::<f64, R>(array, what, dtype, f),
        DataType::I8 => fill_as::<i8, R>(array, what, dtype, f),
        DataType::I16 => fill_as::<i16, R>(array, what, dtype, f),
        DataType::I32 => fill_as::<i32, R>(array, what, dtype, f),
        DataType::I64 => fill_as::<i64, R>(array, what, dtype, f),
        DataType::U8 | DataType::F8E4M3 | DataType::F8E5M2 => {
            fill_as::<u8, R>(array, what, dtype, f)
        }
        DataType::U16 => fill_as::<u16, R>(array, what, dtype, f),
        DataType::U32 => fill_as::<u32, R>(array, what, dtype, f),
        DataType::U64 => fill_as::<u64, R>(array, what, dtype, f),
        DataType::Bool => {
            let mut typed = array
                .cast::<PyArrayDyn<bool>>()?
                .try_readwrite()
                .map_err(refused(what))?;
            let out = typed.as_slice_mut().map_err(refused(what))?;
            let mut bytes = vec![0u8; out.len()];
            let result = f(view_mut(dtype, &mut bytes)?);
            for (o, b) in out.iter_mut().zip(bytes) {
                *o = b != 0;
            }
            Ok(result)
        }
    }
}

/// [`with_view_mut`] for an element type that is plain bytes.
fn fill_as<T: Element + Pod, R>(
    array: &Bound<'_, PyUntypedArray>,
    what: &str,
    dtype: DataType,
    f: impl FnOnce(ArrayViewMut<'_>) -> R,
) -> PyResult<R> {
    let mut typed = array
        .cast::<PyArrayDyn<T>>()?
        .try_readwrite()
        .map_err(refused(what))?;
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(typed.as_slice_mut().map_err(refused(what))?);
    Ok(f(view_mut(dtype, bytes)?))
}

fn view_mut(dtype: DataType, bytes: &mut [u8]) -> PyResult<ArrayViewMut<'_>> {
    ArrayViewMut::new(dtype, bytes).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// A new zeroed NumPy array of `dtype` and `shape`.
pub(crate) fn zeros<'py>(
    py: Python<'py>,
    dtype: DataType,
    shape: &[u32],
) -> Bound<'py, PyUntypedArray> {
    let dims = IxDyn(&shape.iter().map(|&d| d as usize).collect::<Vec<_>>());
    fn make<'py, T: Element>(py: Python<'py>, dims: IxDyn) -> Bound<'py, PyUntypedArray> {
        PyArrayDyn::<T>::zeros(py, dims, false).as_untyped().clone()
    }
    match dtype {
        DataType::F16 => make::<f16>(py, dims),
        DataType::BF16 => make::<bf16>(py, dims),
        DataType::F32 => make::<f32>(py, dims),
        DataType::F64 => make::<f64>(py, dims),
        DataType::I8 => make::<i8>(py, dims),
        DataType::I16 => make::<i16>(py, dims),
        DataType::I32 => make::<i32>(py, dims),
        DataType::I64 => make::<i64>(py, dims),
        DataType::U8 | DataType::F8E4M3 | DataType::F8E5M2 => make::<u8>(py, dims),
        DataType::U16 => make::<u16>(py, dims),
        DataType::U32 => make::<u32>(py, dims),
        DataType::U64 => make::<u64>(py, dims),
        DataType::Bool => make::<bool>(py, dims),
    }
}

/// A new NumPy array holding a copy of `array`.
pub(crate) fn to_numpy<'py>(
    py: Python<'py>,
    array: &HostArray,
) -> PyResult<Bound<'py, PyUntypedArray>> {
    let out = zeros(py, array.dtype(), array.shape());
    with_view_mut(&out, "the new array", |mut into| {
        into.bytes_mut().copy_from_slice(array.bytes())
    })?;
    Ok(out)
}

/// A host array holding a copy of `array` (for the runtime's named arrays, which it keeps
/// by name between calls).
pub(crate) fn to_host(array: &Bound<'_, PyUntypedArray>, what: &str) -> PyResult<HostArray> {
    with_view(array, what, |view| {
        HostArray::new(view.dtype(), view.shape(), view.bytes().to_vec())
    })?
    .map_err(|e| PyValueError::new_err(format!("{what}: {e}")))
}
