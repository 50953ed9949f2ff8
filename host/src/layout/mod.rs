//! Inspect a variable's layout: which replicas share it, which shard each holds and which
//! part of the host buffer lands in which slot.
//!
//! [`Report::build`] asks `tessera-core` every question (grouping, shard layout, placement,
//! collective) so that what a user sees is exactly what the runtime will do. The report is
//! rendered as a table ([`table`]), as JSON (its `serde` form) or as a picture ([`svg`]).
//!
//! Requests are bounded ([`MAX_REPLICAS`], [`MAX_ELEMENTS`]) so that every form of the
//! report stays small: one entry per replica at most, whatever the variable's size.

pub mod svg;
pub mod table;

use std::fmt;

use serde::Serialize;
use tessera_core::grouping::{
    CommGroup, GroupingError, GroupingSpec, ReplicaGrouping, RetrievalMode, Shape, ShapeError,
    VariableSettings,
};
use tessera_core::shard::{LayoutKind, ShardError, ShardLayout};
use tessera_core::transfer::{InstanceWindow, LayoutError, WeightLayout};

/// Most replicas a layout shows (`--replicas`, and so `--shard-domain`, `--instances`).
pub const MAX_REPLICAS: usize = 4096;
/// Most elements of the variable on one replica: the bound of every dimension of
/// `--shape` and of their product (2^30).
pub const MAX_ELEMENTS: usize = 1 << 30;

/// What the user asked to see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Number of global replicas.
    pub replicas: usize,
    /// How the variable's replicas are grouped.
    pub spec: GroupingSpec,
    /// How the variable returns to the host.
    pub retrieval: RetrievalMode,
    /// The variable's shape on one replica.
    pub shape: Vec<usize>,
    /// Shard domain and layout rule, if the variable is sharded.
    pub shard: Option<(usize, LayoutKind)>,
    /// Number of instances splitting the replicas evenly.
    pub instances: usize,
    /// Which instance's window to show.
    pub instance: usize,
}

/// A stored grouping, as `{replicas, stride, group_size}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GroupingTriple {
    /// Number of replicas.
    pub replicas: usize,
    /// Stored stride.
    pub stride: usize,
    /// Members per group.
    pub group_size: usize,
}

impl From<&ReplicaGrouping> for GroupingTriple {
    fn from(g: &ReplicaGrouping) -> Self {
        Self {
            replicas: g.replicas(),
            stride: g.stride(),
            group_size: g.group_size(),
        }
    }
}

/// The shard layout, in element units.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShardReport {
    /// Replicas in the shard domain.
    pub domain: usize,
    /// Elements per shard, padding included.
    pub per_replica: usize,
    /// Elements of the gathered buffer.
    pub gathered_elements: usize,
    /// Intervals of the gathered buffer, in reference order.
    pub intervals: Vec<[usize; 2]>,
    /// The rule that made the layout (not part of the JSON form).
    #[serde(skip)]
    pub kind: Option<LayoutKind>,
}

/// Where one local replica's slot comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlacementReport {
    /// Global replica.
    pub replica: usize,
    /// Host row it is filled from.
    pub row: usize,
    /// `[src_begin, src_end, dst_offset]`: elements of the row and where they land.
    pub pieces: Vec<[usize; 3]>,
}

/// Everything `tessera layout` shows. Field order is the JSON key order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The stored grouping.
    pub grouping: GroupingTriple,
    /// The comm group naming it, if any.
    pub comm_group: Option<String>,
    /// Number of groups.
    pub num_groups: usize,
    /// Group of every replica.
    pub assignment: Vec<usize>,
    /// Position of every replica in its group.
    pub index_in_group: Vec<usize>,
    /// Members of every group.
    pub groups: Vec<Vec<usize>>,
    /// First member of every group.
    pub representatives: Vec<usize>,
    /// The transposed grouping, if representable.
    pub transpose: Option<GroupingTriple>,
    /// Retrieval mode.
    pub retrieval: String,
    /// Rows weights-to-host returns.
    pub returning: usize,
    /// Shape of the from-host buffer.
    pub host_shape: Vec<usize>,
    /// Shape of the to-host buffer.
    pub returned_shape: Vec<usize>,
    /// The shard layout, for sharded variables.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardReport>,
    /// One entry per local replica, in order.
    pub placement: Vec<PlacementReport>,
    /// What weights-to-host still needs across instances.
    pub collective: String,
}

