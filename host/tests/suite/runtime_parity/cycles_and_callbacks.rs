//! Cycle counts, step IO through callbacks, and broadcast streams.

use super::*;

// ---------------------------------------------------------------------------------------
// 9. Cycle counts.

/// Cycle counts are refused (by every device, as a device error) unless the program is
/// instrumented; instrumented, every replica counts work > 0, replicas doing identical
/// work count the same, and a second identical step doubles the count. Catches counts
/// returned for an uninstrumented program, a count that stays 0, one that differs between
/// replicas doing the same work, and one reset (or counted twice) per step.
#[test]
fn cycle_counts_need_instrumentation() {
    let combo = Combo {
        comm: CommGroup::All,
        retrieval: RetrievalMode::OnePerGroup,
        layout: Layout::None,
    };
    let p = default_mlp(combo);
    let mut runtime = prepare(&p, REPLICAS, &thread());
    runtime.run(&mlp_io(&p, REPLICAS, 0)).unwrap();
    match runtime.cycle_counts() {
        Err(RuntimeError::Transport(TransportError::Device {
            request: RequestKind::CycleCount,
            code: ErrorCode::NotInstrumented,
            ..
        })) => {}
        other => panic!("expected a not-instrumented error, got {other:?}"),
    }

    let mut p = p;
    p.instrumented = true;
    let mut runtime = prepare(&p, REPLICAS, &thread());
    runtime
        .weights_from_host(&initial_weights(&p, REPLICAS))
        .unwrap();
    runtime.run(&mlp_io(&p, REPLICAS, 0)).unwrap();
    let once = runtime.cycle_counts().unwrap();
    assert_eq!(once.len(), REPLICAS);
    assert!(once[0] > 0, "no work counted: {once:?}");
    assert!(
        once.iter().all(|&c| c == once[0]),
        "replicas of identical work counted differently: {once:?}"
    );
    runtime.run(&mlp_io(&p, REPLICAS, 1)).unwrap();
    let twice = runtime.cycle_counts().unwrap();
    let doubled: Vec<u64> = once.iter().map(|c| 2 * c).collect();
    assert_eq!(
        twice, doubled,
        "a second identical step must double the count"
    );
}

/// Step IO through callbacks, in the stream's own types.
struct Callbacks<'a> {
    /// The arrays the callbacks serve, already in the streams' types (labels as int32).
    io: &'a StepIo,
    replicas: usize,
    /// Values handed back, by tensor: `(replica, index, bytes)`.
    outputs: Vec<(String, usize, usize, Vec<u8>)>,
}

impl tessera_host::runtime::step_io::StepCallbacks for Callbacks<'_> {
    fn input(&mut self, stream: &str, replica: usize, index: usize, sample: &mut [u8]) {
        let bytes = self.io[stream].bytes();
        // Sample `index` of replica `replica` is the user's sample `index·R + replica`.
        let at = (index * self.replicas + replica) * sample.len();
        sample.copy_from_slice(&bytes[at..at + sample.len()]);
    }
    fn output(&mut self, tensor: &str, replica: usize, index: usize, value: &[u8]) {
        self.outputs
            .push((tensor.to_string(), replica, index, value.to_vec()));
    }
}

