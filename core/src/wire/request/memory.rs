//! The memory area's requests: remote-buffer slots, and copies between a slot and an
//! on-device variable (a slot's bytes move through the data path:
//! [`DataRequest`](super::DataRequest)).

use serde::{Deserialize, Serialize};

use super::RequestKind;

/// Host to device: slots, loads and stores.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MemoryRequest {
    /// Reserves a remote-buffer slot of `bytes` bytes, zeroed.
    AllocSlot {
        /// Slot id, chosen by the host.
        slot: u16,
        /// Size in bytes.
        bytes: u32,
    },
    /// Copies a remote-buffer slot into an on-device variable (created with the slot's
    /// size if it does not exist).
    RemoteLoad {
        /// Source slot.
        slot: u16,
        /// Destination variable.
        variable: u16,
    },
    /// Copies an on-device variable into a remote-buffer slot of the same size.
    RemoteStore {
        /// Source variable.
        variable: u16,
        /// Destination slot.
        slot: u16,
    },
}

impl MemoryRequest {
    /// The kind of this request, for error replies.
    pub fn kind(&self) -> RequestKind {
        match self {
            Self::AllocSlot { .. } => RequestKind::AllocSlot,
            Self::RemoteLoad { .. } => RequestKind::RemoteLoad,
            Self::RemoteStore { .. } => RequestKind::RemoteStore,
        }
    }
}
