//! The training step computed on the host in f64, replica by replica, as the devices do it
//! in f32: the check every run of the simulated accelerator is held to.

use tessera_core::grouping::ReplicaGrouping;
use tessera_firmware_sim::rng::Rng;

use super::{ModelConfig, StepData};

/// A host-side copy of the model and of every replica's dropout RNG.
pub struct Reference {
    model: ModelConfig,
    grouping: ReplicaGrouping,
    /// One weight matrix per group, `outputs × inputs`, row-major.
    weights: Vec<Vec<f64>>,
    rngs: Vec<Rng>,
}

impl Reference {
    /// Starts from the host weights `initial` (one row per group) and the replicas' RNGs
    /// for `seed`.
    pub fn new(model: ModelConfig, grouping: ReplicaGrouping, seed: u64, initial: &[f32]) -> Self {
        let n = model.inputs * model.outputs;
        let weights = initial
            .chunks(n.max(1))
            .map(|row| row.iter().map(|&v| f64::from(v)).collect())
            .collect();
        let rngs = (0..grouping.replicas())
            .map(|r| Rng::for_replica(seed, r as u32))
            .collect();
        Self {
            model,
            grouping,
            weights,
            rngs,
        }
    }

    /// One step on `data`; returns the losses in user order `[bps, af, replicas]`.
    pub fn step(&mut self, data: &StepData<'_>) -> Vec<f64> {
        let ModelConfig {
            inputs: ni,
            outputs: no,
            batches_per_step,
            accumulation,
            learning_rate,
            dropout,
        } = self.model;
        let replicas = self.grouping.replicas();
        let mut losses = vec![0.0; batches_per_step * accumulation * replicas];
        for b in 0..batches_per_step {
            let mut grads = vec![vec![0f64; ni * no]; replicas];
            for (r, grad) in grads.iter_mut().enumerate() {
                let w = &self.weights[self.grouping.group_of(r).unwrap_or(0)];
                for m in 0..accumulation {
                    let sample = (b * accumulation + m) * replicas + r;
                    let x: Vec<f64> = data.inputs[sample * ni..(sample + 1) * ni]
                        .iter()
                        .map(|&v| {
                            // The same draws, in the same order, as the device.
                            let dropped = dropout > 0.0 && self.rngs[r].next_f32() < dropout;
                            if dropped {
                                0.0
                            } else {
                                f64::from(v) / (1.0 - f64::from(dropout))
                            }
                        })
                        .collect();
                    let t = &data.targets[sample * no..(sample + 1) * no];
                    let mut loss = 0.0;
                    for o in 0..no {
                        let y: f64 = (0..ni).map(|i| w[o * ni + i] * x[i]).sum();
                        let e = y - f64::from(t[o]);
                        loss += 0.5 * e * e;
                        for i in 0..ni {
                            grad[o * ni + i] += e * x[i] / accumulation as f64;
                        }
                    }
                    losses[sample] = loss;
                }
            }
            for (g, w) in self.weights.iter_mut().enumerate() {
                let members: Vec<usize> = self
                    .grouping
                    .members(g)
                    .map(Iterator::collect)
                    .unwrap_or_default();
                for (k, wk) in w.iter_mut().enumerate() {
                    let mean =
                        members.iter().map(|&r| grads[r][k]).sum::<f64>() / members.len() as f64;
                    *wk -= f64::from(learning_rate) * mean;
                }
            }
        }
        losses
    }

    /// The weights, one row per group.
    pub fn weights(&self) -> Vec<f64> {
        self.weights.concat()
    }
}

/// Largest relative difference between device values and the reference, relative to
/// `1 + |reference|` so that values near zero compare absolutely.
pub fn max_relative_error(device: &[f32], reference: &[f64]) -> f64 {
    device
        .iter()
        .zip(reference)
        .map(|(&d, &r)| (f64::from(d) - r).abs() / (1.0 + r.abs()))
        .fold(0.0, f64::max)
}
