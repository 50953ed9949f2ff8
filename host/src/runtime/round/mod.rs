//! A reduction round under way: its contributions checked as they come in and folded into
//! the round's sums in replica order, then rounded into each member's answer.
//!
//! # Rules
//!
//! - A member is a device: one replica, or several consecutive ones run as its lanes
//!   (core's [`lanes`](tessera_core::program::lanes) rule), whose contribution holds each
//!   lane's in lane order, side by side.
//! - Every contribution is judged against the round before it is kept: the round's number
//!   and operation, whole `f32` elements, the plan's length for each of its lanes. One that
//!   fails is an error naming its replica, never truncated; a member's second one is
//!   ignored (the first is in).
//! - A round sums ([`ReduceOp::Sum`]) or takes the mean ([`ReduceOp::Avg`]): a contribution
//!   asking for any other of core's operations (which only the session's collectives use)
//!   is refused like one of another operation, naming its replica and the operation.
//! - Each segment's groups are summed in `f64` in replica order, whatever order the
//!   messages raced in: a contribution is folded as soon as every member before it in
//!   replica order is folded, and kept until then. A sum starts at [`NOTHING`] and adds one
//!   input at a time ([`add_f32`]), which gives the bits a fold of all the group's inputs
//!   at once gives ([`crate::combine`]'s rule). Folding on arrival keeps the fold off the
//!   round's end: when the last contribution comes in, only it is left to add, and every
//!   other message is already back with its channel.
//! - A round's layout (each member's groups, where its sums lie, the fold order, which
//!   members share an answer) depends only on its plan and its members: once answered, a
//!   round is kept and opened again for the same exchange of a later batch or step
//!   ([`OpenRound::again`]), its sums started over, instead of working out every lane's
//!   group again (divisions by the groupings' strides, on the host's critical path, every
//!   round).
//! - Once every member is folded: the partial sums of the whole round are summed across
//!   instances in one collective (an instance with no member of a group adds −0.0, the
//!   empty sum), each segment is divided by its group size for a mean and rounded once to
//!   `f32`. A member's answer is its groups' segments one after another, rounded straight
//!   from the sums into it; members in the same groups share one ([`Answers`]).

use tessera_core::grouping::ReplicaGrouping;
use tessera_core::wire::{Contribution, ReduceOp};

use super::RuntimeError;
use crate::combine::{add_f32, round_f32, CombineError, NOTHING};
use crate::instance::Instances;
use crate::transport::Reply;

/// One exchange of a batch: its segments, in the order they lie in its message.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Plan {
    /// One per round it carries: the grouping it combines under and its bytes.
    pub segments: Vec<(ReplicaGrouping, usize)>,
}

impl Plan {
    /// Bytes of a contribution to it.
    pub(super) fn bytes(&self) -> usize {
        self.segments.iter().map(|&(_, b)| b).sum()
    }
}

/// What a contribution says of itself, judged before its bytes are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Heading {
    pub round: u32,
    pub op: ReduceOp,
    pub bytes: usize,
}

impl Heading {
    /// `c`'s heading.
    pub(super) fn of(c: &Contribution<'_>) -> Self {
        Self {
            round: c.round,
            op: c.op,
            bytes: c.data.len(),
        }
    }
}

/// One member of a round: what the round's layout says of it, and what has come from it.
#[derive(Debug)]
struct Member {
    /// Its global replicas (its lanes), as opened: a round is opened again only for the
    /// same.
    replicas: std::ops::Range<usize>,
    /// Its group in every segment (every lane's: they share it).
    groups: Vec<usize>,
    /// Where its sums begin when its segments' sums lie back to back in the round's sums,
    /// in the order of its contribution's parts (as under groupings of one group): then
    /// each lane is added in one run.
    run: Option<usize>,
    /// Its contribution, if it came before an earlier replica's was folded.
    early: Option<Reply>,
    /// Its contribution is in (a repeat is then ignored).
    present: bool,
}

impl Member {
    /// Its first lane's replica, which names it.
    fn replica(&self) -> usize {
        self.replicas.start
    }

    /// Its lanes.
    fn lanes(&self) -> usize {
        self.replicas.len()
    }
}

