//! A session across the ranks of an MPI job, for the README and the fault tests of
//! `host/tests/mpi.rs`:
//!
//! ```sh
//! mpirun -np 2 session_across <workers> thread|<path of tessera> [rounds] [rank that panics]
//! ```
//!
//! Rank 0 calls `add_one` on every worker and syncs, `rounds` times (0, the default: until
//! something fails), printing `running` once the first round is done and, at the end,
//! every worker's last result; a failure is printed with its reason (before the session's
//! teardown) and ends rank 0 with status 1. Given a rank, that rank panics 1.5 s after it starts serving (a worker's rank
//! failing while the session runs).

use std::path::PathBuf;
use std::time::Duration;

use tessera_host::runtime::Placement;
use tessera_host::session::{CallArg, Session, SessionError};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(workers), Some(placement)) = (
        args.first().and_then(|w| w.parse::<usize>().ok()),
        args.get(1),
    ) else {
        eprintln!(
            "usage: session_across <workers> thread|<path of tessera> [rounds] [rank that panics]"
        );
        std::process::exit(2);
    };
    let placement = match placement.as_str() {
        "thread" => Placement::Thread,
        exe => Placement::Process(PathBuf::from(exe)),
    };
    let rounds = args
        .get(2)
        .and_then(|r| r.parse::<usize>().ok())
        .unwrap_or(0);
    let rank = std::env::var("OMPI_COMM_WORLD_RANK").unwrap_or_default();
    if args.get(3) == Some(&rank) {
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1500));
            panic!("rank {rank} panics on purpose");
        });
    }
    let session = match Session::new(&placement, workers, 1, 1 << 20) {
        Ok(session) => session,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = run(&session, rounds) {
        // Said while the session lives: its teardown waits for the other ranks (up to the
        // MPI deadline when one of them is stopped).
        eprintln!("error: {e}");
        drop(session);
        std::process::exit(1);
    }
}

fn run(session: &Session, rounds: usize) -> Result<(), SessionError> {
    let add_one = session.get_function("add_one")?;
    let replica_id = session.get_function("replica_id")?;
    let mut round = 0;
    loop {
        let id = session.call(&replica_id, &[])?;
        let result = session.call(&add_one, &[CallArg::Register(&id)])?;
        session.sync_all()?;
        round += 1;
        if round == 1 {
            println!("running");
        }
        if round == rounds {
            for worker in 0..session.num_workers() {
                println!("worker {worker}: {:?}", session.debug_get(&result, worker)?);
            }
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
