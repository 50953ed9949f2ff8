//! Instances: the host processes of one job, and the collectives between them.
//!
//! When a model's replicas outgrow one host, the job runs as several instances (one per
//! MPI rank), each owning a contiguous window of the global replicas
//! ([`InstanceWindow::split`](tessera_core::transfer::InstanceWindow::split)): instance
//! `k` of `n` drives replicas `[k·N/n, (k+1)·N/n)`. Whatever crosses instances goes through
//! the [`Instances`] trait:
//!
//! - [`Single`], the default: one instance, every collective the identity; no MPI needed;
//! - `Mpi` (cargo feature `mpi`): OpenMPI through the `mpi` crate, for processes started
//!   by `mpirun`.
//!
//! [`from_environment`] picks the one the process was started for, and refuses to run a
//! process `mpirun` started when MPI is not built in (each rank would silently train alone).
//!
//! # Collectives
//!
//! Every instance calls the same collectives in the same order (the runtime's schedule is
//! the program's, identical on every rank).
//!
//! - [`Instances::allreduce_sum`]: elementwise sum of `f64` buffers — the step driver's partial
//!   sums of a reduction round, exact in `f64` for the few `f32` terms a group has, so the
//!   result does not depend on how replicas are spread over instances;
//! - [`Instances::allreduce_or`]: elementwise bitwise OR of byte buffers — weights to host,
//!   where core's transfer layouts leave every element held by exactly one instance and
//!   zero bytes elsewhere: the OR of one value and zeros is that value, bit for bit (a sum
//!   would turn `-0.0` into `+0.0`);
//! - [`Instances::allgather`]: every instance's bytes (any lengths) concatenated in rank
//!   order; [`Instances::allgather_in_place`] the same into a buffer that already holds
//!   this instance's part at its place (weights to host: no second buffer of the whole);
//! - [`Instances::barrier`] and [`Instances::abort`] (a failed rank ends the whole job
//!   instead of leaving its peers waiting in a collective).
//!
//! A session across ranks (feature `mpi`) moves its workers' arrays between ranks with the
//! byte collectives of `Peers` (all-to-all, allgather, broadcast, among every rank or among
//! a group's ranks split off them): bytes, not sums, because its results must be one host's
//! bit for bit whatever the ranks (`session::ranks`).

#[cfg(feature = "mpi")]
mod mpi;
#[cfg(feature = "mpi")]
mod peers;

use std::fmt;

#[cfg(feature = "mpi")]
pub use self::mpi::{Mpi, MpiGuard, DEADLINE_VAR};
#[cfg(feature = "mpi")]
pub use self::peers::Peers;

/// The collectives between a job's instances. See the module documentation.
pub trait Instances: fmt::Debug + Send + Sync {
    /// This instance's rank, `0..size`.
    fn rank(&self) -> usize;
    /// The number of instances.
    fn size(&self) -> usize;
    /// Waits until every instance reaches the barrier.
    fn barrier(&self) -> Result<(), InstanceError>;
    /// Replaces `data` with the elementwise sum of every instance's `data` (same lengths).
    fn allreduce_sum(&self, data: &mut [f64]) -> Result<(), InstanceError>;
    /// Replaces `data` with the elementwise bitwise OR of every instance's `data`.
    fn allreduce_or(&self, data: &mut [u8]) -> Result<(), InstanceError>;
    /// Every instance's `data`, concatenated in rank order.
    fn allgather(&self, data: &[u8]) -> Result<Vec<u8>, InstanceError>;
    /// Every instance's part of `out` gathered into `out` in rank order, parts end to end;
    /// this instance's part is `out[mine]`, already in place (weights to host into the
    /// caller's arrays: no buffer as large as `out` is made). A length that disagrees with
    /// the instances' parts is an error, and nothing is received.
    fn allgather_in_place(
        &self,
        out: &mut [u8],
        mine: std::ops::Range<usize>,
    ) -> Result<(), InstanceError> {
        let part = out.get(mine).ok_or(InstanceError::Mismatch {
            rank: self.rank(),
            what: "this instance's part of an allgather",
        })?;
        let all = self.allgather(part)?;
        if all.len() != out.len() {
            return Err(InstanceError::Mismatch {
                rank: self.rank(),
                what: "the length of an allgather's result",
            });
        }
        out.copy_from_slice(&all);
        Ok(())
    }
    /// Ends the whole job with `code`.
    fn abort(&self, code: i32) -> !;
}

/// One instance: the whole job in this process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Single;

impl Instances for Single {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn barrier(&self) -> Result<(), InstanceError> {
        Ok(())
    }
    fn allreduce_sum(&self, _: &mut [f64]) -> Result<(), InstanceError> {
        Ok(())
    }
    fn allreduce_or(&self, _: &mut [u8]) -> Result<(), InstanceError> {
        Ok(())
    }
    fn allgather(&self, data: &[u8]) -> Result<Vec<u8>, InstanceError> {
        Ok(data.to_vec())
    }
    fn allgather_in_place(
        &self,
        out: &mut [u8],
        mine: std::ops::Range<usize>,
    ) -> Result<(), InstanceError> {
        // The only part is all of it, already in place.
        if mine != (0..out.len()) {
            return Err(InstanceError::Mismatch {
                rank: 0,
                what: "the parts of an allgather in place",
            });
        }
        Ok(())
    }
    fn abort(&self, code: i32) -> ! {
        std::process::exit(code)
    }
}

