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
//! - A round's layout (each member's groups, where its sums lie, the fold order) depends only
//!   on its plan and its members: once answered, a round is kept and opened again for the
//!   same exchange of a later batch or step ([`OpenRound::again`]), its sums started over,
//!   instead of working out every lane's group again (divisions by the groupings' strides,
//!   on the host's critical path, every round).
//! - Once every member is folded: the partial sums of the whole round are summed across
//!   instances in one collective (an instance with no member of a group adds −0.0, the
//!   empty sum), each segment is divided by its group size for a mean and rounded once to
//!   `f32`. A member's answer is its groups' segments one after another; members in the
//!   same groups share one ([`Answers`]).

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

/// The round whose contributions are coming in.
#[derive(Debug)]
pub(super) struct OpenRound {
    round: u32,
    op: ReduceOp,
    /// Bytes every lane's part of a contribution carries (its plan's).
    len: usize,
    /// Each member's group in every segment (every lane's: they share it):
    /// `groups[m × segments + s]`.
    groups: Vec<usize>,
    /// Each member's lanes.
    lanes: Vec<usize>,
    /// Each member's global replicas, as opened: a round is opened again only for the same.
    members: Vec<std::ops::Range<usize>>,
    /// Where each segment's groups' sums begin in `sums`.
    bases: Vec<usize>,
    /// Where a member's sums begin when its segments' sums lie back to back in `sums`, in
    /// the order of its contribution's parts (as under groupings of one group): then each
    /// lane is added in one run, by member.
    runs: Vec<Option<usize>>,
    /// Every segment's groups' sums so far, one segment after another (`total` of them;
    /// none once the round is answered).
    sums: Vec<f64>,
    total: usize,
    /// Each member's global replica (its first lane's), indexed like the members.
    replicas: Vec<usize>,
    /// Members in replica order (the order of every sum), and how many of them are folded:
    /// all of them once every contribution is in.
    order: Vec<usize>,
    folded: usize,
    /// A member's contribution that came before an earlier replica's was folded, by member.
    early: Vec<Option<Reply>>,
    /// Which members' contributions are in, by member index: a repeat is found in O(1),
    /// so a round costs O(members), not O(members²).
    present: Vec<bool>,
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
        let segments = plan.segments.len();
        let mut groups = Vec::with_capacity(members.len() * segments);
        for lanes in members {
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
        }
        let replicas: Vec<usize> = members.iter().map(|m| m.start).collect();
        let mut bases = Vec::with_capacity(segments);
        let mut total = 0usize;
        for (grouping, bytes) in &plan.segments {
            bases.push(total);
            total += grouping.num_groups() * (bytes / 4);
        }
        let runs = (0..members.len())
            .map(|m| run_start(plan, &bases, groups.get(m * segments..(m + 1) * segments)))
            .collect();
        let mut order: Vec<usize> = (0..replicas.len()).collect();
        order.sort_by_key(|&m| replicas[m]);
        Ok(Self {
            round,
            op,
            len: plan.bytes(),
            groups,
            lanes: members.iter().map(|m| m.len()).collect(),
            members: members.to_vec(),
            bases,
            runs,
            sums: vec![NOTHING; total],
            total,
            replicas: replicas.to_vec(),
            order,
            folded: 0,
            early: (0..replicas.len()).map(|_| None).collect(),
            present: vec![false; replicas.len()],
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
        if self.members != members || !self.complete() {
            return None;
        }
        self.round = round;
        self.op = op;
        self.sums = vec![NOTHING; self.total];
        self.folded = 0;
        self.early.iter_mut().for_each(|e| *e = None);
        self.present.fill(false);
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
        let lanes = self.lanes.get(from).copied().unwrap_or(1);
        self.judge(replica, lanes, heading)?;
        match self.present.get_mut(from) {
            Some(present @ false) => *present = true,
            _ => return Ok(()),
        }
        if let Some(slot) = self.early.get_mut(from) {
            *slot = Some(message);
        }
        // Fold every member whose turn has come, in replica order.
        while let Some(&m) = self.order.get(self.folded) {
            let Some(message) = self.early.get_mut(m).and_then(Option::take) else {
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
    /// its replicas in order.
    fn fold(&mut self, plan: &Plan, m: usize, message: &Reply) -> Result<(), RuntimeError> {
        let data = message.contribution().map_or(&[][..], |c| c.data);
        let segments = plan.segments.len();
        let lanes = self.lanes.get(m).copied().unwrap_or(1);
        if let Some(&Some(base)) = self.runs.get(m) {
            // Each lane's segments land one after another: one kernel call a lane.
            let sums = self.sums.get_mut(base..base + self.len / 4);
            let sums = sums.unwrap_or_default();
            for lane in data.chunks(self.len.max(1)).take(lanes) {
                if let Err(e) = add_f32(sums, lane) {
                    let replica = self.replicas.get(m).copied().unwrap_or(0);
                    return Err(self.broken(replica, e));
                }
            }
            return Ok(());
        }
        let mut at = 0;
        for _lane in 0..lanes {
            for (s, (_, bytes)) in plan.segments.iter().enumerate() {
                let len = bytes / 4;
                let group = self.groups.get(m * segments + s).copied().unwrap_or(0);
                let base = self.bases.get(s).copied().unwrap_or(0) + group * len;
                let sums = self.sums.get_mut(base..base + len).unwrap_or_default();
                // Lengths were judged on arrival and the sums laid out from the same plan,
                // so a refusal here is a broken check, reported, never a short sum.
                if let Err(e) = add_f32(sums, data.get(at..at + bytes).unwrap_or_default()) {
                    let replica = self.replicas.get(m).copied().unwrap_or(0);
                    return Err(self.broken(replica, e));
                }
                at += bytes;
            }
        }
        Ok(())
    }

    /// Every member's answer, once the round is complete: the sums across instances,
    /// divided for a mean and rounded (module rules).
    pub(super) fn answers(
        &mut self,
        plan: &Plan,
        instances: &dyn Instances,
    ) -> Result<Answers, RuntimeError> {
        instances.allreduce_sum(&mut self.sums)?;
        let segments = plan.segments.len();
        let mut by_segment = Vec::with_capacity(segments);
        for ((grouping, bytes), &base) in plan.segments.iter().zip(&self.bases) {
            let len = bytes / 4;
            // A sum or a mean: every contribution folded was judged, and `judge` lets in no
            // other operation.
            let divisor = match self.op {
                ReduceOp::Avg => grouping.group_size() as f64,
                _ => 1.0,
            };
            let mut by_group = Vec::with_capacity(grouping.num_groups());
            let all = self.sums.get(base..base + grouping.num_groups() * len);
            for sums in all.unwrap_or_default().chunks(len.max(1)) {
                let mut out = vec![0u8; sums.len() * 4];
                // `out` holds what `sums` does: the kernel refuses nothing here.
                round_f32(sums, divisor, &mut out).map_err(|e| self.broken(0, e))?;
                by_group.push(out);
            }
            by_segment.push(by_group);
        }
        // A member's groups, segment by segment, name its answer: each distinct one is
        // built once. Members sorted by their groups lie next to the others that share
        // them (O(members × segments × log members) a round, whatever the groupings).
        let key = |m: usize| {
            let at = m * segments;
            self.groups.get(at..at + segments).unwrap_or_default()
        };
        let members = self.present.len();
        let mut by_key: Vec<usize> = (0..members).collect();
        by_key.sort_unstable_by(|&a, &b| key(a).cmp(key(b)));
        let mut answers = Answers {
            distinct: Vec::new(),
            of_member: vec![0; members],
        };
        let mut last: Option<&[usize]> = None;
        for m in by_key {
            let groups = key(m);
            if last != Some(groups) {
                let mut answer = Vec::with_capacity(self.len);
                for (by_group, &g) in by_segment.iter().zip(groups) {
                    answer.extend_from_slice(by_group.get(g).map_or(&[][..], Vec::as_slice));
                }
                answers.distinct.push(answer);
                last = Some(groups);
            }
            answers.of_member[m] = answers.distinct.len() - 1;
        }
        // Rounded, the sums are spent: a round kept for its layout holds none of them (a
        // model's exchanges together hold every element of it, in f64).
        self.sums = Vec::new();
        Ok(answers)
    }

    /// A kernel refusal where the lengths were checked: a broken check, reported as a
    /// length error of the round, naming `replica` (0 where no one input is at fault).
    fn broken(&self, replica: usize, e: CombineError) -> RuntimeError {
        let actual = match e {
            CombineError::Length { actual, .. } => actual * 4,
            CombineError::Overflow | CombineError::Dtype(_) => 0,
        };
        RuntimeError::ReductionLength {
            replica: replica as u32,
            round: self.round,
            expected: self.len,
            actual,
        }
    }
}

/// Where a member whose group in each segment is `groups` finds its sums, when they lie
/// one segment after another as its contribution's parts do; `None` otherwise.
fn run_start(plan: &Plan, bases: &[usize], groups: Option<&[usize]>) -> Option<usize> {
    let groups = groups?;
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
mod tests {
    use super::*;

    /// A contribution to `round`: `data`, to combine by `op`.
    fn share(round: u32, op: ReduceOp, data: &[u8]) -> Reply {
        Reply::from_contribution(Contribution {
            step: 0,
            round,
            op,
            data,
        })
    }

    /// Collects `message` from member `from` (replica `from`) as the driver does, judged
    /// by its heading; returns the members whose messages were folded by it.
    fn collect(
        open: &mut OpenRound,
        plan: &Plan,
        from: usize,
        message: Reply,
    ) -> Result<Vec<usize>, RuntimeError> {
        let heading = Heading::of(&message.contribution().expect("a contribution"));
        let mut folded = Vec::new();
        open.collect(plan, from, from, heading, message, |m, _| folded.push(m))?;
        Ok(folded)
    }

    /// Replicas `0..n`, member `i` replica `i`.
    fn replicas(n: usize) -> Vec<usize> {
        (0..n).collect()
    }

    /// A round of one segment.
    fn one(grouping: ReplicaGrouping, bytes: usize) -> Plan {
        Plan {
            segments: vec![(grouping, bytes)],
        }
    }

    fn f32s(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    /// Round 0's contributions (a sum) of two devices of two lanes, replicas 0–1 and 2–3:
    /// each lane's `values` side by side, the second device's message first.
    fn second_device_first<const N: usize>(
        open: &mut OpenRound,
        plan: &Plan,
        values: &[[f32; N]; 4],
    ) {
        for (m, lanes) in [(1, [2, 3]), (0, [0, 1])] {
            let data: Vec<f32> = lanes.iter().flat_map(|&r| values[r]).collect();
            let message = share(0, ReduceOp::Sum, &f32s(&data));
            let heading = Heading::of(&message.contribution().unwrap());
            open.collect(plan, m, lanes[0], heading, message, |_, _| {})
                .unwrap();
        }
    }

    /// Round 0 under `plan`, combined by `op`, every member's contribution in: member
    /// `from`'s `values` for each `(from, values)`, arrived in that order; its answers.
    fn arrived(op: ReduceOp, plan: &Plan, contributions: &[(usize, Vec<f32>)]) -> Answers {
        let mut open = OpenRound::open(0, op, plan, &replicas(contributions.len())).unwrap();
        for (from, values) in contributions {
            collect(&mut open, plan, *from, share(0, op, &f32s(values))).unwrap();
        }
        assert!(open.complete());
        open.answers(plan, &crate::instance::Single).unwrap()
    }

    /// Each of the first `n` members' answers.
    fn each(answers: &Answers, n: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| answers.of(i).expect("an answer per member").to_vec())
            .collect()
    }

    /// Catches contributions of one round that differ in length or operation being
    /// combined anyway (truncated to the shortest, or summed where a mean was asked).
    #[test]
    fn contributions_must_match_the_rounds_first() {
        let plan = one(ReplicaGrouping::new(8, 1, 8).unwrap(), 8);
        let mut open = OpenRound::open(2, ReduceOp::Avg, &plan, &replicas(8)).unwrap();
        let mean = |data: &[u8]| share(2, ReduceOp::Avg, data);
        assert_eq!(collect(&mut open, &plan, 0, mean(&[0; 8])).unwrap(), [0]);
        assert!(collect(&mut open, &plan, 0, mean(&[0; 8]))
            .unwrap()
            .is_empty());
        assert_eq!(open.folded, 1, "a repeat is in once");
        assert!(matches!(
            collect(&mut open, &plan, 1, mean(&[0; 4])),
            Err(RuntimeError::ReductionLength {
                replica: 1,
                expected: 8,
                actual: 4,
                ..
            })
        ));
        assert!(matches!(
            collect(&mut open, &plan, 1, share(2, ReduceOp::Sum, &[0; 8])),
            Err(RuntimeError::ReductionOps {
                replica: 1,
                round: 2
            })
        ));
        assert!(matches!(
            collect(&mut open, &plan, 1, share(3, ReduceOp::Avg, &[0; 8])),
            Err(RuntimeError::ReductionRound {
                replica: 1,
                round: 3,
                expected: 2
            })
        ));
    }

    /// Catches a contribution asking for an operation a step's round does not do (core's
    /// operations include the session's product, minimum and maximum) summed anyway.
    #[test]
    fn a_round_only_sums_or_averages() {
        let plan = one(ReplicaGrouping::new(8, 1, 8).unwrap(), 8);
        for op in [ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max] {
            let mut open = OpenRound::open(1, op, &plan, &replicas(8)).unwrap();
            let refused = collect(&mut open, &plan, 3, share(1, op, &[0; 8]));
            assert!(
                matches!(
                    refused,
                    Err(RuntimeError::ReductionOp {
                        replica: 3,
                        round: 1,
                        op: o
                    }) if o == op
                ),
                "{op:?}: {refused:?}"
            );
            assert_eq!(open.folded, 0, "{op:?}: nothing folded");
        }
    }

    /// Catches a contribution of a partial element summed as if whole (its last bytes
    /// dropped by the kernel's element-wise walk).
    #[test]
    fn contributions_are_whole_elements() {
        let plan = one(ReplicaGrouping::new(8, 1, 8).unwrap(), 8);
        let mut open = OpenRound::open(0, ReduceOp::Sum, &plan, &replicas(8)).unwrap();
        assert!(matches!(
            collect(&mut open, &plan, 5, share(0, ReduceOp::Sum, &[0; 6])),
            Err(RuntimeError::ReductionElements {
                replica: 5,
                round: 0,
                bytes: 6
            })
        ));
    }

    /// Catches a round summed in the order its contributions arrived: the device threads
    /// race, and 1e30 + 1 − 1e30 is 0 in one order and 1 in another, so two runs of one
    /// job could end with different weights.
    #[test]
    fn a_round_sums_in_replica_order_whatever_the_arrival() {
        let values = [1e30f32, -1e30, 1.0];
        let plan = one(ReplicaGrouping::new(3, 1, 3).unwrap(), 4);
        let sum_arriving = |order: [usize; 3]| {
            let order = order.map(|from| (from, vec![values[from]]));
            each(&arrived(ReduceOp::Sum, &plan, &order), 3)
        };
        let in_order = sum_arriving([0, 1, 2]);
        assert_eq!(in_order, vec![f32s(&[1.0]); 3]);
        for order in [[2, 0, 1], [1, 2, 0], [0, 2, 1]] {
            assert_eq!(sum_arriving(order), in_order, "arrival order {order:?}");
        }
    }

    /// Catches a fold that waits for the whole round (every message held to its end) or
    /// folds out of turn: each contribution is folded, and its buffer given back, as soon
    /// as every replica before it is folded.
    #[test]
    fn a_contribution_is_folded_once_the_replicas_before_it_are() {
        let plan = one(ReplicaGrouping::new(4, 1, 4).unwrap(), 4);
        let mut open = OpenRound::open(0, ReduceOp::Sum, &plan, &replicas(4)).unwrap();
        let one_value = || share(0, ReduceOp::Sum, &f32s(&[1.0]));
        assert!(collect(&mut open, &plan, 2, one_value())
            .unwrap()
            .is_empty());
        assert_eq!(collect(&mut open, &plan, 0, one_value()).unwrap(), [0]);
        assert_eq!(collect(&mut open, &plan, 1, one_value()).unwrap(), [1, 2]);
        assert!(!open.complete());
        assert_eq!(collect(&mut open, &plan, 3, one_value()).unwrap(), [3]);
        assert!(open.complete());
    }

    /// Catches members folded in the order of their index where their replicas are in
    /// another: the sum runs in replica order.
    #[test]
    fn the_fold_follows_replicas_not_member_indices() {
        let values = [1.0f32, -1e30, 1e30];
        let plan = one(ReplicaGrouping::new(3, 1, 3).unwrap(), 4);
        // Member 0 is replica 2, member 1 replica 1, member 2 replica 0: in replica order
        // 1e30 − 1e30 + 1 = 1 (in member order 1 − 1e30 + 1e30 would be 0).
        let mut open = OpenRound::open(0, ReduceOp::Sum, &plan, &[2, 1, 0]).unwrap();
        for (m, v) in values.iter().enumerate() {
            let heading = Heading {
                round: 0,
                op: ReduceOp::Sum,
                bytes: 4,
            };
            let message = share(0, ReduceOp::Sum, &f32s(&[*v]));
            open.collect(&plan, m, 2 - m, heading, message, |_, _| {})
                .unwrap();
        }
        let answers = open.answers(&plan, &crate::instance::Single).unwrap();
        assert_eq!(each(&answers, 3), vec![f32s(&[1.0]); 3]);
    }

    /// Catches a device of several lanes folded as one replica, or out of replica order:
    /// a device of replicas 0 and 1 and one of 2 and 3 get the answer four devices of one
    /// get, each lane's part folded in replica order, whatever device's message comes
    /// first (1e30, −1e30, 1, 5 sum to 6 only in that order); a device whose lanes straddle
    /// two pairs of a grouping is refused, naming both replicas; a contribution of one
    /// lane's length from a device of two is refused.
    #[test]
    fn a_device_of_lanes_is_folded_lane_by_lane() {
        let plan = one(ReplicaGrouping::new(4, 1, 4).unwrap(), 8);
        let values = [[1e30f32, 1.0], [-1e30, 2.0], [1.0, 3.0], [5.0, 4.0]];
        let each_alone: Vec<_> = values.iter().map(|v| v.to_vec()).enumerate().collect();
        let alone = arrived(ReduceOp::Sum, &plan, &each_alone);
        assert_eq!(alone.of(0), Some(&f32s(&[6.0, 10.0])[..]));
        let mut open = OpenRound::open_lanes(0, ReduceOp::Sum, &plan, &[0..2, 2..4]).unwrap();
        second_device_first(&mut open, &plan, &values);
        assert!(open.complete());
        let laned = open.answers(&plan, &crate::instance::Single).unwrap();
        assert_eq!(each(&laned, 2), each(&alone, 2));
        let pairs = one(ReplicaGrouping::new(4, 1, 2).unwrap(), 8);
        let apart = OpenRound::open_lanes(0, ReduceOp::Sum, &pairs, &[0..1, 1..3, 3..4]);
        assert!(matches!(
            apart,
            Err(RuntimeError::LanesApart {
                first: 1,
                replica: 2,
                round: 0
            })
        ));
        let short = share(0, ReduceOp::Sum, &f32s(&[1.0, 2.0]));
        let mut open = OpenRound::open_lanes(0, ReduceOp::Sum, &plan, &[0..2, 2..4]).unwrap();
        let heading = Heading::of(&short.contribution().unwrap());
        assert!(matches!(
            open.collect(&plan, 0, 0, heading, short, |_, _| {}),
            Err(RuntimeError::ReductionLength {
                expected: 16,
                actual: 8,
                ..
            })
        ));
    }

    /// Catches a round that starts its sums at +0.0: gradients that are all −0.0 came back
    /// +0.0, unlike the same sum in a session allreduce.
    #[test]
    fn a_sum_of_negative_zeros_stays_negative() {
        let plan = one(ReplicaGrouping::new(2, 1, 2).unwrap(), 4);
        let answers = arrived(ReduceOp::Avg, &plan, &[(0, vec![-0.0]), (1, vec![-0.0])]);
        assert_eq!(each(&answers, 2), vec![f32s(&[-0.0]); 2]);
    }

    /// Catches answers shared too widely (every member given the first group's sum) or
    /// built once per member: groups `[0, 1]` and `[2, 3]` get their own sums, built
    /// once each.
    #[test]
    fn members_share_an_answer_only_within_their_groups() {
        let ones: Vec<_> = (0..4).map(|from| (from, vec![from as f32 + 1.0])).collect();
        let plan = one(ReplicaGrouping::new(4, 1, 2).unwrap(), 4);
        let answers = arrived(ReduceOp::Sum, &plan, &ones);
        let (first, second) = (f32s(&[3.0]), f32s(&[7.0]));
        assert_eq!(
            each(&answers, 4),
            [first.clone(), first, second.clone(), second]
        );
        assert_eq!(answers.distinct.len(), 2, "one answer per group");
    }

    /// Catches an answer named by one segment's group alone: under pairs `[0, 1]`, `[2, 3]`
    /// in one segment and pairs `[0, 2]`, `[1, 3]` in the next, every member's answer
    /// differs; under `All` and pairs, two do.
    #[test]
    fn an_answer_is_named_by_every_segments_group() {
        let twos: Vec<_> = (0..4)
            .map(|from| (from, vec![from as f32 + 1.0, 10.0 * (from as f32 + 1.0)]))
            .collect();
        let all = ReplicaGrouping::new(4, 1, 4).unwrap();
        let pairs = ReplicaGrouping::new(4, 1, 2).unwrap();
        let across = ReplicaGrouping::new(4, 2, 2).unwrap();
        let two = |first, second| Plan {
            segments: vec![(first, 4), (second, 4)],
        };
        let crossing = arrived(ReduceOp::Sum, &two(pairs, across), &twos);
        assert_eq!(
            each(&crossing, 4),
            [[3.0, 40.0], [3.0, 60.0], [7.0, 40.0], [7.0, 60.0]].map(|a| f32s(&a))
        );
        assert_eq!(crossing.distinct.len(), 4);
        let nested = arrived(ReduceOp::Sum, &two(all, pairs), &twos);
        assert_eq!(
            each(&nested, 4),
            [[10.0, 30.0], [10.0, 30.0], [10.0, 70.0], [10.0, 70.0]].map(|a| f32s(&a))
        );
        assert_eq!(nested.distinct.len(), 2);
    }

    /// Catches a lane's contribution added in one run where its sums do not lie as its
    /// parts do: under pairs in the first segment and `All` in the second, the device of
    /// replicas 0 and 1 finds its second segment's sums past the other pair's (folded
    /// segment by segment), the device of 2 and 3 right after its own (one run a lane);
    /// both end on the sums in replica order (−1e30, 0, 1e30, 1 in the second segment make 1
    /// only in that order: the run's two lanes the other way round make 0), and where a run
    /// is allowed is worked out as said.
    #[test]
    fn a_lane_runs_into_its_sums_only_where_they_lie_as_its_parts() {
        let pairs = ReplicaGrouping::new(4, 1, 2).unwrap();
        let all = ReplicaGrouping::new(4, 1, 4).unwrap();
        let plan = Plan {
            segments: vec![(pairs, 8), (all, 4)],
        };
        let values = [
            [1.0f32, 2.0, -1e30],
            [3.0, 4.0, 0.0],
            [5.0, 6.0, 1e30],
            [7.0, 8.0, 1.0],
        ];
        let mut open = OpenRound::open_lanes(0, ReduceOp::Sum, &plan, &[0..2, 2..4]).unwrap();
        assert_eq!(open.runs, [None, Some(2)]);
        second_device_first(&mut open, &plan, &values);
        let answers = open.answers(&plan, &crate::instance::Single).unwrap();
        assert_eq!(
            each(&answers, 2),
            [f32s(&[4.0, 6.0, 1.0]), f32s(&[12.0, 14.0, 1.0])]
        );
    }

    /// Catches a round opened again that keeps anything of its last use: its sums, its
    /// members folded, its operation. Opened again for the same members as a round of
    /// another operation, a round gives what a new one gives; for other members, or
    /// unanswered, it is not opened again.
    #[test]
    fn a_round_opened_again_starts_over() {
        let plan = one(ReplicaGrouping::new(4, 1, 2).unwrap(), 8);
        let members = [0..2, 2..4];
        let values =
            |k: f32| -> Vec<Vec<f32>> { vec![vec![k, 1.0, 2.0, k], vec![3.0, -k, 4.0, 5.0]] };
        let run = |mut open: OpenRound, k: f32| {
            // The second device's message first: held until the first's is folded.
            for (m, data) in values(k).iter().enumerate().rev() {
                let message = share(open.round, open.op, &f32s(data));
                let heading = Heading::of(&message.contribution().unwrap());
                open.collect(&plan, m, members[m].start, heading, message, |_, _| {})
                    .unwrap();
            }
            let answers = open.answers(&plan, &crate::instance::Single).unwrap();
            (open, each(&answers, 2))
        };
        let first = OpenRound::open_lanes(0, ReduceOp::Sum, &plan, &members).unwrap();
        let (used, _) = run(first, 7.0);
        let fresh = OpenRound::open_lanes(3, ReduceOp::Avg, &plan, &members).unwrap();
        let (_, expected) = run(fresh, 11.0);
        let again = used
            .again(3, ReduceOp::Avg, &members)
            .expect("same members");
        assert_eq!((again.round, again.op), (3, ReduceOp::Avg));
        let (used, answered) = run(again, 11.0);
        assert_eq!(answered, expected);
        assert_eq!(answered[0], f32s(&[6.5, 6.0]), "the pair's mean");
        assert!(used.again(4, ReduceOp::Sum, &[0..1, 1..4]).is_none());
        let unanswered = OpenRound::open_lanes(0, ReduceOp::Sum, &plan, &members).unwrap();
        assert!(unanswered.again(1, ReduceOp::Sum, &members).is_none());
    }
}
