//! The training step computed on the host in f64, replica by replica, as the devices do it
//! in f32: the check every run of the simulated accelerator is held to.

use std::fmt;

use tessera_core::grouping::ReplicaGrouping;
use tessera_core::rng::Rng;

use super::{ModelConfig, StepData};

/// A host-side copy of the model and of every replica's dropout RNG.
#[derive(Debug)]
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

/// Why device values cannot be compared with the reference: the self-check fails.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CheckError {
    /// The device returned a different number of values than the reference computed.
    LengthMismatch {
        /// Values from the device.
        device: usize,
        /// Values from the reference.
        reference: usize,
    },
    /// A NaN or an infinity on either side.
    NotFinite {
        /// Position of the first such value.
        index: usize,
        /// The device's value there.
        device: f32,
        /// The reference's value there.
        reference: f64,
    },
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::LengthMismatch { device, reference } => write!(
                f,
                "the device returned {device} values but the reference has {reference}"
            ),
            Self::NotFinite {
                index,
                device,
                reference,
            } => write!(
                f,
                "value {index} is not finite (device {}, reference {})",
                Number(device),
                Number(reference)
            ),
        }
    }
}

/// A value as written for people: plain when moderate, in exponent form otherwise.
struct Number<T>(T);

impl<T: Copy + Into<f64> + fmt::Display + fmt::LowerExp> fmt::Display for Number<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        let x: f64 = v.into();
        if x == 0.0 || !x.is_finite() || (1e-4..1e9).contains(&x.abs()) {
            write!(f, "{v}")
        } else {
            write!(f, "{v:e}")
        }
    }
}

impl std::error::Error for CheckError {}

/// Largest relative difference between device values and the reference, relative to
/// `1 + |reference|` so that values near zero compare absolutely.
///
/// A length mismatch, or a NaN or infinity on either side, is an error rather than a
/// number: such results never pass a tolerance by accident.
pub fn max_relative_error(device: &[f32], reference: &[f64]) -> Result<f64, CheckError> {
    if device.len() != reference.len() {
        return Err(CheckError::LengthMismatch {
            device: device.len(),
            reference: reference.len(),
        });
    }
    let mut largest = 0.0f64;
    for (index, (&d, &r)) in device.iter().zip(reference).enumerate() {
        if !d.is_finite() || !r.is_finite() {
            return Err(CheckError::NotFinite {
                index,
                device: d,
                reference: r,
            });
        }
        let error = (f64::from(d) - r).abs() / (1.0 + r.abs());
        // Finite inputs give a finite or infinite error, never NaN; `>` keeps an infinity.
        if error > largest {
            largest = error;
        }
    }
    Ok(largest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_on_either_side_is_an_error() {
        // f64::max would drop the NaN and report 0.
        let err = max_relative_error(&[f32::NAN, 1.0], &[5.0, 1.0]).unwrap_err();
        assert!(
            matches!(err, CheckError::NotFinite { index: 0, device, reference }
                if device.is_nan() && reference == 5.0),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(text.contains("value 0") && text.contains("NaN") && text.contains('5'));
        let err = max_relative_error(&[1.0, 2.0], &[1.0, f64::NAN]).unwrap_err();
        assert!(
            matches!(err, CheckError::NotFinite { index: 1, .. }),
            "{err}"
        );
    }

    #[test]
    fn infinity_is_an_error() {
        let err = max_relative_error(&[1.0, f32::INFINITY], &[1.0, 2.0]).unwrap_err();
        assert!(matches!(
            err,
            CheckError::NotFinite {
                index: 1,
                reference,
                ..
            } if reference == 2.0
        ));
        assert!(err.to_string().contains("inf"), "{err}");
        let err = max_relative_error(&[f32::INFINITY], &[8.0e38]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "value 0 is not finite (device inf, reference 8e38)"
        );
        assert!(max_relative_error(&[1.0], &[f64::NEG_INFINITY]).is_err());
    }

    #[test]
    fn length_mismatch_is_an_error() {
        let err = max_relative_error(&[1.0, 2.0, 3.0], &[1.0, 2.0]).unwrap_err();
        assert_eq!(
            err,
            CheckError::LengthMismatch {
                device: 3,
                reference: 2
            }
        );
        let text = err.to_string();
        assert!(text.contains('3') && text.contains('2'), "{text}");
        assert!(max_relative_error(&[], &[1.0]).is_err());
    }

    #[test]
    fn finite_values_give_the_largest_relative_error() {
        assert_eq!(max_relative_error(&[], &[]), Ok(0.0));
        assert_eq!(max_relative_error(&[1.0, 2.0], &[1.0, 2.0]), Ok(0.0));
        // |3 − 1| / (1 + 1) = 1 beats |0.5 − 0| / 1 = 0.5.
        assert_eq!(max_relative_error(&[0.5, 3.0], &[0.0, 1.0]), Ok(1.0));
        assert_eq!(max_relative_error(&[-1.0], &[1.0]), Ok(1.0));
    }
}
