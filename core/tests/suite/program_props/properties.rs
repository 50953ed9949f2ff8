//! The properties: `check` and every query never panic on any program, `check` accepts
//! exactly the programs that follow the rules, and valid programs pass, round-trip and get
//! their schedule.

use super::*;

// ---------------------------------------------------------------------------------------
// Properties.

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// `check`, `reductions`, `held_elements`, `shard_layout`, `settings` and
    /// `output_width` never panic on arbitrary programs and replica counts 0 to 16, and a
    /// program `check` accepts answers every per-variable query. Catches unchecked
    /// indices, unchecked products of dimensions, divisions by a zero group size, and a
    /// `check` that passes programs its queries then refuse.
    #[test]
    fn arbitrary_programs_never_panic(p in any_program(), replicas in 0usize..=16) {
        let reductions = query_everything(&p, replicas);
        if p.check(replicas).is_ok() {
            assert_checked_queries(&p, replicas);
            assert_schedule(&p, replicas, &reductions);
        }
    }

    /// The same on valid programs with one field replaced by an arbitrary one, which reach
    /// the checks of the later layers, the anchors and the optimizer. Programs that still
    /// pass obey the schedule rules.
    #[test]
    fn near_valid_programs_never_panic((p, replicas) in near_valid_program()) {
        let reductions = query_everything(&p, replicas);
        if p.check(replicas).is_ok() {
            assert_checked_queries(&p, replicas);
            assert_schedule(&p, replicas, &reductions);
            prop_assert_eq!(round_trip(&p), p);
        }
    }

    /// `check` accepts exactly the programs that follow the documented rules, on
    /// arbitrary and near-valid programs. Catches a rule `check` forgets (a dropout rate of
    /// 1, labels from the input, a missing width or type check) as well as one it adds.
    #[test]
    fn check_accepts_exactly_the_documented_rules(
        (p, replicas) in prop_oneof![
            (any_program(), 0usize..=16),
            near_valid_program(),
        ]
    ) {
        prop_assert_eq!(
            p.check(replicas).is_ok(),
            follows_rules(&p, replicas),
            "check: {:?}",
            p.check(replicas)
        );
    }

    /// Programs built to follow the rules pass `check` on their replica count, and their
    /// output width is the width the layers chain to. Catches a rule stricter than the
    /// documentation (a grouping form, an explicit layout, an input index, an anchor
    /// refused) and an `output_width` that disagrees with the width `check` follows.
    #[test]
    fn valid_programs_pass(v in valid_program()) {
        prop_assert_eq!(v.program.check(v.replicas), Ok(()));
        assert_checked_queries(&v.program, v.replicas);
        prop_assert_eq!(v.program.output_width(), Some(v.output_width));
    }

    /// A checked program survives postcard (`to_slice` into a stack buffer, `from_bytes`)
    /// as an equal value that still passes. Catches a field skipped by serde, a heapless
    /// capacity the decoder refuses, or an encoding that does not fit the device's buffers.
    #[test]
    fn checked_programs_round_trip_through_postcard(v in valid_program()) {
        prop_assume!(v.program.check(v.replicas).is_ok());
        let back = round_trip(&v.program);
        prop_assert_eq!(back.check(v.replicas), Ok(()));
        prop_assert_eq!(&back, &v.program);
    }

    /// The reductions of a checked program: every round names a variable a layer uses whose
    /// group has several members; gathers come before gradients, each in variable order;
    /// each trained shared variable has exactly one gradient round, and one gather exactly
    /// when it is sharded. Catches rounds for unused or unshared variables, a gather for an
    /// unsharded variable, and a schedule in layer order.
    #[test]
    fn reductions_of_checked_programs(v in valid_program()) {
        prop_assume!(v.program.check(v.replicas).is_ok());
        let reductions: Vec<Reduction> = v.program.reductions(v.replicas).collect();
        assert_schedule(&v.program, v.replicas, &reductions);
    }

    /// A valid program with one variable given a zero dimension, a non-`f32` type, or the
    /// name of a stream is refused naming that variable and that rule; one with zero batches
    /// per step, a momentum of 1, or a second anchor of an anchored tensor is refused with
    /// that rule. Catches rules that only hold for the hand-written programs of the unit
    /// tests, and a `check` that reports the wrong tensor.
    #[test]
    fn breaking_one_rule_names_it(
        v in valid_program(),
        break_rule in 0usize..6,
        at in any::<Index>(),
    ) {
        let (mut p, n) = (v.program, v.replicas);
        let i = at.index(p.variables.len().max(1));
        let expected = match break_rule {
            0..=2 if !p.variables.is_empty() => {
                let rule = match break_rule {
                    0 => {
                        let d = at.index(p.variables[i].shape.len());
                        p.variables[i].shape[d] = 0;
                        ProgramRule::Dimensions
                    }
                    1 => {
                        p.variables[i].dtype = DataType::BF16;
                        ProgramRule::Type { expected: DataType::F32, actual: DataType::BF16 }
                    }
                    _ => {
                        p.variables[i].name = p.streams[0].name.clone();
                        ProgramRule::DuplicateName
                    }
                };
                ProgramError::Variable { name: p.variables[i].name.clone(), rule }
            }
            3 => {
                p.batches_per_step = 0;
                ProgramError::DataFlow(DataFlowError::ZeroBatches)
            }
            4 => {
                p.optimizer = Optimizer::SgdMomentum { learning_rate: 0.1, momentum: 1.0 };
                ProgramError::Optimizer
            }
            _ => {
                let tensor = p.anchors.first().map_or(AnchorTensor::Loss, |a| a.tensor);
                p.anchors.truncate(1);
                let anchor = Anchor { tensor, return_type: AnchorReturnType::All };
                if p.anchors.is_empty() {
                    p.anchors.push(anchor).unwrap();
                }
                p.anchors.push(anchor).unwrap();
                ProgramError::Anchor { tensor, rule: ProgramRule::AnchoredTwice }
            }
        };
        prop_assert_eq!(p.check(n), Err(expected));
    }

    /// A valid program whose second variable-using layer is pointed at the first one's
    /// variable is refused at that layer as `UsedTwice`. Catches weight tying accepted in
    /// arbitrary models (the variable's gradient would be applied twice).
    #[test]
    fn a_variable_used_twice_is_refused(v in valid_program()) {
        let (mut p, n) = (v.program, v.replicas);
        let users: Vec<usize> = p
            .layers
            .iter()
            .enumerate()
            .filter(|(_, l)| matches!(l, Layer::Linear { .. } | Layer::Bias { .. }))
            .map(|(i, _)| i)
            .collect();
        prop_assume!(users.len() >= 2);
        let first = match p.layers[users[0]] {
            Layer::Linear { weight } => weight,
            Layer::Bias { bias } => bias,
            _ => unreachable!(),
        };
        p.layers[users[1]] = match p.layers[users[1]] {
            Layer::Linear { .. } => Layer::Linear { weight: first },
            _ => Layer::Bias { bias: first },
        };
        prop_assert_eq!(
            p.check(n),
            Err(ProgramError::Layer { index: users[1], rule: ProgramRule::UsedTwice })
        );
    }
}
