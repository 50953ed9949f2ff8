//! One job across MPI ranks: `mpirun -np N tessera train` trains exactly what one process
//! trains, and a rank that dies or panics ends the whole job promptly.
//!
//! Built with `--features mpi` only (the test command runs it so, after installing
//! OpenMPI); every test fails, never skips, when `mpirun` cannot run. The environment
//! follows the machine's recipe: root allowed, oversubscribed, loopback only, and a
//! `TMPDIR` of its own for each launch (OpenMPI's session directories collide otherwise).
#![cfg(feature = "mpi")]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use tessera_host::checkpoint::Checkpoint;

#[path = "mpirun/mod.rs"]
mod mpirun;
use mpirun::{mpirun, run};

const TESSERA: &str = env!("CARGO_BIN_EXE_tessera");

/// A scratch directory of its own for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-mpi-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

fn success(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The `loss:` line of a summary.
fn loss_line(stdout: &str) -> String {
    stdout
        .lines()
        .find(|l| l.starts_with("loss:"))
        .unwrap_or_else(|| panic!("a loss line in {stdout}"))
        .to_string()
}

/// Two checkpoints hold the same state, bit for bit.
fn assert_same_state(a: &Path, b: &Path) {
    let (a, b) = (Checkpoint::load(a).unwrap(), Checkpoint::load(b).unwrap());
    assert_eq!(a.fingerprint, b.fingerprint, "the same program");
    assert_eq!(a.step, b.step);
    assert_eq!(a.rng, b.rng, "every replica's RNG state");
    assert_eq!(a.weights, b.weights, "every weight, bit for bit");
    assert_eq!(a.optimizer, b.optimizer, "the optimizer state, bit for bit");
}

/// One process against 2 and 4 ranks on 8 replicas, in two settings (the default: a layer
/// sharded across all replicas, another in groups of two; and orthogonal groups, padded
/// shards, every replica's row returned). Catches windows that feed a replica another's
/// samples, reductions combined per instance instead of per group, and weights to host
/// missing the rows another instance holds.
#[test]
fn two_and_four_ranks_train_exactly_like_one_process() {
    let dir = scratch("parity");
    let settings: [&[&str]; 2] = [
        &[],
        &[
            "--comm",
            "orthogonal:4",
            "--output-comm",
            "consecutive:4",
            "--shard",
            "padded-tail",
            "--retrieval",
            "all-replicas",
        ],
    ];
    for (s, extra) in settings.iter().enumerate() {
        let path = |tag: &str| dir.join(format!("{s}-{tag}.safetensors"));
        let one = path("one");
        let args = vec!["train", "--replicas", "8", "--steps", "6", "--checkpoint"];
        let single = {
            let mut a = args.clone();
            a.push(one.to_str().unwrap());
            a.extend_from_slice(extra);
            success(
                &Command::new(TESSERA)
                    .args(&a)
                    .output()
                    .expect("tessera runs"),
            )
        };
        for ranks in [2, 4] {
            let file = path(&format!("np{ranks}"));
            let mut args = args.clone();
            args.push(file.to_str().unwrap());
            args.extend_from_slice(extra);
            let stdout = success(&run(mpirun(ranks, Path::new(TESSERA), &args, &dir)));
            assert!(
                stdout.contains(&format!("across {ranks} instances")),
                "{stdout}"
            );
            assert_eq!(
                loss_line(&stdout),
                loss_line(&single),
                "np {ranks}: every loss"
            );
            assert_eq!(
                stdout.matches("ok: the accelerator matches").count(),
                1,
                "only rank 0 reports: {stdout}"
            );
            assert_same_state(&one, &file);
        }
    }
}

/// Catches ranks that write one trace file at once (two processes truncating and writing
/// the same path: a file of neither's events, or not JSON): `--trace run.json` across 2
/// ranks leaves run.rank0.json and run.rank1.json, each a whole trace of its rank's steps,
/// and no run.json.
#[test]
fn each_rank_writes_its_own_trace() {
    let dir = scratch("trace");
    let path = dir.join("run.json");
    let args = [
        "train",
        "--replicas",
        "4",
        "--steps",
        "3",
        "--trace",
        path.to_str().unwrap(),
    ];
    success(&run(mpirun(2, Path::new(TESSERA), &args, &dir)));
    assert!(!path.exists(), "no file under the name as given");
    for rank in 0..2 {
        let file = dir.join(format!("run.rank{rank}.json"));
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
        let trace: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        let steps = (trace["traceEvents"].as_array().unwrap().iter())
            .filter(|e| e["ph"] == "X" && e["name"] == "step")
            .count();
        assert_eq!(steps, 3, "rank {rank}: one `step` per step");
    }
}

/// A checkpoint written by 2 ranks resumes in one process, and continues exactly as one
/// process would have. Catches checkpoints that hold only rank 0's replicas.
#[test]
fn a_checkpoint_from_two_ranks_resumes_in_one_process() {
    let dir = scratch("resume");
    let half = dir.join("half.safetensors");
    let whole = dir.join("whole.safetensors");
    let resumed = dir.join("resumed.safetensors");
    let train = |args: &[&str]| {
        success(
            &Command::new(TESSERA)
                .arg("train")
                .args(args)
                .output()
                .expect("tessera runs"),
        )
    };
    let args = [
        "train",
        "--replicas",
        "8",
        "--steps",
        "3",
        "--checkpoint",
        half.to_str().unwrap(),
    ];
    success(&run(mpirun(2, Path::new(TESSERA), &args, &dir)));
    train(&[
        "--replicas",
        "8",
        "--steps",
        "6",
        "--checkpoint",
        whole.to_str().unwrap(),
    ]);
    train(&[
        "--replicas",
        "8",
        "--steps",
        "3",
        "--resume",
        half.to_str().unwrap(),
        "--checkpoint",
        resumed.to_str().unwrap(),
    ]);
    assert_same_state(&whole, &resumed);
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
        // The parent pid is the second field after the command's closing parenthesis.
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if parent == Some(pid) {
            found.push(child);
        }
    }
    found
}

