//! Batches per step, gradient accumulation, and the element counts they imply.
//!
//! User arrays are shaped `[bps, accumulation, replicas, sample…]` (leading dimensions of
//! size 1 dropped); broadcast streams have no replica dimension. Outputs are counted per
//! replica per run from their anchor return type.

use super::{AnchorError, AnchorReturnType};

/// A run's shape: batches per step and micro-batches per batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DataFlow {
    batches_per_step: usize,
    accumulation: usize,
}

impl DataFlow {
    /// A data flow of `batches_per_step` batches of `accumulation` micro-batches.
    pub fn new(batches_per_step: usize, accumulation: usize) -> Result<Self, DataFlowError> {
        if batches_per_step == 0 {
            return Err(DataFlowError::ZeroBatches);
        }
        if accumulation == 0 {
            return Err(DataFlowError::ZeroAccumulation);
        }
        batches_per_step
            .checked_mul(accumulation)
            .ok_or(DataFlowError::TooLarge)?;
        Ok(Self {
            batches_per_step,
            accumulation,
        })
    }

    /// Batches per step.
    pub fn batches_per_step(&self) -> usize {
        self.batches_per_step
    }

    /// Micro-batches per batch (1 without gradient accumulation).
    pub fn accumulation(&self) -> usize {
        self.accumulation
    }

    /// Checks an anchor return type against this data flow.
    pub fn check_anchor(&self, anchor: AnchorReturnType) -> Result<(), AnchorError> {
        let batches = self.batches_per_step;
        match anchor {
            AnchorReturnType::EveryN(0) => Err(AnchorError::PeriodNotPositive),
            AnchorReturnType::EveryN(period) if period > batches => {
                Err(AnchorError::PeriodExceedsBatches { period, batches })
            }
            AnchorReturnType::EveryN(period) if !batches.is_multiple_of(period) => {
                Err(AnchorError::PeriodNotFactor { period, batches })
            }
            _ => Ok(()),
        }
    }

    /// Input buffers each replica consumes per run, `bps·af`.
    pub fn inputs_per_replica(&self) -> usize {
        // Cannot overflow: `new` checked `bps·af`.
        self.batches_per_step.saturating_mul(self.accumulation)
    }

    /// The number `m = batch·af + micro` of micro-batch `micro` of batch `batch` within the
    /// step, or `None` if either index is outside this data flow.
    pub fn micro_batch(&self, batch: usize, micro: usize) -> Option<usize> {
        if batch >= self.batches_per_step || micro >= self.accumulation {
            return None;
        }
        batch.checked_mul(self.accumulation)?.checked_add(micro)
    }

    /// Output buffers each replica produces per run for a tensor anchored with `anchor`
    /// (`None`: not an anchor): `bps·af` for `All`, `bps·af / p` for `EveryN(p)` (which
    /// is `(bps / p)·af`, as `p` divides `bps`), 1 for `Final` and `Sum`. An `EveryN`
    /// period [`check_anchor`](Self::check_anchor) rejects counts as no output.
    pub fn outputs_per_replica(&self, anchor: Option<AnchorReturnType>) -> usize {
        match anchor {
            None => 0,
            Some(AnchorReturnType::All) => self.inputs_per_replica(),
            Some(a @ AnchorReturnType::EveryN(p)) if self.check_anchor(a).is_ok() => {
                self.inputs_per_replica().checked_div(p).unwrap_or(0)
            }
            Some(AnchorReturnType::EveryN(_)) => 0,
            Some(AnchorReturnType::Final | AnchorReturnType::Sum) => 1,
        }
    }

    /// Elements of the user's array for a stream (`None` if the count overflows).
    pub fn expected_elements(&self, stream: &StreamSpec<'_>, replicas: usize) -> Option<usize> {
        let replica_factor = match stream.kind {
            StreamKind::Input { broadcast: true } => 1,
            _ => replicas,
        };
        let per_replica = match stream.kind {
            StreamKind::Input { .. } => self.inputs_per_replica(),
            StreamKind::Output(anchor) => self.outputs_per_replica(Some(anchor)),
        };
        stream
            .sample_elements
            .checked_mul(per_replica)?
            .checked_mul(replica_factor)
    }

