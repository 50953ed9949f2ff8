//! Why a serving rank's part of a command failed: the answer it sends rank 0, typed.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::combine::CombineError;

/// Why a rank's part of a command failed (the first failure; the part went on).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
pub enum RankFailure {
    /// A member of the rank whose memory its host does not map.
    #[error("member {member} of the rank: its memory is not mapped")]
    NotMapped {
        /// The member's index on the rank.
        member: usize,
    },
    /// Bytes a command placed outside a member's memory.
    #[error("member {member} of the rank: {len} bytes at {at} lie outside its memory")]
    Outside {
        /// The member's index on the rank.
        member: usize,
        /// Where.
        at: usize,
        /// How many.
        len: usize,
    },
    /// A command that does not fit the rank: members it does not have, a kind it does not
    /// run across ranks.
    #[error("a command the rank cannot run: {what}")]
    Unfit {
        /// What does not fit.
        what: String,
    },
    /// The sources could not be combined.
    #[error("combining: {0}")]
    Combine(CombineError),
    /// An MPI collective between the ranks refused its buffers.
    #[error("between the ranks: {reason}")]
    Mpi {
        /// What MPI's side said.
        reason: String,
    },
    /// A copy's bytes from another rank did not come within the deadline.
    #[error("no bytes from rank {from} for copy {index} within {seconds} s")]
    NoBytes {
        /// The rank that was to send them.
        from: usize,
        /// The copy.
        index: u32,
        /// The deadline.
        seconds: u64,
    },
    /// A message to another rank could not be posted.
    #[error("sending to rank {to}: {reason}")]
    Send {
        /// The rank.
        to: usize,
        /// Why (the post office has stopped).
        reason: String,
    },
    /// The file of a fill could not be read on this rank.
    #[error("{}: {reason}", file.display())]
    File {
        /// The file.
        file: PathBuf,
        /// Why (the input rule it broke, or the system's error).
        reason: String,
    },
    /// A message the rank does not know.
    #[error("an unknown control message")]
    Unknown,
}
