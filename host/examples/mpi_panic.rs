//! Rank 1 panics while rank 0 waits in a barrier: tessera's panic hook must abort the whole
//! job (MPI_Abort) instead of leaving rank 0 waiting forever. `host/tests/mpi.rs` runs it
//! under `mpirun -np 2`.

fn main() {
    let (instances, _mpi) = match tessera_host::instance::from_environment() {
        Ok(found) => found,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    if instances.rank() == 1 {
        panic!("rank 1 panics on purpose");
    }
    if let Err(e) = instances.barrier() {
        eprintln!("error: {e}");
    }
}
