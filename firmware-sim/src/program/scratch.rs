//! Where the model's tensors lie in the step's scratch block, in `f32` elements.
//!
//! One block holds everything a step computes, one region after another: for each
//! variable a layer trains, its whole value (gathered from the group when it is sharded),
//! then for each its gradient (in both lists the variables that take a round of that kind
//! come first, in round order: the rounds of an exchange are then one span, sent as it
//! lies); the activations `a₀ … a_L` (`a₀` the pass's inputs, `a_{k+1}` the output of
//! layer `k`, `a_L` the loss layer's input) and a gradient region of the same size for
//! each; a dropout mask per dropout layer; the labels or targets of the pass (a label is
//! stored as the bits of its `i32`); the loss of each of its samples; and a running sum
//! per anchor for
//! [`Sum`](tessera_core::stream::AnchorReturnType::Sum) anchors.
//!
//! Activations, their gradients, masks, targets and losses hold one *pass*: `chunk`
//! consecutive micro-batches of one batch, `rows` = `chunk` × the program's micro-batch
//! size rows of their width, sample after sample.
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

use tessera_core::program::{
    elements, AnchorTensor, Layer, Program, Reduction, MAX_ANCHORS, MAX_LAYERS, MAX_VARIABLES,
};

/// Most rows a pass of several micro-batches computes: enough to amortise the walk over
/// the program (32 single samples run as fast as one micro-batch of 32), few enough that
/// the block stays small.
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

/// The regions of one program's scratch block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scratch {
    full: [Option<Region>; MAX_VARIABLES],
    grad: [Option<Region>; MAX_VARIABLES],
    /// `a₀ … a_L`.
    acts: heapless::Vec<Region, { MAX_LAYERS + 1 }>,
    /// The gradient of the loss with respect to each activation.
    deltas: heapless::Vec<Region, { MAX_LAYERS + 1 }>,
    masks: [Option<Region>; MAX_LAYERS],
    target: Region,
    losses: Region,
    sums: [Region; MAX_ANCHORS],
    /// Samples per pass.
    rows: usize,
    /// Micro-batches per pass.
    chunk: usize,
    total: usize,
}

impl Scratch {
    /// The layout for `program` on `replicas` replicas, one micro-batch per pass; `None`
    /// when the program does not pass [`Program::check`] or its size overflows.
    pub fn new(program: &Program, replicas: usize) -> Option<Self> {
        Self::passing(program, replicas, 1)
    }

    /// The micro-batches per pass `program` allows, largest first (module doc): each a
    /// divisor of its accumulation, the last 1.
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

