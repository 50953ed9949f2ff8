//! The step driver: runs a training step on this instance's devices at once and answers
//! their reductions. A device sends a batch's reduction rounds packed into exchanges (core's
//! [`exchange`](tessera_core::program::exchange) rule): exchange `r` of a step follows plan
//! `r mod k` of the `k` it is given, and each segment of it (one variable's round) combines
//! the replicas of one group under that variable's grouping. Below, a *round* is one such
//! exchange: the unit a device contributes and waits for.
//!
//! # Contract
//!
//! Every reduction has an identity: the step's sequence number on the device's channel
//! (its envelope) and the round within the step. Contributions are collected per round;
//! when every local device's is in, each segment's groups' contributions are summed in
//! `f64` in replica order by the kernel the session's allreduce uses ([`crate::combine`]),
//! the partial sums of the whole round are summed across instances in one collective
//! ([`Instances::allreduce_sum`]: every instance reaches every round, in order), and every
//! member gets its groups' combinations, segment after segment, under its own step sequence
//! number and that round. A contribution that arrives again (the
//! device re-sent it: its answer was late or lost) is answered again with the same round's
//! combination, which the device applies only if it is still waiting for that round, so a
//! duplicate can never stand in for a later round's answer. A contribution of another length
//! than its round's plan, or of a partial `f32` element, is an error, never truncated.
//!
//! # What a device may claim
//!
//! A device numbers its rounds 0, 1, 2, … and contributes to a round only once the round
//! before is answered (it waits for the answer). So the driver accepts from each device one
//! new round only: the one after the last it contributed to, and none while its
//! contribution to an open round is unanswered. A round beyond that is a device out of
//! turn ([`RuntimeError::ReductionRound`], naming it, the round and the one allowed); an
//! earlier round is a late duplicate, answered again if its answer is still kept, else
//! ignored; a round past the step's last (rounds per batch × batches) is out of turn too.
//! A device that answers the step `Done` before it contributed to every round is an error
//! too ([`RuntimeError::ReductionSkipped`]): its peers would wait for it forever.
//! Only the last combined round's answers are kept: every device has applied the ones
//! before (it contributed to a later round). The driver therefore holds at most one open
//! round's contributions and one round's answers, whatever numbers a device sends.
//!
//! # Silence
//!
//! A device silent for its channel's deadline (timed from the first poll that finds it
//! silent, so that no clock is read per message) is sent the step again (it answers with its
//! reply or its pending contribution; it never runs the step twice); after
//! [`STEP_ATTEMPTS`] sends, the channel says what the device is doing
//! ([`Channel::silence`]): a device still working on its part is waited for, up to the
//! busy deadline; anything else is reported as it is. A device waiting for its peers'
//! contributions is silent by design and never counted — nor looked at: what it sends
//! meanwhile (its contribution again, or an error) is read once its round is answered,
//! which its peers' contributions decide.

use std::time::{Duration, Instant};

use tessera_core::grouping::ReplicaGrouping;
use tessera_core::program::Program;
use tessera_core::wire::{Combined, Contribution, ReduceOp, Request, RequestKind, Response};

use super::{RuntimeError, StepFault};
use crate::combine::{round_f32, sum_f32, CombineError};
use crate::instance::Instances;
use crate::transport::{Channel, Reply, Silence};

/// How long the driver polls one channel before moving to the next.
const POLL: Duration = Duration::from_millis(1);
/// Sends of the step to a silent device before the driver asks what it is doing.
const STEP_ATTEMPTS: u32 = 8;

/// One device's part in the step.
struct Member {
    /// The step's sequence number on this device's channel.
    seq: u32,
    /// The device's global replica.
    replica: usize,
    /// It answered the step.
    done: bool,
    /// When a poll first found it silent since it was last heard from (or since its round
    /// was last answered: it waits by design until then); `None` while it is being heard.
    /// Silence is timed from that poll, so no clock is read per message.
    quiet_since: Option<Instant>,
    /// Sends of the step since it was last heard from.
    resent: u32,
    /// Its contribution to the open round is in: it waits for its peers.
    waiting: bool,
    /// The round it may contribute to next (module doc).
    next_round: u32,
    /// What its `RunStep` reports moved in place (sent again as it was first sent).
    moved: InPlace,
}

