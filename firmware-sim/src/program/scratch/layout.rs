//! Laying out the scratch block: its regions one after another from its start, in the
//! order the [module doc](super) gives, for a pass of `chunk` micro-batches.
//!
//! # Rules
//!
//! - A layout exists only for a program that passes [`Program::check`], a pass that
//!   divides its accumulation, and at least one lane; an exchange naming rounds the cut
//!   lacks, or a size that overflows, has none.
//! - The passes a program allows ([`Scratch::passes`]) are the divisors of its
//!   accumulation whose rows stay within [`PASS_ROWS`], largest first, ending at 1; a
//!   program of two or more dropout layers allows only 1. The firmware has no wider pass.

use tessera_core::program::{
    elements, Layer, Program, Reduction, MAX_ANCHORS, MAX_LAYERS, MAX_VARIABLES,
};

#[cfg(not(feature = "firmware"))]
use super::PASS_ROWS;
use super::{Cut, Laned, Region, Scratch};
use crate::divisor::Divisor;

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
    /// an exchange names rounds `cut` lacks, or the size overflows. The regions follow one
    /// another in the module doc's order.
    pub fn passing(program: &Program, replicas: usize, chunk: usize, cut: Cut<'_>) -> Option<Self> {
        program.check(replicas).ok()?;
        if chunk == 0 || !(program.accumulation as usize).is_multiple_of(chunk) || cut.lanes == 0 {
            return None;
        }
        let lanes = cut.lanes;
        let mut block = Carving { next: 0 };
        let mut full = [None; MAX_VARIABLES];
        let mut grad = [None; MAX_VARIABLES];
        block.exchanged(program, cut, (&mut full, &mut grad))?;
        block.unexchanged(program, lanes, (&mut full, &mut grad))?;
        let rows = (program.micro_batch_size as usize)
            .checked_mul(chunk)?
            .checked_mul(lanes)?;
        let mut widths = Widths::new();
        let mut masks = [None; MAX_LAYERS];
        let target = block.layers(program, rows, (chunk, lanes), (&mut widths, &mut masks))?;
        let mut acts = heapless::Vec::new();
        let mut deltas = heapless::Vec::new();
        for &w in &widths {
            acts.push(block.take(w.checked_mul(rows)?)?).ok()?;
            deltas.push(block.take(w.checked_mul(rows)?)?).ok()?;
        }
        let losses = block.take(rows)?;
        let mut sums = [Laned::default(); MAX_ANCHORS];
        block.sums(program, lanes, &mut sums)?;
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
            per_lane: Divisor::new(crate::program::one_to_max(lanes)),
            per_chunk: Divisor::new(chunk),
            total: block.next,
        })
    }
}

/// Every variable's whole (or its gradient) in the block, lane 0's and the stride to the
/// next lane's, if a layer trains it.
type Laneds = [Option<Laned>; MAX_VARIABLES];

/// The width of every activation `a₀ … a_L`.
type Widths = heapless::Vec<usize, { MAX_LAYERS + 1 }>;

/// Each layer's dropout mask, if it is a dropout layer.
type Masks = [Option<Region>; MAX_LAYERS];

/// The block as it is laid out: regions handed out one after another from its start.
struct Carving {
    /// The first element not handed out yet: at the end, the block's size.
    next: usize,
}

impl Carving {
    /// The next `len` elements.
    fn take(&mut self, len: usize) -> Option<Region> {
        let region = Region { at: self.next, len };
        self.next = self.next.checked_add(len)?;
        Some(region)
    }

