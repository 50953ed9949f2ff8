//! Collectives across a session's workers, destination-passing: each reads a source
//! register on the workers it concerns and writes the result into a destination register
//! the caller allocated (e.g. with [`Session::empty`]).
//!
//! # Rules
//!
//! - [`Scope::Global`] runs one collective over all workers; [`Scope::InGroup`] runs it
//!   independently in each contiguous group, whose leader is its first worker.
//! - allreduce: element-wise sum, product, min, max or average (integers: the sum divided
//!   and truncated) of the members' arrays, to every member; f32, f64, i32 and i64. The
//!   members' sources are combined in the session's [`ReduceOrder`] (or the one a call
//!   names): in worker order by default, the same bits on every placement and across MPI
//!   ranks; ranks first on request, each rank folding its own workers before the ranks
//!   combine — faster across ranks, and the same bits for the same ranks and workers per
//!   rank, but floats can differ from worker order's in the last bits. On one host, and in
//!   groups that each lie on one rank, the orders agree; integers agree in either order.
//! - allgather: the members' arrays concatenated flat in rank order, to every member.
//! - broadcast: the leader's array to every member.
//! - scatter: the leader's array split by flat element count into as many equal parts as
//!   there are members (it must divide); member i gets part i.
//! - gather: the members' arrays concatenated in rank order, to the leader.
//! - send to a worker, send to the next group: a worker's (or each worker of a group's)
//!   array to another worker (to the worker of the same rank in the next group).
//!
//! The result takes the destination's shape, whose element count and type must match (a
//! destination that is not an array yet becomes one, flat). Both registers must be the
//! session's own (checked before anything else). Every worker is synced first (earlier
//! failures are reported, not run past), and every size and type is checked on every
//! worker before the first byte moves. How the bytes move — in place, by MPI between ranks,
//! or through the host — is the group's to choose (`transport::group`).

mod checks;

use std::ops::Range;
use std::sync::PoisonError;

use tessera_core::dtype::DataType;

use super::{Command, Register, Session, SessionError, State};
use crate::trace::traced;
use crate::transport::group::{Group, GroupError, Place, Set};
use checks::Checks;

/// Which workers one collective spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// All workers together.
    Global,
    /// Each group on its own.
    InGroup,
}

pub use crate::combine::ReduceOrder;
pub use tessera_core::wire::ReduceOp;

/// What one collective moves: its sets, by element type (sets of one type run together).
type Plan = Vec<(DataType, Set)>;

impl Session {
    /// Allreduce of `src` into `dst` on every worker of each group, in the session's order
    /// ([`Session::set_reduce_order`]; worker order unless set).
    pub fn allreduce(
        &self,
        src: &Register,
        dst: &Register,
        op: ReduceOp,
        scope: Scope,
    ) -> Result<(), SessionError> {
        self.allreduce_in_order(src, dst, op, scope, self.reduce_order())
    }

    /// Allreduce of `src` into `dst` on every worker of each group, combined in `order`
    /// whatever the session's.
    pub fn allreduce_in_order(
        &self,
        src: &Register,
        dst: &Register,
        op: ReduceOp,
        scope: Scope,
        order: ReduceOrder,
    ) -> Result<(), SessionError> {
        let _traced = traced!("allreduce");
        self.collective(
            scope,
            "allreduce",
            (src, dst),
            |c, group| {
                // Every member is both: one round trip asks for both registers.
                c.ask_dests(group.clone())?;
                let sources = c.arrays(group.clone())?;
                let (dtype, elements) = c.alike(&sources, true)?;
                c.reducible(dtype)?;
                let dests = c.dests(group, dtype, elements)?;
                Ok((
                    dtype,
                    Set {
                        sources: c.places(&sources),
                        dests,
                    },
                ))
            },
            |g, dtype, sets| g.reduce(dtype, op, order, sets),
        )
    }

    /// The order this session's allreduces combine in when a call names none.
    pub fn reduce_order(&self) -> ReduceOrder {
        let state = self.state.lock();
        state.unwrap_or_else(PoisonError::into_inner).reduce_order
    }

    /// Makes `order` the one this session's allreduces combine in when a call names none.
    pub fn set_reduce_order(&self, order: ReduceOrder) {
        let state = self.state.lock();
        state.unwrap_or_else(PoisonError::into_inner).reduce_order = order;
    }

