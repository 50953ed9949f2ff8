//! Saved executables: a damaged one, one for other devices and one with an invalid program
//! are refused; one with an explicit layout round-trips and runs.

use super::*;

/// The bytes of [`default_mlp`]'s executable on four threads.
fn executable_bytes() -> (Executable, Vec<u8>) {
    let runtime = started(default_mlp(), 1);
    let exe = runtime.executable();
    let bytes = exe.encode().unwrap();
    assert_eq!(Executable::decode(&bytes).unwrap(), exe);
    (exe, bytes)
}

/// Catches: a truncated, altered, foreign or future executable decoded anyway (or a panic
/// on a short one). Every byte has one bit flipped in turn: a flip in the magic is "not an
/// executable", in the version "another version", anywhere else a checksum mismatch.
#[test]
fn a_damaged_executable_is_refused() {
    let scratch = Scratch::new("executable-damage");
    let (_, good) = executable_bytes();
    let len = good.len();
    let path = scratch.path("bad.tsx");
    for cut in [0, 4, 8, 9, 10, 13, 14, 15, len / 2, len - 4, len - 1] {
        std::fs::write(&path, &good[..cut]).unwrap();
        let e = Executable::load(&path).expect_err("a truncated executable");
        assert_one_line(&format!("cut at {cut}"), &e.to_string());
        match cut {
            0..=7 => assert!(
                matches!(e, ExecutableError::NotAnExecutable),
                "{cut}: {e:?}"
            ),
            // Refused; the kind is not pinned: a file cut inside its version is named
            // "version 0" today, not truncated.
            8..=13 => {}
            _ => assert!(
                matches!(e, ExecutableError::Checksum { .. }),
                "{cut}: {e:?}"
            ),
        }
    }
    for i in 0..len {
        let mut bytes = good.clone();
        bytes[i] ^= 1 << (i % 8);
        let e = Executable::decode(&bytes).expect_err("a flipped executable");
        assert_one_line(&format!("byte {i}"), &e.to_string());
        match i {
            0..=7 => assert!(matches!(e, ExecutableError::NotAnExecutable), "{i}: {e:?}"),
            8..=9 => assert!(matches!(e, ExecutableError::Version { .. }), "{i}: {e:?}"),
            _ => assert!(matches!(e, ExecutableError::Checksum { .. }), "{i}: {e:?}"),
        }
    }
    // Another magic; another version (checked before the checksum).
    let mut bytes = good.clone();
    bytes[..8].copy_from_slice(b"NOTANEXE");
    std::fs::write(&path, &bytes).unwrap();
    assert!(matches!(
        Executable::load(&path),
        Err(ExecutableError::NotAnExecutable)
    ));
    let mut bytes = good.clone();
    bytes[8..10].copy_from_slice(&(executable::VERSION + 1).to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let newer = executable::VERSION + 1;
    let e = Executable::load(&path).expect_err("a newer version");
    assert!(
        matches!(
            e,
            ExecutableError::Version { file, supported }
                if file == newer && supported == executable::VERSION
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains(&format!("version {newer}")), "{e}");
}

/// Catches: an executable placed on devices other than those it was prepared for (here,
/// with half the memory), which could then run out of memory mid-run.
#[test]
fn an_executable_for_other_devices_is_refused() {
    let (exe, _) = executable_bytes();
    assert_eq!(exe.limits.memory as usize, DEVICE_MEMORY);
    let e = Runtime::load_executable(&exe, &Placement::Thread, DEVICE_MEMORY / 2)
        .expect_err("devices with half the memory");
    match &e {
        RuntimeError::Limits { saved, actual, .. } => {
            assert_eq!(saved.memory as usize, DEVICE_MEMORY);
            assert_eq!(actual.memory as usize, DEVICE_MEMORY / 2);
        }
        other => panic!("refused as {other:?}"),
    }
    assert_one_line("limits", &e.to_string());
}

/// Catches: an executable holding a hand-built program that breaks core's rules (here, a
/// layer reading a variable the program does not have) placed as it was, which the devices
/// could only refuse as a generic bad configuration: it is refused before any device
/// starts (the placement here cannot start one), naming the rule.
#[test]
fn an_executable_with_an_invalid_program_names_the_rule() {
    let (mut exe, _) = executable_bytes();
    exe.program
        .layers
        .insert(0, Layer::Linear { weight: 42 })
        .unwrap();
    let nowhere = Placement::Process(PathBuf::from("/nonexistent/tessera"));
    let e =
        Runtime::load_executable(&exe, &nowhere, DEVICE_MEMORY).expect_err("an invalid program");
    assert!(matches!(e, RuntimeError::Program(_)), "{e:?}");
    assert!(
        e.to_string().contains("42"),
        "the rule names the variable: {e}"
    );
    assert_one_line("invalid program", &e.to_string());
}

/// Catches: an explicit shard layout (its intervals, padding and order) lost or altered on
/// the way through the file, or an executable that places the program differently from
/// preparing it: both runtimes train alike, bit for bit.
#[test]
fn an_executable_with_an_explicit_layout_round_trips_and_runs() {
    let scratch = Scratch::new("executable-explicit");
    let path = scratch.path("explicit.tsx");
    let program = mlp(
        CommGroup::All,
        RetrievalMode::AllReplicas,
        Shard::Explicit,
        HIDDEN,
        REPLICAS,
    );
    assert!(matches!(
        program.variables[0].sharding,
        Sharding::Explicit { .. }
    ));
    let mut prepared = started(program.clone(), 1);
    prepared.executable().save(&path).unwrap();
    let loaded = Executable::load(&path).unwrap();
    assert_eq!(loaded, prepared.executable());
    assert_eq!(loaded.program, program);
    assert_eq!(loaded.replicas as usize, REPLICAS);

    let mut placed =
        Runtime::load_executable(&loaded, &Placement::Thread, DEVICE_MEMORY).expect("it loads");
    assert_eq!(placed.program(), &program);
    assert_eq!(placed.executable(), loaded);
    placed.set_random_seed(SEED).unwrap();
    placed
        .weights_from_host(&initial_weights(&program, REPLICAS, 1))
        .unwrap();
    assert_same_state("before", &state(&mut placed), &state(&mut prepared));
    for step in 0..3 {
        let io = step_io(&program, REPLICAS, step);
        assert_same_arrays(
            &format!("step {step}'s loss"),
            &placed.run(&io).unwrap(),
            &prepared.run(&io).unwrap(),
        );
    }
    assert_same_state("after 3 steps", &state(&mut placed), &state(&mut prepared));
}
