//! A session across the ranks of an MPI job (feature `mpi`): what TVM Disco's socket
//! session does for several nodes, on MPI.
//!
//! # Rules
//!
//! - **Who is who.** Under `mpirun -np R`, [`Session::new`] with `W` workers (`R` must
//!   divide `W`) makes rank 0 the controller; rank `r` hosts workers `r·W/R ..
//!   (r+1)·W/R` in its own placement (the one every rank names). Worker ids, groups and
//!   every index the API takes are global: a group may cross ranks, and a failure names
//!   the worker's global id.
//! - **Every rank runs the same program.** On rank 0, `Session::new` returns the
//!   controller. On every other rank it serves its workers until the controller shuts the
//!   session down, then ends the process (status 0, or 1 with the reason on stderr) — it
//!   never returns, so code written for one host runs under `mpirun` unchanged (under
//!   `mpirun`, `Session::new` always spans the ranks). A program that initializes MPI
//!   itself (to run its own MPI before and after the session) calls
//!   [`Session::across_ranks`] instead, which returns on every rank. While the session
//!   runs, the other ranks serve it: the program's own collectives wait until it has
//!   ended (its point-to-point messages are its own: the post offices use a communicator
//!   of their own).
//! - **Commands travel as on one host.** A remote worker is a byte link between rank 0 and
//!   its rank (`transport::tunnel`), so the request protocol (sequence numbers, deadlines,
//!   re-sends) runs end to end, and every session operation — calls, copies, syncs, debug
//!   reads and writes, frees, collectives — works on remote workers as on local ones,
//!   with results combined by the controller in the same order: bit-identical to one host.
//!   Bulk data of remote workers goes through rank 0, except that of a global allreduce,
//!   allgather or broadcast, which moves between the ranks by MPI (`collectives`), and
//!   that of the same in groups that each lie on one rank, which never leaves the rank
//!   (`local`), and sends from worker to worker, which go straight from rank to rank
//!   (`moves`).
//! - **Rank 0 asks, the others answer.** Besides the links, rank 0 sends a serving rank
//!   control messages (`control`): take part in a collective or in sends from worker to
//!   worker, read parts of a file into its workers (a sharded load: `loader`), say what a
//!   silent worker is doing, or finish. Each is answered once under its number; rank 0
//!   waits for an answer up to the MPI collectives' deadline and drops any answer to a
//!   command it gave up.
//! - **Shutdown.** Shutting the session down (or dropping it) ends every link and tells
//!   every rank to finish; each rank stops its devices, says it has finished and ends.
//!   Rank 0 waits up to [`FINISH_LIMIT`] for them, then finalizes MPI if the session
//!   initialized it: one `Session::new` per job (MPI is initialized once per process; a
//!   second is refused with the reason).
//! - **Faults.** A rank that dies or panics ends the whole job (`mpirun` ends the other
//!   ranks and names the rank that failed; tessera's panic hook calls `MPI_Abort`), and so
//!   does a rank that cannot start its workers (it says why, then `MPI_Abort`); a
//!   controller that dies ends every rank the same way, and each rank's device processes
//!   with it (their reapers). A rank that is stopped (SIGSTOP, a debugger) is not gone to
//!   MPI; its peers' post offices hear no heartbeat from it, and the first to have heard
//!   nothing for the MPI deadline (`TESSERA_MPI_DEADLINE`) ends the job, naming it and
//!   what it was waiting for (`transport::tunnel`); finalizing MPI runs under the same
//!   deadline. A remote worker that stops answering while its rank lives is
//!   treated like a local one: its channel asks its rank what it is doing (busy with a long
//!   kernel: waited for up to the busy deadline; stopped, ended, idle: reported by its
//!   global id).

mod collectives;
mod control;
mod local;
mod moves;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Session, SessionError};
use crate::instance::{InstanceError, Instances, Mpi, MpiGuard};
use crate::placement::{self, Placement};
use crate::transport::tunnel::{LinkId, PostOffice};
use crate::transport::{Channel, Liveness, Served, SharedMemory, TransportError};
use control::{decode, encode};
pub(in crate::session) use control::{FromRank, ToRank};

pub(in crate::session) use collectives::Kind;

/// How long rank 0, shutting down, waits for the other ranks to finish serving.
pub const FINISH_LIMIT: Duration = Duration::from_secs(30);
/// The most bytes one MPI call moves here (MPI counts are 32-bit): larger data take the
/// path through rank 0, which moves them in chunks.
const MPI_BYTES: usize = i32::MAX as usize - 64;
/// What rank 0 waits for when no command of its own is under way.
const CONTROLLER_IDLE: &str = "its remote workers' replies (or nothing: an idle session)";
/// How long rank 0 waits for a rank to say what a silent worker is doing.
const LIVENESS_LIMIT: Duration = Duration::from_secs(1);

