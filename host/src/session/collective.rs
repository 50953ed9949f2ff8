//! Collectives across a session's workers, destination-passing: each reads a source
//! register on the workers it concerns and writes the result into a destination register
//! the caller allocated (e.g. with [`Session::empty`]).
//!
//! # Rules
//!
//! - [`Scope::Global`] runs one collective over all workers; [`Scope::InGroup`] runs it
//!   independently in each contiguous group, whose leader is its first worker.
//! - allreduce: element-wise sum, product, min, max or average (integers: the sum divided
//!   and truncated) of the members' arrays, to every member; f32, f64, i32 and i64.
//! - allgather: the members' arrays concatenated flat in rank order, to every member.
//! - broadcast: the leader's array to every member.
//! - scatter: the leader's array split by flat element count into as many equal parts as
//!   there are members (it must divide); member i gets part i.
//! - gather: the members' arrays concatenated in rank order, to the leader.
//! - send to a worker, send to the next group: a worker's (or each worker of a group's)
//!   array to another worker (to the worker of the same rank in the next group).
//!
//! The result takes the destination's shape, whose element count must match. Both
//! registers must be the session's own (checked before anything else). Every worker is
//! synced first (earlier failures are reported, not run past), and every size and type
//! is checked before the first result is written.

use std::ops::Range;

use tessera_core::dtype::DataType;
use tessera_core::wire::endpoint::{DescribeRegister, Description};
use tessera_core::wire::ValueKind;

#[cfg(feature = "mpi")]
use super::ranks::Kind;
use super::{Command, Register, Session, SessionError, State, WorkerFailure};
use crate::array::HostArray;
use crate::combine;
use crate::transport::TransportError;

/// Which workers one collective spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// All workers together.
    Global,
    /// Each group on its own.
    InGroup,
}

pub use tessera_core::wire::ReduceOp;

/// One result to write, and the worker it goes to.
type Output = (usize, Fitted);

/// A result ready to write into register `dst`.
struct Fitted {
    /// The result, in the destination's shape.
    array: HostArray,
    /// The destination register.
    dst: u16,
    /// How it gets there.
    write: Write,
}

/// How a result reaches its register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Write {
    /// The register is not an array yet (a tensor register): the array is made anew.
    Anew,
    /// The register is an array of the result's type and shape: overwritten in place.
    Overwrite,
}

impl Session {
    /// Allreduce of `src` into `dst` on every worker of each group.
    pub fn allreduce(
        &self,
        src: &Register,
        dst: &Register,
        op: ReduceOp,
        scope: Scope,
    ) -> Result<(), SessionError> {
        let (src, dst) = (self.own(src)?, self.own(dst)?);
        #[cfg(feature = "mpi")]
        if self.by_mpi(scope, Kind::Allreduce(op), src, dst)? {
            return Ok(());
        }
        // In place in the workers' memory where every group can be (see `direct`).
        let mut in_place = true;
        self.collective_in(scope, "allreduce", |state, groups| {
            let mut plans = Vec::with_capacity(groups.len());
            for group in groups {
                match state.plan_in_place(group.clone(), src, dst)? {
                    Some(plan) => plans.push(plan),
                    None => {
                        in_place = false;
                        break;
                    }
                }
            }
            if in_place {
                for plan in &plans {
                    state.run_in_place(plan, op)?;
                }
                // Nothing was sent: only a round trip tells a worker lost meanwhile (its
                // memory stays mapped) from one that is there to use the result.
                let workers = state.workers.len();
                state.confirm(0..workers, dst, "allreduce")?;
            }
            Ok(Vec::new())
        })?;
        if in_place {
            return Ok(());
        }
        self.to_every_member(scope, dst, "allreduce", |state, group| {
            let arrays = state.read_all(group.clone(), src)?;
            reduce(&arrays, op, group.start)
        })
    }

