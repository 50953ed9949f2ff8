//! Runs a training step on several devices at once and answers their reductions: each
//! round combines the replicas of one group, under the grouping the step's schedule names
//! for that round (round `r` of a step uses grouping `r mod k` of the `k` it is given, as
//! the program's reduction schedule orders them).
//!
//! # Contract
//!
//! Every reduction has an identity: the step's sequence number on the device's channel
//! (its envelope) and the round within the step. Contributions are collected per round;
//! when every local device's is in, each group's contributions are summed in `f64`, the
//! partial sums are summed across instances ([`Instances::allreduce_sum`]: every instance
//! reaches every round, in order), and every member gets its group's combination under its
//! own step sequence number and that round. A contribution that arrives again (the
//! device re-sent it: its answer was late or lost) is answered again with the same round's
//! combination, which the device applies only if it is still waiting for that round, so a
//! duplicate can never stand in for a later round's answer. Contributions of one round that
//! disagree in length are an error, never truncated.
//!
//! # What a device may claim
//!
//! A device numbers its rounds 0, 1, 2, … and contributes to a round only once the round
//! before is answered (it waits for the answer). So the hub accepts from each device one
//! new round only: the one after the last it contributed to, and none while its
//! contribution to an open round is unanswered. A round beyond that is a device out of
//! turn ([`TransportError::ReductionRound`], naming it, the round and the one allowed); an
//! earlier round is a late duplicate, answered again if its answer is still kept, else
//! ignored; a round past the step's last (rounds per batch × batches) is out of turn too.
//! Only the last combined round's answers are kept: every device has applied
//! the ones before (it contributed to a later round). The hub therefore holds at most one
//! open round's contributions and one round's answers, whatever numbers a device sends.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tessera_core::grouping::ReplicaGrouping;
use tessera_core::wire::{ReduceOp, Request, Response};

use super::channel::Silence;
use super::{Channel, StepFault, TransportError};
use crate::instance::Instances;

/// How long the hub polls one channel before moving to the next.
const POLL: Duration = Duration::from_millis(1);
/// Re-sends of the step to a silent device before the hub asks what it is doing.
const STEP_ATTEMPTS: u32 = 8;

/// One device's share of a reduction: its channel index, its buffer and the operation.
struct Contribution {
    from: usize,
    data: Vec<u8>,
    op: ReduceOp,
}