/// What rank 0 holds while the session spans ranks.
pub(super) struct Across {
    /// Shared with each remote worker's channel, which asks its rank what the worker does.
    office: Arc<PostOffice>,
    /// The count control messages are numbered by (shared with the channels' questions),
    /// and the number of the command under way.
    numbers: Arc<AtomicU64>,
    current: AtomicU64,
    /// The ranks serving workers (all but 0).
    serving: Vec<usize>,
    mpi: Mpi,
    /// Workers each rank hosts.
    per_rank: usize,
    /// Every rank's host maps its workers' memory (not QEMU).
    maps_memory: bool,
    /// Buffers the allreduce across ranks reuses.
    scratch: collectives::Scratch,
    /// Keeps MPI initialized when the session initialized it; finalized last.
    guard: Option<MpiGuard>,
}

impl std::fmt::Debug for Across {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Across")
            .field("serving", &self.serving)
            .field("per_rank", &self.per_rank)
            .finish_non_exhaustive()
    }
}

impl Across {
    /// Workers each rank hosts.
    pub(in crate::session) fn per_rank(&self) -> usize {
        self.per_rank
    }

    /// Sends every serving rank its share of a new command (`message` for each rank),
    /// under a number of its own: only answers with that number are taken for it.
    pub(in crate::session) fn tell_all(
        &self,
        message: impl Fn(usize) -> ToRank,
    ) -> Result<(), SessionError> {
        let number = self.numbers.fetch_add(1, Ordering::Relaxed) + 1;
        self.current.store(number, Ordering::Relaxed);
        for &rank in &self.serving {
            self.office
                .send_control(rank, encode(number, &message(rank)))
                .map_err(|e| SessionError::Transport(e.into()))?;
        }
        Ok(())
    }

    /// Every serving rank's answer to the command under way, in rank order (they arrive in
    /// any order), each waited for up to the MPI deadline; `operation` names the command.
    fn answers(&self, operation: &'static str) -> Result<Vec<FromRank>, SessionError> {
        let number = self.current.load(Ordering::Relaxed);
        let deadline = self.mpi.deadline();
        let until = Instant::now() + deadline;
        self.office
            .waiting_for(format!("the other ranks' answers to {operation}"));
        let mut answers: Vec<Option<FromRank>> = self.serving.iter().map(|_| None).collect();
        while let Some(waiting) = answers.iter().position(Option::is_none) {
            let left = until.saturating_duration_since(Instant::now());
            let Some((from, bytes)) = self.office.next_control(left) else {
                return Err(SessionError::Rank {
                    rank: self.serving[waiting],
                    operation,
                    reason: format!("no answer within {} s", deadline.as_secs()),
                });
            };
            let slot = self.serving.iter().position(|&r| r == from);
            match (slot, decode::<FromRank>(&bytes)) {
                (Some(slot), Some((n, answer))) if n == number && answers[slot].is_none() => {
                    answers[slot] = Some(answer)
                }
                // An answer to a command given up, or to a question about a silent
                // worker that came too late: not this command's.
                (_, other) => {
                    tracing::warn!(from, ?other, "a stale control message, dropped")
                }
            }
        }
        self.office.waiting_for(CONTROLLER_IDLE);
        Ok(answers.into_iter().flatten().collect())
    }

    /// The outcome of the last command: rank 0's own (`mine`), then every serving rank's
    /// answer; the first failure, in rank order, names its rank and `operation`.
    pub(in crate::session) fn outcome(
        &self,
        mine: Result<(), String>,
        operation: &'static str,
    ) -> Result<(), SessionError> {
        let mut failures: Vec<(usize, String)> = Vec::new();
        if let Err(reason) = mine {
            failures.push((0, reason));
        }
        for (&rank, answer) in self.serving.iter().zip(self.answers(operation)?) {
            match answer {
                FromRank::Done => {}
                FromRank::Failed(reason) => failures.push((rank, reason)),
                FromRank::Finished => failures.push((rank, "it has finished".into())),
                // Never an answer: `answers` drops them.
                FromRank::Liveness(_) => {}
            }
        }
        match failures.into_iter().next() {
            None => Ok(()),
            Some((rank, reason)) => Err(SessionError::Rank {
                rank,
                operation,
                reason,
            }),
        }
    }

    /// Ends the session across ranks, once every channel (every link's writer) is dropped:
    /// tells every rank to finish and waits for it (up to [`FINISH_LIMIT`]), stops the post
    /// office, finalizes MPI if the session initialized it.
    pub(super) fn finish(self) {
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
        let Self {
            office, guard, mpi, ..
        } = self;
        // The channels (which shared the office) are gone: this is its last holder.
        match Arc::try_unwrap(office) {
            Ok(office) => office.stop(),
            Err(shared) => drop(shared),
        }
        // MPI_Finalize waits for every rank: under the deadline, as a collective.
        mpi.guarded("finalizing MPI", || drop(guard));
    }
}

