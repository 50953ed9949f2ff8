//! Values on the host: arrays with their element type and shape, and a register's value
//! read back. The runtime (weights, step IO, anchors) and the session (copies, collectives,
//! register values) both speak these types; neither owns them.

use std::sync::Arc;

use tessera_core::dtype::DataType;
use tessera_core::wire::MAX_SHAPE_RANK;

/// An array on the host: element type, shape (row-major) and little-endian bytes. The
/// bytes are shared, not copied, when the array is cloned, reshaped or handed to a device
/// thread.
#[derive(Debug, Clone, PartialEq)]
pub struct HostArray {
    dtype: DataType,
    shape: Vec<u32>,
    data: Arc<Vec<u8>>,
}

/// Why a host array cannot be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ArrayError {
    /// More dimensions than a register holds.
    #[error("an array has at most {MAX_SHAPE_RANK} dimensions, not {rank}")]
    Rank {
        /// Dimensions given.
        rank: usize,
    },
    /// Bytes that do not make `product(shape)` elements of the type.
    #[error("the shape and element type need {expected} bytes, not {actual}")]
    Length {
        /// Bytes the shape and type need.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// A shape whose byte size overflows.
    #[error("the array's byte size overflows")]
    Overflow,
    /// An array larger than the host can allocate.
    #[error("the host cannot allocate the array's {bytes} bytes")]
    HostMemory {
        /// Bytes asked for.
        bytes: usize,
    },
}

/// Bytes of an array of `dtype` and `shape`.
pub fn byte_len(dtype: DataType, shape: &[u32]) -> Result<usize, ArrayError> {
    if shape.len() > MAX_SHAPE_RANK {
        return Err(ArrayError::Rank { rank: shape.len() });
    }
    shape
        .iter()
        .try_fold(dtype.size(), |n, &d| n.checked_mul(d as usize))
        .ok_or(ArrayError::Overflow)
}

impl HostArray {
    /// An array from its bytes; their length must match the shape and type.
    pub fn new(dtype: DataType, shape: &[u32], data: Vec<u8>) -> Result<Self, ArrayError> {
        Self::shared(dtype, shape, Arc::new(data))
    }

    /// An array over bytes already shared.
    pub fn shared(dtype: DataType, shape: &[u32], data: Arc<Vec<u8>>) -> Result<Self, ArrayError> {
        let expected = byte_len(dtype, shape)?;
        if data.len() != expected {
            return Err(ArrayError::Length {
                expected,
                actual: data.len(),
            });
        }
        Ok(Self {
            dtype,
            shape: shape.to_vec(),
            data,
        })
    }

    /// An f32 array.
    ///
    /// ```
    /// use tessera_core::dtype::DataType;
    /// use tessera_host::array::{ArrayError, HostArray};
    ///
    /// let a = HostArray::from_f32(&[2, 3], &[0., 1., 2., 3., 4., 5.])?;
    /// assert_eq!((a.dtype(), a.shape()), (DataType::F32, &[2, 3][..]));
    /// assert_eq!((a.elements(), a.bytes().len()), (6, 24)); // 4 bytes each, little-endian
    /// assert_eq!(a.to_f32(), Some(vec![0., 1., 2., 3., 4., 5.]));
    /// // The values must fill the shape exactly.
    /// let short = HostArray::from_f32(&[2, 3], &[0.; 5]);
    /// assert_eq!(short, Err(ArrayError::Length { expected: 24, actual: 20 }));
    /// # Ok::<(), ArrayError>(())
    /// ```
    pub fn from_f32(shape: &[u32], values: &[f32]) -> Result<Self, ArrayError> {
        Self::new(DataType::F32, shape, bytemuck::cast_slice(values).to_vec())
    }

    /// An f64 array.
    pub fn from_f64(shape: &[u32], values: &[f64]) -> Result<Self, ArrayError> {
        Self::new(DataType::F64, shape, bytemuck::cast_slice(values).to_vec())
    }

    /// An i32 array.
    pub fn from_i32(shape: &[u32], values: &[i32]) -> Result<Self, ArrayError> {
        Self::new(DataType::I32, shape, bytemuck::cast_slice(values).to_vec())
    }

