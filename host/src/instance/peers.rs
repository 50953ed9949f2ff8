//! Byte collectives among a set of ranks — the whole world, or the ranks of one group split
//! off it — for a session across ranks, whose workers' arrays move between ranks in place
//! (feature `mpi`). Every collective runs under the MPI deadline, as the runtime's do.
//!
//! Each collective is started without blocking and waited for by looking at it, yielding
//! the core between looks ([`finish`]): MPI's own blocking wait polls without ever
//! yielding, and on a host with fewer cores than busy threads (2 cores, 2 ranks, each
//! with a post office and devices) the rank it waits for — woken on the same core — got
//! it only at the scheduler's next tick, so that every collective cost a tick, whatever
//! its size.
//!
//! The counts of a collective come from one plan every rank shares: a rank sending another
//! count than its peer expects is an MPI error, which ends the job. Each length is checked
//! against its counts here, before anything moves; a rank that refuses alone (its lengths
//! disagree with its peers') leaves them in the collective until the MPI deadline ends the
//! job, so the callers derive every length from the shared plan.

use mpi::collective::SystemOperation;
use mpi::datatype::{Partition, PartitionMut};
use mpi::request::{scope, Request, Scope};
use mpi::topology::{Color, SimpleCommunicator};
use mpi::traits::*;
use mpi::Count;

use super::{InstanceError, Mpi};

/// A set of ranks and this rank's place among them. Made and used on one thread.
pub struct Peers {
    comm: SimpleCommunicator,
    rank: usize,
    size: usize,
    mpi: Mpi,
}

impl std::fmt::Debug for Peers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peers")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl Mpi {
    /// Every rank of the job.
    pub fn peers(&self) -> Peers {
        let comm = SimpleCommunicator::world();
        Peers {
            rank: comm.rank() as usize,
            size: comm.size() as usize,
            comm,
            mpi: *self,
        }
    }

    /// The ranks that give the same `color`, this one among them (every rank of the job
    /// takes part, each with its own color).
    pub fn split(&self, color: u32) -> Result<Peers, InstanceError> {
        let value = i32::try_from(color).map_err(|_| InstanceError::TooLarge {
            rank: self.rank_of_world(),
            elements: color as usize,
        })?;
        let comm = self
            .guarded("a split of the ranks", || {
                SimpleCommunicator::world().split_by_color(Color::with_value(value))
            })
            .ok_or(InstanceError::Mismatch {
                rank: self.rank_of_world(),
                what: "a split of the ranks (no group for this one)",
            })?;
        Ok(Peers {
            rank: comm.rank() as usize,
            size: comm.size() as usize,
            comm,
            mpi: *self,
        })
    }

    fn rank_of_world(&self) -> usize {
        SimpleCommunicator::world().rank() as usize
    }
}

impl Peers {
    /// This rank's place among the peers.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// How many peers there are.
    pub fn size(&self) -> usize {
        self.size
    }

    fn mismatch(&self, what: &'static str) -> InstanceError {
        InstanceError::Mismatch {
            rank: self.rank,
            what,
        }
    }

    /// Where each part starts when parts of `counts` lie end to end.
    fn displacements(&self, counts: &[Count]) -> Result<Vec<Count>, InstanceError> {
        let mut displs = Vec::with_capacity(counts.len());
        let mut at: usize = 0;
        for &count in counts {
            displs.push(self.mpi.count(at)?);
            at += count as usize;
        }
        Ok(displs)
    }

    /// MPI's all-to-all with counts, in bytes: `send` holds this rank's part for each peer
    /// end to end (`send_counts[r]` bytes for peer `r`), and `receive` gets each peer's
    /// part for this one end to end (`receive_counts[r]` from peer `r`).
    pub fn all_to_all_into(
        &self,
        send: &[u8],
        send_counts: &[usize],
        receive: &mut [u8],
        receive_counts: &[usize],
    ) -> Result<(), InstanceError> {
        if send_counts.len() != self.size || receive_counts.len() != self.size {
            return Err(self.mismatch("the parts of an all-to-all (one per rank)"));
        }
        if send_counts.iter().sum::<usize>() != send.len()
            || receive_counts.iter().sum::<usize>() != receive.len()
        {
            return Err(self.mismatch("an all-to-all's buffers and counts"));
        }
        let counts = |c: &[usize]| {
            c.iter()
                .map(|&n| self.mpi.count(n))
                .collect::<Result<Vec<Count>, _>>()
        };
        let (send_counts, receive_counts) = (counts(send_counts)?, counts(receive_counts)?);
        let send_displs = self.displacements(&send_counts)?;
        let receive_displs = self.displacements(&receive_counts)?;
        let outgoing = Partition::new(send, &send_counts[..], &send_displs[..]);
        let mut incoming = PartitionMut::new(receive, &receive_counts[..], &receive_displs[..]);
        self.mpi.guarded("an all-to-all", || {
            scope(|scope| {
                finish(self.comm.immediate_all_to_all_varcount_into(
                    scope,
                    &outgoing,
                    &mut incoming,
                ))
            })
        });
        Ok(())
    }

    /// Whether `mine` holds on any peer, agreed by all (one small allreduce): what the
    /// peers settle before writing what only some of them could make.
    pub fn any(&self, mine: bool) -> bool {
        let mine = i32::from(mine);
        let mut any = 0i32;
        self.mpi.guarded("an agreement", || {
            scope(|scope| {
                finish(self.comm.immediate_all_reduce_into(
                    scope,
                    &mine,
                    &mut any,
                    SystemOperation::max(),
                ))
            })
        });
        any != 0
    }

    /// The first peer's `data` into every peer's `data`.
    pub fn broadcast_from_first(&self, data: &mut [u8]) -> Result<(), InstanceError> {
        self.mpi.count(data.len())?;
        self.mpi.guarded("a broadcast", || {
            scope(|scope| {
                finish(
                    self.comm
                        .process_at_rank(0)
                        .immediate_broadcast_into(scope, data),
                )
            })
        });
        Ok(())
    }

    /// Every peer's `data` concatenated in peer order into `out`, whose length must be the
    /// sum of theirs (checked on every peer, after the lengths are exchanged, before any
    /// data move).
    pub fn all_gather_into(&self, data: &[u8], out: &mut [u8]) -> Result<(), InstanceError> {
        let mine = self.mpi.count(data.len())?;
        let mut counts: Vec<Count> = vec![0; self.size];
        self.mpi.guarded("an allgather's lengths", || {
            scope(|scope| {
                finish(
                    self.comm
                        .immediate_all_gather_into(scope, &mine, &mut counts[..]),
                )
            })
        });
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        if total != out.len() {
            return Err(self.mismatch("the length of an allgather's result"));
        }
        let displs = self.displacements(&counts)?;
        let mut partition = PartitionMut::new(out, &counts[..], &displs[..]);
        self.mpi.guarded("an allgather", || {
            scope(|scope| {
                finish(
                    self.comm
                        .immediate_all_gather_varcount_into(scope, data, &mut partition),
                )
            })
        });
        Ok(())
    }
}

/// Waits for `request` by looking at it, yielding the core between looks (module doc).
fn finish<'a, D: ?Sized, S: Scope<'a>>(mut request: Request<'a, D, S>) {
    loop {
        match request.test() {
            Ok(_) => return,
            Err(pending) => request = pending,
        }
        std::thread::yield_now();
    }
}