    /// Allgather of `src` into `dst`: the group's arrays concatenated in rank order.
    pub fn allgather(
        &self,
        src: &Register,
        dst: &Register,
        scope: Scope,
    ) -> Result<(), SessionError> {
        let (src, dst) = (self.own(src)?, self.own(dst)?);
        #[cfg(feature = "mpi")]
        if self.by_mpi(scope, Kind::Allgather, src, dst)? {
            return Ok(());
        }
        self.to_every_member(scope, dst, "allgather", |state, group| {
            let arrays = state.read_all(group.clone(), src)?;
            concat(&arrays, "allgather", group.start)
        })
    }

    /// Broadcast of the leader's `src` into every member's `dst`.
    pub fn broadcast_from_worker0(
        &self,
        src: &Register,
        dst: &Register,
        scope: Scope,
    ) -> Result<(), SessionError> {
        let (src, dst) = (self.own(src)?, self.own(dst)?);
        #[cfg(feature = "mpi")]
        if self.by_mpi(scope, Kind::Broadcast, src, dst)? {
            return Ok(());
        }
        self.to_every_member(scope, dst, "broadcast", |state, group| {
            state.read_array(group.start, src)
        })
    }

    /// Scatter of the leader's `src` by flat element count into the members' `dst`.
    pub fn scatter_from_worker0(
        &self,
        src: &Register,
        dst: &Register,
        scope: Scope,
    ) -> Result<(), SessionError> {
        let (src, dst) = (self.own(src)?, self.own(dst)?);
        #[cfg(feature = "mpi")]
        if self.by_mpi(scope, Kind::Scatter, src, dst)? {
            return Ok(());
        }
        self.collective_in(scope, "scatter", |state, groups| {
            let mut out = Vec::new();
            for group in groups.iter().cloned() {
                let array = state.read_array(group.start, src)?;
                let parts = group.len();
                if array.elements() % parts != 0 {
                    return Err(SessionError::Indivisible {
                        operation: "scatter",
                        elements: array.elements(),
                        parts,
                    });
                }
                let part_bytes = array.bytes().len() / parts;
                for (rank, worker) in group.enumerate() {
                    let bytes = array.bytes()[rank * part_bytes..][..part_bytes].to_vec();
                    let elements = array.elements() / parts;
                    let part = HostArray::new(array.dtype(), &[elements as u32], bytes)?;
                    out.push((worker, state.fit(worker, dst, "scatter", &part)?));
                }
            }
            Ok(out)
        })
    }

    /// Gather of the members' `src` into the leader's `dst`, in rank order.
    pub fn gather_to_worker0(
        &self,
        src: &Register,
        dst: &Register,
        scope: Scope,
    ) -> Result<(), SessionError> {
        let (src, dst) = (self.own(src)?, self.own(dst)?);
        #[cfg(feature = "mpi")]
        if self.by_mpi(scope, Kind::Gather, src, dst)? {
            return Ok(());
        }
        self.collective_in(scope, "gather", |state, groups| {
            let mut out = Vec::new();
            for group in groups.iter().cloned() {
                let arrays = state.read_all(group.clone(), src)?;
                let joined = concat(&arrays, "gather", group.start)?;
                out.push((group.start, state.fit(group.start, dst, "gather", &joined)?));
            }
            Ok(out)
        })
    }

    /// Worker `from`'s `src` into worker `to`'s `dst`.
    pub fn send_to_worker(
        &self,
        src: &Register,
        from: usize,
        to: usize,
        dst: &Register,
    ) -> Result<(), SessionError> {
        let (src, dst) = (self.own(src)?, self.own(dst)?);
        #[cfg(feature = "mpi")]
        if self.by_moves(Scope::Global, "send", src, dst, |state, _| {
            state.check_worker(from)?;
            state.check_worker(to)?;
            Ok(vec![(from, to)])
        })? {
            return Ok(());
        }
        self.collective_in(Scope::Global, "send", |state, _| {
            state.check_worker(from)?;
            state.check_worker(to)?;
            let array = state.read_array(from, src)?;
            Ok(vec![(to, state.fit(to, dst, "send", &array)?)])
        })
    }

