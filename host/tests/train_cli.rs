//! `tessera train` as a user runs it: it trains, checks itself against the host reference,
//! and says so; bad input is a one-line error.

use std::process::{Command, Output};

fn tessera_train(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("train")
        .args(args)
        .output()
        .expect("tessera runs")
}

#[test]
fn trains_and_matches_the_reference() {
    let out = tessera_train(&["--steps", "12", "--dropout", "0.1"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("ok: the accelerator matches the host reference"),
        "{stdout}"
    );
    // The loss falls: "loss: A at step 1, B at step 12" with B < A.
    let line = stdout
        .lines()
        .find(|l| l.starts_with("loss:"))
        .expect("a loss line");
    let numbers: Vec<f64> = line
        .split([' ', ','])
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(
        numbers[2] < numbers[0],
        "training must reduce the loss: {line}"
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
    let out = tessera_train(&["--replicas", "3", "--comm", "consecutive:2"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("divide the number of replicas (3)"),
        "{stderr}"
    );
}
