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
//! (its envelope) and the round within the step. Contributions are collected per round
//! and folded as they arrive, each segment's groups in `f64` in replica order, by the
//! kernel the session's allreduce uses (the `round` module's rules); when every local
//! device's is in, the partial sums of the whole round are summed across instances in one
//! collective ([`Instances::allreduce_sum`]: every instance reaches every round, in order),
//! and every member gets its groups' combinations, segment after segment, under its own
//! step sequence number and that round. A contribution that arrives again (the
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

use tessera_core::program::lanes::lane_bytes;
use tessera_core::program::Program;
use tessera_core::wire::{Combined, ProgramRequest, Request, RequestKind, Response};

use super::round::{Answers, Heading, OpenRound, Plan};
use super::{RuntimeError, StepFault};
use crate::instance::Instances;
use crate::trace::traced;
use crate::transport::{Channel, Reply, Silence};

/// How long the driver polls one channel before moving to the next.
const POLL: Duration = Duration::from_millis(1);
/// Sends of the step to a silent device before the driver asks what it is doing.
const STEP_ATTEMPTS: u32 = 8;

/// One device's part in the step.
struct Member {
    /// The step's sequence number on this device's channel.
    seq: u32,
    /// The device's global replica (its first lane's).
    replica: usize,
    /// Its lanes: replicas `replica ..` (core's
    /// [`lanes`](tessera_core::program::lanes)), whose parts its contribution carries side
    /// by side and whose one answer it takes.
    lanes: usize,
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

impl Member {
    /// Sends the step's `RunStep` on `channel`, reporting what moved in place for it.
    fn start(channel: &mut Channel, moved: InPlace) -> Result<Self, RuntimeError> {
        Ok(Member {
            seq: channel.submit(&moved.run_step())?,
            moved,
            replica: channel.replica() as usize,
            lanes: channel.lanes(),
            done: false,
            quiet_since: None,
            resent: 0,
            waiting: false,
            next_round: 0,
        })
    }

    /// Its global replicas: its lanes.
    fn replicas(&self) -> std::ops::Range<usize> {
        self.replica..self.replica + self.lanes
    }
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
        Request::Program(ProgramRequest::RunStep {
            fed: self.fed,
            took: self.took,
        })
    }
}

/// The last combined round: each member's answer, for devices that ask again.
struct Answered {
    round: u32,
    answers: Answers,
}

/// The plan of each exchange of one batch of `program` on `replicas` replicas, cut as the
/// devices of `channels` cut them: by core's rule for the smallest frame among them (they
/// are of one placement, so of one frame), shared by a device's lanes (core's
/// [`lane_bytes`]: a contribution carries every lane's part).
pub(super) fn plans(
    program: &Program,
    replicas: usize,
    channels: &[Channel],
) -> Result<Vec<Plan>, RuntimeError> {
    let max = channels
        .iter()
        .map(|c| lane_bytes(c.limits().max_chunk(), c.lanes()))
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
    /// The exchange of a batch round `round` is, and the plan it follows, if the step has
    /// that round.
    fn exchange(&self, round: u32) -> Option<(usize, &Plan)> {
        if round >= self.last {
            return None;
        }
        let exchange = (round as usize).checked_rem(self.rounds.len())?;
        Some((exchange, self.rounds.get(exchange)?))
    }
}

