//! The step-IO splitter against PopART's trace, hand-written scenarios (depths, reset,
//! outputs, broadcast, every error), and properties over arbitrary interleavings of
//! per-replica calls. The rules checked are the round-robin rules stated in the docs of
//! core's `stream` and `stream::splitter` modules.

use std::collections::BTreeSet;

use proptest::prelude::*;
use serde_json::Value;
use tessera_core::stream::{AnchorReturnType, DataFlow, SetupError, Splitter, SplitterError};
use tessera_tests::{RecordingError, RecordingIo};

const STREAMS: &str = include_str!("../../data/streams.json");

type Split<const DEPTH: usize> = Splitter<usize, 2, 4, DEPTH>;

fn splitter<const DEPTH: usize>(replicas: usize, bps: usize, af: usize) -> (Split<DEPTH>, usize) {
    let mut s = Split::<DEPTH>::new(replicas, DataFlow::new(bps, af).unwrap()).unwrap();
    let t = s.add_input(1, false).unwrap();
    (s, t)
}

/// PopART's splitter trace (R = 4, bps = 15, af = 2), replayed step by step.
#[test]
fn popart_trace() {
    let doc: Value = serde_json::from_str(STREAMS).unwrap();
    let case = &doc["splitter"][0];
    let trace: Vec<(String, usize)> = case["trace"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| {
            (
                step[0].as_str().unwrap().to_string(),
                step[1].as_u64().unwrap() as usize,
            )
        })
        .collect();
    // What each step of the trace must do, from its description: the buffer handed out
    // (offset in the step), the prefetch flags of the upstream in-calls it makes, and the
    // number of upstream completions it releases.
    let expected: [(Option<usize>, &[bool], usize); 8] = [
        (Some(2), &[false, false, true], 0),
        (Some(1), &[], 0),
        (None, &[], 0),
        (Some(0), &[], 0),
        (None, &[], 1),
        (Some(3), &[true], 0),
        (None, &[], 2),
        (None, &[], 1),
    ];
    assert_eq!(
        trace.len(),
        expected.len(),
        "the trace in streams.json changed"
    );

    let (mut s, t) = splitter::<4>(4, 15, 2);
    let mut io = RecordingIo::default();
    for step in 0..30 {
        let off = step * 4;
        for ((op, replica), (buffer, calls, releases)) in trace.iter().zip(expected) {
            let (calls_before, released_before) = (
                io.input_log(t).input_calls.len(),
                io.input_log(t).released.len(),
            );
            match op.as_str() {
                "in" => assert_eq!(
                    s.input(&mut io, t, *replica, true),
                    Ok(buffer.map(|b| off + b))
                ),
                "complete" => assert_eq!(s.input_complete(&mut io, t, *replica), Ok(())),
                other => panic!("unknown trace op {other}"),
            }
            let log = io.input_log(t);
            assert_eq!(
                &log.input_calls[calls_before..],
                calls,
                "step {step}: {op} {replica}"
            );
            assert_eq!(
                log.released.len() - released_before,
                releases,
                "step {step}: {op} {replica}"
            );
        }
    }
    let calls = io.input_log(t).input_calls.len();
    for r in 0..4 {
        assert_eq!(
            s.input(&mut io, t, r, true),
            Ok(None),
            "replica {r} is at its cap"
        );
    }
    assert_eq!(
        io.input_log(t).input_calls.len(),
        calls,
        "a capped adapter makes no upstream call"
    );
    assert_eq!(io.input_log(t).released, (0..120).collect::<Vec<_>>());
}

const FLOWS: [(usize, usize); 4] = [(1, 1), (2, 3), (5, 2), (15, 2)];

fn check_released_in_fetch_order(io: &RecordingIo, t: usize, total: usize) {
    assert_eq!(io.input_log(t).released, (0..total).collect::<Vec<_>>());
}

