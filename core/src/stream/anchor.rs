//! Anchor return types: which of a step's per-micro-batch outputs reach the host.
//!
//! A step runs `bps` batches of `af` micro-batches each (see [`DataFlow`]). Number its
//! micro-batches `m = batch·af + micro`, from 0 to `bps·af − 1`. Then, per replica:
//!
//! - [`All`](AnchorReturnType::All) returns every micro-batch's output, `m` into output
//!   buffer `m` (`bps·af` buffers);
//! - [`EveryN(p)`](AnchorReturnType::EveryN) returns micro-batches `m` with
//!   `m % p == p − 1` (that is `p − 1, 2p − 1, …`), `m` into buffer `m / p`
//!   (`bps·af / p` buffers). Without accumulation this is every `p`-th batch; with it, the
//!   count still runs over micro-batches: bps 2, af 2, `EveryN(2)` returns micro-batches 1
//!   and 3 (micro-batch 1 of each batch), as PopART's training tests expect. The period
//!   must divide `bps` ([`DataFlow::check_anchor`]); an invalid one returns nothing;
//! - [`Final`](AnchorReturnType::Final) returns the last micro-batch's output, into buffer 0;
//! - [`Sum`](AnchorReturnType::Sum) adds every micro-batch's output and returns the sum
//!   once, after the last micro-batch, into buffer 0.
//!
//! [`AnchorReturnType::output_index`] answers "which buffer, if any" for one micro-batch;
//! [`AnchorReturnType::action`] tells the device loop what to do with it. Neither panics,
//! whatever the arguments.

use core::fmt;

use super::DataFlow;

/// Which outputs of a tensor the host receives. See the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum AnchorReturnType {
    /// Every micro-batch's output.
    All,
    /// The output of every `p`-th micro-batch of the step, counted across batches:
    /// micro-batches `p−1, 2p−1, …` where micro-batch `m = batch·af + micro`.
    EveryN(usize),
    /// Only the last micro-batch's output.
    Final,
    /// The sum over all micro-batches, once.
    Sum,
}

/// What the device does with one micro-batch's output of an anchored tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum AnchorAction {
    /// Nothing: this micro-batch's output is not returned.
    Skip,
    /// Write the output to the anchor stream.
    Write,
    /// Add the output to the running sum (`emit`: and write the sum, this is the last one).
    Accumulate {
        /// True on the run's last micro-batch.
        emit: bool,
    },
}

impl AnchorReturnType {
    /// What to do with the output of micro-batch `micro` of batch `batch`, in a run of
    /// `batches` batches of `accumulation` micro-batches.
    ///
    /// `EveryN(p)` writes micro-batch `m = batch·accumulation + micro` when
    /// `m % p == p − 1`; a zero period never writes. The period is not checked against
    /// `batches` here: [`DataFlow::check_anchor`] does that when the run is set up.
    pub fn action(
        self,
        batch: usize,
        micro: usize,
        batches: usize,
        accumulation: usize,
    ) -> AnchorAction {
        // Written without `+ 1` so that no argument can overflow.
        let last =
            batches.checked_sub(1) == Some(batch) && accumulation.checked_sub(1) == Some(micro);
        // An `m` past `usize::MAX` is past the end of every valid step (`bps·af` fits).
        let m = batch
            .checked_mul(accumulation)
            .and_then(|b| b.checked_add(micro));
        match self {
            Self::All => AnchorAction::Write,
            Self::EveryN(p) if m.is_some_and(|m| ends_period(m, p)) => AnchorAction::Write,
            Self::EveryN(_) => AnchorAction::Skip,
            Self::Final if last => AnchorAction::Write,
            Self::Final => AnchorAction::Skip,
            Self::Sum => AnchorAction::Accumulate { emit: last },
        }
    }

    /// The output buffer (0-based, per replica per run) that micro-batch `micro` of batch
    /// `batch` is returned in, or `None` if its output is not returned on its own: not at
    /// all, or (`Sum`) only as part of the sum written after the last micro-batch.
    ///
    /// Over a whole step the indices returned are `0, 1, …` up to
    /// [`DataFlow::outputs_per_replica`], each exactly once, in micro-batch order. `None`
    /// also for a batch or micro-batch outside `flow`, and for an `EveryN` period `flow`
    /// rejects.
    pub fn output_index(self, batch: usize, micro: usize, flow: &DataFlow) -> Option<usize> {
        let m = flow.micro_batch(batch, micro)?;
        let last = flow.inputs_per_replica().checked_sub(1)?;
        match self {
            Self::All => Some(m),
            Self::EveryN(p) if flow.check_anchor(self).is_ok() && ends_period(m, p) => {
                m.checked_div(p)
            }
            Self::EveryN(_) => None,
            Self::Final | Self::Sum => (m == last).then_some(0),
        }
    }
}

