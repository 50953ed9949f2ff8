//! The round's rules, case by case.

use super::*;

/// A contribution to `round`: `data`, to combine by `op`.
fn share(round: u32, op: ReduceOp, data: &[u8]) -> Reply {
    Reply::from_contribution(Contribution {
        step: 0,
        round,
        op,
        data,
    })
}

/// Collects `message` from member `from` (replica `from`) as the driver does, judged
/// by its heading; returns the members whose messages were folded by it.
fn collect(
    open: &mut OpenRound,
    plan: &Plan,
    from: usize,
    message: Reply,
) -> Result<Vec<usize>, RuntimeError> {
    let heading = Heading::of(&message.contribution().expect("a contribution"));
    let mut folded = Vec::new();
    open.collect(plan, from, from, heading, message, |m, _| folded.push(m))?;
    Ok(folded)
}

/// Replicas `0..n`, member `i` replica `i`.
fn replicas(n: usize) -> Vec<usize> {
    (0..n).collect()
}

/// A round of one segment.
fn one(grouping: ReplicaGrouping, bytes: usize) -> Plan {
    Plan {
        segments: vec![(grouping, bytes)],
    }
}

fn f32s(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Round 0's contributions (a sum) of two devices of two lanes, replicas 0–1 and 2–3:
/// each lane's `values` side by side, the second device's message first.
fn second_device_first<const N: usize>(open: &mut OpenRound, plan: &Plan, values: &[[f32; N]; 4]) {
    for (m, lanes) in [(1, [2, 3]), (0, [0, 1])] {
        let data: Vec<f32> = lanes.iter().flat_map(|&r| values[r]).collect();
        let message = share(0, ReduceOp::Sum, &f32s(&data));
        let heading = Heading::of(&message.contribution().unwrap());
        open.collect(plan, m, lanes[0], heading, message, |_, _| {})
            .unwrap();
    }
}

/// Round 0 under `plan`, combined by `op`, every member's contribution in: member
/// `from`'s `values` for each `(from, values)`, arrived in that order; its answers.
fn arrived(op: ReduceOp, plan: &Plan, contributions: &[(usize, Vec<f32>)]) -> Answers {
    let mut open = OpenRound::open(0, op, plan, &replicas(contributions.len())).unwrap();
    for (from, values) in contributions {
        collect(&mut open, plan, *from, share(0, op, &f32s(values))).unwrap();
    }
    assert!(open.complete());
    open.answers(plan, &crate::instance::Single).unwrap()
}

/// Each of the first `n` members' answers.
fn each(answers: &Answers, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| answers.of(i).expect("an answer per member").to_vec())
        .collect()
}

/// Catches contributions of one round that differ in length or operation being
/// combined anyway (truncated to the shortest, or summed where a mean was asked).
#[test]
fn contributions_must_match_the_rounds_first() {
    let plan = one(ReplicaGrouping::new(8, 1, 8).unwrap(), 8);
    let mut open = OpenRound::open(2, ReduceOp::Avg, &plan, &replicas(8)).unwrap();
    let mean = |data: &[u8]| share(2, ReduceOp::Avg, data);
    assert_eq!(collect(&mut open, &plan, 0, mean(&[0; 8])).unwrap(), [0]);
    assert!(collect(&mut open, &plan, 0, mean(&[0; 8]))
        .unwrap()
        .is_empty());
    assert_eq!(open.folded, 1, "a repeat is in once");
    assert!(matches!(
        collect(&mut open, &plan, 1, mean(&[0; 4])),
        Err(RuntimeError::ReductionLength {
            replica: 1,
            expected: 8,
            actual: 4,
            ..
        })
    ));
    assert!(matches!(
        collect(&mut open, &plan, 1, share(2, ReduceOp::Sum, &[0; 8])),
        Err(RuntimeError::ReductionOps {
            replica: 1,
            round: 2
        })
    ));
    assert!(matches!(
        collect(&mut open, &plan, 1, share(3, ReduceOp::Avg, &[0; 8])),
        Err(RuntimeError::ReductionRound {
            replica: 1,
            round: 3,
            expected: 2
        })
    ));
}