/// Runs one `RunStep` of `batches` batches on every channel, telling device `i` what the
/// host moved in place for it (`moved[i]`); `rounds` (one plan per exchange of a batch,
/// its groupings over the channels' global replica ids) say which devices each segment of
/// each round combines. `fault`, for tests, makes one device fail the step (see
/// [`StepFault`]). `kept` holds, by exchange, its last round once answered, to be opened
/// again ([`OpenRound::again`]); it grows to one per exchange.
pub(super) fn run_step(
    channels: &mut [Channel],
    moved: &[InPlace],
    (rounds, kept): (&[Plan], &mut Vec<Option<OpenRound>>),
    batches: u32,
    instances: &dyn Instances,
    fault: Option<StepFault>,
) -> Result<(), RuntimeError> {
    let _driving = traced!("drive", batches);
    let started = Instant::now();
    if moved.len() != channels.len() {
        return Err(RuntimeError::Channels {
            run: moved.len(),
            replicas: channels.len(),
        });
    }
    let members = channels
        .iter_mut()
        .zip(moved)
        .map(|(c, &moved)| Member::start(c, moved))
        .collect::<Result<Vec<_>, _>>()?;
    let mut step = Step {
        schedule: Schedule {
            rounds,
            last: u32::try_from(rounds.len())
                .unwrap_or(u32::MAX)
                .saturating_mul(batches),
        },
        members,
        open: None,
        kept,
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
                Some(Response::Done) => {
                    finished_every_round(member, step.schedule.last)?;
                    member.done = true;
                    running -= 1;
                    channels[i].recycle(reply);
                }
                Some(Response::Error { request, code }) => {
                    return Err(crate::transport::TransportError::Device {
                        replica: member.replica as u32,
                        request,
                        code,
                    }
                    .into())
                }
                Some(other) => {
                    let request = member.moved.run_step();
                    return Err(channels[i].unexpected(&request, &other).into());
                }
                None => {
                    return Err(crate::transport::TransportError::NotAReply {
                        replica: member.replica as u32,
                        seq: member.seq,
                    }
                    .into())
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
    /// By exchange, its last round answered (see [`run_step`]).
    kept: &'s mut Vec<Option<OpenRound>>,
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
        // `judge` let in only rounds the step has.
        let out_of_step = RuntimeError::ReductionRound {
            replica: replica as u32,
            round,
            expected: self.schedule.last,
        };
        let (exchange, plan) = self.schedule.exchange(round).ok_or(out_of_step)?;
        let open = match &mut self.open {
            Some(open) => open,
            empty => {
                let replicas: Vec<_> = self.members.iter().map(Member::replicas).collect();
                let kept = self.kept.get_mut(exchange).and_then(Option::take);
                let again = kept.and_then(|k| k.again(round, op, &replicas));
                let open = match again {
                    Some(open) => open,
                    None => OpenRound::open_lanes(round, op, plan, &replicas)?,
                };
                empty.insert(open)
            }
        };
        // Folded: the contribution's buffer carries its device's answer.
        let folding = traced!("fold", round, replica);
        open.collect(plan, i, replica, heading, message, |m, folded| {
            channels[m].recycle(folded)
        })?;
        drop(folding);
        if !open.complete() {
            return Ok(());
        }
        match self.open.take() {
            Some(mut open) => {
                let combining = traced!("combine", round);
                let answers = open.answers(plan, self.instances)?;
                drop(combining);
                if self.kept.len() <= exchange {
                    self.kept.resize_with(exchange + 1, || None);
                }
                self.kept[exchange] = Some(open);
                let _answering = traced!("answer", round);
                self.answer(channels, round, answers)
            }
            None => Ok(()),
        }
    }

    /// Answers every member of `round` (combined, across instances too) with its groups'
    /// combination.
    fn answer(
        &mut self,
        channels: &mut [Channel],
        round: u32,
        answers: Answers,
    ) -> Result<(), RuntimeError> {
        // The round's devices have waited by design until now: their silence starts over.
        for (from, m) in self.members.iter_mut().enumerate() {
            // Every member of the round has an answer: a missing one is a broken round.
            let answer = answers.of(from).ok_or(RuntimeError::NotInRound {
                replica: m.replica as u32,
                round,
            })?;
            let lanes = m.replicas();
            let faulty = (self.fault)
                .is_some_and(|f| f.round == round && lanes.contains(&(f.replica as usize)));
            let answer = if faulty {
                &answer[..answer.len().saturating_sub(4)]
            } else {
                answer
            };
            channels[from].publish(&Combined {
                step: m.seq,
                round,
                data: answer,
            })?;
            m.waiting = false;
            m.quiet_since = None;
        }
        // Every device applied the earlier rounds' answers (it took part in this one): only
        // this round's can still be asked for again.
        self.answered = Some(Answered { round, answers });
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
    let waiting = traced!("wait", replica = member.replica);
    let heard = channel.poll(member.seq, POLL)?;
    drop(waiting);
    if let Some(reply) = heard {
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

#[cfg(test)]
mod tests {
    use super::*;

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

    /// The members of a round, replica `i` at index `i`.
    fn members(n: usize) -> Vec<Member> {
        (0..n)
            .map(|replica| Member {
                seq: 0,
                replica,
                lanes: 1,
                done: false,
                quiet_since: None,
                resent: 0,
                waiting: true,
                next_round: 0,
                moved: InPlace::default(),
            })
            .collect()
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
}
