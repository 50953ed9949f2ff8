//! Files are trusted no further than they deserve (issue 18, item 5): a save replaces only a
//! regular file and leaves no temporary behind; every input is a regular file, read no
//! further than its size; a checkpoint's sizes and values are held to the file and the
//! program; a resumed run is held to the data it was trained on.
//!
//! Every command runs under a deadline (a FIFO once hung the reader): a test fails, never
//! hangs. Nothing here touches a real device node but `/dev/zero`, and that only to read.

use crate::common;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::write_safetensors;
use tessera_host::checkpoint::{Checkpoint, CheckpointError, MAX_STEP};
use tessera_host::runtime::{WeightsIo, RNG_WORDS};
use tessera_host::session::HostArray;

/// A directory of its own under the temporary directory, removed at the end.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("tessera-file-trust-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the scratch directory is created");
        Self(dir)
    }

    fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }

    /// The names in the directory, sorted.
    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn text(path: &Path) -> &str {
    path.to_str().expect("scratch paths are UTF-8")
}

/// A FIFO at `path` (coreutils' `mkfifo`: no `unsafe` in the tests).
fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

/// The small job of these tests on the command line (without `--steps`).
const JOB: [&str; 10] = [
    "--replicas",
    "4",
    "--hidden",
    "8",
    "--samples",
    "300",
    "--batches-per-step",
    "2",
    "--accumulation",
    "2",
];

/// `tessera ARGS`, killed if it has not ended after `deadline`: a hang is a failure.
fn tessera_within(args: &[&str], deadline: Duration) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tessera runs");
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let stdout = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = out.read_to_end(&mut bytes);
        bytes
    });
    let stderr = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = err.read_to_end(&mut bytes);
        bytes
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tessera {args:?} still running after {deadline:?}: it hangs");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

fn tessera(args: &[&str]) -> Output {
    tessera_within(args, Duration::from_secs(60))
}

