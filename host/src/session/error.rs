//! Why a session command failed: one case per rule or failure, naming the worker, the
//! command and the sizes involved.

use std::fmt;

use tessera_core::dtype::DataType;
use tessera_core::wire::ValueKind;

use super::claims::BadDescription;
use crate::array::ArrayError;
use crate::combine::CombineError;
use crate::transport::TransportError;

/// A command sent to the workers, as errors name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// A call of the named function.
    Call(String),
    /// Freeing a register.
    Free(u16),
    /// Setting a register (a copy to a worker, a collective's result, a debug set).
    Set(u16),
    /// Making a register an empty array.
    Alloc(u16),
    /// A collective (its name), run on the host between the workers' registers.
    Collective(&'static str),
    /// Reading a register (a copy from worker 0, a debug get).
    Read(u16),
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Call(name) => write!(f, "the call of {name:?}"),
            Self::Free(id) => write!(f, "freeing register {id}"),
            Self::Set(id) => write!(f, "setting register {id}"),
            Self::Alloc(id) => write!(f, "allocating register {id}"),
            Self::Collective(operation) => write!(f, "the {operation}"),
            Self::Read(id) => write!(f, "reading register {id}"),
        }
    }
}

/// One command that failed on one worker.
#[derive(Debug, thiserror::Error)]
#[error("worker {worker}: {command} failed: {source}")]
pub struct WorkerFailure {
    /// The worker.
    pub worker: usize,
    /// The command.
    pub command: Command,
    /// Why.
    pub source: TransportError,
}

/// Two or more commands that failed, worker by worker in the order they were sent: what
/// [`SessionError::Failures`] reports. Its source is the first failure.
#[derive(Debug, thiserror::Error)]
#[error("{} commands failed{}", 1 + .rest.len(), Each(self))]
pub struct WorkerFailures {
    /// The first failure.
    #[source]
    first: WorkerFailure,
    /// The others (one at least).
    rest: Vec<WorkerFailure>,
}

impl WorkerFailures {
    /// Every failure, in the order reported.
    pub fn iter(&self) -> impl Iterator<Item = &WorkerFailure> {
        std::iter::once(&self.first).chain(&self.rest)
    }
}

impl<'a> IntoIterator for &'a WorkerFailures {
    type Item = &'a WorkerFailure;
    type IntoIter =
        std::iter::Chain<std::iter::Once<&'a WorkerFailure>, std::slice::Iter<'a, WorkerFailure>>;

    fn into_iter(self) -> Self::IntoIter {
        std::iter::once(&self.first).chain(&self.rest)
    }
}

/// [`WorkerFailures`]' list: `; ` before each failure.
struct Each<'a>(&'a WorkerFailures);

impl fmt::Display for Each<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0
            .iter()
            .try_for_each(|failure| write!(f, "; {failure}"))
    }
}