impl Report {
    /// Asks the core every question about `request`'s layout.
    ///
    /// The request is checked against [`MAX_REPLICAS`] and [`MAX_ELEMENTS`] first.
    pub fn build(request: &Request) -> Result<Self, InspectError> {
        check_bounds(request)?;
        let replicas = request.replicas;
        let settings =
            VariableSettings::new(request.spec, request.retrieval, replicas).map_err(|error| {
                InspectError::Spec {
                    spec: request.spec,
                    replicas,
                    error,
                }
            })?;
        let shape = Shape::new(&request.shape)?;
        let elements = bounded_elements(&shape)?;
        let window = InstanceWindow::split(request.replicas, request.instances, request.instance)
            .ok_or(InspectError::Instances {
            replicas: request.replicas,
            instances: request.instances,
            instance: request.instance,
        })?;
        let shard = match request.shard {
            None => None,
            Some((domain, LayoutKind::PaddedTail)) => {
                Some(ShardLayout::padded_tail(elements, domain)?)
            }
            Some((domain, _)) => Some(ShardLayout::balanced(elements, domain)?),
        };
        // Element units: one "byte" per element.
        let layout = WeightLayout::new(settings, elements, 1, shard, window)?;
        Self::describe(request, &shape, &layout)
    }

    /// The report of `layout`, the layout of `request`'s variable of shape `shape` that
    /// [`build`](Self::build) has checked and made.
    fn describe(
        request: &Request,
        shape: &Shape,
        layout: &WeightLayout<'_>,
    ) -> Result<Self, InspectError> {
        let settings = layout.settings();
        let grouping = *settings.grouping();
        let num_groups = grouping.num_groups();
        let groups = (0..num_groups)
            .map(|g| grouping.members(g).map(Iterator::collect))
            .collect::<Result<Vec<Vec<usize>>, _>>()?;
        let placement = (0..layout.window().local)
            .map(|local| placement_report(layout, local))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            grouping: (&grouping).into(),
            comm_group: CommGroup::from_grouping(&grouping)
                .ok()
                .map(|c| c.to_string()),
            num_groups,
            assignment: grouping.assignment().collect(),
            index_in_group: (0..grouping.replicas())
                .map(|r| grouping.index_in_group(r))
                .collect::<Result<_, _>>()?,
            representatives: groups
                .iter()
                .filter_map(|members| members.first().copied())
                .collect(),
            groups,
            transpose: grouping.transpose().ok().as_ref().map(GroupingTriple::from),
            retrieval: request.retrieval.to_string(),
            returning: settings.returning(),
            host_shape: settings.host_shape(shape)?.dims().to_vec(),
            returned_shape: settings.returned_shape(shape)?.dims().to_vec(),
            shard: layout.shard().map(|s| ShardReport {
                domain: s.domain(),
                per_replica: s.per_replica(),
                gathered_elements: s.gathered_len(),
                intervals: s.intervals().map(|iv| [iv.begin, iv.end]).collect(),
                kind: Some(s.kind()),
            }),
            placement,
            collective: layout.collective().to_string(),
        })
    }
}

/// The bounds every request keeps before anything is built: the replicas and the shard
/// domain in `1..=MAX_REPLICAS`, every dimension at most [`MAX_ELEMENTS`].
fn check_bounds(request: &Request) -> Result<(), InspectError> {
    let replicas = request.replicas;
    if !(1..=MAX_REPLICAS).contains(&replicas) {
        return Err(InspectError::Replicas { replicas });
    }
    if let Some((index, &dim)) = request
        .shape
        .iter()
        .enumerate()
        .find(|&(_, &dim)| dim > MAX_ELEMENTS)
    {
        return Err(InspectError::Dimension { index, dim });
    }
    if let Some((domain, _)) = request.shard {
        if !(1..=MAX_REPLICAS).contains(&domain) {
            return Err(InspectError::ShardDomain { domain });
        }
    }
    Ok(())
}