/// The round whose contributions are coming in.
#[derive(Debug)]
pub(super) struct OpenRound {
    round: u32,
    op: ReduceOp,
    /// Bytes every lane's part of a contribution carries (its plan's).
    len: usize,
    /// The members, as the driver numbers them.
    members: Vec<Member>,
    /// Where each segment's groups' sums begin in `sums`.
    bases: Vec<usize>,
    /// Every segment's groups' sums so far, one segment after another (`total` of them;
    /// none once the round is answered).
    sums: Vec<f64>,
    total: usize,
    /// Members in replica order (the order of every sum), and how many of them are folded:
    /// all of them once every contribution is in.
    order: Vec<usize>,
    folded: usize,
    /// Who shares which answer, worked out with the layout (module rules).
    sharing: Sharing,
}

/// Which members share an answer: those in the same group of every segment. A property of
/// the layout, so worked out when a round is opened, not when it is answered.
#[derive(Debug)]
struct Sharing {
    /// For each distinct answer, a member that gets it (whose groups name it).
    first: Vec<usize>,
    /// For each member, which distinct answer it gets.
    of_member: Vec<usize>,
}

impl Sharing {
    /// The sharing of `members`: members sorted by their groups lie next to the others
    /// that share them (O(members × segments × log members), whatever the groupings).
    fn of(members: &[Member]) -> Self {
        let mut by_key: Vec<usize> = (0..members.len()).collect();
        by_key.sort_unstable_by(|&a, &b| members[a].groups.cmp(&members[b].groups));
        let mut sharing = Sharing {
            first: Vec::new(),
            of_member: vec![0; members.len()],
        };
        let mut last: Option<&[usize]> = None;
        for m in by_key {
            let groups = &members[m].groups[..];
            if last != Some(groups) {
                sharing.first.push(m);
                last = Some(groups);
            }
            sharing.of_member[m] = sharing.first.len() - 1;
        }
        sharing
    }
}

impl OpenRound {
    /// Round `round`, combined by `op` under `plan`, of the members whose global replicas
    /// are `replicas` (indexed like the members), one replica each.
    #[cfg(test)]
    pub(super) fn open(
        round: u32,
        op: ReduceOp,
        plan: &Plan,
        replicas: &[usize],
    ) -> Result<Self, RuntimeError> {
        let members: Vec<_> = replicas.iter().map(|&r| r..r + 1).collect();
        Self::open_lanes(round, op, plan, &members)
    }

    /// Round `round`, combined by `op` under `plan`, of members running the global
    /// replicas `members` (one range per member: its lanes). Lanes of one member in
    /// different groups of a segment cannot share its one answer: an error naming the
    /// first lane apart.
    pub(super) fn open_lanes(
        round: u32,
        op: ReduceOp,
        plan: &Plan,
        members: &[std::ops::Range<usize>],
    ) -> Result<Self, RuntimeError> {
        let mut bases = Vec::with_capacity(plan.segments.len());
        let mut total = 0usize;
        for (grouping, bytes) in &plan.segments {
            bases.push(total);
            total += grouping.num_groups() * (bytes / 4);
        }
        let mut opened = Vec::with_capacity(members.len());
        for lanes in members {
            let groups = groups_of(plan, lanes, round)?;
            opened.push(Member {
                replicas: lanes.clone(),
                run: run_start(plan, &bases, &groups),
                groups,
                early: None,
                present: false,
            });
        }
        let mut order: Vec<usize> = (0..opened.len()).collect();
        order.sort_by_key(|&m| opened[m].replica());
        Ok(Self {
            round,
            op,
            len: plan.bytes(),
            sharing: Sharing::of(&opened),
            members: opened,
            bases,
            sums: vec![NOTHING; total],
            total,
            order,
            folded: 0,
        })
    }

    /// This round, answered, opened again as round `round` of the same plan combined by
    /// `op`, its sums started over; `None` (drop it, open anew) unless its members are
    /// `members` and it was answered.
    pub(super) fn again(
        mut self,
        round: u32,
        op: ReduceOp,
        members: &[std::ops::Range<usize>],
    ) -> Option<Self> {
        let same = self.members.len() == members.len()
            && self
                .members
                .iter()
                .zip(members)
                .all(|(m, r)| m.replicas == *r);
        if !same || !self.complete() {
            return None;
        }
        self.round = round;
        self.op = op;
        self.sums = vec![NOTHING; self.total];
        self.folded = 0;
        for member in &mut self.members {
            member.early = None;
            member.present = false;
        }
        Some(self)
    }

