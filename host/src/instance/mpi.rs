//! [`Instances`] over MPI (OpenMPI through the `mpi` crate): the world communicator of the
//! processes `mpirun` started.
//!
//! MPI's default error handler ends the job on any MPI error, naming the failing rank in
//! its message; tessera's own checks (sizes, lengths) become [`InstanceError`]s naming the
//! rank. A panic on any rank calls `MPI_Abort`, so its peers never wait in a collective for
//! a rank that is gone.

use mpi::collective::SystemOperation;
use mpi::datatype::PartitionMut;
use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use mpi::Count;

use super::{InstanceError, Instances};

/// Keeps MPI initialized; dropping it finalizes MPI.
pub struct MpiGuard {
    _universe: Universe,
}

impl std::fmt::Debug for MpiGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiGuard").finish_non_exhaustive()
    }
}

/// The world communicator's collectives. A handle: the communicator is looked up on each
/// call, so the handle is `Send` and `Sync`; MPI is called from one thread at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mpi {
    rank: usize,
    size: usize,
}

impl Mpi {
    /// Initializes MPI and installs the panic hook that aborts the job.
    pub fn initialize() -> Result<(MpiGuard, Self), InstanceError> {
        let universe = mpi::initialize().ok_or(InstanceError::AlreadyInitialized)?;
        let world = universe.world();
        let mpi = Self {
            rank: world.rank() as usize,
            size: world.size() as usize,
        };
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            previous(info);
            SimpleCommunicator::world().abort(101);
        }));
        Ok((
            MpiGuard {
                _universe: universe,
            },
            mpi,
        ))
    }

    fn world(&self) -> SimpleCommunicator {
        SimpleCommunicator::world()
    }

    fn count(&self, elements: usize) -> Result<Count, InstanceError> {
        Count::try_from(elements).map_err(|_| InstanceError::TooLarge {
            rank: self.rank,
            elements,
        })
    }

    /// Every rank's length of a buffer, checked equal.
    fn same_length(&self, len: usize, what: &'static str) -> Result<(), InstanceError> {
        let mine = len as u64;
        let mut all = vec![0u64; self.size];
        self.world().all_gather_into(&mine, &mut all[..]);
        if all.iter().any(|&n| n != mine) {
            return Err(InstanceError::Mismatch {
                rank: self.rank,
                what,
            });
        }
        Ok(())
    }
}

impl Instances for Mpi {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn barrier(&self) -> Result<(), InstanceError> {
        self.world().barrier();
        Ok(())
    }

    fn allreduce_sum(&self, data: &mut [f64]) -> Result<(), InstanceError> {
        self.count(data.len())?;
        self.same_length(data.len(), "the length of a sum")?;
        let send = data.to_vec();
        self.world()
            .all_reduce_into(&send[..], data, SystemOperation::sum());
        Ok(())
    }

    fn allreduce_or(&self, data: &mut [u8]) -> Result<(), InstanceError> {
        self.count(data.len())?;
        self.same_length(data.len(), "the length of a weight buffer")?;
        let send = data.to_vec();
        self.world()
            .all_reduce_into(&send[..], data, SystemOperation::bitwise_or());
        Ok(())
    }

    fn allgather(&self, data: &[u8]) -> Result<Vec<u8>, InstanceError> {
        let world = self.world();
        let mine = self.count(data.len())?;
        let mut counts: Vec<Count> = vec![0; self.size];
        world.all_gather_into(&mine, &mut counts[..]);
        let mut displs = Vec::with_capacity(self.size);
        let mut total: usize = 0;
        for &c in &counts {
            displs.push(self.count(total)?);
            total += c as usize;
        }
        let mut out = vec![0u8; total];
        {
            let mut partition = PartitionMut::new(&mut out[..], counts, &displs[..]);
            world.all_gather_varcount_into(data, &mut partition);
        }
        Ok(out)
    }

    fn abort(&self, code: i32) -> ! {
        self.world().abort(code)
    }
}