/// The elements of `shape`, at most [`MAX_ELEMENTS`].
fn bounded_elements(shape: &Shape) -> Result<usize, InspectError> {
    match shape.elements() {
        Ok(n) if n <= MAX_ELEMENTS => Ok(n),
        Ok(n) => Err(InspectError::Elements { elements: Some(n) }),
        Err(_) => Err(InspectError::Elements { elements: None }),
    }
}

fn placement_report(
    layout: &WeightLayout<'_>,
    local: usize,
) -> Result<PlacementReport, InspectError> {
    let placement = layout.placement(local)?;
    let pieces = match (layout.shard(), placement.shard) {
        (Some(shard), Some(m)) => shard
            .pieces(m)?
            .map(|p| [p.src_begin, p.src_end, p.dst_offset])
            .collect(),
        _ => vec![[0, layout.elements(), 0]],
    };
    Ok(PlacementReport {
        replica: placement.replica,
        row: placement.row,
        pieces,
    })
}

/// Why a layout cannot be shown: the rule the request breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InspectError {
    /// A number of replicas outside `1..=MAX_REPLICAS`.
    #[error("--replicas ({replicas}) must be in 1..={MAX_REPLICAS}")]
    Replicas {
        /// The number asked for.
        replicas: usize,
    },
    /// A dimension of the shape above [`MAX_ELEMENTS`].
    #[error("--shape: dimension {index} ({dim}) must be at most {MAX_ELEMENTS}")]
    Dimension {
        /// Position of the dimension.
        index: usize,
        /// Its size.
        dim: usize,
    },
    /// A shape of more than [`MAX_ELEMENTS`] elements.
    #[error(fmt = describe_elements)]
    Elements {
        /// The product of the dimensions (`None`: it overflows `usize`).
        elements: Option<usize>,
    },
    /// A shard domain outside `1..=MAX_REPLICAS`.
    #[error("--shard-domain ({domain}) must be in 1..={MAX_REPLICAS}")]
    ShardDomain {
        /// The domain asked for.
        domain: usize,
    },
    /// A grouping or comm group that does not fit the replicas.
    #[error(fmt = describe_spec)]
    Spec {
        /// The grouping asked for.
        spec: GroupingSpec,
        /// Number of replicas.
        replicas: usize,
        /// The rule it breaks.
        error: GroupingError,
    },
    /// An invalid grouping or comm group.
    #[error("{0}")]
    Grouping(GroupingError),
    /// An invalid shape.
    #[error("{0}")]
    Shape(ShapeError),
    /// An invalid shard layout.
    #[error("{0}")]
    Shard(ShardError),
    /// Pieces that do not fit together (e.g. a domain not dividing the group size).
    #[error("{0}")]
    Layout(LayoutError),
    /// Instances that do not split the replicas evenly, or an instance out of range.
    #[error(
        "--instances ({instances}) must be at least 1 and divide --replicas ({replicas}), and \
         --instance ({instance}) must be below --instances"
    )]
    Instances {
        /// Number of replicas.
        replicas: usize,
        /// Number of instances.
        instances: usize,
        /// The instance asked for.
        instance: usize,
    },
}

/// [`InspectError::Elements`]'s message: the count, unless it overflows.
fn describe_elements(elements: &Option<usize>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match elements {
        Some(elements) => write!(
            f,
            "--shape: the variable has {elements} elements; at most {MAX_ELEMENTS} are allowed"
        ),
        None => write!(
            f,
            "--shape: the number of elements overflows; at most {MAX_ELEMENTS} are allowed"
        ),
    }
}

/// [`InspectError::Spec`]'s message: the grouping as its argument spells it, and the rule
/// it breaks.
fn describe_spec(
    spec: &GroupingSpec,
    replicas: &usize,
    error: &GroupingError,
    f: &mut fmt::Formatter<'_>,
) -> fmt::Result {
    match spec {
        GroupingSpec::Comm(comm) => write!(f, "--comm {comm}")?,
        GroupingSpec::Strided { stride, group_size } => {
            write!(f, "--grouping {stride}:{group_size}")?
        }
    }
    write!(f, " does not fit --replicas {replicas}: {error}")
}