/// What a device's `RunStep` reports the host moved in place and did not report otherwise:
/// the step's inputs (`fed`) and the anchors of the device's last step (`took`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct InPlace {
    pub fed: bool,
    pub took: bool,
}

impl InPlace {
    /// The `RunStep` that reports it.
    fn run_step(self) -> Request<'static> {
        Request::RunStep {
            fed: self.fed,
            took: self.took,
        }
    }
}

/// What the driver judges a contribution by before it keeps the message: its round, its
/// operation and its length (decoded once; the bytes are read again only to be summed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Heading {
    round: u32,
    op: ReduceOp,
    bytes: usize,
}

impl Heading {
    fn of(c: &Contribution<'_>) -> Self {
        Self {
            round: c.round,
            op: c.op,
            bytes: c.data.len(),
        }
    }
}

/// One device's share of the open round: its member index and the message carrying it (its
/// bytes are not copied out: the message is kept until the round is combined).
struct Share {
    from: usize,
    message: Reply,
}

impl Share {
    /// The contribution's bytes (checked when it was collected).
    fn data(&self) -> &[u8] {
        self.message.contribution().map_or(&[], |c| c.data)
    }
}

/// The round under way: the contributions in so far.
struct OpenRound {
    round: u32,
    op: ReduceOp,
    /// Bytes every contribution carries (its plan's).
    len: usize,
    contributions: Vec<Share>,
    /// Which members' contributions are in, by member index: a repeat is found in O(1),
    /// so a round costs O(members), not O(members²).
    present: Vec<bool>,
}

/// The last combined round: each member's answer, for devices that ask again.
struct Answered {
    round: u32,
    answers: Answers,
}

/// A round's answers: one per distinct answer (members in the same group of every segment
/// get the same bytes: under `All`, one for every member), and which one each member gets,
/// indexed like the members.
#[derive(Debug, PartialEq)]
struct Answers {
    distinct: Vec<Vec<u8>>,
    of_member: Vec<usize>,
}

impl Answers {
    /// Member `i`'s answer.
    fn of(&self, i: usize) -> Option<&[u8]> {
        let at = *self.of_member.get(i)?;
        self.distinct.get(at).map(Vec::as_slice)
    }
}

/// One exchange of a batch: its segments, in the order they lie in its message.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Plan {
    /// One per round it carries: the grouping it combines under and its bytes.
    pub segments: Vec<(ReplicaGrouping, usize)>,
}

impl Plan {
    /// Bytes of a contribution to it.
    fn bytes(&self) -> usize {
        self.segments.iter().map(|&(_, b)| b).sum()
    }
}

/// The plan of each exchange of one batch of `program` on `replicas` replicas, cut as the
/// devices of `channels` cut them: by core's rule for the smallest frame among them (they
/// are of one placement, so of one frame).
pub(super) fn plans(
    program: &Program,
    replicas: usize,
    channels: &[Channel],
) -> Result<Vec<Plan>, RuntimeError> {
    let max = channels
        .iter()
        .map(|c| c.limits().max_chunk())
        .min()
        .unwrap_or(usize::MAX);
    let exchanges = program.exchanges(replicas, max);
    let rounds = exchanges.rounds().to_vec();
    exchanges
        .map(|e| {
            let segments = rounds
                .get(e.rounds)
                .unwrap_or_default()
                .iter()
                .map(|r| {
                    let v = r.variable();
                    let grouping = *program.settings(usize::from(v), replicas)?.grouping();
                    Ok((grouping, program.round_bytes(v)))
                })
                .collect::<Result<Vec<_>, RuntimeError>>()?;
            Ok(Plan { segments })
        })
        .collect()
}

/// What the step's reduction schedule says.
struct Schedule<'a> {
    /// One plan per exchange of a batch.
    rounds: &'a [Plan],
    /// Rounds of the whole step.
    last: u32,
}

impl Schedule<'_> {
    /// The plan round `round` follows, if the step has that round.
    fn plan(&self, round: u32) -> Option<&Plan> {
        if round >= self.last {
            return None;
        }
        self.rounds
            .get((round as usize).checked_rem(self.rounds.len())?)
    }
}

