//! Copies from member to member across ranks, without going through rank 0 unless a member
//! of the copy lives there.
//!
//! # Rules
//!
//! - **When** (besides the module's conditions): every copy fits one message between ranks.
//! - **Where the bytes go.** Both members on one rank: a copy in that rank's memory. On two
//!   ranks: the sending rank reads the source and its post office sends it to the
//!   receiving rank's (on the bulk tag), which writes it into the destination.
//! - **In one order.** Every rank gets the whole list of copies, numbered; it runs those
//!   that concern it in that order. Sends never wait (the office queues them), and a
//!   receiving rank takes each copy's message by its sender and number, keeping any that
//!   came early: no order of arrival can deadlock or misplace bytes. A sender that cannot
//!   read its source still sends (zeros) and reports the failure, so no receiver waits in
//!   vain.
//! - **Sources first.** Every copy this rank sends or keeps is read before any destination
//!   of this rank is written, so a destination may be another copy's source.

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::super::{Group, GroupError, Kind, Place, Set};
use super::failure::RankFailure;
use super::MPI_BYTES;
use crate::transport::tunnel::PostOffice;
use crate::transport::SharedMemory;
use crate::transport::Span;

/// Where one end of a copy is: the rank, the member's index on it, the address in its
/// memory.
type End = (usize, usize, usize);

/// One copy from a member's source to a member's destination.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Move {
    index: u32,
    from: End,
    to: End,
    bytes: usize,
}

/// Every copy of one command, in order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Moves {
    moves: Vec<Move>,
}

/// Each pair's source into its destination, by the module's rules; `false` when they
/// cannot run so (nothing was sent).
pub(in crate::transport::group) fn run_moves(
    group: &mut Group,
    pairs: &[(Place, Place)],
) -> Result<bool, GroupError> {
    let Some(ranks) = group.mapped_ranks() else {
        return Ok(false);
    };
    let per_rank = ranks.per_rank;
    let mut moves = Vec::with_capacity(pairs.len());
    for (index, (from, to)) in pairs.iter().enumerate() {
        if from.span.len != to.span.len || from.span.len > MPI_BYTES {
            return Ok(false);
        }
        let (Some(src), Some(dst)) = (group.address(from)?, group.address(to)?) else {
            return Ok(false);
        };
        let end = |member: usize, at: usize| (member / per_rank, member % per_rank, at);
        moves.push(Move {
            index: index as u32,
            from: end(from.member, src),
            to: end(to.member, dst),
            bytes: from.span.len,
        });
    }
    let moves = Moves { moves };
    let ranks = match group.ranks.as_mut() {
        Some(ranks) => ranks,
        None => return Ok(false),
    };
    // Taken before any rank is told: past this point, nothing stops rank 0 taking part.
    let mut memories = Vec::with_capacity(per_rank);
    for (member, channel) in group.members[..per_rank].iter_mut().enumerate() {
        memories.push(channel.device_memory().map_err(GroupError::on(member))?);
    }
    ranks.tell_all(|_| moves.clone())?;
    let number = ranks.current.load(std::sync::atomic::Ordering::Relaxed);
    let mine = run(
        0,
        &ranks.office,
        number,
        &moves,
        &mut memories,
        ranks.mpi.deadline(),
    );
    ranks.outcome(mine, "copy")?;
    let dests: Vec<Place> = pairs.iter().map(|(_, to)| *to).collect();
    group.confirm(&dests)?;
    Ok(true)
}

/// A scatter's or a gather's sets as copies from member to member: each part of the
/// leader's source to its member, each member's source to its piece of the leader's
/// destination. `None` for the other collectives, or sets whose lengths do not split
/// evenly (the checked path refuses them).
pub(in crate::transport::group) fn as_copies(
    kind: Kind,
    sets: &[Set],
) -> Option<Vec<(Place, Place)>> {
    let piece = |place: &Place, i: usize, len: usize| Place {
        member: place.member,
        span: Span {
            offset: place.span.offset + i * len,
            len,
            ..place.span
        },
    };
    let mut pairs = Vec::new();
    for set in sets {
        match kind {
            Kind::Scatter => {
                let leader = set.sources.first()?;
                let part = leader.span.len / set.dests.len().max(1);
                for (i, dest) in set.dests.iter().enumerate() {
                    (dest.span.len == part).then_some(())?;
                    pairs.push((piece(leader, i, part), *dest));
                }
            }
            Kind::Gather => {
                let leader = set.dests.first()?;
                let part = leader.span.len / set.sources.len().max(1);
                for (i, source) in set.sources.iter().enumerate() {
                    (source.span.len == part).then_some(())?;
                    pairs.push((*source, piece(leader, i, part)));
                }
            }
            _ => return None,
        }
    }
    Some(pairs)
}

/// Rank `me`'s share of `moves` (module doc), command `number`: its members' memory in
/// `memories`, its bulk messages through `office`, each waited for up to `limit`. Every
/// copy is tried (a sender that fails still sends, a receiver that gives up still sends
/// what it owes later); the first failure is the answer.
pub(crate) fn run(
    me: usize,
    office: &PostOffice,
    number: u64,
    moves: &Moves,
    memories: &mut [Option<&mut SharedMemory>],
    limit: Duration,
) -> Result<(), RankFailure> {
    let mut first: Option<RankFailure> = None;
    let kept = send_sources(me, office, number, moves, memories, &mut first);
    let inbox = Inbox {
        office,
        number,
        limit,
    };
    write_destinations(me, &inbox, moves, memories, kept, &mut first);
    match first {
        None => Ok(()),
        Some(failure) => Err(failure),
    }
}

