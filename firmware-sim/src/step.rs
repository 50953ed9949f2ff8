//! The training step: a linear model `y = W·x` trained with SGD.
//!
//! For each batch: every micro-batch pops `x` and a target `t`, applies input dropout
//! drawn from the replica's RNG, computes `y = W·x`, writes the loss `½‖y − t‖²` to the
//! loss FIFO and accumulates the gradient `(y − t)·xᵀ`. After `accumulation` micro-batches
//! the gradient is averaged, averaged again across the replica group through the host
//! (when the group has several replicas), and `W ← W − lr·grad`.

use tessera_core::wire::{ErrorCode, ReduceOp, StepConfig};

use crate::arena::{Arena, Block, Owner};
use crate::fifo::Fifos;
use crate::rng::Rng;

/// Asks the host to combine a buffer across the replica group, in place.
pub trait Reducer {
    /// Replaces `data` (f32, little-endian) with the group's combination; `round` numbers
    /// the reductions of one step.
    fn reduce(&mut self, round: u32, op: ReduceOp, data: &mut [u8]) -> Result<(), ErrorCode>;
}

/// A reducer for devices that are alone in their group.
#[derive(Debug)]
pub struct NoReduce;

impl Reducer for NoReduce {
    fn reduce(&mut self, _: u32, _: ReduceOp, _: &mut [u8]) -> Result<(), ErrorCode> {
        Err(ErrorCode::ReduceTimeout)
    }
}

/// Scratch layout in f32 elements: gradient, then x, target and y.
fn scratch_len(c: &StepConfig) -> usize {
    let (i, o) = (usize::from(c.inputs), usize::from(c.outputs));
    (o * i + i + 2 * o) * 4
}

/// Checks `config` against the slots and FIFOs it names and allocates its scratch.
pub fn configure(
    arena: &mut Arena<'_>,
    fifos: &Fifos,
    config: &StepConfig,
) -> Result<(), ErrorCode> {
    let (i, o) = (usize::from(config.inputs), usize::from(config.outputs));
    let weights = arena
        .find(Owner::Variable(config.weights))
        .ok_or(ErrorCode::UnknownId { id: config.weights })?;
    let item = |id: u16| fifos.get(id).map(|f| f.item_bytes);
    let fits = weights.len == o * i * 4
        && item(config.input_fifo)? == i * 4
        && item(config.target_fifo)? == o * 4
        && item(config.loss_fifo)? == 4
        && config.batches_per_step > 0
        && config.accumulation > 0
        && config.group_size > 0
        && (0.0..1.0).contains(&config.dropout);
    if !fits {
        return Err(ErrorCode::BadConfig);
    }
    arena.free_block(Owner::StepScratch);
    arena.alloc(Owner::StepScratch, scratch_len(config))?;
    Ok(())
}

/// Everything a step touches.
#[derive(Debug)]
pub struct StepContext<'d, 'a> {
    /// The device memory.
    pub arena: &'d mut Arena<'a>,
    /// The device FIFOs.
    pub fifos: &'d mut Fifos,
    /// The replica's RNG.
    pub rng: &'d mut Rng,
    /// Learning rate.
    pub learning_rate: f32,
}