/// Runs one `RunStep` of `batches` batches on every channel, telling device `i` what the
/// host moved in place for it (`moved[i]`); `rounds` (one plan per
/// exchange of a batch, its groupings over the channels' global replica ids) say which
/// devices each segment of each round combines. `fault`, for tests, makes one device fail the step (see [`StepFault`]).
pub(super) fn run_step(
    channels: &mut [Channel],
    moved: &[InPlace],
    rounds: &[Plan],
    batches: u32,
    instances: &dyn Instances,
    fault: Option<StepFault>,
) -> Result<(), RuntimeError> {
    let started = Instant::now();
    debug_assert_eq!(moved.len(), channels.len(), "a report per channel");
    let mut members = Vec::with_capacity(channels.len());
    for (i, c) in channels.iter_mut().enumerate() {
        let moved = moved.get(i).copied().unwrap_or_default();
        members.push(Member {
            seq: c.submit(&moved.run_step())?,
            moved,
            replica: c.replica() as usize,
            done: false,
            quiet_since: None,
            resent: 0,
            waiting: false,
            next_round: 0,
        });
    }
    let mut step = Step {
        schedule: Schedule {
            rounds,
            last: u32::try_from(rounds.len())
                .unwrap_or(u32::MAX)
                .saturating_mul(batches),
        },
        members,
        open: None,
        answered: None,
        instances,
        fault,
    };
    // Members still running: the loop ends when none is, without a scan per pass.
    let mut running = step.members.len();
    while running > 0 {
        for i in 0..step.members.len() {
            if step.members[i].done {
                continue;
            }
            let Some(reply) = listen(&mut channels[i], &mut step.members[i], started)? else {
                continue;
            };
            if let Some(heading) = reply.contribution().as_ref().map(Heading::of) {
                step.contributed(channels, i, heading, reply)?;
                continue;
            }
            let member = &mut step.members[i];
            match reply.response() {
                Response::Done => {
                    finished_every_round(member, step.schedule.last)?;
                    member.done = true;
                    running -= 1;
                    channels[i].recycle(reply);
                }
                Response::Error { request, code } => {
                    return Err(crate::transport::TransportError::Device {
                        replica: member.replica as u32,
                        request,
                        code,
                    }
                    .into())
                }
                other => {
                    let request = member.moved.run_step();
                    return Err(channels[i].unexpected(&request, &other).into());
                }
            }
        }
    }
    Ok(())
}

/// A step under way on this instance's devices.
struct Step<'s> {
    schedule: Schedule<'s>,
    members: Vec<Member>,
    /// The round whose contributions are coming in.
    open: Option<OpenRound>,
    /// The last round combined, for devices that ask again.
    answered: Option<Answered>,
    instances: &'s dyn Instances,
    fault: Option<StepFault>,
}

