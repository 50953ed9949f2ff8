//! A group whose members live on the ranks of an MPI job (feature `mpi`): rank 0 holds
//! every member's channel — a remote member's is a byte link to its rank
//! (`transport::tunnel`) — and the ranks whose hosts map their members' memory move an
//! operation's bytes among themselves, each reading and writing its own members in place,
//! never through rank 0.
//!
//! # Rules
//!
//! - **Who is where.** Member `m` lives on rank `m / per_rank`, as that rank's member
//!   `m % per_rank`; rank 0's members are its own channels' devices.
//! - **When.** A group operation takes this way when every rank's host maps its members'
//!   memory (threads and child processes, not QEMU), every place is located by its device
//!   (a remote one asked through its link) inside the memory its hello announced, and the
//!   operation has a way across the ranks: a collective in sets that each lie on one rank
//!   (`local`); a reduction, an allgather or a broadcast in sets of whole ranks
//!   (`collectives`); copies from member to member (`moves`), which also carry a scatter's
//!   parts and a gather's pieces across ranks; a fill from a file (`fill`). Otherwise its
//!   bytes go through rank 0, by the links, as on one host.
//! - **Rank 0 asks, the others answer** (`control`): a numbered command to every serving
//!   rank, each answering once under its number, waited for up to the MPI deadline; an
//!   answer to a command given up is dropped. A rank that fails its part says why
//!   ([`RankFailure`]) after taking part in every MPI collective of the command, so that no
//!   rank is left waiting in one.
//! - **Checked before anything moves**, by rank 0: every place's member, length and address.
//! - **Finishing** ([`Ranks::finish`]): once every link has ended, every rank is told to
//!   finish and waited for up to [`FINISH_LIMIT`] (a rank that is silent longer ends the job
//!   by its post office's deadline).

pub(crate) mod collectives;
pub(crate) mod control;
mod failure;
pub(crate) mod fill;
pub(crate) mod local;
pub(crate) mod moves;
pub(crate) mod serve;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use control::{decode, encode, FromRank, ToRank};
pub use failure::RankFailure;

use super::{Group, GroupError, Place};
use crate::instance::{Instances, Mpi};
use crate::transport::tunnel::PostOffice;
use crate::transport::Liveness;

/// How long rank 0, finishing, waits for the other ranks to finish serving.
pub const FINISH_LIMIT: Duration = Duration::from_secs(30);
/// The most bytes one MPI call moves here (MPI counts are 32-bit): larger data take the
/// way through rank 0, which moves them in chunks.
const MPI_BYTES: usize = i32::MAX as usize - 64;
/// How long rank 0 waits for a rank to say what a silent member is doing.
const LIVENESS_LIMIT: Duration = Duration::from_secs(1);
/// What rank 0 waits for when no command of its own is under way.
pub(crate) const RANK0_IDLE: &str = "its remote members' replies (or nothing: an idle session)";

/// Rank 0's view of the other ranks (module doc).
pub struct Ranks {
    /// Shared with each remote member's channel, which asks its rank what it is doing.
    office: Arc<PostOffice>,
    /// The count control messages are numbered by (shared with the channels' questions),
    /// and the number of the command under way.
    numbers: Arc<AtomicU64>,
    current: AtomicU64,
    /// The ranks serving members (all but 0).
    serving: Vec<usize>,
    mpi: Mpi,
    /// Members each rank hosts.
    per_rank: usize,
    /// Every rank's host maps its members' memory (not QEMU).
    maps_memory: bool,
    /// Buffers the allreduce across ranks reuses.
    scratch: collectives::Scratch,
}

impl std::fmt::Debug for Ranks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ranks")
            .field("serving", &self.serving)
            .field("per_rank", &self.per_rank)
            .finish_non_exhaustive()
    }
}

