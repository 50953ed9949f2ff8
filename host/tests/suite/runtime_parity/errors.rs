//! The errors of prepare and of weights from host.

use super::*;

// ---------------------------------------------------------------------------------------
// 6. Errors at prepare.

/// A program too large for the device memory (4096 bytes, a hidden layer of 256) is a
/// device error — out of memory, on Prepare — naming the replica. Catches a device that
/// overruns its arena or panics, and a runtime that reports the failure without saying
/// which device or why.
#[test]
fn a_program_larger_than_the_device_memory_is_out_of_memory() {
    let combo = Combo {
        comm: CommGroup::None,
        retrieval: RetrievalMode::OnePerGroup,
        layout: Layout::None,
    };
    let p = mlp(combo, REPLICAS, 256, sgd(LEARNING_RATE));
    let err = Runtime::prepare(p, REPLICAS, &thread(), 4096).unwrap_err();
    match &err {
        RuntimeError::Transport(TransportError::Device {
            replica,
            request,
            code,
        }) => {
            assert_eq!(*request, RequestKind::Prepare, "{err}");
            assert!(
                matches!(code, ErrorCode::OutOfMemory { .. }),
                "{err}: expected out of memory"
            );
            assert_eq!(
                *replica, 0,
                "the first replica to answer is replica 0: {err}"
            );
        }
        other => panic!("expected a device error, got {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains("device 0"), "'{text}' must name the replica");
}

/// An invalid program is a program error before any device starts: even with a device
/// executable or firmware that does not exist, the program is what is reported. Catches
/// devices started (and possibly left running) for a program that can never run, and a
/// program error hidden behind a placement error.
#[test]
fn an_invalid_program_is_refused_before_any_device_starts() {
    let mut p = default_mlp(default_combo());
    p.optimizer = sgd(-1.0);
    for placement in [
        thread(),
        Placement::Process(PathBuf::from("/nonexistent/tessera")),
        Placement::Qemu(PathBuf::from("/nonexistent/firmware.elf")),
    ] {
        match Runtime::prepare(p.clone(), REPLICAS, &placement, MEMORY) {
            Err(RuntimeError::Program(ProgramError::Optimizer)) => {}
            other => panic!("{placement:?}: expected a program error, got {other:?}"),
        }
    }
    // A grouping that does not divide the replicas, named by its variable.
    let p = default_mlp(Combo {
        comm: CommGroup::Consecutive(2),
        retrieval: RetrievalMode::OnePerGroup,
        layout: Layout::None,
    });
    let placement = Placement::Process(PathBuf::from("/nonexistent/tessera"));
    match Runtime::prepare(p, 3, &placement, MEMORY) {
        Err(RuntimeError::Program(ProgramError::Variable { name, .. })) => {
            assert_eq!(name.as_str(), "w1");
        }
        other => panic!("expected a program error naming w1, got {other:?}"),
    }
}

/// A device executable that does not exist is an error naming replica 0 (the runtime's
/// contract: "an unreachable one is an error naming its replica"). Catches a spawn failure
/// that says what could not start but not which replica it was for.
#[test]
fn an_unreachable_device_is_an_error_naming_its_replica() {
    let p = default_mlp(default_combo());
    let placement = Placement::Process(PathBuf::from("/nonexistent/tessera"));
    let err = Runtime::prepare(p, REPLICAS, &placement, MEMORY).unwrap_err();
    assert!(
        matches!(err, RuntimeError::Transport(_)),
        "expected a transport error, got {err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("/nonexistent/tessera"),
        "'{text}' must name the program"
    );
    assert!(
        text.contains("device 0") || text.contains("replica 0"),
        "'{text}' must name replica 0"
    );
}

/// Zero replicas, or more than one runtime drives, are refused before any device starts.
/// Catches a runtime with no channels that later indexes replica 0 (random seed, RNG
/// state) and panics.
#[test]
fn zero_or_too_many_replicas_are_refused() {
    let p = default_mlp(Combo {
        comm: CommGroup::None,
        retrieval: RetrievalMode::OnePerGroup,
        layout: Layout::None,
    });
    for replicas in [0, MAX_REPLICAS + 1] {
        match Runtime::prepare(p.clone(), replicas, &thread(), MEMORY) {
            Err(RuntimeError::Replicas { replicas: r, max }) => {
                assert_eq!((r, max), (replicas, MAX_REPLICAS));
            }
            other => panic!("{replicas} replicas: expected a replicas error, got {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// 7. Weights from host errors.

/// Weights from host refuses an array of the wrong shape (naming the tensor and both
/// shapes), of the wrong type, or for an unknown variable; and when one array of several
/// is wrong nothing moves, even the arrays checked before it. Catches a check made per
/// array as it moves (the first arrays land, the device is left half-updated), a shape
/// check that only compares element counts (`w2`'s `[4, 5, 3]` for its four groups'
/// `[4, 3, 5]` has the same count), a group dimension left out, and f64 bytes taken as
/// f32.
#[test]
fn weights_from_host_errors_change_nothing() {
    let p = default_mlp(default_combo()); // w1 and b1 in 2 groups, w2 in 4.
    let mut runtime = prepare(&p, REPLICAS, &thread());
    let initial = initial_weights(&p, REPLICAS);
    runtime.weights_from_host(&initial).unwrap();
    let before = runtime.weights_to_host().unwrap();

    // Other values for every variable, so that anything that moved shows.
    let changed: WeightsIo = initial
        .iter()
        .map(|(name, a)| {
            let v: Vec<f32> = a.to_f32().unwrap().iter().map(|x| x + 1.0).collect();
            (name.clone(), HostArray::from_f32(a.shape(), &v).unwrap())
        })
        .collect();

    // w2 (last in name order) with each group's value transposed: same element count.
    let mut wrong_shape = changed.clone();
    let w2 = changed["w2"].reshaped(&[4, HIDDEN, CLASSES]).unwrap();
    wrong_shape.insert("w2".to_string(), w2);
    let err = runtime.weights_from_host(&wrong_shape).unwrap_err();
    match &err {
        RuntimeError::Shape {
            name,
            expected,
            actual,
            ..
        } => {
            assert_eq!(name, "w2");
            assert_eq!(expected, &[4, CLASSES as usize, HIDDEN as usize]);
            assert_eq!(actual, &[4, HIDDEN as usize, CLASSES as usize]);
        }
        other => panic!("expected a shape error, got {other:?}"),
    }
    let text = err.to_string();
    for part in ["`w2`", "[4, 3, 5]", "[4, 5, 3]"] {
        assert!(text.contains(part), "'{text}' must mention {part}");
    }

    // w1 without its group dimension.
    let mut missing_groups = changed.clone();
    let w1 = changed["w1"].to_f32().unwrap();
    let w1 = HostArray::from_f32(&[HIDDEN, FEATURES], &w1[..15]).unwrap();
    missing_groups.insert("w1".to_string(), w1);
    match runtime.weights_from_host(&missing_groups).unwrap_err() {
        RuntimeError::Shape {
            name,
            expected,
            actual,
            ..
        } => {
            assert_eq!(name, "w1");
            assert_eq!(expected, [2, HIDDEN as usize, FEATURES as usize]);
            assert_eq!(actual, [HIDDEN as usize, FEATURES as usize]);
        }
        other => panic!("expected a shape error, got {other:?}"),
    }

    // w2 as f64.
    let mut wrong_type = changed.clone();
    let w2: Vec<f64> = changed["w2"]
        .to_f32()
        .unwrap()
        .iter()
        .map(|&v| f64::from(v))
        .collect();
    wrong_type.insert(
        "w2".to_string(),
        HostArray::from_f64(changed["w2"].shape(), &w2).unwrap(),
    );
    match runtime.weights_from_host(&wrong_type).unwrap_err() {
        RuntimeError::Type {
            name,
            expected,
            actual,
        } => assert_eq!(
            (name.as_str(), expected, actual),
            ("w2", DataType::F32, DataType::F64)
        ),
        other => panic!("expected a type error, got {other:?}"),
    }

    // A name no variable has (sorted after every real one).
    let mut unknown = changed.clone();
    unknown.insert("zz".to_string(), HostArray::from_f32(&[1], &[0.0]).unwrap());
    match runtime.weights_from_host(&unknown).unwrap_err() {
        RuntimeError::UnknownTensor { name, expected } => {
            assert_eq!((name.as_str(), expected), ("zz", "variable"));
        }
        other => panic!("expected an unknown-variable error, got {other:?}"),
    }

    assert_eq!(
        runtime.weights_to_host().unwrap(),
        before,
        "a refused weights from host changed the device"
    );
    // The good arrays do move.
    runtime.weights_from_host(&changed).unwrap();
    assert_ne!(runtime.weights_to_host().unwrap(), before);
}
