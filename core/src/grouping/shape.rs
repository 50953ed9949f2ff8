use core::fmt;

/// The largest rank a [`Shape`] can hold, group dimension included.
pub const MAX_RANK: usize = 8;

/// A tensor shape of at most [`MAX_RANK`] dimensions, stored inline.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Shape {
    dims: heapless::Vec<usize, MAX_RANK>,
}

impl Shape {
    /// The shape of a scalar: rank 0, one element.
    pub const fn scalar() -> Self {
        Self {
            dims: heapless::Vec::new(),
        }
    }

    /// A shape with the given dimensions.
    pub fn new(dims: &[usize]) -> Result<Self, ShapeError> {
        let dims = heapless::Vec::from_slice(dims)
            .map_err(|_| ShapeError::RankTooLarge { rank: dims.len() })?;
        Ok(Self { dims })
    }

    /// The dimensions, outermost first.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// Number of elements (1 for a scalar).
    pub fn elements(&self) -> Result<usize, ShapeError> {
        self.dims
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .ok_or(ShapeError::TooManyElements)
    }

    /// This shape with `outer` added as a new outermost dimension.
    pub fn with_outer(&self, outer: usize) -> Result<Self, ShapeError> {
        let mut dims = heapless::Vec::new();
        let rank = self.rank() + 1;
        dims.push(outer)
            .map_err(|_| ShapeError::RankTooLarge { rank })?;
        dims.extend_from_slice(&self.dims)
            .map_err(|_| ShapeError::RankTooLarge { rank })?;
        Ok(Self { dims })
    }

    /// This shape without its outermost dimension, or `None` for a scalar.
    pub fn without_outer(&self) -> Option<Self> {
        let (_, inner) = self.dims.split_first()?;
        // A suffix of a valid shape always fits.
        Some(Self {
            dims: heapless::Vec::from_slice(inner).ok()?,
        })
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.dims.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// Why a shape could not be built or converted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ShapeError {
    /// More dimensions than [`MAX_RANK`].
    #[error("a shape of rank {rank} exceeds the maximum rank {MAX_RANK}")]
    RankTooLarge {
        /// The rank that was needed.
        rank: usize,
    },
    /// The product of the dimensions does not fit in `usize`.
    #[error("the number of elements overflows usize")]
    TooManyElements,
    /// A host shape whose outer dimension is not the number of groups.
    #[error(fmt = group_dim_mismatch)]
    GroupDimMismatch {
        /// The number of groups the outer dimension must equal.
        groups: usize,
        /// The outer dimension found (`None` for a scalar host shape).
        found: Option<usize>,
    },
}

/// [`ShapeError::GroupDimMismatch`]'s message, in two texts: a scalar host shape has no
/// outer dimension to name.
fn group_dim_mismatch(
    groups: &usize,
    found: &Option<usize>,
    f: &mut fmt::Formatter<'_>,
) -> fmt::Result {
    match found {
        Some(found) => write!(
            f,
            "the host shape's outer dimension ({found}) must equal the number of groups ({groups})"
        ),
        None => write!(
            f,
            "a scalar host shape has no group dimension; {groups} groups need one"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalar_has_one_element() {
        assert_eq!(Shape::scalar().elements(), Ok(1));
        assert_eq!(Shape::new(&[2, 3, 4]).unwrap().elements(), Ok(24));
    }

    #[test]
    fn rank_and_overflow_are_errors() {
        assert_eq!(
            Shape::new(&[1; 9]),
            Err(ShapeError::RankTooLarge { rank: 9 })
        );
        let full = Shape::new(&[1; MAX_RANK]).unwrap();
        assert_eq!(
            full.with_outer(2),
            Err(ShapeError::RankTooLarge { rank: 9 })
        );
        let huge = Shape::new(&[usize::MAX, 2]).unwrap();
        assert_eq!(huge.elements(), Err(ShapeError::TooManyElements));
    }

    #[test]
    fn outer_dimension_round_trip() {
        let shape = Shape::new(&[3, 4]).unwrap();
        let host = shape.with_outer(2).unwrap();
        assert_eq!(host.dims(), [2, 3, 4]);
        assert_eq!(host.without_outer(), Some(shape));
        assert_eq!(Shape::scalar().without_outer(), None);
    }
}