    /// Exchange after exchange, each lane's copy of its rounds side by side; the whole a
    /// round gathers is its `full`, the gradient it averages its `grad`.
    fn exchanged(
        &mut self,
        program: &Program,
        cut: Cut<'_>,
        (full, grad): (&mut Laneds, &mut Laneds),
    ) -> Option<()> {
        for e in cut.exchanges {
            let rounds = cut.rounds.get(e.rounds.clone())?;
            let mut len = 0usize;
            for r in rounds {
                len = len.checked_add(elements(
                    &program.variables.get(usize::from(r.variable()))?.shape,
                )?)?;
            }
            let base = self.take(len.checked_mul(cut.lanes)?)?.at;
            let mut at = base;
            for r in rounds {
                let i = usize::from(r.variable());
                let n = elements(&program.variables.get(i)?.shape)?;
                let regions = match r {
                    Reduction::Gather { .. } => &mut *full,
                    Reduction::Gradient { .. } => &mut *grad,
                };
                *regions.get_mut(i)? = Some(Laned {
                    region: Region { at, len: n },
                    stride: len,
                });
                at = at.checked_add(n)?;
            }
        }
        Some(())
    }

    /// The rest of what the layers train: one whole every lane reads, a gradient per
    /// lane.
    fn unexchanged(
        &mut self,
        program: &Program,
        lanes: usize,
        (full, grad): (&mut Laneds, &mut Laneds),
    ) -> Option<()> {
        for i in (0..program.variables.len()).filter(|&i| program.layer_of(i).is_some()) {
            let n = elements(&program.variables.get(i)?.shape)?;
            if full.get(i)?.is_none() {
                full[i] = Some(Laned {
                    region: self.take(n)?,
                    stride: 0,
                });
            }
            if grad.get(i)?.is_none() {
                let at = self.take(n.checked_mul(lanes)?)?.at;
                grad[i] = Some(Laned {
                    region: Region { at, len: n },
                    stride: n,
                });
            }
        }
        Some(())
    }

    /// The layers' walk over a pass of `rows` rows, `chunk` micro-batches of each of
    /// `lanes` lanes: each dropout layer's mask into `masks` and the loss layer's labels or
    /// targets (returned), taken as the walk meets them, and the width of every activation
    /// `a₀ … a_L` into `widths`.
    fn layers(
        &mut self,
        program: &Program,
        rows: usize,
        (chunk, lanes): (usize, usize),
        (widths, masks): (&mut Widths, &mut Masks),
    ) -> Option<Region> {
        // A region of `rows` rows of `width`.
        let batch = |width: usize| width.checked_mul(rows);
        let input = program.streams.get(usize::from(program.input))?;
        let mut width = elements(&input.sample)?;
        widths.push(width).ok()?;
        let mut target = Region::default();
        for (k, layer) in program.layers.iter().enumerate() {
            match *layer {
                Layer::Linear { weight } => {
                    width = *program.variables.get(usize::from(weight))?.shape.first()? as usize;
                }
                Layer::Dropout { .. } => *masks.get_mut(k)? = Some(self.take(batch(width)?)?),
                Layer::SoftmaxCrossEntropy { labels: s }
                | Layer::MeanSquaredError { targets: s } => {
                    let items = chunk.checked_mul(lanes)?;
                    target =
                        self.take(program.item_elements(usize::from(s))?.checked_mul(items)?)?;
                    continue;
                }
                Layer::Bias { .. } | Layer::Relu => {}
            }
            widths.push(width).ok()?;
        }
        Some(target)
    }

    /// Each anchor's running sum, per lane, into `sums`.
    fn sums(
        &mut self,
        program: &Program,
        lanes: usize,
        sums: &mut [Laned; MAX_ANCHORS],
    ) -> Option<()> {
        for (j, a) in program.anchors.iter().enumerate() {
            let width = program.anchor_width(a.tensor)?;
            let at = self.take(width.checked_mul(lanes)?)?.at;
            *sums.get_mut(j)? = Laned {
                region: Region { at, len: width },
                stride: width,
            };
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use core::ops::Range;

    use tessera_core::dtype::DataType;
    use tessera_core::grouping::{CommGroup, GroupingSpec, RetrievalMode};
    use tessera_core::program::{Exchange, Layer, Optimizer, Program, Reduction, Sharding};

    use super::{Cut, Scratch};

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