#[test]
fn in_order_with_depth_one() {
    for replicas in [1, 2, 4] {
        for (bps, af) in FLOWS {
            let (mut s, t) = splitter::<1>(replicas, bps, af);
            let mut io = RecordingIo::default();
            for j in 0..bps * af {
                for r in 0..replicas {
                    assert_eq!(s.input(&mut io, t, r, false), Ok(Some(j * replicas + r)));
                    s.input_complete(&mut io, t, r).unwrap();
                    // In order, every completion is released at once.
                    assert_eq!(io.input_log(t).released.len(), j * replicas + r + 1);
                }
            }
            check_released_in_fetch_order(&io, t, bps * af * replicas);
        }
    }
}

#[test]
fn all_in_then_all_complete() {
    for replicas in [1, 2, 4] {
        for (bps, af) in FLOWS {
            let (mut s, t) = splitter::<1>(replicas, bps, af);
            let mut io = RecordingIo::default();
            for j in 0..bps * af {
                for r in 0..replicas {
                    assert_eq!(s.input(&mut io, t, r, false), Ok(Some(j * replicas + r)));
                }
                assert_eq!(
                    io.input_log(t).released.len(),
                    j * replicas,
                    "nothing released before completion"
                );
                for r in 0..replicas {
                    s.input_complete(&mut io, t, r).unwrap();
                }
            }
            check_released_in_fetch_order(&io, t, bps * af * replicas);
        }
    }
}

/// The last replica runs `depth` buffers ahead, so every other replica parks `depth`.
#[test]
fn buffering_depths_one_to_three() {
    for depth in 1..=3 {
        for replicas in [1, 2, 4] {
            for (bps, af) in FLOWS {
                let cap = bps * af;
                let (mut s, t) = splitter::<3>(replicas, bps, af);
                let mut io = RecordingIo::default();
                let mut taken = vec![0usize; replicas];
                while taken[0] < cap {
                    let ahead = depth.min(cap - taken[0]);
                    for r in (0..replicas).rev() {
                        for _ in 0..ahead {
                            assert_eq!(
                                s.input(&mut io, t, r, false),
                                Ok(Some(taken[r] * replicas + r))
                            );
                            taken[r] += 1;
                        }
                    }
                    // Complete in reverse replica order: releases wait for replica 0.
                    for r in (0..replicas).rev() {
                        for _ in 0..ahead {
                            s.input_complete(&mut io, t, r).unwrap();
                        }
                    }
                }
                check_released_in_fetch_order(&io, t, cap * replicas);
            }
        }
    }
}

#[test]
fn reset_continues_from_the_next_upstream_buffer() {
    for replicas in [1, 2, 4] {
        for (bps, af) in FLOWS {
            let cap = bps * af;
            let (mut s, t) = splitter::<1>(replicas, bps, af);
            let mut io = RecordingIo::default();
            for run in 0..3 {
                s.reset();
                for j in 0..cap {
                    for r in 0..replicas {
                        let expected = run * cap * replicas + j * replicas + r;
                        assert_eq!(s.input(&mut io, t, r, false), Ok(Some(expected)));
                        s.input_complete(&mut io, t, r).unwrap();
                    }
                }
                let err = s.input(&mut io, t, 0, false).unwrap_err();
                assert_eq!(
                    err,
                    SplitterError::Exhausted {
                        tensor: t,
                        replica: 0,
                        cap
                    }
                );
            }
            check_released_in_fetch_order(&io, t, 3 * cap * replicas);
        }
    }
}

#[test]
fn outputs_mirror_inputs_up_to_the_anchor_count() {
    let flow = DataFlow::new(4, 1).unwrap();
    let mut s = Split::<2>::new(2, flow).unwrap();
    let every2 = s.add_output(3, AnchorReturnType::EveryN(2)).unwrap();
    let mut io = RecordingIo::default();
    for j in 0..2 {
        for r in [1, 0] {
            assert_eq!(s.output(&mut io, every2, r), Ok(j * 2 + r));
        }
        s.output_complete(&mut io, every2, 1).unwrap();
        assert!(
            io.output_log(every2).released.len() == 2 * j,
            "replica 0 must complete first"
        );
        s.output_complete(&mut io, every2, 0).unwrap();
        assert_eq!(io.output_log(every2).released.len(), 2 * j + 2);
    }
    let err = s.output(&mut io, every2, 0).unwrap_err();
    assert_eq!(
        err,
        SplitterError::Exhausted {
            tensor: every2,
            replica: 0,
            cap: 2
        }
    );
    assert_eq!(io.output_log(every2).released, [0, 1, 2, 3]);
}

