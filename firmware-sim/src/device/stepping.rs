//! A training step under way, leg by leg ([`crate::program::step`]): the serve loop starts
//! it for a `RunStep`, sends the contribution each leg ends with, hands back the host's
//! combination, and answers the `RunStep` with the reply the last leg gives. Between legs
//! the device holds only the step's cursor and the exchange it waits on.
//!
//! # Rules
//!
//! - One step at a time: starting one drops any other still under way.
//! - A combination is taken only for the exchange the step waits on (the serve loop
//!   matches its round), and only of that exchange's length: anything else ends the step
//!   with [`ErrorCode::UnexpectedReduced`].
//! - A step ends at its last leg, at its first error, or when it is abandoned (the host
//!   gave up on it: [`ErrorCode::StepAbandoned`]); after that no step is under way. What an
//!   ended step changed stays as it is (FIFOs popped, variables updated by the batches
//!   before): the host settles it ([`ResetStep`](tessera_core::wire::ProgramRequest::ResetStep),
//!   weights from host).

use core::ops::Range;

use tessera_core::wire::{ErrorCode, Invariant, ReduceOp, RequestKind, Response};

use super::data::Rings;
use super::Device;
use crate::program::{self as step, Cursor, Leg, StepContext};

/// A step between two legs: where it stands, and the exchange it waits on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Stepping {
    cursor: Cursor,
    round: u32,
    op: ReduceOp,
    /// The exchange's elements in the scratch block.
    span: Range<usize>,
}

/// Where a step stands after a leg.
#[derive(Debug, PartialEq)]
pub enum Progress<'d> {
    /// The step waits for exchange `round`: `data` (f32, little-endian) combined by `op`.
    Contribute {
        /// The exchange's number in the step.
        round: u32,
        /// How to combine.
        op: ReduceOp,
        /// This replica's share.
        data: &'d [u8],
    },
    /// The step is over: the `RunStep`'s reply.
    Finished(Response<'static>),
}

impl Device<'_> {
    /// Starts a step: drops the last step's anchors the host `took` in place whole, counts
    /// the stream FIFOs it `fed` in place whole
    /// ([`ProgramRequest::RunStep`](tessera_core::wire::ProgramRequest::RunStep)'s rule),
    /// then runs its first leg.
    pub fn start_step(&mut self, fed: bool, took: bool) -> Progress<'_> {
        self.stepping = None;
        for (whole, rings) in [(took, Rings::Anchors), (fed, Rings::Streams)] {
            if !whole {
                continue;
            }
            if let Err(code) = self.count_whole(rings) {
                return finished(Err(code));
            }
        }
        self.leg(Cursor::new(), None)
    }

    /// Micro-batches the prepared program computes a pass (the step's scratch rule: as
    /// many as fit, computed to the same bits as one at a time), if one is prepared: for a
    /// host that checks the pass a device chose.
    #[cfg(not(feature = "firmware"))]
    pub fn pass(&self) -> Option<usize> {
        self.prepared.as_ref().map(|p| p.scratch.chunk())
    }

    /// The exchange the step under way waits on, if one is.
    pub fn awaited_round(&self) -> Option<u32> {
        self.stepping.as_ref().map(|s| s.round)
    }

    /// Puts `data`, the combination of the awaited exchange, in its place and runs the
    /// next leg.
    pub fn answer_step(&mut self, data: &[u8]) -> Progress<'_> {
        match self.stepping.take() {
            Some(s) => self.leg(s.cursor, Some(data)),
            None => finished(Err(ErrorCode::UnexpectedReduced)),
        }
    }

    /// The awaited exchange's contribution again (the host missed it).
    pub fn contribution(&mut self) -> Option<Progress<'_>> {
        let s = self.stepping.as_ref()?;
        let (round, op, span) = (s.round, s.op, s.span.clone());
        let block = self.prepared.as_ref()?.placed.scratch;
        let data = self.arena.bytes(block).get(span.start * 4..span.end * 4)?;
        Some(Progress::Contribute { round, op, data })
    }

    /// Ends the step under way with `code` (the host gave up on it, or never answered):
    /// the `RunStep`'s reply.
    pub fn end_step(&mut self, code: ErrorCode) -> Response<'static> {
        self.stepping = None;
        error(code)
    }

    /// Applies `answer` (if any) to the exchange `cursor` waits on, then runs to the next
    /// exchange or the end.
    fn leg(&mut self, mut cursor: Cursor, answer: Option<&[u8]>) -> Progress<'_> {
        let Some(prepared) = self.prepared.as_ref() else {
            return finished(Err(ErrorCode::NotPrepared));
        };
        let ctx = StepContext {
            arena: &mut self.arena,
            fifos: &mut self.fifos,
            rngs: &mut self.rngs,
            prepared,
            optimizer: self.optimizer,
        };
        let leg = step::advance(ctx, &mut cursor, answer);
        match leg {
            Ok(Leg::Exchange { round, op, span }) => {
                self.stepping = Some(Stepping {
                    cursor,
                    round,
                    op,
                    span,
                });
                // The leg just found the scratch block and the span in it.
                let missing = finished(Err(crate::broken(Invariant::StepScratch)));
                self.contribution().unwrap_or(missing)
            }
            Ok(Leg::Done { work }) => {
                self.cycles.add(work);
                // The host reads the anchors in place on this reply's word alone.
                finished(self.anchors_whole())
            }
            Err(code) => finished(Err(code)),
        }
    }
}

/// The `RunStep`'s reply for a step that ended with `outcome`.
fn finished(outcome: Result<(), ErrorCode>) -> Progress<'static> {
    Progress::Finished(match outcome {
        Ok(()) => Response::Done,
        Err(code) => error(code),
    })
}

fn error(code: ErrorCode) -> Response<'static> {
    Response::Error {
        request: RequestKind::RunStep,
        code,
    }
}
