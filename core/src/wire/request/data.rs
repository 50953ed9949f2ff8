//! The data path's requests: the bytes of a [`Target`] at a byte offset, carried in the
//! frame ([`Write`](DataRequest::Write) / [`Read`](DataRequest::Read)), beside it
//! ([`WriteBulk`](DataRequest::WriteBulk) / [`ReadBulk`](DataRequest::ReadBulk)), or moved
//! in place by a host that maps the device's memory ([`Locate`](DataRequest::Locate),
//! then [`Wrote`](DataRequest::Wrote) / [`Took`](DataRequest::Took)). The
//! [`target`](crate::wire::target) module states what an offset means in each kind of
//! target, and the rules every move obeys.

use serde::{Deserialize, Serialize};

use super::RequestKind;
use crate::wire::target::Target;

/// Host to device: bytes of a target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum DataRequest<'a> {
    /// Writes `data` into `target` at `offset` (see [`target`](crate::wire::target) for
    /// what an offset means in each kind of target).
    Write {
        /// Where the bytes go.
        target: Target,
        /// Byte offset.
        offset: u32,
        /// The bytes.
        #[serde(borrow, serialize_with = "crate::wire::bytes::serialize")]
        data: &'a [u8],
    },
    /// Reads `len` bytes of `target` at `offset`, answered with
    /// [`Response::Data`](crate::wire::Response::Data) in one frame.
    Read {
        /// Where the bytes come from.
        target: Target,
        /// Byte offset.
        offset: u32,
        /// Bytes wanted.
        len: u32,
    },
    /// Like [`DataRequest::Write`], with the `len` bytes beside the message instead of
    /// inside it: handed over on a device thread's queue, or in the link's shared window (a
    /// child process's memory, QEMU's host file).
    WriteBulk {
        /// Where the bytes go.
        target: Target,
        /// Byte offset.
        offset: u32,
        /// Bytes beside the message.
        len: u32,
    },
    /// Like [`DataRequest::Read`], answered with
    /// [`Response::Bulk`](crate::wire::Response::Bulk) and the bytes beside the reply,
    /// whatever their length.
    ReadBulk {
        /// Where the bytes come from.
        target: Target,
        /// Byte offset.
        offset: u32,
        /// Bytes wanted.
        len: u32,
    },
    /// Where `target`'s bytes lie in the device's memory
    /// ([`Response::Located`](crate::wire::Response::Located)), for a host that maps that
    /// memory and moves the bytes itself while the device is idle.
    Locate {
        /// The target.
        target: Target,
    },
    /// The host wrote `len` bytes of `target` at `offset` in place: a FIFO now holds them
    /// (checked as a [`DataRequest::Write`] there would be).
    Wrote {
        /// The target.
        target: Target,
        /// Byte offset.
        offset: u32,
        /// Bytes written.
        len: u32,
    },
    /// The host read `len` bytes of `target` at `offset` in place: a FIFO drops them
    /// (checked as a [`DataRequest::Read`] there would be).
    Took {
        /// The target.
        target: Target,
        /// Byte offset.
        offset: u32,
        /// Bytes read.
        len: u32,
    },
}

impl DataRequest<'_> {
    /// The kind of this request, for error replies.
    pub fn kind(&self) -> RequestKind {
        match self {
            Self::Write { .. } => RequestKind::Write,
            Self::Read { .. } => RequestKind::Read,
            Self::WriteBulk { .. } => RequestKind::WriteBulk,
            Self::ReadBulk { .. } => RequestKind::ReadBulk,
            Self::Locate { .. } => RequestKind::Locate,
            Self::Wrote { .. } => RequestKind::Wrote,
            Self::Took { .. } => RequestKind::Took,
        }
    }
}
