//! A program's training computed on the host in `f64`, replica by replica, as the devices
//! compute it in `f32`: the reference every run of the simulated accelerator is held to.
//!
//! It follows the device's step exactly in everything but precision: the same samples per
//! replica (sample `j·R + r`, or `j` when broadcast), the same dropout draws from each
//! replica's generator (core's [`Rng`], seeded by core's rule) in the same order, gradients
//! divided by the accumulation factor and averaged over each variable's group, the same
//! optimizer, and the anchors by their return type's rule. Sharding changes where values
//! live, never what they are, so the reference holds each variable whole, once per group.

use std::collections::BTreeMap;

use tessera_core::dtype::DataType;
use tessera_core::grouping::{ReplicaGrouping, RetrievalMode};
use tessera_core::program::{elements, AnchorTensor, Layer, Optimizer, Program};
use tessera_core::rng::Rng;
use tessera_core::stream::{AnchorAction, DataFlow};

use super::{RuntimeError, StepIo, WeightsIo};

/// The reference's values by name, flat, in the runtime's order and shape.
pub type Values = BTreeMap<String, Vec<f64>>;

/// One variable: its grouping and one whole value (and velocity) per group.
#[derive(Debug, Clone)]
struct Variable {
    name: String,
    grouping: ReplicaGrouping,
    retrieval: RetrievalMode,
    values: Vec<Vec<f64>>,
    velocity: Vec<Vec<f64>>,
}

impl Variable {
    /// The value replica `r` sees: its group's.
    fn value_of(&self, r: usize) -> &[f64] {
        &self.values[self.grouping.group_of(r).unwrap_or(0)]
    }
}

/// The host's copy of a program's training.
#[derive(Debug)]
pub struct Reference {
    program: Program,
    replicas: usize,
    flow: DataFlow,
    variables: Vec<Variable>,
    rngs: Vec<Rng>,
    learning_rate: f64,
    momentum: f64,
}

impl Reference {
    /// Starts from `weights` (host shapes, as the runtime takes them; variables not named
    /// start at zero) and the replicas' generators for `seed`.
    pub fn new(
        program: &Program,
        replicas: usize,
        seed: u64,
        weights: &WeightsIo,
    ) -> Result<Self, RuntimeError> {
        program.check(replicas)?;
        let flow = program
            .data_flow()
            .map_err(|e| RuntimeError::Program(tessera_core::program::ProgramError::DataFlow(e)))?;
        let mut variables = Vec::with_capacity(program.variables.len());
        for (i, v) in program.variables.iter().enumerate() {
            let settings = program.settings(i, replicas)?;
            let grouping = *settings.grouping();
            let n = elements(&v.shape).unwrap_or(0);
            let groups = grouping.num_groups();
            let values = vec![vec![0.0; n]; groups];
            variables.push(Variable {
                name: v.name.to_string(),
                grouping,
                retrieval: v.retrieval,
                velocity: vec![vec![0.0; n]; groups],
                values,
            });
        }
        let mut reference = Self {
            program: program.clone(),
            replicas,
            flow,
            variables,
            rngs: (0..replicas)
                .map(|r| Rng::for_replica(seed, r as u32))
                .collect(),
            learning_rate: f64::from(program.optimizer.learning_rate()),
            momentum: f64::from(program.optimizer.momentum()),
        };
        reference.set_weights(weights)?;
        Ok(reference)
    }

