//! Sends from worker to worker (`send_to_worker`, `send_to_next_group`) in a session across
//! ranks, without going through rank 0 unless a worker of the send is on it.
//!
//! # Rules
//!
//! - **When.** Every destination already holds an array of its source's type and size, and
//!   every rank's host maps its workers' memory; otherwise the send takes the path through
//!   rank 0, which also reports every refusal.
//! - **Where the bytes go.** Both workers on one rank: a copy in that rank's memory. On two
//!   ranks: the sending rank reads the source and its post office sends it to the
//!   receiving rank's (on the bulk tag), which writes it into the destination.
//! - **In one order.** Every rank gets the whole list of moves, numbered; it runs those that
//!   concern it in that order. Sends never wait (the office queues them), and a receiving
//!   rank takes each move's message by its sender and number, keeping any that came early:
//!   no order of arrival can deadlock or misplace bytes. A sender that cannot read its
//!   source still sends (zeros) and reports the failure, so no receiver waits in vain.

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tessera_core::wire::ValueKind;

use super::super::direct::inside_memory;
use super::control::ToRank;
use crate::session::{SessionError, State};
use crate::transport::tunnel::PostOffice;
use crate::transport::SharedMemory;

/// Where one end of a move is: the rank, the worker's index on it, the offset in its
/// memory.
type End = (usize, usize, usize);

/// One array from a worker's source to a worker's destination.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(in crate::session) struct Move {
    index: u32,
    from: End,
    to: End,
    bytes: usize,
}

/// Every move of one send, in order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(in crate::session) struct Moves {
    moves: Vec<Move>,
}

impl State {
    /// Worker `from`'s `src` into worker `to`'s `dst` for each pair of `pairs`, by the
    /// module's rules; `false` when it cannot run so (nothing was sent). The workers are
    /// synced.
    pub(in crate::session) fn moves_across(
        &mut self,
        pairs: &[(usize, usize)],
        src: u16,
        dst: u16,
        operation: &'static str,
    ) -> Result<bool, SessionError> {
        let Some(per_rank) = self.ranks_in_place() else {
            return Ok(false);
        };
        let workers = self.workers.len();
        let local = per_rank.min(workers);
        let mut moves = Vec::with_capacity(pairs.len());
        for (index, &(from, to)) in pairs.iter().enumerate() {
            let source = self.describe(from, src)?;
            let target = self.describe(to, dst)?;
            let fits = source.kind == ValueKind::Array
                && target.kind == ValueKind::Array
                && source.dtype.is_some()
                && source.dtype == target.dtype
                && source.bytes == target.bytes;
            if !fits {
                return Ok(false);
            }
            let bytes = source.bytes as usize;
            if bytes > super::MPI_BYTES {
                // One message could not carry it: the path through rank 0 moves it in chunks.
                return Ok(false);
            }
            for (worker, at, register) in [(from, source.at, src), (to, target.at, dst)] {
                let memory = self.workers[worker].limits().memory as usize;
                inside_memory(worker, register, at as usize, bytes, memory)?;
            }
            let end = |worker: usize, at: u32| (worker / per_rank, worker % per_rank, at as usize);
            moves.push(Move {
                index: index as u32,
                from: end(from, source.at),
                to: end(to, target.at),
                bytes,
            });
        }
        let moves = Moves { moves };
        // Taken before any rank is told: past this point, nothing stops rank 0 taking part.
        let mut memories = Vec::with_capacity(local);
        for channel in &mut self.workers[..local] {
            memories.push(channel.device_memory()?);
        }
        let Some(across) = &self.across else {
            return Ok(false);
        };
        across.tell_all(|_| ToRank::Moves(moves.clone()))?;
        let number = across.current.load(std::sync::atomic::Ordering::Relaxed);
        let mine = run(
            0,
            &across.office,
            number,
            &moves,
            &mut memories,
            across.mpi.deadline(),
        );
        across.outcome(mine, operation)?;
        Ok(true)
    }
}

