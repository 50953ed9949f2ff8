//! One training step of a prepared program.
//!
//! For each of the step's batches:
//!
//! 1. every variable a layer trains is made whole in the scratch block: copied from the
//!    replica's variable, or, when it is sharded, its shard's pieces placed in a zeroed
//!    tensor and summed across the group (a *gather* round);
//! 2. each micro-batch pops one item of every stream, runs the layers forward, computes
//!    the loss, runs the layers backward adding to each variable's gradient, and writes its
//!    anchors by their return type's rule ([`AnchorReturnType::action`]) — a pass of
//!    several micro-batches at a time, every row alone and in order, which gives the same
//!    bits ([`scratch`](super::scratch)'s rule);
//! 3. the gradients are divided by the accumulation factor and averaged across each
//!    variable's group (a *gradient* round, when the group has several members);
//! 4. the optimizer updates only what the replica holds: its own shard's elements (padding
//!    stays zero) or the whole variable; with momentum, `v ← μ·v + g`, `w ← w − lr·v`.
//!
//! Rounds are listed as [`Program::reductions`] orders them and travel in exchanges (core's
//! [`exchange`](tessera_core::program::exchange) rule, for this device's frame): an
//! exchange's rounds lie side by side in the scratch block and go to the host as one span,
//! numbered from the step's first exchange. A step runs in legs, each ending at an exchange
//! ([`advance`], given the host's combination at the next call): the device never waits
//! inside a leg, so between two legs it serves its link, and a host can run many devices on
//! few threads. The work counted (the cycle
//! count's unit, called a multiply-add) is one per multiply-add of a linear layer (forward,
//! weight gradient, and input gradient below the first layer), one per element each layer
//! before the loss writes forward and backward, and one per element an update changes.
//!
//! # Lanes
//!
//! On a device of several lanes (replicas run in one walk: core's
//! [`lanes`](tessera_core::program::lanes) rule) one walk serves them all: a pass holds
//! every lane's micro-batches as rows, each lane popping its own FIFOs, drawing dropout
//! from its own generator, adding its rows into its own gradients and writing its own
//! anchors; an exchange is every lane's part side by side, and the host's one combination
//! goes into lane 0's part, which the rest of the batch reads; the optimizer updates each
//! lane's shard, and a variable held whole once, on lane 0, copied to the other lanes when
//! the step's last batch is updated. Each lane counts the work a device of its own would.
//!
//! # Errors
//!
//! A step fails on what the host can get wrong: an empty stream FIFO, a full anchor FIFO,
//! a combination of the wrong length, a label outside the classes. Everything else it
//! relies on, [`prepare`](fn@super::prepare) set up; finding any of that broken is
//! [`ErrorCode::Internal`] naming the [`Invariant`] and its site, a device bug, answered
//! instead of a panic.
//!
//! [`AnchorReturnType::action`]: tessera_core::stream::AnchorReturnType::action
//! [`Program::reductions`]: tessera_core::program::Program::reductions

use core::ops::Range;

use tessera_core::program::{ids, Anchor, Layer, Reduction};
use tessera_core::rng::Rng;
use tessera_core::stream::{AnchorAction, AnchorReturnType};
use tessera_core::wire::{ErrorCode, Invariant, ReduceOp};

use super::view::{floats, regions, MISSING};
use super::{held, lane_id, layers, Prepared};
use crate::arena::{Arena, Block, Owner};
use crate::broken;
use crate::fifo::Fifos;
use crate::phase::phase;

/// Everything a step touches.
#[derive(Debug)]
pub struct StepContext<'d, 'a> {
    /// The device memory.
    pub arena: &'d mut Arena<'a>,
    /// The device FIFOs.
    pub fifos: &'d mut Fifos,
    /// Each lane's RNG, lane by lane (at least as many as the program's lanes).
    pub rngs: &'d mut [Rng],
    /// The prepared program.
    pub prepared: &'d Prepared,
    /// Learning rate and momentum, as the host last set them.
    pub optimizer: (f32, f32),
}

/// Where a step stands between two of its legs: the batch under way, what comes next in
/// it, and the work done so far. A step runs leg by leg ([`advance`]); each leg but the
/// last ends at an exchange, whose answer starts the next one. Between
/// legs the device is free: it serves other messages, and no state lives on its stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    batch: u32,
    at: At,
    work: u64,
}

