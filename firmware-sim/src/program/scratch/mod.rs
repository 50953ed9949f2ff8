//! Where the model's tensors lie in the step's scratch block, in `f32` elements.
//!
//! One block holds everything a step computes, one region after another: for each
//! variable a layer trains, its whole value (gathered from the group when it is sharded),
//! and its gradient — the ones an exchange carries first, exchange after exchange, each
//! exchange's rounds side by side in round order once per lane (lane 0's, then lane 1's,
//! …: an exchange is then one span, sent as it lies, its lanes in replica order); then the
//! rest; the activations `a₀ … a_L` (`a₀` the pass's inputs, `a_{k+1}` the output of
//! layer `k`, `a_L` the loss layer's input) and a gradient region of the same size for
//! each; a dropout mask per dropout layer; the labels or targets of the pass (a label is
//! stored as the bits of its `i32`); the loss of each of its samples; and a running sum
//! per anchor for
//! [`Sum`](tessera_core::stream::AnchorReturnType::Sum) anchors.
//!
//! Activations, their gradients, masks, targets and losses hold one *pass*: `chunk`
//! consecutive micro-batches of one batch of every lane, `rows` = `lanes` × `chunk` × the
//! program's micro-batch size rows of their width, sample after sample, lane after lane.
//!
//! # Lanes
//!
//! A device running several replicas in one walk ([`lanes`](tessera_core::program::lanes))
//! keeps one whole value of each variable it does not gather (every lane reads it), and
//! per lane: the gathered whole it contributes (its shard in place), its gradient, its
//! rows, and its anchors' running sums. A region of lane `l` lies `l` strides after lane
//! 0's ([`Scratch::full_in`], [`Scratch::grad_in`]); the combination the host answers an
//! exchange with goes into lane 0's part, which the rest of the batch reads.
//!
//! # Passes
//!
//! A step computes a batch's micro-batches a pass at a time: every layer runs once over
//! the pass's rows, so the cost of walking the program (its layers, regions and FIFOs)
//! is paid once per pass, not once per micro-batch. The result is the same to the bit as
//! one micro-batch at a time: every row is computed alone, in order (a linear layer's
//! gradient adds row after row, the loss is per sample), and a micro-batch's anchors are
//! its own rows. The generator is the one thing shared across rows: one dropout layer
//! draws element after element over the pass, in the order single micro-batches would;
//! two or more would draw layer by layer instead of micro-batch by micro-batch, so a
//! program with more than one dropout layer computes one micro-batch a pass. (A step
//! that fails part-way may have drawn for the rest of its pass: the generator's state
//! after a failed step is whatever the step left, as the host's recovery rule says.)
//!
//! A pass is the largest divisor of the accumulation whose rows stay within
//! [`PASS_ROWS`] ([`Scratch::passes`] lists them, largest first) and whose block is
//! larger than one micro-batch's by at most a quarter of the memory the program leaves
//! free with one micro-batch a pass (so the memory later requests need — slots,
//! registers, function calls — shrinks by at most a quarter); a device takes the first
//! that fits, else one micro-batch a pass, so a program that fitted before still fits. The
//! firmware binary computes one micro-batch a pass: its flash budget has no room for the
//! search.
//!
//! # Parts
//!
//! This module holds the layout's regions and what a step asks of them; `layout` works
//! them out for a program ([`Scratch::passing`]).

mod layout;

use core::ops::Range;

use crate::divisor::Divisor;

use tessera_core::program::{
    AnchorTensor, Exchange, Reduction, MAX_ANCHORS, MAX_LAYERS, MAX_VARIABLES,
};

/// Most rows a pass of several micro-batches computes: enough to amortise the walk over
/// the program (32 single samples run as fast as one micro-batch of 32), few enough that
/// the block stays small. (Not in the firmware binary, which computes one micro-batch a
/// pass: module doc.)
#[cfg(not(feature = "firmware"))]
pub const PASS_ROWS: usize = 32;

/// A range of the scratch block, in elements.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Region {
    /// First element.
    pub at: usize,
    /// Elements.
    pub len: usize,
}

impl Region {
    /// The elements it covers.
    pub fn range(self) -> Range<usize> {
        self.at..self.at + self.len
    }
}

/// How a device sends a batch's rounds: cut into `exchanges` (positions in `rounds`, the
/// batch's [`Program::reductions`]), each carrying `lanes` lanes' rounds side by side.
///
/// [`Program::reductions`]: tessera_core::program::Program::reductions
#[derive(Debug, Clone, Copy)]
pub struct Cut<'c> {
    /// The batch's rounds.
    pub rounds: &'c [Reduction],
    /// How they travel.
    pub exchanges: &'c [Exchange],
    /// Lanes the device runs (at least 1).
    pub lanes: usize,
}

/// A region held per lane: lane 0's, and the elements from one lane's to the next (0 when
/// every lane shares it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Laned {
    region: Region,
    stride: usize,
}

impl Laned {
    fn lane(self, lane: usize) -> Option<Range<usize>> {
        let at = self.region.at.checked_add(self.stride.checked_mul(lane)?)?;
        Some(at..at.checked_add(self.region.len)?)
    }
}

/// The regions of one program's scratch block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scratch {
    full: [Option<Laned>; MAX_VARIABLES],
    grad: [Option<Laned>; MAX_VARIABLES],
    /// `a₀ … a_L`.
    acts: heapless::Vec<Region, { MAX_LAYERS + 1 }>,
    /// The gradient of the loss with respect to each activation.
    deltas: heapless::Vec<Region, { MAX_LAYERS + 1 }>,
    masks: [Option<Region>; MAX_LAYERS],
    target: Region,
    losses: Region,
    sums: [Laned; MAX_ANCHORS],
    /// Samples per pass, every lane's.
    rows: usize,
    /// Micro-batches per pass, of each lane.
    chunk: usize,
    /// Lanes whose rows a pass holds.
    lanes: usize,
    /// Division by the lanes and by the chunk, for their parts of a region (a step takes
    /// them at every lane of every layer, and at every micro-batch's anchors).
    per_lane: Divisor,
    per_chunk: Divisor,
    total: usize,
}