    /// One step on `io` (already accepted by the runtime); returns the anchors, each flat
    /// in the runtime's `[outputs, replicas, …]` order.
    pub fn step(&mut self, io: &StepIo) -> Result<Values, RuntimeError> {
        let p = self.program.clone();
        let replicas = self.replicas;
        let (bps, af) = (self.flow.batches_per_step(), self.flow.accumulation());
        let rows = p.micro_batch_size.max(1) as usize;
        let streams = stream_values(&p, io)?;
        let widths: Vec<usize> = p
            .anchors
            .iter()
            .map(|a| p.anchor_width(a.tensor).unwrap_or(0))
            .collect();
        let mut recorded = Recorded::new(&widths, replicas);
        for b in 0..bps {
            let mut grads: Vec<Vec<Vec<f64>>> = (0..replicas)
                .map(|_| {
                    self.variables
                        .iter()
                        .map(|v| vec![0.0; v.values[0].len()])
                        .collect()
                })
                .collect();
            for (r, replica_grads) in grads.iter_mut().enumerate() {
                for m in 0..af {
                    let micro = b * af + m;
                    // The micro-batch's samples in order, as the device computes its rows.
                    let (mut losses, mut outputs) = (Vec::with_capacity(rows), Vec::new());
                    for row in 0..rows {
                        let sample = |k: usize| streams[k].sample(micro, replicas, r, row, rows);
                        let (loss, output) = self.sample(r, replica_grads, sample);
                        losses.push(loss);
                        outputs.extend(output);
                    }
                    for (j, a) in p.anchors.iter().enumerate() {
                        let value: Vec<f64> = match a.tensor {
                            AnchorTensor::Loss => losses.clone(),
                            AnchorTensor::Output => outputs.clone(),
                        };
                        recorded.record(j, r, a.return_type.action(b, m, bps, af), value);
                    }
                }
            }
            // The mean over the batch's samples.
            self.update(&grads, (af * rows) as f64);
        }
        Ok(self.anchor_values(&widths, &recorded.written))
    }

    /// Each anchor's values written by every replica, `written[anchor][replica]`, laid out
    /// flat in the runtime's `[outputs, replicas, width]` order.
    fn anchor_values(&self, widths: &[usize], written: &[Vec<Vec<f64>>]) -> Values {
        let replicas = self.replicas;
        let mut anchors = Values::new();
        for (j, a) in self.program.anchors.iter().enumerate() {
            let w = widths[j];
            let items = self.flow.outputs_per_replica(Some(a.return_type));
            let mut out = vec![0.0; items * replicas * w];
            for (r, values) in written[j].iter().enumerate() {
                for (item, chunk) in values.chunks_exact(w.max(1)).enumerate() {
                    let row = item * replicas + r;
                    out[row * w..(row + 1) * w].copy_from_slice(chunk);
                }
            }
            anchors.insert(a.tensor.name().to_string(), out);
        }
        anchors
    }

    /// Optimizer values from host, as [`Runtime::set_optimizer`](super::Runtime::set_optimizer)
    /// sets them on the devices.
    pub fn set_optimizer(&mut self, optimizer: Optimizer) {
        self.learning_rate = f64::from(optimizer.learning_rate());
        self.momentum = f64::from(optimizer.momentum());
    }

    /// Starts the optimizer's state from `state` (host shapes, by variable name), as
    /// [`Runtime::optimizer_state_from_host`](super::Runtime::optimizer_state_from_host)
    /// does on the devices.
    pub fn set_optimizer_state(&mut self, state: &WeightsIo) -> Result<(), RuntimeError> {
        self.load(state, |v| &mut v.velocity)
    }

    /// Sets the weights from `weights` (host shapes, by variable name), as
    /// [`Runtime::weights_from_host`](super::Runtime::weights_from_host) does on the devices.
    pub fn set_weights(&mut self, weights: &WeightsIo) -> Result<(), RuntimeError> {
        self.load(weights, |v| &mut v.values)
    }

    /// Each named `f32` array (host shape: one row per group) into the rows `rows` picks.
    fn load(
        &mut self,
        arrays: &WeightsIo,
        rows: fn(&mut Variable) -> &mut Vec<Vec<f64>>,
    ) -> Result<(), RuntimeError> {
        for v in &mut self.variables {
            let Some(array) = arrays.get(&v.name) else {
                continue;
            };
            let name = v.name.clone();
            let target = rows(v);
            let n = target.first().map_or(0, Vec::len);
            let data = array.to_f32().unwrap_or_default();
            if array.dtype() != DataType::F32 || data.len() != n * target.len() {
                return Err(RuntimeError::Bytes {
                    name,
                    expected: n * target.len() * 4,
                    actual: array.bytes().len(),
                    what: "host buffer",
                });
            }
            for (row, chunk) in target.iter_mut().zip(data.chunks_exact(n.max(1))) {
                *row = chunk.iter().map(|&x| f64::from(x)).collect();
            }
        }
        Ok(())
    }