/// What comes next in a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// Its whole variables loaded from what the replica holds.
    Start,
    /// Its exchange `j`: sent, its answer awaited.
    Exchange(usize),
    /// Its micro-batches, then the gradients scaled to a mean.
    Compute,
    /// The optimizer.
    Update,
}

impl Cursor {
    /// A step about to start.
    pub const fn new() -> Self {
        Self {
            batch: 0,
            at: At::Start,
            work: 0,
        }
    }
}

impl Default for Cursor {
    fn default() -> Self {
        Self::new()
    }
}

/// How a leg of a step ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leg {
    /// Exchange `round` of the step (counted from its first): elements `span` of the
    /// scratch block combined by `op` across their groups. The step goes on once
    /// [`advance`] is given the combination.
    Exchange {
        /// The exchange's number in the step.
        round: u32,
        /// How to combine.
        op: ReduceOp,
        /// Its elements in the scratch block.
        span: Range<usize>,
    },
    /// The step is over, with this much work done (see the module documentation).
    Done {
        /// Multiply-adds.
        work: u64,
    },
}

/// Runs the step from `cursor` to its next exchange or its end; `answer`, when given, is
/// the combination of the exchange `cursor` waits on, put in its place first (lane 0's
/// part: one combination answers every lane). At an exchange it stops and says which: only
/// an answer moves past one. A combination of another length than one lane's part of its
/// exchange is refused ([`ErrorCode::UnexpectedReduced`]) and changes nothing.
pub fn advance(
    ctx: StepContext<'_, '_>,
    cursor: &mut Cursor,
    answer: Option<&[u8]>,
) -> Result<Leg, ErrorCode> {
    let mut step = Step::new(ctx)?;
    let gathers = step.gather_exchanges();
    let per_batch = step.prepared.exchanges.len();
    if let Some(data) = answer {
        let At::Exchange(j) = cursor.at else {
            return Err(broken(Invariant::Round));
        };
        let Leg::Exchange { span, .. } = step.exchange(cursor.batch, j)? else {
            return Err(broken(Invariant::Round));
        };
        let _p = phase!("exchange");
        let lane = span.len() / step.prepared.lanes().max(1);
        let target = bytes(step.arena, step.block, span.start..span.start + lane)?;
        if !crate::copy_exact(target, data) {
            return Err(ErrorCode::UnexpectedReduced);
        }
        cursor.at = if j + 1 == gathers {
            At::Compute
        } else if j + 1 == per_batch {
            At::Update
        } else {
            At::Exchange(j + 1)
        };
    }
    loop {
        if cursor.batch >= step.prepared.program.batches_per_step {
            return Ok(Leg::Done { work: cursor.work });
        }
        cursor.at = match cursor.at {
            At::Start => {
                let _p = phase!("load");
                step.load_wholes()?;
                if gathers > 0 {
                    At::Exchange(0)
                } else {
                    At::Compute
                }
            }
            At::Exchange(j) => return step.exchange(cursor.batch, j),
            At::Compute => {
                {
                    let _p = phase!("backward");
                    step.zero_gradients()?;
                }
                // A pass at a time (see `scratch`): the chunk divides the accumulation.
                let chunk = step.prepared.scratch.chunk().max(1);
                for m in (0..step.prepared.program.accumulation).step_by(chunk) {
                    cursor.work += step.pass(cursor.batch, m)?;
                }
                {
                    let _p = phase!("backward");
                    step.scale_gradients()?;
                }
                if gathers < per_batch {
                    At::Exchange(gathers)
                } else {
                    At::Update
                }
            }
            At::Update => {
                let _p = phase!("update");
                cursor.work += step.update_variables()?;
                cursor.batch += 1;
                if cursor.batch == step.prepared.program.batches_per_step {
                    held::share_wholes(step.arena, step.prepared)?;
                }
                At::Start
            }
        };
    }
}

/// The stream the loss layer reads its labels or targets from.
fn loss_stream(prepared: &Prepared) -> Result<usize, ErrorCode> {
    match prepared.program.layers.last() {
        Some(Layer::SoftmaxCrossEntropy { labels: i } | Layer::MeanSquaredError { targets: i }) => {
            Ok(usize::from(*i))
        }
        _ => Err(broken(Invariant::LossLayer)),
    }
}

