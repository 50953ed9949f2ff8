//! The step IO's size checks and its type conversions through a stream.

use super::*;

// ---------------------------------------------------------------------------------------
// 4. Size checks.

fn assert_elements(
    result: Result<impl std::fmt::Debug, RuntimeError>,
    stream: &str,
    expected: usize,
    received: usize,
) {
    let err = result.expect_err("a short array must be refused");
    match &err {
        RuntimeError::Elements {
            name,
            expected: e,
            received: got,
            sample,
            per_replica,
            replicas,
        } => {
            assert_eq!(
                (name.as_str(), *e, *got),
                (stream, expected, received),
                "{err}"
            );
            assert_eq!(sample * per_replica * replicas, expected, "{err}");
        }
        other => panic!("expected an element-count error, got {other:?}"),
    }
    let text = err.to_string();
    for part in [
        format!("`{stream}`"),
        expected.to_string(),
        received.to_string(),
    ] {
        assert!(text.contains(&part), "'{text}' must mention {part}");
    }
}

/// A short array is refused as an element-count error naming the stream and the counts,
/// on the first run and on a later run after a good one, never a panic, and the runtime
/// still runs afterwards. Catches a size check made only on the first run (PopART's
/// rule, which lets a later short array read past its end or panic in the splitter) and
/// a check that leaves half a step in the devices' FIFOs.
#[test]
fn short_arrays_are_refused_on_every_run() {
    let p = default_mlp(default_combo());
    let mut runtime = prepare(&p, REPLICAS, &thread());
    runtime
        .weights_from_host(&initial_weights(&p, REPLICAS))
        .unwrap();
    let io = mlp_io(&p, REPLICAS, 0);
    let samples = per_replica(&p) * REPLICAS; // 16
    let x = values(9, (samples - 1) * FEATURES as usize, 1.0);
    let short_x = with(
        &io,
        "x",
        HostArray::from_f32(&[samples as u32 - 1, FEATURES], &x).unwrap(),
    );
    assert_elements(
        runtime.run(&short_x),
        "x",
        samples * FEATURES as usize,
        (samples - 1) * FEATURES as usize,
    );

    let first = runtime.run(&io).expect("a good run after a refused one");
    let labels = labels_of(&io);
    let short_labels = with(
        &io,
        "label",
        HostArray::from_i32(&[samples as u32 - 1], &labels[1..]).unwrap(),
    );
    assert_elements(runtime.run(&short_labels), "label", samples, samples - 1);
    // A long array too.
    let long: Vec<i32> = labels.iter().chain(&labels[..2]).copied().collect();
    let long_labels = with(
        &io,
        "label",
        HostArray::from_i32(&[samples as u32 + 2], &long).unwrap(),
    );
    assert_elements(runtime.run(&long_labels), "label", samples, samples + 2);

    // Nothing of the refused steps reached the devices: the next step is the reference's
    // second one.
    let initial = initial_weights(&p, REPLICAS);
    let mut reference = Reference::new(&p, REPLICAS, SEED, &initial).unwrap();
    let want = reference.step(&io).unwrap();
    compare_anchors(&p, REPLICAS, &first, &want, "first step").unwrap();
    let second = runtime.run(&io).unwrap();
    let want = reference.step(&io).unwrap();
    compare_anchors(&p, REPLICAS, &second, &want, "after refused steps").unwrap();
}

/// PopART's size-check case (stream `x` of sample `[2, 2]`, bps 2, one replica, given 4
/// elements: "Expected 8, but received 4") through the runtime. Catches a check that
/// counts samples instead of elements, or forgets the batches per step.
#[test]
fn popart_size_check_case_through_the_runtime() {
    let doc: Value = serde_json::from_str(STREAMS).unwrap();
    let case = doc["dataflow"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["note"].as_str().is_some_and(|n| n.contains("given 4")))
        .expect("streams.json lost the size-check case");
    assert!(case["error_mentions"]
        .as_str()
        .unwrap()
        .contains("Expected 8, but received 4"));
    let mut p = Program::new(2, 1, sgd(0.0));
    let w = p
        .add_variable(
            "w",
            &[1, 4],
            GroupingSpec::Comm(CommGroup::All),
            RetrievalMode::OnePerGroup,
            Sharding::None,
        )
        .unwrap();
    p.input = p.add_stream("x", DataType::F32, &[2, 2], false).unwrap();
    let t = p.add_stream("t", DataType::F32, &[1], false).unwrap();
    p.add_layer(Layer::Linear { weight: w }).unwrap();
    p.add_layer(Layer::MeanSquaredError { targets: t }).unwrap();
    let mut runtime = prepare(&p, 1, &thread());
    let io: StepIo = [
        (
            "x".to_string(),
            HostArray::from_f32(&[2, 2], &[1.0, 2.0, 3.0, 4.0]).unwrap(),
        ),
        (
            "t".to_string(),
            HostArray::from_f32(&[2], &[0.0, 0.0]).unwrap(),
        ),
    ]
    .into();
    assert_elements(runtime.run(&io), "x", 8, 4);
}