impl Step<'_> {
    /// Takes member `i`'s contribution (`message`, headed `heading`) by the module's rules:
    /// answered again, ignored, refused, or collected — and once every member's is in, the
    /// round is combined.
    fn contributed(
        &mut self,
        channels: &mut [Channel],
        i: usize,
        heading: Heading,
        message: Reply,
    ) -> Result<(), RuntimeError> {
        let Heading { round, op, .. } = heading;
        let member = &mut self.members[i];
        let again = self
            .answered
            .as_ref()
            .filter(|a| a.round == round)
            .and_then(|a| a.answers.of(i));
        if let Some(answer) = again {
            // A re-sent contribution: answer it again, under its identity.
            return Ok(channels[i].publish(&Combined {
                step: member.seq,
                round,
                data: answer,
            })?);
        }
        match judge(round, member.next_round, member.waiting, self.schedule.last) {
            Heard::New => member.next_round = round.saturating_add(1),
            // Its answer is gone: the device has applied it already.
            Heard::Late => return Ok(()),
            Heard::OutOfTurn => {
                return Err(RuntimeError::ReductionRound {
                    replica: member.replica as u32,
                    round,
                    expected: member.next_round,
                })
            }
        }
        member.waiting = true;
        let replica = member.replica;
        let members = self.members.len();
        // `judge` let in only rounds the step has.
        let len = self.schedule.plan(round).map_or(0, Plan::bytes);
        let open = self.open.get_or_insert_with(|| OpenRound {
            round,
            op,
            len,
            contributions: Vec::with_capacity(members),
            present: vec![false; members],
        });
        collect(open, i, replica, heading, message)?;
        if open.contributions.len() < members {
            return Ok(());
        }
        match self.open.take() {
            Some(round) => self.combine_and_answer(channels, round, replica),
            None => Ok(()),
        }
    }

    /// Combines `round` (every local device's contribution is in), across instances too,
    /// and answers every member with its group's combination; `last` is the replica whose
    /// contribution completed it.
    fn combine_and_answer(
        &mut self,
        channels: &mut [Channel],
        round: OpenRound,
        last: usize,
    ) -> Result<(), RuntimeError> {
        let out_of_step = RuntimeError::ReductionRound {
            replica: last as u32,
            round: round.round,
            expected: self.schedule.last,
        };
        let plan = self.schedule.plan(round.round).ok_or(out_of_step)?;
        let answers = combine(&round, &self.members, plan, self.instances)?;
        // The round's devices have waited by design until now: their silence starts over.
        for Share { from, message } in round.contributions {
            // Summed: the contribution's buffer carries its device's answer.
            channels[from].recycle(message);
            let m = &mut self.members[from];
            let answer = answers.of(from).unwrap_or_default();
            let faulty = StepFault {
                replica: m.replica as u32,
                round: round.round,
            };
            let answer = if self.fault == Some(faulty) {
                &answer[..answer.len().saturating_sub(4)]
            } else {
                answer
            };
            channels[from].publish(&Combined {
                step: m.seq,
                round: round.round,
                data: answer,
            })?;
            m.waiting = false;
            m.quiet_since = None;
        }
        // Every device applied the earlier rounds' answers (it took part in this one): only
        // this round's can still be asked for again.
        self.answered = Some(Answered {
            round: round.round,
            answers,
        });
        Ok(())
    }
}

/// The next message from `member`'s device within a poll, handling its silence (module
/// doc): `None` when there is nothing to act on yet.
fn listen(
    channel: &mut Channel,
    member: &mut Member,
    started: Instant,
) -> Result<Option<Reply>, RuntimeError> {
    // A device waiting for its peers has nothing to say until they contribute (at most its
    // contribution again, answered once the round is): wait on the devices the round still
    // needs. Its silence is by design; its clock restarts when the round is answered.
    if member.waiting {
        return Ok(None);
    }
    if let Some(reply) = channel.poll(member.seq, POLL)? {
        member.quiet_since = None;
        member.resent = 0;
        return Ok(Some(reply));
    }
    let since = *member.quiet_since.get_or_insert_with(Instant::now);
    if since.elapsed() <= channel.deadline() {
        return Ok(None);
    }
    if member.resent >= STEP_ATTEMPTS {
        match channel.silence(RequestKind::RunStep, started, member.resent) {
            Silence::Working => {
                member.quiet_since = Some(Instant::now());
                return Ok(None);
            }
            Silence::Retry => {}
            Silence::Report(error) => {
                tracing::warn!(replica = member.replica, %error, "device silent during a step");
                return Err(error.into());
            }
        }
    }
    tracing::debug!(
        replica = member.replica,
        "device silent during a step: sending the step again"
    );
    channel.resend(member.seq, &member.moved.run_step())?;
    member.resent += 1;
    member.quiet_since = Some(Instant::now());
    Ok(None)
}

/// Adds member `from`'s contribution (`message`, headed `heading`) to `open` (once: a
/// repeat is already in), checking it against the round's first.
fn collect(
    open: &mut OpenRound,
    from: usize,
    replica: usize,
    heading: Heading,
    message: Reply,
) -> Result<(), RuntimeError> {
    let replica = replica as u32;
    let Heading { round, op, bytes } = heading;
    if open.round != round {
        return Err(RuntimeError::ReductionRound {
            replica,
            round,
            expected: open.round,
        });
    }
    if open.op != op {
        return Err(RuntimeError::ReductionOps { replica, round });
    }
    if !bytes.is_multiple_of(4) {
        return Err(RuntimeError::ReductionElements {
            replica,
            round,
            bytes,
        });
    }
    if open.len != bytes {
        return Err(RuntimeError::ReductionLength {
            replica,
            round,
            expected: open.len,
            actual: bytes,
        });
    }
    if let Some(present @ false) = open.present.get_mut(from) {
        *present = true;
        open.contributions.push(Share { from, message });
    }
    Ok(())
}