/// Callbacks feed a step exactly as arrays do: the same anchors (value `index` of replica
/// `r` is row `index·R + r` of the array) and the same weights, bit for bit. Catches
/// callbacks asked for samples in another order than the splitter hands arrays out.
#[test]
fn callbacks_train_exactly_like_arrays() {
    let combo = Combo {
        comm: CommGroup::All,
        retrieval: RetrievalMode::OnePerGroup,
        layout: Layout::Balanced,
    };
    let program = default_mlp(combo);
    let initial = initial_weights(&program, REPLICAS);
    let mut arrays = prepare(&program, REPLICAS, &thread());
    let mut callbacks = prepare(&program, REPLICAS, &thread());
    for runtime in [&mut arrays, &mut callbacks] {
        runtime.set_random_seed(SEED).unwrap();
        runtime.weights_from_host(&initial).unwrap();
    }
    for step in 0..2 {
        let io = mlp_io(&program, REPLICAS, step);
        // The callbacks serve the labels in the stream's type, int32.
        let labels = HostArray::from_i32(&[labels_of(&io).len() as u32], &labels_of(&io)).unwrap();
        let typed = with(&io, "label", labels);
        let anchors = arrays.run(&io).unwrap();
        let mut served = Callbacks {
            io: &typed,
            replicas: REPLICAS,
            outputs: Vec::new(),
        };
        callbacks.run_with(&mut served).unwrap();
        assert!(!served.outputs.is_empty(), "the anchors came back");
        for (tensor, replica, index, value) in &served.outputs {
            let array = &anchors[tensor];
            let row = index * REPLICAS + replica;
            let width = value.len();
            assert_eq!(
                &array.bytes()[row * width..(row + 1) * width],
                &value[..],
                "step {step}: {tensor} value {index} of replica {replica}"
            );
        }
    }
    assert_eq!(
        arrays.weights_to_host().unwrap(),
        callbacks.weights_to_host().unwrap(),
        "the weights, bit for bit"
    );
}

/// A broadcast stream (one sample per micro-batch for every replica) beside a per-replica
/// one trains like the reference. Catches a runtime that asks the splitter for a
/// broadcast sample on behalf of every replica (it serves replica 0 only) and fails.
#[test]
fn a_broadcast_stream_feeds_every_replica() {
    let mut p = Program::new(BPS, AF, sgd(LEARNING_RATE));
    let all = GroupingSpec::Comm(CommGroup::All);
    let w = p
        .add_variable(
            "w",
            &[CLASSES, FEATURES],
            all,
            RetrievalMode::OnePerGroup,
            Sharding::Balanced,
        )
        .unwrap();
    p.input = p.add_stream("x", DataType::F32, &[FEATURES], true).unwrap();
    let labels = p.add_stream("label", DataType::I32, &[1], false).unwrap();
    p.add_layer(Layer::Linear { weight: w }).unwrap();
    p.add_layer(Layer::SoftmaxCrossEntropy { labels }).unwrap();
    p.add_anchor(AnchorTensor::Loss, AnchorReturnType::All)
        .unwrap();
    let micro = (BPS * AF) as usize;
    let initial = initial_weights(&p, REPLICAS);
    let mut runtime = prepare(&p, REPLICAS, &thread());
    runtime.set_random_seed(SEED).unwrap();
    runtime.weights_from_host(&initial).unwrap();
    let mut reference = Reference::new(&p, REPLICAS, SEED, &initial).unwrap();
    for step in 0..2 {
        let x = values(40 + step, micro * FEATURES as usize, 1.0);
        let labels: Vec<i32> = (0..micro * REPLICAS)
            .map(|i| ((i + step as usize) % CLASSES as usize) as i32)
            .collect();
        let io: StepIo = [
            (
                "x".to_string(),
                HostArray::from_f32(&[micro as u32, FEATURES], &x).unwrap(),
            ),
            (
                "label".to_string(),
                HostArray::from_i32(&[labels.len() as u32], &labels).unwrap(),
            ),
        ]
        .into();
        let anchors = runtime.run(&io).unwrap();
        let expected = reference.step(&io).unwrap();
        let loss = anchors["loss"].to_f32().unwrap();
        let error = max_relative_error(&loss, &expected["loss"]).unwrap();
        assert!(error < TOLERANCE, "step {step}: losses differ by {error:e}");
    }
    let weights = runtime.weights_to_host().unwrap();
    let expected = reference.weights();
    let error = max_relative_error(&weights["w"].to_f32().unwrap(), &expected["w"]).unwrap();
    assert!(error < TOLERANCE, "weights differ by {error:e}");
}