/// Whether micro-batch `m` is the last of a period of `p` (`m % p == p − 1`); never for
/// `p == 0`.
fn ends_period(m: usize, p: usize) -> bool {
    // `r < p`, so `r + 1` cannot overflow.
    m.checked_rem(p).is_some_and(|r| r + 1 == p)
}

/// The text form: `all`, `final`, `sum`, `everyn:P` (case-insensitive).
impl core::str::FromStr for AnchorReturnType {
    type Err = AnchorError;

    fn from_str(text: &str) -> Result<Self, AnchorError> {
        let (kind, period) = match text.split_once(':') {
            Some((kind, period)) => (kind, Some(period)),
            None => (text, None),
        };
        let is = |name: &str| kind.eq_ignore_ascii_case(name);
        match period {
            None if is("all") => Ok(Self::All),
            None if is("final") => Ok(Self::Final),
            None if is("sum") => Ok(Self::Sum),
            None if is("everyn") => Err(AnchorError::MissingPeriod),
            Some(p) if is("everyn") => match p.parse::<usize>() {
                Ok(0) => Err(AnchorError::PeriodNotPositive),
                Ok(p) => Ok(Self::EveryN(p)),
                // A negative whole number, however long, is a period below zero.
                Err(_) if is_negative_integer(p) => Err(AnchorError::PeriodNotPositive),
                Err(_) => Err(AnchorError::Invalid),
            },
            _ => Err(AnchorError::Invalid),
        }
    }
}

/// `-` followed by one or more decimal digits.
fn is_negative_integer(text: &str) -> bool {
    text.strip_prefix('-')
        .is_some_and(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
}

impl fmt::Display for AnchorReturnType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::All => f.write_str("all"),
            Self::EveryN(p) => write!(f, "everyn:{p}"),
            Self::Final => f.write_str("final"),
            Self::Sum => f.write_str("sum"),
        }
    }
}

