//! Weights sent to the replicas and fetched back reproduce the host buffer, for every shard
//! layout, grouping, retrieval mode and instance split, following the rules in core's
//! `transfer` module docs.
//!
//! Each instance runs `to_replicas` and `to_host` on its own window; the instances' host
//! buffers are then combined the way the returned collective says (allgather of window rows,
//! or a sum, done bytewise: exactly one instance contributes each non-zero byte).

use proptest::prelude::*;
use tessera_core::grouping::{GroupingSpec, RetrievalMode, VariableSettings};
use tessera_core::shard::{Interval, ShardLayout};
use tessera_core::transfer::{Collective, InstanceWindow, WeightLayout};

/// Everything one round trip depends on.
#[derive(Debug, Clone)]
struct Case {
    stride: usize,
    group_size: usize,
    blocks: usize,
    retrieval: RetrievalMode,
    elements: usize,
    element_size: usize,
    shard: ShardChoice,
    instances_pick: usize,
    seed: u64,
}

#[derive(Debug, Clone, Copy)]
enum ShardChoice {
    None,
    Balanced(usize),
    PaddedTail(usize),
    /// Domain pick and extra padding per shard.
    Explicit(usize, usize),
}

fn case() -> impl Strategy<Value = Case> {
    (
        (1usize..=4, 1usize..=4, 1usize..=3),
        prop_oneof![
            Just(RetrievalMode::OnePerGroup),
            Just(RetrievalMode::AllReplicas)
        ],
        (
            0usize..=40,
            prop_oneof![Just(1usize), Just(2), Just(4), Just(3)],
        ),
        prop_oneof![
            Just(ShardChoice::None),
            (0usize..8).prop_map(ShardChoice::Balanced),
            (0usize..8).prop_map(ShardChoice::PaddedTail),
            (0usize..8, 0usize..3).prop_map(|(d, extra)| ShardChoice::Explicit(d, extra)),
        ],
        0usize..8,
        any::<u64>(),
    )
        .prop_map(
            |(
                (stride, group_size, blocks),
                retrieval,
                (elements, element_size),
                shard,
                instances_pick,
                seed,
            )| Case {
                stride,
                group_size,
                blocks,
                retrieval,
                elements,
                element_size,
                shard,
                instances_pick,
                seed,
            },
        )
}

/// A small deterministic generator for shuffles and buffer contents.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i + 1));
        }
    }
}

fn divisors(n: usize) -> Vec<usize> {
    (1..=n).filter(|&d| n.is_multiple_of(d)).collect()
}

/// A random valid explicit layout: `elements` positions scattered over the gathered
/// buffer, cut into runs, the runs listed in a random order.
fn explicit_intervals(
    elements: usize,
    domain: usize,
    per_replica: usize,
    rng: &mut SplitMix,
) -> Vec<Interval> {
    let mut positions: Vec<usize> = (0..domain * per_replica).collect();
    rng.shuffle(&mut positions);
    positions.truncate(elements);
    positions.sort_unstable();
    let mut runs: Vec<Interval> = Vec::new();
    for p in positions {
        match runs.last_mut() {
            // Sometimes split a run in two, so that pieces also meet inside a shard.
            Some(run) if run.end == p && rng.below(4) != 0 => run.end += 1,
            _ => runs.push(Interval {
                begin: p,
                end: p + 1,
            }),
        }
    }
    rng.shuffle(&mut runs);
    runs
}