    /// Allgather of `src` into `dst`: the group's arrays concatenated in rank order.
    pub fn allgather(
        &self,
        src: &Register,
        dst: &Register,
        scope: Scope,
    ) -> Result<(), SessionError> {
        let _traced = traced!("allgather");
        self.collective(
            scope,
            "allgather",
            (src, dst),
            |c, group| {
                let sources = c.arrays(group.clone())?;
                let (dtype, _) = c.alike(&sources, false)?;
                let dests = c.dests(group, dtype, c.total(&sources))?;
                Ok((
                    dtype,
                    Set {
                        sources: c.places(&sources),
                        dests,
                    },
                ))
            },
            Group::allgather,
        )
    }

    /// Broadcast of the leader's `src` into every member's `dst`.
    pub fn broadcast_from_worker0(
        &self,
        src: &Register,
        dst: &Register,
        scope: Scope,
    ) -> Result<(), SessionError> {
        let _traced = traced!("broadcast");
        self.collective(
            scope,
            "broadcast",
            (src, dst),
            |c, group| {
                let leader = c.arrays(group.start..group.start + 1)?;
                let (dtype, elements) = c.alike(&leader, false)?;
                let dests = c.dests(group, dtype, elements)?;
                Ok((
                    dtype,
                    Set {
                        sources: c.places(&leader),
                        dests,
                    },
                ))
            },
            Group::broadcast,
        )
    }

    /// Scatter of the leader's `src` by flat element count into the members' `dst`.
    pub fn scatter_from_worker0(
        &self,
        src: &Register,
        dst: &Register,
        scope: Scope,
    ) -> Result<(), SessionError> {
        let _traced = traced!("scatter");
        self.collective(
            scope,
            "scatter",
            (src, dst),
            |c, group| {
                let leader = c.arrays(group.start..group.start + 1)?;
                let (dtype, elements) = c.alike(&leader, false)?;
                let part = c.part(elements, group.len())?;
                let dests = c.dests(group, dtype, part)?;
                Ok((
                    dtype,
                    Set {
                        sources: c.places(&leader),
                        dests,
                    },
                ))
            },
            Group::scatter,
        )
    }

    /// Gather of the members' `src` into the leader's `dst`, in rank order.
    pub fn gather_to_worker0(
        &self,
        src: &Register,
        dst: &Register,
        scope: Scope,
    ) -> Result<(), SessionError> {
        let _traced = traced!("gather");
        self.collective(
            scope,
            "gather",
            (src, dst),
            |c, group| {
                let sources = c.arrays(group.clone())?;
                let (dtype, _) = c.alike(&sources, false)?;
                let dests = c.dests(group.start..group.start + 1, dtype, c.total(&sources))?;
                Ok((
                    dtype,
                    Set {
                        sources: c.places(&sources),
                        dests,
                    },
                ))
            },
            Group::gather,
        )
    }

    /// Worker `from`'s `src` into worker `to`'s `dst`.
    pub fn send_to_worker(
        &self,
        src: &Register,
        from: usize,
        to: usize,
        dst: &Register,
    ) -> Result<(), SessionError> {
        let _traced = traced!("send_to_worker");
        self.copies(Scope::Global, "send", (src, dst), |_| Ok(vec![(from, to)]))
    }

    /// Each worker of group `group` sends its `src` to the worker of the same rank in the
    /// next group, into its `dst`. The last group has no next group: an error.
    pub fn send_to_next_group(
        &self,
        src: &Register,
        dst: &Register,
        group: usize,
    ) -> Result<(), SessionError> {
        let _traced = traced!("send_to_next_group");
        self.copies(Scope::InGroup, "send to next group", (src, dst), |groups| {
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
        })
    }

