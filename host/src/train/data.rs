//! The data a training job learns from: an embedded synthetic task (interleaved spirals,
//! one arm per class) or the user's safetensors file.
//!
//! A dataset is `n` samples of `features` `f32` values and one label in `[0, classes)` each.
//! A file holds two tensors: `inputs`, `f32` shaped `[n, features]`, and `labels`, `int32`
//! or `int64` shaped `[n]` (int64 labels travel to the device through the stream's checked
//! `int64 → int32` conversion); `classes` is the largest label plus one.
//!
//! A file is read only when it is a regular file, and no further than its size
//! ([`crate::input`]). Every input must be finite: a NaN or an infinity is refused at load,
//! naming the tensor, the row (sample) and the column, instead of surfacing steps later as
//! a mismatch with the reference. [`Dataset::record`] fingerprints the samples, so that a
//! resumed run can tell it is given the data its checkpoint was trained on.

use std::path::{Path, PathBuf};

use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use tessera_core::dtype::DataType;
use tessera_core::rng::Rng;

use super::{MAX_CLASSES, MAX_SAMPLES};
use crate::array::{ArrayError, HostArray};
use crate::checkpoint::DataRecord;
use crate::input::{Input, InputError};

/// Features of the synthetic spirals: a point in the plane.
pub const SPIRAL_FEATURES: usize = 2;

/// Samples with their labels.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    /// `[n, features]`, row-major.
    pub inputs: Vec<f32>,
    /// `[n]`, each in `[0, classes)`.
    pub labels: Vec<i64>,
    /// Values per sample.
    pub features: usize,
    /// Number of classes.
    pub classes: usize,
    /// The labels' type in the source (`int32`, or `int64` from a file).
    pub label_type: DataType,
}

/// Why a data file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The file is not a regular file, or cannot be read.
    #[error("cannot read {0}")]
    Input(#[source] InputError),
    /// Spirals of classes or samples outside the bounds.
    #[error(
        "spirals have 2 to {MAX_CLASSES} classes and as many samples as classes to \
         {MAX_SAMPLES}, not {samples} samples of {classes} classes"
    )]
    Spirals {
        /// Samples asked for.
        samples: usize,
        /// Classes asked for.
        classes: usize,
    },
    /// The file is not safetensors.
    #[error("{} is not a safetensors file: {source}", .path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// Why.
        source: safetensors::SafeTensorError,
    },
    /// A tensor is missing or has the wrong type or shape.
    #[error("{}: tensor `{name}` must be {rule}", .path.display())]
    Tensor {
        /// The file.
        path: PathBuf,
        /// The tensor.
        name: &'static str,
        /// What it must be.
        rule: &'static str,
    },
    /// A batch's arrays could not be built.
    #[error("a batch of the data: {0}")]
    Shape(#[source] ArrayError),
    /// An input no run trains from: NaN, infinite, or of magnitude 2^64 or more.
    #[error(
        "{}: tensor `{tensor}` holds {value} at row {row}, column {column}; every input must be \
         finite and of magnitude below 2^64 (1.8e19)",
        .path.display()
    )]
    NotFinite {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: &'static str,
        /// The sample.
        row: usize,
        /// The feature.
        column: usize,
        /// The value.
        value: f32,
    },
    /// A label outside `[0, 65536)`, or fewer than two classes.
    #[error(
        "{}: labels must lie in [0, 65536) and name at least 2 classes (found {value})",
        .path.display()
    )]
    Labels {
        /// The file.
        path: PathBuf,
        /// The offending label (or the largest one).
        value: i64,
    },
}

impl Dataset {
    /// `samples` points on `classes` interleaved spirals, a little noise added, in a
    /// shuffled order; the same `seed` always gives the same data. `classes` is 2 to
    /// [`MAX_CLASSES`] and `samples` `classes` to [`MAX_SAMPLES`] (the command's bounds);
    /// others are [`DataError::Spirals`].
    pub fn spirals(samples: usize, classes: usize, seed: u64) -> Result<Self, DataError> {
        if !(2..=MAX_CLASSES).contains(&classes) || !(classes..=MAX_SAMPLES).contains(&samples) {
            return Err(DataError::Spirals { samples, classes });
        }
        let mut rng = Rng::from_seed(seed ^ 0x5350_4952_414c_5321);
        let mut points: Vec<([f32; 2], i64)> = (0..samples)
            .map(|i| {
                let class = i % classes.max(1);
                let t = (i / classes.max(1)) as f32 / (samples / classes.max(1)).max(1) as f32;
                let radius = 0.1 + 0.9 * t;
                let angle = 4.0 * t
                    + class as f32 * std::f32::consts::TAU / classes.max(1) as f32
                    + 0.2 * (rng.next_f32() - 0.5);
                ([radius * angle.cos(), radius * angle.sin()], class as i64)
            })
            .collect();
        // Fisher–Yates with the same generator: classes interleave in every step.
        for i in (1..points.len()).rev() {
            let j = (rng.next_u32() as usize) % (i + 1);
            points.swap(i, j);
        }
        Ok(Self {
            inputs: points.iter().flat_map(|(p, _)| *p).collect(),
            labels: points.iter().map(|&(_, l)| l).collect(),
            features: SPIRAL_FEATURES,
            classes,
            label_type: DataType::I32,
        })
    }