    /// The layout for `program` on `replicas` replicas, `chunk` micro-batches per pass;
    /// `None` when the program does not pass [`Program::check`], `chunk` does not divide
    /// its accumulation, or the size overflows.
    pub fn passing(program: &Program, replicas: usize, chunk: usize) -> Option<Self> {
        program.check(replicas).ok()?;
        if chunk == 0 || !(program.accumulation as usize).is_multiple_of(chunk) {
            return None;
        }
        let mut next = 0usize;
        let mut take = |len: usize| -> Option<Region> {
            let region = Region { at: next, len };
            next = next.checked_add(len)?;
            Some(region)
        };
        let mut full = [None; MAX_VARIABLES];
        let mut grad = [None; MAX_VARIABLES];
        // The variables one kind of round carries come first, in round order, so that an
        // exchange's rounds are one span of the block; then the rest.
        let trained = || (0..program.variables.len()).filter(|&i| program.layer_of(i).is_some());
        for (regions, gathers) in [(&mut full, true), (&mut grad, false)] {
            let first = program
                .reductions(replicas)
                .filter(|r| matches!(r, Reduction::Gather { .. }) == gathers)
                .map(|r| usize::from(r.variable()));
            for i in first.chain(trained()) {
                let slot = regions.get_mut(i)?;
                if slot.is_none() {
                    *slot = Some(take(elements(&program.variables.get(i)?.shape)?)?);
                }
            }
        }
        let rows = (program.micro_batch_size as usize).checked_mul(chunk)?;
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
                    target = take(program.item_elements(usize::from(s))?.checked_mul(chunk)?)?;
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
        let mut sums = [Region::default(); MAX_ANCHORS];
        for (j, a) in program.anchors.iter().enumerate() {
            sums[j] = take(program.anchor_width(a.tensor)?)?;
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
            total,
        })
    }

    /// Bytes of the block.
    pub fn bytes(&self) -> usize {
        self.total.saturating_mul(4)
    }

    /// Variable `index`'s whole value, if a layer trains it.
    pub fn full(&self, index: u8) -> Option<Range<usize>> {
        self.full
            .get(usize::from(index))
            .copied()
            .flatten()
            .map(Region::range)
    }

    /// Variable `index`'s gradient, if a layer trains it.
    pub fn grad(&self, index: u8) -> Option<Range<usize>> {
        self.grad
            .get(usize::from(index))
            .copied()
            .flatten()
            .map(Region::range)
    }

    /// The elements from the first of `rounds`' buffers (a variable's whole value for a
    /// gather, its gradient for a gradient round) to the end of the last.
    pub fn span(&self, rounds: &[Reduction]) -> Option<Range<usize>> {
        let region = |r: &Reduction| match *r {
            Reduction::Gather { variable } => self.full(variable),
            Reduction::Gradient { variable } => self.grad(variable),
        };
        Some(region(rounds.first()?)?.start..region(rounds.last()?)?.end)
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

    /// Samples per pass: the rows of every activation.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Micro-batches per pass.
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// The part of `region` (one of the pass's: an activation, the targets, the losses)
    /// that holds the pass's micro-batch `i`: its rows.
    pub fn part(&self, region: Range<usize>, i: usize) -> Option<Range<usize>> {
        let len = region.len() / self.chunk.max(1);
        let start = region.start.checked_add(len.checked_mul(i)?)?;
        let end = start.checked_add(len)?;
        (i < self.chunk).then_some(start..end)
    }

    /// The pass's values of an anchored tensor: the losses, or the loss layer's input.
    pub fn anchored(&self, tensor: AnchorTensor) -> Option<Range<usize>> {
        match tensor {
            AnchorTensor::Loss => Some(self.losses()),
            AnchorTensor::Output => self.act(self.last()),
        }
    }

    /// Anchor `j`'s running sum.
    pub fn sum(&self, j: usize) -> Option<Range<usize>> {
        self.sums.get(j).map(|r| r.range())
    }

    /// `L`: the index of the loss layer's input activation.
    pub fn last(&self) -> usize {
        self.acts.len().saturating_sub(1)
    }

    /// Elements of the loss layer's input for one micro-batch: the model's output of it.
    pub fn output_elements(&self) -> usize {
        self.acts.last().map_or(0, |r| r.len / self.chunk.max(1))
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

    /// Catches an exchange whose rounds are not side by side in the block: with `b1`
    /// (no round) stored between `w1` and `w2` in variable order, the gradient exchange
    /// sent as one span carried `b1`'s gradient and missed `b2`'s.
    #[test]
    fn every_exchange_is_one_span_of_its_rounds() {
        let p = two_layers();
        assert_eq!(p.check(4), Ok(()));
        let s = Scratch::new(&p, 4).unwrap();
        for max in [usize::MAX, 40, 0] {
            let cut = p.exchanges(4, max);
            let rounds: heapless::Vec<Reduction, 16> = cut.rounds().iter().copied().collect();
            for e in cut {
                let span = s.span(&rounds[e.rounds.clone()]).unwrap();
                assert_eq!(span.len() * 4, e.bytes, "frame {max}: {e:?}");
            }
        }
        assert_eq!(
            p.exchanges(4, usize::MAX).count(),
            2,
            "a gather, then gradients"
        );
    }
}
