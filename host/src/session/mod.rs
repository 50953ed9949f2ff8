//! The SPMD session (TVM Disco's controller and workers): one controller drives N workers
//! in lock-step — registers, named functions, copies to and from worker 0, and collectives
//! across the workers, whole or in contiguous groups.
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
//! - **A register belongs to its session**, and so does a function handle. Every session has an identity of its own in
//!   this process ([`Session::id`]), and every [`Register`] carries the one of the session
//!   that made it. Another session refuses it ([`SessionError::ForeignRegister`]) before
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
//!   registers in place (see `direct`). Elsewhere (QEMU; integer allreduces, which go
//!   through host arrays) whole arrays move beside one request where the link allows, else
//!   in framed chunks.
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

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use tessera_core::dtype::DataType;
use tessera_core::wire::{Arg, Array, ErrorCode, Request, Value, ValueKind, MAX_CALL_ARGS};

pub use crate::array::{byte_len, ArrayError, ArrayView, ArrayViewMut, HostArray, HostValue};
pub use claims::BadDescription;
pub use error::{Command, SessionError, WorkerFailure};
pub use value::CallArg;

use state::{alloc_request, State};

use crate::placement::{self, Placement};
use crate::transport::group::Group;
use crate::transport::{Channel, TransportError};

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

/// A register on the workers. Dropping it frees its id on every worker.
#[derive(Debug)]
pub struct Register {
    id: u16,
    /// The identity of the session that made it ([`Session::id`]).
    session: u64,
    state: Weak<Mutex<State>>,
}

impl Register {
    /// The register's id (the same on every worker).
    pub fn id(&self) -> u16 {
        self.id
    }

    /// The identity of the session it belongs to ([`Session::id`]).
    pub fn session(&self) -> u64 {
        self.session
    }
}

impl Drop for Register {
    fn drop(&mut self) {
        let Some(state) = self.state.upgrade() else {
            return;
        };
        let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.shut_down {
            return;
        }
        if let Err(e) = state.free(self.id) {
            tracing::warn!(register = self.id, error = %e, "cannot free a register");
        }
    }
}

/// A function the workers of one session have, checked by [`Session::get_function`]:
/// valid in that session only, as its registers are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    name: String,
    /// The session that checked it.
    session: u64,
}

impl Function {
    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The identity of the session whose workers have it ([`Session::id`]).
    pub fn session(&self) -> u64 {
        self.session
    }
}