macro_rules! from_core {
    ($($variant:ident($ty:ty)),*) => {$(
        impl From<$ty> for InspectError {
            fn from(e: $ty) -> Self {
                Self::$variant(e)
            }
        }
    )*};
}
from_core!(
    Grouping(GroupingError),
    Shape(ShapeError),
    Shard(ShardError),
    Layout(LayoutError)
);

#[cfg(test)]
mod tests {
    use super::*;

    fn request(replicas: usize, spec: GroupingSpec) -> Request {
        Request {
            replicas,
            spec,
            retrieval: RetrievalMode::OnePerGroup,
            shape: vec![],
            shard: None,
            instances: 1,
            instance: 0,
        }
    }

    #[test]
    fn orthogonal_report() {
        let report =
            Report::build(&request(4, GroupingSpec::Comm(CommGroup::Orthogonal(2)))).unwrap();
        assert_eq!(report.groups, [[0, 2], [1, 3]]);
        assert_eq!(report.representatives, [0, 1]);
        assert_eq!(report.comm_group.as_deref(), Some("orthogonal:2"));
        assert_eq!(report.host_shape, [2]);
        assert_eq!(report.collective, "none");
    }

    #[test]
    fn sharded_placement_on_second_instance() {
        let mut req = request(4, GroupingSpec::Comm(CommGroup::All));
        req.shape = vec![30];
        req.shard = Some((4, LayoutKind::Balanced));
        req.instances = 2;
        req.instance = 1;
        let report = Report::build(&req).unwrap();
        let pieces: Vec<_> = report
            .placement
            .iter()
            .map(|p| (p.replica, p.pieces.clone()))
            .collect();
        assert_eq!(pieces, [(2, vec![[15, 22, 0]]), (3, vec![[22, 30, 0]])]);
        assert_eq!(report.collective, "sum-allreduce");
    }

    #[test]
    fn oversized_requests_are_rejected_before_anything_is_built() {
        // Each of these panicked or aborted on allocation before the bounds.
        let all = GroupingSpec::Comm(CommGroup::All);
        let none = GroupingSpec::Comm(CommGroup::None);
        for (replicas, spec) in [(usize::MAX, all), (4_000_000_000, all), (100_000_000, none)] {
            assert_eq!(
                Report::build(&request(replicas, spec)),
                Err(InspectError::Replicas { replicas })
            );
        }
        let mut req = request(4, all);
        req.shape = vec![1 << 20, 1 << 20];
        let err = Report::build(&req).unwrap_err();
        assert_eq!(
            err,
            InspectError::Elements {
                elements: Some(1 << 40)
            }
        );
        assert!(err.to_string().starts_with("--shape"), "{err}");
        req.shape = vec![usize::MAX, 0];
        assert_eq!(
            Report::build(&req),
            Err(InspectError::Dimension {
                index: 0,
                dim: usize::MAX
            })
        );
        req.shape = vec![8];
        req.shard = Some((usize::MAX, LayoutKind::Balanced));
        assert_eq!(
            Report::build(&req),
            Err(InspectError::ShardDomain { domain: usize::MAX })
        );
    }

    #[test]
    fn the_largest_request_builds() {
        let mut req = request(MAX_REPLICAS, GroupingSpec::Comm(CommGroup::None));
        req.shape = vec![MAX_ELEMENTS];
        let report = Report::build(&req).unwrap();
        assert_eq!(report.placement.len(), MAX_REPLICAS);
    }

    #[test]
    fn groupings_that_do_not_fit_name_both_arguments() {
        let err = Report::build(&request(8, GroupingSpec::Comm(CommGroup::Consecutive(3))))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("--comm consecutive:3 does not fit --replicas 8:"),
            "{err}"
        );
        let err = Report::build(&request(
            4,
            GroupingSpec::Strided {
                stride: 3,
                group_size: 1,
            },
        ))
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("--grouping 3:1 does not fit --replicas 4:"),
            "{err}"
        );
    }

    #[test]
    fn uneven_instances_are_rejected() {
        let mut req = request(4, GroupingSpec::Comm(CommGroup::All));
        req.instances = 3;
        assert!(matches!(
            Report::build(&req),
            Err(InspectError::Instances { .. })
        ));
    }
}
