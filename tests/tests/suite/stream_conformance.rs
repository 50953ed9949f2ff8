//! PopART's data-flow and anchor cases (`tests/data/streams.json`): period rules, anchor
//! parsing, the identity model's returned anchors (inference, and training with gradient
//! accumulation), and the input size check.

use serde_json::Value;
use tessera_core::stream::{
    AnchorAction, AnchorReturnType, DataFlow, Splitter, StreamKind, StreamSpec, UpstreamIo,
};

const STREAMS: &str = include_str!("../../data/streams.json");

fn dataflow_cases() -> Vec<Value> {
    let doc: Value = serde_json::from_str(STREAMS).unwrap();
    doc["dataflow"].as_array().unwrap().clone()
}

fn case_with(key: &str) -> Vec<Value> {
    dataflow_cases()
        .into_iter()
        .filter(|c| !c[key].is_null())
        .collect()
}

#[test]
fn anchor_errors_mention_the_rule() {
    let mut checked = 0;
    for case in dataflow_cases() {
        let Some(mention) = case["error_mentions"].as_str() else {
            continue;
        };
        let message = if let Some(anchors) = case["anchors"].as_object() {
            let flow = DataFlow::new(case["bps"].as_u64().unwrap() as usize, 1).unwrap();
            let anchor: AnchorReturnType = anchors["one"].as_str().unwrap().parse().unwrap();
            flow.check_anchor(anchor).unwrap_err().to_string()
        } else if let Some(text) = case["anchor"].as_str() {
            text.parse::<AnchorReturnType>().unwrap_err().to_string()
        } else {
            continue; // the size-check case, below
        };
        assert!(
            message.contains(mention),
            "'{message}' must mention '{mention}'"
        );
        checked += 1;
    }
    assert_eq!(checked, 5, "streams.json lost anchor cases");
}

#[test]
fn input_size_check_names_tensor_and_counts() {
    let case = &case_with("note")
        .into_iter()
        .find(|c| c["note"].as_str().unwrap().contains("given 4"))
        .unwrap();
    let flow = DataFlow::new(2, 1).unwrap();
    let x = StreamSpec {
        name: "x",
        sample_elements: 4,
        kind: StreamKind::Input { broadcast: false },
    };
    let message = flow
        .check_sizes(1, &[x], &[("x", 4)])
        .unwrap_err()
        .to_string();
    let mention = case["error_mentions"].as_str().unwrap();
    assert!(
        message.contains(mention),
        "'{message}' must contain '{mention}'"
    );
}

/// The user's arrays for one input and one anchored output; buffers are sample indices.
struct ArrayIo {
    input: Vec<f32>,
    output: Vec<f32>,
    next_in: usize,
    next_out: usize,
}

impl UpstreamIo for ArrayIo {
    type Buffer = usize;
    type Error = ();

    fn input(&mut self, _: usize, _: usize, _: bool) -> Result<Option<usize>, ()> {
        self.next_in += 1;
        Ok(Some(self.next_in - 1))
    }
    fn input_complete(&mut self, _: usize) -> Result<(), ()> {
        Ok(())
    }
    fn output(&mut self, _: usize, _: usize) -> Result<Option<usize>, ()> {
        self.next_out += 1;
        Ok(Some(self.next_out - 1))
    }
    fn output_complete(&mut self, _: usize) -> Result<(), ()> {
        Ok(())
    }
}

/// Runs the identity model (output = input) for one step on one replica and returns what
/// the anchor hands the host.
fn identity_model(input: &[f32], sample: usize, bps: usize, anchor: AnchorReturnType) -> Vec<f32> {
    accumulating_identity_model(input, sample, bps, 1, anchor)
}

