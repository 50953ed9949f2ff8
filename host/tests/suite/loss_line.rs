//! The default `tessera train` prints the same loss line on every placement: threads, child
//! processes and the firmware under QEMU (on its socket, or on a pty as a serial port) run
//! the same device code on the same samples from the same seeds, so their losses agree to
//! the last printed digit.

use crate::common;

use std::process::Command;

/// The "loss: A at step 1, B at step N" line of the default `tessera train` on `placement`
/// (with `extra` arguments), from a run that passed its own reference check.
fn loss_line(placement: &str, extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["train", "--placement", placement])
        .args(extra)
        .output()
        .expect("tessera runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{placement}: {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with("loss:")).collect();
    assert_eq!(lines.len(), 1, "{placement}: one loss line in\n{stdout}");
    lines[0].to_string()
}

/// Catches a placement that computes differently from the others — a different reduction
/// order of the gradients, another `exp` or `ln`, a sample fed to another replica. Each run
/// still passes its own reference check (the reference restarts from the devices' state at
/// every check and allows 1e-3), so only holding the placements to one another shows it:
/// child processes must print the threads' loss line byte for byte.
#[test]
fn the_default_job_prints_the_same_loss_line_in_threads_and_child_processes() {
    let threads = loss_line("thread", &[]);
    assert_eq!(loss_line("process", &[]), threads);
}

/// As above, for the firmware under QEMU: the same device code built for a Cortex-M3
/// (software floating point, the firmware's size-optimised profile) must print the threads'
/// loss line byte for byte. About a minute: the default job's 40 steps.
#[test]
#[ignore = "needs qemu-system-arm, defmt-print and the firmware: tests/ci.sh runs it (--include-ignored)"]
fn the_default_job_prints_the_same_loss_line_in_qemu() {
    let _exclusive = common::exclusive();
    let firmware = common::firmware();
    let threads = loss_line("thread", &[]);
    assert_eq!(
        loss_line("qemu", &["--firmware", firmware.to_str().unwrap()]),
        threads
    );
}

/// As above, over serial ports: the firmware under QEMU with UART0 on a pty, one board per
/// replica, opened by `--placement serial --port` as boards on `/dev/ttyACM*` would be — every
/// byte in frames (no bulk file), the threads' loss line byte for byte.
#[test]
#[ignore = "needs qemu-system-arm and the firmware: tests/ci.sh runs it (--include-ignored)"]
fn the_default_job_prints_the_same_loss_line_over_serial_ports() {
    let _exclusive = common::exclusive();
    let boards = common::pty_board::boards(&common::firmware(), 4);
    let mut ports = Vec::new();
    for board in &boards {
        ports.extend(["--port", board.port().to_str().unwrap()]);
    }
    let threads = loss_line("thread", &[]);
    assert_eq!(loss_line("serial", &ports), threads);
}