    /// Each worker of group `group` sends its `src` to the worker of the same rank in the
    /// next group, into its `dst`. The last group has no next group: an error.
    pub fn send_to_next_group(
        &self,
        src: &Register,
        dst: &Register,
        group: usize,
    ) -> Result<(), SessionError> {
        let (src, dst) = (self.own(src)?, self.own(dst)?);
        #[cfg(feature = "mpi")]
        if self.by_moves(
            Scope::InGroup,
            "send to next group",
            src,
            dst,
            |_, groups| {
                let count = groups.len();
                if group.checked_add(1).is_none_or(|next| next >= count) {
                    return Err(SessionError::NoNextGroup {
                        group,
                        groups: count,
                    });
                }
                Ok(groups[group]
                    .clone()
                    .zip(groups[group + 1].clone())
                    .collect())
            },
        )? {
            return Ok(());
        }
        self.collective_in(Scope::InGroup, "send to next group", |state, groups| {
            let count = groups.len();
            if group.checked_add(1).is_none_or(|next| next >= count) {
                return Err(SessionError::NoNextGroup {
                    group,
                    groups: count,
                });
            }
            let (senders, receivers) = (groups[group].clone(), groups[group + 1].clone());
            let mut out = Vec::new();
            for (from, to) in senders.zip(receivers) {
                let array = state.read_array(from, src)?;
                out.push((to, state.fit(to, dst, "send to next group", &array)?));
            }
            Ok(out)
        })
    }

    /// Collective `kind` of `src` into `dst` across MPI ranks, its data moving between the
    /// ranks by MPI (see `ranks`), if the session spans ranks and it can run so; `false`
    /// when the data must go through rank 0 instead (nothing was sent).
    #[cfg(feature = "mpi")]
    fn by_mpi(&self, scope: Scope, kind: Kind, src: u16, dst: u16) -> Result<bool, SessionError> {
        self.by_ranks(scope, kind.operation(), dst, |state, groups| {
            // Groups on one rank each run there; groups of whole ranks, and all the workers,
            // across their ranks.
            let size = groups.first().map_or(0, Range::len);
            Ok(state.collective_in_groups(kind, src, dst, size)?
                || state.collective_across(kind, src, dst, size)?)
        })
    }

    /// Sends from worker to worker (`pairs`: given the workers' groups under `scope`, each
    /// sender and its receiver) across MPI ranks, straight from rank to rank (see `ranks`),
    /// if the session spans ranks and they can run so; `false` when the data must go
    /// through rank 0 instead (nothing was sent).
    #[cfg(feature = "mpi")]
    fn by_moves(
        &self,
        scope: Scope,
        operation: &'static str,
        src: u16,
        dst: u16,
        pairs: impl FnOnce(&State, &[Range<usize>]) -> Result<Vec<(usize, usize)>, SessionError>,
    ) -> Result<bool, SessionError> {
        self.by_ranks(scope, operation, dst, |state, groups| {
            let pairs = pairs(state, groups)?;
            state.moves_across(&pairs, src, dst, operation)
        })
    }

    /// `run` (which says whether it ran the operation across the ranks) on the synced
    /// workers of a session that spans MPI ranks; `false` on any other session, where
    /// nothing is synced or sent. Once it ran, one round trip to every worker confirms
    /// `dst`: nothing was sent to a worker, and only a round trip tells a worker lost
    /// meanwhile from one that is there to use the result.
    #[cfg(feature = "mpi")]
    fn by_ranks(
        &self,
        scope: Scope,
        operation: &'static str,
        dst: u16,
        run: impl FnOnce(&mut State, &[Range<usize>]) -> Result<bool, SessionError>,
    ) -> Result<bool, SessionError> {
        if self.lock()?.across.is_none() {
            return Ok(false);
        }
        let mut done = false;
        self.collective_in(scope, operation, |state, groups| {
            done = run(state, groups)?;
            if done {
                let workers = state.workers.len();
                state.confirm(0..workers, dst, operation)?;
            }
            Ok(Vec::new())
        })?;
        Ok(done)
    }

    /// One result per group (`compute`), written into `dst` on every member of the group.
    fn to_every_member(
        &self,
        scope: Scope,
        dst: u16,
        operation: &'static str,
        mut compute: impl FnMut(&mut State, Range<usize>) -> Result<HostArray, SessionError>,
    ) -> Result<(), SessionError> {
        self.collective_in(scope, operation, |state, groups| {
            let mut out = Vec::new();
            for group in groups.iter().cloned() {
                let result = compute(state, group.clone())?;
                // Every member's destination described in one round trip.
                let targets = state.describe_all(group.clone(), dst)?;
                for (worker, target) in group.zip(targets) {
                    out.push((worker, fit(worker, dst, operation, &result, target)?));
                }
            }
            Ok(out)
        })
    }

