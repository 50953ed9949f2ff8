//! Exact resume: a run resumed from a checkpoint, through the library or in a new process
//! (threads, child processes, QEMU), trains exactly like the run that never stopped.

use super::*;

// ---------------------------------------------------------------------------------------
// 2. Exact resume
// ---------------------------------------------------------------------------------------

/// A small `tessera train` job, as [`CLI_JOB`] spells it on the command line.
fn job(steps: usize, placement: Placement) -> TrainJob {
    TrainJob {
        placement,
        ..common::small_train_job(steps)
    }
}

/// The job's checkpoint after training it `2k` steps in one run equals the one after `k`
/// steps and `k` more resumed from the first run's checkpoint.
fn assert_same_run(what: &str, long: &Path, resumed: &Path, steps: u64) {
    let long = Checkpoint::load(long).unwrap();
    let resumed = Checkpoint::load(resumed).unwrap();
    assert_eq!(long.step, steps, "{what}");
    assert_eq!(resumed.step, steps, "{what}: the resumed run's step count");
    assert_same_checkpoint(what, &resumed, &long);
}

/// Through the library, on `placement`: 2k steps against k steps, a checkpoint and k
/// more resumed from it by a job with another seed (the checkpoint's replaces it).
fn resume_through_the_library(label: &str, placement: Placement) {
    let k = 3;
    let scratch = Scratch::new(&format!("resume-library-{label}"));
    let (long_path, short_path, resumed_path) = (
        scratch.path("long.safetensors"),
        scratch.path("short.safetensors"),
        scratch.path("resumed.safetensors"),
    );
    let run = |job: TrainJob| -> TrainReport { train(&job).expect("the job runs") };
    let long = run(TrainJob {
        checkpoint: Some(long_path.clone()),
        ..job(2 * k, placement.clone())
    });
    let short = run(TrainJob {
        checkpoint: Some(short_path.clone()),
        every: 1,
        ..job(k, placement.clone())
    });
    let resumed = run(TrainJob {
        resume: Some(short_path.clone()),
        checkpoint: Some(resumed_path.clone()),
        seed: 1234,
        ..job(k, placement.clone())
    });
    assert_same_run(
        &format!("{placement:?}"),
        &long_path,
        &resumed_path,
        2 * k as u64,
    );
    assert_eq!(long.step_losses.len(), 2 * k);
    assert_eq!(short.step_losses[..], long.step_losses[..k]);
    assert_eq!(
        resumed.step_losses[..],
        long.step_losses[k..],
        "the resumed run's losses are the long run's last {k}"
    );
    // The reference continues from the checkpoint too.
    assert!(
        resumed.passed(1e-3),
        "the resumed run differs from its reference: weights {}, anchors {}",
        resumed.weight_check,
        resumed.anchor_check
    );
}

/// Catches: state missing from the checkpoint (optimizer velocity, the dropout RNG), a
/// resumed run that restarts its data at step 0 or draws it from the job's seed instead of
/// the checkpoint's, or a reference that does not resume with the devices.
#[test]
fn resume_is_exact_through_the_library_on_threads() {
    resume_through_the_library("threads", Placement::Thread);
}

/// As above with every device in a child process (state crossing a pipe both ways).
#[test]
fn resume_is_exact_through_the_library_in_child_processes() {
    resume_through_the_library(
        "processes",
        Placement::Process(PathBuf::from(env!("CARGO_BIN_EXE_tessera"))),
    );
}

/// Through the binary: `tessera train` for 2k steps against k steps and a new process
/// resuming with `--resume` for k more (with the checkpoint's seed: `--seed` is refused
/// beside it), `model` being the job's other arguments.
fn resume_in_a_new_process(what: &str, model: &[&str], k: usize) {
    let scratch = Scratch::new(&format!("resume-cli-{}", what.replace(' ', "-")));
    let (long, short, resumed) = (
        scratch.path("long.safetensors"),
        scratch.path("short.safetensors"),
        scratch.path("resumed.safetensors"),
    );
    let (k_text, two_k) = (k.to_string(), (2 * k).to_string());
    let train_args = |extra: &[&str]| -> Vec<String> {
        let mut args = vec!["train".to_string()];
        args.extend(model.iter().map(|s| s.to_string()));
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    let run = |label: &str, extra: &[&str]| {
        let args = train_args(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_success(&format!("{what}: {label}"), &tessera(&args));
    };
    run(
        "the long run",
        &[
            "--steps",
            &two_k,
            "--seed",
            "7",
            "--checkpoint",
            text(&long),
        ],
    );
    run(
        "the first half",
        &[
            "--steps",
            &k_text,
            "--seed",
            "7",
            "--checkpoint",
            text(&short),
        ],
    );
    run(
        "the resumed half",
        &[
            "--steps",
            &k_text,
            "--resume",
            text(&short),
            "--checkpoint",
            text(&resumed),
        ],
    );
    assert_same_run(what, &long, &resumed, 2 * k as u64);
}

/// Catches: a resume that only works inside the process that wrote the checkpoint (state
/// kept in memory, not in the file), or a command line that does not pass `--resume` and
/// `--checkpoint` through.
#[test]
fn resume_is_exact_in_a_new_process_on_threads() {
    resume_in_a_new_process("threads", &CLI_JOB, 3);
}

/// As above with `--placement process`.
#[test]
fn resume_is_exact_in_a_new_process_with_child_process_devices() {
    let model = [&CLI_JOB[..], &["--placement", "process"]].concat();
    resume_in_a_new_process("processes", &model, 3);
}

/// As above on the firmware in QEMU: the firmware's RNG and velocity state go through the
/// same file.
#[test]
#[ignore = "needs qemu-system-arm, defmt-print and the firmware: tests/ci.sh runs it (--include-ignored)"]
fn resume_is_exact_in_a_new_process_in_qemu() {
    let _exclusive = common::exclusive();
    let firmware = common::firmware();
    let firmware = text(&firmware).to_string();
    resume_in_a_new_process(
        "qemu",
        &[
            "--placement",
            "qemu",
            "--firmware",
            &firmware,
            "--replicas",
            "2",
            "--hidden",
            "8",
            "--samples",
            "300",
            "--batches-per-step",
            "1",
            "--accumulation",
            "4",
        ],
        1,
    );
}