/// The identity model over `bps` batches of `af` micro-batches: the device loop asks
/// [`AnchorReturnType::action`] what to do with each micro-batch's output, and the output
/// buffer it writes must be the one [`AnchorReturnType::output_index`] names.
fn accumulating_identity_model(
    input: &[f32],
    sample: usize,
    bps: usize,
    af: usize,
    anchor: AnchorReturnType,
) -> Vec<f32> {
    let flow = DataFlow::new(bps, af).unwrap();
    flow.check_anchor(anchor).unwrap();
    let x_spec = StreamSpec {
        name: "x",
        sample_elements: sample,
        kind: StreamKind::Input { broadcast: false },
    };
    let y_spec = StreamSpec {
        name: "y",
        sample_elements: sample,
        kind: StreamKind::Output(anchor),
    };
    let out_len = flow.expected_elements(&y_spec, 1).unwrap();
    flow.check_sizes(1, &[x_spec, y_spec], &[("x", input.len()), ("y", out_len)])
        .unwrap();

    let mut s = Splitter::<usize, 2, 1, 1>::new(1, flow).unwrap();
    let x = s.add_input(sample, false).unwrap();
    let y = s.add_output(sample, anchor).unwrap();
    let mut io = ArrayIo {
        input: input.to_vec(),
        output: vec![0.0; out_len],
        next_in: 0,
        next_out: 0,
    };
    let mut sum = vec![0.0f32; sample];
    for batch in 0..bps {
        for micro in 0..af {
            let j = s.input(&mut io, x, 0, false).unwrap().unwrap();
            let value: Vec<f32> = io.input[j * sample..][..sample].to_vec();
            s.input_complete(&mut io, x, 0).unwrap();
            let write = match anchor.action(batch, micro, bps, af) {
                AnchorAction::Skip => None,
                AnchorAction::Write => Some(value),
                AnchorAction::Accumulate { emit } => {
                    sum.iter_mut().zip(&value).for_each(|(acc, v)| *acc += v);
                    emit.then(|| sum.clone())
                }
            };
            let index = anchor.output_index(batch, micro, &flow);
            assert_eq!(
                index.is_some(),
                write.is_some(),
                "{anchor}: action and output_index disagree at batch {batch} micro {micro}"
            );
            if let Some(data) = write {
                let k = s.output(&mut io, y, 0).unwrap();
                assert_eq!(Some(k), index, "{anchor}: batch {batch} micro {micro}");
                io.output[k * sample..][..sample].copy_from_slice(&data);
                s.output_complete(&mut io, y, 0).unwrap();
            }
        }
    }
    io.output
}

fn floats(v: &Value) -> Vec<f32> {
    match v {
        Value::Array(items) => items.iter().flat_map(floats).collect(),
        n => vec![n.as_f64().unwrap() as f32],
    }
}

#[test]
fn identity_model_returns_what_popart_returns() {
    let cases = case_with("note");
    let scalar = cases.iter().find(|c| !c["all"].is_null()).unwrap();
    let input: Vec<f32> = (1..=8).map(|v| v as f32).collect();
    assert_eq!(
        identity_model(&input, 1, 8, AnchorReturnType::All),
        floats(&scalar["all"])
    );
    assert_eq!(
        identity_model(&input, 1, 8, AnchorReturnType::EveryN(4)),
        floats(&scalar["everyn_4"])
    );
    assert_eq!(
        identity_model(&input, 1, 8, AnchorReturnType::Final),
        floats(&scalar["final"])
    );
    assert_eq!(
        identity_model(&input, 1, 8, AnchorReturnType::Sum),
        floats(&scalar["sum"])
    );

    let pairs = cases.iter().find(|c| !c["everyn_2"].is_null()).unwrap();
    let input: Vec<f32> = (1..=8).map(|v| v as f32).collect();
    assert_eq!(
        identity_model(&input, 2, 4, AnchorReturnType::EveryN(2)),
        floats(&pairs["everyn_2"])
    );
    assert_eq!(
        identity_model(&input, 2, 4, AnchorReturnType::Final),
        floats(&pairs["final"])
    );
    assert_eq!(
        identity_model(&input, 2, 4, AnchorReturnType::Sum),
        floats(&pairs["sum"])
    );
}

/// PopART's training cases (`test_simple_training_session`): gradient accumulation numbers
/// a step's micro-batches `m = batch·af + micro`, and `everyn:P` returns the `m` with
/// `m % P == P − 1`. Catches an `EveryN` that counts batches instead of micro-batches: with
/// bps 2, af 2, `everyn:2` must return micro-batches 1 and 3 (`[[3,4],[7,8]]`), not both
/// micro-batches of batch 1 (`[[5,6],[7,8]]`). The other anchors of the same cases pin
/// `all`, `final` and `sum` under accumulation.
#[test]
fn training_with_accumulation_returns_what_popart_returns() {
    let doc: Value = serde_json::from_str(STREAMS).unwrap();
    let cases = doc["training"].as_array().unwrap();
    let mut checked = 0;
    for case in cases {
        let bps = case["bps"].as_u64().unwrap() as usize;
        let af = case["af"].as_u64().unwrap() as usize;
        let sample = case["sample"].as_u64().unwrap() as usize;
        let input = floats(&case["input"]);
        for (text, expected) in case["returns"].as_object().unwrap() {
            let anchor: AnchorReturnType = text.parse().unwrap();
            assert_eq!(
                accumulating_identity_model(&input, sample, bps, af, anchor),
                floats(expected),
                "{}: {text}",
                case["note"]
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 10, "streams.json lost training cases");
    assert!(
        cases
            .iter()
            .any(|c| c["af"] == 2 && c["bps"] == 2 && !c["returns"]["everyn:2"].is_null()),
        "streams.json lost PopART's bps 2, af 2, everyn:2 case"
    );
}