/// The rank `pid` runs as, from its environment.
fn rank_of(pid: u32) -> Option<u32> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    environ
        .split(|&b| b == 0)
        .filter_map(|v| std::str::from_utf8(v).ok())
        .find_map(|v| v.strip_prefix("OMPI_COMM_WORLD_RANK="))
        .and_then(|r| r.parse().ok())
}

/// The two ranks `mpirun` started, as (pid, rank), once both run and have trained for a
/// moment (they start within a second).
fn two_ranks_training(mpirun: &Child) -> Vec<(u32, u32)> {
    let start = Instant::now();
    let ranks = loop {
        let ranks: Vec<(u32, u32)> = children_of(mpirun.id())
            .into_iter()
            .filter_map(|pid| Some((pid, rank_of(pid)?)))
            .collect();
        if ranks.len() == 2 {
            break ranks;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the ranks never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    std::thread::sleep(Duration::from_millis(1500));
    ranks
}

/// Every one of `ranks` is gone (or a zombie: ended, only its reaping left).
fn assert_no_rank_left(ranks: &[(u32, u32)]) {
    for (pid, rank) in ranks {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .unwrap_or_default()
                    .contains(") Z "),
            "rank {rank} (pid {pid}) outlived the job"
        );
    }
}

/// Waits up to `limit` for `child` to exit.
fn wait_for(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Some(status) = child.try_wait().expect("wait works") {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// A rank killed in the middle of training ends the job: mpirun exits with a failure
/// within seconds, and no rank is left running. Catches ranks waiting forever in a
/// collective for a peer that is gone.
#[test]
fn a_killed_rank_ends_the_job_promptly() {
    let dir = scratch("kill");
    let args = ["train", "--replicas", "4", "--steps", "1000000"];
    let mut command = mpirun(2, Path::new(TESSERA), &args, &dir);
    let mut mpirun = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("mpirun runs: install OpenMPI (tests/ci.sh does)");
    let ranks = two_ranks_training(&mpirun);
    let (victim, _) = ranks.iter().find(|(_, rank)| *rank == 1).expect("rank 1");
    let killed = Command::new("kill")
        .args(["-KILL", &victim.to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let status = wait_for(&mut mpirun, Duration::from_secs(30));
    let Some(status) = status else {
        let _ = mpirun.kill();
        panic!("mpirun still running 30 s after rank 1 was killed");
    };
    assert!(!status.success(), "a job that lost a rank must fail");
    assert_no_rank_left(&ranks);
}

/// A stopped rank (SIGSTOP) is not gone: MPI sees nothing wrong, and before collectives
/// had a deadline its peers waited in their next one forever. Now the job ends within the
/// deadline (3 s here) with a message naming the waiting rank and the deadline, and no
/// rank — the stopped one included — is left behind.
#[test]
fn a_stopped_rank_ends_the_job_at_the_deadline() {
    let dir = scratch("stop");
    let args = ["train", "--replicas", "4", "--steps", "1000000"];
    let mut command = mpirun(2, Path::new(TESSERA), &args, &dir);
    let mut mpirun = command
        .env("TESSERA_MPI_DEADLINE", "3")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpirun runs: install OpenMPI (tests/ci.sh does)");
    let ranks = two_ranks_training(&mpirun);
    let (victim, _) = ranks.iter().find(|(_, rank)| *rank == 1).expect("rank 1");
    let stopped = Command::new("kill")
        .args(["-STOP", &victim.to_string()])
        .status()
        .expect("kill runs");
    assert!(stopped.success());
    let status = wait_for(&mut mpirun, Duration::from_secs(60));
    let Some(status) = status else {
        let _ = Command::new("kill")
            .args(["-KILL", &victim.to_string()])
            .status();
        let _ = mpirun.kill();
        panic!("mpirun still running 60 s after rank 1 was stopped (deadline 3 s)");
    };
    assert!(!status.success(), "a job with a stopped rank must fail");
    let mut stderr = String::new();
    if let Some(mut pipe) = mpirun.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
    }
    assert!(
        stderr.contains("rank 0") && stderr.contains("TESSERA_MPI_DEADLINE"),
        "the message names the waiting rank and the deadline: {stderr}"
    );
    assert_no_rank_left(&ranks);
}

/// A panic on one rank aborts the job through MPI_Abort instead of leaving the other rank
/// waiting in a barrier. Catches a missing panic hook.
#[test]
fn a_panic_on_one_rank_aborts_the_job() {
    let dir = scratch("panic");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/examples/mpi_panic");
    assert!(
        example.exists(),
        "{} is built by `cargo test -p tessera-host --features mpi`",
        example.display()
    );
    let mut command = mpirun(2, &example, &[], &dir);
    let mut child = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpirun runs: install OpenMPI (tests/ci.sh does)");
    let status = wait_for(&mut child, Duration::from_secs(30));
    let Some(status) = status else {
        let _ = child.kill();
        panic!("the job hung after a rank panicked");
    };
    assert!(!status.success(), "a job with a panicked rank must fail");
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
    }
    assert!(stderr.contains("rank 1 panics on purpose"), "{stderr}");
}

// ---- a session across ranks --------------------------------------------------------

/// The `session_across` example (built by `cargo test --features mpi`).
fn session_across() -> PathBuf {
    let example =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/examples/session_across");
    assert!(
        example.exists(),
        "{} is built by `cargo test -p tessera-host --features mpi`",
        example.display()
    );
    example
}

/// A session job under way.
struct Running {
    job: Child,
    /// Its ranks, as (pid, rank).
    ranks: Vec<(u32, u32)>,
    /// Each rank's device processes, as (rank, pids).
    devices: Vec<(u32, Vec<u32>)>,
}

/// `session_across` under `mpirun -np 2` with 4 workers in child processes (`extra`
/// appended), once rank 0 has run a round on every worker; `deadline`, if given, is the
/// job's `TESSERA_MPI_DEADLINE` in seconds.
fn session_running(name: &str, extra: &[&str], deadline: Option<u64>) -> Running {
    let dir = scratch(name);
    let mut args = vec!["4", TESSERA];
    args.extend_from_slice(extra);
    let mut command = mpirun(2, &session_across(), &args, &dir);
    if let Some(seconds) = deadline {
        command.env("TESSERA_MPI_DEADLINE", seconds.to_string());
    }
    let mut job = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpirun runs: install OpenMPI (tests/ci.sh does)");
    let mut line = String::new();
    let stdout = job.stdout.as_mut().expect("piped");
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)
        .expect("rank 0's output");
    assert_eq!(line.trim(), "running", "rank 0 ran a round on every worker");
    let ranks: Vec<(u32, u32)> = children_of(job.id())
        .into_iter()
        .filter_map(|pid| Some((pid, rank_of(pid)?)))
        .collect();
    assert_eq!(ranks.len(), 2, "two ranks: {ranks:?}");
    let devices = ranks
        .iter()
        .map(|&(pid, rank)| {
            let devices: Vec<u32> = children_of(pid)
                .into_iter()
                .filter(|&child| {
                    std::fs::read(format!("/proc/{child}/cmdline"))
                        .unwrap_or_default()
                        .split(|&b| b == 0)
                        .any(|arg| arg == b"device")
                })
                .collect();
            (rank, devices)
        })
        .collect();
    Running {
        job,
        ranks,
        devices,
    }
}

/// `pid` is gone (or a zombie: ended, only its reaping left).
fn gone(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
        || std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

/// Waits up to 30 s for `job` to fail; its stderr.
fn fails_promptly(mut job: Child, what: &str) -> String {
    let Some(status) = wait_for(&mut job, Duration::from_secs(30)) else {
        let _ = job.kill();
        panic!("the job still runs 30 s after {what}");
    };
    assert!(!status.success(), "a job after {what} must fail");
    let mut stderr = String::new();
    if let Some(mut pipe) = job.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
    }
    stderr
}

/// Every device process of every rank is gone (a device process's reaper kills it once its
/// rank is gone, however it ended).
fn assert_no_device_left(devices: &[(u32, Vec<u32>)]) {
    let start = Instant::now();
    for (rank, pids) in devices {
        for &pid in pids {
            while !gone(pid) && start.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(50));
            }
            assert!(
                gone(pid),
                "device process {pid} of rank {rank} outlived the job"
            );
        }
    }
}