/// Checks that `member`, which answered its step `Done`, contributed to each of the step's
/// `rounds`: one that ended early would leave its peers waiting for a round it will never
/// join (the step would never end).
fn finished_every_round(member: &Member, rounds: u32) -> Result<(), RuntimeError> {
    if member.next_round == rounds {
        return Ok(());
    }
    Err(RuntimeError::ReductionSkipped {
        replica: member.replica as u32,
        round: member.next_round,
        rounds,
    })
}

/// A contribution to a round no answer is kept for, as the rule in the module doc sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Heard {
    /// The round the device may contribute to next: collect it.
    New,
    /// An earlier round (or the open one again): nothing to do.
    Late,
    /// A round the device cannot have reached.
    OutOfTurn,
}

/// Judges a contribution to `round` from a device that may contribute to `next` next, and
/// whose contribution to an open round is unanswered (`waiting`), in a step of `rounds`
/// rounds.
fn judge(round: u32, next: u32, waiting: bool, rounds: u32) -> Heard {
    if round < next {
        Heard::Late
    } else if round == next && !waiting && round < rounds {
        Heard::New
    } else {
        Heard::OutOfTurn
    }
}

/// Each member's answer to one round, by the rules of [`crate::combine`]: for each segment
/// of `plan`, each group's local contributions summed in `f64` in replica order (not in
/// the order their messages arrived, which races); the partial sums of every segment summed
/// across instances in one collective (an instance with no member of a group adds −0.0, the
/// empty sum); then each segment divided by its group size for a mean and rounded once to
/// `f32`. A member's answer is its groups' segments one after another; members in the same
/// groups share one (see [`Answers`]).
fn combine(
    round: &OpenRound,
    members: &[Member],
    plan: &Plan,
    instances: &dyn Instances,
) -> Result<Answers, RuntimeError> {
    let group_of = |grouping: &ReplicaGrouping, replica: usize| {
        grouping
            .group_of(replica)
            .map_err(|_| RuntimeError::ReductionGroup {
                replica: replica as u32,
                round: round.round,
            })
    };
    let segments = plan.segments.len();
    // Each member's group in every segment, worked out once: `groups[m × segments + s]`.
    let mut groups = Vec::with_capacity(members.len() * segments);
    for m in members {
        for (grouping, _) in &plan.segments {
            groups.push(group_of(grouping, m.replica)?);
        }
    }
    let key = |m: usize| {
        let at = m * segments;
        groups.get(at..at + segments).unwrap_or_default()
    };
    // The contributions in replica order (each group's sum runs in that order), each with
    // its member.
    let mut contributions: Vec<(usize, usize, &[u8])> = (round.contributions.iter())
        .map(|c| (members[c.from].replica, c.from, c.data()))
        .collect();
    contributions.sort_unstable_by_key(|&(replica, _, _)| replica);
    // Every segment's groups' sums, one segment after another.
    let group = |c: usize, s: usize| {
        let (_, from, _) = contributions.get(c)?;
        key(*from).get(s).copied()
    };
    let mut partial = Vec::new();
    let (mut at, mut order, mut inputs, mut of_group) = (0, Vec::new(), Vec::new(), Vec::new());
    for (s, (grouping, bytes)) in plan.segments.iter().enumerate() {
        let (len, count) = (bytes / 4, grouping.num_groups());
        let base = partial.len();
        partial.resize(base + count * len, 0f64);
        // The contributions by group; a stable sort keeps replica order within each.
        order.clear();
        order.extend(0..contributions.len());
        order.sort_by_key(|&c| group(c, s));
        let mut next = order.iter().peekable();
        for (g, sums) in partial[base..].chunks_mut(len.max(1)).enumerate() {
            inputs.clear();
            of_group.clear();
            while let Some(&c) = next.next_if(|&&c| group(c, s) == Some(g)) {
                let (replica, _, data) = contributions[c];
                inputs.push(data.get(at..at + bytes).unwrap_or_default());
                of_group.push((replica, data));
            }
            sum_f32(sums, &inputs).map_err(|e| length(e, &of_group, round))?;
        }
        at += bytes;
    }
    instances.allreduce_sum(&mut partial)?;
    // Each segment's answer per group.
    let mut by_segment = Vec::with_capacity(segments);
    let mut base = 0;
    for (grouping, bytes) in &plan.segments {
        let len = bytes / 4;
        let divisor = match round.op {
            ReduceOp::Mean => grouping.group_size() as f64,
            ReduceOp::Sum => 1.0,
        };
        let mut by_group = Vec::with_capacity(grouping.num_groups());
        for sums in partial[base..base + grouping.num_groups() * len].chunks(len.max(1)) {
            let mut out = vec![0u8; sums.len() * 4];
            // `out` holds what `sums` does: the kernel refuses nothing here.
            round_f32(sums, divisor, &mut out).map_err(|e| length(e, &[], round))?;
            by_group.push(out);
        }
        by_segment.push(by_group);
        base += grouping.num_groups() * len;
    }
    // A member's groups, segment by segment, name its answer: each distinct one is built
    // once. Members sorted by their groups lie next to the others that share them
    // (O(members × segments × log members) a round, whatever the groupings; no hashing).
    let mut by_key: Vec<usize> = (0..members.len()).collect();
    by_key.sort_unstable_by(|&a, &b| key(a).cmp(key(b)));
    let mut answers = Answers {
        distinct: Vec::new(),
        of_member: vec![0; members.len()],
    };
    let mut last: Option<&[usize]> = None;
    for m in by_key {
        let groups = key(m);
        if last != Some(groups) {
            let mut answer = Vec::with_capacity(at);
            for (by_group, &g) in by_segment.iter().zip(groups) {
                answer.extend_from_slice(by_group.get(g).map_or(&[][..], Vec::as_slice));
            }
            answers.distinct.push(answer);
            last = Some(groups);
        }
        answers.of_member[m] = answers.distinct.len() - 1;
    }
    Ok(answers)
}