    /// Checks the element counts the user provides against `streams`: every provided name
    /// must be a stream, every stream must be provided, and every count must match.
    pub fn check_sizes<'a>(
        &self,
        replicas: usize,
        streams: &[StreamSpec<'a>],
        provided: &[(&'a str, usize)],
    ) -> Result<(), SizeError<'a>> {
        for &(name, received) in provided {
            let stream = streams
                .iter()
                .find(|s| s.name == name)
                .ok_or(SizeError::UnknownTensor { tensor: name })?;
            let expected = self.expected_elements(stream, replicas);
            if expected != Some(received) {
                return Err(SizeError::Mismatch {
                    tensor: name,
                    input: matches!(stream.kind, StreamKind::Input { .. }),
                    expected: expected.unwrap_or(usize::MAX),
                    received,
                    sample: stream.sample_elements,
                    per_replica: match stream.kind {
                        StreamKind::Input { .. } => self.inputs_per_replica(),
                        StreamKind::Output(a) => self.outputs_per_replica(Some(a)),
                    },
                    replicas: match stream.kind {
                        StreamKind::Input { broadcast: true } => 1,
                        _ => replicas,
                    },
                });
            }
        }
        if let Some(missing) = streams
            .iter()
            .find(|s| provided.iter().all(|(n, _)| *n != s.name))
        {
            return Err(SizeError::Missing {
                tensor: missing.name,
            });
        }
        Ok(())
    }
}

/// Whether a stream carries inputs or anchored outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum StreamKind {
    /// Host to device; a broadcast stream sends one buffer to all replicas.
    Input {
        /// One buffer shared by every replica.
        broadcast: bool,
    },
    /// Device to host, returned as the anchor type says.
    Output(AnchorReturnType),
}

/// One named stream of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct StreamSpec<'a> {
    /// Tensor name.
    pub name: &'a str,
    /// Elements of one sample (one replica's buffer).
    pub sample_elements: usize,
    /// Input or output.
    pub kind: StreamKind,
}

/// The size check that runs on a session's first run only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SizeCheck {
    passed: bool,
}

impl SizeCheck {
    /// A check that has not run yet.
    pub const fn new() -> Self {
        Self { passed: false }
    }

    /// Runs [`DataFlow::check_sizes`] until it first passes; later calls return `Ok`.
    pub fn run<'a>(
        &mut self,
        flow: &DataFlow,
        replicas: usize,
        streams: &[StreamSpec<'a>],
        provided: &[(&'a str, usize)],
    ) -> Result<(), SizeError<'a>> {
        if !self.passed {
            flow.check_sizes(replicas, streams, provided)?;
            self.passed = true;
        }
        Ok(())
    }
}

/// Why a data flow could not be built.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, thiserror::Error,
)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum DataFlowError {
    /// Zero batches per step.
    #[error("batches per step must be greater than 0")]
    ZeroBatches,
    /// A zero accumulation factor.
    #[error("the accumulation factor must be greater than 0")]
    ZeroAccumulation,
    /// `bps·af` overflows.
    #[error("batches per step × accumulation factor overflows")]
    TooLarge,
}