/// Runs one step; returns the work done, in multiply-adds.
pub fn run(
    ctx: StepContext<'_, '_>,
    config: &StepConfig,
    reducer: &mut dyn Reducer,
) -> Result<u64, ErrorCode> {
    let StepContext {
        arena,
        fifos,
        rng,
        learning_rate,
    } = ctx;
    let (ni, no) = (usize::from(config.inputs), usize::from(config.outputs));
    let weights = arena
        .find(Owner::Variable(config.weights))
        .ok_or(ErrorCode::NotConfigured)?;
    let scratch = arena
        .find(Owner::StepScratch)
        .ok_or(ErrorCode::NotConfigured)?;
    if weights.len != no * ni * 4 || scratch.len != scratch_len(config) {
        return Err(ErrorCode::NotConfigured);
    }
    let (grad_end, x_end) = (no * ni * 4, (no * ni + ni) * 4);
    let mut work = 0u64;
    for batch in 0..u32::from(config.batches_per_step) {
        arena.bytes_mut(scratch)[..grad_end].fill(0);
        for _ in 0..config.accumulation {
            pop_into(arena, fifos, config.input_fifo, scratch, grad_end)?;
            pop_into(arena, fifos, config.target_fifo, scratch, x_end)?;
            let (w, s) = arena
                .pair_mut(weights, scratch)
                .ok_or(ErrorCode::NotConfigured)?;
            let w: &[f32] = bytemuck::try_cast_slice(w).map_err(|_| ErrorCode::NotConfigured)?;
            let s: &mut [f32] =
                bytemuck::try_cast_slice_mut(s).map_err(|_| ErrorCode::NotConfigured)?;
            let (grad, rest) = s.split_at_mut(no * ni);
            let (x, rest) = rest.split_at_mut(ni);
            let (t, y) = rest.split_at_mut(no);
            if config.dropout > 0.0 {
                let keep_scale = 1.0 / (1.0 - config.dropout);
                for v in x.iter_mut() {
                    *v = if rng.next_f32() < config.dropout {
                        0.0
                    } else {
                        *v * keep_scale
                    };
                }
            }
            let mut loss = 0.0f32;
            for (o, (y_o, t_o)) in y.iter_mut().zip(t.iter()).enumerate() {
                let row = &w[o * ni..(o + 1) * ni];
                *y_o = row.iter().zip(x.iter()).map(|(a, b)| a * b).sum();
                let e = *y_o - t_o;
                loss += 0.5 * e * e;
                for (g, xi) in grad[o * ni..(o + 1) * ni].iter_mut().zip(x.iter()) {
                    *g += e * xi;
                }
            }
            work += 2 * (no * ni) as u64;
            fifos.push(arena, config.loss_fifo, &loss.to_le_bytes())?;
        }
        let grad_bytes = &mut arena.bytes_mut(scratch)[..grad_end];
        scale_in_place(grad_bytes, 1.0 / f32::from(config.accumulation));
        if config.group_size > 1 {
            reducer.reduce(batch, ReduceOp::Mean, grad_bytes)?;
        }
        let (w, s) = arena
            .pair_mut(weights, scratch)
            .ok_or(ErrorCode::NotConfigured)?;
        let w: &mut [f32] =
            bytemuck::try_cast_slice_mut(w).map_err(|_| ErrorCode::NotConfigured)?;
        let grad: &[f32] =
            bytemuck::try_cast_slice(&s[..grad_end]).map_err(|_| ErrorCode::NotConfigured)?;
        for (w, g) in w.iter_mut().zip(grad) {
            *w -= learning_rate * g;
        }
        work += (no * ni) as u64;
    }
    Ok(work)
}

/// Pops one item of FIFO `fifo` into `scratch` at byte `at`.
fn pop_into(
    arena: &mut Arena<'_>,
    fifos: &mut Fifos,
    fifo: u16,
    scratch: Block,
    at: usize,
) -> Result<(), ErrorCode> {
    let (block, range) = fifos.pop(arena, fifo)?;
    let (from, to) = arena
        .pair_mut(block, scratch)
        .ok_or(ErrorCode::NotConfigured)?;
    let item = from.get(range).ok_or(ErrorCode::NotConfigured)?;
    to.get_mut(at..at + item.len())
        .ok_or(ErrorCode::BadConfig)?
        .copy_from_slice(item);
    Ok(())
}

fn scale_in_place(bytes: &mut [u8], factor: f32) {
    if let Ok(values) = bytemuck::try_cast_slice_mut::<u8, f32>(bytes) {
        values.iter_mut().for_each(|v| *v *= factor);
    }
}