/// Catches a contribution asking for an operation a step's round does not do (core's
/// operations include the session's product, minimum and maximum) summed anyway.
#[test]
fn a_round_only_sums_or_averages() {
    let plan = one(ReplicaGrouping::new(8, 1, 8).unwrap(), 8);
    for op in [ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max] {
        let mut open = OpenRound::open(1, op, &plan, &replicas(8)).unwrap();
        let refused = collect(&mut open, &plan, 3, share(1, op, &[0; 8]));
        assert!(
            matches!(
                refused,
                Err(RuntimeError::ReductionOp {
                    replica: 3,
                    round: 1,
                    op: o
                }) if o == op
            ),
            "{op:?}: {refused:?}"
        );
        assert_eq!(open.folded, 0, "{op:?}: nothing folded");
    }
}

/// Catches a contribution of a partial element summed as if whole (its last bytes
/// dropped by the kernel's element-wise walk).
#[test]
fn contributions_are_whole_elements() {
    let plan = one(ReplicaGrouping::new(8, 1, 8).unwrap(), 8);
    let mut open = OpenRound::open(0, ReduceOp::Sum, &plan, &replicas(8)).unwrap();
    assert!(matches!(
        collect(&mut open, &plan, 5, share(0, ReduceOp::Sum, &[0; 6])),
        Err(RuntimeError::ReductionElements {
            replica: 5,
            round: 0,
            bytes: 6
        })
    ));
}

/// Catches a round summed in the order its contributions arrived: the device threads
/// race, and 1e30 + 1 − 1e30 is 0 in one order and 1 in another, so two runs of one
/// job could end with different weights.
#[test]
fn a_round_sums_in_replica_order_whatever_the_arrival() {
    let values = [1e30f32, -1e30, 1.0];
    let plan = one(ReplicaGrouping::new(3, 1, 3).unwrap(), 4);
    let sum_arriving = |order: [usize; 3]| {
        let order = order.map(|from| (from, vec![values[from]]));
        each(&arrived(ReduceOp::Sum, &plan, &order), 3)
    };
    let in_order = sum_arriving([0, 1, 2]);
    assert_eq!(in_order, vec![f32s(&[1.0]); 3]);
    for order in [[2, 0, 1], [1, 2, 0], [0, 2, 1]] {
        assert_eq!(sum_arriving(order), in_order, "arrival order {order:?}");
    }
}

/// Catches a fold that waits for the whole round (every message held to its end) or
/// folds out of turn: each contribution is folded, and its buffer given back, as soon
/// as every replica before it is folded.
#[test]
fn a_contribution_is_folded_once_the_replicas_before_it_are() {
    let plan = one(ReplicaGrouping::new(4, 1, 4).unwrap(), 4);
    let mut open = OpenRound::open(0, ReduceOp::Sum, &plan, &replicas(4)).unwrap();
    let one_value = || share(0, ReduceOp::Sum, &f32s(&[1.0]));
    assert!(collect(&mut open, &plan, 2, one_value())
        .unwrap()
        .is_empty());
    assert_eq!(collect(&mut open, &plan, 0, one_value()).unwrap(), [0]);
    assert_eq!(collect(&mut open, &plan, 1, one_value()).unwrap(), [1, 2]);
    assert!(!open.complete());
    assert_eq!(collect(&mut open, &plan, 3, one_value()).unwrap(), [3]);
    assert!(open.complete());
}

/// Catches members folded in the order of their index where their replicas are in
/// another: the sum runs in replica order.
#[test]
fn the_fold_follows_replicas_not_member_indices() {
    let values = [1.0f32, -1e30, 1e30];
    let plan = one(ReplicaGrouping::new(3, 1, 3).unwrap(), 4);
    // Member 0 is replica 2, member 1 replica 1, member 2 replica 0: in replica order
    // 1e30 − 1e30 + 1 = 1 (in member order 1 − 1e30 + 1e30 would be 0).
    let mut open = OpenRound::open(0, ReduceOp::Sum, &plan, &[2, 1, 0]).unwrap();
    for (m, v) in values.iter().enumerate() {
        let heading = Heading {
            round: 0,
            op: ReduceOp::Sum,
            bytes: 4,
        };
        let message = share(0, ReduceOp::Sum, &f32s(&[*v]));
        open.collect(&plan, m, 2 - m, heading, message, |_, _| {})
            .unwrap();
    }
    let answers = open.answers(&plan, &crate::instance::Single).unwrap();
    assert_eq!(each(&answers, 3), vec![f32s(&[1.0]); 3]);
}