#[test]
fn broadcast_streams_use_replica_zero_only() {
    let mut s = Split::<1>::new(4, DataFlow::new(3, 1).unwrap()).unwrap();
    let b = s.add_input(2, true).unwrap();
    let mut io = RecordingIo::default();
    for j in 0..3 {
        assert_eq!(
            s.input(&mut io, b, 0, false),
            Ok(Some(j)),
            "indices do not advance past replica 0"
        );
        assert_eq!(
            io.input_log(b).input_calls.len(),
            j + 1,
            "one upstream call per buffer"
        );
        s.input_complete(&mut io, b, 0).unwrap();
    }
    assert_eq!(
        s.input(&mut io, b, 2, false),
        Err(SplitterError::BroadcastReplica {
            tensor: b,
            replica: 2
        })
    );
    assert_eq!(io.input_log(b).released, [0, 1, 2]);
}

/// Every error of the splitter, provoked.
#[test]
fn every_error_is_reported() {
    let flow = DataFlow::new(1, 1).unwrap();
    assert_eq!(
        Split::<1>::new(0, flow).unwrap_err(),
        SetupError::Replicas {
            replicas: 0,
            capacity: 4
        }
    );
    assert_eq!(
        Split::<1>::new(5, flow).unwrap_err(),
        SetupError::Replicas {
            replicas: 5,
            capacity: 4
        }
    );
    let mut s = Split::<1>::new(2, flow).unwrap();
    let x = s.add_input(1, false).unwrap();
    let y = s.add_output(1, AnchorReturnType::Final).unwrap();
    assert_eq!(
        s.add_input(1, false),
        Err(SetupError::Tensors { capacity: 2 })
    );

    let mut io = RecordingIo::default();
    assert_eq!(
        s.input(&mut io, 7, 0, false),
        Err(SplitterError::UnknownTensor { tensor: 7 })
    );
    assert_eq!(
        s.input(&mut io, y, 0, false),
        Err(SplitterError::WrongDirection {
            tensor: y,
            input: true
        })
    );
    assert_eq!(
        s.output(&mut io, x, 0),
        Err(SplitterError::WrongDirection {
            tensor: x,
            input: false
        })
    );
    assert_eq!(
        s.input(&mut io, x, 2, false),
        Err(SplitterError::ReplicaOutOfRange {
            tensor: x,
            replica: 2,
            replicas: 2
        })
    );
    assert_eq!(
        s.input_complete(&mut io, x, 0),
        Err(SplitterError::NothingOutstanding {
            tensor: x,
            replica: 0
        })
    );

    // Upstream with nothing to give: fine for a prefetch, an error otherwise.
    io.limit = Some(0);
    assert_eq!(s.input(&mut io, x, 0, true), Ok(None));
    assert_eq!(
        s.input(&mut io, x, 0, false),
        Err(SplitterError::UpstreamEmpty {
            tensor: x,
            replica: 0
        })
    );
    assert_eq!(
        s.output(&mut io, y, 1),
        Err(SplitterError::UpstreamEmpty {
            tensor: y,
            replica: 0
        })
    );
    io.limit = None;

    // A failing upstream is passed through, and no buffer is lost: the retry gets buffer 0.
    io.fail_next = true;
    assert_eq!(
        s.input(&mut io, x, 0, false),
        Err(SplitterError::Upstream(RecordingError::Injected))
    );
    assert_eq!(s.input(&mut io, x, 0, false), Ok(Some(0)));

    // bps·af = 1: a second buffer is beyond the run.
    s.input_complete(&mut io, x, 0).unwrap();
    assert_eq!(
        s.input(&mut io, x, 0, false),
        Err(SplitterError::Exhausted {
            tensor: x,
            replica: 0,
            cap: 1
        })
    );

    // Outputs past the anchor's count.
    assert_eq!(s.output(&mut io, y, 0), Ok(0));
    assert_eq!(
        s.output(&mut io, y, 0),
        Err(SplitterError::Exhausted {
            tensor: y,
            replica: 0,
            cap: 1
        })
    );
}