    /// True once every member's contribution is in: then every one is folded.
    pub(super) fn complete(&self) -> bool {
        self.folded == self.order.len()
    }

    /// Takes member `from`'s (replica `replica`'s) contribution, `message` headed `heading`,
    /// by the module's rules; every message folded is handed to `done` with its member,
    /// to give its buffer back.
    pub(super) fn collect(
        &mut self,
        plan: &Plan,
        from: usize,
        replica: usize,
        heading: Heading,
        message: Reply,
        mut done: impl FnMut(usize, Reply),
    ) -> Result<(), RuntimeError> {
        let Some(member) = self.members.get(from) else {
            return Err(RuntimeError::NotInRound {
                replica: replica as u32,
                round: self.round,
            });
        };
        self.judge(replica, member.lanes(), heading)?;
        let member = &mut self.members[from];
        if member.present {
            return Ok(());
        }
        member.present = true;
        member.early = Some(message);
        // Fold every member whose turn has come, in replica order.
        while let Some(&m) = self.order.get(self.folded) {
            let Some(message) = self.members[m].early.take() else {
                break;
            };
            self.fold(plan, m, &message)?;
            self.folded += 1;
            done(m, message);
        }
        Ok(())
    }

    /// A contribution of another round, operation or length (this round's for each of its
    /// `lanes`) than this round's is an error naming its replica.
    fn judge(&self, replica: usize, lanes: usize, heading: Heading) -> Result<(), RuntimeError> {
        let replica = replica as u32;
        let Heading { round, op, bytes } = heading;
        if self.round != round {
            return Err(RuntimeError::ReductionRound {
                replica,
                round,
                expected: self.round,
            });
        }
        if self.op != op {
            return Err(RuntimeError::ReductionOps { replica, round });
        }
        if !matches!(op, ReduceOp::Sum | ReduceOp::Avg) {
            return Err(RuntimeError::ReductionOp { replica, round, op });
        }
        if !bytes.is_multiple_of(4) {
            return Err(RuntimeError::ReductionElements {
                replica,
                round,
                bytes,
            });
        }
        let expected = self.len.saturating_mul(lanes);
        if expected != bytes {
            return Err(RuntimeError::ReductionLength {
                replica,
                round,
                expected,
                actual: bytes,
            });
        }
        Ok(())
    }

    /// Adds member `m`'s contribution (judged whole) to its groups' sums, lane after lane:
    /// its replicas in order. Lengths were judged on arrival and the sums laid out from the
    /// same plan, so a range that does not fit is a broken check: reported, never a short
    /// sum.
    fn fold(&mut self, plan: &Plan, m: usize, message: &Reply) -> Result<(), RuntimeError> {
        let (round, len) = (self.round, self.len);
        let member = &self.members[m];
        let broken = |e| broken(round, len, member.replica(), e);
        let short = || broken(CombineError::Overflow);
        let data = message.contribution().ok_or_else(short)?.data;
        let sums = &mut self.sums;
        if let Some(base) = member.run {
            // Each lane's segments land one after another: one kernel call a lane.
            let sums = sums.get_mut(base..base + len / 4).ok_or_else(short)?;
            for lane in data.chunks(len.max(1)).take(member.lanes()) {
                add_f32(sums, lane).map_err(broken)?;
            }
            return Ok(());
        }
        let mut at = 0;
        for _lane in 0..member.lanes() {
            for ((_, bytes), (&group, &base)) in
                (plan.segments.iter()).zip(member.groups.iter().zip(&self.bases))
            {
                let n = bytes / 4;
                let base = base + group * n;
                let (Some(sums), Some(part)) =
                    (sums.get_mut(base..base + n), data.get(at..at + bytes))
                else {
                    return Err(short());
                };
                add_f32(sums, part).map_err(broken)?;
                at += bytes;
            }
        }
        Ok(())
    }