    /// Syncs every worker, computes every result (`plan` reads and checks), then writes
    /// them all and waits for the writes. A worker whose link fails meanwhile fails this
    /// collective, named with it.
    fn collective_in(
        &self,
        scope: Scope,
        operation: &'static str,
        plan: impl FnOnce(&mut State, &[Range<usize>]) -> Result<Vec<Output>, SessionError>,
    ) -> Result<(), SessionError> {
        let mut state = self.lock()?;
        let workers = state.workers.len();
        // Earlier failures are theirs, reported (all of them) before anything runs.
        state.sync_each(0..workers)?;
        self.run_collective(&mut state, scope, plan)
            .map_err(|e| state.blame(e, operation))
    }

    fn run_collective(
        &self,
        state: &mut State,
        scope: Scope,
        plan: impl FnOnce(&mut State, &[Range<usize>]) -> Result<Vec<Output>, SessionError>,
    ) -> Result<(), SessionError> {
        let workers = state.workers.len();
        let size = match scope {
            Scope::Global => workers,
            Scope::InGroup => workers / state.num_groups.max(1),
        }
        .max(1);
        let groups: Vec<Range<usize>> = (0..workers)
            .step_by(size)
            .map(|start| start..start + size)
            .collect();
        let outputs = plan(state, &groups)?;
        let mut touched = Vec::new();
        for (worker, result) in &outputs {
            state.write_result(*worker, result)?;
            touched.push(*worker);
        }
        touched.dedup();
        state.sync_each(touched)
    }
}

impl State {
    /// `e` naming the worker and the collective, where it is a bare link failure of one of
    /// this session's workers (a read of a lost worker's register, say).
    fn blame(&self, e: SessionError, operation: &'static str) -> SessionError {
        let SessionError::Transport(source) = e else {
            return e;
        };
        let worker = replica_of(&source)
            .and_then(|replica| self.workers.iter().position(|w| w.replica() == replica));
        match worker {
            Some(worker) => SessionError::Worker {
                worker,
                command: Command::Collective(operation),
                source,
            },
            None => SessionError::Transport(source),
        }
    }

    /// One round trip to each of `workers` (all sent before any is awaited, describing
    /// register `id`): every worker that does not answer is a failure of `operation`.
    fn confirm(
        &mut self,
        workers: Range<usize>,
        id: u16,
        operation: &'static str,
    ) -> Result<(), SessionError> {
        let mut failures = Vec::new();
        let mut tickets = Vec::with_capacity(workers.len());
        for worker in workers {
            match self.workers[worker].submit_typed(&DescribeRegister { id }) {
                Ok(ticket) => tickets.push((worker, ticket)),
                Err(source) => failures.push((worker, source)),
            }
        }
        for (worker, ticket) in tickets {
            if let Err(source) = self.workers[worker].receive_typed(ticket) {
                failures.push((worker, source));
            }
        }
        failures.sort_by_key(|(worker, _)| *worker);
        SessionError::of_failures(
            failures
                .into_iter()
                .map(|(worker, source)| WorkerFailure {
                    worker,
                    command: Command::Collective(operation),
                    source,
                })
                .collect(),
        )
    }

    /// Register `id`'s array on every worker of `group` (pipelined across them).
    fn read_all(&mut self, group: Range<usize>, id: u16) -> Result<Vec<HostArray>, SessionError> {
        self.read_arrays(group, id)
    }

    /// `result` reshaped to register `dst`'s shape on `worker` (the element counts and
    /// types must match).
    fn fit(
        &mut self,
        worker: usize,
        dst: u16,
        operation: &'static str,
        result: &HostArray,
    ) -> Result<Fitted, SessionError> {
        let described = self.describe(worker, dst)?;
        fit(worker, dst, operation, result, described)
    }

