//! Anchor return types: which of a run's per-micro-batch outputs reach the host.

use core::fmt;

/// Which outputs of a tensor the host receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum AnchorReturnType {
    /// Every micro-batch's output.
    All,
    /// The outputs of every `p`-th batch (batches `p−1, 2p−1, …`).
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
        match self {
            Self::All => AnchorAction::Write,
            Self::EveryN(p) if p > 0 && batch % p == p - 1 => AnchorAction::Write,
            Self::EveryN(_) => AnchorAction::Skip,
            Self::Final if last => AnchorAction::Write,
            Self::Final => AnchorAction::Skip,
            Self::Sum => AnchorAction::Accumulate { emit: last },
        }
    }
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
            Some(p) if is("everyn") => match p.parse::<i64>() {
                Ok(p) if p <= 0 => Err(AnchorError::PeriodNotPositive),
                Ok(p) => usize::try_from(p)
                    .map(Self::EveryN)
                    .map_err(|_| AnchorError::Invalid),
                Err(_) => Err(AnchorError::Invalid),
            },
            _ => Err(AnchorError::Invalid),
        }
    }
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum AnchorError {
    /// Not one of all, final, sum, everyn:P.
    Invalid,
    /// `everyn` without its period.
    MissingPeriod,
    /// A period of zero or less.
    PeriodNotPositive,
    /// A period longer than a step.
    PeriodExceedsBatches {
        /// The period.
        period: usize,
        /// Batches per step.
        batches: usize,
    },
    /// A period that does not divide the batches per step.
    PeriodNotFactor {
        /// The period.
        period: usize,
        /// Batches per step.
        batches: usize,
    },
}

impl fmt::Display for AnchorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Invalid => {
                f.write_str("Invalid anchor return type: expected all, final, sum or everyn:P")
            }
            Self::MissingPeriod => {
                f.write_str("everyn needs a return period: write everyn:P with P > 0")
            }
            Self::PeriodNotPositive => {
                f.write_str("the anchor return period must be greater than zero")
            }
            Self::PeriodExceedsBatches { period, batches } => write!(
                f,
                "the anchor return period ({period}) must be <= to the number of batches \
                 per step ({batches})"
            ),
            Self::PeriodNotFactor { period, batches } => write!(
                f,
                "the anchor return period ({period}) must be a factor of the number of \
                 batches per step ({batches})"
            ),
        }
    }
}

impl core::error::Error for AnchorError {}

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
        for art in [
            AnchorReturnType::All,
            AnchorReturnType::EveryN(3),
            AnchorReturnType::Sum,
        ] {
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
    }
}