fn run(case: &Case) -> Result<(), TestCaseError> {
    let replicas = case.stride * case.group_size * case.blocks;
    let spec = GroupingSpec::Strided {
        stride: case.stride,
        group_size: case.group_size,
    };
    let settings = VariableSettings::new(spec, case.retrieval, replicas).unwrap();
    let grouping = *settings.grouping();
    let mut rng = SplitMix(case.seed);
    let domains = divisors(case.group_size);
    let pick = |d: usize| domains[d % domains.len()];
    let (n, es) = (case.elements, case.element_size);

    let intervals;
    let shard = match case.shard {
        ShardChoice::None => None,
        ShardChoice::Balanced(d) => Some(ShardLayout::balanced(n, pick(d)).unwrap()),
        ShardChoice::PaddedTail(d) => Some(ShardLayout::padded_tail(n, pick(d)).unwrap()),
        ShardChoice::Explicit(d, extra) => {
            let domain = pick(d);
            let per_replica = n.div_ceil(domain) + extra;
            intervals = explicit_intervals(n, domain, per_replica, &mut rng);
            Some(ShardLayout::explicit(n, domain, per_replica, &intervals).unwrap())
        }
    };

    let instance_counts = divisors(replicas);
    let instances = instance_counts[case.instances_pick % instance_counts.len()];
    let row_bytes = n * es;
    let groups = settings.group_count();
    let host: Vec<u8> = (0..groups * row_bytes)
        .map(|_| (rng.next() % 255 + 1) as u8)
        .collect();

    let returning = settings.returning();
    let mut combined = vec![0u8; returning * row_bytes];
    for index in 0..instances {
        let window = InstanceWindow::split(replicas, instances, index).unwrap();
        let layout = WeightLayout::new(settings, n, es, shard, window).unwrap();
        let mut slots = vec![vec![0xAAu8; layout.slot_bytes()]; window.local];
        layout.to_replicas(&host, &mut slots[..]).unwrap();

        // Every slot holds exactly its pieces and zeros in its padding.
        for (local, slot) in slots.iter().enumerate() {
            let placement = layout.placement(local).unwrap();
            let row = &host[placement.row * row_bytes..][..row_bytes];
            match (shard, placement.shard) {
                (Some(layout), Some(m)) => {
                    for p in layout.pieces(m).unwrap() {
                        prop_assert_eq!(
                            &slot[p.dst_offset * es..][..p.len() * es],
                            &row[p.src_begin * es..p.src_end * es]
                        );
                    }
                    for gap in layout.padding(m).unwrap() {
                        prop_assert!(
                            slot[gap.begin * es..gap.end * es].iter().all(|&b| b == 0),
                            "padding not zero"
                        );
                    }
                }
                _ => prop_assert_eq!(&slot[..], row),
            }
        }

        let mut back = vec![0xEEu8; layout.to_host_bytes()];
        let collective = layout.to_host(&mut slots[..], &mut back).unwrap();
        prop_assert_eq!(collective, layout.collective());
        match collective {
            Collective::None => {
                prop_assert_eq!(instances, 1);
                combined.copy_from_slice(&back);
            }
            Collective::Allgather => {
                let rows = window.offset * row_bytes..(window.offset + window.local) * row_bytes;
                combined[rows.clone()].copy_from_slice(&back[rows]);
            }
            Collective::SumAllreduce => {
                for (acc, byte) in combined.iter_mut().zip(&back) {
                    *acc = acc.wrapping_add(*byte);
                }
            }
        }
    }

    let expected: Vec<u8> = match case.retrieval {
        RetrievalMode::OnePerGroup => host.clone(),
        RetrievalMode::AllReplicas => (0..replicas)
            .flat_map(|r| host[grouping.group_of(r).unwrap() * row_bytes..][..row_bytes].to_vec())
            .collect(),
    };
    prop_assert_eq!(&combined, &expected);

    if case.retrieval == RetrievalMode::AllReplicas {
        let layout =
            WeightLayout::new(settings, n, es, shard, InstanceWindow::whole(replicas)).unwrap();
        let mut down = vec![0u8; host.len()];
        layout.downsample(&combined, &mut down).unwrap();
        prop_assert_eq!(down, host);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn weights_round_trip_through_the_replicas(case in case()) {
        run(&case)?;
    }
}

/// The grouping (8, 2, 4) of the example in `ReplicaGrouping`'s docs (two interleaved
/// groups of four), across two instances, every layout.
#[test]
fn orthogonal_groups_split_across_instances() {
    for shard in [
        ShardChoice::None,
        ShardChoice::Balanced(1),
        ShardChoice::PaddedTail(2),
        ShardChoice::Explicit(2, 1),
    ] {
        for retrieval in [RetrievalMode::OnePerGroup, RetrievalMode::AllReplicas] {
            let case = Case {
                stride: 2,
                group_size: 4,
                blocks: 1,
                retrieval,
                elements: 30,
                element_size: 4,
                shard,
                instances_pick: 1,
                seed: 7,
            };
            run(&case).unwrap();
        }
    }
}