/// Caught: the runtime read a missing buffer as sample 0 (`input(..).unwrap_or(0)`), so an
/// upstream that ran short would have trained replicas on the first sample again;
/// `next_input` gives the buffer or the splitter's own `Exhausted`, never a default.
#[test]
fn next_input_is_a_buffer_or_exhausted_never_a_default() {
    let (mut s, t) = splitter::<4>(2, 1, 1);
    let mut io = RecordingIo::default();
    assert_eq!(s.next_input(&mut io, t, 1), Ok(1));
    assert_eq!(s.next_input(&mut io, t, 0), Ok(0));
    s.input_complete(&mut io, t, 0).unwrap();
    assert_eq!(
        s.next_input(&mut io, t, 0),
        Err(SplitterError::Exhausted {
            tensor: t,
            replica: 0,
            cap: 1
        })
    );
    assert_eq!(
        s.next_input(&mut io, t, 2),
        Err(SplitterError::ReplicaOutOfRange {
            tensor: t,
            replica: 2,
            replicas: 2
        })
    );
}

#[test]
fn a_full_fifo_is_an_error_and_loses_nothing() {
    let (mut s, t) = splitter::<1>(2, 4, 1);
    let mut io = RecordingIo::default();
    assert_eq!(s.input(&mut io, t, 1, false), Ok(Some(1))); // parks 0 for replica 0
    s.input_complete(&mut io, t, 1).unwrap();
    let err = s.input(&mut io, t, 1, false).unwrap_err();
    assert_eq!(
        err,
        SplitterError::FifoFull {
            tensor: t,
            replica: 0,
            depth: 1
        }
    );
    assert_eq!(
        io.input_log(t).input_calls.len(),
        2,
        "no upstream call once the FIFO is full"
    );
    assert_eq!(s.input(&mut io, t, 0, false), Ok(Some(0)));
    assert_eq!(s.input(&mut io, t, 1, false), Ok(Some(3)));
}

#[derive(Debug, Clone, Copy)]
enum Call {
    In { replica: usize, prefetch: bool },
    Complete { replica: usize },
    Out { replica: usize },
    OutComplete { replica: usize },
}

fn call(replicas: usize) -> impl Strategy<Value = Call> {
    let r = 0..replicas;
    prop_oneof![
        (r.clone(), any::<bool>()).prop_map(|(replica, prefetch)| Call::In { replica, prefetch }),
        r.clone().prop_map(|replica| Call::Complete { replica }),
        r.clone().prop_map(|replica| Call::Out { replica }),
        r.prop_map(|replica| Call::OutComplete { replica }),
    ]
}

fn scenario() -> impl Strategy<Value = (usize, usize, usize, Vec<Call>)> {
    (1usize..=4, 1usize..=4, 1usize..=3).prop_flat_map(|(r, bps, af)| {
        (
            Just(r),
            Just(bps),
            Just(af),
            prop::collection::vec(call(r), 0..160),
        )
    })
}

/// A model of one side: per replica, buffers taken and completed this run.
struct Model {
    replicas: usize,
    cap: usize,
    taken: Vec<usize>,
    completed: BTreeSet<usize>,
    outstanding: Vec<usize>,
}

impl Model {
    fn new(replicas: usize, cap: usize) -> Self {
        Self {
            replicas,
            cap,
            taken: vec![0; replicas],
            completed: BTreeSet::new(),
            outstanding: vec![0; replicas],
        }
    }

    /// The buffer replica `replica` must get next (its j-th is `j·R + r`), or `None` when
    /// it has had all of this run's.
    fn take(&mut self, replica: usize) -> Option<usize> {
        if self.taken[replica] == self.cap {
            return None;
        }
        self.taken[replica] += 1;
        self.outstanding[replica] += 1;
        Some((self.taken[replica] - 1) * self.replicas + replica)
    }