/// Catches a device of several lanes folded as one replica, or out of replica order:
/// a device of replicas 0 and 1 and one of 2 and 3 get the answer four devices of one
/// get, each lane's part folded in replica order, whatever device's message comes
/// first (1e30, −1e30, 1, 5 sum to 6 only in that order); a device whose lanes straddle
/// two pairs of a grouping is refused, naming both replicas; a contribution of one
/// lane's length from a device of two is refused.
#[test]
fn a_device_of_lanes_is_folded_lane_by_lane() {
    let plan = one(ReplicaGrouping::new(4, 1, 4).unwrap(), 8);
    let values = [[1e30f32, 1.0], [-1e30, 2.0], [1.0, 3.0], [5.0, 4.0]];
    let each_alone: Vec<_> = values.iter().map(|v| v.to_vec()).enumerate().collect();
    let alone = arrived(ReduceOp::Sum, &plan, &each_alone);
    assert_eq!(alone.of(0), Some(&f32s(&[6.0, 10.0])[..]));
    let mut open = OpenRound::open_lanes(0, ReduceOp::Sum, &plan, &[0..2, 2..4]).unwrap();
    second_device_first(&mut open, &plan, &values);
    assert!(open.complete());
    let laned = open.answers(&plan, &crate::instance::Single).unwrap();
    assert_eq!(each(&laned, 2), each(&alone, 2));
    let pairs = one(ReplicaGrouping::new(4, 1, 2).unwrap(), 8);
    let apart = OpenRound::open_lanes(0, ReduceOp::Sum, &pairs, &[0..1, 1..3, 3..4]);
    assert!(matches!(
        apart,
        Err(RuntimeError::LanesApart {
            first: 1,
            replica: 2,
            round: 0
        })
    ));
    let short = share(0, ReduceOp::Sum, &f32s(&[1.0, 2.0]));
    let mut open = OpenRound::open_lanes(0, ReduceOp::Sum, &plan, &[0..2, 2..4]).unwrap();
    let heading = Heading::of(&short.contribution().unwrap());
    assert!(matches!(
        open.collect(&plan, 0, 0, heading, short, |_, _| {}),
        Err(RuntimeError::ReductionLength {
            expected: 16,
            actual: 8,
            ..
        })
    ));
}

/// Catches a round that starts its sums at +0.0: gradients that are all −0.0 came back
/// +0.0, unlike the same sum in a session allreduce.
#[test]
fn a_sum_of_negative_zeros_stays_negative() {
    let plan = one(ReplicaGrouping::new(2, 1, 2).unwrap(), 4);
    let answers = arrived(ReduceOp::Avg, &plan, &[(0, vec![-0.0]), (1, vec![-0.0])]);
    assert_eq!(each(&answers, 2), vec![f32s(&[-0.0]); 2]);
}

/// Catches answers shared too widely (every member given the first group's sum) or
/// built once per member: groups `[0, 1]` and `[2, 3]` get their own sums, built
/// once each.
#[test]
fn members_share_an_answer_only_within_their_groups() {
    let ones: Vec<_> = (0..4).map(|from| (from, vec![from as f32 + 1.0])).collect();
    let plan = one(ReplicaGrouping::new(4, 1, 2).unwrap(), 4);
    let answers = arrived(ReduceOp::Sum, &plan, &ones);
    let (first, second) = (f32s(&[3.0]), f32s(&[7.0]));
    assert_eq!(
        each(&answers, 4),
        [first.clone(), first, second.clone(), second]
    );
    assert_eq!(answers.distinct.len(), 2, "one answer per group");
}

/// Catches an answer named by one segment's group alone: under pairs `[0, 1]`, `[2, 3]`
/// in one segment and pairs `[0, 2]`, `[1, 3]` in the next, every member's answer
/// differs; under `All` and pairs, two do.
#[test]
fn an_answer_is_named_by_every_segments_group() {
    let twos: Vec<_> = (0..4)
        .map(|from| (from, vec![from as f32 + 1.0, 10.0 * (from as f32 + 1.0)]))
        .collect();
    let all = ReplicaGrouping::new(4, 1, 4).unwrap();
    let pairs = ReplicaGrouping::new(4, 1, 2).unwrap();
    let across = ReplicaGrouping::new(4, 2, 2).unwrap();
    let two = |first, second| Plan {
        segments: vec![(first, 4), (second, 4)],
    };
    let crossing = arrived(ReduceOp::Sum, &two(pairs, across), &twos);
    assert_eq!(
        each(&crossing, 4),
        [[3.0, 40.0], [3.0, 60.0], [7.0, 40.0], [7.0, 60.0]].map(|a| f32s(&a))
    );
    assert_eq!(crossing.distinct.len(), 4);
    let nested = arrived(ReduceOp::Sum, &two(all, pairs), &twos);
    assert_eq!(
        each(&nested, 4),
        [[10.0, 30.0], [10.0, 30.0], [10.0, 70.0], [10.0, 70.0]].map(|a| f32s(&a))
    );
    assert_eq!(nested.distinct.len(), 2);
}

