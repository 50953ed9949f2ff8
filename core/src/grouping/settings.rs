use core::fmt;

use super::{CommGroup, GroupingError, ReplicaGrouping, Shape, ShapeError};

/// How a grouped variable comes back to the host.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RetrievalMode {
    /// One row per group, read from the group's representative.
    #[default]
    OnePerGroup,
    /// One row per replica.
    AllReplicas,
}

impl fmt::Display for RetrievalMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::OnePerGroup => "one-per-group",
            Self::AllReplicas => "all-replicas",
        })
    }
}

/// How a variable's grouping is written before the number of replicas is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum GroupingSpec {
    /// A named comm group.
    Comm(CommGroup),
    /// An explicit stride and group size.
    Strided {
        /// Distance between members.
        stride: usize,
        /// Members per group.
        group_size: usize,
    },
}

impl GroupingSpec {
    /// The grouping this spec makes on `replicas` replicas.
    ///
    /// **tessera:** every spec is validated against `replicas`, comm groups included.
    pub fn resolve(self, replicas: usize) -> Result<ReplicaGrouping, GroupingError> {
        match self {
            Self::Comm(comm) => comm.to_grouping(replicas),
            Self::Strided { stride, group_size } => {
                ReplicaGrouping::new(replicas, stride, group_size)
            }
        }
    }
}

/// A variable's grouping and retrieval mode, resolved for `N` replicas in `G` groups.
///
/// # Rules
///
/// - [`group_count`](Self::group_count) is `G`: the variable has one value per group.
/// - [`returning`](Self::returning), the rows weights-to-host returns, is `G` with
///   [`RetrievalMode::OnePerGroup`] and `N` with [`RetrievalMode::AllReplicas`].
/// - The [`representative`](Self::representative) of group `g`, whose copy stands for the
///   group, is its first member, `replica_at(g, 0)`.
/// - [`host_shape`](Self::host_shape) of a variable of shape `S`: `S` when `G == 1`, else
///   `[G] ++ S` (row `g` is group `g`'s value).
/// - [`returned_shape`](Self::returned_shape): `S` when `returning == 1`, else
///   `[returning] ++ S` (with `AllReplicas`, row `r` is replica `r`'s copy).
/// - [`replica_shape`](Self::replica_shape) from a host shape `H`: `H` when `G == 1`; else
///   `H` must have rank ≥ 1 and `H[0] == G`, and each replica holds `H[1..]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct VariableSettings {
    grouping: ReplicaGrouping,
    retrieval: RetrievalMode,
}

impl VariableSettings {
    /// Resolves `spec` on `replicas` replicas.
    pub fn new(
        spec: GroupingSpec,
        retrieval: RetrievalMode,
        replicas: usize,
    ) -> Result<Self, GroupingError> {
        Ok(Self::from_grouping(spec.resolve(replicas)?, retrieval))
    }

    /// Settings for an already validated grouping.
    pub const fn from_grouping(grouping: ReplicaGrouping, retrieval: RetrievalMode) -> Self {
        Self {
            grouping,
            retrieval,
        }
    }

    /// The grouping.
    pub fn grouping(&self) -> &ReplicaGrouping {
        &self.grouping
    }

    /// The retrieval mode.
    pub fn retrieval(&self) -> RetrievalMode {
        self.retrieval
    }

    /// Number of distinct values of the variable: one per group.
    pub fn group_count(&self) -> usize {
        self.grouping.num_groups()
    }

    /// Number of rows returned to the host by weights-to-host.
    pub fn returning(&self) -> usize {
        match self.retrieval {
            RetrievalMode::OnePerGroup => self.group_count(),
            RetrievalMode::AllReplicas => self.grouping.replicas(),
        }
    }

    /// The replica whose copy stands for group `group`: its first member.
    pub fn representative(&self, group: usize) -> Result<usize, GroupingError> {
        self.grouping.replica_at(group, 0)
    }

    /// The host shape of a variable of shape `shape`: one row per group when there are
    /// several groups.
    pub fn host_shape(&self, shape: &Shape) -> Result<Shape, ShapeError> {
        with_rows(shape, self.group_count())
    }

    /// The shape weights-to-host returns: one row per returning replica when there are
    /// several.
    pub fn returned_shape(&self, shape: &Shape) -> Result<Shape, ShapeError> {
        with_rows(shape, self.returning())
    }

    /// The shape each replica holds, given the variable's host shape.
    pub fn replica_shape(&self, host: &Shape) -> Result<Shape, ShapeError> {
        let groups = self.group_count();
        if groups == 1 {
            return Ok(host.clone());
        }
        match host.dims().first() {
            Some(&outer) if outer == groups => Ok(host.without_outer().unwrap_or_default()),
            found => Err(ShapeError::GroupDimMismatch {
                groups,
                found: found.copied(),
            }),
        }
    }
}

fn with_rows(shape: &Shape, rows: usize) -> Result<Shape, ShapeError> {
    if rows == 1 {
        Ok(shape.clone())
    } else {
        shape.with_outer(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(stride: usize, group_size: usize, retrieval: RetrievalMode) -> VariableSettings {
        VariableSettings::new(GroupingSpec::Strided { stride, group_size }, retrieval, 8).unwrap()
    }

    fn shape(dims: &[usize]) -> Shape {
        Shape::new(dims).unwrap()
    }

    #[test]
    fn returning_depends_on_retrieval() {
        assert_eq!(settings(4, 2, RetrievalMode::OnePerGroup).returning(), 4);
        assert_eq!(settings(4, 2, RetrievalMode::AllReplicas).returning(), 8);
    }

    #[test]
    fn representative_is_first_member() {
        assert_eq!(
            settings(2, 2, RetrievalMode::OnePerGroup).representative(2),
            Ok(4)
        );
    }

    #[test]
    fn single_group_keeps_shapes() {
        let one = settings(1, 8, RetrievalMode::OnePerGroup);
        assert_eq!(one.host_shape(&shape(&[4, 2])), Ok(shape(&[4, 2])));
        assert_eq!(one.replica_shape(&Shape::scalar()), Ok(Shape::scalar()));
    }

    #[test]
    fn replica_shape_needs_the_group_dimension() {
        let two = settings(1, 4, RetrievalMode::OnePerGroup);
        assert_eq!(two.replica_shape(&shape(&[2, 3])), Ok(shape(&[3])));
        assert_eq!(
            two.replica_shape(&shape(&[3])),
            Err(ShapeError::GroupDimMismatch {
                groups: 2,
                found: Some(3)
            })
        );
        assert_eq!(
            two.replica_shape(&Shape::scalar()),
            Err(ShapeError::GroupDimMismatch {
                groups: 2,
                found: None
            })
        );
    }
}