    /// What completing one of `replica`'s buffers of `tensor` must return.
    fn complete(
        &mut self,
        tensor: usize,
        replica: usize,
    ) -> Result<(), SplitterError<RecordingError>> {
        if self.outstanding[replica] == 0 {
            return Err(SplitterError::NothingOutstanding { tensor, replica });
        }
        let j = self.taken[replica] - self.outstanding[replica];
        self.completed.insert(j * self.replicas + replica);
        self.outstanding[replica] -= 1;
        Ok(())
    }

    /// Upstream releases exactly the longest prefix of fetch order that replicas completed.
    fn check_released(&self, released: &[usize]) -> Result<(), TestCaseError> {
        let prefix = (0..).take_while(|id| self.completed.contains(id)).count();
        prop_assert_eq!(released, &(0..prefix).collect::<Vec<_>>()[..]);
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    /// Any interleaving hands replica r its j-th buffer = upstream buffer j·R + r, and
    /// upstream sees completions released in fetch order, as early as possible.
    #[test]
    fn any_interleaving_keeps_round_robin_order((replicas, bps, af, calls) in scenario()) {
        let flow = DataFlow::new(bps, af).unwrap();
        let mut s = Splitter::<usize, 2, 4, 16>::new(replicas, flow).unwrap();
        let x = s.add_input(1, false).unwrap();
        let y = s.add_output(1, AnchorReturnType::All).unwrap();
        let mut io = RecordingIo::default();
        let mut ins = Model::new(replicas, bps * af);
        let mut outs = Model::new(replicas, bps * af);
        for c in calls {
            match c {
                Call::In { replica, prefetch } => {
                    let got = s.input(&mut io, x, replica, prefetch);
                    let want = match ins.take(replica) {
                        Some(buffer) => Ok(Some(buffer)),
                        None if prefetch => Ok(None),
                        None => Err(SplitterError::Exhausted { tensor: x, replica, cap: ins.cap }),
                    };
                    prop_assert_eq!(got, want);
                }
                Call::Complete { replica } => {
                    prop_assert_eq!(s.input_complete(&mut io, x, replica), ins.complete(x, replica));
                    ins.check_released(&io.input_log(x).released)?;
                }
                Call::Out { replica } => {
                    let got = s.output(&mut io, y, replica);
                    let exhausted = SplitterError::Exhausted { tensor: y, replica, cap: outs.cap };
                    prop_assert_eq!(got, outs.take(replica).ok_or(exhausted));
                }
                Call::OutComplete { replica } => {
                    prop_assert_eq!(s.output_complete(&mut io, y, replica), outs.complete(y, replica));
                    outs.check_released(&io.output_log(y).released)?;
                }
            }
        }
    }

    /// No call sequence panics, whatever the indices, capacities and upstream failures.
    #[test]
    fn no_call_sequence_panics(
        replicas in 1usize..=4, bps in 1usize..=3,
        ops in prop::collection::vec((0u8..6, 0usize..4, 0usize..6, any::<bool>(), 0u8..8), 0..200),
    ) {
        let mut s = Splitter::<usize, 3, 4, 2>::new(replicas, DataFlow::new(bps, 1).unwrap()).unwrap();
        s.add_input(1, false).unwrap();
        s.add_input(1, true).unwrap();
        s.add_output(1, AnchorReturnType::Sum).unwrap();
        let mut io = RecordingIo { limit: Some(bps * 2), ..RecordingIo::default() };
        for (op, tensor, replica, prefetch, chaos) in ops {
            io.fail_next = chaos == 0;
            let _ = match op {
                0 => s.input(&mut io, tensor, replica, prefetch).map(drop),
                1 => s.input_complete(&mut io, tensor, replica),
                2 => s.output(&mut io, tensor, replica).map(drop),
                3 => s.output_complete(&mut io, tensor, replica),
                4 => { s.reset(); Ok(()) }
                _ => { io.limit = io.limit.map(|l| l + 1); Ok(()) }
            };
        }
    }
}
