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
//! that fits, else one micro-batch a pass, so a program that fitted before still fits. The firmware binary computes one micro-batch
//! a pass: its flash budget has no room for the search.

use core::ops::Range;

use crate::divisor::Divisor;

use tessera_core::program::{
    elements, AnchorTensor, Exchange, Layer, Program, Reduction, MAX_ANCHORS, MAX_LAYERS,
    MAX_VARIABLES,
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
    /// The layout for `program` on `replicas` replicas, its rounds sent as `cut` says,
    /// one micro-batch per pass; `None` when the program does not pass [`Program::check`]
    /// or its size overflows.
    pub fn new(program: &Program, replicas: usize, cut: Cut<'_>) -> Option<Self> {
        Self::passing(program, replicas, 1, cut)
    }

    /// The micro-batches per pass `program` allows, largest first (module doc): each a
    /// divisor of its accumulation, the last 1. (Not in the firmware binary: module doc.)
    #[cfg(not(feature = "firmware"))]
    pub fn passes(program: &Program) -> impl Iterator<Item = usize> {
        let a = program.accumulation as usize;
        let dropouts = (program.layers.iter())
            .filter(|l| matches!(l, Layer::Dropout { .. }))
            .count();
        let most = match dropouts {
            0 | 1 => PASS_ROWS / (program.micro_batch_size as usize).max(1),
            // Their draws would interleave otherwise (module doc).
            _ => 1,
        };
        (1..=a.min(most).max(1))
            .rev()
            .filter(move |c| a.is_multiple_of(*c))
    }

    /// The layout for `program` on `replicas` replicas, its rounds sent as `cut` says,
    /// `chunk` micro-batches per pass; `None` when the program does not pass
    /// [`Program::check`], `chunk` does not divide its accumulation, there are no lanes,
    /// an exchange names rounds `cut` lacks, or the size overflows.
    pub fn passing(program: &Program, replicas: usize, chunk: usize, cut: Cut<'_>) -> Option<Self> {
        program.check(replicas).ok()?;
        if chunk == 0 || !(program.accumulation as usize).is_multiple_of(chunk) || cut.lanes == 0 {
            return None;
        }
        let lanes = cut.lanes;
        let mut next = 0usize;
        let mut take = |len: usize| -> Option<Region> {
            let region = Region { at: next, len };
            next = next.checked_add(len)?;
            Some(region)
        };
        let mut full = [None; MAX_VARIABLES];
        let mut grad = [None; MAX_VARIABLES];
        // Exchange after exchange, each lane's copy of its rounds side by side; the whole
        // a round gathers is its `full`, the gradient it averages its `grad`.
        for e in cut.exchanges {
            let rounds = cut.rounds.get(e.rounds.clone())?;
            let mut len = 0usize;
            for r in rounds {
                len = len.checked_add(elements(
                    &program.variables.get(usize::from(r.variable()))?.shape,
                )?)?;
            }
            let base = take(len.checked_mul(lanes)?)?.at;
            let mut at = base;
            for r in rounds {
                let i = usize::from(r.variable());
                let n = elements(&program.variables.get(i)?.shape)?;
                let regions = match r {
                    Reduction::Gather { .. } => &mut full,
                    Reduction::Gradient { .. } => &mut grad,
                };
                *regions.get_mut(i)? = Some(Laned {
                    region: Region { at, len: n },
                    stride: len,
                });
                at = at.checked_add(n)?;
            }
        }
        // The rest: one whole every lane reads, a gradient per lane.
        for i in (0..program.variables.len()).filter(|&i| program.layer_of(i).is_some()) {
            let n = elements(&program.variables.get(i)?.shape)?;
            if full.get(i)?.is_none() {
                full[i] = Some(Laned {
                    region: take(n)?,
                    stride: 0,
                });
            }
            if grad.get(i)?.is_none() {
                let at = take(n.checked_mul(lanes)?)?.at;
                grad[i] = Some(Laned {
                    region: Region { at, len: n },
                    stride: n,
                });
            }
        }
        let rows = (program.micro_batch_size as usize)
            .checked_mul(chunk)?
            .checked_mul(lanes)?;
        // A region of `rows` rows of `width`.
        let batch = |width: usize| width.checked_mul(rows);
        let input = program.streams.get(usize::from(program.input))?;
        let mut width = elements(&input.sample)?;
        let mut widths = heapless::Vec::<usize, { MAX_LAYERS + 1 }>::new();
        widths.push(width).ok()?;
        let mut masks = [None; MAX_LAYERS];
        let mut target = Region::default();
        for (k, layer) in program.layers.iter().enumerate() {
            match *layer {
                Layer::Linear { weight } => {
                    width = *program.variables.get(usize::from(weight))?.shape.first()? as usize;
                }
                Layer::Dropout { .. } => masks[k] = Some(take(batch(width)?)?),
                Layer::SoftmaxCrossEntropy { labels: s }
                | Layer::MeanSquaredError { targets: s } => {
                    let items = chunk.checked_mul(lanes)?;
                    target = take(program.item_elements(usize::from(s))?.checked_mul(items)?)?;
                    continue;
                }
                Layer::Bias { .. } | Layer::Relu => {}
            }
            widths.push(width).ok()?;
        }
        let mut acts = heapless::Vec::new();
        let mut deltas = heapless::Vec::new();
        for &w in &widths {
            acts.push(take(batch(w)?)?).ok()?;
            deltas.push(take(batch(w)?)?).ok()?;
        }
        let losses = take(rows)?;
        let mut sums = [Laned::default(); MAX_ANCHORS];
        for (j, a) in program.anchors.iter().enumerate() {
            let width = program.anchor_width(a.tensor)?;
            let at = take(width.checked_mul(lanes)?)?.at;
            sums[j] = Laned {
                region: Region { at, len: width },
                stride: width,
            };
        }
        let total = next;
        Some(Self {
            full,
            grad,
            acts,
            deltas,
            masks,
            target,
            losses,
            sums,
            rows,
            chunk,
            lanes,
            per_lane: Divisor::new(super::one_to_max(lanes)),
            per_chunk: Divisor::new(chunk),
            total,
        })
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::dtype::DataType;
    use tessera_core::grouping::{CommGroup, GroupingSpec, RetrievalMode};
    use tessera_core::program::{Optimizer, Sharding};

    /// Two layers on 4 replicas: `w1` sharded across all, `b1` alone on each replica (no
    /// round), `w2` shared in pairs, `b2` across all.
    fn two_layers() -> Program {
        let sgd = Optimizer::Sgd { learning_rate: 0.1 };
        let mut p = Program::new(2, 1, sgd);
        let mut var = |name, shape: &[u32], comm, sharding| {
            let g = GroupingSpec::Comm(comm);
            p.add_variable(name, shape, g, RetrievalMode::OnePerGroup, sharding)
                .unwrap()
        };
        let w1 = var("w1", &[5, 3], CommGroup::All, Sharding::Balanced);
        let b1 = var("b1", &[5], CommGroup::None, Sharding::None);
        let w2 = var("w2", &[2, 5], CommGroup::Consecutive(2), Sharding::None);
        let b2 = var("b2", &[2], CommGroup::All, Sharding::None);
        p.add_stream("x", DataType::F32, &[3], false).unwrap();
        let t = p.add_stream("t", DataType::F32, &[2], false).unwrap();
        for layer in [
            Layer::Linear { weight: w1 },
            Layer::Bias { bias: b1 },
            Layer::Relu,
            Layer::Linear { weight: w2 },
            Layer::Bias { bias: b2 },
            Layer::MeanSquaredError { targets: t },
        ] {
            p.add_layer(layer).unwrap();
        }
        p
    }

    /// `x[3] → w[4, 3] → dropout × dropouts → squared error`, 8 micro-batches of 2 samples
    /// a batch.
    #[cfg(not(feature = "firmware"))]
    fn dropping(dropouts: usize) -> Program {
        let mut p = Program::new(1, 8, Optimizer::Sgd { learning_rate: 0.1 });
        p.micro_batch_size = 2;
        let g = GroupingSpec::Comm(CommGroup::None);
        let one = RetrievalMode::OnePerGroup;
        let w = p
            .add_variable("w", &[4, 3], g, one, Sharding::None)
            .unwrap();
        p.add_stream("x", DataType::F32, &[3], false).unwrap();
        let t = p.add_stream("t", DataType::F32, &[4], false).unwrap();
        p.add_layer(Layer::Linear { weight: w }).unwrap();
        for _ in 0..dropouts {
            p.add_layer(Layer::Dropout { rate: 0.25 }).unwrap();
        }
        p.add_layer(Layer::MeanSquaredError { targets: t }).unwrap();
        p
    }

    /// Catches passes over a program with two dropout layers: a pass would draw the first
    /// layer's masks for all its micro-batches before the second's, where single
    /// micro-batches draw both for one micro-batch, then both for the next. With one, every
    /// divisor of the accumulation within [`PASS_ROWS`] is a pass, largest first.
    #[cfg(not(feature = "firmware"))]
    #[test]
    fn two_dropout_layers_allow_one_micro_batch_a_pass() {
        let passes = |dropouts| -> heapless::Vec<usize, 8> {
            assert_eq!(dropping(dropouts).check(1), Ok(()));
            Scratch::passes(&dropping(dropouts)).collect()
        };
        assert_eq!(passes(1).as_slice(), [8, 4, 2, 1]);
        assert_eq!(passes(2).as_slice(), [1]);
    }

    /// Catches an exchange whose rounds are not side by side in the block: with `b1`
    /// (no round) stored between `w1` and `w2` in variable order, the gradient exchange
    /// sent as one span carried `b1`'s gradient and missed `b2`'s. With lanes, an
    /// exchange is each lane's rounds one after another: lane `l`'s buffers lie `l`
    /// lane-lengths into the span, and a lane's gradient is apart from every other's.
    #[test]
    fn every_exchange_is_one_span_of_its_rounds() {
        let p = two_layers();
        assert_eq!(p.check(4), Ok(()));
        for lanes in [1, 2, 3] {
            for max in [usize::MAX, 40, 0] {
                let cut = p.exchanges(4, max);
                let rounds: heapless::Vec<Reduction, 16> = cut.rounds().iter().copied().collect();
                let exchanges: heapless::Vec<Exchange, 16> = cut.collect();
                let cut = Cut {
                    rounds: &rounds,
                    exchanges: &exchanges,
                    lanes,
                };
                let s = Scratch::new(&p, 4, cut).unwrap();
                for e in &exchanges {
                    let rounds = &rounds[e.rounds.clone()];
                    let span = s.span(rounds).unwrap();
                    assert_eq!(span.len() * 4, e.bytes * lanes, "frame {max}: {e:?}");
                    let first = rounds[0];
                    let lane_len = e.bytes / 4;
                    for lane in 0..lanes {
                        let region = match first {
                            Reduction::Gather { variable } => s.full_in(variable, lane),
                            Reduction::Gradient { variable } => s.grad_in(variable, lane),
                        };
                        assert_eq!(region.unwrap().start, span.start + lane * lane_len);
                    }
                }
                let grads: heapless::Vec<Range<usize>, 16> = (0..4u8)
                    .flat_map(|v| (0..lanes).map(move |l| (v, l)))
                    .map(|(v, l)| s.grad_in(v, l).unwrap())
                    .collect();
                for (i, a) in grads.iter().enumerate() {
                    for b in &grads[i + 1..] {
                        assert!(
                            a.end <= b.start || b.end <= a.start,
                            "{a:?} and {b:?} overlap"
                        );
                    }
                }
            }
        }
        assert_eq!(
            p.exchanges(4, usize::MAX).count(),
            2,
            "a gather, then gradients"
        );
    }
}