impl Scratch {
    /// Bytes of the block.
    pub fn bytes(&self) -> usize {
        self.total.saturating_mul(4)
    }

    /// Variable `index`'s whole value, if a layer trains it: the one every lane reads (for
    /// a gathered variable, lane 0's, where the gather's combination lands).
    pub fn full(&self, index: u8) -> Option<Range<usize>> {
        self.full_in(index, 0)
    }

    /// Lane `lane`'s whole of variable `index`: its own part of a gather exchange, or the
    /// one whole every lane shares.
    pub fn full_in(&self, index: u8, lane: usize) -> Option<Range<usize>> {
        self.full
            .get(usize::from(index))
            .copied()
            .flatten()?
            .lane(lane)
    }

    /// Lanes that hold a whole of their own of variable `index` (all of them when it is
    /// gathered, each contributing its shard; else 1: every lane reads lane 0's).
    pub fn full_lanes(&self, index: u8) -> usize {
        match self.full.get(usize::from(index)).copied().flatten() {
            Some(f) if f.stride > 0 => self.lanes(),
            _ => 1,
        }
    }

    /// Variable `index`'s gradient, if a layer trains it: lane 0's, where the gradient
    /// exchange's combination lands.
    pub fn grad(&self, index: u8) -> Option<Range<usize>> {
        self.grad_in(index, 0)
    }

    /// Lane `lane`'s gradient of variable `index`.
    pub fn grad_in(&self, index: u8, lane: usize) -> Option<Range<usize>> {
        self.grad
            .get(usize::from(index))
            .copied()
            .flatten()?
            .lane(lane)
    }

    /// The elements of an exchange of `rounds`: from lane 0's first buffer (a variable's
    /// whole value for a gather, its gradient for a gradient round) to the last lane's
    /// last.
    pub fn span(&self, rounds: &[Reduction]) -> Option<Range<usize>> {
        let region = |r: &Reduction, lane| match *r {
            Reduction::Gather { variable } => self.full_in(variable, lane),
            Reduction::Gradient { variable } => self.grad_in(variable, lane),
        };
        let last = self.lanes().checked_sub(1)?;
        Some(region(rounds.first()?, 0)?.start..region(rounds.last()?, last)?.end)
    }

    /// Lanes whose rows a pass holds (1 to [`MAX_LANES`](super::MAX_LANES), said again so
    /// that a build of one lane drops its loops).
    pub fn lanes(&self) -> usize {
        super::one_to_max(self.lanes)
    }

    /// Activation `a_k`.
    pub fn act(&self, k: usize) -> Option<Range<usize>> {
        self.acts.get(k).map(|r| r.range())
    }

    /// The gradient of activation `a_k`.
    pub fn delta(&self, k: usize) -> Option<Range<usize>> {
        self.deltas.get(k).map(|r| r.range())
    }

    /// Layer `k`'s dropout mask.
    pub fn mask(&self, k: usize) -> Option<Range<usize>> {
        self.masks.get(k).copied().flatten().map(Region::range)
    }

    /// The pass's labels or targets.
    pub fn target(&self) -> Range<usize> {
        self.target.range()
    }

    /// The loss of each sample of the pass.
    pub fn losses(&self) -> Range<usize> {
        self.losses.range()
    }

    /// Samples per pass: the rows of every activation, every lane's.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Micro-batches per pass, of each lane.
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// The part of `region` (one of the pass's: an activation, the targets, the losses, a
    /// mask) that holds lane `lane`'s rows.
    pub fn lane_part(&self, region: Range<usize>, lane: usize) -> Option<Range<usize>> {
        if lane >= self.lanes() {
            return None;
        }
        // Within `region`: `lane` lanes' rows and one more are at most all of its rows.
        let len = match super::MAX_LANES {
            // The firmware's one lane: no division at all.
            1 => region.len(),
            _ => self.per_lane.divide(region.len()),
        };
        let start = region.start + len * lane;
        Some(start..start + len)
    }

    /// The part of `region` (one of the pass's) that holds lane `lane`'s micro-batch `i` of
    /// the pass: its rows.
    pub fn part(&self, region: Range<usize>, lane: usize, i: usize) -> Option<Range<usize>> {
        let lane = self.lane_part(region, lane)?;
        if i >= self.chunk {
            return None;
        }
        // Within the lane's rows, as above.
        let len = self.per_chunk.divide(lane.len());
        let start = lane.start + len * i;
        Some(start..start + len)
    }

    /// The pass's values of an anchored tensor: the losses, or the loss layer's input.
    pub fn anchored(&self, tensor: AnchorTensor) -> Option<Range<usize>> {
        match tensor {
            AnchorTensor::Loss => Some(self.losses()),
            AnchorTensor::Output => self.act(self.last()),
        }
    }

    /// Lane `lane`'s running sum of anchor `j`.
    pub fn sum(&self, j: usize, lane: usize) -> Option<Range<usize>> {
        self.sums.get(j)?.lane(lane)
    }

    /// `L`: the index of the loss layer's input activation.
    pub fn last(&self) -> usize {
        self.acts.len().saturating_sub(1)
    }

    /// Elements of the loss layer's input for one micro-batch: the model's output of it.
    pub fn output_elements(&self) -> usize {
        let micro_batches = self.chunk.saturating_mul(self.lanes()).max(1);
        self.acts.last().map_or(0, |r| r.len / micro_batches)
    }
}
