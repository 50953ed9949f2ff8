//! [`Instances`] over MPI (OpenMPI through the `mpi` crate): the world communicator of the
//! processes `mpirun` started.
//!
//! MPI's default error handler ends the job on any MPI error, naming the failing rank in
//! its message; tessera's own checks (sizes, lengths) become [`InstanceError`]s naming the
//! rank. A panic on any rank calls `MPI_Abort`, so its peers never wait in a collective for
//! a rank that is gone.
//!
//! # Deadline
//!
//! A rank that is stopped (SIGSTOP, a debugger, a swapped-out host) is not gone: MPI sees
//! nothing wrong and its peers would wait in their next collective forever. So every
//! collective runs under a deadline — [`DEADLINE_VAR`] seconds, [`DEFAULT_DEADLINE`] when
//! unset — watched by a thread of its own: a collective still waiting when it passes ends
//! the process with a message naming the rank and the collective, and `mpirun` then ends
//! the job. Raise it for steps or checkpoint saves (the other ranks wait at a barrier
//! meanwhile) longer than that.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use mpi::collective::SystemOperation;
use mpi::datatype::PartitionMut;
use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use mpi::Count;
use mpi::Threading;

use super::{InstanceError, Instances};

/// The environment variable that sets the collectives' deadline, in seconds.
pub const DEADLINE_VAR: &str = "TESSERA_MPI_DEADLINE";
/// The collectives' deadline when [`DEADLINE_VAR`] is unset.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(300);
/// How often the watchdog looks at the collective under way.
const WATCH: Duration = Duration::from_millis(100);

/// The tag of an allgather in place's messages (the only point-to-point messages the
/// instances send one another on the world communicator).
const GATHER_TAG: i32 = 7;

/// The collective under way on this rank, if any: when its deadline passes and its name.
static UNDER_WAY: Mutex<Option<(Instant, &'static str)>> = Mutex::new(None);

/// Keeps MPI initialized; dropping it finalizes MPI.
pub struct MpiGuard {
    _universe: Universe,
}

impl std::fmt::Debug for MpiGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiGuard").finish_non_exhaustive()
    }
}

/// The world communicator's collectives. A handle: the communicator is looked up on each
/// call, so the handle is `Send` and `Sync`; MPI is called from one thread at a time, or
/// from several when initialized for threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mpi {
    rank: usize,
    size: usize,
    /// Initialized for calls from several threads at once.
    threads: bool,
    /// How long a collective may wait for its peers (see the module documentation).
    deadline: Duration,
}

impl Mpi {
    /// Initializes MPI and installs the panic hook that aborts the job.
    pub fn initialize() -> Result<(MpiGuard, Self), InstanceError> {
        let universe = mpi::initialize().ok_or(InstanceError::AlreadyInitialized)?;
        Self::on(universe, false)
    }

    /// Like [`Mpi::initialize`], for a process that calls MPI from more than one thread (a
    /// session across ranks: a post office thread beside the controller's); an MPI built
    /// without thread support is an error.
    pub fn initialize_for_threads() -> Result<(MpiGuard, Self), InstanceError> {
        let (universe, provided) = mpi::initialize_with_threading(Threading::Multiple)
            .ok_or(InstanceError::AlreadyInitialized)?;
        if provided != Threading::Multiple {
            return Err(InstanceError::NoThreads);
        }
        Self::on(universe, true)
    }

    /// How long a collective may wait for its peers (`TESSERA_MPI_DEADLINE`).
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// True when initialized for calls from several threads at once
    /// ([`Mpi::initialize_for_threads`]).
    pub fn threads(&self) -> bool {
        self.threads
    }