/// Why an anchor return type was rejected.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, thiserror::Error,
)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum AnchorError {
    /// Not one of all, final, sum, everyn:P.
    #[error("Invalid anchor return type: expected all, final, sum or everyn:P")]
    Invalid,
    /// `everyn` without its period.
    #[error("everyn needs a return period: write everyn:P with P > 0")]
    MissingPeriod,
    /// A period of zero or less.
    #[error("the anchor return period must be greater than zero")]
    PeriodNotPositive,
    /// A period longer than a step.
    #[error(
        "the anchor return period ({period}) must be <= to the number of batches \
         per step ({batches})"
    )]
    PeriodExceedsBatches {
        /// The period.
        period: usize,
        /// Batches per step.
        batches: usize,
    },
    /// A period that does not divide the batches per step.
    #[error(
        "the anchor return period ({period}) must be a factor of the number of \
         batches per step ({batches})"
    )]
    PeriodNotFactor {
        /// The period.
        period: usize,
        /// Batches per step.
        batches: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn parses_every_form() {
        assert_eq!("ALL".parse(), Ok(AnchorReturnType::All));
        assert_eq!("everyn:4".parse(), Ok(AnchorReturnType::EveryN(4)));
        assert_eq!(
            "everyn".parse::<AnchorReturnType>(),
            Err(AnchorError::MissingPeriod)
        );
        assert_eq!(
            "everyn:-1".parse::<AnchorReturnType>(),
            Err(AnchorError::PeriodNotPositive)
        );
        assert_eq!(
            "everyn:0".parse::<AnchorReturnType>(),
            Err(AnchorError::PeriodNotPositive)
        );
        assert_eq!(
            "all:2".parse::<AnchorReturnType>(),
            Err(AnchorError::Invalid)
        );
        assert_eq!(
            "everyn:-99999999999999999999999".parse::<AnchorReturnType>(),
            Err(AnchorError::PeriodNotPositive)
        );
        assert_eq!(
            "everyn:-".parse::<AnchorReturnType>(),
            Err(AnchorError::Invalid)
        );
        for art in [
            AnchorReturnType::All,
            AnchorReturnType::EveryN(3),
            AnchorReturnType::Sum,
        ] {
            assert_eq!(art.to_string().parse(), Ok(art));
        }
    }

    /// Catches a parser that read the period as `i64`: `everyn:P` for a period above
    /// `i64::MAX` (which `Display` writes) was rejected as invalid, so the text form did
    /// not round-trip.
    #[test]
    fn every_period_round_trips() {
        for p in [1, i64::MAX as usize, i64::MAX as usize + 1, usize::MAX] {
            let art = AnchorReturnType::EveryN(p);
            assert_eq!(art.to_string().parse(), Ok(art));
        }
    }

    #[test]
    fn actions_follow_the_return_type() {
        use AnchorAction::*;
        let every2 = AnchorReturnType::EveryN(2);
        assert_eq!(every2.action(0, 0, 4, 1), Skip);
        assert_eq!(every2.action(1, 0, 4, 1), Write);
        assert_eq!(AnchorReturnType::Final.action(3, 0, 4, 2), Skip);
        assert_eq!(AnchorReturnType::Final.action(3, 1, 4, 2), Write);
        assert_eq!(
            AnchorReturnType::Sum.action(0, 0, 4, 1),
            Accumulate { emit: false }
        );
        assert_eq!(
            AnchorReturnType::Sum.action(3, 0, 4, 1),
            Accumulate { emit: true }
        );
        // A zero period (rejected by DataFlow) still answers without dividing by zero.
        assert_eq!(AnchorReturnType::EveryN(0).action(1, 0, 4, 1), Skip);
        // Micro-batch numbers past `usize::MAX` skip instead of overflowing.
        assert_eq!(
            AnchorReturnType::EveryN(2).action(usize::MAX, 1, 4, 2),
            Skip
        );
    }

    /// PopART's training case (bps 2, af 2, `EveryN(2)`): micro-batches are numbered
    /// across batches, so micro-batch 1 of each batch (m = 1, 3) is written. Catches an
    /// `EveryN` that tests the batch index, which writes both micro-batches of batch 1.
    #[test]
    fn everyn_counts_micro_batches_under_accumulation() {
        use AnchorAction::*;
        let every2 = AnchorReturnType::EveryN(2);
        let flow = DataFlow::new(2, 2).unwrap();
        let written: std::vec::Vec<(usize, usize)> = (0..2)
            .flat_map(|b| (0..2).map(move |m| (b, m)))
            .filter(|&(b, m)| every2.action(b, m, 2, 2) == Write)
            .collect();
        assert_eq!(written, [(0, 1), (1, 1)]);
        assert_eq!(every2.output_index(0, 0, &flow), None);
        assert_eq!(every2.output_index(0, 1, &flow), Some(0));
        assert_eq!(every2.output_index(1, 0, &flow), None);
        assert_eq!(every2.output_index(1, 1, &flow), Some(1));
        // Period 4 over bps 4, af 3: m = 3, 7, 11 (batch 1 micro 0, batch 2 micro 1,
        // batch 3 micro 2).
        let every4 = AnchorReturnType::EveryN(4);
        let flow = DataFlow::new(4, 3).unwrap();
        let returned: std::vec::Vec<(usize, usize, usize)> = (0..4)
            .flat_map(|b| (0..3).map(move |m| (b, m)))
            .filter_map(|(b, m)| every4.output_index(b, m, &flow).map(|k| (b, m, k)))
            .collect();
        assert_eq!(returned, [(1, 0, 0), (2, 1, 1), (3, 2, 2)]);
    }

    /// Every valid (data flow, anchor) returns output buffers `0..outputs_per_replica` each
    /// once, in micro-batch order, exactly where `action` writes. Catches an output count
    /// that disagrees with the micro-batches actually returned (the device would write
    /// past the anchor's buffers or leave some unwritten).
    #[test]
    fn output_indices_cover_the_output_count() {
        for bps in 1..=6 {
            for af in 1..=4 {
                let flow = DataFlow::new(bps, af).unwrap();
                let mut anchors = std::vec![
                    AnchorReturnType::All,
                    AnchorReturnType::Final,
                    AnchorReturnType::Sum
                ];
                anchors.extend((1..=bps).map(AnchorReturnType::EveryN));
                for anchor in anchors {
                    let valid = flow.check_anchor(anchor).is_ok();
                    let mut indices = std::vec::Vec::new();
                    for b in 0..bps {
                        for m in 0..af {
                            let index = anchor.output_index(b, m, &flow);
                            let action = anchor.action(b, m, bps, af);
                            let writes = match action {
                                AnchorAction::Skip => false,
                                AnchorAction::Write => true,
                                AnchorAction::Accumulate { emit } => emit,
                            };
                            if valid {
                                assert_eq!(index.is_some(), writes, "{anchor} {bps}x{af}");
                            }
                            indices.extend(index);
                        }
                    }
                    let count = flow.outputs_per_replica(Some(anchor));
                    let expected: std::vec::Vec<usize> = (0..count).collect();
                    assert_eq!(indices, expected, "{anchor} bps {bps} af {af}");
                }
            }
        }
        // Outside the flow: no buffer.
        let flow = DataFlow::new(2, 2).unwrap();
        assert_eq!(AnchorReturnType::All.output_index(2, 0, &flow), None);
        assert_eq!(AnchorReturnType::All.output_index(0, 2, &flow), None);
        assert_eq!(AnchorReturnType::EveryN(0).output_index(0, 0, &flow), None);
    }
}