    /// Every replica's RNG state, concatenated in replica order.
    pub fn rng_state(&self) -> Vec<u32> {
        self.rngs.iter().flat_map(Rng::state).collect()
    }

    /// Sets every replica's RNG state from `RNG_WORDS × replicas` words.
    pub fn set_rng_state(&mut self, words: &[u32]) -> Result<(), RuntimeError> {
        let expected = super::RNG_WORDS * self.rngs.len();
        if words.len() != expected {
            return Err(RuntimeError::RngState {
                expected,
                actual: words.len(),
            });
        }
        for (rng, w) in self
            .rngs
            .iter_mut()
            .zip(words.chunks_exact(super::RNG_WORDS))
        {
            *rng = Rng::from_state([w[0], w[1], w[2], w[3]]);
        }
        Ok(())
    }

    /// Every variable in its host shape (one row per group), flat.
    pub fn host_weights(&self) -> Values {
        self.variables
            .iter()
            .map(|v| (v.name.clone(), v.values.concat()))
            .collect()
    }

    /// Every variable in its returned shape, flat.
    pub fn weights(&self) -> Values {
        self.variables
            .iter()
            .map(|v| {
                let rows: Vec<f64> = match v.retrieval {
                    RetrievalMode::OnePerGroup => v.values.concat(),
                    RetrievalMode::AllReplicas => (0..self.replicas)
                        .flat_map(|r| v.values[v.grouping.group_of(r).unwrap_or(0)].clone())
                        .collect(),
                };
                (v.name.clone(), rows)
            })
            .collect()
    }

