//! Weights between a host buffer and the replicas' remote buffers (SEMANTICS §4).
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
//! weights to the host have [`VariableSettings::returning`] rows.
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