fn assert_success(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what}: {:?}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Asserts a refusal: exit status 2, one line on stderr starting `error: `, no "ok:", no
/// panic; returns the line.
fn assert_refused(what: &str, out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{what}: {stdout}\n{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{what}: {stderr}");
    assert!(stderr.starts_with("error: "), "{what}: {stderr}");
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
    assert!(!stdout.contains("ok:"), "{what}: {stdout}");
    stderr
}

/// A checkpoint value of two replicas and one small tensor (no runtime needed).
fn small_checkpoint() -> Checkpoint {
    let mut weights = WeightsIo::new();
    let values: Vec<f32> = (0..12).map(|i| i as f32 * 0.25 - 1.0).collect();
    weights.insert(
        "w".to_string(),
        HostArray::from_f32(&[3, 4], &values).unwrap(),
    );
    let mut velocity = WeightsIo::new();
    velocity.insert(
        "w".to_string(),
        HostArray::from_f32(&[3, 4], &[0.5; 12]).unwrap(),
    );
    let layouts: BTreeMap<String, String> = [
        ("w".to_string(), "all: 1 group(s) of 2".to_string()),
        ("v".to_string(), "none".to_string()),
        ("b".to_string(), "consecutive".to_string()),
    ]
    .into();
    Checkpoint {
        fingerprint: 0x0123_4567_89ab_cdef,
        replicas: 2,
        step: 3,
        seed: 42,
        rng: (1..=(2 * RNG_WORDS) as u32).collect(),
        weights,
        optimizer: velocity,
        layouts,
        data: None,
    }
}

// ---------------------------------------------------------------------------------------
// Saving
// ---------------------------------------------------------------------------------------

/// Catches: a save that renames over whatever is at the path — a symbolic link turned into
/// a regular file (the file it pointed to left stale), a FIFO or a directory replaced (as
/// root, `--checkpoint /dev/null` replaced the device node the same way). Each is refused,
/// naming what it is, and left as it was; no temporary stays behind.
#[test]
fn saving_replaces_only_a_regular_file() {
    let scratch = Scratch::new("save-kinds");
    let c = small_checkpoint();
    let target = scratch.path("target.safetensors");
    std::fs::write(&target, b"the link's target").unwrap();
    let link = scratch.path("link.safetensors");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let fifo = scratch.path("fifo.safetensors");
    mkfifo(&fifo);
    let dir = scratch.path("dir.safetensors");
    std::fs::create_dir(&dir).unwrap();
    let before = scratch.names();
    for (path, kind) in [
        (&link, "symbolic link"),
        (&fifo, "FIFO"),
        (&dir, "directory"),
    ] {
        let e = c.save(path).expect_err(kind);
        let message = e.to_string();
        assert!(
            message.contains(kind) && message.contains(text(path)),
            "{kind}: {message}"
        );
        // What saves an executable.
        let e = tessera_host::atomic::write_atomically(path, b"bytes").expect_err(kind);
        assert!(e.to_string().contains(kind), "{kind}: {e}");
    }
    let link_meta = std::fs::symlink_metadata(&link).unwrap();
    assert!(link_meta.file_type().is_symlink(), "the link was replaced");
    assert_eq!(std::fs::read(&target).unwrap(), b"the link's target");
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    assert!(std::fs::symlink_metadata(&dir).unwrap().is_dir());
    assert_eq!(scratch.names(), before, "a temporary stayed behind");

    // A regular file and a new name are written.
    c.save(&target).unwrap();
    c.save(&scratch.path("new.safetensors")).unwrap();
    assert_eq!(Checkpoint::load(&target).unwrap(), c);
}

/// Catches: metadata written in a hash map's order, so that one state saved twice gave two
/// different files (no comparing, hashing or deduplicating checkpoints as bytes).
#[test]
fn two_saves_of_one_state_are_byte_identical() {
    let scratch = Scratch::new("same-bytes");
    let mut c = small_checkpoint();
    c.data = Some(tessera_host::checkpoint::DataRecord {
        samples: 300,
        fingerprint: 0xfeed,
    });
    let (a, b) = (scratch.path("a"), scratch.path("b"));
    c.save(&a).unwrap();
    for _ in 0..4 {
        c.clone().save(&b).unwrap();
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    }
    assert_eq!(Checkpoint::load(&b).unwrap(), c);
}

/// Catches: temporaries that pile up — one left by a writer that panicked (no guard
/// removed it), and those of killed runs (`.NAME.tmp-PID-N` of a PID that no longer runs),
/// which a later save must sweep — while a running process's temporary, and files that
/// merely look alike, are never touched.
#[test]
fn temporaries_never_pile_up() {
    let scratch = Scratch::new("temporaries");
    let path = scratch.path("run.safetensors");
    let panicked = std::panic::catch_unwind(|| {
        let _ = tessera_host::atomic::replace_with(&path, |_| panic!("the writer fails"));
    });
    assert!(panicked.is_err());
    assert_eq!(
        scratch.names(),
        Vec::<String>::new(),
        "a panicking writer's temporary"
    );
    let failed = tessera_host::atomic::replace_with(&path, |_| Err(std::io::Error::other("no")));
    assert!(failed.is_err());
    assert_eq!(
        scratch.names(),
        Vec::<String>::new(),
        "a failed writer's temporary"
    );

    // A process that ran and ended; one that runs.
    let mut ended = Command::new("true").spawn().unwrap();
    let dead = ended.id();
    ended.wait().unwrap();
    let mut running = Command::new("sleep").arg("30").spawn().unwrap();
    let stale = format!(".run.safetensors.tmp-{dead}-0");
    let live = format!(".run.safetensors.tmp-{}-3", running.id());
    let lookalikes = [
        ".run.safetensors.tmp-notapid-0".to_string(),
        format!(".other.safetensors.tmp-{dead}-0"),
    ];
    for name in [&stale, &live].into_iter().chain(&lookalikes) {
        std::fs::write(scratch.path(name), b"half a checkpoint").unwrap();
    }
    small_checkpoint().save(&path).unwrap();
    let names = scratch.names();
    let _ = running.kill();
    let _ = running.wait();
    assert!(
        !names.contains(&stale),
        "the dead run's temporary: {names:?}"
    );
    assert!(
        names.contains(&live),
        "a running process's temporary: {names:?}"
    );
    for name in &lookalikes {
        assert!(names.contains(name), "{name} was removed: {names:?}");
    }
}

/// Catches: a checkpoint directory that is missing (or a file) found only at the first
/// save — with `--every 0`, after the whole run. Refused before the first step: the run
/// below would train for a long time otherwise (and is killed at the deadline).
#[test]
fn the_checkpoint_directory_is_checked_before_the_first_step() {
    let scratch = Scratch::new("directory");
    let file = scratch.path("a-file");
    std::fs::write(&file, b"").unwrap();
    let cases = [
        (scratch.path("missing/run.safetensors"), "does not exist"),
        (file.join("run.safetensors"), "not a directory"),
    ];
    for (path, rule) in &cases {
        let args = [
            &["train"][..],
            &JOB[..],
            &[
                "--steps",
                "1000000",
                "--every",
                "0",
                "--checkpoint",
                text(path),
            ],
        ]
        .concat();
        let out = tessera_within(&args, Duration::from_secs(20));
        let line = assert_refused(rule, &out);
        assert!(
            line.contains("--checkpoint") && line.contains(rule),
            "{rule}: {line}"
        );
    }
    // A directory no file can be created in (only meaningful when not root: root writes
    // anyway).
    let locked = scratch.path("locked");
    std::fs::create_dir(&locked).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).unwrap();
    if std::fs::write(locked.join("probe"), b"").is_err() {
        let path = locked.join("run.safetensors");
        let args = [
            &["train"][..],
            &JOB[..],
            &["--steps", "1000000", "--checkpoint", text(&path)],
        ]
        .concat();
        let line = assert_refused("locked", &tessera_within(&args, Duration::from_secs(20)));
        assert!(line.contains("cannot be created"), "{line}");
    }
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
}