/// Runs one `RunStep` of `batches` batches on every channel; `rounds` (groupings over the
/// channels' global replica ids, one per round of a batch) say which devices each round
/// combines. `fault`, for tests, makes one device fail the step (see [`StepFault`]).
pub fn run_step(
    channels: &mut [Channel],
    rounds: &[ReplicaGrouping],
    batches: u32,
    instances: &dyn Instances,
    fault: Option<StepFault>,
) -> Result<(), TransportError> {
    // No device makes more rounds than the step has.
    let last_round = u32::try_from(rounds.len())
        .unwrap_or(u32::MAX)
        .saturating_mul(batches);
    let started = Instant::now();
    let seqs = channels
        .iter_mut()
        .map(|c| c.submit(&Request::RunStep))
        .collect::<Result<Vec<_>, _>>()?;
    // Each channel's group under round `round`'s grouping (`usize::MAX`: no such round).
    let replicas: Vec<usize> = channels.iter().map(|c| c.replica() as usize).collect();
    let grouping_of = |round: u32| rounds.get((round as usize).checked_rem(rounds.len())?);
    let group_of = |replica: usize, round: u32| grouping_of(round)?.group_of(replica).ok();
    let mut done = vec![false; channels.len()];
    let mut heard = vec![Instant::now(); channels.len()];
    let mut resent = vec![0u32; channels.len()];
    // Devices whose contribution to an open round is in: they wait for their peers, so
    // their silence is no sign of trouble (the peers' silence is).
    let mut waiting = vec![false; channels.len()];
    // The round each device may contribute to next (module doc).
    let mut next_round = vec![0u32; channels.len()];
    // Contributions by round; answers by (group, round).
    let mut contributions: HashMap<u32, Vec<Contribution>> = HashMap::new();
    let mut answers: HashMap<(usize, u32), Vec<u8>> = HashMap::new();

    while done.iter().any(|d| !d) {
        for i in 0..channels.len() {
            if done[i] {
                continue;
            }
            // A device waiting for its peers has nothing to say until they contribute:
            // look without waiting, and wait on the devices the round still needs.
            let wait = if waiting[i] { Duration::ZERO } else { POLL };
            let Some(reply) = channels[i].poll(seqs[i], wait)? else {
                if waiting[i] {
                    heard[i] = Instant::now();
                } else if heard[i].elapsed() > channels[i].deadline() {
                    if resent[i] >= STEP_ATTEMPTS {
                        // A device still working on its part (a long step) is waited for,
                        // up to the busy deadline; anything else is reported as it is.
                        let step = tessera_core::wire::RequestKind::RunStep;
                        match channels[i].silence(step, started, resent[i]) {
                            Silence::Working => {
                                heard[i] = Instant::now();
                                continue;
                            }
                            Silence::Retry => {}
                            Silence::Report(error) => {
                                tracing::warn!(
                                    replica = channels[i].replica(),
                                    %error,
                                    "device silent during a step"
                                );
                                return Err(error);
                            }
                        }
                    }
                    // The device answers a repeated step with its reply or its pending
                    // contribution; it never runs the step twice.
                    tracing::debug!(
                        replica = channels[i].replica(),
                        "device silent during a step: sending the step again"
                    );
                    channels[i].resend(seqs[i], &Request::RunStep)?;
                    resent[i] += 1;
                    heard[i] = Instant::now();
                }
                continue;
            };
            heard[i] = Instant::now();
            resent[i] = 0;
            match reply.response() {
                Response::Done => done[i] = true,
                Response::Reduce { round, op, data } => {
                    let group = group_of(replicas[i], round).unwrap_or(usize::MAX);
                    let key = (group, round);
                    if let Some(answer) = answers.get(&key) {
                        // A re-sent contribution: answer it again, under its identity.
                        let reduced = Request::Reduced {
                            round,
                            data: answer,
                        };
                        channels[i].resend(seqs[i], &reduced)?;
                        continue;
                    }
                    match judge(round, next_round[i], waiting[i], last_round) {
                        Heard::New => next_round[i] = round.saturating_add(1),
                        // Its answer is gone: the device has applied it already.
                        Heard::Late => continue,
                        Heard::OutOfTurn => {
                            return Err(TransportError::ReductionRound {
                                replica: channels[i].replica(),
                                round,
                                expected: next_round[i],
                            })
                        }
                    }
                    // Contributions are collected per round, from every local device: a
                    // round is combined once all of them are in, across instances too.
                    let entry = contributions.entry(round).or_default();
                    if let Some(first) = entry.first() {
                        if first.op != op {
                            return Err(TransportError::ReductionOps {
                                replica: channels[i].replica(),
                                round,
                            });
                        }
                        if first.data.len() != data.len() {
                            return Err(TransportError::Reduction {
                                replica: channels[i].replica(),
                                round,
                                expected: first.data.len(),
                                actual: data.len(),
                            });
                        }
                    }
                    if !entry.iter().any(|c| c.from == i) {
                        waiting[i] = true;
                        entry.push(Contribution {
                            from: i,
                            data: data.to_vec(),
                            op,
                        });
                    }
                    if entry.len() == channels.len() {
                        let Some(grouping) = grouping_of(round) else {
                            return Err(TransportError::Reduction {
                                replica: channels[i].replica(),
                                round,
                                expected: 0,
                                actual: data.len(),
                            });
                        };
                        let combined = combine(entry, &replicas, grouping, instances)?;
                        for c in entry.iter() {
                            let g = grouping.group_of(replicas[c.from]).unwrap_or(0);
                            let mut answer = &combined[g][..];
                            let faulty = StepFault {
                                replica: replicas[c.from] as u32,
                                round,
                            };
                            if fault == Some(faulty) {
                                answer = &answer[..answer.len().saturating_sub(4)];
                            }
                            let reduced = Request::Reduced {
                                round,
                                data: answer,
                            };
                            channels[c.from].resend(seqs[c.from], &reduced)?;
                            waiting[c.from] = false;
                        }
                        // Every device applied the earlier rounds' answers (it took part
                        // in this one): only this round's can still be asked for again.
                        answers.clear();
                        for (g, answer) in combined.into_iter().enumerate() {
                            answers.insert((g, round), answer);
                        }
                        contributions.remove(&round);
                    }
                }
                Response::Error { request, code } => {
                    return Err(TransportError::Device {
                        replica: channels[i].replica(),
                        request,
                        code,
                    })
                }
                other => return Err(channels[i].unexpected(&Request::RunStep, &other)),
            }
        }
    }
    Ok(())
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

/// Each group's combination of one round: the local contributions summed per group in
/// `f64`, the partial sums summed across instances, then divided by the group size for a
/// mean; one `f32` buffer per group of `grouping`.
fn combine(
    contributions: &[Contribution],
    replicas: &[usize],
    grouping: &ReplicaGrouping,
    instances: &dyn Instances,
) -> Result<Vec<Vec<u8>>, TransportError> {
    let len = contributions.first().map_or(0, |c| c.data.len() / 4);
    let groups = grouping.num_groups();
    let mut partial = vec![0f64; groups * len];
    for c in contributions {
        let g = grouping.group_of(replicas[c.from]).unwrap_or(0);
        let sums = &mut partial[g * len..(g + 1) * len];
        for (t, v) in sums.iter_mut().zip(c.data.chunks_exact(4)) {
            *t += f64::from(f32::from_le_bytes([v[0], v[1], v[2], v[3]]));
        }
    }
    instances.allreduce_sum(&mut partial)?;
    let divisor = match contributions.first().map(|c| c.op) {
        Some(ReduceOp::Mean) => grouping.group_size() as f64,
        _ => 1.0,
    };
    Ok(partial
        .chunks(len.max(1))
        .take(groups)
        .map(|sums| {
            sums.iter()
                .flat_map(|t| ((t / divisor) as f32).to_le_bytes())
                .collect()
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches a hub that keeps a contribution for any round a device names: a device
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

    /// Catches a hub that fails a step for a duplicate (a device re-sends its contribution
    /// when an answer is late): an earlier or still open round is only late.
    #[test]
    fn repeated_rounds_are_late_not_errors() {
        assert_eq!(judge(0, 1, true, 4), Heard::Late, "the open round again");
        assert_eq!(judge(0, 2, false, 4), Heard::Late, "an answered round");
        assert_eq!(judge(1, 1, false, 4), Heard::New);
    }

    /// Catches a hub that lets devices counting rounds in order run a step forever: a
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
        let e = TransportError::ReductionRound {
            replica: 3,
            round: 4_000_000_000,
            expected: 2,
        };
        let message = e.to_string();
        for part in ["device 3", "4000000000", "round 2"] {
            assert!(message.contains(part), "{message}");
        }
    }
}