    /// Every member's answer, once the round is complete: the sums across instances,
    /// divided for a mean and rounded (module rules). Each distinct answer is rounded
    /// straight from the sums into its own bytes, segment after segment: one buffer per
    /// distinct answer, nothing else allocated (the host's thread does this while every
    /// device of the round waits).
    pub(super) fn answers(
        &mut self,
        plan: &Plan,
        instances: &dyn Instances,
    ) -> Result<Answers, RuntimeError> {
        instances.allreduce_sum(&mut self.sums)?;
        let mut answers = Answers {
            distinct: Vec::with_capacity(self.sharing.first.len()),
            of_member: self.sharing.of_member.clone(),
        };
        for &m in &self.sharing.first {
            let replica = self.members[m].replica();
            let mut answer = Vec::with_capacity(self.len);
            let segments = plan.segments.iter().zip(&self.bases);
            for (((grouping, bytes), &base), &group) in segments.zip(&self.members[m].groups) {
                // A sum or a mean: every contribution folded was judged, and `judge` lets
                // in no other operation.
                let divisor = match self.op {
                    ReduceOp::Avg => grouping.group_size() as f64,
                    _ => 1.0,
                };
                let n = bytes / 4;
                let start = base + group * n;
                let sums = (group < grouping.num_groups())
                    .then(|| self.sums.get(start..start + n))
                    .flatten()
                    .ok_or_else(|| self.broken(replica, CombineError::Overflow))?;
                let at = answer.len();
                answer.resize(at + n * 4, 0);
                // `answer`'s new bytes hold what `sums` does: the kernel refuses nothing.
                round_f32(sums, divisor, &mut answer[at..]).map_err(|e| self.broken(replica, e))?;
            }
            answers.distinct.push(answer);
        }
        // Rounded, the sums are spent: a round kept for its layout holds none of them (a
        // model's exchanges together hold every element of it, in f64).
        self.sums = Vec::new();
        Ok(answers)
    }

    /// A kernel refusal where the lengths were checked (see [`broken`]).
    fn broken(&self, replica: usize, e: CombineError) -> RuntimeError {
        broken(self.round, self.len, replica, e)
    }
}

/// A kernel refusal (or a range that does not fit) where the lengths were checked: a
/// broken check of round `round` (`len` bytes a lane), reported as a length error naming
/// `replica` (0 where no one input is at fault).
fn broken(round: u32, len: usize, replica: usize, e: CombineError) -> RuntimeError {
    let actual = match e {
        CombineError::Length { actual, .. } => actual * 4,
        CombineError::Overflow | CombineError::Dtype(_) | CombineError::Runs { .. } => 0,
    };
    RuntimeError::ReductionLength {
        replica: replica as u32,
        round,
        expected: len,
        actual,
    }
}

/// The group of `lanes` (one member's replicas) in each segment of `plan`, which every lane
/// must share: an error naming the first lane apart.
fn groups_of(
    plan: &Plan,
    lanes: &std::ops::Range<usize>,
    round: u32,
) -> Result<Vec<usize>, RuntimeError> {
    let mut groups = Vec::with_capacity(plan.segments.len());
    for (grouping, _) in &plan.segments {
        let group_of = |replica: usize| {
            grouping
                .group_of(replica)
                .map_err(|_| RuntimeError::ReductionGroup {
                    replica: replica as u32,
                    round,
                })
        };
        let group = group_of(lanes.start)?;
        for replica in lanes.clone() {
            if group_of(replica)? != group {
                return Err(RuntimeError::LanesApart {
                    first: lanes.start as u32,
                    replica: replica as u32,
                    round,
                });
            }
        }
        groups.push(group);
    }
    Ok(groups)
}

/// Where a member whose group in each segment is `groups` finds its sums, when they lie
/// one segment after another as its contribution's parts do; `None` otherwise.
fn run_start(plan: &Plan, bases: &[usize], groups: &[usize]) -> Option<usize> {
    let mut start = None;
    let mut next = 0;
    for (((_, bytes), &base), &group) in plan.segments.iter().zip(bases).zip(groups) {
        let at = base + group * (bytes / 4);
        if *start.get_or_insert(at) + next != at {
            return None;
        }
        next += bytes / 4;
    }
    start
}

/// A round's answers: one per distinct answer (members in the same group of every segment
/// get the same bytes: under `All`, one for every member), and which one each member gets,
/// indexed like the members.
#[derive(Debug, PartialEq)]
pub(super) struct Answers {
    distinct: Vec<Vec<u8>>,
    of_member: Vec<usize>,
}

impl Answers {
    /// Member `i`'s answer.
    pub(super) fn of(&self, i: usize) -> Option<&[u8]> {
        let at = *self.of_member.get(i)?;
        self.distinct.get(at).map(Vec::as_slice)
    }
}

#[cfg(test)]
mod tests;
