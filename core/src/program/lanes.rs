//! Lanes: one device running several consecutive replicas in one walk of the step.
//!
//! A device may serve replicas `first .. first + lanes` — its *lanes*, lane `l` being
//! replica `first + l` — when they may share one walk of the step: **for every variable,
//! all of them lie in one group of its grouping.** Then their weights are equal bit for
//! bit before every step (the host loads one value per group) and after every update
//! (every member of a group applies the group's one combination), so:
//!
//! - one whole value of each variable serves every lane's rows, and one pass of the layers
//!   computes every lane's micro-batches as rows of one matrix (each row still alone and in
//!   order, so each lane's rows give the bits they give on a device of their own);
//! - what differs per replica stays per lane: its stream items and anchors, its generator,
//!   its gradient sums (each lane's rows added in order into its own), and for a sharded
//!   variable its shard;
//! - a contribution carries every lane's part side by side, in lane order (= replica
//!   order), and the one combination of the lanes' groups answers them all.
//!
//! Each lane's objects on the device have ids of their own: lane `l`'s copy of id `i`
//! (a variable, a velocity, a slot, a FIFO, as [`ids`](super::ids) numbers them for one
//! replica) is [`in_lane`]`(l, i)`. Lane 0's ids are the one-replica ids, so a device of
//! one lane is addressed as before.
//!
//! A contribution is `lanes` times an exchange's bytes, so a device of `lanes` lanes and its
//! host cut a batch's rounds into exchanges for `max_bytes / lanes` ([`lane_bytes`]).
//!
//! # Panics
//!
//! Nothing here panics.

use super::{Program, ProgramError, ProgramRule};

/// Most lanes a device can run (the most replicas a run has): their ids fit 16 bits.
pub const MAX_LANES: usize = 64;

/// Ids each lane has: every per-replica id of [`ids`](super::ids) is below this.
pub const LANE_IDS: u16 = 0x200;

// The last lane's last id fits a `u16`.
const _: () = assert!(MAX_LANES * (LANE_IDS as usize) <= u16::MAX as usize + 1);

/// Lane `lane`'s copy of per-replica id `id`; `None` past the lanes or the lane's ids.
pub const fn in_lane(lane: usize, id: u16) -> Option<u16> {
    if lane >= MAX_LANES || id >= LANE_IDS {
        return None;
    }
    Some(lane as u16 * LANE_IDS + id)
}

/// The payload an exchange may carry when a contribution holds `lanes` of them side by
/// side in `max_bytes`.
pub const fn lane_bytes(max_bytes: usize, lanes: usize) -> usize {
    if lanes == 0 {
        return 0;
    }
    max_bytes / lanes
}

/// Why replicas cannot share a walk.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum LaneError {
    /// No lanes, or more than [`MAX_LANES`].
    #[error("{lanes} lanes: a device runs 1 to {MAX_LANES} replicas in one walk")]
    Count {
        /// The lanes asked for.
        lanes: usize,
    },
    /// The lanes run past the run's replicas.
    #[error(
        "lanes of replicas {first}..{end} run past the run's {replicas} replicas",
        end = .first.saturating_add(*.lanes)
    )]
    Replicas {
        /// The first lane's replica.
        first: usize,
        /// The lanes.
        lanes: usize,
        /// The run's replicas.
        replicas: usize,
    },
    /// Replica `replica` is not in replica `first`'s group of variable `variable`.
    #[error(
        "replicas {first} and {replica} cannot share a walk: variable {variable} \
         puts them in different groups (lanes of one device must share every \
         variable's group)"
    )]
    Apart {
        /// The variable's index.
        variable: usize,
        /// The first lane's replica.
        first: usize,
        /// The replica in another group.
        replica: usize,
    },
    /// The program does not resolve on the run's replicas.
    #[error("{0}")]
    Program(ProgramError),
}