/// A step under way: what it touches and what it worked out before its first batch.
#[derive(Debug)]
struct Step<'d, 'a> {
    /// The device memory.
    arena: &'d mut Arena<'a>,
    /// The device FIFOs.
    fifos: &'d mut Fifos,
    /// Each lane's RNG.
    rngs: &'d mut [Rng],
    /// The prepared program.
    prepared: &'d Prepared,
    /// Learning rate and momentum.
    optimizer: (f32, f32),
    /// The step's scratch block.
    block: Block,
    /// The stream the loss layer reads.
    loss_stream: usize,
}

impl<'d, 'a> Step<'d, 'a> {
    /// The step's parts, with its scratch block and loss stream looked up.
    fn new(ctx: StepContext<'d, 'a>) -> Result<Self, ErrorCode> {
        let StepContext {
            arena,
            fifos,
            rngs,
            prepared,
            optimizer,
        } = ctx;
        let block = Some(prepared.placed.scratch)
            .filter(|b| b.owner == Owner::StepScratch && b.len == prepared.scratch.bytes())
            .ok_or(broken(Invariant::StepScratch))?;
        let rngs = rngs
            .get_mut(..prepared.lanes())
            .ok_or(broken(Invariant::Placement))?;
        Ok(Self {
            arena,
            fifos,
            rngs,
            prepared,
            optimizer,
            block,
            loss_stream: loss_stream(prepared)?,
        })
    }

    /// Exchanges of gathers at the start of each batch (core's rule puts a batch's gathers
    /// before its gradients, and never both in one exchange).
    fn gather_exchanges(&self) -> usize {
        let (rounds, exchanges) = (&self.prepared.rounds, &self.prepared.exchanges);
        exchanges
            .iter()
            .take_while(|e| matches!(rounds.get(e.rounds.start), Some(Reduction::Gather { .. })))
            .count()
    }

    /// Exchange `j` of batch `b`: the one span of the block its rounds lie in (see
    /// [`scratch`](super::scratch)), numbered from the step's first exchange.
    fn exchange(&self, b: u32, j: usize) -> Result<Leg, ErrorCode> {
        let exchanges = &self.prepared.exchanges;
        let e = exchanges.get(j).ok_or(broken(Invariant::Round))?;
        let rounds = self
            .prepared
            .rounds
            .get(e.rounds.clone())
            .unwrap_or_default();
        let span = self.prepared.scratch.span(rounds).ok_or(MISSING)?;
        if span.len().checked_mul(4) != e.bytes.checked_mul(self.prepared.lanes()) {
            return Err(MISSING);
        }
        let per_batch = exchanges.len() as u32; // At most 2·MAX_VARIABLES.
        let round = b
            .checked_mul(per_batch)
            .and_then(|n| n.checked_add(j as u32))
            .ok_or(broken(Invariant::Round))?;
        // Core's rule keeps one kind per exchange.
        let op = match rounds.first() {
            Some(Reduction::Gather { .. }) => ReduceOp::Sum,
            _ => ReduceOp::Avg,
        };
        Ok(Leg::Exchange { round, op, span })
    }

    /// Every trained variable made whole in the scratch block from what the replica holds
    /// (a shard is completed by the gather exchanges that follow): each lane's into its
    /// own whole when the variable is gathered, else lane 0's into the one every lane reads.
    fn load_wholes(&mut self) -> Result<(), ErrorCode> {
        let s = &self.prepared.scratch;
        for (i, _) in self.prepared.program.variables.iter().enumerate() {
            let i = i as u8; // At most MAX_VARIABLES.
            for lane in 0..s.full_lanes(i) {
                if let Some(full) = s.full_in(i, lane) {
                    held::load_whole(self.arena, self.prepared, self.block, (lane, i), full)?;
                }
            }
        }
        Ok(())
    }

    /// Every gradient set to zero, for the micro-batches to add to.
    fn zero_gradients(&mut self) -> Result<(), ErrorCode> {
        self.each_gradient(|g| g.fill(0.0))
    }

