//! The SPMD session (TVM Disco's controller and workers): one controller drives N workers
//! in lock-step — registers, named functions, copies to and from worker 0, and collectives
//! across the workers, whole or in contiguous groups.
//!
//! The API by area: `registers` (register handles, a register's value on one worker),
//! `call` (functions and calls), `copy` (copies between the host and worker 0), `sync`
//! (syncs and deadlines), [`collective`], [`loader`] (sharded safetensors loads) and, with
//! feature `mpi`, `ranks` (a session across MPI ranks). Beneath them, `state` is what the
//! controller holds and `pending` the commands awaiting their replies.
//!
//! # Contract
//!
//! - **One order.** Every command goes to every worker it concerns in the order the
//!   controller issues it; workers run them in that order. Commands are pipelined: a call
//!   returns once it is sent, and [`Session::sync_worker`] / [`Session::sync_all`] wait for
//!   the replies.
//! - **Errors reach the controller.** A command that fails on a worker is reported, naming
//!   the worker and the command, by the next sync (or by the next operation that needs the
//!   worker's results); the session stays usable. A sync reports every failure it finds,
//!   not only the first ([`SessionError::Failures`]), and only those of the commands the
//!   syncing thread sent: in a session shared between threads, each thread hears of its
//!   own failures (see `pending`). A function that does not exist is an error before any
//!   worker runs anything.
//! - **Registers.** Ids come from the controller, from 1 (0 means "discard"); a freed id is
//!   reused last-in-first-out. A [`Register`] handle frees its id on every worker when it
//!   is dropped; after shutdown, dropping one does nothing.
//! - **A register belongs to its session**, and so does a function handle. Every session
//!   has an identity of its own in this process ([`Session::id`]), and every [`Register`]
//!   carries the one of the session that made it. Another session refuses it ([`SessionError::ForeignRegister`]) before
//!   it sends anything: the same id names an unrelated value there, which a read would
//!   return and a write would destroy.
//! - **Capacity.** A worker holds [`MAX_REGISTERS`] registers (the device's table, the same
//!   on every placement). The controller hands out ids 1 to [`MAX_REGISTERS`] only, so the
//!   one that would exceed it is refused where it is asked for
//!   ([`SessionError::RegistersExhausted`]), before anything is sent, and no worker's
//!   table ever fills. A session has 1 to [`MAX_WORKERS`] workers, and each a memory within
//!   the placement's bounds ([`placement::DEVICE_MEMORY`]): every worker is a thread or a
//!   process of the host's with buffers of its own, so an impossible count is refused
//!   ([`SessionError::Workers`]) before anything starts, never attempted.
//! - **Groups** are `num_groups` equal contiguous blocks of workers; a group's leader is its
//!   first worker. Collectives (see [`collective`]) run on the host between the workers'
//!   registers, destination-passing: the result goes into a register the caller allocated
//!   with the right element count. Every size and type is checked before the first result
//!   is written, so a collective refused for a rule leaves no worker half-way (a worker
//!   that fails while results are being written is reported, naming it).
//! - **Bulk.** Where the host maps a worker's memory (device threads and child processes,
//!   unless faults are injected), arrays are copied straight into and out of its registers
//!   while it is idle, and float allreduces into array registers combine the members'
//!   registers in place (the in-place path of `transport::group`). Elsewhere (QEMU;
//!   integer allreduces, which go through host arrays) whole arrays move beside one
//!   request where the link allows, else in framed chunks.
//! - **Shutdown** is idempotent and happens on drop too; the workers stop with it (a worker
//!   whose controller vanished exits: its link closes).
//! - **Across hosts** (feature `mpi`): under `mpirun`, rank 0 is the controller and every
//!   rank hosts its share of the workers, with global worker ids; every operation above
//!   holds across ranks (the `ranks` module's rules).
//!
//! ```
//! use tessera_core::dtype::DataType;
//! use tessera_host::runtime::Placement;
//! use tessera_host::session::collective::{ReduceOp, Scope};
//! use tessera_host::session::{CallArg, HostArray, HostValue, Session};
//!
//! // Four workers in threads (or Placement::Process / Placement::Qemu), one group.
//! let session = Session::new(&Placement::Thread, 4, 1, 16 << 20)?;
//! let add_one = session.get_function("add_one")?; // an unknown name fails here
//! let x = session.copy_to_worker0(&HostArray::from_f32(&[2, 3], &[0., 1., 2., 3., 4., 5.])?)?;
//! let y = session.call(&add_one, &[CallArg::Register(&x)])?; // pipelined; errors at sync
//! session.sync_worker(0)?;
//! assert_eq!(session.copy_from_worker0(&y)?.to_f32(), Some(vec![1., 2., 3., 4., 5., 6.]));
//!
//! let total = session.empty(DataType::F32, &[2, 3])?; // collectives are destination-passing
//! session.broadcast_from_worker0(&y, &total, Scope::Global)?;
//! session.allreduce(&total, &total, ReduceOp::Sum, Scope::Global)?;
//! let HostValue::Array(sum) = session.debug_get(&total, 3)? else { unreachable!() };
//! assert_eq!(sum.to_f32(), Some(vec![4., 8., 12., 16., 20., 24.])); // on worker 3 too
//!
//! // Disco's destination-passing copies: into arrays that already exist, nothing allocated.
//! let mut back = HostArray::from_f32(&[2, 3], &[0.; 6])?;
//! session.copy_to_worker0_into(&HostArray::from_f32(&[2, 3], &[1.; 6])?, &x)?;
//! session.copy_from_worker0_into(&x, &mut back)?;
//! assert_eq!(back.to_f32(), Some(vec![1.; 6]));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod claims;
pub mod collective;
mod error;
pub mod loader;
mod pending;
#[cfg(feature = "mpi")]
pub mod ranks;
mod state;
mod value;

