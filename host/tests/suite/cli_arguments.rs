//! Every argument of `tessera` is checked against its documented range: a bad value is a
//! one-line error naming the argument and its range, exit status 2 — never a panic (101),
//! an abort (a signal), a huge allocation or a run that prints "ok:".
//!
//! Each row of the tables below is a reproduction of a bug the command had, or a bound it
//! documents; its comment says which.

use crate::common;

use std::process::{Command, Output, Stdio};

fn tessera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        // The hidden `device` subcommand serves stdin: give it none.
        .stdin(Stdio::null())
        .output()
        .expect("the tessera binary runs")
}

/// One invalid command line: what the error must name.
struct Rejected {
    args: &'static [&'static str],
    /// The argument the one-line error names.
    argument: &'static str,
    /// The allowed range (or rule) the error states.
    range: &'static str,
}

const fn rejected(
    args: &'static [&'static str],
    argument: &'static str,
    range: &'static str,
) -> Rejected {
    Rejected {
        args,
        argument,
        range,
    }
}

fn assert_rejected(cases: &[Rejected]) {
    let mut failures = Vec::new();
    for case in cases {
        let out = tessera(case.args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let problems: Vec<&str> = [
            (out.status.code().is_none(), "killed by a signal (abort)"),
            (out.status.code() == Some(101), "panicked (exit 101)"),
            (out.status.code() != Some(2), "exit status is not 2"),
            (stderr.contains("panicked"), "stderr says panicked"),
            (
                stderr.trim_end().lines().count() != 1,
                "stderr is not one line",
            ),
            (
                !stderr.contains(case.argument),
                "stderr does not name the argument",
            ),
            (
                !stderr.contains(case.range),
                "stderr does not state the range",
            ),
            (stdout.contains("ok:"), "stdout says ok"),
        ]
        .into_iter()
        .filter_map(|(bad, what)| bad.then_some(what))
        .collect();
        if !problems.is_empty() {
            failures.push(format!(
                "tessera {}: {} (status {:?})\n  stderr: {}\n  stdout: {}",
                case.args.join(" "),
                problems.join(", "),
                out.status,
                stderr.trim_end(),
                stdout.trim_end()
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn layout_rejects_out_of_range_arguments() {
    assert_rejected(&[
        // Capacity overflow panic: the report allocated one entry per replica.
        rejected(
            &["layout", "--replicas", "18446744073709551615"],
            "--replicas",
            "1..=4096",
        ),
        // Abort: 4·10⁹ replicas in one group.
        rejected(
            &["layout", "--replicas", "4000000000", "--comm", "all"],
            "--replicas",
            "1..=4096",
        ),
        // Allocated 8 GB, then aborted: 10⁸ groups of one.
        rejected(
            &["layout", "--replicas", "100000000", "--comm", "none"],
            "--replicas",
            "1..=4096",
        ),
        // Zero replicas: the lower bound is part of the range.
        rejected(&["layout", "--replicas", "0"], "--replicas", "1..=4096"),
        // A negative number read as an unknown flag, not as a bad --replicas.
        rejected(&["layout", "--replicas", "-1"], "--replicas", "1..=4096"),
        // One huge dimension: the shape's size was unbounded.
        rejected(
            &[
                "layout",
                "--replicas",
                "8",
                "--shape",
                "18446744073709551615",
            ],
            "--shape",
            "0..=1073741824",
        ),
        // Dimensions each in range whose product is not: the product is bounded too.
        rejected(
            &["layout", "--replicas", "8", "--shape", "1048576,1048576"],
            "--shape",
            "at most 1073741824",
        ),
        // An unbounded shard domain.
        rejected(
            &[
                "layout",
                "--replicas",
                "8",
                "--shape",
                "4",
                "--shard-domain",
                "18446744073709551615",
            ],
            "--shard-domain",
            "1..=4096",
        ),
        // Unbounded instance counts.
        rejected(
            &[
                "layout",
                "--replicas",
                "8",
                "--instances",
                "18446744073709551615",
            ],
            "--instances",
            "1..=4096",
        ),
        rejected(
            &[
                "layout",
                "--replicas",
                "8",
                "--instance",
                "18446744073709551615",
            ],
            "--instance",
            "0..=4095",
        ),
        // An explicit grouping with an unbounded stride.
        rejected(
            &[
                "layout",
                "--replicas",
                "8",
                "--grouping",
                "18446744073709551615:2",
            ],
            "--grouping",
            "1..=4096",
        ),
        // A comm group that does not divide the replicas: the error names both arguments.
        rejected(
            &["layout", "--replicas", "8", "--comm", "consecutive:3"],
            "--comm consecutive:3",
            "--replicas 8",
        ),
    ]);
}

#[test]
fn train_rejects_out_of_range_arguments() {
    assert_rejected(&[
        // The layer sizes' bounds (--inputs 0 once panicked on a sample of zero elements,
        // --inputs 257 outgrew QEMU's 2048-byte frame).
        rejected(&["train", "--hidden", "0"], "--hidden", "1..=256"),
        rejected(&["train", "--hidden", "257"], "--hidden", "1..=256"),
        rejected(
            &["train", "--hidden", "18446744073709551616"],
            "--hidden",
            "1..=256",
        ),
        // --seed beside --resume was silently ignored (the checkpoint's seed won): refused,
        // before the file is read.
        rejected(
            &["train", "--seed", "7", "--resume", "no-such.safetensors"],
            "--seed",
            "--resume",
        ),
        // The embedded data: at least two classes, at least one sample per class, bounded.
        rejected(&["train", "--classes", "1"], "--classes", "2..=16"),
        rejected(&["train", "--classes", "17"], "--classes", "2..=16"),
        rejected(&["train", "--classes", "-3"], "--classes", "2..=16"),
        rejected(&["train", "--samples", "0"], "--samples", "2..=1048576"),
        rejected(
            &["train", "--samples", "1048577"],
            "--samples",
            "2..=1048576",
        ),
        // Fewer samples than classes: the lower bound is the number of classes.
        rejected(
            &["train", "--samples", "4", "--classes", "5"],
            "--samples",
            "5..=1048576",
        ),
        // Capacity overflow panic: the step losses were pre-allocated from --steps.
        rejected(
            &["train", "--steps", "18446744073709551615"],
            "--steps",
            "1..=1000000",
        ),
        // Allocation abort: 10¹⁴ step losses.
        rejected(
            &["train", "--steps", "100000000000000"],
            "--steps",
            "1..=1000000",
        ),
        // Printed "ok" with a loss of 0 at step 0.
        rejected(&["train", "--steps", "0"], "--steps", "1..=1000000"),
        // A confusing message about slots and FIFOs instead of naming --dropout.
        rejected(&["train", "--dropout", "1"], "--dropout", "[0, 1)"),
        rejected(&["train", "--dropout", "NaN"], "--dropout", "[0, 1)"),
        rejected(&["train", "--dropout", "-0.5"], "--dropout", "[0, 1)"),
        // A momentum of 1 or more never forgets a gradient; a negative one is no momentum.
        rejected(&["train", "--momentum", "1"], "--momentum", "[0, 1)"),
        rejected(&["train", "--momentum", "-0.1"], "--momentum", "[0, 1)"),
        rejected(&["train", "--momentum", "NaN"], "--momentum", "[0, 1)"),
        // Printed "ok": NaN and infinite learning rates slipped past the self-check.
        rejected(
            &["train", "--learning-rate", "NaN"],
            "--learning-rate",
            "(0, 10]",
        ),
        rejected(
            &["train", "--learning-rate", "inf"],
            "--learning-rate",
            "(0, 10]",
        ),
        // 1e39 is an f32 infinity.
        rejected(
            &["train", "--learning-rate", "1e39"],
            "--learning-rate",
            "(0, 10]",
        ),
        // Non-positive and too large learning rates.
        rejected(
            &["train", "--learning-rate", "-0.1"],
            "--learning-rate",
            "(0, 10]",
        ),
        rejected(
            &["train", "--learning-rate", "0"],
            "--learning-rate",
            "(0, 10]",
        ),
        rejected(
            &["train", "--learning-rate", "11"],
            "--learning-rate",
            "(0, 10]",
        ),
        // A NaN, negative or infinite tolerance made the check meaningless.
        rejected(&["train", "--tolerance", "NaN"], "--tolerance", "[0, 1]"),
        rejected(&["train", "--tolerance", "-1"], "--tolerance", "[0, 1]"),
        rejected(&["train", "--tolerance", "inf"], "--tolerance", "[0, 1]"),
        // The runtime drives at most 64 replicas.
        rejected(&["train", "--replicas", "0"], "--replicas", "1..=64"),
        rejected(
            &["train", "--replicas", "65", "--comm", "none"],
            "--replicas",
            "1..=64",
        ),
        // Unbounded schedule sizes.
        rejected(
            &["train", "--batches-per-step", "0"],
            "--batches-per-step",
            "1..=1024",
        ),
        rejected(
            &["train", "--batches-per-step", "18446744073709551615"],
            "--batches-per-step",
            "1..=1024",
        ),
        rejected(
            &["train", "--accumulation", "0"],
            "--accumulation",
            "1..=1024",
        ),
        rejected(
            &["train", "--accumulation", "1025"],
            "--accumulation",
            "1..=1024",
        ),
        // More micro-batches per replica than a device FIFO holds (16-bit depth).
        rejected(
            &[
                "train",
                "--batches-per-step",
                "1024",
                "--accumulation",
                "1024",
            ],
            "--batches-per-step × --accumulation",
            "65535",
        ),
        // A comm group that does not divide the replicas: the error names both.
        rejected(
            &["train", "--replicas", "4", "--comm", "consecutive:3"],
            "--comm consecutive:3",
            "--replicas 4",
        ),
        rejected(
            &["train", "--replicas", "4", "--comm", "orthogonal:0"],
            "--comm orthogonal:0",
            "--replicas 4",
        ),
        // The second layer's comm group too.
        rejected(
            &["train", "--replicas", "4", "--output-comm", "consecutive:3"],
            "--output-comm consecutive:3",
            "--replicas 4",
        ),
        rejected(
            &["train", "--replicas", "3", "--comm", "none"],
            "--output-comm consecutive:2",
            "--replicas 3",
        ),
    ]);
}

#[test]
fn train_rejects_bad_anchors() {
    const RULE: &str = "NAME loss or output, TYPE all, final, sum or everyn:P";
    assert_rejected(&[
        // Not NAME=TYPE, no such tensor, no such return type.
        rejected(&["train", "--anchor", "loss"], "--anchor", RULE),
        rejected(&["train", "--anchor", "weights=all"], "--anchor", RULE),
        rejected(&["train", "--anchor", "=all"], "--anchor", RULE),
        rejected(&["train", "--anchor", "loss=every"], "--anchor", RULE),
        // Periods: missing, zero, negative, too large for a number.
        rejected(
            &["train", "--anchor", "loss=everyn"],
            "--anchor",
            "everyn:P",
        ),
        rejected(
            &["train", "--anchor", "loss=everyn:0"],
            "--anchor",
            "greater than zero",
        ),
        rejected(
            &["train", "--anchor", "output=everyn:-1"],
            "--anchor",
            "greater than zero",
        ),
        rejected(
            &["train", "--anchor", "loss=everyn:18446744073709551616"],
            "--anchor",
            RULE,
        ),
        // A period beyond the batches per step.
        rejected(
            &[
                "train",
                "--anchor",
                "loss=everyn:8",
                "--batches-per-step",
                "4",
            ],
            "anchor `loss`",
            "(8) must be <=",
        ),
        // One tensor anchored twice; more anchors than a program holds.
        rejected(
            &["train", "--anchor", "loss=all", "--anchor", "loss=sum"],
            "anchor `loss`",
            "anchored once",
        ),
        rejected(
            &[
                "train",
                "--anchor",
                "loss=all",
                "--anchor",
                "output=all",
                "--anchor",
                "loss=final",
            ],
            "--anchor",
            "at most 2 anchors",
        ),
    ]);
}

/// One step's arrays beyond 64 MiB, refused before any device starts: a data file of
/// 4096 features on 64 replicas, 64 × 64 micro-batches each.
#[test]
fn train_rejects_a_step_larger_than_64_mib() {
    const FEATURES: usize = 4096;
    let file = common::TempFile::new("wide.safetensors");
    let inputs: Vec<f32> = (0..2 * FEATURES).map(|i| common::value(1, i)).collect();
    common::write_safetensors(file.path(), &[2, FEATURES], &inputs, &[0, 1]);
    let data: &'static str = Box::leak(file.arg().to_owned().into_boxed_str());
    let args: &'static [&'static str] = Box::leak(Box::new([
        "train",
        "--data",
        data,
        "--replicas",
        "64",
        "--comm",
        "none",
        "--output-comm",
        "none",
        "--batches-per-step",
        "64",
        "--accumulation",
        "64",
    ]));
    assert_rejected(&[rejected(args, "--replicas", "64 MiB")]);
}

#[test]
fn device_rejects_out_of_range_memory() {
    assert_rejected(&[
        // The hidden child-process subcommand allocated whatever --memory said.
        rejected(
            &[
                "device",
                "--replica",
                "0",
                "--memory",
                "18446744073709551615",
            ],
            "--memory",
            "4096..=1073741824",
        ),
        rejected(
            &["device", "--replica", "0", "--memory", "0"],
            "--memory",
            "4096..=1073741824",
        ),
    ]);
}

#[test]
fn the_smallest_training_run_passes() {
    let out = tessera(&[
        "train",
        "--steps",
        "1",
        "--replicas",
        "1",
        "--comm",
        "none",
        "--output-comm",
        "none",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("ok:"), "{stdout}");
    assert!(stdout.contains("at step 1"), "{stdout}");
}

/// Values that overflow to infinity or NaN on the device fail the check instead of passing
/// it (`f64::max` used to drop NaN).
#[test]
fn overflowing_values_fail_the_check() {
    // Inputs of 1e18 enter (below 2^64, core's `finite` rule) but overflow f32 on the
    // device within two steps, while the host's f64 reference stays finite: the check must
    // fail on the infinities and NaNs, not pass them (f64::max used to drop NaN).
    let file = common::TempFile::new("huge.safetensors");
    let inputs: Vec<f32> = (0..128).map(|i| 1e18 * common::value(2, i)).collect();
    let labels: Vec<i64> = (0..64).map(|i| i % 2).collect();
    common::write_safetensors(file.path(), &[64, 2], &inputs, &labels);
    let out = tessera(&["train", "--data", file.arg(), "--steps", "2"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(!stdout.contains("ok:"), "{stdout}");
    assert!(
        stderr.contains("differs from the host reference") && stderr.contains("not finite"),
        "{stderr}"
    );
}

#[test]
fn the_largest_layout_has_bounded_output() {
    let args = ["layout", "--replicas", "4096", "--comm", "none"];
    let out = tessera(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.len() < 1 << 20, "{} bytes", out.stdout.len());
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.lines().any(|l| l.trim_start().starts_with("4095 ")));

    let mut json = args.to_vec();
    json.push("--json");
    let out = tessera(&json);
    assert!(out.status.success());
    assert!(out.stdout.len() < 4 << 20, "{} bytes", out.stdout.len());

    let svg = std::env::temp_dir().join(format!("tessera-cli-args-{}.svg", std::process::id()));
    let mut drawn = args.to_vec();
    drawn.extend(["--shape", "1024,1048576", "--svg", svg.to_str().unwrap()]);
    let out = tessera(&drawn);
    let picture = std::fs::read_to_string(&svg);
    std::fs::remove_file(&svg).ok();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let picture = picture.unwrap();
    assert_eq!(
        picture.matches(">replica ").count(),
        256,
        "at most 256 replicas are drawn"
    );
    assert!(picture.contains("and 3840 more replicas"));
    assert!(picture.len() < 1 << 20, "{} bytes", picture.len());
}

#[test]
fn help_documents_the_ranges() {
    let out = tessera(&["train", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for range in [
        "Number of replicas (1–64)",
        "Hidden units (1–256)",
        "(classes–1048576)",
        "(2–16)",
        "NAME=TYPE",
        "(1–1024",
        "64 MiB",
        "Training steps (1–1000000)",
        "(0, 10]",
        "[0, 1)",
        "[0, 1]",
    ] {
        assert!(
            help.contains(range),
            "train --help lacks {range:?}:\n{help}"
        );
    }
    let out = tessera(&["layout", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for range in ["(1–4096)", "1073741824", "0–4095", "256 replicas"] {
        assert!(
            help.contains(range),
            "layout --help lacks {range:?}:\n{help}"
        );
    }
    let out = tessera(&["device", "--help"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("4096–1073741824"));
}

#[test]
fn qemu_without_its_firmware_says_so_before_starting_anything() {
    const EXE: &str = env!("CARGO_BIN_EXE_tessera");
    assert_rejected(&[
        // A missing firmware started QEMU anyway: "device 4294967295 closed its link", a
        // defmt-print backtrace and a QEMU register dump.
        rejected(
            &[
                "train",
                "--placement",
                "qemu",
                "--firmware",
                "/nonexistent/tessera-firmware",
            ],
            "/nonexistent/tessera-firmware",
            "cannot read the firmware",
        ),
        // A file that is no ARM firmware at all (this very binary).
        rejected(
            &["train", "--placement", "qemu", "--firmware", EXE],
            EXE,
            "is not the device firmware",
        ),
    ]);
}

/// Catches a serial placement that starts without its ports, takes ports it cannot use, or
/// takes `--port` where no port is used: each refused in one line naming the argument (or
/// the port) and its rule, before anything starts.
#[test]
fn serial_ports_are_checked_before_starting_anything() {
    const EXE: &str = env!("CARGO_BIN_EXE_tessera");
    assert_rejected(&[
        rejected(&["train", "--placement", "serial"], "--port", "required"),
        rejected(
            &[
                "train",
                "--placement",
                "serial",
                "--port",
                "/dev/tessera-no-such-port",
            ],
            "/dev/tessera-no-such-port",
            "no such device",
        ),
        // This very binary: a regular file, not a terminal.
        rejected(
            &["train", "--placement", "serial", "--port", EXE],
            EXE,
            "it is a regular file, not a terminal",
        ),
        rejected(
            &[
                "train",
                "--placement",
                "serial",
                "--port",
                "/dev/null",
                "--baud",
                "0",
            ],
            "--baud",
            "50..=12000000",
        ),
        rejected(
            &["train", "--port", "/dev/ttyACM0"],
            "--port",
            "--placement serial only",
        ),
    ]);
}