    /// `f`, which treats every element alike, on every lane's gradient of every trained
    /// variable in the scratch block. On a device of many lanes they lie back to back
    /// (lane by lane, variable by variable: the order an exchange carries them in), and
    /// `f` gets runs of them: one call where there would be one per lane and variable.
    fn each_gradient(&mut self, mut f: impl FnMut(&mut [f32])) -> Result<(), ErrorCode> {
        let s = &self.prepared.scratch;
        let (lanes, variables) = (self.prepared.lanes(), self.prepared.program.variables.len());
        let x = floats(self.arena, self.block)?;
        let mut run = 0..0;
        for lane in 0..lanes {
            for i in 0..variables {
                let Some(grad) = s.grad_in(i as u8, lane) else {
                    continue;
                };
                if !run.is_empty() && run.end == grad.start {
                    run.end = grad.end;
                } else {
                    let done = core::mem::replace(&mut run, grad);
                    f(x.get_mut(done).ok_or(broken(Invariant::Regions))?);
                }
            }
        }
        f(x.get_mut(run).ok_or(broken(Invariant::Regions))?);
        Ok(())
    }

    /// The pass of micro-batches `m…` of batch `b` of every lane (see `scratch`): one item
    /// (a micro-batch of samples) of every stream for each, the layers forward over all
    /// their rows, the losses, the layers backward, then each one's anchors in turn;
    /// returns the work one lane counts (its rows': every lane has as many).
    // Out of line: inlined into the step's leg, it took some 100 bytes more of flash.
    #[inline(never)]
    fn pass(&mut self, b: u32, m: u32) -> Result<u64, ErrorCode> {
        let chunk = self.prepared.scratch.chunk();
        let lanes = self.prepared.lanes();
        {
            let _p = phase!("load");
            for lane in 0..lanes {
                self.pop_streams(lane, chunk)?;
            }
        }
        let (arena, block, prepared) = (&mut *self.arena, self.block, self.prepared);
        let mut work = {
            let _p = phase!("forward");
            let work = layers::forward(arena, block, prepared, self.rngs)?;
            layers::loss(arena, block, prepared)?;
            work
        };
        work += {
            let _p = phase!("backward");
            layers::backward(arena, block, prepared)?
        };
        let _p = phase!("anchors");
        // Each anchor's FIFO gets its micro-batches' values in order (anchors are apart).
        for lane in 0..lanes {
            for (j, anchor) in prepared.program.anchors.iter().enumerate() {
                let fifo = lane_id(lane, ids::anchor_fifo(j as u8));
                if anchor.return_type == AnchorReturnType::All {
                    // Every micro-batch's values, in order: one push of the lane's rows.
                    let values = prepared.scratch.anchored(anchor.tensor);
                    let rows = (values.and_then(|v| prepared.scratch.lane_part(v, lane)))
                        .ok_or(MISSING)?;
                    self.fifos
                        .push_from(self.arena, fifo, block, rows.start * 4..rows.end * 4)?;
                    continue;
                }
                for i in 0..chunk {
                    self.write_anchor((j, fifo), anchor, (b, m + i as u32), (lane, i))?;
                }
            }
        }
        Ok(work)
    }

    /// Lane `lane`'s `chunk` items of the pass from every stream: the input and the loss's
    /// labels or targets into the lane's rows, any other stream's dropped. A stream's items
    /// go in one pop when they lie in one piece before the ring's end (always in FIFOs the
    /// host filled with a step's items from the ring's start: a pass's micro-batches then
    /// lie side by side in the scratch block as they do in the ring), else item by item (a
    /// host may have read the FIFO, so its items need not start where a pass's would).
    #[inline]
    fn pop_streams(&mut self, lane: usize, chunk: usize) -> Result<(), ErrorCode> {
        let (p, s) = (&self.prepared.program, &self.prepared.scratch);
        for (k, _) in p.streams.iter().enumerate() {
            let fifo = lane_id(lane, ids::stream_fifo(k as u8));
            // A stream no layer reads still moves on with the step.
            let region = if k == usize::from(p.input) {
                Some(s.act(0).ok_or(MISSING)?)
            } else if k == self.loss_stream {
                Some(s.target())
            } else {
                None
            };
            // The firmware's passes are of one micro-batch (it has no room to search for
            // wider ones): it has no use for the code of whole passes either.
            if !cfg!(feature = "firmware") && chunk > 1 {
                if let Some(item) = self.fifos.pop_in_one(fifo, chunk)? {
                    let rows = region.map(|r| s.lane_part(r, lane).ok_or(MISSING));
                    let rows = rows.transpose()?;
                    copy_items(self.arena, item, self.block, rows)?;
                    continue;
                }
            }
            for i in 0..chunk {
                let item = self.fifos.pop(fifo, 1)?;
                let rows = region.clone().map(|r| s.part(r, lane, i).ok_or(MISSING));
                let rows = rows.transpose()?;
                copy_items(self.arena, item, self.block, rows)?;
            }
        }
        Ok(())
    }