/// A serving rank killed while the session runs ends the job within seconds (mpirun names
/// the rank), and neither rank nor any device process is left. Catches a controller
/// waiting forever on workers whose rank is gone.
#[test]
fn a_killed_serving_rank_ends_the_session() {
    let Running {
        job,
        ranks,
        devices,
    } = session_running("session-kill-1", &[], None);
    assert_eq!(
        devices.iter().map(|(_, d)| d.len()).sum::<usize>(),
        4,
        "{devices:?}"
    );
    let (victim, _) = ranks.iter().find(|(_, rank)| *rank == 1).expect("rank 1");
    assert!(Command::new("kill")
        .args(["-KILL", &victim.to_string()])
        .status()
        .unwrap()
        .success());
    fails_promptly(job, "rank 1 was killed");
    assert_no_rank_left(&ranks);
    assert_no_device_left(&devices);
}

/// The controller killed ends every rank, and every rank's device processes: no orphans.
#[test]
fn a_killed_controller_ends_every_rank() {
    let Running {
        job,
        ranks,
        devices,
    } = session_running("session-kill-0", &[], None);
    let (victim, _) = ranks.iter().find(|(_, rank)| *rank == 0).expect("rank 0");
    assert!(Command::new("kill")
        .args(["-KILL", &victim.to_string()])
        .status()
        .unwrap()
        .success());
    fails_promptly(job, "rank 0 was killed");
    assert_no_rank_left(&ranks);
    assert_no_device_left(&devices);
}