// ---------------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------------

/// Catches: `inspect`, `--data`, `--executable` and `--resume` reading whatever the path
/// names — `/dev/zero` filled memory, a FIFO hung the reader forever, a directory gave a
/// bare "Is a directory". Each is refused within the deadline, naming what it is.
#[test]
fn only_regular_files_are_read() {
    let scratch = Scratch::new("kinds");
    let fifo = scratch.path("fifo");
    mkfifo(&fifo);
    let dir = scratch.path("dir");
    std::fs::create_dir(&dir).unwrap();
    let steps = ["--steps", "1"];
    for (path, kind) in [
        (Path::new("/dev/zero"), "character device"),
        (&fifo, "FIFO"),
        (&dir, "directory"),
    ] {
        let p = text(path);
        let runs: [(&str, Vec<&str>); 4] = [
            ("inspect", vec!["inspect", p]),
            ("--data", [&["train", "--data", p][..], &steps].concat()),
            (
                "--executable",
                [&["train"][..], &JOB, &steps, &["--executable", p]].concat(),
            ),
            (
                "--resume",
                [&["train"][..], &JOB, &steps, &["--resume", p]].concat(),
            ),
        ];
        for (what, args) in runs {
            let out = tessera_within(&args, Duration::from_secs(20));
            let line = assert_refused(&format!("{what} {p}"), &out);
            assert!(
                line.contains(kind) && line.contains("not a regular file") && line.contains(p),
                "{what} {p}: {line}"
            );
        }
    }
}

/// A safetensors header (length and JSON) holding `json`, padded to 8 bytes.
fn header(json: &serde_json::Value) -> Vec<u8> {
    let mut text = serde_json::to_vec(json).unwrap();
    text.resize(text.len().next_multiple_of(8), b' ');
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend(text);
    out
}

