//! Step IO: how one run's streams reach the replicas.
//!
//! # Shapes
//!
//! A run (one step) is `bps` batches of `af` micro-batches (gradient accumulation) on each
//! of `R` replicas. The user's array for a stream is shaped `[bps, af, R, sample…]` with
//! every leading dimension of size 1 left out; its flat order is (batch, micro-batch,
//! replica). A broadcast input has no replica dimension: one buffer serves every replica.
//! So an input stream holds `sample·af·bps·R` elements (`sample·af·bps` when broadcast),
//! and an output stream `sample·R` times its anchor's outputs per replica
//! ([`DataFlow::expected_elements`]).
//!
//! # Which outputs return
//!
//! Number a step's micro-batches `m = batch·af + micro`. An anchor returns, per replica:
//! `All` every `m` (`bps·af` outputs); `EveryN(p)` the `m` with `m % p == p − 1`
//! (`bps·af / p` outputs; `p` must be positive, at most `bps` and divide it); `Final` the
//! last `m` (1 output); `Sum` the sum over all `m` (1 output). See [`anchor`].
//!
//! # The splitter
//!
//! Replica `r`'s `j`-th buffer of a tensor is upstream buffer `j·R + r`. A replica whose
//! parked buffers are used up fetches upstream in strict round-robin replica order, from
//! where the tensor's last fetch stopped up to and including itself, parking the buffers
//! of the replicas it passes; only the fetch for the requesting replica carries its
//! prefetch flag, and a replica that has had all its buffers of the run (`bps·af` inputs,
//! or its anchor's outputs) stops the round. Completions are released upstream in the same
//! round-robin order. Broadcast streams serve replica 0 only. Every run starts from a
//! reset. See [`splitter`].
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