/// A device process of rank 1 killed while its rank lives: the controller reports the
/// failure naming the worker's global id (rank 1 hosts workers 2 and 3), and the job ends.
/// Catches remote workers renumbered from 0 on their rank.
#[test]
fn a_remote_worker_failure_names_its_global_id() {
    let Running {
        job,
        ranks,
        devices,
    } = session_running("session-kill-device", &[], None);
    let (_, on_rank_1) = devices.iter().find(|(rank, _)| *rank == 1).expect("rank 1");
    let victim = on_rank_1.first().expect("a device process on rank 1");
    assert!(Command::new("kill")
        .args(["-KILL", &victim.to_string()])
        .status()
        .unwrap()
        .success());
    let stderr = fails_promptly(job, "a device of rank 1 was killed");
    assert!(
        stderr.contains("worker 2") || stderr.contains("worker 3"),
        "the failure names worker 2 or 3: {stderr}"
    );
    assert_no_rank_left(&ranks);
    assert_no_device_left(&devices);
}

/// A rank that panics while it serves aborts the whole job (the panic hook's MPI_Abort),
/// instead of leaving the controller waiting on its workers.
#[test]
fn a_panic_on_a_serving_rank_aborts_the_session() {
    let Running {
        job,
        ranks,
        devices,
    } = session_running("session-panic", &["0", "1"], None);
    let stderr = fails_promptly(job, "rank 1 panicked");
    assert!(stderr.contains("rank 1 panics on purpose"), "{stderr}");
    assert_no_rank_left(&ranks);
    assert_no_device_left(&devices);
}

