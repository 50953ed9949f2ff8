//! Runs a training step on several devices at once and answers their reductions: the
//! gradient of a weight is averaged across the replicas of the weight's group.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tessera_core::grouping::ReplicaGrouping;
use tessera_core::wire::{ReduceOp, Request, Response};

use super::{Channel, TransportError};

/// How long the hub polls one channel before moving to the next.
const POLL: Duration = Duration::from_millis(1);
/// Re-sends of the step to a silent device before it is declared dead.
const STEP_ATTEMPTS: u32 = 8;

/// One device's share of a reduction: its channel index, its buffer and the operation.
struct Contribution {
    from: usize,
    data: Vec<u8>,
    op: ReduceOp,
}

/// Runs one `RunStep` on every channel; `grouping` (over the channels' global replica ids)
/// says which devices average their gradients together.
pub fn run_step(
    channels: &mut [Channel],
    grouping: &ReplicaGrouping,
) -> Result<(), TransportError> {
    let seqs = channels
        .iter_mut()
        .map(|c| c.send(&Request::RunStep))
        .collect::<Result<Vec<_>, _>>()?;
    let group_of = |c: &Channel| {
        grouping
            .group_of(c.replica() as usize)
            .unwrap_or(usize::MAX)
    };
    let groups: Vec<usize> = channels.iter().map(group_of).collect();
    let mut done = vec![false; channels.len()];
    let mut heard = vec![Instant::now(); channels.len()];
    let mut resent = vec![0u32; channels.len()];
    // Contributions and answers, by (group, round).
    let mut contributions: HashMap<(usize, u32), Vec<Contribution>> = HashMap::new();
    let mut answers: HashMap<(usize, u32), Vec<u8>> = HashMap::new();

    while done.iter().any(|d| !d) {
        for i in 0..channels.len() {
            if done[i] {
                continue;
            }
            let Some(reply) = channels[i].wait(seqs[i], POLL)? else {
                if heard[i].elapsed() > channels[i].deadline() {
                    if resent[i] == STEP_ATTEMPTS {
                        return Err(TransportError::Timeout {
                            replica: channels[i].replica(),
                            request: tessera_core::wire::RequestKind::RunStep,
                            attempts: STEP_ATTEMPTS,
                        });
                    }
                    // The device answers a repeated step with its reply or its pending
                    // contribution; it never runs the step twice.
                    channels[i].resend(seqs[i], &Request::RunStep)?;
                    resent[i] += 1;
                    heard[i] = Instant::now();
                }
                continue;
            };
            heard[i] = Instant::now();
            match reply.response() {
                Response::Done => done[i] = true,
                Response::Reduce { round, op, data } => {
                    let key = (groups[i], round);
                    if let Some(answer) = answers.get(&key) {
                        let answer = answer.clone();
                        channels[i].send(&Request::Reduced { data: &answer })?;
                        continue;
                    }
                    let entry = contributions.entry(key).or_default();
                    if !entry.iter().any(|c| c.from == i) {
                        entry.push(Contribution {
                            from: i,
                            data: data.to_vec(),
                            op,
                        });
                    }
                    let members = groups.iter().filter(|g| **g == groups[i]).count();
                    if entry.len() == members {
                        let answer = combine(entry);
                        for c in entry.iter() {
                            channels[c.from].send(&Request::Reduced { data: &answer })?;
                        }
                        contributions.remove(&key);
                        answers.insert(key, answer);
                    }
                }
                Response::Error { request, code } => {
                    return Err(TransportError::Device {
                        replica: channels[i].replica(),
                        request,
                        code,
                    })
                }
                other => {
                    return Err(TransportError::Protocol(format!(
                        "unexpected reply to RunStep: {other:?}"
                    )))
                }
            }
        }
    }
    Ok(())
}

/// Elementwise sum or mean of f32 buffers.
fn combine(contributions: &[Contribution]) -> Vec<u8> {
    let len = contributions.first().map_or(0, |c| c.data.len() / 4);
    let mut total = vec![0f64; len];
    for contribution in contributions {
        for (t, c) in total.iter_mut().zip(contribution.data.chunks_exact(4)) {
            *t += f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
        }
    }
    let divisor = match contributions.first().map(|c| c.op) {
        Some(ReduceOp::Mean) => contributions.len() as f64,
        _ => 1.0,
    };
    total
        .iter()
        .flat_map(|t| ((t / divisor) as f32).to_le_bytes())
        .collect()
}
