//! Shared helpers for the end-to-end suites in `tests/`.
#![deny(missing_docs)]

use std::collections::{BTreeMap, VecDeque};
use std::fmt;

use tessera_core::stream::UpstreamIo;

/// What the upstream saw of one tensor.
#[derive(Debug, Default, Clone)]
pub struct TensorLog {
    /// Next buffer id to hand out; ids count up from 0 per tensor and direction.
    pub next: usize,
    /// The prefetch flag of every `input` call, including those that returned nothing.
    pub input_calls: Vec<bool>,
    /// Handed out and not yet released, oldest first.
    pub unreleased: VecDeque<usize>,
    /// Ids released, in release order.
    pub released: Vec<usize>,
}

/// An upstream IO handing out sequential buffer ids (`usize`) per tensor, recording every
/// call. With `limit` set, prefetching calls find nothing once `limit` buffers were handed
/// out, and ordinary calls get nothing too (which the splitter must report).
#[derive(Debug, Default, Clone)]
pub struct RecordingIo {
    /// Input side, per tensor index.
    pub inputs: BTreeMap<usize, TensorLog>,
    /// Output side, per tensor index.
    pub outputs: BTreeMap<usize, TensorLog>,
    /// Buffers available per tensor and direction (`None`: unlimited).
    pub limit: Option<usize>,
    /// Make the next call fail.
    pub fail_next: bool,
}

/// The recorder's failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordingError {
    /// A release with nothing handed out.
    NothingToRelease,
    /// Failure injected through `fail_next`.
    Injected,
}

impl fmt::Display for RecordingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NothingToRelease => "nothing to release",
            Self::Injected => "injected failure",
        })
    }
}

impl RecordingIo {
    fn injected(&mut self) -> Result<(), RecordingError> {
        if std::mem::take(&mut self.fail_next) {
            Err(RecordingError::Injected)
        } else {
            Ok(())
        }
    }

    fn hand_out(log: &mut TensorLog, limit: Option<usize>) -> Option<usize> {
        if limit.is_some_and(|l| log.next >= l) {
            return None;
        }
        let id = log.next;
        log.next += 1;
        log.unreleased.push_back(id);
        Some(id)
    }

    fn release(log: &mut TensorLog) -> Result<(), RecordingError> {
        let id = log
            .unreleased
            .pop_front()
            .ok_or(RecordingError::NothingToRelease)?;
        log.released.push(id);
        Ok(())
    }

    /// The input log of `tensor` (empty if it was never used).
    pub fn input_log(&self, tensor: usize) -> TensorLog {
        self.inputs.get(&tensor).cloned().unwrap_or_default()
    }

    /// The output log of `tensor` (empty if it was never used).
    pub fn output_log(&self, tensor: usize) -> TensorLog {
        self.outputs.get(&tensor).cloned().unwrap_or_default()
    }
}

impl UpstreamIo for RecordingIo {
    type Buffer = usize;
    type Error = RecordingError;

    fn input(
        &mut self,
        tensor: usize,
        _elements: usize,
        prefetch: bool,
    ) -> Result<Option<usize>, RecordingError> {
        self.injected()?;
        let log = self.inputs.entry(tensor).or_default();
        log.input_calls.push(prefetch);
        Ok(Self::hand_out(log, self.limit))
    }

    fn input_complete(&mut self, tensor: usize) -> Result<(), RecordingError> {
        self.injected()?;
        Self::release(self.inputs.entry(tensor).or_default())
    }

    fn output(&mut self, tensor: usize, _elements: usize) -> Result<Option<usize>, RecordingError> {
        self.injected()?;
        Ok(Self::hand_out(
            self.outputs.entry(tensor).or_default(),
            self.limit,
        ))
    }

    fn output_complete(&mut self, tensor: usize) -> Result<(), RecordingError> {
        self.injected()?;
        Self::release(self.outputs.entry(tensor).or_default())
    }
}