    /// Anchor `j` (filling FIFO `fifo`), `a`, after micro-batch `m` of batch `b` (the
    /// pass's `i`-th of lane `lane`): skipped, written, or added to the lane's sum
    /// (emitted and cleared when its rule says so).
    fn write_anchor(
        &mut self,
        (j, fifo): (usize, u16),
        a: &Anchor,
        (b, m): (u32, u32),
        (lane, i): (usize, usize),
    ) -> Result<(), ErrorCode> {
        let (p, s) = (&self.prepared.program, &self.prepared.scratch);
        let (arena, fifos, block) = (&mut *self.arena, &mut *self.fifos, self.block);
        let action = a.return_type.action(
            b as usize,
            m as usize,
            p.batches_per_step as usize,
            p.accumulation as usize,
        );
        let value = (s.anchored(a.tensor))
            .and_then(|v| s.part(v, lane, i))
            .ok_or(MISSING)?;
        match action {
            AnchorAction::Skip => {}
            AnchorAction::Write => {
                fifos.push_from(arena, fifo, block, value.start * 4..value.end * 4)?
            }
            AnchorAction::Accumulate { emit } => {
                let sum = s.sum(j, lane).ok_or(broken(Invariant::ScratchLayout))?;
                let [total, value] = regions(floats(arena, block)?, [sum.clone(), value])?;
                for (t, v) in total.iter_mut().zip(value.iter()) {
                    *t += *v;
                }
                if emit {
                    fifos.push_from(arena, fifo, block, sum.start * 4..sum.end * 4)?;
                    let total = floats(arena, block)?.get_mut(sum);
                    total.ok_or(broken(Invariant::Regions))?.fill(0.0);
                }
            }
        }
        Ok(())
    }

    /// The gradients divided by the batch's samples (the gradient exchanges that follow
    /// average them across each variable's group).
    fn scale_gradients(&mut self) -> Result<(), ErrorCode> {
        let p = &self.prepared.program;
        // The mean over the batch's samples: `accumulation` micro-batches of
        // `micro_batch_size` each.
        let scale = 1.0 / (p.accumulation as f32 * p.micro_batch_size as f32);
        self.each_gradient(|g| g.iter_mut().for_each(|g| *g *= scale))
    }

    /// The optimizer on every trained variable; returns the work.
    fn update_variables(&mut self) -> Result<u64, ErrorCode> {
        let mut work = 0u64;
        for (i, _) in self.prepared.program.variables.iter().enumerate() {
            if self.prepared.scratch.grad(i as u8).is_some() {
                work += held::update(
                    self.arena,
                    self.prepared,
                    self.block,
                    i as u8,
                    self.optimizer,
                )?;
            }
        }
        Ok(work)
    }
}

/// Elements `range` of the scratch block as bytes.
fn bytes<'x>(
    arena: &'x mut Arena<'_>,
    block: Block,
    range: Range<usize>,
) -> Result<&'x mut [u8], ErrorCode> {
    let x = floats(arena, block)?;
    let region = x.get_mut(range).ok_or(broken(Invariant::Regions))?;
    Ok(bytemuck::cast_slice_mut(region))
}

/// Items just popped (`from`, bytes `range` of its block) into elements `at` of the
/// scratch block (`None`: a stream no layer reads, dropped).
fn copy_items(
    arena: &mut Arena<'_>,
    (from, range): (Block, Range<usize>),
    block: Block,
    at: Option<Range<usize>>,
) -> Result<(), ErrorCode> {
    let Some(at) = at else {
        return Ok(());
    };
    let (source, x) = arena
        .pair_mut(from, block)
        .ok_or(broken(Invariant::BlockPair))?;
    let item = source.get(range).ok_or(broken(Invariant::FifoRing))?;
    let to = x.get_mut(at.start * 4..at.end * 4);
    if !to.is_some_and(|to| crate::copy_exact(to, item)) {
        return Err(broken(Invariant::ItemSize));
    }
    Ok(())
}
