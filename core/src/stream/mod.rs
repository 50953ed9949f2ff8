//! Step IO: how one run's streams reach the replicas (SEMANTICS §5).
//!
//! - [`anchor`]: anchor return types and what happens to an output at each micro-batch.
//! - [`dataflow`]: batches per step and accumulation, the per-replica input and output
//!   counts, the expected element counts and the first-run size check.
//! - [`splitter`]: hands each replica its share of the user's step IO, in PopART's exact
//!   fetch and completion order.
//!
//! # Panics
//!
//! Nothing here panics: capacities, indices and call sequences out of order are errors.

pub mod anchor;
pub mod dataflow;
pub mod splitter;

pub use anchor::{AnchorAction, AnchorError, AnchorReturnType};
pub use dataflow::{DataFlow, DataFlowError, SizeCheck, SizeError, StreamKind, StreamSpec};
pub use splitter::{SetupError, Splitter, SplitterError, UpstreamIo};