/// A contribution the kernel refused: of another length than its round (`collect` checks
/// every one against the round's first and whole elements, so this is a broken check).
fn length(e: CombineError, group: &[(usize, &[u8])], round: &OpenRound) -> RuntimeError {
    let input = match e {
        CombineError::Length { input, .. } => group.get(input),
        CombineError::Overflow | CombineError::Dtype(_) => None,
    };
    let (replica, actual) = input.map_or((0, 0), |&(replica, data)| (replica, data.len()));
    RuntimeError::ReductionLength {
        replica: replica as u32,
        round: round.round,
        expected: round.len,
        actual,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Collects `message` as the driver does: judged by its heading.
    fn collect_message(
        open: &mut OpenRound,
        from: usize,
        replica: usize,
        message: Reply,
    ) -> Result<(), RuntimeError> {
        let heading = Heading::of(&message.contribution().expect("a contribution"));
        collect(open, from, replica, heading, message)
    }

    /// A contribution to `round`: `data`, to combine by `op`.
    fn share(round: u32, op: ReduceOp, data: &[u8]) -> Reply {
        Reply::from_contribution(Contribution {
            step: 0,
            round,
            op,
            data,
        })
    }

    /// Catches a driver that keeps a contribution for any round a device names: a device
    /// sending rounds 0, 1, …, u32::MAX without waiting grew the map by one entry each.
    #[test]
    fn a_device_that_runs_ahead_is_out_of_turn() {
        assert_eq!(judge(0, 0, false, 4), Heard::New);
        assert_eq!(judge(u32::MAX, 0, false, 4), Heard::OutOfTurn);
        assert_eq!(judge(2, 1, false, 4), Heard::OutOfTurn, "a round skipped");
        assert_eq!(
            judge(1, 1, true, 4),
            Heard::OutOfTurn,
            "a new round before the open one is answered"
        );
    }

    /// Catches a driver that fails a step for a duplicate (a device re-sends its
    /// contribution when an answer is late): an earlier or still open round is only late.
    #[test]
    fn repeated_rounds_are_late_not_errors() {
        assert_eq!(judge(0, 1, true, 4), Heard::Late, "the open round again");
        assert_eq!(judge(0, 2, false, 4), Heard::Late, "an answered round");
        assert_eq!(judge(1, 1, false, 4), Heard::New);
    }

    /// Catches a driver that lets devices counting rounds in order run a step forever: a
    /// round past the step's last is out of turn, even in order.
    #[test]
    fn no_round_past_the_steps_last() {
        assert_eq!(judge(3, 3, false, 4), Heard::New);
        assert_eq!(judge(4, 4, false, 4), Heard::OutOfTurn);
        assert_eq!(
            judge(0, 0, false, 0),
            Heard::OutOfTurn,
            "a step without rounds"
        );
    }

    #[test]
    fn the_error_names_the_device_the_round_and_the_cap() {
        let e = RuntimeError::ReductionRound {
            replica: 3,
            round: 4_000_000_000,
            expected: 2,
        };
        let message = e.to_string();
        for part in ["device 3", "4000000000", "round 2"] {
            assert!(message.contains(part), "{message}");
        }
    }

    /// Catches contributions of one round that differ in length or operation being
    /// combined anyway (truncated to the shortest, or summed where a mean was asked).
    #[test]
    fn contributions_must_match_the_rounds_first() {
        let mut open = OpenRound {
            round: 2,
            op: ReduceOp::Mean,
            len: 8,
            contributions: Vec::new(),
            present: vec![false; 8],
        };
        collect_message(&mut open, 0, 0, share(2, ReduceOp::Mean, &[0; 8])).unwrap();
        collect_message(&mut open, 0, 0, share(2, ReduceOp::Mean, &[0; 8])).unwrap();
        assert_eq!(open.contributions.len(), 1, "a repeat is in once");
        assert!(matches!(
            collect_message(&mut open, 1, 1, share(2, ReduceOp::Mean, &[0; 4])),
            Err(RuntimeError::ReductionLength {
                replica: 1,
                expected: 8,
                actual: 4,
                ..
            })
        ));
        assert!(matches!(
            collect_message(&mut open, 1, 1, share(2, ReduceOp::Sum, &[0; 8])),
            Err(RuntimeError::ReductionOps {
                replica: 1,
                round: 2
            })
        ));
    }

    /// The members of a round, replica `i` at index `i`.
    fn members(n: usize) -> Vec<Member> {
        (0..n)
            .map(|replica| Member {
                seq: 0,
                replica,
                done: false,
                quiet_since: None,
                resent: 0,
                waiting: true,
                next_round: 0,
                moved: InPlace::default(),
            })
            .collect()
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

    /// Round 0, combined by `op`, with every contribution in: member `from`'s `values` for
    /// each `(from, values)`, arrived in that order.
    fn arrived(op: ReduceOp, contributions: &[(usize, Vec<f32>)]) -> OpenRound {
        let len = contributions.first().map_or(0, |(_, v)| v.len() * 4);
        OpenRound {
            round: 0,
            op,
            len,
            present: vec![true; contributions.len()],
            contributions: (contributions.iter())
                .map(|(from, values)| Share {
                    from: *from,
                    message: share(0, op, &f32s(values)),
                })
                .collect(),
        }
    }

    /// Catches a round summed in the order its contributions arrived: the device threads
    /// race, and 1e30 + 1 − 1e30 is 0 in one order and 1 in another, so two runs of one
    /// job could end with different weights.
    #[test]
    fn a_round_sums_in_replica_order_whatever_the_arrival() {
        let values = [1e30f32, -1e30, 1.0];
        let grouping = ReplicaGrouping::new(3, 1, 3).unwrap();
        let sum_arriving = |order: [usize; 3]| {
            let order = order.map(|from| (from, vec![values[from]]));
            let round = arrived(ReduceOp::Sum, &order);
            let answers = combine(
                &round,
                &members(3),
                &one(grouping, 4),
                &crate::instance::Single,
            );
            each(&answers.unwrap(), 3)
        };
        let in_order = sum_arriving([0, 1, 2]);
        assert_eq!(in_order, vec![f32s(&[1.0]); 3]);
        for order in [[2, 0, 1], [1, 2, 0], [0, 2, 1]] {
            assert_eq!(sum_arriving(order), in_order, "arrival order {order:?}");
        }
    }

    /// Catches a round that starts its sums at +0.0: gradients that are all −0.0 came back
    /// +0.0, unlike the same sum in a session allreduce.
    #[test]
    fn a_sum_of_negative_zeros_stays_negative() {
        let round = arrived(ReduceOp::Mean, &[(0, vec![-0.0]), (1, vec![-0.0])]);
        let grouping = ReplicaGrouping::new(2, 1, 2).unwrap();
        let plan = one(grouping, 4);
        let answers = combine(&round, &members(2), &plan, &crate::instance::Single).unwrap();
        assert_eq!(each(&answers, 2), vec![f32s(&[-0.0]); 2]);
    }

    /// Each of the first `n` members' answers.
    fn each(answers: &Answers, n: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| answers.of(i).expect("an answer per member").to_vec())
            .collect()
    }

    /// Catches answers shared too widely (every member given the first group's sum) or
    /// built once per member: groups `[0, 1]` and `[2, 3]` get their own sums, built
    /// once each.
    #[test]
    fn members_share_an_answer_only_within_their_groups() {
        let ones: Vec<_> = (0..4).map(|from| (from, vec![from as f32 + 1.0])).collect();
        let round = arrived(ReduceOp::Sum, &ones);
        let pairs = ReplicaGrouping::new(4, 1, 2).unwrap();
        let plan = one(pairs, 4);
        let answers = combine(&round, &members(4), &plan, &crate::instance::Single).unwrap();
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
        let round = arrived(ReduceOp::Sum, &twos);
        let all = ReplicaGrouping::new(4, 1, 4).unwrap();
        let pairs = ReplicaGrouping::new(4, 1, 2).unwrap();
        let across = ReplicaGrouping::new(4, 2, 2).unwrap();
        let two = |first, second| Plan {
            segments: vec![(first, 4), (second, 4)],
        };
        let combined =
            |plan: &Plan| combine(&round, &members(4), plan, &crate::instance::Single).unwrap();
        let crossing = combined(&two(pairs, across));
        assert_eq!(
            each(&crossing, 4),
            [[3.0, 40.0], [3.0, 60.0], [7.0, 40.0], [7.0, 60.0]].map(|a| f32s(&a))
        );
        assert_eq!(crossing.distinct.len(), 4);
        let nested = combined(&two(all, pairs));
        assert_eq!(
            each(&nested, 4),
            [[10.0, 30.0], [10.0, 30.0], [10.0, 70.0], [10.0, 70.0]].map(|a| f32s(&a))
        );
        assert_eq!(nested.distinct.len(), 2);
    }

    /// Catches a step that never ends: a device answering `Done` before it contributed to
    /// each of the step's rounds leaves its peers waiting for it.
    #[test]
    fn a_device_done_before_its_last_round_is_an_error() {
        let mut member = members(1).remove(0);
        member.next_round = 4;
        assert!(finished_every_round(&member, 4).is_ok());
        member.next_round = 3;
        let e = finished_every_round(&member, 4).unwrap_err();
        assert!(matches!(
            e,
            RuntimeError::ReductionSkipped {
                replica: 0,
                round: 3,
                rounds: 4
            }
        ));
        assert!(e.to_string().contains("round 3"), "{e}");
    }

    /// Catches a contribution of a partial element summed as if whole (its last bytes
    /// dropped by the kernel's element-wise walk).
    #[test]
    fn contributions_are_whole_elements() {
        let mut open = OpenRound {
            round: 0,
            op: ReduceOp::Sum,
            len: 6,
            contributions: Vec::new(),
            present: vec![false; 8],
        };
        assert!(matches!(
            collect_message(&mut open, 0, 5, share(0, ReduceOp::Sum, &[0; 6])),
            Err(RuntimeError::ReductionElements {
                replica: 5,
                round: 0,
                bytes: 6
            })
        ));
    }
}