    /// An i64 array.
    pub fn from_i64(shape: &[u32], values: &[i64]) -> Result<Self, ArrayError> {
        Self::new(DataType::I64, shape, bytemuck::cast_slice(values).to_vec())
    }

    /// A u8 array.
    pub fn from_u8(shape: &[u32], values: &[u8]) -> Result<Self, ArrayError> {
        Self::new(DataType::U8, shape, values.to_vec())
    }

    /// The element type.
    pub fn dtype(&self) -> DataType {
        self.dtype
    }

    /// The shape.
    pub fn shape(&self) -> &[u32] {
        &self.shape
    }

    /// Number of elements.
    pub fn elements(&self) -> usize {
        self.data.len() / self.dtype.size().max(1)
    }

    /// The little-endian bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// The elements as f32, if that is the type.
    pub fn to_f32(&self) -> Option<Vec<f32>> {
        (self.dtype == DataType::F32).then(|| le_values(&self.data, f32::from_le_bytes))
    }

    /// The elements as f64, if that is the type.
    pub fn to_f64(&self) -> Option<Vec<f64>> {
        (self.dtype == DataType::F64).then(|| le_values(&self.data, f64::from_le_bytes))
    }

    /// The elements as i32, if that is the type.
    pub fn to_i32(&self) -> Option<Vec<i32>> {
        (self.dtype == DataType::I32).then(|| le_values(&self.data, i32::from_le_bytes))
    }

    /// The elements as i64, if that is the type.
    pub fn to_i64(&self) -> Option<Vec<i64>> {
        (self.dtype == DataType::I64).then(|| le_values(&self.data, i64::from_le_bytes))
    }

    /// The same bytes (shared) under another shape with the same element count.
    pub fn reshaped(&self, shape: &[u32]) -> Result<Self, ArrayError> {
        Self::shared(self.dtype, shape, Arc::clone(&self.data))
    }

    /// The bytes, to fill in place (copied first only if another array shares them).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        Arc::make_mut(&mut self.data).as_mut_slice()
    }

    /// Takes on `shape`, which must need as many bytes (the bytes stay).
    pub(super) fn set_shape(&mut self, shape: &[u32]) -> Result<(), ArrayError> {
        let expected = byte_len(self.dtype, shape)?;
        if expected != self.data.len() {
            return Err(ArrayError::Length {
                expected,
                actual: self.data.len(),
            });
        }
        self.shape = shape.to_vec();
        Ok(())
    }

    /// The bytes, shared.
    pub fn share(&self) -> Arc<Vec<u8>> {
        Arc::clone(&self.data)
    }

    /// The bytes themselves: taken without a copy when no other array shares them.
    pub fn into_bytes(self) -> Vec<u8> {
        Arc::try_unwrap(self.data).unwrap_or_else(|shared| shared.as_ref().clone())
    }
}

/// An array borrowed from its owner (a `HostArray`, a NumPy array, a memory map): element
/// type, shape and little-endian bytes, which a copy to a device reads in place.
#[derive(Debug, Clone, Copy)]
pub struct ArrayView<'a> {
    dtype: DataType,
    shape: &'a [u32],
    bytes: &'a [u8],
    /// The same bytes held shared, when the owner is a `HostArray`: a device thread's queue
    /// takes them without a copy.
    shared: Option<&'a Arc<Vec<u8>>>,
}

impl<'a> ArrayView<'a> {
    /// A view of `bytes` as an array of `dtype` and `shape`; their length must match.
    ///
    /// ```
    /// use tessera_core::dtype::DataType;
    /// use tessera_host::array::{ArrayError, ArrayView};
    ///
    /// let bytes = [0u8; 24];
    /// let view = ArrayView::new(DataType::F32, &[2, 3], &bytes)?;
    /// assert_eq!((view.dtype(), view.shape(), view.bytes().len()), (DataType::F32, &[2, 3][..], 24));
    /// let short = ArrayView::new(DataType::F32, &[2, 4], &bytes);
    /// assert_eq!(short.err(), Some(ArrayError::Length { expected: 32, actual: 24 }));
    /// # Ok::<(), ArrayError>(())
    /// ```
    pub fn new(dtype: DataType, shape: &'a [u32], bytes: &'a [u8]) -> Result<Self, ArrayError> {
        let expected = byte_len(dtype, shape)?;
        if bytes.len() != expected {
            return Err(ArrayError::Length {
                expected,
                actual: bytes.len(),
            });
        }
        Ok(Self {
            dtype,
            shape,
            bytes,
            shared: None,
        })
    }