impl Ranks {
    /// The ranks of `mpi`'s job, rank 0 speaking to them through `office` (its control
    /// messages numbered by `numbers`, which the remote members' liveness questions share),
    /// `per_rank` members each; `maps_memory` when every rank's host maps its members'
    /// memory.
    pub fn new(
        mpi: Mpi,
        office: Arc<PostOffice>,
        numbers: Arc<AtomicU64>,
        per_rank: usize,
        maps_memory: bool,
    ) -> Self {
        office.waiting_for(RANK0_IDLE);
        Self {
            office,
            numbers,
            current: AtomicU64::new(0),
            serving: (1..mpi.size()).collect(),
            mpi,
            per_rank,
            maps_memory,
            scratch: collectives::Scratch::default(),
        }
    }

    /// Members each rank hosts.
    pub fn per_rank(&self) -> usize {
        self.per_rank
    }

    /// Sends every serving rank its share of a new command (`message` for each rank),
    /// under a number of its own: only answers with that number are taken for it.
    fn tell_all<M: Into<ToRank>>(&self, message: impl Fn(usize) -> M) -> Result<(), GroupError> {
        let number = self.numbers.fetch_add(1, Ordering::Relaxed) + 1;
        self.current.store(number, Ordering::Relaxed);
        for &rank in &self.serving {
            self.office
                .send_control(rank, encode(number, &message(rank).into()))
                .map_err(|source| GroupError::Post { rank, source })?;
        }
        Ok(())
    }

    /// Every serving rank's answer to the command under way, in rank order (they arrive in
    /// any order), each waited for up to the MPI deadline; `operation` names the command.
    fn answers(&self, operation: &'static str) -> Result<Vec<FromRank>, GroupError> {
        let number = self.current.load(Ordering::Relaxed);
        let deadline = self.mpi.deadline();
        let until = Instant::now() + deadline;
        self.office
            .waiting_for(format!("the other ranks' answers to {operation}"));
        let mut answers: Vec<Option<FromRank>> = self.serving.iter().map(|_| None).collect();
        while let Some(waiting) = answers.iter().position(Option::is_none) {
            let left = until.saturating_duration_since(Instant::now());
            let Some((from, bytes)) = self.office.next_control(left) else {
                return Err(GroupError::RankSilent {
                    rank: self.serving[waiting],
                    operation,
                    seconds: deadline.as_secs(),
                });
            };
            let slot = self.serving.iter().position(|&r| r == from);
            match (slot, decode::<FromRank>(&bytes)) {
                (Some(slot), Some((n, answer))) if n == number && answers[slot].is_none() => {
                    answers[slot] = Some(answer)
                }
                // An answer to a command given up, or to a question about a silent member
                // that came too late: not this command's.
                (_, other) => {
                    tracing::warn!(from, ?other, "a stale control message, dropped")
                }
            }
        }
        self.office.waiting_for(RANK0_IDLE);
        Ok(answers.into_iter().flatten().collect())
    }

    /// The outcome of the command under way: rank 0's own part (`mine`), then every serving
    /// rank's answer; the first failure, in rank order, names its rank and `operation`.
    fn outcome(
        &self,
        mine: Result<(), RankFailure>,
        operation: &'static str,
    ) -> Result<(), GroupError> {
        let answers = self.answers(operation)?;
        let failed = |rank, failure| GroupError::Rank {
            rank,
            operation,
            failure,
        };
        if let Err(failure) = mine {
            return Err(failed(0, failure));
        }
        for (&rank, answer) in self.serving.iter().zip(answers) {
            match answer {
                FromRank::Done | FromRank::Liveness(_) => {}
                FromRank::Failed(failure) => return Err(failed(rank, failure)),
                FromRank::Finished => return Err(GroupError::RankFinished { rank, operation }),
            }
        }
        Ok(())
    }