    fn on(universe: Universe, threads: bool) -> Result<(MpiGuard, Self), InstanceError> {
        let world = universe.world();
        let deadline = match std::env::var(DEADLINE_VAR) {
            Err(_) => DEFAULT_DEADLINE,
            Ok(text) => match text.parse::<u64>() {
                Ok(seconds) if seconds > 0 => Duration::from_secs(seconds),
                _ => return Err(InstanceError::Deadline { text }),
            },
        };
        let mpi = Self {
            rank: world.rank() as usize,
            size: world.size() as usize,
            threads,
            deadline,
        };
        let rank = mpi.rank;
        std::thread::Builder::new()
            .name("tessera-mpi-deadline".into())
            .spawn(move || watch(rank, deadline))
            .map_err(|_| InstanceError::Watchdog)?;
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            previous(info);
            // After MPI_Finalize the job no longer waits on this rank (and aborting is not
            // allowed): the panic ends the process as any other does.
            if !mpi::environment::is_finalized() {
                SimpleCommunicator::world().abort(101);
            }
        }));
        Ok((
            MpiGuard {
                _universe: universe,
            },
            mpi,
        ))
    }

    /// Finalizes MPI (drops `guard`) under the deadline: MPI_Finalize waits for every
    /// rank, so a stopped one would otherwise hold this one in it forever. For a program
    /// that keeps MPI up longer than one session or runtime (the Python package keeps it
    /// for the interpreter's life).
    pub fn finalize(&self, guard: MpiGuard) {
        self.guarded("finalizing MPI", || drop(guard));
    }

    /// Runs the collective `what` under the deadline.
    pub(crate) fn guarded<T>(&self, what: &'static str, collective: impl FnOnce() -> T) -> T {
        let set = |value| *UNDER_WAY.lock().unwrap_or_else(|e| e.into_inner()) = value;
        set(Some((Instant::now() + self.deadline, what)));
        let out = collective();
        set(None);
        out
    }

    fn world(&self) -> SimpleCommunicator {
        SimpleCommunicator::world()
    }

    pub(super) fn count(&self, elements: usize) -> Result<Count, InstanceError> {
        Count::try_from(elements).map_err(|_| InstanceError::TooLarge {
            rank: self.rank,
            elements,
        })
    }

    /// Every rank's part of an allgather, `len` bytes being this one's (the lengths an
    /// allgather of varying parts exchanges first).
    fn counts(&self, len: usize) -> Result<Vec<Count>, InstanceError> {
        let mine = self.count(len)?;
        let mut counts: Vec<Count> = vec![0; self.size];
        self.guarded("an allgather's lengths", || {
            self.world().all_gather_into(&mine, &mut counts[..])
        });
        Ok(counts)
    }

    /// Every rank's length of a buffer, checked equal.
    fn same_length(&self, len: usize, what: &'static str) -> Result<(), InstanceError> {
        let mine = len as u64;
        let mut all = vec![0u64; self.size];
        self.guarded(what, || self.world().all_gather_into(&mine, &mut all[..]));
        if all.iter().any(|&n| n != mine) {
            return Err(InstanceError::Mismatch {
                rank: self.rank,
                what,
            });
        }
        Ok(())
    }
}

impl Instances for Mpi {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn barrier(&self) -> Result<(), InstanceError> {
        self.guarded("a barrier", || self.world().barrier());
        Ok(())
    }

    fn allreduce_sum(&self, data: &mut [f64]) -> Result<(), InstanceError> {
        self.count(data.len())?;
        self.same_length(data.len(), "the length of a sum")?;
        let send = data.to_vec();
        self.guarded("a reduction's sum", || {
            self.world()
                .all_reduce_into(&send[..], data, SystemOperation::sum())
        });
        Ok(())
    }

    fn allreduce_or(&self, data: &mut [u8]) -> Result<(), InstanceError> {
        self.count(data.len())?;
        self.same_length(data.len(), "the length of a weight buffer")?;
        let send = data.to_vec();
        self.guarded("the weights' combination", || {
            self.world()
                .all_reduce_into(&send[..], data, SystemOperation::bitwise_or())
        });
        Ok(())
    }

