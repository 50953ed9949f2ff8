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
//!   with results combined in the same order: bit-identical to one host. The workers are
//!   one group across the ranks (`transport::group`), whose operations move bulk data
//!   between the ranks by MPI, or within a rank, wherever they can, never through rank 0
//!   (`transport::group::ranks` says when); the serving ranks answer rank 0's commands for
//!   them.
//! - **Shutdown.** Shutting the session down (or dropping it) ends every link and tells
//!   every rank to finish; each rank stops its devices, says it has finished and ends.
//!   Rank 0 waits up to [`FINISH_LIMIT`](crate::transport::group::ranks::FINISH_LIMIT)
//!   for them, then finalizes MPI if the session
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

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use super::{Session, SessionError};
use crate::instance::{InstanceError, Instances, Mpi, MpiGuard};
use crate::placement::{self, Placement};
use crate::transport::group::ranks::{ask_liveness, serve::answer_commands, Ranks};
use crate::transport::group::Group;
use crate::transport::tunnel::{LinkId, LinkReader, LinkWriter, PostOffice};
use crate::transport::{Channel, TransportError};

/// MPI, kept for the session's end: finalized then (under the deadline) if the session
/// initialized it.
pub(super) struct Finalize {
    mpi: Mpi,
    guard: Option<MpiGuard>,
}

impl std::fmt::Debug for Finalize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Finalize").finish_non_exhaustive()
    }
}

impl Finalize {
    /// Finalizes MPI if the session initialized it: MPI_Finalize waits for every rank, so
    /// under the deadline, as a collective.
    pub(super) fn now(self) {
        let Self { mpi, guard } = self;
        if let Some(guard) = guard {
            mpi.finalize(guard);
        }
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
    let finalize = Finalize { mpi: *mpi, guard };
    if mpi.rank() != 0 {
        // A rank that cannot serve ends the job at once, saying why: its workers' links
        // would never answer, and rank 0 would report only their silence.
        if let Err(e) = serve(mpi, placement, per_rank, memory) {
            eprintln!("tessera: rank {}: {e}", mpi.rank());
            mpi.abort(1);
        }
        finalize.now();
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
    let office = Arc::new(office);
    let numbers = Arc::new(AtomicU64::new(0));
    let maps_memory = !matches!(placement, Placement::Qemu(_) | Placement::Serial { .. });
    let ranks_view = Ranks::new(*mpi, office.clone(), numbers.clone(), per_rank, maps_memory);
    // A failure below drops the channels made so far (ending their links) before the
    // ranks are waited for.
    let channels =
        controller_channels(placement, per_rank, memory, &links, ends, (office, numbers));
    let group = match channels {
        Ok(channels) => Group::across(channels, ranks_view),
        Err(e) => {
            ranks_view.finish();
            finalize.now();
            return Err(e);
        }
    };
    match Session::with_group(group, num_groups, Some(finalize)) {
        Ok(session) => Ok(Some(session)),
        Err(e) => Err(e),
    }
}

/// Rank 0's channels: its own workers on `placement`, then every remote worker's link.
fn controller_channels(
    placement: &Placement,
    per_rank: usize,
    memory: usize,
    links: &[LinkId],
    ends: Vec<(LinkReader, LinkWriter)>,
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

/// This rank's part: its workers on `placement`, each serving its link to rank 0, and rank
/// 0's commands answered until it says to finish; then the devices are stopped and rank 0
/// is told.
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
    for (index, (link, (reader, writer))) in links.iter().zip(ends).enumerate() {
        served.push(placement::serve(
            placement,
            (link.worker, index, links.len()),
            memory,
            reader,
            writer,
        )?);
    }
    let finished = answer_commands(mpi, &office, &mut served).map_err(TransportError::from)?;
    for device in served {
        device.wait();
    }
    office
        .send_control(0, crate::transport::group::ranks::finished(finished))
        .map_err(TransportError::from)?;
    office.stop();
    Ok(())
}