/// Why a collective or the set-up failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InstanceError {
    /// The process was started by `mpirun` (its environment says so) but this tessera was
    /// built without the `mpi` feature.
    #[error(
        "this process was started by mpirun (${variable} is set) but tessera was built without \
         MPI: rebuild with `--features mpi`"
    )]
    MpiNotBuilt {
        /// The environment variable that showed it.
        variable: &'static str,
    },
    /// MPI was already initialized in this process (a session across ranks initializes it
    /// itself, once per job).
    #[error(
        "MPI is already initialized in this process (it is initialized once per job: one \
         session across ranks, or the instances of one runtime)"
    )]
    AlreadyInitialized,
    /// This MPI cannot be called from several threads (`MPI_THREAD_MULTIPLE`), which a
    /// session across ranks needs.
    #[error(
        "this MPI does not support calls from several threads (MPI_THREAD_MULTIPLE), which a \
         session across ranks needs"
    )]
    NoThreads,
    /// A buffer longer than MPI counts (2³¹ − 1 elements).
    #[error("rank {rank}: a collective of {elements} elements is larger than MPI counts")]
    TooLarge {
        /// The rank that found it.
        rank: usize,
        /// Elements.
        elements: usize,
    },
    /// The host could not allocate a collective's result.
    #[error("rank {rank}: the host cannot allocate the {bytes} bytes of a collective's result")]
    HostMemory {
        /// The rank that found it.
        rank: usize,
        /// Bytes asked for.
        bytes: usize,
    },
    /// Instances disagree: a collective's buffers differ in length across ranks.
    #[error("rank {rank}: the instances disagree on {what}")]
    Mismatch {
        /// The rank that found it.
        rank: usize,
        /// What differs.
        what: &'static str,
    },
    /// The collectives' deadline (`TESSERA_MPI_DEADLINE`) is not a whole number of seconds
    /// above zero.
    #[error("TESSERA_MPI_DEADLINE must be a whole number of seconds above zero, not {text:?}")]
    Deadline {
        /// What the variable holds.
        text: String,
    },
    /// The thread that watches the collectives' deadline could not start.
    #[error("the thread that watches the MPI collectives' deadline did not start")]
    Watchdog,
}

/// Environment variables `mpirun` (OpenMPI, or a PMI launcher) sets in every rank.
const LAUNCHED_BY: [&str; 2] = ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"];

/// The name of the variable showing this process was started by `mpirun`, if it was.
pub fn launched_by_mpirun() -> Option<&'static str> {
    LAUNCHED_BY
        .into_iter()
        .find(|v| std::env::var_os(v).is_some())
}

/// The instances this process belongs to: `Mpi` under `mpirun` (the guard finalizes MPI
/// when dropped: keep it for the whole job), [`Single`] otherwise, and an error under
/// `mpirun` without the `mpi` feature.
pub fn from_environment() -> Result<(std::sync::Arc<dyn Instances>, Guard), InstanceError> {
    match launched_by_mpirun() {
        None => Ok((
            std::sync::Arc::new(Single),
            Guard {
                #[cfg(feature = "mpi")]
                _mpi: None,
            },
        )),
        #[cfg(feature = "mpi")]
        Some(_) => {
            let (guard, mpi) = Mpi::initialize()?;
            Ok((std::sync::Arc::new(mpi), Guard { _mpi: Some(guard) }))
        }
        #[cfg(not(feature = "mpi"))]
        Some(variable) => Err(InstanceError::MpiNotBuilt { variable }),
    }
}

/// Keeps MPI initialized while it lives (nothing for a single instance).
#[derive(Debug)]
pub struct Guard {
    #[cfg(feature = "mpi")]
    _mpi: Option<MpiGuard>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches a single instance whose collectives change data.
    #[test]
    fn a_single_instance_is_the_identity() {
        let s = Single;
        assert_eq!((s.rank(), s.size()), (0, 1));
        let mut sums = [1.5, -0.0];
        s.allreduce_sum(&mut sums).unwrap();
        assert_eq!(sums[0], 1.5);
        assert!(sums[1].is_sign_negative());
        let mut bytes = [1, 2, 3];
        s.allreduce_or(&mut bytes).unwrap();
        assert_eq!(bytes, [1, 2, 3]);
        assert_eq!(s.allgather(&[9, 8]).unwrap(), [9, 8]);
        let mut whole = [4, 5];
        s.allgather_in_place(&mut whole, 0..2).unwrap();
        assert_eq!(whole, [4, 5]);
        s.barrier().unwrap();
    }

    /// Catches an allgather in place that takes a part for the whole (a single instance
    /// holds every part: anything less is a window split wrongly).
    #[test]
    fn a_single_instance_refuses_a_part_in_place() {
        let mut whole = [4, 5, 6];
        assert!(Single.allgather_in_place(&mut whole, 1..3).is_err());
        assert_eq!(whole, [4, 5, 6], "nothing moved");
    }
}
