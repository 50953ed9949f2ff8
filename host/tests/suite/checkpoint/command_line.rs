//! The command line: `tessera inspect` of a checkpoint and an executable, and one-line
//! errors of a resume before any device starts.

use super::*;

// ---------------------------------------------------------------------------------------
// 5. tessera inspect
// ---------------------------------------------------------------------------------------

/// Asserts `tessera inspect` refused with exit status 2, one line on stderr and nothing
/// on stdout.
fn assert_inspect_refused(what: &str, args: &[&str]) -> String {
    let out = tessera(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
    assert_one_line(what, &stderr);
    assert!(stderr.starts_with("error: "), "{what}: {stderr}");
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
    assert!(out.stdout.is_empty(), "{what}: stdout {:?}", out.stdout);
    stderr
}

/// Catches: a table or JSON report that leaves out or misnames a tensor, its host shape,
/// the step or the fingerprint; an executable's fingerprint that differs from the
/// checkpoint of the same run (computed for the wrong replica count); a corrupt file shown
/// instead of refused.
#[test]
fn inspect_shows_a_checkpoint_and_an_executable() {
    let scratch = Scratch::new("inspect");
    let (checkpoint, exe) = (scratch.path("run.safetensors"), scratch.path("run.tsx"));
    let out = tessera(
        &[
            &["train"][..],
            &CLI_JOB[..],
            &[
                "--steps",
                "2",
                "--seed",
                "7",
                "--checkpoint",
                text(&checkpoint),
                "--save-executable",
                text(&exe),
            ],
        ]
        .concat(),
    );
    assert_success("the run", &out);
    let c = Checkpoint::load(&checkpoint).unwrap();
    let fp = format!("{:016x}", c.fingerprint);
    let tensors: Vec<(String, Vec<u32>)> = c
        .weights
        .iter()
        .map(|(n, a)| (n.clone(), a.shape().to_vec()))
        .chain(
            c.optimizer
                .iter()
                .map(|(n, a)| (format!("optimizer/{n}/velocity"), a.shape().to_vec())),
        )
        .collect();
    assert_eq!(tensors.len(), 8);

    // The table.
    let out = tessera(&["inspect", text(&checkpoint)]);
    assert_success("inspect", &out);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("checkpoint") && table.contains(&fp),
        "{table}"
    );
    assert!(table.contains("step 2"), "{table}");
    for (name, shape) in &tensors {
        let shape = format!("{shape:?}");
        assert!(
            table
                .lines()
                .any(|l| l.split_whitespace().next() == Some(name) && l.contains(&shape)),
            "{name} {shape} missing from\n{table}"
        );
    }

    // The JSON.
    let out = tessera(&["inspect", "--json", text(&checkpoint)]);
    assert_success("inspect --json", &out);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(json["kind"], "checkpoint");
    assert_eq!(json["fingerprint"], fp.as_str());
    assert_eq!(json["step"], 2);
    assert_eq!(json["seed"], 7);
    assert_eq!(json["replicas"], 4);
    let listed: Vec<(String, Vec<u32>)> = json["tensors"]
        .as_array()
        .expect("a tensor list")
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_string(),
                serde_json::from_value(t["shape"].clone()).unwrap(),
            )
        })
        .collect();
    let (mut want, mut got) = (tensors.clone(), listed);
    want.sort();
    got.sort();
    assert_eq!(got, want);

    // The executable: the same program on as many replicas, so the same fingerprint.
    let out = tessera(&["inspect", text(&exe)]);
    assert_success("inspect the executable", &out);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("executable") && table.contains(&fp),
        "{table}"
    );
    for name in ["w1", "b1", "w2", "b2"] {
        assert!(
            table
                .lines()
                .any(|l| l.split_whitespace().next() == Some(name)),
            "{name} missing from\n{table}"
        );
    }
    let out = tessera(&["inspect", "--json", text(&exe)]);
    assert_success("inspect --json the executable", &out);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(json["kind"], "executable");
    assert_eq!(json["fingerprint"], fp.as_str());
    assert_eq!(json["replicas"], 4);
    let w1 = json["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "w1")
        .expect("w1");
    assert_eq!(w1["shape"], serde_json::json!([8, 2]), "{w1}");

    // Corrupt files.
    for (what, file) in [("checkpoint", &checkpoint), ("executable", &exe)] {
        let mut bytes = std::fs::read(file).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x10;
        let bad = scratch.path(&format!("bad-{what}"));
        std::fs::write(&bad, &bytes).unwrap();
        for json in [false, true] {
            let mut args = vec!["inspect", text(&bad)];
            if json {
                args.push("--json");
            }
            let line = assert_inspect_refused(&format!("a corrupt {what}"), &args);
            assert!(line.contains(text(&bad)), "{line}");
        }
    }
    let missing = scratch.path("missing");
    assert_inspect_refused("a missing file", &["inspect", text(&missing)]);
}

