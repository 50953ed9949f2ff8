//! The values the host hands a training program, checked where they enter: weights,
//! optimizer state and every `f32` stream of a step (core's [`finite`] rule: finite, of
//! magnitude below 2^64). A value that breaks the rule is [`RuntimeError::BadValue`],
//! naming the tensor, what it was loaded as and the first such value's index in the
//! array's shape — before any byte of the call moves.

use tessera_core::dtype::DataType;
use tessera_core::finite;

use super::RuntimeError;

/// `bytes` of `dtype` in an array of `shape`, named `name` and loaded as `what`, checked
/// (only `f32` values are: the program computes in `f32`, and no other type of a stream
/// enters its arithmetic).
pub(crate) fn check(
    name: &str,
    what: &'static str,
    dtype: DataType,
    shape: &[u32],
    bytes: &[u8],
) -> Result<(), RuntimeError> {
    if dtype != DataType::F32 {
        return Ok(());
    }
    match finite::first_unfit(bytes) {
        None => Ok(()),
        Some((flat, value)) => Err(RuntimeError::BadValue {
            name: name.to_string(),
            what,
            index: index_in(shape, flat),
            value,
        }),
    }
}

/// The row-major index in `shape` of element `flat` (a flat index where the shape does
/// not hold it).
pub(crate) fn index_in(shape: &[u32], flat: usize) -> Vec<usize> {
    let mut index = vec![0; shape.len()];
    let mut rest = flat;
    for (i, &d) in shape.iter().enumerate().rev() {
        let d = (d as usize).max(1);
        index[i] = rest % d;
        rest /= d;
    }
    if rest != 0 || shape.is_empty() {
        return vec![flat];
    }
    index
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_is_the_elements_place_in_its_shape() {
        assert_eq!(index_in(&[3, 4], 7), [1, 3]);
        assert_eq!(index_in(&[2, 3, 4], 23), [1, 2, 3]);
        assert_eq!(index_in(&[5], 4), [4]);
        assert_eq!(index_in(&[], 0), [0]);
        assert_eq!(index_in(&[2, 2], 9), [9], "past the shape: flat");
    }
}