/// An array for a stream the program does not have, a missing stream, and an array of a
/// type that does not convert (f64 to an f32 stream) are errors naming the stream. Catches
/// unknown names silently ignored, a missing stream fed zeros or a panic on the map
/// lookup, and f64 bytes reinterpreted as f32 (the element count matches, so only the
/// type check can catch it).
#[test]
fn unknown_missing_and_unconvertible_streams_are_refused() {
    let p = default_mlp(default_combo());
    let mut runtime = prepare(&p, REPLICAS, &thread());
    let io = mlp_io(&p, REPLICAS, 0);

    let unknown = with(&io, "y", HostArray::from_f32(&[1], &[0.0]).unwrap());
    match runtime.run(&unknown) {
        Err(RuntimeError::UnknownTensor { name, expected }) => {
            assert_eq!((name.as_str(), expected), ("y", "stream"));
        }
        other => panic!("expected an unknown-stream error, got {other:?}"),
    }

    let mut missing = io.clone();
    missing.remove("label");
    match runtime.run(&missing) {
        Err(RuntimeError::MissingStream { name }) => assert_eq!(name, "label"),
        other => panic!("expected a missing-stream error, got {other:?}"),
    }

    let x: Vec<f64> = io["x"]
        .to_f32()
        .unwrap()
        .iter()
        .map(|&v| f64::from(v))
        .collect();
    let doubles = with(&io, "x", HostArray::from_f64(io["x"].shape(), &x).unwrap());
    let err = runtime.run(&doubles).unwrap_err();
    match &err {
        RuntimeError::Type {
            name,
            expected,
            actual,
        } => assert_eq!(
            (name.as_str(), *expected, *actual),
            ("x", DataType::F32, DataType::F64)
        ),
        other => panic!("expected a type error, got {other:?}"),
    }
    assert!(err.to_string().contains("`x`"), "{err}");

    // Still usable.
    runtime.run(&io).unwrap();
}

// ---------------------------------------------------------------------------------------
// 5. Type conversions through a stream.

/// Labels given as int64 train bit for bit like the same labels as int32 (anchors and
/// weights). Catches a narrowing that reads the wrong half of each int64, or feeds the
/// int64 bytes unconverted (twice as many labels, every other one 0).
#[test]
fn int64_labels_train_like_int32_labels() {
    let p = default_mlp(default_combo());
    let initial = initial_weights(&p, REPLICAS);
    let mut narrow = prepare(&p, REPLICAS, &thread());
    let mut wide = prepare(&p, REPLICAS, &thread());
    narrow.weights_from_host(&initial).unwrap();
    wide.weights_from_host(&initial).unwrap();
    for step in 0..2 {
        let io = mlp_io(&p, REPLICAS, step);
        let labels: Vec<i64> = labels_of(&io).iter().map(|&l| i64::from(l)).collect();
        let io64 = with(
            &io,
            "label",
            HostArray::from_i64(io["label"].shape(), &labels).unwrap(),
        );
        let a = narrow.run(&io).unwrap();
        let b = wide.run(&io64).unwrap();
        assert_eq!(
            a, b,
            "step {step}: anchors differ between int32 and int64 labels"
        );
    }
    assert_eq!(
        narrow.weights_to_host().unwrap(),
        wide.weights_to_host().unwrap(),
        "weights differ between int32 and int64 labels"
    );
}

