//! Stream FIFOs: a ring of fixed-size items inside an arena block, filled as a byte stream
//! and emptied by whole items.
//!
//! # Contract
//!
//! - A push appends any number of bytes: a step's worth of samples in one request, or a
//!   sample larger than a frame in several. Items become poppable as they complete. A push
//!   that does not fit the free bytes is refused whole (nothing is written).
//! - A pop takes `n ≥ 1` whole items, all or none, and hands back where they lie in the
//!   arena (one contiguous range, valid until the next push). When a FIFO empties, its ring
//!   restarts at the block's beginning, so a FIFO filled by one step and emptied after it
//!   always pops contiguously; a pop that would wrap the ring's end is refused
//!   ([`ErrorCode::OutOfBounds`]) rather than answered in pieces.
//! - The host moves a FIFO's bytes by ring position ([`Fifos::place`], then
//!   [`Fifos::settle`] once they moved): a write appends where the next byte goes, a read
//!   takes whole items from the oldest, and neither wraps the ring's end — the same rules
//!   whether the bytes came in a frame, beside it, or were written in place by the host.
//! - A FIFO has items of at least one byte and a depth of at least one
//!   ([`ErrorCode::FifoShape`] otherwise).
//!
//! # Parts
//!
//! - `ring`: one FIFO, [`Fifo`]: where its items lie in its ring, and every check of a
//!   move against them;
//! - `table`: the device's FIFOs, [`Fifos`]: creating and removing them, and finding one
//!   by its id;
//! - `moves`: the bytes moving in and out — a step's pushes and pops, the host's placed
//!   moves and whole rings — each looking its FIFO up once and leaving the checks to
//!   `ring`.
//!
//! [`ErrorCode::OutOfBounds`]: tessera_core::wire::ErrorCode::OutOfBounds
//! [`ErrorCode::FifoShape`]: tessera_core::wire::ErrorCode::FifoShape

mod moves;
mod ring;
mod table;

pub use ring::Fifo;
pub use table::Fifos;

/// FIFOs a device can hold: 16 for a device of one lane; 8 more per lane it can run (a
/// program has at most 4 streams and 2 anchors, each a FIFO in every lane).
pub const MAX_FIFOS: usize = 8 + 8 * crate::program::MAX_LANES;