mod call;
mod copy;
mod registers;
mod sync;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

pub use crate::array::{byte_len, ArrayError, ArrayView, ArrayViewMut, HostArray, HostValue};
pub use call::Function;
pub use claims::BadDescription;
pub use error::{Command, SessionError, WorkerFailure, WorkerFailures};
pub use registers::Register;
pub use value::CallArg;

use state::State;

use crate::placement::{self, Placement};
use crate::trace::{TraceError, TraceSummary};
use crate::transport::group::Group;
use crate::transport::Channel;

/// The most workers a session has: each costs the host a device thread (or two processes)
/// and about 2 MiB of buffers besides its memory, and across MPI ranks a worker's id is an
/// MPI tag, which stays below 32,765.
pub const MAX_WORKERS: usize = 1024;

/// Registers a worker holds: the ids a session hands out are 1 to `MAX_REGISTERS`.
pub use tessera_firmware_sim::MAX_REGISTERS;

/// The largest register id, as ids travel (checked when compiled: ids are 16 bits).
const MAX_REGISTER_ID: u16 = {
    assert!(
        MAX_REGISTERS <= u16::MAX as usize,
        "register ids are 16 bits"
    );
    MAX_REGISTERS as u16
};

/// The identity the next session takes: unique in this process, never reused (64 bits do
/// not wrap), so a register outliving its session is still told apart from a new one's.
static NEXT_SESSION: AtomicU64 = AtomicU64::new(1);

/// A controller and its workers. See the module documentation.
#[derive(Debug)]
pub struct Session {
    /// This session's identity, which its registers carry.
    id: u64,
    state: Arc<Mutex<State>>,
    /// A trace this session keeps (`start_trace`).
    trace: crate::trace::Held,
}

impl Session {
    /// Starts `workers` devices on `placement` (`memory` bytes each for host-placed ones) in
    /// `num_groups` contiguous groups.
    ///
    /// ```
    /// use tessera_host::runtime::Placement;
    /// use tessera_host::session::{Session, SessionError};
    ///
    /// // Six workers in threads, 1 MiB each, in two groups of three: [0, 1, 2] and [3, 4, 5].
    /// let session = Session::new(&Placement::Thread, 6, 2, 1 << 20)?;
    /// assert_eq!(session.num_workers(), 6);
    /// // Groups are equal blocks: 6 workers do not make 4 of them, and nothing starts.
    /// assert!(Session::new(&Placement::Thread, 6, 4, 1 << 20).is_err());
    /// # Ok::<(), SessionError>(())
    /// ```
    pub fn new(
        placement: &Placement,
        workers: usize,
        num_groups: usize,
        memory: usize,
    ) -> Result<Self, SessionError> {
        check_groups(workers, num_groups)?;
        match crate::instance::launched_by_mpirun() {
            None => {}
            #[cfg(feature = "mpi")]
            Some(_) => return ranks::across(placement, workers, num_groups, memory),
            #[cfg(not(feature = "mpi"))]
            Some(variable) => {
                return Err(crate::instance::InstanceError::MpiNotBuilt { variable }.into())
            }
        }
        let last = u32::try_from(workers).map_err(|_| SessionError::NoWorker {
            worker: workers,
            workers,
        })?;
        let channels = placement::open(placement, 0..last, memory, placement::Serving::Alongside)?;
        Self::on(channels, num_groups)
    }