    /// The element type.
    pub fn dtype(&self) -> DataType {
        self.dtype
    }

    /// The shape.
    pub fn shape(&self) -> &'a [u32] {
        self.shape
    }

    /// The little-endian bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Number of elements.
    pub fn elements(&self) -> usize {
        self.bytes.len() / self.dtype.size().max(1)
    }

    /// The bytes held shared, if the owner shares them.
    pub(crate) fn shared(&self) -> Option<&'a Arc<Vec<u8>>> {
        self.shared
    }
}

impl<'a> From<&'a HostArray> for ArrayView<'a> {
    fn from(array: &'a HostArray) -> Self {
        Self {
            dtype: array.dtype,
            shape: &array.shape,
            bytes: &array.data,
            shared: Some(&array.data),
        }
    }
}

/// An array the runtime reads where it lies: a [`HostArray`], or an [`ArrayView`] of bytes
/// borrowed from their owner. The runtime's inputs (a step's streams, weights and optimizer
/// state from the host) take either, so a caller whose arrays live elsewhere (NumPy's)
/// lends them instead of copying them into host arrays first.
pub trait AsView {
    /// The array, viewed.
    fn view(&self) -> ArrayView<'_>;
}

impl AsView for HostArray {
    fn view(&self) -> ArrayView<'_> {
        self.into()
    }
}

impl AsView for ArrayView<'_> {
    fn view(&self) -> ArrayView<'_> {
        *self
    }
}

/// An array the runtime writes where it lies (weights to host into the caller's arrays):
/// a [`HostArray`], or any other owner of bytes with an element type and a shape (a NumPy
/// array, lent).
pub trait AsViewMut {
    /// The element type.
    fn dtype(&self) -> DataType;
    /// The shape.
    fn shape(&self) -> &[u32];
    /// The bytes, to fill in place.
    fn bytes_mut(&mut self) -> &mut [u8];
}

impl AsViewMut for HostArray {
    fn dtype(&self) -> DataType {
        self.dtype
    }

    fn shape(&self) -> &[u32] {
        &self.shape
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        HostArray::bytes_mut(self)
    }
}

/// Bytes borrowed from their owner (a NumPy array, say) to receive an array of `dtype`
/// read from a device: a copy from a device checks the type and the length, then writes
/// them in place (the owner keeps its own shape).
#[derive(Debug)]
pub struct ArrayViewMut<'a> {
    dtype: DataType,
    bytes: &'a mut [u8],
}

impl<'a> ArrayViewMut<'a> {
    /// `bytes` as room for elements of `dtype` (a whole number of them, else an error).
    pub fn new(dtype: DataType, bytes: &'a mut [u8]) -> Result<Self, ArrayError> {
        let size = dtype.size().max(1);
        if !bytes.len().is_multiple_of(size) {
            return Err(ArrayError::Length {
                expected: bytes.len() / size * size,
                actual: bytes.len(),
            });
        }
        Ok(Self { dtype, bytes })
    }

    /// The element type.
    pub fn dtype(&self) -> DataType {
        self.dtype
    }

    /// Number of elements.
    pub fn elements(&self) -> usize {
        self.bytes.len() / self.dtype.size().max(1)
    }

    /// The bytes, to fill in place.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.bytes
    }
}

/// Little-endian values of `N` bytes each.
fn le_values<T, const N: usize>(bytes: &[u8], from: fn([u8; N]) -> T) -> Vec<T> {
    bytes
        .chunks_exact(N)
        .map(|c| {
            let mut a = [0u8; N];
            a.copy_from_slice(c);
            from(a)
        })
        .collect()
}

/// A register's value, read back to the host.
#[derive(Debug, Clone, PartialEq)]
pub enum HostValue {
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
    /// A shape.
    Shape(Vec<u32>),
    /// An array.
    Array(HostArray),
}
