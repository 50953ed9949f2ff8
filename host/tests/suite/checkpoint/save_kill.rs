//! A kill during a save leaves the previous checkpoint.

use super::*;

// ---------------------------------------------------------------------------------------
// 4. A kill during a save
// ---------------------------------------------------------------------------------------

/// A data file of `samples` samples of `features` values and one of `classes` labels.
fn write_data(path: &Path, samples: usize, features: usize, classes: u32) {
    use safetensors::tensor::TensorView;
    let mut rng = Rng::from_seed(0xda7a);
    let inputs: Vec<u8> = (0..samples * features)
        .flat_map(|_| (rng.next_f32() * 2.0 - 1.0).to_le_bytes())
        .collect();
    let labels: Vec<u8> = (0..samples)
        .flat_map(|_| ((rng.next_u32() % classes) as i32).to_le_bytes())
        .collect();
    let views = [
        (
            "inputs",
            TensorView::new(safetensors::Dtype::F32, vec![samples, features], &inputs).unwrap(),
        ),
        (
            "labels",
            TensorView::new(safetensors::Dtype::I32, vec![samples], &labels).unwrap(),
        ),
    ];
    std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

/// `tessera train --steps 400 --every 1 --checkpoint P` killed (SIGKILL) at random moments
/// after it has written a checkpoint; each run after the first resumes from P. The model
/// reads 2048 features into 64 hidden units, each replica its own (`--comm none`), so
/// that a checkpoint is 4 MiB and most of the run is spent saving it: most kills land in
/// a save.
///
/// Catches: a save that writes P in place (a kill mid-write leaves half a file) or that
/// renames before the bytes are complete; a temporary file that takes P's name; a reader
/// that sees half a checkpoint while a save is under way. The moments are drawn from a
/// seed printed on stderr (`TESSERA_TEST_SEED` replays them).
#[test]
fn a_kill_during_a_save_leaves_the_previous_checkpoint() {
    let scratch = Scratch::new("kill");
    let path = scratch.path("run.safetensors");
    let name = "run.safetensors";
    let seed = std::env::var("TESSERA_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    eprintln!("kill moments from TESSERA_TEST_SEED={seed}");
    let mut rng = Rng::from_seed(seed);
    let data = scratch.path("data.safetensors");
    write_data(&data, 64, 2048, 3);
    let job = [
        "train",
        "--data",
        text(&data),
        "--comm",
        "none",
        "--shard",
        "none",
        "--hidden",
        "64",
        "--learning-rate",
        "0.01",
        "--batches-per-step",
        "1",
        "--accumulation",
        "1",
    ];
    let mut killed = Vec::new();
    let mut step = 0u64;
    for round in 0..12 {
        let mut command = Command::new(env!("CARGO_BIN_EXE_tessera"));
        command.args(job).args([
            "--steps",
            "400",
            "--every",
            "1",
            "--checkpoint",
            text(&path),
        ]);
        if round > 0 {
            command.args(["--resume", text(&path)]);
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("tessera starts");
        killed.push(child.id());
        // Until this run has saved a checkpoint of its own, P holds the last run's (or
        // nothing yet): every read sees a whole checkpoint.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match Checkpoint::load(&path) {
                Ok(c) if c.step > step => break,
                Ok(_) => {}
                Err(CheckpointError::Input(InputError::Io { source, .. }))
                    if round == 0 && source.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => panic!("round {round}: reading P while it is saved: {e}"),
            }
            assert!(
                child.try_wait().unwrap().is_none(),
                "round {round}: the run ended before it was killed"
            );
            assert!(Instant::now() < deadline, "round {round}: no checkpoint");
            std::thread::sleep(Duration::from_millis(1));
        }
        if round % 2 == 1 {
            // In a save: once this run's temporary file (`.P.tmp-PID-N`) exists, within
            // half a millisecond.
            let prefix = format!(".{name}.tmp-{}-", child.id());
            let saving = || {
                std::fs::read_dir(&scratch.0)
                    .unwrap()
                    .flatten()
                    .any(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            };
            while !saving() {
                assert!(
                    child.try_wait().unwrap().is_none(),
                    "round {round}: the run ended before it was killed"
                );
                assert!(Instant::now() < deadline, "round {round}: no save");
                std::thread::sleep(Duration::from_micros(100));
            }
            std::thread::sleep(Duration::from_micros(u64::from(rng.next_u32() % 500)));
        } else {
            // Anywhere in a step or a save.
            std::thread::sleep(Duration::from_micros(u64::from(rng.next_u32() % 60_000)));
        }
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert!(!status.success(), "round {round}: killed, yet {status:?}");
        let c = Checkpoint::load(&path)
            .unwrap_or_else(|e| panic!("round {round}: after the kill, P does not load: {e}"));
        assert!(c.step > step, "round {round}: step {} after {step}", c.step);
        eprintln!("round {round}: killed at step {}", c.step);
        step = c.step;
        // Beside P, at most the killed runs' temporary files: never another name.
        for entry in std::fs::read_dir(&scratch.0).unwrap() {
            let file = entry.unwrap().file_name().to_string_lossy().into_owned();
            if file == name || file == "data.safetensors" {
                continue;
            }
            let pid = file
                .strip_prefix(&format!(".{name}.tmp-"))
                .and_then(|rest| rest.split('-').next())
                .and_then(|p| p.parse::<u32>().ok());
            assert!(
                pid.is_some_and(|p| killed.contains(&p)),
                "round {round}: unexpected file {file}"
            );
        }
    }
    let leftovers = std::fs::read_dir(&scratch.0).unwrap().count() - 2;
    eprintln!(
        "{leftovers} of {} kills left a temporary file (killed mid-save)",
        killed.len()
    );
    assert!(
        leftovers > 0,
        "no kill landed in a save: the test proved nothing"
    );
    // The last checkpoint resumes.
    let out = tessera(
        &[
            &job[..],
            &[
                "--steps",
                "1",
                "--resume",
                text(&path),
                "--checkpoint",
                text(&path),
            ],
        ]
        .concat(),
    );
    assert_success("resuming after the kills", &out);
    assert_eq!(Checkpoint::load(&path).unwrap().step, step + 1);
}
