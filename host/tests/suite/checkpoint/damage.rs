//! Refusals: a truncated, bit-flipped, other-version, other-program or mismatched
//! checkpoint is refused, naming what is wrong, and changes nothing.

use super::*;

// ---------------------------------------------------------------------------------------
// 3. Refusals
// ---------------------------------------------------------------------------------------

/// A checkpoint file of [`default_mlp`] after two steps, its bytes, and a runtime of the
/// same program in another state to restore into.
struct Refusals {
    scratch: Scratch,
    good: Checkpoint,
    bytes: Vec<u8>,
    target: Runtime,
    target_state: DeviceState,
}

impl Refusals {
    fn new(name: &str) -> Self {
        let scratch = Scratch::new(name);
        let mut source = started(default_mlp(), 1);
        run_steps(&mut source, 0, 2);
        let good = Checkpoint::capture(&mut source, 2, SEED).unwrap();
        let path = scratch.path("good.safetensors");
        good.save(&path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let mut target = started(default_mlp(), 2);
        run_steps(&mut target, 0, 1);
        let target_state = state(&mut target);
        Self {
            scratch,
            good,
            bytes,
            target,
            target_state,
        }
    }

    /// Loads and restores `bytes`; returns the refusal, after checking it is one line and
    /// the target runtime kept its state.
    fn refuse_bytes(&mut self, what: &str, bytes: &[u8]) -> CheckpointError {
        let path = self.scratch.path("bad.safetensors");
        std::fs::write(&path, bytes).unwrap();
        self.refuse_file(what, &path)
    }

    fn refuse_file(&mut self, what: &str, path: &Path) -> CheckpointError {
        let result = Checkpoint::load(path).and_then(|c| c.restore(&mut self.target));
        let Err(e) = result else {
            panic!("{what}: the checkpoint was accepted");
        };
        assert_one_line(what, &e.to_string());
        assert_same_state(
            &format!("{what}: refused ({e}), yet the runtime changed"),
            &state(&mut self.target),
            &self.target_state,
        );
        e
    }

    /// Saves `c` (a valid file: its checksum is right) and refuses it at restore.
    fn refuse_checkpoint(&mut self, what: &str, c: &Checkpoint) -> CheckpointError {
        let path = self.scratch.path("crafted.safetensors");
        c.save(&path).unwrap();
        assert_same_checkpoint(
            &format!("{what}: the crafted file"),
            &Checkpoint::load(&path).unwrap(),
            c,
        );
        self.refuse_file(what, &path)
    }
}

/// Catches: a truncated file read as a shorter checkpoint (or a panic on a short header)
/// instead of refused.
#[test]
fn a_truncated_checkpoint_is_refused() {
    let mut t = Refusals::new("truncated");
    let len = t.bytes.len();
    let header = header_range(&t.bytes);
    let cuts = [
        0,
        1,
        7,
        8,
        header.start + 1,
        header.end / 2,
        header.end - 1,
        header.end,
        header.end + 1,
        (header.end + len) / 2,
        len - 4,
        len - 1,
    ];
    for cut in cuts {
        let bytes = t.bytes[..cut].to_vec();
        let e = t.refuse_bytes(&format!("cut at {cut} of {len}"), &bytes);
        assert!(
            matches!(
                e,
                CheckpointError::Format(_) | CheckpointError::Claim { .. }
            ),
            "cut at {cut} of {len}: refused as {e:?}, not as an incomplete file"
        );
    }
}

/// Catches: a checksum that does not cover the tensor bytes, a metadata entry, a tensor's
/// name or shape; a decoder that panics on a damaged header. Every byte of the file has
/// one bit flipped in turn: each is refused, but for a flip that changes only the case of
/// a hex digit of the recorded checksum (the same number).
#[test]
fn a_flipped_bit_anywhere_in_a_checkpoint_is_refused() {
    let mut t = Refusals::new("bit-flip");
    let header = header_range(&t.bytes);
    // Targeted: the last byte of the tensor data, and the step in the metadata.
    let mut data = t.bytes.clone();
    let last = data.len() - 1;
    data[last] ^= 0x01;
    let e = t.refuse_bytes("a bit of the tensor data", &data);
    assert!(matches!(e, CheckpointError::Checksum { .. }), "{e:?}");
    assert!(e.to_string().contains("altered"), "{e}");
    let step = metadata_value(&t.bytes, "step");
    let mut meta = t.bytes.clone();
    meta[step.start] ^= 0x01; // "2" → "3"
    let e = t.refuse_bytes("a bit of the step in the metadata", &meta);
    assert!(matches!(e, CheckpointError::Checksum { .. }), "{e:?}");

    // Every byte.
    let checksum = metadata_value(&t.bytes, "checksum");
    let path = t.scratch.path("flipped.safetensors");
    let mut accepted = Vec::new();
    for i in 0..t.bytes.len() {
        let mut bytes = t.bytes.clone();
        bytes[i] ^= 1 << (i % 8);
        std::fs::write(&path, &bytes).unwrap();
        match Checkpoint::load(&path) {
            Err(e) => assert_one_line(&format!("byte {i}"), &e.to_string()),
            Ok(c) => {
                assert!(
                    checksum.contains(&i),
                    "byte {i} (header {header:?}, checksum {checksum:?}) flipped: accepted"
                );
                assert_same_checkpoint(&format!("byte {i} flipped"), &c, &t.good);
                accepted.push(i);
            }
        }
    }
    assert!(
        accepted.len() <= checksum.len(),
        "accepted flips: {accepted:?}"
    );
    // Nothing reached the runtime.
    assert_same_state("after the flips", &state(&mut t.target), &t.target_state);
}

/// Catches: a file of another format version read as this one. The version is checked
/// before the checksum, so the refusal names the versions even though the edit also
/// breaks the checksum; likewise a file of another format is named as such.
#[test]
fn a_checkpoint_of_another_format_version_is_refused() {
    let mut t = Refusals::new("version");
    let version = metadata_value(&t.bytes, "version");
    assert_eq!(&t.bytes[version.clone()], b"1");
    let mut bytes = t.bytes.clone();
    bytes[version.start] = b'2';
    let e = t.refuse_bytes("version 2", &bytes);
    assert!(
        matches!(
            e,
            CheckpointError::Version {
                file: 2,
                supported: 1
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("version 2"), "{e}");

    let format = metadata_value(&t.bytes, "format");
    let mut bytes = t.bytes.clone();
    bytes[format.end - 1] = b'X';
    let e = t.refuse_bytes("another format", &bytes);
    assert!(
        matches!(e, CheckpointError::NotACheckpoint { entry: "format" }),
        "{e:?}"
    );
}

/// Catches: a checkpoint restored into another program — another hidden size, another
/// comm group, another replica count — instead of refused by its fingerprint, with both
/// fingerprints named.
#[test]
fn a_checkpoint_of_another_program_is_refused() {
    let scratch = Scratch::new("other-program");
    let path = scratch.path("other.safetensors");
    let others = [
        (
            "hidden 16",
            mlp(
                CommGroup::All,
                RetrievalMode::OnePerGroup,
                Shard::Balanced,
                16,
                REPLICAS,
            ),
            REPLICAS,
        ),
        (
            "comm consecutive:2",
            mlp(
                CommGroup::Consecutive(2),
                RetrievalMode::OnePerGroup,
                Shard::Balanced,
                HIDDEN,
                REPLICAS,
            ),
            REPLICAS,
        ),
        (
            "2 replicas",
            mlp(
                CommGroup::All,
                RetrievalMode::OnePerGroup,
                Shard::Balanced,
                HIDDEN,
                2,
            ),
            2,
        ),
    ];
    let mut target = started(default_mlp(), 2);
    let before = state(&mut target);
    let mine = fingerprint(&default_mlp(), REPLICAS).unwrap();
    for (what, program, replicas) in others {
        let mut other = started_with(program.clone(), replicas, DEVICE_MEMORY, 3);
        run_steps(&mut other, 0, 1);
        Checkpoint::capture(&mut other, 1, SEED)
            .unwrap()
            .save(&path)
            .unwrap();
        let theirs = fingerprint(&program, replicas).unwrap();
        assert_ne!(theirs, mine, "{what}");
        let loaded = Checkpoint::load(&path).unwrap();
        let e = loaded.restore(&mut target).expect_err(what);
        match e {
            CheckpointError::Program { file, program } => {
                assert_eq!((file, program), (theirs, mine), "{what}");
            }
            ref other => panic!("{what}: refused as {other:?}"),
        }
        let message = e.to_string();
        assert_one_line(what, &message);
        assert!(
            message.contains(&format!("{theirs:016x}"))
                && message.contains(&format!("{mine:016x}")),
            "{what}: {message}"
        );
        assert_same_state(
            &format!("{what}: the runtime changed"),
            &state(&mut target),
            &before,
        );
    }
}

/// Catches: a tensor of the wrong shape (a valid file: its checksum is right), a missing
/// tensor or a short RNG state loaded anyway, or refused only after the tensors before it
/// reached the devices; each refusal names the tensor and both shapes.
#[test]
fn a_checkpoint_whose_tensors_do_not_match_is_refused() {
    let mut t = Refusals::new("shapes");
    let reshape = |c: &mut Checkpoint, optimizer: bool, name: &str, shape: &[u32]| {
        let map = if optimizer {
            &mut c.optimizer
        } else {
            &mut c.weights
        };
        let array = map[name].reshaped(shape).unwrap();
        map.insert(name.to_string(), array);
    };

    // w1 is [8, 4] (one group of all replicas), written as [4, 8].
    let mut c = t.good.clone();
    reshape(&mut c, false, "w1", &[4, 8]);
    let e = t.refuse_checkpoint("w1 transposed", &c);
    match &e {
        CheckpointError::Shape {
            tensor,
            expected,
            actual,
            dtype,
        } => {
            assert_eq!(tensor, "w1");
            assert_eq!(expected, &[8, 4]);
            assert_eq!(actual, &[4, 8]);
            assert_eq!(*dtype, DataType::F32);
        }
        other => panic!("refused as {other:?}"),
    }
    let message = e.to_string();
    assert!(
        message.contains("w1") && message.contains("[4, 8]") && message.contains("[8, 4]"),
        "{message}"
    );

    // w2 has two groups: [2, 3, 8]; its velocity written as [6, 8]. The weights before it
    // are all good: none may reach the devices.
    let mut c = t.good.clone();
    reshape(&mut c, true, "w2", &[6, 8]);
    let e = t.refuse_checkpoint("w2's velocity without its group dimension", &c);
    match &e {
        CheckpointError::Shape {
            tensor,
            expected,
            actual,
            ..
        } => {
            assert_eq!(tensor, "optimizer/w2/velocity");
            assert_eq!(expected, &[2, 3, 8]);
            assert_eq!(actual, &[6, 8]);
        }
        other => panic!("refused as {other:?}"),
    }
    assert!(e.to_string().contains("optimizer/w2/velocity"), "{e}");

    let mut c = t.good.clone();
    c.weights.remove("b1");
    let e = t.refuse_checkpoint("no b1", &c);
    assert!(
        matches!(&e, CheckpointError::Missing { tensor } if tensor == "b1"),
        "{e:?}"
    );

    let mut c = t.good.clone();
    c.optimizer.remove("b2");
    let e = t.refuse_checkpoint("no velocity of b2", &c);
    assert!(
        matches!(&e, CheckpointError::Missing { tensor } if tensor == "optimizer/b2/velocity"),
        "{e:?}"
    );

    // A short RNG state: in a file, refused at load (no run writes one); as a value that
    // never went through a file, refused by restore.
    let mut c = t.good.clone();
    c.rng.pop();
    let path = t.scratch.path("short-rng.safetensors");
    c.save(&path).unwrap();
    let e = t.refuse_file("a short RNG state in a file", &path);
    assert!(
        matches!(e, CheckpointError::Impossible { entry: "rng", .. }),
        "{e:?}"
    );
    let e = c.restore(&mut t.target).unwrap_err();
    assert!(
        matches!(
            e,
            CheckpointError::RngState {
                expected: 16,
                actual: 15
            }
        ),
        "{e:?}"
    );
    assert_same_state(
        "a short RNG state restored",
        &state(&mut t.target),
        &t.target_state,
    );

    // A weight no variable has.
    let mut c = t.good.clone();
    let extra = c.weights["b1"].clone();
    c.weights.insert("ghost".to_string(), extra);
    let e = t.refuse_checkpoint("a weight of no variable", &c);
    assert!(e.to_string().contains("ghost"), "{e}");
}

/// Catches: an optimizer tensor of no variable (a valid file: its checksum is right)
/// refused only after the weights were loaded — the contract says a refused checkpoint
/// loads nothing.
#[test]
fn a_checkpoint_with_velocity_of_no_variable_loads_nothing() {
    let mut t = Refusals::new("ghost-velocity");
    let mut c = t.good.clone();
    let extra = c.optimizer["b1"].clone();
    c.optimizer.insert("ghost".to_string(), extra);
    let e = t.refuse_checkpoint("a velocity of no variable", &c);
    assert!(e.to_string().contains("ghost"), "{e}");
}

/// Catches: NaN or 3e38 weights in a resealed checkpoint (its checksum right) resumed and
/// trained, failing only later with "the accelerator differs … (device NaN, reference
/// NaN)". Both loading and restoring refuse such a tensor, naming it and the first bad
/// value's index, before anything reaches a device.
#[test]
fn a_checkpoint_holding_values_no_run_trains_from_is_refused() {
    let mut t = Refusals::new("values");
    let spoil = |c: &mut Checkpoint, optimizer: bool, name: &str, at: usize, value: f32| {
        let map = if optimizer {
            &mut c.optimizer
        } else {
            &mut c.weights
        };
        let mut array = map[name].clone();
        array.bytes_mut()[at * 4..at * 4 + 4].copy_from_slice(&value.to_le_bytes());
        map.insert(name.to_string(), array);
    };
    // w1 is [8, 4]: element 6 is [1, 2].
    for (optimizer, value, tensor) in [
        (false, f32::NAN, "w1"),
        (false, 3e38, "w1"),
        (true, f32::NEG_INFINITY, "optimizer/w1/velocity"),
    ] {
        let mut c = t.good.clone();
        spoil(&mut c, optimizer, "w1", 6, value);
        let what = format!("{tensor} holding {value}");
        let path = t.scratch.path("spoiled.safetensors");
        c.save(&path).unwrap();
        for e in [t.refuse_file(&what, &path), {
            let e = c.restore(&mut t.target).unwrap_err();
            assert_same_state(&what, &state(&mut t.target), &t.target_state);
            e
        }] {
            match &e {
                CheckpointError::BadValue {
                    tensor: named,
                    index,
                    value: found,
                } => {
                    assert_eq!((named.as_str(), index.as_slice()), (tensor, &[1, 2][..]));
                    assert_eq!(found.to_bits(), value.to_bits());
                }
                other => panic!("{what}: expected a bad value, got {other:?}"),
            }
            assert!(e.to_string().contains(tensor), "{e}");
        }
    }
}