/// Why a session command failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// Starting or reaching a worker failed.
    #[error("{0}")]
    Transport(#[from] TransportError),
    /// The host could not allocate a buffer for a command's bytes.
    #[error("{0} for a command's bytes; nothing was read")]
    HostMemory(crate::pages::OutOfMemory),
    /// A session of no workers, or of more than it may have ([`MAX_WORKERS`]).
    ///
    /// [`MAX_WORKERS`]: super::MAX_WORKERS
    #[error("a session has 1 to {max} workers, not {workers}; nothing was started")]
    Workers {
        /// Workers asked for.
        workers: usize,
        /// The most a session has.
        max: usize,
    },
    /// The groups do not divide the workers.
    #[error("{groups} groups do not divide {workers} workers: groups are equal contiguous blocks")]
    Groups {
        /// Workers.
        workers: usize,
        /// Groups asked for.
        groups: usize,
    },
    /// A function no worker (or not every worker) has; nothing was run.
    #[error("worker {worker} has no function {name:?}; nothing was run")]
    UnknownFunction {
        /// Its name.
        name: String,
        /// The first worker without it.
        worker: usize,
    },
    /// A command failed on a worker (reported at the next sync).
    #[error("worker {worker}: {command} failed: {source}")]
    Worker {
        /// The worker.
        worker: usize,
        /// The command.
        command: Command,
        /// Why.
        source: TransportError,
    },
    /// Several commands failed (reported by one sync: every one of them, worker by
    /// worker, in the order they were sent). One failure alone is [`Self::Worker`].
    #[error(transparent)]
    Failures(Box<WorkerFailures>),
    /// The session was shut down.
    #[error("the session was shut down")]
    ShutDown,
    /// No worker with that index.
    #[error("no worker {worker}: the session has {workers}")]
    NoWorker {
        /// The index given.
        worker: usize,
        /// Workers there are.
        workers: usize,
    },
    /// Every register a worker can hold is in use: a new one is refused where it is asked
    /// for, before anything is sent.
    #[error(
        "all {capacity} registers a worker holds are in use: drop some registers before making \
         another"
    )]
    RegistersExhausted {
        /// Registers a worker holds ([`MAX_REGISTERS`](super::MAX_REGISTERS)).
        capacity: usize,
    },
    /// A register of another session: its id names an unrelated value in this one, so
    /// nothing was sent.
    #[error(
        "register {register} belongs to session {owner}, not to session {session}: a register \
         is only valid in the session that made it; nothing was sent"
    )]
    ForeignRegister {
        /// The register's id.
        register: u16,
        /// The session it belongs to.
        owner: u64,
        /// The session it was handed to.
        session: u64,
    },
    /// A function handle used in another session than the one that checked it; nothing
    /// was sent.
    #[error(
        "function {name:?} was looked up in session {owner}, not in session {session}: look it \
         up in this session; nothing was sent"
    )]
    ForeignFunction {
        /// The function's name.
        name: String,
        /// The session it belongs to.
        owner: u64,
        /// The session it was handed to.
        session: u64,
    },
    /// A register that holds no value on a worker: the call that made it returned nothing
    /// (a function that changes an argument in place), or it was never written.
    #[error(fmt = describe_no_value)]
    NoValue {
        /// The worker.
        worker: usize,
        /// The register.
        register: u16,
        /// The function whose call made it, if a call did.
        function: Option<String>,
    },
    /// A register that must hold an array holds something else.
    #[error("register {register} on worker {worker} holds a {kind:?}, not an array")]
    NotAnArray {
        /// The worker.
        worker: usize,
        /// The register.
        register: u16,
        /// What it holds.
        kind: ValueKind,
    },
    /// A list of the wrong length (call arguments, one array per worker).
    #[error("{actual} {what} given, {expected} expected")]
    Count {
        /// What is counted.
        what: &'static str,
        /// The most (or the exact number) allowed.
        expected: usize,
        /// How many were given.
        actual: usize,
    },
    /// An array's element count does not fit the operation.
    #[error("{operation}: worker {worker}'s array has {actual} elements, {expected} expected")]
    Elements {
        /// The operation.
        operation: &'static str,
        /// The worker whose array does not fit.
        worker: usize,
        /// Elements expected.
        expected: usize,
        /// Elements found.
        actual: usize,
    },
    /// Arrays of different element types meet in one operation.
    #[error("{operation}: worker {worker}'s array is {actual}, worker 0's {expected}")]
    DtypeMismatch {
        /// The operation.
        operation: &'static str,
        /// The worker whose array differs.
        worker: usize,
        /// The first worker's type.
        expected: DataType,
        /// This one's.
        actual: DataType,
    },
    /// An element type the operation does not support.
    #[error("{operation} does not support {dtype} arrays")]
    Dtype {
        /// The operation.
        operation: &'static str,
        /// The type.
        dtype: DataType,
    },
    /// An element count that does not split into equal parts.
    #[error("{operation}: {elements} elements do not split into {parts} equal parts")]
    Indivisible {
        /// The operation.
        operation: &'static str,
        /// Elements.
        elements: usize,
        /// Parts.
        parts: usize,
    },
    /// A send to the next group from the last group.
    #[error("group {group} is the last of {groups}: it has no next group to send to")]
    NoNextGroup {
        /// The group.
        group: usize,
        /// Groups there are.
        groups: usize,
    },
    /// An integer result that does not fit its type.
    #[error("{operation}: an integer result does not fit its type")]
    Overflow {
        /// The operation.
        operation: &'static str,
    },
    /// A host array that is not well formed.
    #[error("{0}")]
    Array(#[from] ArrayError),
    /// A worker described a register in a way no register on it can be (see
    /// [`claims`](super::claims)): nothing was allocated or read by it.
    #[error("{0}")]
    Description(#[from] BadDescription),
    /// A worker reported a register's bytes outside the memory the host shares with it.
    #[error(
        "worker {worker} places register {register}'s {bytes} bytes at {at}, outside its \
         {memory} bytes of memory"
    )]
    OutsideMemory {
        /// The worker.
        worker: usize,
        /// The register.
        register: u16,
        /// Where the worker said its bytes start.
        at: usize,
        /// Their length.
        bytes: usize,
        /// The memory's size.
        memory: usize,
    },
    /// A host array that does not match the register it is copied from or into.
    #[error(
        "{operation}: register {register} holds {} {} elements, the host array {} {}: type and \
         element count must match",
        .held.1,
        .held.0,
        .host.1,
        .host.0
    )]
    HostMismatch {
        /// The operation.
        operation: &'static str,
        /// The register.
        register: u16,
        /// The register's element type and element count.
        held: (DataType, usize),
        /// The host array's.
        host: (DataType, usize),
    },
    /// Under `mpirun`, the ranks do not divide the workers (each rank hosts as many).
    #[error("{ranks} MPI ranks do not divide {workers} workers: every rank hosts as many workers")]
    Ranks {
        /// Workers asked for.
        workers: usize,
        /// Ranks of the job.
        ranks: usize,
    },
    /// Setting up the session across MPI ranks failed.
    #[error("the session across MPI ranks: {0}")]
    Instances(#[from] crate::instance::InstanceError),
    /// Moving a collective's bytes between the workers failed otherwise than on one
    /// worker's link: a rank of a session across MPI ranks that failed its part or did not
    /// answer, a device that placed bytes outside its memory.
    #[error("the {operation}: {source}")]
    Group {
        /// The operation.
        operation: &'static str,
        /// What failed (boxed: the rare path).
        source: Box<crate::transport::group::GroupError>,
    },
    /// A host array too large to send with a call.
    #[error(
        "an array of {bytes} bytes does not fit a call ({max} bytes at most): copy it into a \
         register first"
    )]
    InlineTooLarge {
        /// Its bytes.
        bytes: usize,
        /// The most a call carries.
        max: usize,
    },
}