/// An int64 label beyond int32 is an out-of-range error naming the stream, the element
/// and the value; a label outside the classes (too large, or negative) is a label error.
/// Catches a narrowing that truncates (2³¹ would become a valid-looking negative, 2³² + 1
/// the label 1) and a cross-entropy that indexes past its classes.
#[test]
fn out_of_range_and_invalid_labels_are_refused() {
    let p = default_mlp(default_combo());
    let mut runtime = prepare(&p, REPLICAS, &thread());
    let io = mlp_io(&p, REPLICAS, 0);
    let shape = io["label"].shape().to_vec();
    let labels64: Vec<i64> = labels_of(&io).iter().map(|&l| i64::from(l)).collect();

    for (index, value) in [
        (5, i64::from(i32::MAX) + 1),
        (0, (1 << 32) + 1),
        (15, i64::MIN),
    ] {
        let mut bad = labels64.clone();
        bad[index] = value;
        let io = with(&io, "label", HostArray::from_i64(&shape, &bad).unwrap());
        match runtime.run(&io) {
            Err(RuntimeError::OutOfRange {
                name,
                index: i,
                value: v,
            }) => assert_eq!((name.as_str(), i, v), ("label", index, value)),
            other => panic!("{value}: expected an out-of-range error, got {other:?}"),
        }
    }

    let labels = labels_of(&io);
    for (index, value) in [(2, CLASSES as i32), (7, -1), (11, i32::MAX)] {
        let mut bad = labels.clone();
        bad[index] = value;
        let io32 = with(&io, "label", HostArray::from_i32(&shape, &bad).unwrap());
        let wide: Vec<i64> = bad.iter().map(|&l| i64::from(l)).collect();
        let io64 = with(&io, "label", HostArray::from_i64(&shape, &wide).unwrap());
        for io in [io32, io64] {
            let err = runtime.run(&io).unwrap_err();
            match &err {
                RuntimeError::Label {
                    name,
                    index: i,
                    value: v,
                    classes,
                } => assert_eq!(
                    (name.as_str(), *i, *v, *classes),
                    ("label", index, i64::from(value), CLASSES as usize)
                ),
                other => panic!("{value}: expected a label error, got {other:?}"),
            }
            assert!(err.to_string().contains("`label`"), "{err}");
        }
    }
    runtime.run(&io).unwrap();
}

/// uint8 arrays feed an fp8 stream (a stream no layer reads), and the step still matches
/// the reference; an array of another type for it (int8, f32) is a type error. Catches
/// a uint8 → fp8 conversion refused, or one that lets any byte-sized type through.
#[test]
fn uint8_feeds_an_fp8_stream() {
    for fp8 in [DataType::F8E4M3, DataType::F8E5M2] {
        let mut p = default_mlp(default_combo());
        p.add_stream("aux", fp8, &[2], false).unwrap();
        p.check(REPLICAS).unwrap();
        let mut runtime = prepare(&p, REPLICAS, &thread());
        let initial = initial_weights(&p, REPLICAS);
        runtime.weights_from_host(&initial).unwrap();
        let mut reference = Reference::new(&p, REPLICAS, SEED, &initial).unwrap();
        let samples = per_replica(&p) * REPLICAS;
        let bytes: Vec<u8> = (0..samples * 2).map(|i| (i * 37 % 256) as u8).collect();
        let shape = [samples as u32, 2];
        let io = with(
            &mlp_io(&p, REPLICAS, 0),
            "aux",
            HostArray::from_u8(&shape, &bytes).unwrap(),
        );
        let anchors = runtime
            .run(&io)
            .unwrap_or_else(|e| panic!("{fp8}: uint8 into an fp8 stream: {e}"));
        let want = reference.step(&io).unwrap();
        compare_anchors(&p, REPLICAS, &anchors, &want, &format!("{fp8}")).unwrap();

        let signed: Vec<i8> = bytes.iter().map(|&b| b as i8).collect();
        let int8 = HostArray::new(DataType::I8, &shape, bytemuck_i8(&signed)).unwrap();
        let floats = HostArray::from_f32(&shape, &vec![0.5; samples * 2]).unwrap();
        for (array, dtype) in [(int8, DataType::I8), (floats, DataType::F32)] {
            match runtime.run(&with(&io, "aux", array)) {
                Err(RuntimeError::Type {
                    name,
                    expected,
                    actual,
                }) => assert_eq!((name.as_str(), expected, actual), ("aux", fp8, dtype)),
                other => panic!("{dtype} into {fp8}: expected a type error, got {other:?}"),
            }
        }
    }
}

fn bytemuck_i8(values: &[i8]) -> Vec<u8> {
    values.iter().map(|&v| v as u8).collect()
}