    fn allgather(&self, data: &[u8]) -> Result<Vec<u8>, InstanceError> {
        let world = self.world();
        let counts = self.counts(data.len())?;
        let mut displs = Vec::with_capacity(self.size);
        let mut total: usize = 0;
        for &c in &counts {
            displs.push(self.count(total)?);
            total += c as usize;
        }
        let mut out = crate::pages::zeroed(total).map_err(|e| InstanceError::HostMemory {
            rank: self.rank,
            bytes: e.bytes,
        })?;
        {
            let mut partition = PartitionMut::new(&mut out[..], counts, &displs[..]);
            self.guarded("an allgather", || {
                world.all_gather_varcount_into(data, &mut partition)
            });
        }
        Ok(out)
    }

    fn allgather_in_place(
        &self,
        out: &mut [u8],
        mine: std::ops::Range<usize>,
    ) -> Result<(), InstanceError> {
        let mismatch = |what| InstanceError::Mismatch {
            rank: self.rank,
            what,
        };
        if mine.start > mine.end || mine.end > out.len() {
            return Err(mismatch("this instance's part of an allgather"));
        }
        let world = self.world();
        let counts = self.counts(mine.len())?;
        let mut starts = Vec::with_capacity(self.size);
        let mut total: usize = 0;
        for &c in &counts {
            starts.push(total);
            total += c as usize;
        }
        // Every instance sees every count, so a wrong total is refused by all of them
        // together; a part elsewhere than the counts put it (windows that disagree) is
        // refused by its instance before the data move (its peers then wait for the
        // deadline: the windows come from one split, so this is a bug, not an input).
        if total != out.len() || starts.get(self.rank) != Some(&mine.start) {
            return Err(mismatch("the parts of an allgather in place"));
        }
        // This part is sent to every other instance from where it lies, and theirs are
        // received around it (the `mpi` crate has no MPI_IN_PLACE, and a copy of this part
        // would cost a buffer as large as it): every send is posted first, so no order of
        // the receives can deadlock.
        let (before, rest) = out.split_at_mut(mine.start);
        let (part, after) = rest.split_at_mut(mine.len());
        let part: &[u8] = part;
        self.guarded("an allgather in place", || {
            mpi::request::scope(|scope| {
                let sends: Vec<_> = (0..self.size)
                    .filter(|&r| r != self.rank)
                    .map(|r| {
                        world
                            .process_at_rank(r as i32)
                            .immediate_send_with_tag(scope, part, GATHER_TAG)
                    })
                    .collect();
                for r in (0..self.size).filter(|&r| r != self.rank) {
                    let (at, len) = (starts[r], counts[r] as usize);
                    let region = if at < mine.start {
                        &mut before[at..at + len]
                    } else {
                        &mut after[at - mine.end..at - mine.end + len]
                    };
                    world
                        .process_at_rank(r as i32)
                        .receive_into_with_tag(region, GATHER_TAG);
                }
                for send in sends {
                    send.wait();
                }
            })
        });
        Ok(())
    }

    fn abort(&self, code: i32) -> ! {
        self.world().abort(code)
    }
}

/// The watchdog: ends the process once the collective under way has outlived its deadline.
/// The process ends by `abort` — no MPI call from this thread (MPI is initialized for one
/// thread) and no exit handler that could wait on the stuck collective; `mpirun` sees the
/// rank end without finalizing and ends the rest of the job.
fn watch(rank: usize, deadline: Duration) {
    loop {
        std::thread::sleep(WATCH);
        let under_way = *UNDER_WAY.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, what)) = under_way.filter(|(until, _)| Instant::now() > *until) {
            eprintln!(
                "tessera: rank {rank}: {what} waited {} s for the other ranks (the deadline, \
                 {DEADLINE_VAR}): a rank is stopped or gone; ending the job",
                deadline.as_secs()
            );
            std::process::abort();
        }
    }
}