    /// One sample of replica `r`: forward, loss, backward into `grads`; returns the loss and
    /// the loss layer's input.
    fn sample<'s>(
        &mut self,
        r: usize,
        grads: &mut [Vec<f64>],
        sample: impl Fn(usize) -> &'s [f64],
    ) -> (f64, Vec<f64>) {
        let last = self.program.layers.len() - 1; // Checked: the program ends in a loss.
        let (acts, masks) = self.forward(r, sample(usize::from(self.program.input)).to_vec());
        let output = acts[last].clone();
        let (loss, delta) = loss_and_delta(&self.program.layers[last], &output, &sample);
        self.backward(r, grads, &acts, &masks, delta);
        (loss, output)
    }

    /// Replica `r`'s layers before the loss, on `input`: every layer's input and, last, the
    /// loss layer's (`acts`), and the dropout masks drawn from its generator (`masks`; empty
    /// for the other layers).
    fn forward(&mut self, r: usize, input: Vec<f64>) -> (Vec<Vec<f64>>, Vec<Vec<f64>>) {
        let p = &self.program;
        let value = |i: u8| self.variables[usize::from(i)].value_of(r);
        let last = p.layers.len() - 1; // Checked: the program ends in a loss.
        let mut acts = vec![input];
        let mut masks = vec![Vec::new(); last];
        for (k, layer) in p.layers[..last].iter().enumerate() {
            let x = &acts[k];
            let y = match *layer {
                Layer::Linear { weight } => {
                    let w = value(weight);
                    w.chunks_exact(x.len().max(1))
                        .map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum())
                        .collect()
                }
                Layer::Bias { bias } => x.iter().zip(value(bias)).map(|(a, b)| a + b).collect(),
                Layer::Relu => x.iter().map(|&v| if v > 0.0 { v } else { 0.0 }).collect(),
                Layer::Dropout { rate } => {
                    let keep = 1.0 / (1.0 - f64::from(rate));
                    let rng = &mut self.rngs[r];
                    masks[k] = x
                        .iter()
                        .map(|_| if rng.next_f32() < rate { 0.0 } else { keep })
                        .collect();
                    x.iter().zip(&masks[k]).map(|(a, m)| a * m).collect()
                }
                Layer::SoftmaxCrossEntropy { .. } | Layer::MeanSquaredError { .. } => x.clone(),
            };
            acts.push(y);
        }
        (acts, masks)
    }

    /// Replica `r`'s layers before the loss, backwards from `delta` (the loss's gradient by
    /// its input) over `forward`'s `acts` and `masks`: each weight's and bias's gradient is
    /// added into `grads`.
    fn backward(
        &self,
        r: usize,
        grads: &mut [Vec<f64>],
        acts: &[Vec<f64>],
        masks: &[Vec<f64>],
        mut delta: Vec<f64>,
    ) {
        let p = &self.program;
        let value = |i: u8| self.variables[usize::from(i)].value_of(r);
        let last = p.layers.len() - 1; // Checked: the program ends in a loss.
        for (k, layer) in p.layers[..last].iter().enumerate().rev() {
            let x = &acts[k];
            delta = match *layer {
                Layer::Linear { weight } => {
                    let w = value(weight);
                    let g = &mut grads[usize::from(weight)];
                    let n = x.len().max(1);
                    for (o, &d) in delta.iter().enumerate() {
                        for (i, &xi) in x.iter().enumerate() {
                            g[o * n + i] += d * xi;
                        }
                    }
                    (0..x.len())
                        .map(|i| {
                            delta
                                .iter()
                                .enumerate()
                                .map(|(o, d)| d * w[o * n + i])
                                .sum()
                        })
                        .collect()
                }
                Layer::Bias { bias } => {
                    for (g, d) in grads[usize::from(bias)].iter_mut().zip(&delta) {
                        *g += d;
                    }
                    delta
                }
                Layer::Relu => delta
                    .iter()
                    .zip(&acts[k + 1])
                    .map(|(d, &y)| if y > 0.0 { *d } else { 0.0 })
                    .collect(),
                Layer::Dropout { .. } => delta.iter().zip(&masks[k]).map(|(d, m)| d * m).collect(),
                Layer::SoftmaxCrossEntropy { .. } | Layer::MeanSquaredError { .. } => delta,
            };
        }
    }

    /// Averages each trained variable's gradient over its groups and applies the
    /// optimizer.
    fn update(&mut self, grads: &[Vec<Vec<f64>>], accumulation: f64) {
        let (lr, momentum) = (self.learning_rate, self.momentum);
        for (i, v) in self.variables.iter_mut().enumerate() {
            if self.program.layer_of(i).is_none() {
                continue;
            }
            for g in 0..v.grouping.num_groups() {
                let members: Vec<usize> = v
                    .grouping
                    .members(g)
                    .map(Iterator::collect)
                    .unwrap_or_default();
                let velocity = self.program.optimizer.has_velocity();
                let (values, speeds) = (&mut v.values[g], &mut v.velocity[g]);
                for (k, (w, speed)) in values.iter_mut().zip(speeds.iter_mut()).enumerate() {
                    let mean = members
                        .iter()
                        .map(|&r| grads[r][i][k] / accumulation)
                        .sum::<f64>()
                        / members.len() as f64;
                    let step = if velocity {
                        *speed = momentum * *speed + mean;
                        *speed
                    } else {
                        mean
                    };
                    *w -= lr * step;
                }
            }
        }
    }
}

/// One stream's values for a step: `width` values per item (a micro-batch of samples), one
/// item per micro-batch when `broadcast`, one per micro-batch and replica otherwise.
struct StreamValues {
    width: usize,
    broadcast: bool,
    values: Vec<f64>,
}

