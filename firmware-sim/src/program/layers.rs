//! The model's layers over a pass's rows, in the step's scratch block: forward through the
//! layers before the loss, the loss and its gradient sample by sample, and backward, last
//! layer first, adding each weight's gradient. A pass holds every lane's rows, lane after
//! lane: one weight serves them all, while each lane's dropout draws from its own generator
//! and each lane's rows add into its own gradient (in order: the bits a device of its own
//! gives). Every tensor is a region of the block that
//! the scratch layout names ([`scratch`](super::scratch)); a region it lacks is a broken
//! layout, answered instead of a panic.

use core::ops::Range;

use tessera_core::program::Layer;
use tessera_core::rng::Rng;
use tessera_core::wire::{ErrorCode, Invariant};

use super::view::{floats, regions, MISSING};
use super::{math, narrow, Prepared};
use crate::arena::{Arena, Block};
use crate::broken;

/// The layers before the loss, in order; returns the work one lane counts (its rows':
/// every lane has as many).
pub(super) fn forward(
    arena: &mut Arena<'_>,
    block: Block,
    prepared: &Prepared,
    rngs: &mut [Rng],
) -> Result<u64, ErrorCode> {
    let (p, s) = (&prepared.program, &prepared.scratch);
    let x = floats(arena, block)?;
    let lanes = s.lanes().max(1);
    let mut work = 0u64;
    for (k, layer) in p.layers.iter().enumerate().take(s.last()) {
        let (a, y) = (s.act(k).ok_or(MISSING)?, s.act(k + 1).ok_or(MISSING)?);
        work += (y.len() / lanes) as u64;
        match *layer {
            Layer::Linear { weight } => {
                let [w, a, y] = regions(x, [s.full(weight).ok_or(MISSING)?, a, y])?;
                narrow::linear(w, a, y, s.rows());
                work += (w.len() * (s.rows() / lanes)) as u64;
            }
            Layer::Bias { bias } => {
                let [b, a, y] = regions(x, [s.full(bias).ok_or(MISSING)?, a, y])?;
                for (a, y) in rows(a, s.rows()).zip(rows_mut(y, s.rows())) {
                    math::bias(b, a, y);
                }
            }
            Layer::Relu => {
                let [a, y] = regions(x, [a, y])?;
                math::relu(a, y);
            }
            Layer::Dropout { rate } => {
                let mask = s.mask(k).ok_or(MISSING)?;
                for (lane, rng) in rngs.iter_mut().enumerate() {
                    let part = |r: &Range<usize>| s.lane_part(r.clone(), lane).ok_or(MISSING);
                    let [a, mask, y] = regions(x, [part(&a)?, part(&mask)?, part(&y)?])?;
                    math::dropout(rng, rate, a, mask, y);
                }
            }
            Layer::SoftmaxCrossEntropy { .. } | Layer::MeanSquaredError { .. } => {
                return Err(broken(Invariant::LossLayer))
            }
        }
    }
    Ok(work)
}

/// The loss layer, sample by sample: each sample's loss into the losses region, and the
/// gradient of its input.
pub(super) fn loss(
    arena: &mut Arena<'_>,
    block: Block,
    prepared: &Prepared,
) -> Result<(), ErrorCode> {
    let (p, s) = (&prepared.program, &prepared.scratch);
    let x = floats(arena, block)?;
    let last = s.last();
    let [y, t, dy, losses] = regions(
        x,
        [
            s.act(last).ok_or(MISSING)?,
            s.target(),
            s.delta(last).ok_or(MISSING)?,
            s.losses(),
        ],
    )?;
    let n = s.rows();
    let samples = rows(y, n).zip(rows(t, n)).zip(rows_mut(dy, n));
    for (((y, t), dy), loss) in samples.zip(losses.iter_mut()) {
        *loss = match p.layers.last() {
            Some(Layer::SoftmaxCrossEntropy { .. }) => {
                let label = t.first().map_or(-1, |l| l.to_bits() as i32);
                math::softmax_cross_entropy(y, label, dy).ok_or(ErrorCode::BadArguments)?
            }
            Some(Layer::MeanSquaredError { .. }) => math::mean_squared_error(y, t, dy),
            _ => return Err(broken(Invariant::LossLayer)),
        };
    }
    Ok(())
}

/// `x` as `n` rows (the samples of a pass).
fn rows(x: &[f32], n: usize) -> core::slice::ChunksExact<'_, f32> {
    x.chunks_exact((x.len() / n.max(1)).max(1))
}

/// `x` as `n` writable rows.
fn rows_mut(x: &mut [f32], n: usize) -> core::slice::ChunksExactMut<'_, f32> {
    x.chunks_exact_mut((x.len() / n.max(1)).max(1))
}

/// The layers before the loss, last first, adding each lane's rows to its gradients;
/// returns the work one lane counts.
pub(super) fn backward(
    arena: &mut Arena<'_>,
    block: Block,
    prepared: &Prepared,
) -> Result<u64, ErrorCode> {
    let (p, s) = (&prepared.program, &prepared.scratch);
    let x = floats(arena, block)?;
    let n = s.rows() / s.lanes().max(1);
    let mut work = 0u64;
    for (k, layer) in p.layers.iter().enumerate().take(s.last()).rev() {
        let (dy, dx) = (s.delta(k + 1).ok_or(MISSING)?, s.delta(k).ok_or(MISSING)?);
        work += (dx.len() / s.lanes().max(1)) as u64;
        match *layer {
            Layer::Linear { weight } => {
                let w = s.full(weight).ok_or(MISSING)?;
                let a = s.act(k).ok_or(MISSING)?;
                let passes = if k > 0 { 2 } else { 1 };
                work += (w.len() * passes * n) as u64;
                for lane in 0..s.lanes() {
                    let part = |r: &Range<usize>| s.lane_part(r.clone(), lane).ok_or(MISSING);
                    let g = s.grad_in(weight, lane).ok_or(MISSING)?;
                    let parts = [w.clone(), part(&a)?, part(&dy)?, g, part(&dx)?];
                    let [w, a, dy, g, dx] = regions(x, parts)?;
                    // Sample by sample, in order: the gradient sums as it would one sample
                    // per micro-batch. The input's gradient is needed only below the first
                    // layer.
                    let dx = Some(dx).filter(|_| k > 0);
                    narrow::linear_backward(w, a, dy, g, dx, n);
                }
            }
            Layer::Bias { bias } => {
                for lane in 0..s.lanes() {
                    let g = s.grad_in(bias, lane).ok_or(MISSING)?;
                    let dy = s.lane_part(dy.clone(), lane).ok_or(MISSING)?;
                    let [g, dy] = regions(x, [g, dy])?;
                    for dy in rows(dy, n) {
                        g.iter_mut().zip(dy.iter()).for_each(|(g, d)| *g += d);
                    }
                }
                let [dy, dx] = regions(x, [dy, dx])?;
                if !crate::copy_exact(dx, dy) {
                    return Err(broken(Invariant::Regions));
                }
            }
            Layer::Relu => {
                let [y, dy, dx] = regions(x, [s.act(k + 1).ok_or(MISSING)?, dy, dx])?;
                math::relu_backward(y, dy, dx);
            }
            Layer::Dropout { .. } => {
                let [mask, dy, dx] = regions(x, [s.mask(k).ok_or(MISSING)?, dy, dx])?;
                math::multiply(mask, dy, dx);
            }
            Layer::SoftmaxCrossEntropy { .. } | Layer::MeanSquaredError { .. } => {
                return Err(broken(Invariant::LossLayer))
            }
        }
    }
    Ok(work)
}