/// A controller and its workers. See the module documentation.
#[derive(Debug)]
pub struct Session {
    /// This session's identity, which its registers carry.
    id: u64,
    state: Arc<Mutex<State>>,
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
                shut_down: false,
                #[cfg(feature = "mpi")]
                finalize,
            })),
        })
    }

    fn lock(&self) -> Result<MutexGuard<'_, State>, SessionError> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.shut_down {
            return Err(SessionError::ShutDown);
        }
        Ok(state)
    }

    fn handle(&self, id: u16) -> Register {
        Register {
            id,
            session: self.id,
            state: Arc::downgrade(&self.state),
        }
    }

    /// This session's identity: unique among the sessions of this process, carried by
    /// every register it makes.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// `register`'s id, if it is one of this session's registers (checked before anything
    /// is sent: another session's id names an unrelated value here).
    fn own(&self, register: &Register) -> Result<u16, SessionError> {
        if register.session == self.id {
            Ok(register.id)
        } else {
            Err(SessionError::ForeignRegister {
                register: register.id,
                owner: register.session,
                session: self.id,
            })
        }
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

    /// The function `name`, once every worker confirms it has one (else an error, and
    /// nothing runs).
    pub fn get_function(&self, name: &str) -> Result<Function, SessionError> {
        let mut state = self.lock()?;
        let request = Request::HasFunction { function: name };
        let seqs = state.submit_everywhere(&request)?;
        // Every reply is claimed, so none is left behind; the first failure is the answer.
        let mut first = Ok(());
        for (worker, seq) in seqs.into_iter().enumerate() {
            let failure = match state.workers[worker].receive(seq) {
                Ok(_) => continue,
                Err(TransportError::Device {
                    code: ErrorCode::UnknownFunction,
                    ..
                }) => SessionError::UnknownFunction {
                    name: name.into(),
                    worker,
                },
                Err(e) => e.into(),
            };
            if first.is_ok() {
                first = Err(failure);
            }
        }
        first.map(|()| Function {
            name: name.into(),
            session: self.id,
        })
    }

    /// Calls `function` on every worker with `args` (a register argument is each worker's
    /// own value); the result goes into a new register. Returns once the call is sent:
    /// failures come back at the next sync. A function that returns nothing (one that
    /// changes an argument in place) leaves the new register without a value: reading it
    /// is [`SessionError::NoValue`], naming the function. A function handle of another
    /// session is refused ([`SessionError::ForeignFunction`]) before anything is sent.
    pub fn call(
        &self,
        function: &Function,
        args: &[CallArg<'_>],
    ) -> Result<Register, SessionError> {
        if function.session != self.id {
            return Err(SessionError::ForeignFunction {
                name: function.name.clone(),
                owner: function.session,
                session: self.id,
            });
        }
        // Checked before the result register is made: dropping that one would send frees.
        for arg in args {
            if let CallArg::Register(register) = arg {
                self.own(register)?;
            }
        }
        // Made first, so that an early return frees the id on every worker that got it.
        let register = self.new_register()?;
        let mut state = self.lock()?;
        let max = state.max_chunk();
        let mut wire_args: heapless::Vec<Arg<'_>, MAX_CALL_ARGS> = heapless::Vec::new();
        for arg in args {
            let arg = match *arg {
                CallArg::Int(v) => Arg::Value(Value::Int(v)),
                CallArg::Float(v) => Arg::Value(Value::Float(v)),
                CallArg::Str(text) => Arg::Value(Value::Str(text)),
                CallArg::Shape(dims) => Arg::Value(Value::Shape(
                    heapless::Vec::from_slice(dims)
                        .map_err(|_| ArrayError::Rank { rank: dims.len() })?,
                )),
                CallArg::Array(array) => {
                    if array.bytes().len() > max {
                        return Err(SessionError::InlineTooLarge {
                            bytes: array.bytes().len(),
                            max,
                        });
                    }
                    Arg::Value(Value::Array(wire_array(array)?))
                }
                CallArg::Register(register) => Arg::Register(self.own(register)?),
            };
            wire_args.push(arg).map_err(|_| SessionError::Count {
                what: "call arguments",
                expected: MAX_CALL_ARGS,
                actual: args.len(),
            })?;
        }
        let request = Request::Invoke {
            function: &function.name,
            args: wire_args,
            out: register.id,
        };
        for worker in 0..state.workers.len() {
            state.submit(worker, &request, Command::Call(function.name.clone()))?;
        }
        state.called.insert(register.id, function.name.clone());
        Ok(register)
    }

    /// A handle on a fresh register id (nothing is sent).
    fn new_register(&self) -> Result<Register, SessionError> {
        let id = self.lock()?.allocate_id()?;
        Ok(self.handle(id))
    }

    /// A new register holding a zeroed array of `dtype` and `shape` on every worker: the
    /// destination of a collective.
    pub fn empty(&self, dtype: DataType, shape: &[u32]) -> Result<Register, SessionError> {
        byte_len(dtype, shape)?;
        let register = self.new_register()?;
        let mut state = self.lock()?;
        let id = register.id;
        let request = alloc_request(id, dtype, shape)?;
        for worker in 0..state.workers.len() {
            state.submit(worker, &request, Command::Alloc(id))?;
        }
        Ok(register)
    }

    /// Copies `array` (a [`HostArray`], or an [`ArrayView`] of bytes borrowed from their
    /// owner) from the host into a new register: worker 0 holds `array`, every other worker
    /// a zeroed array of the same type and shape (so a call on the register runs
    /// everywhere, as in Disco, where the register exists on every worker).
    pub fn copy_to_worker0<'a>(
        &self,
        array: impl Into<ArrayView<'a>>,
    ) -> Result<Register, SessionError> {
        let array = array.into();
        let register = self.new_register()?;
        let mut state = self.lock()?;
        let id = register.id;
        let zeroed = alloc_request(id, array.dtype(), array.shape())?;
        for worker in 1..state.workers.len() {
            state.submit(worker, &zeroed, Command::Alloc(id))?;
        }
        state.write_host_array(0, id, array)?;
        Ok(register)
    }

    /// Copies `array` from the host into `dst` on worker 0, as Disco's destination-passing
    /// copy does: in place when `dst` already holds an array of its type and shape (nothing
    /// allocated or zeroed; in the worker's memory itself where the host maps it), else
    /// replacing what `dst` held. Failures are reported at the next sync, as for a call.
    pub fn copy_to_worker0_into<'a>(
        &self,
        array: impl Into<ArrayView<'a>>,
        dst: &Register,
    ) -> Result<(), SessionError> {
        let array = array.into();
        let id = self.own(dst)?;
        let mut state = self.lock()?;
        // Asked after worker 0's earlier commands, which it runs first.
        let held = match state.describe(0, id) {
            Ok(held) => Some(held),
            // An empty register, say: it is replaced.
            Err(
                SessionError::Transport(TransportError::Device { .. })
                | SessionError::NoValue { .. },
            ) => None,
            Err(e) => return Err(e),
        };
        let fits = held.as_ref().is_some_and(|held| {
            held.kind == ValueKind::Array
                && held.dtype == Some(array.dtype())
                && held.shape[..] == *array.shape()
        });
        if !fits {
            return state.write_host_array(0, id, array);
        }
        state.overwrite_array(0, id, array)
    }

    /// Copies `register`'s array from worker 0 to the host (after worker 0's earlier
    /// commands: their failures are reported first).
    pub fn copy_from_worker0(&self, register: &Register) -> Result<HostArray, SessionError> {
        let id = self.own(register)?;
        let mut state = self.lock()?;
        state.sync(0)?;
        on_worker(0, Command::Read(id), state.read_array(0, id))
    }

    /// The element type and shape of `register`'s array on worker 0 (after worker 0's
    /// earlier commands: their failures are reported first): the room a copy from worker 0
    /// needs, for a caller that makes it itself (a NumPy array, say).
    pub fn array_on_worker0(
        &self,
        register: &Register,
    ) -> Result<(DataType, Vec<u32>), SessionError> {
        let id = self.own(register)?;
        let mut state = self.lock()?;
        state.sync(0)?;
        let held = on_worker(0, Command::Read(id), state.array_of(0, id))?;
        Ok((held.0, held.1))
    }

    /// Copies `register`'s array from worker 0 into `into`, as Disco's destination-passing
    /// copy does: `into` must have the register's element type and element count (it takes
    /// on its shape), and its bytes are overwritten in place (copied first only if another
    /// array shares them). Worker 0's earlier failures are reported first.
    pub fn copy_from_worker0_into(
        &self,
        register: &Register,
        into: &mut HostArray,
    ) -> Result<(), SessionError> {
        let dtype = into.dtype();
        let shape =
            self.copy_from_worker0_to(register, ArrayViewMut::new(dtype, into.bytes_mut())?)?;
        Ok(into.set_shape(&shape)?)
    }

    /// Copies `register`'s array from worker 0 into bytes borrowed from their owner (a
    /// NumPy array, say), which must have room for exactly the register's elements, of its
    /// type; returns the register's shape (the owner keeps its own). Worker 0's earlier
    /// failures are reported first.
    pub fn copy_from_worker0_to(
        &self,
        register: &Register,
        into: ArrayViewMut<'_>,
    ) -> Result<Vec<u32>, SessionError> {
        let id = self.own(register)?;
        let mut state = self.lock()?;
        state.sync(0)?;
        on_worker(0, Command::Read(id), state.read_array_into(0, id, into))
    }

    /// Waits for worker `worker` to finish every command sent to it; every failure among
    /// the commands this thread sent is the error (see the module doc).
    pub fn sync_worker(&self, worker: usize) -> Result<(), SessionError> {
        let mut state = self.lock()?;
        state.check_worker(worker)?;
        state.sync(worker)
    }

    /// Waits for every worker; every failure among the commands this thread sent is the
    /// error, worker by worker (see the module doc).
    pub fn sync_all(&self) -> Result<(), SessionError> {
        let mut state = self.lock()?;
        let workers = state.workers.len();
        state.sync_each(0..workers)
    }

    /// [`sync_all`](Self::sync_all) for at most `wait`: `Ok(true)` when every worker
    /// answered (its failures are the error, as `sync_all`'s), `Ok(false)` when one had not
    /// yet — nothing is lost: the commands still running stay pending in order, and the
    /// failures already claimed are reported by this thread's next sync. For a caller that
    /// must look up between waits (a Python program polling for Ctrl-C).
    pub fn sync_all_for(&self, wait: Duration) -> Result<bool, SessionError> {
        let until = Instant::now() + wait;
        let mut state = self.lock()?;
        let workers = state.workers.len();
        state.sync_each_until(0..workers, until)
    }

    /// [`sync_worker`](Self::sync_worker) for at most `wait`, as
    /// [`sync_all_for`](Self::sync_all_for) is.
    pub fn sync_worker_for(&self, worker: usize, wait: Duration) -> Result<bool, SessionError> {
        let until = Instant::now() + wait;
        let mut state = self.lock()?;
        state.check_worker(worker)?;
        state.sync_each_until([worker], until)
    }

    /// Register `register`'s value on worker `worker` (after its earlier commands).
    pub fn debug_get(&self, register: &Register, worker: usize) -> Result<HostValue, SessionError> {
        let id = self.own(register)?;
        let mut state = self.lock()?;
        state.check_worker(worker)?;
        state.sync(worker)?;
        on_worker(worker, Command::Read(id), state.read_value(worker, id))
    }

    /// Sets register `register` on worker `worker` to `value`.
    pub fn debug_set(
        &self,
        register: &Register,
        worker: usize,
        value: &HostValue,
    ) -> Result<(), SessionError> {
        let id = self.own(register)?;
        let mut state = self.lock()?;
        state.check_worker(worker)?;
        let set = match value {
            HostValue::Array(array) => state.write_host_array(worker, id, array.into()),
            HostValue::Int(v) => state.set_value(worker, id, Value::Int(*v)),
            HostValue::Float(v) => state.set_value(worker, id, Value::Float(*v)),
            HostValue::Str(text) => state.set_value(worker, id, Value::Str(text)),
            HostValue::Shape(dims) => {
                let dims = heapless::Vec::from_slice(dims)
                    .map_err(|_| ArrayError::Rank { rank: dims.len() })?;
                state.set_value(worker, id, Value::Shape(dims))
            }
        };
        on_worker(worker, Command::Set(id), set)
    }

    /// Changes how long every worker's oldest unanswered command may take before it is
    /// sent again. A worker silent through every attempt is then reported as what it is:
    /// busy (waited for, up to the busy deadline), stopped, ended, or timed out.
    pub fn set_deadline(&self, deadline: Duration) -> Result<(), SessionError> {
        let mut state = self.lock()?;
        for worker in &mut state.workers {
            worker.set_deadline(deadline);
        }
        Ok(())
    }

    /// Changes how long a worker that is busy with one command (a long kernel: its
    /// device works, it is not dead) may work on it before the command fails as busy
    /// ([`TransportError::Busy`]); [`BUSY_DEADLINE`](crate::transport::BUSY_DEADLINE) by
    /// default.
    pub fn set_busy_deadline(&self, deadline: Duration) -> Result<(), SessionError> {
        let mut state = self.lock()?;
        for worker in &mut state.workers {
            worker.set_busy_deadline(deadline);
        }
        Ok(())
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

/// A host array as a wire value (borrowing its bytes).
fn wire_array(array: &HostArray) -> Result<Array<'_>, SessionError> {
    Ok(Array {
        dtype: array.dtype(),
        shape: heapless::Vec::from_slice(array.shape()).map_err(|_| ArrayError::Rank {
            rank: array.shape().len(),
        })?,
        data: array.bytes(),
    })
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