/// Catches: sizes taken from the header on trust — a header length or a tensor larger than
/// the file was refused only as a bare "incomplete" (naming neither size), and a sparse
/// 20 GiB file whose header agrees with its size made `--resume` allocate 20 GiB and abort;
/// an executable's size was read whole whatever it was.
#[test]
fn sizes_a_file_claims_are_held_to_the_file_and_the_program() {
    let scratch = Scratch::new("claims");
    let meta = serde_json::json!({"format": "tessera-checkpoint", "version": "1",
        "checksum": "00000000", "fingerprint": "0000000000000000"});

    // A header length of 1 TiB in a 16-byte file.
    let lying = scratch.path("header.safetensors");
    let mut bytes = (1u64 << 40).to_le_bytes().to_vec();
    bytes.extend_from_slice(b"{}      ");
    std::fs::write(&lying, &bytes).unwrap();
    let e = Checkpoint::load(&lying).unwrap_err();
    assert!(
        matches!(&e, CheckpointError::Claim { field, claimed, actual, .. }
            if field == "the header" && *claimed == 1 << 40 && *actual == 8),
        "{e:?}"
    );
    let message = e.to_string();
    assert!(message.contains(&(1u64 << 40).to_string()) && message.contains(" 8"));

    // A tensor of 16 GiB in a file of a few hundred bytes.
    let big = 4u64 << 30;
    let json = serde_json::json!({"__metadata__": meta,
        "w1": {"dtype": "F32", "shape": [big], "data_offsets": [0, 4 * big]}});
    let tensor = scratch.path("tensor.safetensors");
    let mut bytes = header(&json);
    bytes.extend_from_slice(&[0; 64]);
    std::fs::write(&tensor, &bytes).unwrap();
    let e = Checkpoint::load(&tensor).unwrap_err();
    assert!(
        matches!(&e, CheckpointError::Claim { field, claimed, actual, .. }
            if field == "tensor `w1`" && *claimed == 4 * big && *actual == 64),
        "{e:?}"
    );
    let out = tessera(&["inspect", text(&tensor)]);
    let line = assert_refused("inspect a lying tensor", &out);
    assert!(
        line.contains("w1") && line.contains(&(4 * big).to_string()),
        "{line}"
    );

    // A sparse 20 GiB file that agrees with its header, of the job's program: --resume
    // refuses w1's shape from the header, before reading (or allocating) anything.
    let real = scratch.path("real.safetensors");
    let args = [
        &["train"][..],
        &JOB[..],
        &["--steps", "1", "--checkpoint", text(&real)],
    ]
    .concat();
    assert_success("a real run", &tessera(&args));
    let fingerprint = format!("{:016x}", Checkpoint::load(&real).unwrap().fingerprint);
    let mut meta = meta.clone();
    meta["fingerprint"] = fingerprint.into();
    let (rows, huge) = (5u64, 1u64 << 30);
    let json = serde_json::json!({"__metadata__": meta,
        "w1": {"dtype": "F32", "shape": [rows, huge], "data_offsets": [0, 4 * rows * huge]}});
    let sparse = scratch.path("sparse.safetensors");
    let head = header(&json);
    std::fs::write(&sparse, &head).unwrap();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&sparse)
        .unwrap();
    file.set_len(head.len() as u64 + 4 * rows * huge).unwrap();
    drop(file);
    let args = [
        &["train"][..],
        &JOB[..],
        &["--steps", "1", "--resume", text(&sparse)],
    ]
    .concat();
    let line = assert_refused(
        "a sparse 20 GiB checkpoint",
        &tessera_within(&args, Duration::from_secs(20)),
    );
    assert!(
        line.contains("w1") && line.contains(&huge.to_string()),
        "{line}"
    );

    // An executable larger than any program's encoding: refused by its size.
    let exe = scratch.path("big.tsx");
    let mut bytes = tessera_host::executable::MAGIC.to_vec();
    bytes.extend_from_slice(&1u16.to_le_bytes());
    std::fs::write(&exe, &bytes).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&exe).unwrap();
    file.set_len(tessera_host::executable::MAX_BYTES + 1)
        .unwrap();
    drop(file);
    let args = [
        &["train"][..],
        &JOB,
        &["--steps", "1", "--executable", text(&exe)],
    ]
    .concat();
    let line = assert_refused("a huge executable", &tessera(&args));
    let limit = tessera_host::executable::MAX_BYTES.to_string();
    assert!(line.contains("at most") && line.contains(&limit), "{line}");
}