impl StreamValues {
    /// Sample `row` (of `rows`) of replica `r`'s item of micro-batch `micro`: item
    /// `micro·replicas + r`, or `micro` when broadcast.
    fn sample(&self, micro: usize, replicas: usize, r: usize, row: usize, rows: usize) -> &[f64] {
        let at = if self.broadcast {
            micro
        } else {
            micro * replicas + r
        };
        let item = &self.values[at * self.width..(at + 1) * self.width];
        let per_sample = self.width / rows.max(1);
        &item[row * per_sample..(row + 1) * per_sample]
    }
}

/// Every stream of `p` in `io`, as `f64`s whatever its element type.
fn stream_values(p: &Program, io: &StepIo) -> Result<Vec<StreamValues>, RuntimeError> {
    p.streams
        .iter()
        .map(|s| {
            let array = io
                .get(s.name.as_str())
                .ok_or_else(|| RuntimeError::MissingStream {
                    name: s.name.to_string(),
                })?;
            let values = array
                .to_f64()
                .or_else(|| {
                    array
                        .to_f32()
                        .map(|v| v.iter().map(|&x| f64::from(x)).collect())
                })
                .or_else(|| {
                    array
                        .to_i32()
                        .map(|v| v.iter().map(|&x| f64::from(x)).collect())
                })
                .or_else(|| {
                    array
                        .to_i64()
                        .map(|v| v.iter().map(|&x| x as f64).collect())
                })
                .unwrap_or_default();
            Ok(StreamValues {
                width: elements(&s.sample).unwrap_or(0) * p.micro_batch_size.max(1) as usize,
                broadcast: s.broadcast,
                values,
            })
        })
        .collect()
}

/// Per anchor, per replica: the values written, and the running sum.
struct Recorded {
    written: Vec<Vec<Vec<f64>>>,
    sums: Vec<Vec<Vec<f64>>>,
}

impl Recorded {
    /// Nothing written yet and every sum at zero, for anchors `widths` wide.
    fn new(widths: &[usize], replicas: usize) -> Self {
        Self {
            written: vec![vec![Vec::new(); replicas]; widths.len()],
            sums: widths
                .iter()
                .map(|&w| vec![vec![0.0; w]; replicas])
                .collect(),
        }
    }

    /// Anchor `j`'s `value` on replica `r`, by its return type's `action`.
    fn record(&mut self, j: usize, r: usize, action: AnchorAction, value: Vec<f64>) {
        match action {
            AnchorAction::Skip => {}
            AnchorAction::Write => self.written[j][r].extend(value),
            AnchorAction::Accumulate { emit } => {
                for (s, v) in self.sums[j][r].iter_mut().zip(&value) {
                    *s += v;
                }
                if emit {
                    self.written[j][r].extend(self.sums[j][r].iter().copied());
                }
            }
        }
    }
}

/// The loss of the loss layer `layer` on its input `output`, and the loss's gradient by
/// `output`.
fn loss_and_delta<'s>(
    layer: &Layer,
    output: &[f64],
    sample: impl Fn(usize) -> &'s [f64],
) -> (f64, Vec<f64>) {
    match *layer {
        Layer::SoftmaxCrossEntropy { labels } => {
            let label = sample(usize::from(labels))[0] as usize;
            let max = output.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let exps: Vec<f64> = output.iter().map(|z| (z - max).exp()).collect();
            let total: f64 = exps.iter().sum();
            let mut d: Vec<f64> = exps.iter().map(|e| e / total).collect();
            d[label] -= 1.0;
            (-(output[label] - max - total.ln()), d)
        }
        Layer::MeanSquaredError { targets } => {
            let t = sample(usize::from(targets));
            let n = output.len().max(1) as f64;
            let loss = output
                .iter()
                .zip(t)
                .map(|(y, t)| (y - t) * (y - t))
                .sum::<f64>()
                / n;
            (
                loss,
                output
                    .iter()
                    .zip(t)
                    .map(|(y, t)| 2.0 * (y - t) / n)
                    .collect(),
            )
        }
        _ => (0.0, vec![0.0; output.len()]),
    }
}