    /// A session on devices already opened, worker `i` being `channels[i]`.
    pub fn on(channels: Vec<Channel>, num_groups: usize) -> Result<Self, SessionError> {
        Self::with_group(
            Group::new(channels),
            num_groups,
            #[cfg(feature = "mpi")]
            None,
        )
    }

    /// A session on `group`, its workers (`finalize`: MPI to finalize at its end).
    fn with_group(
        group: Group,
        num_groups: usize,
        #[cfg(feature = "mpi")] finalize: Option<ranks::Finalize>,
    ) -> Result<Self, SessionError> {
        check_groups(group.len(), num_groups)?;
        let pending = group.iter().map(|_| VecDeque::new()).collect();
        Ok(Self {
            id: NEXT_SESSION.fetch_add(1, Ordering::Relaxed),
            state: Arc::new(Mutex::new(State {
                workers: group,
                pending,
                parked: Vec::new(),
                next_id: 1,
                free_ids: Vec::new(),
                called: HashMap::new(),
                num_groups,
                reduce_order: Default::default(),
                shut_down: false,
                #[cfg(feature = "mpi")]
                finalize,
            })),
            trace: Default::default(),
        })
    }

    fn lock(&self) -> Result<MutexGuard<'_, State>, SessionError> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.shut_down {
            return Err(SessionError::ShutDown);
        }
        Ok(state)
    }

    /// Starts a timeline of this process's work — this session's commands and collectives
    /// and its workers' requests — written to `path` in the Chrome trace-event format when
    /// [`finish_trace`](Self::finish_trace) is called or the session drops
    /// ([`crate::trace`]'s rules: one trace at a time per process; the file is created now).
    pub fn start_trace(&self, path: impl AsRef<std::path::Path>) -> Result<(), TraceError> {
        self.trace.start(path.as_ref())
    }

    /// Writes the trace [`start_trace`](Self::start_trace) began; `None` if none runs.
    pub fn finish_trace(&self) -> Result<Option<TraceSummary>, TraceError> {
        self.trace.finish()
    }

    /// This session's identity: unique among the sessions of this process, carried by
    /// every register it makes.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Number of workers.
    pub fn num_workers(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .workers
            .len()
    }

    /// Number of groups.
    pub fn num_groups(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .num_groups
    }

    /// Workers each MPI rank hosts: all of them on one host. Ranks first, an allreduce
    /// folds each run of this many consecutive workers before combining the runs
    /// ([`collective::ReduceOrder`]).
    pub fn workers_per_rank(&self) -> usize {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        #[cfg(feature = "mpi")]
        if let Some(ranks) = state.workers.ranks() {
            return ranks.per_rank();
        }
        state.workers.len()
    }

    /// Stops every worker. Calling it again does nothing; register handles dropped
    /// afterwards do nothing either.
    pub fn shutdown(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.shut_down {
            return;
        }
        state.shut_down = true;
        // Dropping the channels stops the devices (threads end, processes are killed);
        // with them every link to another rank ends, and the ranks are told to finish.
        state.workers.shutdown();
        state.pending.clear();
        state.parked.clear();
        #[cfg(feature = "mpi")]
        if let Some(finalize) = state.finalize.take() {
            finalize.now();
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn check_groups(workers: usize, groups: usize) -> Result<(), SessionError> {
    if !(1..=MAX_WORKERS).contains(&workers) {
        return Err(SessionError::Workers {
            workers,
            max: MAX_WORKERS,
        });
    }
    if workers == 0 || groups == 0 || !workers.is_multiple_of(groups) {
        return Err(SessionError::Groups { workers, groups });
    }
    Ok(())
}

/// `result` with a failure to reach `worker` named as the failure of `command` on it: a
/// lost link reads "worker 2: reading register 7 failed: …", not a bare transport error.
fn on_worker<T>(
    worker: usize,
    command: Command,
    result: Result<T, SessionError>,
) -> Result<T, SessionError> {
    result.map_err(|e| match e {
        SessionError::Transport(source) => SessionError::Worker {
            worker,
            command,
            source,
        },
        other => other,
    })
}