/// Catches: NaN or infinity in `--data` accepted, to fail steps later as a misleading
/// mismatch with the reference (exit 1) instead of a refusal naming the tensor and row.
#[test]
fn non_finite_inputs_are_refused_at_load() {
    let scratch = Scratch::new("nan");
    for (bad, shown) in [
        (f32::NAN, "NaN"),
        (f32::INFINITY, "inf"),
        (f32::NEG_INFINITY, "-inf"),
    ] {
        let mut inputs: Vec<f32> = (0..64 * 3).map(|i| (i % 7) as f32 * 0.1).collect();
        inputs[5 * 3 + 1] = bad;
        let labels: Vec<i64> = (0..64).map(|i| i % 3).collect();
        let path = scratch.path("data.safetensors");
        write_safetensors(&path, &[64, 3], &inputs, &labels);
        let out = tessera(&["train", "--data", text(&path), "--steps", "2"]);
        let line = assert_refused(shown, &out);
        assert!(
            line.contains("--data")
                && line.contains("`inputs`")
                && line.contains("row 5")
                && line.contains("column 1")
                && line.contains(shown),
            "{shown}: {line}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Resuming
// ---------------------------------------------------------------------------------------

/// A change made to a checkpoint before it is sealed again.
type Edit = dyn Fn(&mut Checkpoint);

/// Catches: values that no run writes, sealed with a valid checksum, taken as they are —
/// a step of `u64::MAX` trained 0 steps and printed "ok" (a debug build overflowed), a
/// replica count of 0, an RNG state of all zeros (which the generator silently replaces,
/// so the resumed run is not the one that was saved), a data record of no samples. Each
/// is refused at load naming the entry; the largest step allowed still resumes.
#[test]
fn impossible_values_in_a_sealed_checkpoint_are_refused() {
    let scratch = Scratch::new("impossible");
    let (good, data) = (scratch.path("good.safetensors"), scratch.path("data"));
    let mut inputs = Vec::new();
    for i in 0..64 * 3 {
        inputs.push(((i * 37) % 11) as f32 * 0.1 - 0.5);
    }
    let labels: Vec<i64> = (0..64).map(|i| (i * 7) % 3).collect();
    write_safetensors(&data, &[64, 3], &inputs, &labels);
    let run = |extra: &[&str]| {
        let args = [&["train", "--data", text(&data)][..], extra].concat();
        tessera(&args)
    };
    assert_success(
        "the first run",
        &run(&["--steps", "2", "--checkpoint", text(&good)]),
    );
    let c = Checkpoint::load(&good).unwrap();
    let sealed = |edit: &Edit| {
        let mut c = c.clone();
        edit(&mut c);
        let path = scratch.path("edited.safetensors");
        c.save(&path).unwrap();
        path
    };
    let cases: [(&str, &Edit); 5] = [
        ("step", &|c| c.step = u64::MAX),
        ("step", &|c| c.step = MAX_STEP + 1),
        ("replicas", &|c| c.replicas = 0),
        ("rng", &|c| c.rng[RNG_WORDS..2 * RNG_WORDS].fill(0)),
        ("data/samples", &|c| {
            if let Some(d) = &mut c.data {
                d.samples = 0;
            }
        }),
    ];
    for (entry, edit) in cases {
        let path = sealed(edit);
        let e = Checkpoint::load(&path).unwrap_err();
        assert!(
            matches!(&e, CheckpointError::Impossible { entry: found, .. } if *found == entry),
            "{entry}: {e:?}"
        );
        let out = run(&["--steps", "1", "--resume", text(&path)]);
        let line = assert_refused(entry, &out);
        assert!(
            line.contains("--resume") && line.contains(&format!("`{entry}`")),
            "{entry}: {line}"
        );
    }
    // A run may count up to the largest step, whose checkpoint loads; not one step past.
    let path = sealed(&|c| c.step = MAX_STEP - 2);
    let next = scratch.path("next.safetensors");
    let out = run(&[
        "--steps",
        "2",
        "--resume",
        text(&path),
        "--checkpoint",
        text(&next),
    ]);
    assert_success("resuming up to the largest step", &out);
    assert_eq!(Checkpoint::load(&next).unwrap().step, MAX_STEP);
    let line = assert_refused(
        "past the largest step",
        &run(&["--steps", "1", "--resume", text(&next)]),
    );
    assert!(
        line.contains(&MAX_STEP.to_string()) && line.contains("--steps 1"),
        "{line}"
    );
}

/// Catches: `--resume` with other data than the checkpoint was trained on accepted
/// silently (other values, or another number of samples), and a checkpoint that records no
/// data resumed unchecked. Each refusal names both sample counts and fingerprints.
#[test]
fn resume_is_held_to_the_data_it_was_trained_on() {
    let scratch = Scratch::new("resume-data");
    let write = |name: &str, samples: usize, salt: usize| {
        let path = scratch.path(name);
        let inputs: Vec<f32> = (0..samples * 3)
            .map(|i| (((i + salt) * 37) % 11) as f32 * 0.1 - 0.5)
            .collect();
        let labels: Vec<i64> = (0..samples as i64).map(|i| (i * 7) % 3).collect();
        write_safetensors(&path, &[samples, 3], &inputs, &labels);
        path
    };
    let (a, b, c) = (write("a", 64, 0), write("b", 64, 1), write("c", 65, 0));
    let checkpoint = scratch.path("run.safetensors");
    let run = |data: &Path, extra: &[&str]| {
        tessera(&[&["train", "--data", text(data), "--steps", "1"][..], extra].concat())
    };
    assert_success("on a", &run(&a, &["--checkpoint", text(&checkpoint)]));
    let recorded = Checkpoint::load(&checkpoint)
        .unwrap()
        .data
        .expect("a data record");
    assert_eq!(recorded.samples, 64);
    assert_success("resumed on a", &run(&a, &["--resume", text(&checkpoint)]));
    for (what, other, samples) in [("other values", &b, "64"), ("another size", &c, "65")] {
        let line = assert_refused(what, &run(other, &["--resume", text(&checkpoint)]));
        let fingerprint = format!("{:016x}", recorded.fingerprint);
        assert!(
            line.contains("--resume")
                && line.contains("64 samples")
                && line.contains(&format!("{samples} samples"))
                && line.contains(&fingerprint),
            "{what}: {line}"
        );
    }
    // The spirals are data too: another --samples is another data set.
    let spirals = scratch.path("spirals.safetensors");
    let args = [
        &["train"][..],
        &JOB,
        &["--steps", "1", "--checkpoint", text(&spirals)],
    ]
    .concat();
    assert_success("on the spirals", &tessera(&args));
    let mut args = [
        &["train"][..],
        &JOB,
        &["--steps", "1", "--resume", text(&spirals)],
    ]
    .concat();
    args[6] = "301"; // --samples
    let line = assert_refused("other spirals", &tessera(&args));
    assert!(
        line.contains("300 samples") && line.contains("301 samples"),
        "{line}"
    );

    // No record: refused, saying so.
    let mut bare = Checkpoint::load(&checkpoint).unwrap();
    bare.data = None;
    let path = scratch.path("bare.safetensors");
    bare.save(&path).unwrap();
    let line = assert_refused("no record", &run(&a, &["--resume", text(&path)]));
    assert!(line.contains("records no data"), "{line}");
}
