//! PopART's anchor cases through a real program on the runtime.

use super::*;

// ---------------------------------------------------------------------------------------
// 3. PopART's anchor cases through the runtime.

/// One PopART anchor case: a step of `bps` batches of `af` micro-batches over `input`
/// (samples of `sample` elements), and what each anchor returns (one replica).
#[derive(Debug)]
struct AnchorCase {
    note: String,
    bps: usize,
    af: usize,
    sample: usize,
    input: Vec<f32>,
    returns: Vec<(AnchorReturnType, Vec<f32>)>,
}

fn floats(v: &Value) -> Vec<f32> {
    match v {
        Value::Array(items) => items.iter().flat_map(floats).collect(),
        n => vec![n.as_f64().unwrap() as f32],
    }
}

/// The anchor cases of `streams.json`: the identity model's (inference, whose inputs
/// the notes give) and the training cases with accumulation.
fn anchor_cases() -> Vec<AnchorCase> {
    let doc: Value = serde_json::from_str(STREAMS).unwrap();
    let mut cases = Vec::new();
    let one_to_eight: Vec<f32> = (1..=8).map(|v| v as f32).collect();
    for case in doc["dataflow"].as_array().unwrap() {
        let Some(note) = case["note"].as_str() else {
            continue;
        };
        let (sample, bps) = if note.contains("identity model, bps=8") {
            (1, 8)
        } else if note.contains("identity model, sample [2], bps=4") {
            (2, 4)
        } else {
            continue;
        };
        let returns = ["all", "everyn_2", "everyn_4", "final", "sum"]
            .iter()
            .filter(|key| !case[**key].is_null())
            .map(|key| {
                let anchor = key.replace('_', ":").parse().unwrap();
                (anchor, floats(&case[*key]))
            })
            .collect();
        cases.push(AnchorCase {
            note: note.to_string(),
            bps,
            af: 1,
            sample,
            input: one_to_eight.clone(),
            returns,
        });
    }
    for case in doc["training"].as_array().unwrap() {
        cases.push(AnchorCase {
            note: case["note"].as_str().unwrap().to_string(),
            bps: case["bps"].as_u64().unwrap() as usize,
            af: case["af"].as_u64().unwrap() as usize,
            sample: case["sample"].as_u64().unwrap() as usize,
            input: floats(&case["input"]),
            returns: case["returns"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(text, expected)| (text.parse().unwrap(), floats(expected)))
                .collect(),
        });
    }
    cases
}

/// A linear layer of identity weights under MSE against zero targets, never trained
/// (learning rate 0): the output anchor is the input sample itself, and the loss anchor
/// `Σx² / sample`, both exact in `f32` for PopART's small integers.
fn identity_program(sample: usize, bps: usize, af: usize, anchor: AnchorReturnType) -> Program {
    let mut p = Program::new(bps as u32, af as u32, sgd(0.0));
    let s = sample as u32;
    let w = p
        .add_variable(
            "w",
            &[s, s],
            GroupingSpec::Comm(CommGroup::All),
            RetrievalMode::OnePerGroup,
            Sharding::None,
        )
        .unwrap();
    p.input = p.add_stream("x", DataType::F32, &[s], false).unwrap();
    let t = p.add_stream("t", DataType::F32, &[s], false).unwrap();
    p.add_layer(Layer::Linear { weight: w }).unwrap();
    p.add_layer(Layer::MeanSquaredError { targets: t }).unwrap();
    p.add_anchor(AnchorTensor::Loss, anchor).unwrap();
    p.add_anchor(AnchorTensor::Output, anchor).unwrap();
    p
}

