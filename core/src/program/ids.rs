//! Where a prepared program's tensors live on a device: the ids both sides use.
//!
//! - variable `i` is on-device variable `i + 1`, and travels to and from the host through
//!   remote-buffer slot `i + 1`;
//! - its optimizer state (the momentum's velocity) is on-device variable
//!   [`VELOCITY_BASE`]` + i + 1`, with the same size and layout as the variable, and
//!   travels through the variable's slot;
//! - stream `i` fills FIFO `i + 1`; anchor `j` fills FIFO [`ANCHOR_BASE`]` + j + 1`.
//!
//! The arithmetic cannot overflow: indices are `u8`. These are one replica's ids; a device
//! running several replicas gives each lane its own copy ([`lanes`](super::lanes)).

use super::{MAX_STREAMS, MAX_VARIABLES};

/// Velocity variables start above this id.
pub const VELOCITY_BASE: u16 = 0x100;
/// Anchor FIFOs start above this id (past every stream's).
pub const ANCHOR_BASE: u16 = MAX_STREAMS as u16;

/// On-device variable of program variable `index`.
pub const fn variable(index: u8) -> u16 {
    index as u16 + 1
}

/// Remote-buffer slot of program variable `index`.
pub const fn slot(index: u8) -> u16 {
    index as u16 + 1
}

/// On-device velocity of program variable `index`.
pub const fn velocity(index: u8) -> u16 {
    VELOCITY_BASE + index as u16 + 1
}

/// FIFO of stream `index`.
pub const fn stream_fifo(index: u8) -> u16 {
    index as u16 + 1
}

/// FIFO of anchor `index`.
pub const fn anchor_fifo(index: u8) -> u16 {
    ANCHOR_BASE + index as u16 + 1
}

// Variables and velocities must not collide.
const _: () = assert!(MAX_VARIABLES < VELOCITY_BASE as usize);
// Every id is one lane's (see [`lanes`](super::lanes)): the highest is the last velocity.
const _: () = assert!(VELOCITY_BASE as usize + MAX_VARIABLES < super::lanes::LANE_IDS as usize);
const _: () = assert!(ANCHOR_BASE as usize + super::MAX_ANCHORS < super::lanes::LANE_IDS as usize);