    /// The dataset in `path` (see the module documentation).
    pub fn load(path: &Path) -> Result<Self, DataError> {
        let bytes = Input::open(path)
            .and_then(Input::read_all)
            .map_err(DataError::Input)?;
        let file = SafeTensors::deserialize(&bytes).map_err(|source| DataError::Format {
            path: path.to_owned(),
            source,
        })?;
        let tensor_error = |name, rule| DataError::Tensor {
            path: path.to_owned(),
            name,
            rule,
        };
        let inputs = file
            .tensor("inputs")
            .map_err(|_| tensor_error("inputs", "present"))?;
        let [n, features] = inputs.shape()[..] else {
            return Err(tensor_error("inputs", "shaped [samples, features]"));
        };
        if inputs.dtype() != Dtype::F32 || n == 0 || features == 0 {
            return Err(tensor_error(
                "inputs",
                "float32 with at least one sample and feature",
            ));
        }
        let labels = file
            .tensor("labels")
            .map_err(|_| tensor_error("labels", "present"))?;
        if labels.shape() != [n] {
            return Err(tensor_error(
                "labels",
                "shaped [samples], as many as the inputs",
            ));
        }
        let (values, label_type) =
            label_values(&labels).ok_or_else(|| tensor_error("labels", "int32 or int64"))?;
        let classes = classes_of(path, &values)?;
        let inputs = finite_inputs(path, &inputs, features)?;
        Ok(Self {
            inputs,
            labels: values,
            features,
            classes,
            label_type,
        })
    }

    /// The sample count and a fingerprint of the samples (CRC-64 of the features per
    /// sample, every input's bits and every label), as a checkpoint records them.
    pub fn record(&self) -> DataRecord {
        const CRC64: crc::Crc<u64, crc::Table<16>> =
            crc::Crc::<u64, crc::Table<16>>::new(&crc::CRC_64_XZ);
        let mut digest = CRC64.digest();
        digest.update(&(self.features as u64).to_le_bytes());
        // Little-endian whatever the host: a checkpoint may move between machines.
        for v in &self.inputs {
            digest.update(&v.to_le_bytes());
        }
        for l in &self.labels {
            digest.update(&l.to_le_bytes());
        }
        DataRecord {
            samples: self.len() as u64,
            fingerprint: digest.finalize(),
        }
    }

    /// Samples held.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// True when it holds no sample.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// `count` samples from position `start` on, wrapping around: the inputs as `[count,
    /// features]` `f32` and the labels as `[count]` in the source's label type.
    pub fn batch(&self, start: usize, count: usize) -> Result<(HostArray, HostArray), ArrayError> {
        let mut positions = positions(count)?;
        positions.extend((0..count).map(|k| start.wrapping_add(k)));
        self.samples(positions)
    }

    /// The share of replicas `window` of a step of `micro_batches × replicas` items of
    /// `rows` samples from position `start` on: item `i = m·replicas + r` (the `rows`
    /// samples from `i·rows` on) for every micro-batch `m` and every replica `r` of the
    /// window, in that order (what one instance feeds its replicas).
    pub fn share(
        &self,
        start: usize,
        micro_batches: usize,
        replicas: usize,
        window: tessera_core::transfer::InstanceWindow,
        rows: usize,
    ) -> Result<(HostArray, HostArray), ArrayError> {
        let count = micro_batches
            .checked_mul(window.local)
            .and_then(|n| n.checked_mul(rows))
            .ok_or(ArrayError::Overflow)?;
        let mut positions = positions(count)?;
        positions.extend(
            (0..micro_batches)
                .flat_map(|m| (window.offset..window.offset + window.local).map(move |r| (m, r)))
                .flat_map(|(m, r)| {
                    (0..rows).map(move |row| {
                        let item = m.wrapping_mul(replicas).wrapping_add(r);
                        start.wrapping_add(item.wrapping_mul(rows).wrapping_add(row))
                    })
                }),
        );
        self.samples(positions)
    }

