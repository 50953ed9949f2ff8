//! What rank 0 asks of a serving rank, and its answers: control messages through the post
//! offices (JSON: a few per command, never bulk data).
//!
//! Every message carries a number. A command's number comes back with each rank's answer,
//! and rank 0 takes only answers with the number of the command under way: an answer that
//! comes after its command was given up (a rank past the deadline) is dropped, never taken
//! for the next command's. A question about a silent member has a number of its own, from
//! the same count.

use serde::{Deserialize, Serialize};

use super::collectives::Part;
use super::failure::RankFailure;
use super::fill::FillPart;
use super::local::LocalPart;
use super::moves::Moves;
use crate::transport::Liveness;

/// From rank 0 to a serving rank.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum ToRank {
    /// Take part in a collective across the ranks (rank 0 takes part too); answer
    /// [`FromRank::Done`] or [`FromRank::Failed`].
    Collective(Part),
    /// Run a collective in this rank's sets, each of which lies wholly on it; answer
    /// [`FromRank::Done`] or [`FromRank::Failed`].
    InSets(LocalPart),
    /// Take part in copies from member to member; answer [`FromRank::Done`] or
    /// [`FromRank::Failed`].
    Moves(Moves),
    /// Read these parts of a file into this rank's members; answer [`FromRank::Done`] or
    /// [`FromRank::Failed`].
    Fill(FillPart),
    /// Rank 0 has dropped every link: stop the devices, answer [`FromRank::Finished`] and
    /// end.
    Finish,
    /// What this rank's member (by its index on the rank) is doing: it has been silent to
    /// rank 0. Answer [`FromRank::Liveness`].
    Liveness(usize),
}

/// From a serving rank to rank 0.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum FromRank {
    /// The command is done.
    Done,
    /// The command failed on this rank (every MPI collective of it was still taken part
    /// in, so no rank waits).
    Failed(RankFailure),
    /// Every device of this rank has stopped.
    Finished,
    /// What the member asked about is doing, as this rank sees it.
    Liveness(Liveness),
}

/// A message with its number, as sent.
#[derive(Serialize)]
struct Outgoing<'a, T> {
    number: u64,
    body: &'a T,
}

/// A message with its number, as received.
#[derive(Deserialize)]
struct Incoming<T> {
    number: u64,
    body: T,
}

/// `message`, numbered `number`, as sent.
pub(super) fn encode<T: Serialize>(number: u64, message: &T) -> Vec<u8> {
    // Plain enums, numbers and strings always serialize.
    serde_json::to_vec(&Outgoing {
        number,
        body: message,
    })
    .unwrap_or_default()
}

/// A message as received and its number, if it is one.
pub(super) fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Option<(u64, T)> {
    let Incoming { number, body } = serde_json::from_slice(bytes).ok()?;
    Some((number, body))
}

impl From<Part> for ToRank {
    fn from(part: Part) -> Self {
        Self::Collective(part)
    }
}

impl From<LocalPart> for ToRank {
    fn from(part: LocalPart) -> Self {
        Self::InSets(part)
    }
}

impl From<Moves> for ToRank {
    fn from(moves: Moves) -> Self {
        Self::Moves(moves)
    }
}

impl From<FillPart> for ToRank {
    fn from(part: FillPart) -> Self {
        Self::Fill(part)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches an answer that does not survive the trip (or loses its number), and garbage
    /// or another kind of message taken for one.
    #[test]
    fn messages_survive_the_trip_and_garbage_is_none() {
        let failed = FromRank::Failed(RankFailure::NotMapped { member: 1 });
        let back: Option<(u64, FromRank)> = decode(&encode(7, &failed));
        assert!(matches!(
            back,
            Some((7, FromRank::Failed(RankFailure::NotMapped { member: 1 })))
        ));
        assert!(matches!(
            decode(&encode(8, &ToRank::Finish)),
            Some((8, ToRank::Finish))
        ));
        assert!(decode::<FromRank>(b"\xff\x00not json").is_none());
        assert!(decode::<ToRank>(&encode(1, &FromRank::Done)).is_none());
    }
}
