//! Starting programs under `mpirun` the machine's way, for the test suites that need it:
//! root allowed, oversubscribed, loopback and shared memory only, and a `TMPDIR` of its own
//! for each launch (OpenMPI's session directories collide otherwise).

use std::path::Path;
use std::process::{Command, Output};

/// `mpirun -np ranks` of `program args`, with the recipe's environment and a `TMPDIR` of
/// its own under `dir`.
pub fn mpirun(ranks: usize, program: &Path, args: &[&str], dir: &Path) -> Command {
    let tmp = dir.join(format!("tmp-{ranks}-{}", args.len()));
    std::fs::create_dir_all(&tmp).expect("a TMPDIR");
    let mut command = Command::new("mpirun");
    command
        .args(["-np", &ranks.to_string()])
        .arg(program)
        .args(args)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
        .env("OMPI_MCA_btl", "self,vader")
        .env("OMPI_MCA_oob_tcp_if_include", "lo")
        .env("OMPI_MCA_btl_tcp_if_include", "lo")
        .env("MPIEXEC_TIMEOUT", "300")
        .env("TMPDIR", &tmp);
    command
}

/// Runs `command`; a machine without `mpirun` fails the test, never skips it.
pub fn run(mut command: Command) -> Output {
    command
        .output()
        .expect("mpirun runs: install OpenMPI (tests/ci.sh does)")
}