    fn write_result(
        &mut self,
        worker: usize,
        Fitted { array, dst, write }: &Fitted,
    ) -> Result<(), SessionError> {
        match write {
            Write::Anew => self.write_host_array(worker, *dst, array.into()),
            Write::Overwrite => self.overwrite_array(worker, *dst, array.into()),
        }
    }
}

/// `result` reshaped to register `dst`'s shape on `worker`, `described` (the element
/// counts and types must match).
fn fit(
    worker: usize,
    dst: u16,
    operation: &'static str,
    result: &HostArray,
    described: Description,
) -> Result<Fitted, SessionError> {
    let dtype = described.dtype.unwrap_or(DataType::F32);
    if dtype != result.dtype() {
        return Err(SessionError::DtypeMismatch {
            operation,
            worker,
            expected: result.dtype(),
            actual: dtype,
        });
    }
    let elements = described.bytes as usize / dtype.size().max(1);
    if elements != result.elements() {
        return Err(SessionError::Elements {
            operation,
            worker,
            expected: elements,
            actual: result.elements(),
        });
    }
    if described.kind != ValueKind::Array {
        // A tensor register: it becomes an array of its shape.
        let shape = [elements as u32];
        return Ok(Fitted {
            array: result.reshaped(&shape)?,
            dst,
            write: Write::Anew,
        });
    }
    Ok(Fitted {
        array: result.reshaped(&described.shape)?,
        dst,
        write: Write::Overwrite,
    })
}

/// The arrays of workers `first..` concatenated, checking they share a type.
fn concat(
    arrays: &[HostArray],
    operation: &'static str,
    first: usize,
) -> Result<HostArray, SessionError> {
    let dtype = same_dtype(arrays, operation, first)?;
    let bytes = arrays.iter().fold(Vec::new(), |mut all, a| {
        all.extend_from_slice(a.bytes());
        all
    });
    let elements = bytes.len() / dtype.size().max(1);
    Ok(HostArray::new(dtype, &[elements as u32], bytes)?)
}

fn same_dtype(
    arrays: &[HostArray],
    operation: &'static str,
    first: usize,
) -> Result<DataType, SessionError> {
    let dtype = arrays.first().map_or(DataType::F32, HostArray::dtype);
    for (rank, array) in arrays.iter().enumerate() {
        if array.dtype() != dtype {
            return Err(SessionError::DtypeMismatch {
                operation,
                worker: first + rank,
                expected: dtype,
                actual: array.dtype(),
            });
        }
    }
    Ok(dtype)
}

/// The element-wise combination of `arrays` (workers `first..`).
fn reduce(arrays: &[HostArray], op: ReduceOp, first: usize) -> Result<HostArray, SessionError> {
    let dtype = same_dtype(arrays, "allreduce", first)?;
    let Some(head) = arrays.first() else {
        return Err(SessionError::Elements {
            operation: "allreduce",
            worker: first,
            expected: 1,
            actual: 0,
        });
    };
    for (rank, array) in arrays.iter().enumerate() {
        if array.elements() != head.elements() {
            return Err(SessionError::Elements {
                operation: "allreduce",
                worker: first + rank,
                expected: head.elements(),
                actual: array.elements(),
            });
        }
    }
    let views: Vec<&[u8]> = arrays.iter().map(HostArray::bytes).collect();
    let mut bytes = vec![0u8; head.bytes().len()];
    combine::combine(dtype, op, &views, &mut bytes).map_err(|e| SessionError::combine(e, first))?;
    Ok(HostArray::new(dtype, head.shape(), bytes)?)
}

/// The replica a link failure names, if any.
fn replica_of(e: &TransportError) -> Option<u32> {
    match *e {
        TransportError::Spawn { replica, .. }
        | TransportError::Closed { replica }
        | TransportError::Exited { replica, .. }
        | TransportError::Timeout { replica, .. }
        | TransportError::Device { replica, .. }
        | TransportError::Version { replica, .. }
        | TransportError::UnexpectedReply { replica, .. }
        | TransportError::NotInFlight { replica, .. }
        | TransportError::TooLarge { replica, .. } => Some(replica),
        _ => None,
    }
}