/// Rank `me`'s share of `moves` (module doc), command `number`: its workers' memory in
/// `memories`, its bulk messages through `office`, each waited for up to `limit`. Every
/// move is tried (a sender that fails still sends, a receiver that gives up still sends
/// what it owes later); the first failure is the answer.
pub(in crate::session) fn run(
    me: usize,
    office: &PostOffice,
    number: u64,
    moves: &Moves,
    memories: &mut [Option<&mut SharedMemory>],
    limit: Duration,
) -> Result<(), String> {
    let mut first: Option<String> = None;
    let mut note = |reason: String| {
        first.get_or_insert(reason);
    };
    let mut early: HashMap<(usize, u32), Vec<u8>> = HashMap::new();
    for m in &moves.moves {
        let ((from_rank, from_j, src), (to_rank, to_j, dst)) = (m.from, m.to);
        let data = if from_rank == me {
            let read = memories
                .get(from_j)
                .and_then(|memory| memory.as_ref())
                .and_then(|memory| memory.range(src, m.bytes));
            let data = match read {
                Some(bytes) => bytes.to_vec(),
                None => {
                    note(format!(
                        "worker {from_j} of this rank: its source is not readable at {src} ({} \
                         bytes)",
                        m.bytes
                    ));
                    vec![0; m.bytes]
                }
            };
            if to_rank != me {
                let mut message = number.to_le_bytes().to_vec();
                message.extend_from_slice(&m.index.to_le_bytes());
                message.extend_from_slice(&data);
                if let Err(e) = office.send_bulk(to_rank, message) {
                    note(format!("sending to rank {to_rank}: {e}"));
                }
                continue;
            }
            data
        } else if to_rank == me {
            match receive(office, &mut early, (number, from_rank, m.index), limit) {
                Ok(data) => data,
                Err(reason) => {
                    note(reason);
                    continue;
                }
            }
        } else {
            continue;
        };
        let target = memories
            .get_mut(to_j)
            .and_then(|memory| memory.as_mut())
            .and_then(|memory| memory.range_mut(dst, m.bytes));
        match target {
            Some(target) if data.len() == m.bytes => target.copy_from_slice(&data),
            _ => note(format!(
                "worker {to_j} of this rank: {} bytes do not fit its destination at {dst} ({} \
                 bytes)",
                data.len(),
                m.bytes
            )),
        }
    }
    match first {
        None => Ok(()),
        Some(reason) => Err(reason),
    }
}

/// The bytes of move `index` of command `number` from rank `from`, kept aside if they came
/// early or taken from the office; others of this command that come meanwhile are kept,
/// and any of an earlier command (one given up) dropped.
fn receive(
    office: &PostOffice,
    early: &mut HashMap<(usize, u32), Vec<u8>>,
    (number, from, index): (u64, usize, u32),
    limit: Duration,
) -> Result<Vec<u8>, String> {
    let until = std::time::Instant::now() + limit;
    loop {
        if let Some(data) = early.remove(&(from, index)) {
            return Ok(data);
        }
        let left = until.saturating_duration_since(std::time::Instant::now());
        let Some((sender, message)) = office.next_bulk(left) else {
            return Err(format!(
                "no bytes from rank {from} for move {index} within {} s",
                limit.as_secs()
            ));
        };
        let Some((head, data)) = message.split_first_chunk::<12>() else {
            tracing::warn!(
                sender,
                bytes = message.len(),
                "a bulk message too short, dropped"
            );
            continue;
        };
        let (n, i) = head.split_at(8);
        let n = u64::from_le_bytes(n.try_into().unwrap_or([0; 8]));
        let i = u32::from_le_bytes(i.try_into().unwrap_or([0; 4]));
        if n == number {
            early.insert((sender, i), data.to_vec());
        } else {
            tracing::warn!(sender, n, "a bulk message of another command, dropped");
        }
    }
}
