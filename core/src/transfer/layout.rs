use core::fmt;

use super::LayoutError;
use crate::grouping::{RetrievalMode, VariableSettings};
use crate::shard::ShardLayout;

/// The contiguous window of global replicas one instance (host process) owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct InstanceWindow {
    /// First global replica of the window.
    pub offset: usize,
    /// Number of replicas in the window.
    pub local: usize,
}

impl InstanceWindow {
    /// The window of a single instance owning all `replicas` replicas.
    pub const fn whole(replicas: usize) -> Self {
        Self {
            offset: 0,
            local: replicas,
        }
    }

    /// The window of instance `index` when `count` instances split `replicas` evenly.
    pub fn split(replicas: usize, count: usize, index: usize) -> Option<Self> {
        if count == 0 || index >= count || !replicas.is_multiple_of(count) {
            return None;
        }
        let local = replicas / count;
        Some(Self {
            // Cannot overflow: `index < count`, so `index·local < replicas`.
            offset: index * local,
            local,
        })
    }

    /// Whether global replica `replica` is in the window.
    pub fn contains(&self, replica: usize) -> bool {
        replica >= self.offset && replica - self.offset < self.local
    }
}

/// What `to_host` leaves for the caller to run across instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Collective {
    /// The host buffer is complete.
    None,
    /// Every instance filled its own window's rows: concatenate the windows' rows.
    Allgather,
    /// Every instance filled what it holds and zeroed the rest: sum the whole buffers.
    SumAllreduce,
}

impl fmt::Display for Collective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::None => "none",
            Self::Allgather => "allgather",
            Self::SumAllreduce => "sum-allreduce",
        })
    }
}

/// Where one local replica's slot comes from: host row `row` (of the from-host buffer),
/// and, for sharded variables, shard `shard` of that row's gathered form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Placement {
    /// Global replica index.
    pub replica: usize,
    /// Host row (group) whose value the replica holds.
    pub row: usize,
    /// Shard of the row the replica holds, if the variable is sharded.
    pub shard: Option<usize>,
}

/// One variable's layout on one instance: everything a weight transfer needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WeightLayout<'a> {
    pub(super) settings: VariableSettings,
    pub(super) elements: usize,
    pub(super) element_size: usize,
    pub(super) shard: Option<ShardLayout<'a>>,
    pub(super) window: InstanceWindow,
    pub(super) row_bytes: usize,
    pub(super) slot_bytes: usize,
}

impl<'a> WeightLayout<'a> {
    /// Checks that the pieces fit together and that every buffer size fits in `usize`.
    ///
    /// `elements` is the element count of one replica's value (the replica shape);
    /// `element_size` is in bytes.
    pub fn new(
        settings: VariableSettings,
        elements: usize,
        element_size: usize,
        shard: Option<ShardLayout<'a>>,
        window: InstanceWindow,
    ) -> Result<Self, LayoutError> {
        let grouping = settings.grouping();
        if element_size == 0 {
            return Err(LayoutError::ZeroElementSize);
        }
        if window.local == 0 {
            return Err(LayoutError::EmptyWindow);
        }
        let replicas = grouping.replicas();
        if window
            .offset
            .checked_add(window.local)
            .is_none_or(|end| end > replicas)
        {
            let (offset, local) = (window.offset, window.local);
            return Err(LayoutError::WindowOutOfRange {
                offset,
                local,
                replicas,
            });
        }
        let row_bytes = elements
            .checked_mul(element_size)
            .ok_or(LayoutError::TooLarge)?;
        // The to-host buffer has the most rows (`returning` ≥ groups).
        row_bytes
            .checked_mul(settings.returning())
            .ok_or(LayoutError::TooLarge)?;
        let mut slot_bytes = row_bytes;
        if let Some(shard) = &shard {
            if shard.elements() != elements {
                return Err(LayoutError::ShardElements {
                    shard: shard.elements(),
                    elements,
                });
            }
            let (domain, group_size) = (shard.domain(), grouping.group_size());
            if !group_size.is_multiple_of(domain) {
                return Err(LayoutError::DomainNotDividingGroup { domain, group_size });
            }
            slot_bytes = shard
                .per_replica()
                .checked_mul(element_size)
                .ok_or(LayoutError::TooLarge)?;
        }
        Ok(Self {
            settings,
            elements,
            element_size,
            shard,
            window,
            row_bytes,
            slot_bytes,
        })
    }

    /// The variable's grouping and retrieval mode.
    pub fn settings(&self) -> &VariableSettings {
        &self.settings
    }

    /// Elements of one replica's value.
    pub fn elements(&self) -> usize {
        self.elements
    }

    /// Bytes per element.
    pub fn element_size(&self) -> usize {
        self.element_size
    }

    /// The shard layout, if the variable is sharded.
    pub fn shard(&self) -> Option<&ShardLayout<'a>> {
        self.shard.as_ref()
    }

    /// This instance's window of global replicas.
    pub fn window(&self) -> InstanceWindow {
        self.window
    }

    /// Bytes of one host row: one replica's full value.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// Bytes of one remote slot: a row, or one shard with its padding.
    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    /// Bytes of the buffer `to_replicas` reads: one row per group.
    pub fn from_host_bytes(&self) -> usize {
        // Cannot overflow: `new` checked `row_bytes·returning`, and `returning ≥ groups`.
        self.row_bytes * self.settings.group_count()
    }

    /// Bytes of the buffer `to_host` writes: one row per returning replica.
    pub fn to_host_bytes(&self) -> usize {
        // Cannot overflow: `new` checked it.
        self.row_bytes * self.settings.returning()
    }

    /// Where local replica `local`'s slot comes from.
    pub fn placement(&self, local: usize) -> Result<Placement, LayoutError> {
        let count = self.window.local;
        if local >= count {
            return Err(LayoutError::LocalOutOfRange { local, count });
        }
        let replica = self.window.offset + local;
        let grouping = self.settings.grouping();
        let row = grouping.group_of(replica)?;
        let shard = match &self.shard {
            Some(shard) => Some(grouping.index_in_group(replica)? % shard.domain()),
            None => None,
        };
        Ok(Placement {
            replica,
            row,
            shard,
        })
    }

    /// The collective `to_host` leaves to the caller.
    pub fn collective(&self) -> Collective {
        let all_local = self.window.local == self.settings.grouping().replicas();
        match (all_local, &self.shard, self.settings.retrieval()) {
            (true, _, _) => Collective::None,
            (false, None, RetrievalMode::AllReplicas) => Collective::Allgather,
            (false, _, _) => Collective::SumAllreduce,
        }
    }
}