/// Every source this rank reads, read first (module rules): sent at once to its
/// destination's rank, or kept — returned with its copy's place in `moves` — when the
/// destination is this rank's too. A source that cannot be read is sent (or kept) as
/// zeros; the first failure goes into `first` unless one is there.
fn send_sources(
    me: usize,
    office: &PostOffice,
    number: u64,
    moves: &Moves,
    memories: &[Option<&mut SharedMemory>],
    first: &mut Option<RankFailure>,
) -> Vec<(usize, Vec<u8>)> {
    let mut kept: Vec<(usize, Vec<u8>)> = Vec::new();
    for (k, m) in moves.moves.iter().enumerate() {
        let ((from_rank, from_j, src), (to_rank, _, _)) = (m.from, m.to);
        if from_rank != me {
            continue;
        }
        let read = memories
            .get(from_j)
            .and_then(|memory| memory.as_ref())
            .and_then(|memory| memory.range(src, m.bytes));
        let data = match read {
            Some(bytes) => bytes.to_vec(),
            None => {
                first.get_or_insert(RankFailure::Outside {
                    member: from_j,
                    at: src,
                    len: m.bytes,
                });
                vec![0; m.bytes]
            }
        };
        if to_rank == me {
            kept.push((k, data));
            continue;
        }
        let mut message = number.to_le_bytes().to_vec();
        message.extend_from_slice(&m.index.to_le_bytes());
        message.extend_from_slice(&data);
        if let Err(e) = office.send_bulk(to_rank, message) {
            first.get_or_insert(RankFailure::Send {
                to: to_rank,
                reason: e.to_string(),
            });
        }
    }
    kept
}

/// Where a rank's copies from other ranks come from: its post office, for command
/// `number`, each waited for up to `limit`.
struct Inbox<'a> {
    office: &'a PostOffice,
    number: u64,
    limit: Duration,
}

/// Every destination on this rank written, in the order of `moves`: from `kept` when its
/// source is this rank's too, else from the message its source's rank sent. A copy whose
/// bytes never came, or whose destination is not in its member's memory, is skipped; the
/// first failure goes into `first` unless one is there.
fn write_destinations(
    me: usize,
    inbox: &Inbox<'_>,
    moves: &Moves,
    memories: &mut [Option<&mut SharedMemory>],
    kept: Vec<(usize, Vec<u8>)>,
    first: &mut Option<RankFailure>,
) {
    let mut kept = kept.into_iter().peekable();
    let mut early: HashMap<(usize, u32), Vec<u8>> = HashMap::new();
    for (k, m) in moves.moves.iter().enumerate() {
        let ((from_rank, _, _), (to_rank, to_j, dst)) = (m.from, m.to);
        if to_rank != me {
            continue;
        }
        let data = if from_rank == me {
            match kept.next_if(|(i, _)| *i == k) {
                Some((_, data)) => data,
                None => continue,
            }
        } else {
            let copy = (inbox.number, from_rank, m.index);
            match receive(inbox.office, &mut early, copy, inbox.limit) {
                Ok(data) => data,
                Err(failure) => {
                    first.get_or_insert(failure);
                    continue;
                }
            }
        };
        let target = memories
            .get_mut(to_j)
            .and_then(|memory| memory.as_mut())
            .and_then(|memory| memory.range_mut(dst, m.bytes));
        match target {
            Some(target) if data.len() == m.bytes => target.copy_from_slice(&data),
            _ => {
                first.get_or_insert(RankFailure::Outside {
                    member: to_j,
                    at: dst,
                    len: m.bytes,
                });
            }
        }
    }
}

/// The bytes of copy `index` of command `number` from rank `from`, kept aside if they came
/// early or taken from the office; others of this command that come meanwhile are kept,
/// and any of an earlier command (one given up) dropped.
fn receive(
    office: &PostOffice,
    early: &mut HashMap<(usize, u32), Vec<u8>>,
    (number, from, index): (u64, usize, u32),
    limit: Duration,
) -> Result<Vec<u8>, RankFailure> {
    let until = std::time::Instant::now() + limit;
    loop {
        if let Some(data) = early.remove(&(from, index)) {
            return Ok(data);
        }
        let left = until.saturating_duration_since(std::time::Instant::now());
        let Some((sender, message)) = office.next_bulk(left) else {
            return Err(RankFailure::NoBytes {
                from,
                index,
                seconds: limit.as_secs(),
            });
        };
        let Some((head, data)) = message.split_first_chunk::<12>() else {
            tracing::warn!(
                sender,
                bytes = message.len(),
                "a bulk message too short, dropped"
            );
            continue;
        };
        let (n, i) = head.split_at(8);
        let n = u64::from_le_bytes(n.try_into().unwrap_or([0; 8]));
        let i = u32::from_le_bytes(i.try_into().unwrap_or([0; 4]));
        if n == number {
            early.insert((sender, i), data.to_vec());
        } else {
            tracing::warn!(sender, n, "a bulk message of another command, dropped");
        }
    }
}
