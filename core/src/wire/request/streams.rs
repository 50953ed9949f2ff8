//! The stream area's requests: creating the FIFOs that carry a step's samples in and its
//! anchors out (their bytes move through the data path:
//! [`DataRequest`](super::DataRequest)).

use serde::{Deserialize, Serialize};

use super::RequestKind;

/// Host to device: the stream FIFOs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StreamRequest {
    /// Creates a stream FIFO of `depth` items of `item_bytes` bytes.
    CreateFifo {
        /// FIFO id, chosen by the host.
        fifo: u16,
        /// Bytes per item.
        item_bytes: u32,
        /// Items it holds.
        depth: u16,
    },
}

impl StreamRequest {
    /// The kind of this request, for error replies.
    pub fn kind(&self) -> RequestKind {
        match self {
            Self::CreateFifo { .. } => RequestKind::CreateFifo,
        }
    }
}
