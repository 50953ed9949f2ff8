//! Weights between a host buffer and the replicas' remote buffers.
//!
//! A [`WeightLayout`] describes one variable on one instance: its grouping and retrieval
//! mode, its size, its shard layout if it is sharded, and the window of global replicas this
//! instance owns. [`WeightLayout::to_replicas`] and [`WeightLayout::to_host`] copy straight
//! between the host buffer (bytes) and each local replica's slot, reached through the
//! [`RemoteSlots`] trait the caller implements: no scratch buffer, no allocation. Padding in
//! the slots is written as zeros. `to_host` returns the [`Collective`] the caller must still
//! run across instances to complete the host buffer.
//!
//! Host buffers are row-major: row `i` is bytes `[i·row_bytes, (i+1)·row_bytes)`, with
//! `row_bytes = elements × element_size`. Weights from the host have one row per group;
//! weights to the host have [`returning`] rows (one per group, or one per replica).
//!
//! [`returning`]: crate::grouping::VariableSettings::returning
//!
//! # The rules
//!
//! An instance owns the global replicas `[offset, offset + local)`; each of them has one
//! slot per variable. With the variable's grouping (group `g`, member `i`, `D` the shard
//! domain):
//!
//! - **To the replicas, not sharded:** local replica `r` receives host row
//!   `group_of(offset + r)`.
//! - **To the replicas, sharded** (`D` must divide the group size): each group's row is
//!   laid out in gathered form, and member `i` of the group, if local, receives shard
//!   `i mod D` with zeros in its padding.
//! - **To the host, not sharded, all replicas:** local replica `r`'s slot becomes row
//!   `offset + r`; other instances fill the other rows ([`Collective::Allgather`]).
//! - **To the host, not sharded, one per group:** row `g` is read from the group's first
//!   member if it is local and is zero otherwise ([`Collective::SumAllreduce`]).
//! - **To the host, sharded:** for each group, the shards held by members `0..D` that are
//!   local are put back in reference order, into row `g` (one per group) or into the row
//!   of the group's first member (all replicas); everything not held locally is zero
//!   ([`Collective::SumAllreduce`]). With all replicas, that row is then copied to the rows
//!   of the group's other members.
//! - An instance that owns every replica needs no collective ([`Collective::None`]).
//! - [`WeightLayout::downsample`] turns an all-replicas buffer into one row per group by
//!   keeping each group's representative's (first member's) row.
//!
//! **tessera:** no scratch buffer per group: shards move straight between host rows and
//! slots.
//!
//! # Panics
//!
//! Nothing here panics. Every size is checked before the first byte moves, so a size
//! mismatch leaves both the host buffer and the slots untouched.

mod copy;
mod error;
mod layout;
mod slots;

pub use error::{LayoutError, TransferError};
pub use layout::{Collective, InstanceWindow, Placement, WeightLayout};
pub use slots::{RemoteSlots, SliceSlotError};

#[cfg(test)]
mod tests;