/// Catches a lane's contribution added in one run where its sums do not lie as its
/// parts do: under pairs in the first segment and `All` in the second, the device of
/// replicas 0 and 1 finds its second segment's sums past the other pair's (folded
/// segment by segment), the device of 2 and 3 right after its own (one run a lane);
/// both end on the sums in replica order (−1e30, 0, 1e30, 1 in the second segment make 1
/// only in that order: the run's two lanes the other way round make 0), and where a run
/// is allowed is worked out as said.
#[test]
fn a_lane_runs_into_its_sums_only_where_they_lie_as_its_parts() {
    let pairs = ReplicaGrouping::new(4, 1, 2).unwrap();
    let all = ReplicaGrouping::new(4, 1, 4).unwrap();
    let plan = Plan {
        segments: vec![(pairs, 8), (all, 4)],
    };
    let values = [
        [1.0f32, 2.0, -1e30],
        [3.0, 4.0, 0.0],
        [5.0, 6.0, 1e30],
        [7.0, 8.0, 1.0],
    ];
    let mut open = OpenRound::open_lanes(0, ReduceOp::Sum, &plan, &[0..2, 2..4]).unwrap();
    let runs: Vec<_> = open.members.iter().map(|m| m.run).collect();
    assert_eq!(runs, [None, Some(2)]);
    second_device_first(&mut open, &plan, &values);
    let answers = open.answers(&plan, &crate::instance::Single).unwrap();
    assert_eq!(
        each(&answers, 2),
        [f32s(&[4.0, 6.0, 1.0]), f32s(&[12.0, 14.0, 1.0])]
    );
}

/// Catches a round opened again that keeps anything of its last use: its sums, its
/// members folded, its operation. Opened again for the same members as a round of
/// another operation, a round gives what a new one gives; for other members, or
/// unanswered, it is not opened again.
#[test]
fn a_round_opened_again_starts_over() {
    let plan = one(ReplicaGrouping::new(4, 1, 2).unwrap(), 8);
    let members = [0..2, 2..4];
    let values = |k: f32| -> Vec<Vec<f32>> { vec![vec![k, 1.0, 2.0, k], vec![3.0, -k, 4.0, 5.0]] };
    let run = |mut open: OpenRound, k: f32| {
        // The second device's message first: held until the first's is folded.
        for (m, data) in values(k).iter().enumerate().rev() {
            let message = share(open.round, open.op, &f32s(data));
            let heading = Heading::of(&message.contribution().unwrap());
            open.collect(&plan, m, members[m].start, heading, message, |_, _| {})
                .unwrap();
        }
        let answers = open.answers(&plan, &crate::instance::Single).unwrap();
        (open, each(&answers, 2))
    };
    let first = OpenRound::open_lanes(0, ReduceOp::Sum, &plan, &members).unwrap();
    let (used, _) = run(first, 7.0);
    let fresh = OpenRound::open_lanes(3, ReduceOp::Avg, &plan, &members).unwrap();
    let (_, expected) = run(fresh, 11.0);
    let again = used
        .again(3, ReduceOp::Avg, &members)
        .expect("same members");
    assert_eq!((again.round, again.op), (3, ReduceOp::Avg));
    let (used, answered) = run(again, 11.0);
    assert_eq!(answered, expected);
    assert_eq!(answered[0], f32s(&[6.5, 6.0]), "the pair's mean");
    assert!(used.again(4, ReduceOp::Sum, &[0..1, 1..4]).is_none());
    let unanswered = OpenRound::open_lanes(0, ReduceOp::Sum, &plan, &members).unwrap();
    assert!(unanswered.again(1, ReduceOp::Sum, &members).is_none());
}