impl super::State {
    /// The workers each rank hosts, when the session spans ranks whose hosts all map their
    /// workers' memory (rank 0's included), so that each rank can work on its own workers
    /// in place; `None` otherwise.
    pub(in crate::session) fn ranks_in_place(&self) -> Option<usize> {
        let across = self.across.as_ref()?;
        let local = across.per_rank.min(self.workers.len());
        let mapped = self.workers[..local].iter().all(|w| w.shares_memory());
        (across.maps_memory && across.per_rank > 0 && mapped).then_some(across.per_rank)
    }
}

/// `Session::new` under `mpirun`: MPI initialized here (and finalized when the session
/// ends); the controller on rank 0; on every other rank, its workers served until the
/// controller is done, then the end of the process.
pub(super) fn across(
    placement: &Placement,
    workers: usize,
    num_groups: usize,
    memory: usize,
) -> Result<Session, SessionError> {
    let (guard, mpi) = Mpi::initialize_for_threads()?;
    let rank = mpi.rank();
    match start(&mpi, Some(guard), placement, workers, num_groups, memory) {
        Ok(Some(session)) => Ok(session),
        // A serving rank whose controller is done (its guard finalized MPI).
        Ok(None) => std::process::exit(0),
        Err(e) if rank != 0 => {
            eprintln!("tessera: rank {rank}: {e}");
            std::process::exit(1)
        }
        Err(e) => Err(e),
    }
}

impl Session {
    /// A session across the ranks of an MPI job whose MPI the caller initialized
    /// ([`Mpi::initialize_for_threads`]) and finalizes: on rank 0 the controller
    /// (`Some`), on every other rank `None` once its workers have served the controller
    /// to its shutdown. The rules are the module's; [`Session::new`] under `mpirun` does
    /// the same and keeps the serving ranks from returning at all.
    pub fn across_ranks(
        mpi: &Mpi,
        placement: &Placement,
        workers: usize,
        num_groups: usize,
        memory: usize,
    ) -> Result<Option<Session>, SessionError> {
        if !mpi.threads() {
            return Err(InstanceError::NoThreads.into());
        }
        super::check_groups(workers, num_groups)?;
        start(mpi, None, placement, workers, num_groups, memory)
    }
}

/// Rank 0: the controller; any other rank: its workers served, then `None`. `guard`, if
/// given, is finalized when the session ends (rank 0) or once served (other ranks).
fn start(
    mpi: &Mpi,
    guard: Option<MpiGuard>,
    placement: &Placement,
    workers: usize,
    num_groups: usize,
    memory: usize,
) -> Result<Option<Session>, SessionError> {
    let ranks = mpi.size();
    if !workers.is_multiple_of(ranks) {
        return Err(SessionError::Ranks { workers, ranks });
    }
    let per_rank = workers / ranks;
    if mpi.rank() != 0 {
        // A rank that cannot serve ends the job at once, saying why: its workers' links
        // would never answer, and rank 0 would report only their silence.
        if let Err(e) = serve(mpi, placement, per_rank, memory) {
            eprintln!("tessera: rank {}: {e}", mpi.rank());
            mpi.abort(1);
        }
        // MPI_Finalize waits for every rank: under the deadline, as a collective.
        mpi.guarded("finalizing MPI", || drop(guard));
        return Ok(None);
    }
    let links: Vec<LinkId> = (per_rank..workers)
        .map(|worker| LinkId {
            peer: worker / per_rank,
            worker: worker as u32,
        })
        .collect();
    let (office, ends) =
        PostOffice::open(0, &links, mpi.deadline()).map_err(TransportError::from)?;
    office.waiting_for(CONTROLLER_IDLE);
    let office = Arc::new(office);
    let numbers = Arc::new(AtomicU64::new(0));
    let across = Across {
        office: office.clone(),
        numbers: numbers.clone(),
        current: AtomicU64::new(0),
        serving: (1..ranks).collect(),
        mpi: *mpi,
        per_rank,
        maps_memory: !matches!(placement, Placement::Qemu(_)),
        scratch: collectives::Scratch::default(),
        guard,
    };
    // A failure below drops the channels made so far (ending their links) before the
    // ranks are waited for.
    let session = controller_channels(placement, per_rank, memory, &links, ends, (office, numbers))
        .and_then(|channels| Session::on(channels, num_groups));
    match session {
        Ok(session) => {
            session.lock()?.across = Some(across);
            Ok(Some(session))
        }
        Err(e) => {
            across.finish();
            Err(e)
        }
    }
}