/// [`SessionError::NoValue`]'s message: why the register holds nothing, where a call made
/// it.
fn describe_no_value(
    worker: &usize,
    register: &u16,
    function: &Option<String>,
    f: &mut fmt::Formatter<'_>,
) -> fmt::Result {
    match function {
        Some(function) => write!(
            f,
            "register {register} holds no value on worker {worker}: the call of {function:?} \
             that made it returned nothing (a function that works in place changes its \
             argument)"
        ),
        None => write!(f, "register {register} holds no value on worker {worker}"),
    }
}

impl SessionError {
    /// An allreduce's combination refused: `first` is the worker of the first input.
    pub(crate) fn combine(e: CombineError, first: usize) -> Self {
        const OPERATION: &str = "allreduce";
        match e {
            CombineError::Length {
                input,
                expected,
                actual,
            } => Self::Elements {
                operation: OPERATION,
                worker: first + input,
                expected,
                actual,
            },
            CombineError::Overflow => Self::Overflow {
                operation: OPERATION,
            },
            CombineError::Dtype(dtype) => Self::Dtype {
                operation: OPERATION,
                dtype,
            },
            // Runs the group made itself, not the caller's input.
            CombineError::Runs { .. } => Self::Group {
                operation: OPERATION,
                source: Box::new(crate::transport::group::GroupError::Combine(e)),
            },
        }
    }

    /// `Ok` for no failure, [`Self::Worker`] for one, [`Self::Failures`] for several.
    pub(super) fn of_failures(mut failures: Vec<WorkerFailure>) -> Result<(), Self> {
        match failures.len() {
            0 => Ok(()),
            1 => {
                let WorkerFailure {
                    worker,
                    command,
                    source,
                } = failures.remove(0);
                Err(Self::Worker {
                    worker,
                    command,
                    source,
                })
            }
            _ => {
                let first = failures.remove(0);
                Err(Self::Failures(Box::new(WorkerFailures {
                    first,
                    rest: failures,
                })))
            }
        }
    }

    /// Every command this error reports failed, as (worker, command, why): one for
    /// [`Self::Worker`], each of [`Self::Failures`], none for the other cases.
    pub fn worker_failures(&self) -> Vec<(usize, &Command, &TransportError)> {
        match self {
            Self::Worker {
                worker,
                command,
                source,
            } => vec![(*worker, command, source)],
            Self::Failures(failures) => failures
                .iter()
                .map(|f| (f.worker, &f.command, &f.source))
                .collect(),
            _ => Vec::new(),
        }
    }
}

impl From<crate::pages::OutOfMemory> for SessionError {
    fn from(e: crate::pages::OutOfMemory) -> Self {
        Self::HostMemory(e)
    }
}