impl Program {
    /// Checks that replicas `first .. first + lanes` of a run on `replicas` replicas may
    /// share one walk (the module's rule).
    pub fn check_lanes(
        &self,
        replicas: usize,
        first: usize,
        lanes: usize,
    ) -> Result<(), LaneError> {
        if lanes == 0 || lanes > MAX_LANES {
            return Err(LaneError::Count { lanes });
        }
        let end = first.checked_add(lanes).filter(|&e| e <= replicas);
        let Some(end) = end else {
            return Err(LaneError::Replicas {
                first,
                lanes,
                replicas,
            });
        };
        for variable in 0..self.variables.len() {
            let settings = self
                .settings(variable, replicas)
                .map_err(LaneError::Program)?;
            let grouping = settings.grouping();
            // Within the run once the range is checked: reported, never a panic.
            let group = |r: usize| {
                grouping.group_of(r).map_err(|e| {
                    let rule = ProgramRule::Grouping(e);
                    match self.variables.get(variable) {
                        Some(v) => LaneError::Program(ProgramError::variable(v, rule)),
                        None => {
                            LaneError::Program(ProgramError::NoSuchVariable { index: variable })
                        }
                    }
                })
            };
            let home = group(first)?;
            for replica in first + 1..end {
                if group(replica)? != home {
                    return Err(LaneError::Apart {
                        variable,
                        first,
                        replica,
                    });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DataType;
    use crate::grouping::{CommGroup, GroupingSpec, RetrievalMode};
    use crate::program::{Layer, Optimizer, Sharding};

    /// A two-variable program: the first over `first`, the second over `second`.
    fn program(first: CommGroup, second: CommGroup) -> Program {
        let mut p = Program::new(1, 2, Optimizer::Sgd { learning_rate: 0.1 });
        let mode = RetrievalMode::OnePerGroup;
        let w = (p.add_variable(
            "w",
            &[4, 2],
            GroupingSpec::Comm(first),
            mode,
            Sharding::Balanced,
        ))
        .unwrap();
        let v = (p.add_variable(
            "v",
            &[3, 4],
            GroupingSpec::Comm(second),
            mode,
            Sharding::None,
        ))
        .unwrap();
        p.input = p.add_stream("x", DataType::F32, &[2], false).unwrap();
        let labels = p.add_stream("y", DataType::I32, &[1], false).unwrap();
        p.add_layer(Layer::Linear { weight: w }).unwrap();
        p.add_layer(Layer::Linear { weight: v }).unwrap();
        p.add_layer(Layer::SoftmaxCrossEntropy { labels }).unwrap();
        p
    }

    /// Catches lanes that straddle two groups of one variable: their weights would part
    /// at the first update, yet the device keeps one copy.
    #[test]
    fn lanes_share_every_variables_group() {
        let p = program(CommGroup::All, CommGroup::Consecutive(2));
        assert_eq!(p.check_lanes(4, 0, 2), Ok(()));
        assert_eq!(p.check_lanes(4, 2, 2), Ok(()));
        assert_eq!(
            p.check_lanes(4, 1, 2),
            Err(LaneError::Apart {
                variable: 1,
                first: 1,
                replica: 2
            })
        );
        assert!(matches!(
            p.check_lanes(4, 0, 4),
            Err(LaneError::Apart { .. })
        ));
        let orthogonal = program(CommGroup::All, CommGroup::Orthogonal(2));
        assert!(
            orthogonal.check_lanes(4, 0, 2).is_err(),
            "replicas 0 and 1 in two groups"
        );
    }

    /// Catches a count or a range no device could run: no lanes, too many, or past the
    /// run's replicas.
    #[test]
    fn lanes_stay_within_the_run() {
        let p = program(CommGroup::All, CommGroup::All);
        assert_eq!(p.check_lanes(4, 0, 0), Err(LaneError::Count { lanes: 0 }));
        assert_eq!(
            p.check_lanes(128, 0, 65),
            Err(LaneError::Count { lanes: 65 })
        );
        assert!(matches!(
            p.check_lanes(4, 3, 2),
            Err(LaneError::Replicas { .. })
        ));
        assert!(matches!(
            p.check_lanes(4, usize::MAX, 2),
            Err(LaneError::Replicas { .. })
        ));
        assert_eq!(p.check_lanes(1, 0, 1), Ok(()));
    }

    /// Catches ids of two lanes that meet: each lane's ids are its own, lane 0's are the
    /// one-replica ids, and none past the space is handed out.
    #[test]
    fn lane_ids_are_apart() {
        assert_eq!(in_lane(0, 7), Some(7));
        assert_eq!(in_lane(1, 7), Some(LANE_IDS + 7));
        assert_eq!(in_lane(MAX_LANES - 1, LANE_IDS - 1), Some(0x7fff));
        assert_eq!(in_lane(MAX_LANES, 0), None);
        assert_eq!(in_lane(0, LANE_IDS), None);
        assert_eq!(lane_bytes(100, 3), 33);
        assert_eq!(lane_bytes(100, 0), 0);
    }
}