    /// The samples at `positions` (wrapping around the data).
    fn samples(&self, positions: Vec<usize>) -> Result<(HostArray, HostArray), ArrayError> {
        let n = self.len().max(1);
        let count = positions.len();
        let mut inputs = Vec::new();
        let mut labels = Vec::new();
        let values = count
            .checked_mul(self.features)
            .ok_or(ArrayError::Overflow)?;
        inputs
            .try_reserve_exact(values)
            .and_then(|()| labels.try_reserve_exact(count))
            .map_err(|_| ArrayError::HostMemory {
                bytes: values.saturating_mul(4),
            })?;
        for position in positions {
            let i = position % n;
            inputs.extend_from_slice(&self.inputs[i * self.features..(i + 1) * self.features]);
            labels.push(self.labels[i]);
        }
        let shape = [count as u32, self.features as u32];
        let inputs = HostArray::from_f32(&shape, &inputs)?;
        let labels = match self.label_type {
            DataType::I64 => HostArray::from_i64(&[count as u32], &labels)?,
            _ => {
                // Labels were checked to lie in [0, 65536) when the data was made.
                let narrow: Vec<i32> = labels.iter().map(|&l| l as i32).collect();
                HostArray::from_i32(&[count as u32], &narrow)?
            }
        };
        Ok((inputs, labels))
    }
}

/// Room for `count` sample positions: a count whose arrays' 32-bit shape cannot say it is
/// [`ArrayError::Overflow`], one the host cannot hold [`ArrayError::HostMemory`].
fn positions(count: usize) -> Result<Vec<usize>, ArrayError> {
    u32::try_from(count).map_err(|_| ArrayError::Overflow)?;
    let mut positions = Vec::new();
    positions
        .try_reserve_exact(count)
        .map_err(|_| ArrayError::HostMemory {
            bytes: count.saturating_mul(size_of::<usize>()),
        })?;
    Ok(positions)
}

/// The labels of `labels` as `i64`, and their type in the file; `None` unless they are
/// `int32` or `int64`.
fn label_values(labels: &TensorView<'_>) -> Option<(Vec<i64>, DataType)> {
    match labels.dtype() {
        Dtype::I32 => Some((
            labels
                .data()
                .chunks_exact(4)
                .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
            DataType::I32,
        )),
        Dtype::I64 => Some((
            labels
                .data()
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect(),
            DataType::I64,
        )),
        _ => None,
    }
}

/// The number of classes `labels` (of the file `path`) name: the largest label plus one,
/// once every label lies in `[0, 65536)` and there are at least two classes.
fn classes_of(path: &Path, labels: &[i64]) -> Result<usize, DataError> {
    let largest = labels.iter().copied().max().unwrap_or(0);
    if let Some(&bad) = labels.iter().find(|&&v| !(0..65536).contains(&v)) {
        return Err(DataError::Labels {
            path: path.to_owned(),
            value: bad,
        });
    }
    if largest < 1 {
        return Err(DataError::Labels {
            path: path.to_owned(),
            value: largest,
        });
    }
    Ok(largest as usize + 1)
}

/// The `float32` values of `inputs` (of the file `path`, `features` to a sample), once
/// every one may enter training (core's `finite` rule).
fn finite_inputs(
    path: &Path,
    inputs: &TensorView<'_>,
    features: usize,
) -> Result<Vec<f32>, DataError> {
    if let Some((at, value)) = tessera_core::finite::first_unfit(inputs.data()) {
        return Err(DataError::NotFinite {
            path: path.to_owned(),
            tensor: "inputs",
            row: at / features.max(1),
            column: at % features.max(1),
            value,
        });
    }
    Ok(inputs
        .data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches a generator that is not seeded (runs would not repeat) or classes that
    /// cluster in one part of the data (steps would see one class only).
    #[test]
    fn spirals_repeat_and_mix_their_classes() {
        let a = Dataset::spirals(300, 3, 7).unwrap();
        assert_eq!(a, Dataset::spirals(300, 3, 7).unwrap());
        assert_ne!(a, Dataset::spirals(300, 3, 8).unwrap());
        assert_eq!((a.len(), a.features, a.classes), (300, 2, 3));
        for class in 0..3 {
            let first_30 = a.labels[..30].iter().filter(|&&l| l == class).count();
            assert!(first_30 >= 3, "class {class}: {first_30} of 30");
        }
        assert!(a.inputs.iter().all(|v| v.is_finite() && v.abs() <= 1.2));
    }

    /// Catches a batch that does not wrap around, or labels of the wrong type.
    #[test]
    fn batches_wrap_around() {
        let a = Dataset::spirals(10, 2, 1).unwrap();
        let (x, l) = a.batch(8, 4).unwrap();
        assert_eq!(x.shape(), [4, 2]);
        assert_eq!(l.dtype(), DataType::I32);
        let labels = l.to_i32().unwrap();
        assert_eq!(i64::from(labels[2]), a.labels[0]);
        assert_eq!(x.to_f32().unwrap()[4..6], a.inputs[0..2]);
    }
}
