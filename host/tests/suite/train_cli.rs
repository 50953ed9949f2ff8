//! `tessera train` as a user runs it: it trains, checks itself against the host reference,
//! and says so; bad input is a one-line error.

use crate::common;

use std::process::{Command, Output};

use common::TempFile;

fn tessera_train(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("train")
        .args(args)
        .output()
        .expect("tessera runs")
}

/// Asserts the run passed its reference check; returns its stdout.
fn assert_passes(what: &str, out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && stdout.contains("ok: the accelerator matches the host reference"),
        "{what}: {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Asserts the run was refused with one line on stderr, exit status 2 and no "ok";
/// returns that line.
fn assert_refused(what: &str, out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{what}: {stdout}\n{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{what}: {stderr}");
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
    assert!(!stdout.contains("ok:"), "{what}: {stdout}");
    stderr
}

/// The numbers of the "loss: A at step 1, B at step N" line.
fn loss_line(stdout: &str) -> Vec<f64> {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("loss:"))
        .expect("a loss line");
    line.split([' ', ','])
        .filter_map(|w| w.parse().ok())
        .collect()
}

/// A wider model over 200 steps passes its own check on a clean run. With the reference
/// restarted from the devices' state only every 10 steps, the `f32` run and the `f64`
/// reference drifted apart within the window (a ReLU near-tie resolved the other way,
/// amplified by momentum) and the run failed its check with anchors off by 3e-3, and the
/// message named neither the step nor the tensor.
#[test]
fn a_wider_model_passes_its_check_over_200_steps() {
    let out = tessera_train(&["--hidden", "64", "--steps", "200"]);
    let stdout = assert_passes("--hidden 64 --steps 200", &out);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("reference"))
        .expect("a reference line");
    assert!(line.contains("every step"), "{line}");
    assert!(
        line.contains("after step"),
        "the largest error's place: {line}"
    );
}

#[test]
fn trains_and_matches_the_reference() {
    let out = tessera_train(&["--steps", "12", "--dropout", "0.1"]);
    let stdout = assert_passes("12 steps", &out);
    // The loss falls: "loss: A at step 1, B at step 12" with B < A.
    let numbers = loss_line(&stdout);
    assert!(
        numbers[2] < numbers[0],
        "training must reduce the loss: {numbers:?}"
    );
}

#[test]
fn the_reference_check_can_fail() {
    // f32 on the device never equals f64 on the host exactly: a zero tolerance fails.
    let out = tessera_train(&["--steps", "2", "--tolerance", "0"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("differs from the host reference"));
}

#[test]
fn invalid_groupings_name_the_rule() {
    // The first layer's comm group, and the second layer's (consecutive:2 by default).
    for (args, argument) in [
        (
            &["--replicas", "3", "--comm", "consecutive:2"][..],
            "--comm consecutive:2",
        ),
        (
            &["--replicas", "3", "--comm", "none"][..],
            "--output-comm consecutive:2",
        ),
        (
            &["--replicas", "4", "--output-comm", "orthogonal:3"][..],
            "--output-comm orthogonal:3",
        ),
    ] {
        let stderr = assert_refused(&args.join(" "), &tessera_train(args));
        assert!(stderr.contains(argument), "{stderr}");
        assert!(stderr.contains("--replicas"), "{stderr}");
        assert!(stderr.contains("divide the number of replicas"), "{stderr}");
    }
}

/// A loss anchored every second micro-batch (the default job has 4 batches per step)
/// comes back and matches the reference.
#[test]
fn the_loss_can_be_anchored_every_second_micro_batch() {
    let out = tessera_train(&["--steps", "4", "--anchor", "loss=everyn:2"]);
    let stdout = assert_passes("loss=everyn:2", &out);
    assert!(stdout.contains("at step 4"), "{stdout}");
}

/// A return period that does not divide the batches per step is refused before any device
/// starts, naming the anchor.
#[test]
fn an_anchor_period_that_does_not_divide_the_batches_is_refused() {
    let out = tessera_train(&["--anchor", "loss=everyn:3", "--batches-per-step", "4"]);
    let stderr = assert_refused("loss=everyn:3", &out);
    assert!(stderr.contains("anchor `loss`"), "{stderr}");
    assert!(stderr.contains("(3)") && stderr.contains("(4)"), "{stderr}");
}

/// Two classes on either side of a line through the origin, 96 points.
fn separable() -> (Vec<f32>, Vec<i64>) {
    let n = 96;
    let inputs: Vec<f32> = (0..2 * n).map(|i| common::value(3, i)).collect();
    let labels = inputs
        .chunks(2)
        .map(|p| i64::from(p[0] + 0.5 * p[1] > 0.0))
        .collect();
    (inputs, labels)
}

#[test]
fn trains_on_a_data_file() {
    let (inputs, labels) = separable();
    let file = TempFile::new("data.safetensors");
    common::write_safetensors(file.path(), &[labels.len(), 2], &inputs, &labels);
    let out = tessera_train(&["--data", file.arg(), "--steps", "6"]);
    let stdout = assert_passes("--data", &out);
    assert!(stdout.contains("on the 96 samples"), "{stdout}");
    let numbers = loss_line(&stdout);
    assert!(
        numbers[2] < numbers[0],
        "training must reduce the loss: {numbers:?}"
    );
}

#[test]
fn a_bad_data_file_is_a_one_line_error() {
    let (inputs, labels) = separable();
    let n = labels.len();
    let mut negative = labels.clone();
    negative[5] = -1;
    // A negative label; inputs of the wrong rank; not one label per input sample.
    let cases: [(&str, &[usize], &[i64], &str); 3] = [
        ("label.safetensors", &[n, 2], &negative, "found -1"),
        ("rank.safetensors", &[2 * n], &labels, "`inputs`"),
        ("count.safetensors", &[n / 2, 4], &labels, "`labels`"),
    ];
    for (name, shape, labels, says) in cases {
        let file = TempFile::new(name);
        common::write_safetensors(file.path(), shape, &inputs, labels);
        let out = tessera_train(&["--data", file.arg(), "--steps", "1"]);
        let stderr = assert_refused(name, &out);
        assert!(
            stderr.contains("--data") && stderr.contains(says),
            "{stderr}"
        );
    }
}

/// The README's main job, as it is (or `extra` on top), on `placement`: it must pass its
/// own reference check. Under QEMU it once failed every time (late reductions applied to
/// the wrong round).
fn the_default_job_passes_on(placement: &str, extra: &[&str]) {
    let mut args = vec!["--placement", placement];
    args.extend_from_slice(extra);
    assert_passes(placement, &tessera_train(&args));
}

#[test]
fn the_default_job_passes_in_threads() {
    the_default_job_passes_on("thread", &[]);
}

#[test]
fn the_default_job_passes_in_child_processes() {
    the_default_job_passes_on("process", &[]);
}

/// About 2 s a step: 8 steps of the default job.
#[test]
#[ignore = "needs qemu-system-arm, defmt-print and the firmware: tests/ci.sh runs it (--include-ignored)"]
fn the_default_job_passes_in_qemu() {
    let _exclusive = common::exclusive();
    let firmware = common::firmware();
    the_default_job_passes_on(
        "qemu",
        &["--firmware", firmware.to_str().unwrap(), "--steps", "8"],
    );
}