/// Stops rank `victim` (SIGSTOP) of a session job running with a deadline of 3 s; returns
/// the job's stderr once it has ended, after checking that it ended within the deadline
/// plus a few seconds and that no rank or device process is left.
fn stopped_rank_ends_the_session(victim: u32, name: &str) -> String {
    let Running {
        job,
        ranks,
        devices,
    } = session_running(name, &[], Some(3));
    let (pid, _) = ranks
        .iter()
        .find(|(_, rank)| *rank == victim)
        .expect("the rank");
    let start = Instant::now();
    assert!(Command::new("kill")
        .args(["-STOP", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    let stderr = fails_promptly(job, "a rank was stopped");
    let took = start.elapsed();
    assert!(
        took < Duration::from_secs(3 + 10),
        "the job ended {took:?} after rank {victim} was stopped (deadline 3 s)"
    );
    assert_no_rank_left(&ranks);
    assert_no_device_left(&devices);
    stderr
}

/// A serving rank stopped (SIGSTOP) while the session runs is not gone: MPI sees nothing
/// wrong. Before the post offices watched each other, rank 0's command timed out and then
/// rank 0 hung for ever, joining its post office stuck sending to the stopped rank, with
/// nothing printed. Now the job ends within the deadline plus a few seconds, rank 0 naming
/// the stopped rank and the deadline.
#[test]
fn a_stopped_serving_rank_ends_the_session_at_the_deadline() {
    let stderr = stopped_rank_ends_the_session(1, "session-stop-1");
    assert!(
        stderr.contains("rank 1 is stopped or gone") && stderr.contains("TESSERA_MPI_DEADLINE"),
        "rank 0 names the stopped rank and the deadline: {stderr}"
    );
}

/// The controller stopped (SIGSTOP): before, the serving rank waited for its next command
/// for ever. Now the serving rank, hearing nothing from rank 0 for the deadline, ends the
/// job naming it.
#[test]
fn a_stopped_controller_ends_every_rank_at_the_deadline() {
    let stderr = stopped_rank_ends_the_session(0, "session-stop-0");
    assert!(
        stderr.contains("rank 1: rank 0 is stopped or gone")
            && stderr.contains("TESSERA_MPI_DEADLINE"),
        "rank 1 names the stopped controller and the deadline: {stderr}"
    );
}