// ---------------------------------------------------------------------------------------
// 6. Command-line errors
// ---------------------------------------------------------------------------------------

/// `tessera train` with `TESSERA_LOG=debug` (a device that starts says "device ready" on
/// stderr): refused with exit status 2 and one line, quickly.
fn assert_train_refused(what: &str, args: &[&str]) -> String {
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("train")
        .args(args)
        .env("TESSERA_LOG", "debug")
        .stdin(Stdio::null())
        .output()
        .expect("tessera runs");
    let elapsed = start.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
    assert_one_line(what, &stderr);
    assert!(stderr.starts_with("error: "), "{what}: {stderr}");
    assert!(!stderr.contains("device ready"), "{what}: {stderr}");
    assert!(elapsed < Duration::from_secs(5), "{what}: took {elapsed:?}");
    stderr
}

/// Catches: a `--resume` of a missing file or of another program's checkpoint found only
/// after the devices started (or not at all), or reported in more than one line.
#[test]
fn resume_errors_are_one_line_before_any_device_starts() {
    let scratch = Scratch::new("cli-errors");
    let missing = scratch.path("missing.safetensors");
    let process = ["--placement", "process"];

    // The probe works: a run that starts its devices says so.
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(
            [
                &["train"][..],
                &CLI_JOB[..],
                &process[..],
                &["--steps", "1"],
            ]
            .concat(),
        )
        .env("TESSERA_LOG", "debug")
        .output()
        .unwrap();
    assert_success("a valid run", &out);
    assert!(String::from_utf8_lossy(&out.stderr).contains("device ready"));

    let line = assert_train_refused(
        "a missing checkpoint",
        &[
            &CLI_JOB[..],
            &process[..],
            &["--steps", "1", "--resume", text(&missing)],
        ]
        .concat(),
    );
    assert!(
        line.contains("--resume") && line.contains(text(&missing)),
        "{line}"
    );

    // Checkpoints of hidden 16 and hidden 8: resuming the hidden-8 job from the first.
    let (wide, narrow) = (
        scratch.path("hidden16.safetensors"),
        scratch.path("hidden8.safetensors"),
    );
    for (hidden, path) in [("16", &wide), ("8", &narrow)] {
        let mut args = CLI_JOB.to_vec();
        args[3] = hidden; // --hidden
        let out = tessera(
            &[
                &["train"][..],
                &args[..],
                &["--steps", "1", "--checkpoint", text(path)],
            ]
            .concat(),
        );
        assert_success(&format!("hidden {hidden}"), &out);
    }
    let (theirs, mine) = (
        Checkpoint::load(&wide).unwrap().fingerprint,
        Checkpoint::load(&narrow).unwrap().fingerprint,
    );
    let line = assert_train_refused(
        "another program's checkpoint",
        &[
            &CLI_JOB[..],
            &process[..],
            &["--steps", "1", "--resume", text(&wide)],
        ]
        .concat(),
    );
    assert!(
        line.contains("--resume")
            && line.contains(&format!("{theirs:016x}"))
            && line.contains(&format!("{mine:016x}")),
        "{line}"
    );

    // A corrupt checkpoint, likewise.
    let mut bytes = std::fs::read(&narrow).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    let corrupt = scratch.path("corrupt.safetensors");
    std::fs::write(&corrupt, bytes).unwrap();
    let line = assert_train_refused(
        "a corrupt checkpoint",
        &[
            &CLI_JOB[..],
            &process[..],
            &["--steps", "1", "--resume", text(&corrupt)],
        ]
        .concat(),
    );
    assert!(line.contains("altered"), "{line}");
}