/// A user's step IO that does not fit the streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum SizeError<'a> {
    /// A provided name that is no stream of the run.
    #[error("Tensor {tensor} is not a stream of this run (no input or anchor has that name)")]
    UnknownTensor {
        /// The name.
        tensor: &'a str,
    },
    /// A stream the user did not provide.
    #[error("no data was provided for stream tensor {tensor}")]
    Missing {
        /// The stream's tensor.
        tensor: &'a str,
    },
    /// A wrong element count.
    #[error(
        "Unexpected number of {direction} elements for Tensor {tensor}. Expected \
         {expected}, but received {received}. (sample {sample} × buffers per \
         replica {per_replica} × replicas {replicas})",
        direction = if *.input { "input" } else { "output" }
    )]
    Mismatch {
        /// The tensor.
        tensor: &'a str,
        /// Input (true) or output (false).
        input: bool,
        /// Elements expected.
        expected: usize,
        /// Elements provided.
        received: usize,
        /// Elements per sample.
        sample: usize,
        /// Buffers per replica per run.
        per_replica: usize,
        /// Replica factor (1 for broadcast streams).
        replicas: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    const X: StreamSpec<'static> = StreamSpec {
        name: "x",
        sample_elements: 4,
        kind: StreamKind::Input { broadcast: false },
    };

    #[test]
    fn output_counts_follow_the_anchor() {
        let flow = DataFlow::new(4, 3).unwrap();
        assert_eq!(flow.outputs_per_replica(None), 0);
        assert_eq!(flow.outputs_per_replica(Some(AnchorReturnType::All)), 12);
        assert_eq!(
            flow.outputs_per_replica(Some(AnchorReturnType::EveryN(2))),
            6
        );
        assert_eq!(flow.outputs_per_replica(Some(AnchorReturnType::Final)), 1);
        assert_eq!(flow.outputs_per_replica(Some(AnchorReturnType::Sum)), 1);
        // PopART's training case: bps 2, af 2, every 2nd micro-batch → 2 buffers.
        let flow = DataFlow::new(2, 2).unwrap();
        assert_eq!(
            flow.outputs_per_replica(Some(AnchorReturnType::EveryN(2))),
            2
        );
    }

    /// Catches an output count for a period the data flow rejects (bps 5, period 3 used to
    /// count `⌊5/3⌋·af` buffers although the doc promised none).
    #[test]
    fn invalid_periods_count_no_output() {
        let flow = DataFlow::new(5, 2).unwrap();
        for p in [0, 3, 6] {
            assert_eq!(
                flow.outputs_per_replica(Some(AnchorReturnType::EveryN(p))),
                0
            );
        }
        assert_eq!(
            flow.outputs_per_replica(Some(AnchorReturnType::EveryN(5))),
            2
        );
    }

    #[test]
    fn micro_batches_are_numbered_across_batches() {
        let flow = DataFlow::new(3, 2).unwrap();
        assert_eq!(flow.micro_batch(0, 0), Some(0));
        assert_eq!(flow.micro_batch(1, 1), Some(3));
        assert_eq!(flow.micro_batch(2, 1), Some(5));
        assert_eq!(flow.micro_batch(3, 0), None);
        assert_eq!(flow.micro_batch(0, 2), None);
        assert_eq!(flow.micro_batch(usize::MAX, usize::MAX), None);
    }

    #[test]
    fn everyn_period_rules() {
        let flow = DataFlow::new(5, 1).unwrap();
        let err = flow.check_anchor(AnchorReturnType::EveryN(6)).unwrap_err();
        assert!(err
            .to_string()
            .contains("<= to the number of batches per step"));
        let err = flow.check_anchor(AnchorReturnType::EveryN(3)).unwrap_err();
        assert!(err
            .to_string()
            .contains("factor of the number of batches per step"));
        assert!(flow.check_anchor(AnchorReturnType::EveryN(5)).is_ok());
        assert_eq!(DataFlow::new(0, 1), Err(DataFlowError::ZeroBatches));
        assert_eq!(DataFlow::new(1, 0), Err(DataFlowError::ZeroAccumulation));
        assert_eq!(DataFlow::new(usize::MAX, 2), Err(DataFlowError::TooLarge));
    }

    #[test]
    fn broadcast_drops_the_replica_factor() {
        let flow = DataFlow::new(2, 3).unwrap();
        assert_eq!(flow.expected_elements(&X, 4), Some(4 * 6 * 4));
        let b = StreamSpec {
            kind: StreamKind::Input { broadcast: true },
            ..X
        };
        assert_eq!(flow.expected_elements(&b, 4), Some(4 * 6));
        let y = StreamSpec {
            name: "y",
            sample_elements: 2,
            kind: StreamKind::Output(AnchorReturnType::Sum),
        };
        assert_eq!(flow.expected_elements(&y, 4), Some(2 * 4));
    }

    #[test]
    fn size_check_names_tensor_counts_and_factors() {
        let flow = DataFlow::new(2, 1).unwrap();
        let err = flow.check_sizes(1, &[X], &[("x", 4)]).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with(
                "Unexpected number of input elements for Tensor x. Expected 8, but received 4."
            ),
            "{text}"
        );
        assert!(
            text.contains("sample 4") && text.contains("replicas 1"),
            "{text}"
        );
        assert_eq!(
            flow.check_sizes(1, &[X], &[("z", 8)]),
            Err(SizeError::UnknownTensor { tensor: "z" })
        );
        assert_eq!(
            flow.check_sizes(1, &[X], &[]),
            Err(SizeError::Missing { tensor: "x" })
        );
        assert_eq!(flow.check_sizes(1, &[X], &[("x", 8)]), Ok(()));
    }

    #[test]
    fn size_check_runs_until_it_first_passes() {
        let flow = DataFlow::new(2, 1).unwrap();
        let mut check = SizeCheck::new();
        assert!(check.run(&flow, 1, &[X], &[("x", 4)]).is_err());
        assert!(check.run(&flow, 1, &[X], &[("x", 8)]).is_ok());
        // After the first good run, later runs are not checked again.
        assert!(check.run(&flow, 1, &[X], &[("x", 4)]).is_ok());
    }
}