    /// A collective (`plan` checks one group's registers and gives its set; `run` moves
    /// every set's bytes by the group), after every worker is synced; a failure names the
    /// worker and `operation`.
    fn collective(
        &self,
        scope: Scope,
        operation: &'static str,
        (src, dst): (&Register, &Register),
        mut plan: impl FnMut(&mut Checks<'_>, Range<usize>) -> Result<(DataType, Set), SessionError>,
        run: impl Fn(&mut Group, DataType, &[Set]) -> Result<(), GroupError>,
    ) -> Result<(), SessionError> {
        let registers = (self.own(src)?, self.own(dst)?);
        self.checked(
            scope,
            operation,
            registers,
            |c, groups| groups.iter().map(|group| plan(c, group.clone())).collect(),
            |state, plan| {
                let mut types: Vec<DataType> = plan.iter().map(|(dtype, _)| *dtype).collect();
                types.dedup();
                for dtype in types {
                    let sets: Vec<Set> = (plan.iter())
                        .filter(|(d, _)| *d == dtype)
                        .map(|(_, set)| set.clone())
                        .collect();
                    run(&mut state.workers, dtype, &sets).map_err(|e| blame(e, operation))?;
                }
                Ok(())
            },
        )
    }

    /// Copies from worker to worker (`pairs`: given the workers' groups under `scope`, each
    /// sender and its receiver), checked as a collective is.
    fn copies(
        &self,
        scope: Scope,
        operation: &'static str,
        (src, dst): (&Register, &Register),
        pairs: impl FnOnce(&[Range<usize>]) -> Result<Vec<(usize, usize)>, SessionError>,
    ) -> Result<(), SessionError> {
        let registers = (self.own(src)?, self.own(dst)?);
        self.checked(
            scope,
            operation,
            registers,
            |c, groups| {
                let mut moves = Vec::new();
                for (from, to) in pairs(groups)? {
                    c.worker(from)?;
                    c.worker(to)?;
                    let source = c.arrays(from..from + 1)?;
                    let (dtype, elements) = c.alike(&source, false)?;
                    let dest = c.dests(to..to + 1, dtype, elements)?;
                    moves.push((
                        dtype,
                        Set {
                            sources: c.places(&source),
                            dests: dest,
                        },
                    ));
                }
                Ok(moves)
            },
            |state, plan| {
                let pairs: Vec<(Place, Place)> = (plan.iter())
                    .map(|(_, set)| (set.sources[0], set.dests[0]))
                    .collect();
                state.workers.copy(&pairs).map_err(|e| blame(e, operation))
            },
        )
    }

    /// Syncs every worker, checks every group's registers (`plan`), makes the destinations
    /// that are not arrays yet into arrays and waits for them, then moves the bytes
    /// (`run`).
    fn checked(
        &self,
        scope: Scope,
        operation: &'static str,
        registers: (u16, u16),
        plan: impl FnOnce(&mut Checks<'_>, &[Range<usize>]) -> Result<Plan, SessionError>,
        run: impl FnOnce(&mut State, &Plan) -> Result<(), SessionError>,
    ) -> Result<(), SessionError> {
        let mut state = self.lock()?;
        let workers = state.workers.len();
        // Earlier failures are theirs, reported (all of them) before anything runs.
        state.sync_each(0..workers)?;
        let size = match scope {
            Scope::Global => workers,
            Scope::InGroup => workers / state.num_groups.max(1),
        }
        .max(1);
        let groups: Vec<Range<usize>> = (0..workers)
            .step_by(size)
            .map(|start| start..start + size)
            .collect();
        let mut checks = Checks::new(&mut state, registers, operation);
        let planned = plan(&mut checks, &groups).map_err(|e| state_blame(e, operation))?;
        let made = checks.made_anew();
        // Destinations made arrays: their allocations answered (a refusal is theirs).
        state.sync_each(made)?;
        run(&mut state, &planned)
    }
}

/// `e` naming the worker and the collective, where it is a bare link failure of a worker.
fn state_blame(e: SessionError, operation: &'static str) -> SessionError {
    match e {
        SessionError::Transport(source) => match replica_of(&source) {
            Some(worker) => SessionError::Worker {
                worker,
                command: Command::Collective(operation),
                source,
            },
            None => SessionError::Transport(source),
        },
        other => other,
    }
}

/// A group's failure as the session reports it: a member's as that worker's failure of the
/// collective, the combination's as its rule, any other as the group's.
fn blame(e: GroupError, operation: &'static str) -> SessionError {
    match e {
        GroupError::Member { member, source } => SessionError::Worker {
            worker: member,
            command: Command::Collective(operation),
            source,
        },
        GroupError::Combine(e) => SessionError::combine(e, 0),
        GroupError::HostMemory(e) => SessionError::HostMemory(e),
        other => SessionError::Group {
            operation,
            source: Box::new(other),
        },
    }
}

/// The worker a link failure names (workers are numbered as their replicas), if any.
fn replica_of(e: &crate::transport::TransportError) -> Option<usize> {
    use crate::transport::TransportError;
    match *e {
        TransportError::Spawn { replica, .. }
        | TransportError::Closed { replica }
        | TransportError::Exited { replica, .. }
        | TransportError::Timeout { replica, .. }
        | TransportError::Device { replica, .. }
        | TransportError::Version { replica, .. }
        | TransportError::UnexpectedReply { replica, .. }
        | TransportError::NotInFlight { replica, .. }
        | TransportError::TooLarge { replica, .. } => Some(replica as usize),
        _ => None,
    }
}