    /// Ends the group across ranks, once every member's channel (every link's writer) is
    /// dropped: tells every rank to finish and waits for it (up to [`FINISH_LIMIT`]), then
    /// stops the post office.
    pub fn finish(self) {
        if let Err(e) = self.tell_all(|_| ToRank::Finish) {
            tracing::warn!(error = %e, "cannot tell the ranks to finish");
        }
        let number = self.current.load(Ordering::Relaxed);
        let until = Instant::now() + FINISH_LIMIT;
        self.office
            .waiting_for("the other ranks to finish the session");
        let mut waiting = self.serving.clone();
        while !waiting.is_empty() {
            let left = until.saturating_duration_since(Instant::now());
            match self.office.next_control(left) {
                Some((from, bytes)) => {
                    if let Some((n, FromRank::Finished)) = decode(&bytes) {
                        if n == number {
                            waiting.retain(|&r| r != from);
                        }
                    }
                }
                None => break,
            }
        }
        if !waiting.is_empty() {
            tracing::warn!(?waiting, "ranks still serving at shutdown");
        }
        // The channels (which shared the office) are gone: this is its last holder.
        match Arc::try_unwrap(self.office) {
            Ok(office) => office.stop(),
            Err(shared) => drop(shared),
        }
    }
}

/// A serving rank's message saying it has finished (its devices stopped), in answer to the
/// finish numbered `number`.
pub fn finished(number: u64) -> Vec<u8> {
    encode(number, &FromRank::Finished)
}

/// What member `index` of rank `rank` is doing, as its rank sees it; `Unknown` when the
/// rank does not say within `LIVENESS_LIMIT`. The question has a number of its own (from
/// `numbers`), so a late answer to an earlier one is never taken for it.
pub fn ask_liveness(
    office: &PostOffice,
    numbers: &AtomicU64,
    rank: usize,
    index: usize,
) -> Liveness {
    let number = numbers.fetch_add(1, Ordering::Relaxed) + 1;
    if office
        .send_control(rank, encode(number, &ToRank::Liveness(index)))
        .is_err()
    {
        return Liveness::Unknown;
    }
    let until = Instant::now() + LIVENESS_LIMIT;
    while let Some((from, bytes)) =
        office.next_control(until.saturating_duration_since(Instant::now()))
    {
        if let (true, Some((n, FromRank::Liveness(liveness)))) = (from == rank, decode(&bytes)) {
            if n == number {
                return liveness;
            }
        }
    }
    Liveness::Unknown
}

impl Group {
    /// The ranks, when every rank's host maps its members' memory and so does rank 0's for
    /// its own: the condition of every way across the ranks (module doc).
    fn mapped_ranks(&self) -> Option<&Ranks> {
        let ranks = self.ranks.as_ref()?;
        let local = ranks.per_rank.min(self.members.len());
        let mapped = self.members[..local].iter().all(|m| m.shares_memory());
        (ranks.maps_memory && ranks.per_rank > 0 && mapped).then_some(ranks)
    }

    /// Where `place` lies in its member's memory, as its device locates it (rank 0's own
    /// members in the memory this host maps; a remote member's asked through its link);
    /// `None` when it cannot be moved in place.
    fn address(&mut self, place: &Place) -> Result<Option<usize>, GroupError> {
        let per_rank = self.ranks.as_ref().map_or(usize::MAX, |r| r.per_rank);
        let channel = &mut self.members[place.member];
        let found = if place.member < per_rank {
            channel
                .in_memory(&place.span)
                .map(|at| at.map(|(at, _)| at))
        } else {
            channel.located(&place.span)
        };
        found.map_err(GroupError::on(place.member))
    }

    /// Every place's address (see [`Group::address`]); `None` when one cannot be moved in
    /// place.
    fn addresses(&mut self, places: &[Place]) -> Result<Option<Vec<usize>>, GroupError> {
        let mut at = Vec::with_capacity(places.len());
        for place in places {
            match self.address(place)? {
                Some(address) => at.push(address),
                None => return Ok(None),
            }
        }
        Ok(Some(at))
    }
}
