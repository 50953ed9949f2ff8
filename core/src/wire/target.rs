//! What a byte-moving request addresses: a [`Target`] and a byte offset in it.
//!
//! The protocol moves bytes with one family of requests, the data path's
//! ([`DataRequest`](super::DataRequest)), whatever they are for — a session's register, a
//! weight's remote-buffer slot or the weight itself, a step's input or anchor FIFO:
//! [`Write`](super::DataRequest::Write) / [`Read`](super::DataRequest::Read) carry them in
//! the frame, [`WriteBulk`](super::DataRequest::WriteBulk) /
//! [`ReadBulk`](super::DataRequest::ReadBulk) beside it, and
//! [`Locate`](super::DataRequest::Locate) / [`Wrote`](super::DataRequest::Wrote) /
//! [`Took`](super::DataRequest::Took) let a host that maps the device's memory move them
//! itself. Which of the three a host uses is its link's business; the device applies the
//! same rules to all of them.
//!
//! # Rules
//!
//! - **Registers, slots and variables** are plain byte ranges: bytes `[offset, offset +
//!   len)` must lie inside the register's array (or string), the slot or the variable.
//!   Writing or reading them has no other effect.
//! - **FIFOs** are streams whose offsets are positions in the FIFO's ring. A write appends:
//!   it must start exactly where the FIFO's next byte goes. A read removes: it must start at
//!   the oldest item and take whole items. Neither may run past the ring's end (a FIFO
//!   empty when a step starts, as a step's FIFOs are, starts the step at position 0 and
//!   never wraps). A write or read anywhere else is refused before anything changes: it
//!   would reorder the stream, lose bytes or hand some out twice.
//! - A host that moved bytes in place reports it: [`Wrote`](super::DataRequest::Wrote)
//!   after writing a FIFO's bytes (the FIFO then holds them),
//!   [`Took`](super::DataRequest::Took) after reading them (the FIFO then drops them); a
//!   step's inputs written in place, every stream FIFO whole, are reported by the step
//!   itself ([`RunStep`](super::ProgramRequest::RunStep) `{ fed: true }`), and the last
//!   step's anchors read in place, every anchor FIFO whole, by the next step
//!   (`{ took: true }`: until then the FIFOs hold them). Registers and slots need no
//!   report.

use serde::{Deserialize, Serialize};

/// A device object whose bytes a request moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Target {
    /// A register holding an array (read: or a string).
    Register(u16),
    /// A remote-buffer slot.
    Slot(u16),
    /// A stream or anchor FIFO.
    Fifo(u16),
    /// An on-device variable (a weight or its optimizer state, by its device id): read in
    /// place by a host returning weights, without a copy into a slot first.
    Variable(u16),
}

impl Target {
    /// True for a FIFO, whose bytes are a stream (see the module's rules).
    pub fn is_stream(self) -> bool {
        matches!(self, Self::Fifo(_))
    }
}

impl core::fmt::Display for Target {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::Register(id) => write!(f, "register {id}"),
            Self::Slot(id) => write!(f, "slot {id}"),
            Self::Fifo(id) => write!(f, "FIFO {id}"),
            Self::Variable(id) => write!(f, "variable {id}"),
        }
    }
}