/// Rank 0's channels: its own workers on `placement`, then every remote worker's link.
fn controller_channels(
    placement: &Placement,
    per_rank: usize,
    memory: usize,
    links: &[LinkId],
    ends: Vec<(
        crate::transport::tunnel::LinkReader,
        crate::transport::tunnel::LinkWriter,
    )>,
    (office, numbers): (Arc<PostOffice>, Arc<AtomicU64>),
) -> Result<Vec<Channel>, SessionError> {
    let mut channels = placement::open(
        placement,
        0..per_rank as u32,
        memory,
        placement::Serving::Alongside,
    )?;
    for (link, (reader, writer)) in links.iter().zip(ends) {
        let (office, numbers, rank) = (office.clone(), numbers.clone(), link.peer);
        let index = link.worker as usize % per_rank.max(1);
        let liveness = Box::new(move || ask_liveness(&office, &numbers, rank, index));
        channels.push(Channel::remote(link.worker, reader, writer, liveness)?);
    }
    Ok(channels)
}

/// What worker `index` of rank `rank` is doing, as its rank sees it; `Unknown` when the
/// rank does not say within [`LIVENESS_LIMIT`]. The question has a number of its own
/// (from `numbers`), so a late answer to an earlier one is never taken for it.
fn ask_liveness(office: &PostOffice, numbers: &AtomicU64, rank: usize, index: usize) -> Liveness {
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

/// This rank's part: its workers on `placement`, each serving its link to rank 0, and rank
/// 0's control messages answered until it says to finish; then the devices are stopped and
/// rank 0 is told.
fn serve(
    mpi: &Mpi,
    placement: &Placement,
    per_rank: usize,
    memory: usize,
) -> Result<(), SessionError> {
    let first = mpi.rank() * per_rank;
    let links: Vec<LinkId> = (first..first + per_rank)
        .map(|worker| LinkId {
            peer: 0,
            worker: worker as u32,
        })
        .collect();
    let (office, ends) =
        PostOffice::open(mpi.rank(), &links, mpi.deadline()).map_err(TransportError::from)?;
    office.waiting_for("rank 0's next command");
    let mut served = Vec::with_capacity(links.len());
    for (link, (reader, writer)) in links.iter().zip(ends) {
        served.push(placement::serve(
            placement,
            link.worker,
            memory,
            reader,
            writer,
        )?);
    }
    let finished = answer_commands(mpi, &office, &mut served)?;
    for device in served {
        device.wait();
    }
    office
        .send_control(0, encode(finished, &FromRank::Finished))
        .map_err(TransportError::from)?;
    office.stop();
    Ok(())
}

/// Rank 0's commands run on `served` (this rank's workers) and answered, each under its
/// number, until rank 0 says to finish; the number of that message.
fn answer_commands(
    mpi: &Mpi,
    office: &PostOffice,
    served: &mut [Served],
) -> Result<u64, SessionError> {
    let answer = |number: u64, message: &FromRank| {
        office
            .send_control(0, encode(number, message))
            .map_err(TransportError::from)
    };
    let mut scratch = collectives::Scratch::default();
    loop {
        // Rank 0 going away ends the job (mpirun), and rank 0 stopped ends it at the
        // deadline (the post office hears no heartbeat): waiting here needs no deadline.
        let Some((from, bytes)) = office.next_control(Duration::from_secs(1)) else {
            continue;
        };
        let (number, command) = match decode::<ToRank>(&bytes) {
            Some((number, ToRank::Finish)) => return Ok(number),
            Some((number, ToRank::Liveness(index))) => {
                let liveness = served.get(index).map_or(Liveness::Ended, Served::liveness);
                answer(number, &FromRank::Liveness(liveness))?;
                continue;
            }
            Some(numbered) => numbered,
            None => {
                // Answered, so that rank 0 does not wait for it (it cannot be matched to a
                // number: rank 0 drops it as stale and times out on the command).
                tracing::warn!(from, "an unknown control message");
                answer(0, &FromRank::Failed("an unknown control message".into()))?;
                continue;
            }
        };
        // Every command works on this rank's workers' memory (they are idle: rank 0 holds
        // every reply) and is answered once, under its number.
        let mut memories: Vec<Option<&mut SharedMemory>> =
            served.iter_mut().map(|device| device.memory()).collect();
        let outcome = match command {
            ToRank::Collective(part) => collectives::run(mpi, &part, &mut memories, &mut scratch),
            ToRank::InGroups(part) => local::run(&part, &mut memories),
            ToRank::Moves(list) => moves::run(
                mpi.rank(),
                office,
                number,
                &list,
                &mut memories,
                mpi.deadline(),
            ),
            ToRank::Load(load) => super::loader::across::read_parts(&load, &mut memories),
            // Taken above, before the memory is borrowed.
            ToRank::Finish | ToRank::Liveness(_) => Ok(()),
        };
        answer(
            number,
            &match outcome {
                Ok(()) => FromRank::Done,
                Err(reason) => FromRank::Failed(reason),
            },
        )?;
    }
}
