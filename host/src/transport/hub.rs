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

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tessera_core::grouping::ReplicaGrouping;
use tessera_core::wire::{ReduceOp, Request, Response};

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

/// Runs one `RunStep` on every channel; `rounds` (groupings over the channels' global
/// replica ids, one per round of a batch) say which devices each round combines. `fault`,
/// for tests, makes one device fail the step (see [`StepFault`]).
pub fn run_step(
    channels: &mut [Channel],
    rounds: &[ReplicaGrouping],
    instances: &dyn Instances,
    fault: Option<StepFault>,
) -> Result<(), TransportError> {
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
                    if resent[i] == STEP_ATTEMPTS {
                        // A device still working on its part (a long step) is waited for,
                        // up to the busy deadline; anything else is reported as it is.
                        let step = tessera_core::wire::RequestKind::RunStep;
                        let Some(error) = channels[i].silence(step, started) else {
                            heard[i] = Instant::now();
                            continue;
                        };
                        tracing::warn!(
                            replica = channels[i].replica(),
                            %error,
                            "device silent during a step"
                        );
                        return Err(error);
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