/// PopART's anchor cases (`streams.json`: the identity model's All / EveryN / Final / Sum,
/// and the training cases with accumulation, bps 2 af 2 EveryN 2 among them) through the
/// runtime, on 1 and on 2 replicas: each anchor returns the case's number of outputs per
/// replica, the case's values in the case's order (replica `r`'s inputs shifted by
/// `10·r`, so output `j` of replica `r` is row `j·R + r`), the loss of exactly those
/// micro-batches, and what the reference returns. Catches a device loop or host
/// reassembly that counts EveryN over batches instead of micro-batches, writes Final
/// before the last micro-batch, resets or misses part of a Sum, or interleaves replicas'
/// outputs in the wrong order; and a runtime whose second step puts items or anchored rows
/// elsewhere than its first (it works out where they go once, at its first step).
#[test]
fn popart_anchor_cases_through_the_runtime() {
    const SHIFT: f32 = 10.0;
    let cases = anchor_cases();
    let mut checked = 0;
    for case in &cases {
        for &(anchor, ref expected) in &case.returns {
            for replicas in [1, 2] {
                let what = format!("{} — {anchor}, {replicas} replicas", case.note);
                let (bps, af, sample) = (case.bps, case.af, case.sample);
                let micro = bps * af;
                assert_eq!(case.input.len(), micro * sample, "{what}");
                let program = identity_program(sample, bps, af, anchor);
                let mut runtime = prepare(&program, replicas, &thread());
                let identity: Vec<f32> = (0..sample * sample)
                    .map(|k| if k % (sample + 1) == 0 { 1.0 } else { 0.0 })
                    .collect();
                let weights: WeightsIo = [(
                    "w".to_string(),
                    HostArray::from_f32(&[sample as u32, sample as u32], &identity).unwrap(),
                )]
                .into();
                runtime.weights_from_host(&weights).unwrap();
                let mut reference = Reference::new(&program, replicas, SEED, &weights).unwrap();

                // User sample j·R + r is replica r's j-th: the case's j-th, shifted.
                let mut x = Vec::new();
                for j in 0..micro {
                    for r in 0..replicas {
                        let s = &case.input[j * sample..(j + 1) * sample];
                        x.extend(s.iter().map(|v| v + SHIFT * r as f32));
                    }
                }
                let n = (micro * replicas) as u32;
                // Inputs `x`, targets 0.
                let step_io = |x: &[f32]| -> StepIo {
                    let shape = [n, sample as u32];
                    [
                        ("x".to_string(), HostArray::from_f32(&shape, x).unwrap()),
                        (
                            "t".to_string(),
                            HostArray::from_f32(&shape, &vec![0.0; x.len()]).unwrap(),
                        ),
                    ]
                    .into()
                };
                let io = step_io(&x);
                let anchors = runtime.run(&io).unwrap_or_else(|e| panic!("{what}: {e}"));

                let outputs = expected.len() / sample;
                let flow = DataFlow::new(bps, af).unwrap();
                assert_eq!(
                    flow.outputs_per_replica(Some(anchor)),
                    outputs,
                    "{what}: the case's output count"
                );
                let output = &anchors["output"];
                let loss = &anchors["loss"];
                assert_eq!(
                    output.shape(),
                    [outputs as u32, replicas as u32, sample as u32],
                    "{what}: output anchor shape"
                );
                assert_eq!(
                    loss.shape(),
                    [outputs as u32, replicas as u32],
                    "{what}: loss anchor shape"
                );

                // The case's values, row j·R + r, shifted by replica.
                let summed = if anchor == AnchorReturnType::Sum {
                    micro as f32
                } else {
                    1.0
                };
                let mut want_output = Vec::new();
                let mut want_loss = Vec::new();
                let sample_loss = |s: &[f32]| s.iter().map(|v| v * v).sum::<f32>() / sample as f32;
                for j in 0..outputs {
                    for r in 0..replicas {
                        let row = &expected[j * sample..(j + 1) * sample];
                        let shift = SHIFT * r as f32;
                        want_output.extend(row.iter().map(|v| v + shift * summed));
                        want_loss.push(if anchor == AnchorReturnType::Sum {
                            (0..micro)
                                .map(|m| {
                                    let s: Vec<f32> = case.input[m * sample..(m + 1) * sample]
                                        .iter()
                                        .map(|v| v + shift)
                                        .collect();
                                    sample_loss(&s)
                                })
                                .sum()
                        } else {
                            let s: Vec<f32> = row.iter().map(|v| v + shift).collect();
                            sample_loss(&s)
                        });
                    }
                }
                assert_eq!(output.to_f32().unwrap(), want_output, "{what}: output");
                assert_eq!(loss.to_f32().unwrap(), want_loss, "{what}: loss");

                let by_reference = reference.step(&io).unwrap();
                compare_anchors(&program, replicas, &anchors, &by_reference, &what)
                    .unwrap_or_else(|e| panic!("{e}"));

                // The runtime works out where a step's items go once, at its first step: a
                // second step, on other inputs, must still put them where the reference does.
                let x2: Vec<f32> = x.iter().map(|v| v + 1.0).collect();
                let io2 = step_io(&x2);
                let again = runtime
                    .run(&io2)
                    .unwrap_or_else(|e| panic!("{what}, again: {e}"));
                assert_ne!(again, anchors, "{what}: the second step's inputs differ");
                let by_reference = reference.step(&io2).unwrap();
                compare_anchors(
                    &program,
                    replicas,
                    &again,
                    &by_reference,
                    &format!("{what}, again"),
                )
                .unwrap_or_else(|e| panic!("{e}"));
            }
            checked += 1;
        }
    }
    assert_eq!(
        checked, 17,
        "streams.json lost anchor cases: 4 + 3 identity-model returns and 10 training returns"
    );
}
