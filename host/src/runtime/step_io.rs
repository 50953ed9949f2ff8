//! A training step from the user's arrays: sizes, conversion, one byte stream per replica
//! per stream, the step itself, and the anchors back.
//!
//! # Contract
//!
//! - Every run checks the step IO before anything moves: each name is a stream of the
//!   program, every stream is provided, and each array holds exactly
//!   `item × bps·af × replicas` elements (`× 1` for a broadcast stream), an item being a
//!   micro-batch: `B` samples back to back (`B` the program's micro-batch size), `replicas` being
//!   this instance's (its window of the global replicas: each instance feeds its own); a
//!   short array is an error naming the stream and the counts, on any run, never a panic.
//! - Each array is converted to its stream's type by core's [`convert_input`] (the same
//!   type, `int64 → int32` with every value checked, `uint8` read as an 8-bit float), and
//!   labels read by a cross-entropy are checked against its classes.
//! - Replica `r`'s `j`-th item of a stream is the user's item `j·R + r` (`j` for a
//!   broadcast stream): core's [`Splitter`] hands them out. Which item goes where, and
//!   which row of each anchor array a replica's anchored items fill, depend only on this
//!   instance's replicas, the data flow and the program's streams and anchors, none of
//!   which changes once a runtime is prepared: the splitter runs at the first `run` whose
//!   IO passes its checks, and its answer (a `SplitPlan`) serves every `run` after it
//!   ([`Runtime::run_with`] hands items out by replica and index, without it). Each
//!   replica's share of a stream is one span of its FIFO, written by the channel's data
//!   path (straight from the user's array into the device's memory where the host maps it:
//!   one copy on the host), every replica's sent before any reply is awaited. A replica
//!   whose shares all moved in place is not sent a `Wrote` per stream: its `RunStep` says
//!   it was fed (`fed: true`), and the device counts its FIFOs full by the same checks.
//! - A replica whose anchors were all read in place is not sent a `Took` per anchor: its
//!   next step's `RunStep` says they were taken (`took: true`), and the device drops them
//!   then, by the same checks. The step's `Done` vouches for the bytes read: a device ends a
//!   step well only with each anchor FIFO holding exactly its ring.
//! - Or through callbacks ([`Runtime::run_with`], PopART's callback step IO): the runtime
//!   asks for each item in the stream's own type and hands back each anchored value.
//! - Anchors come back as one array per anchored tensor (named as
//!   [`AnchorTensor::name`] says), shaped `[outputs, replicas, …tensor]` (with a
//!   micro-batch of `B > 1` samples, `[outputs, replicas, B, …tensor]`) where `outputs`
//!   is what the anchor's return type gives per replica per step; output `j` of replica `r`
//!   is row `j·R + r`, again as the splitter orders them.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use tessera_core::dtype::{convert_input, ConvertError, DataType};
use tessera_core::program::{ids, AnchorTensor, Layer};
use tessera_core::stream::{
    AnchorReturnType, SizeError, Splitter, StreamKind, StreamSpec, UpstreamIo,
};
use tessera_core::wire::Target;

use super::items;
use super::step_driver::{self, InPlace};
use super::{Runtime, RuntimeError, StepPhase, MAX_REPLICAS};
use crate::array::{AsView, HostArray};
use crate::trace::traced;
use crate::transport::{Seat, Span};

/// Anchored tensors by name.
pub type Anchors = BTreeMap<String, HostArray>;

/// A step's inputs and outputs through the user's code (PopART's callback step IO), for
/// [`Runtime::run_with`].
pub trait StepCallbacks {
    /// Writes item `index` (micro-batch order) of `stream` for local replica `replica`
    /// into `sample`: one micro-batch of samples (one sample when the program's micro-batch
    /// size is 1), in the stream's own type.
    fn input(&mut self, stream: &str, replica: usize, index: usize, sample: &mut [u8]);
    /// Takes value `index` (in the order the replica wrote them) of the anchored tensor
    /// `tensor` from local replica `replica` (`f32`, little-endian; a whole micro-batch's).
    fn output(&mut self, tensor: &str, replica: usize, index: usize, value: &[u8]);
}

/// Writes replica `r`'s share of stream `k` into `bytes` (`fill(r, k, bytes)`).
type Fill<'a> = dyn FnMut(usize, usize, &mut [u8]) + 'a;

/// Takes the values replica `r` wrote to anchor `j` (`take(j, r, bytes)`), each once.
type Take<'a> = dyn FnMut(usize, usize, &[u8]) + 'a;

/// Streams plus anchors the splitter tracks.
const TENSORS: usize = tessera_core::program::MAX_STREAMS + tessera_core::program::MAX_ANCHORS;

/// A step's splitter: sample and row indices for this instance's replicas.
type StepSplitter = Splitter<usize, TENSORS, MAX_REPLICAS, 1>;

/// Where a step's items go, as core's splitter orders them (module contract): the same at
/// every step of a runtime, so worked out once.
#[derive(Debug)]
pub(super) struct SplitPlan {
    /// `order[replica][stream]`: the user's items each local replica consumes, in order.
    order: Vec<Vec<Vec<usize>>>,
    /// `rows[anchor][replica]`: the rows of the anchor's array each local replica's items
    /// fill, in the order it wrote them.
    rows: Vec<Vec<Vec<usize>>>,
}

impl Runtime {
    /// Runs one training step on `io` (see the module's contract); returns the anchors.
    /// The arrays may be host arrays ([`StepIo`](super::StepIo)) or views of bytes the caller lends
    /// ([`AsView`]): each sample is copied once, from them into its device.
    pub fn run<A: AsView>(&mut self, io: &BTreeMap<String, A>) -> Result<Anchors, RuntimeError> {
        self.ready_for_step()?;
        let streams = self.device_streams(io)?;
        let plan = self.split_plan()?;
        // Each stream's item bytes and the user's data.
        let inputs: Vec<(usize, &[u8])> = (self.program.streams.iter())
            .zip(self.program.items())
            .zip(&streams)
            .map(|((s, &item), data)| (item * s.dtype.size(), &data[..]))
            .collect();
        // Each anchor's array, its values put in their rows as they are read: no copy per
        // replica between the device and the user.
        let mut outs: Vec<(usize, Vec<u8>)> = (self.program.anchors.iter())
            .map(|a| {
                let item_bytes = self.anchor_width(a.tensor) * 4;
                let items = self.flow.outputs_per_replica(Some(a.return_type));
                let bytes = items * self.window.local * item_bytes;
                let buffer = crate::pages::zeroed(bytes).map_err(|e| RuntimeError::HostMemory {
                    name: format!("{:?} anchor", a.tensor),
                    bytes: e.bytes,
                })?;
                Ok((item_bytes, buffer))
            })
            .collect::<Result<_, RuntimeError>>()?;
        self.step_bytes(
            &mut |r, k, into: &mut [u8]| {
                let (bytes, data) = inputs[k];
                items::gather(into, data, bytes, &plan.order[r][k]);
            },
            &mut |j, r, bytes| {
                let (item_bytes, out) = &mut outs[j];
                items::scatter(out, bytes, *item_bytes, &plan.rows[j][r]);
            },
        )?;
        let mut anchors = Anchors::new();
        for (j, (_, out)) in outs.into_iter().enumerate() {
            let (name, array) = self.anchor_array(j, out)?;
            anchors.insert(name, array);
        }
        Ok(anchors)
    }

    /// The step's split ([`SplitPlan`]): worked out by core's splitter at the first step,
    /// kept for the runtime's life (module contract).
    fn split_plan(&mut self) -> Result<Arc<SplitPlan>, RuntimeError> {
        if let Some(plan) = &self.split {
            return Ok(Arc::clone(plan));
        }
        // This instance's replicas: its arrays feed only them.
        let replicas = self.window.local;
        let mut splitter = StepSplitter::new(replicas, self.flow)?;
        let mut counters = Counters::default();
        let mut inputs = Vec::with_capacity(self.program.streams.len());
        for (s, &item) in self.program.streams.iter().zip(self.program.items()) {
            // One item: a micro-batch of samples.
            inputs.push(splitter.add_input(item, s.broadcast)?);
        }
        let mut outputs = Vec::with_capacity(self.program.anchors.len());
        for a in &self.program.anchors {
            let width = self.anchor_width(a.tensor);
            outputs.push((splitter.add_output(width, a.return_type)?, a.return_type));
        }
        let order = self.sample_order(&mut splitter, &mut counters, &inputs)?;
        let rows = outputs
            .iter()
            .map(|&output| self.anchor_rows(&mut splitter, &mut counters, output))
            .collect::<Result<_, _>>()?;
        let plan = Arc::new(SplitPlan { order, rows });
        self.split = Some(Arc::clone(&plan));
        Ok(plan)
    }

    /// Which of the user's samples each replica consumes (`order[replica][stream]`), stream
    /// by stream (`inputs`: each one's splitter tensor), in order: indices only, so that
    /// each sample's bytes are copied once, into the device.
    fn sample_order(
        &self,
        splitter: &mut StepSplitter,
        counters: &mut Counters,
        inputs: &[usize],
    ) -> Result<Vec<Vec<Vec<usize>>>, RuntimeError> {
        let replicas = self.window.local;
        let per_replica = self.flow.inputs_per_replica();
        let mut order = vec![vec![Vec::with_capacity(per_replica); inputs.len()]; replicas];
        let mut shared = vec![0usize; inputs.len()];
        for _ in 0..per_replica {
            for (r, order) in order.iter_mut().enumerate() {
                for (k, &tensor) in inputs.iter().enumerate() {
                    if self.program.streams[k].broadcast && r > 0 {
                        // A broadcast sample is fetched once, by replica 0, for every
                        // replica (the splitter serves it to replica 0 only).
                        order[k].push(shared[k]);
                        continue;
                    }
                    let i = splitter.next_input(counters, tensor, r)?;
                    shared[k] = i;
                    order[k].push(i);
                    splitter.input_complete(counters, tensor, r)?;
                }
            }
        }
        Ok(order)
    }

    /// The rows of an anchor's array (`output`: its splitter tensor and return type) that
    /// each replica's items fill, in the order the replica wrote them (`rows[replica]`).
    fn anchor_rows(
        &self,
        splitter: &mut StepSplitter,
        counters: &mut Counters,
        (tensor, return_type): (usize, AnchorReturnType),
    ) -> Result<Vec<Vec<usize>>, RuntimeError> {
        let replicas = self.window.local;
        let items = self.flow.outputs_per_replica(Some(return_type));
        let mut rows = vec![Vec::with_capacity(items); replicas];
        for _ in 0..items {
            for (r, rows) in rows.iter_mut().enumerate() {
                rows.push(splitter.output(counters, tensor, r)?);
                splitter.output_complete(counters, tensor, r)?;
            }
        }
        Ok(rows)
    }

    /// Anchor `j` as the user gets it, named, its bytes `out` (every item in its row:
    /// [`anchor_rows`](Self::anchor_rows)).
    fn anchor_array(&self, j: usize, out: Vec<u8>) -> Result<(String, HostArray), RuntimeError> {
        let a = self.program.anchors[j];
        let width = self.anchor_width(a.tensor);
        let replicas = self.window.local;
        let items = self.flow.outputs_per_replica(Some(a.return_type));
        let mut shape = vec![items as u32, replicas as u32];
        // A micro-batch of several samples: one row per sample (PopART's micro-batch axis).
        let samples = self.program.micro_batch_size.max(1);
        if samples > 1 {
            shape.push(samples);
        }
        if a.tensor == AnchorTensor::Output {
            shape.push((width / samples as usize) as u32);
        }
        let len = out.len();
        let array =
            HostArray::new(DataType::F32, &shape, out).map_err(|_| RuntimeError::Bytes {
                name: a.tensor.name().to_string(),
                expected: shape.iter().map(|&d| d as usize).product::<usize>() * 4,
                actual: len,
                what: "anchor",
            })?;
        Ok((a.tensor.name().to_string(), array))
    }

    /// Runs one training step with its inputs and outputs through `io`'s callbacks instead
    /// of arrays (see [`StepCallbacks`]): samples are asked for in micro-batch order, each
    /// local replica's in turn (once per micro-batch for a broadcast stream), and given in
    /// the stream's own type; anchored values are handed back in the order each replica
    /// wrote them. Labels are checked as for arrays.
    pub fn run_with(&mut self, io: &mut dyn StepCallbacks) -> Result<(), RuntimeError> {
        self.ready_for_step()?;
        let replicas = self.window.local;
        let p = self.program.clone();
        let per_replica = self.flow.inputs_per_replica();
        let mut shares = vec![vec![Vec::new(); p.streams.len()]; replicas];
        let mut sample = Vec::new();
        for m in 0..per_replica {
            for (k, (s, &item)) in p.streams.iter().zip(p.items()).enumerate() {
                let bytes = item * s.dtype.size();
                for (r, share) in shares.iter_mut().enumerate() {
                    if !s.broadcast || r == 0 {
                        sample.clear();
                        sample.resize(bytes, 0);
                        io.input(s.name.as_str(), r, m, &mut sample);
                    }
                    share[k].extend_from_slice(&sample);
                }
            }
        }
        if let Some(&Layer::SoftmaxCrossEntropy { labels }) = p.layers.last() {
            let classes = p.output_width();
            let name = p.streams[usize::from(labels)].name.as_str();
            for share in &shares {
                check_labels(name, &share[usize::from(labels)], classes)?;
            }
        }
        for (k, s) in p.streams.iter().enumerate() {
            for share in &shares {
                // Indexed within the replica's share of the step, flat.
                super::values::check(&s.name, "step input", s.dtype, &[], &share[k])?;
            }
        }
        let mut popped = vec![vec![Vec::new(); replicas]; p.anchors.len()];
        self.step_bytes(
            &mut |r, k, into: &mut [u8]| into.copy_from_slice(&shares[r][k]),
            &mut |j, r, bytes| popped[j][r] = bytes.to_vec(),
        )?;
        for (j, a) in p.anchors.iter().enumerate() {
            let item_bytes = self.anchor_width(a.tensor) * 4;
            for (r, bytes) in popped[j].iter().enumerate() {
                for (index, item) in bytes.chunks_exact(item_bytes.max(1)).enumerate() {
                    io.output(a.tensor.name(), r, index, item);
                }
            }
        }
        Ok(())
    }

    /// Feeds each local replica its share of each stream (`fill(replica, stream, bytes)`
    /// writes it, in the order the replica consumes it), runs the step, and reads every
    /// anchor (`take(anchor, replica, bytes)`: the values in the order the replica wrote
    /// them, each replica's of each anchor taken once, read in place where it can be). A
    /// failure in any phase is settled by [`recovery`](super::recovery)'s rule before it
    /// is returned.
    fn step_bytes(&mut self, fill: &mut Fill<'_>, take: &mut Take<'_>) -> Result<(), RuntimeError> {
        let _step = traced!("step");
        let feeding = traced!("feed");
        let fed = match self.feed(fill) {
            Ok(fed) => fed,
            Err(e) => return Err(self.step_failed(StepPhase::Feeding, e)),
        };
        drop(feeding);
        // Whatever happens next, the host's copy of the weights is no longer known good.
        self.weights_in_sync = false;
        let fault = self.fault.take();
        let batches = self.program.batches_per_step;
        // Reported by this step whatever becomes of it (a failed one resets the FIFOs).
        let took = std::mem::replace(&mut self.anchors_taken, vec![false; fed.len()]);
        let moved: Vec<InPlace> = (fed.into_iter().zip(took))
            .map(|(fed, took)| InPlace { fed, took })
            .collect();
        let step = step_driver::run_step(
            &mut self.channels,
            &moved,
            (&self.rounds, &mut self.kept_rounds),
            batches,
            &*self.instances,
            fault,
        );
        if let Err(e) = step {
            return Err(self.step_failed(StepPhase::Running, e));
        }
        let _collecting = traced!("collect");
        self.collect(take)
            .map_err(|e| self.step_failed(StepPhase::Collecting, e))
    }

    /// Writes each local replica's share of each stream into its FIFO (empty at a step's
    /// start, so each share starts at position 0), every replica's sent before any reply
    /// is awaited. Returns, per replica, whether its shares all moved in place unreported:
    /// its `RunStep` then reports them (`fed`).
    fn feed(&mut self, fill: &mut Fill<'_>) -> Result<Vec<bool>, RuntimeError> {
        let per_replica = self.flow.inputs_per_replica();
        let streams = self.program.streams.len();
        let one: Vec<(u16, usize)> = (self.program.streams.iter())
            .zip(self.program.items())
            .enumerate()
            .map(|(k, (s, &item))| {
                let fifo = ids::stream_fifo(k as u8); // At most MAX_STREAMS.
                (fifo, per_replica * item * s.dtype.size())
            })
            .collect();
        let mut sent = Vec::with_capacity(self.channels.len());
        let mut fed = Vec::with_capacity(self.channels.len());
        // Each device's lanes' FIFOs in one go: lane after lane, stream after stream.
        let mut first = 0;
        for channel in &mut self.channels {
            let lanes = channel.lanes();
            let fill = |i: usize, into: &mut [u8]| fill(first + i / streams, i % streams, into);
            let spans = lane_spans(&one, lanes)?;
            let (requests, in_place) = channel.write_step_inputs(&spans, fill)?;
            sent.push(requests);
            fed.push(in_place);
            first += lanes;
        }
        for (channel, sent) in self.channels.iter_mut().zip(sent) {
            channel.confirm(sent)?;
        }
        Ok(fed)
    }

    /// Reads every anchor of a finished step out of its FIFO, each replica's handed to
    /// `take`.
    fn collect(&mut self, take: &mut Take<'_>) -> Result<(), RuntimeError> {
        let anchors = self.program.anchors.len();
        let one: Vec<(u16, usize)> = (self.program.anchors.iter().enumerate())
            .map(|(j, a)| {
                let fifo = ids::anchor_fifo(j as u8); // At most MAX_ANCHORS.
                let values = self.flow.outputs_per_replica(Some(a.return_type));
                (fifo, values * self.anchor_width(a.tensor) * 4)
            })
            .collect();
        let mut readings = Vec::with_capacity(self.channels.len());
        let mut first = 0;
        for (c, channel) in self.channels.iter_mut().enumerate() {
            let lanes = channel.lanes();
            let lane = |i: usize, bytes: &[u8]| take(i % anchors, first + i / anchors, bytes);
            let (reading, took) = channel.read_step_outputs(&lane_spans(&one, lanes)?, lane)?;
            readings.push((reading, first));
            self.anchors_taken[c] = took;
            first += lanes;
        }
        for (channel, (reading, first)) in self.channels.iter_mut().zip(readings) {
            channel.finish_read(reading, |i, bytes| {
                take(i % anchors, first + i / anchors, bytes)
            })?;
        }
        Ok(())
    }

    /// Elements of one value of an anchored tensor.
    fn anchor_width(&self, tensor: AnchorTensor) -> usize {
        // Checked at prepare: a program's output has a width.
        self.program.anchor_width(tensor)
    }

    /// Checks `io` and gives each array's bytes in its stream's type, in stream order: an
    /// array already of that type as it is (no copy), any other converted.
    fn device_streams<'io, A: AsView>(
        &mut self,
        io: &'io BTreeMap<String, A>,
    ) -> Result<Vec<Cow<'io, [u8]>>, RuntimeError> {
        let p = &self.program;
        let specs: Vec<StreamSpec<'_>> = (p.streams.iter())
            .zip(p.items())
            .map(|(s, &item)| StreamSpec {
                name: s.name.as_str(),
                sample_elements: item,
                kind: StreamKind::Input {
                    broadcast: s.broadcast,
                },
            })
            .collect();
        let provided: Vec<(&str, usize)> = io
            .iter()
            .map(|(name, array)| (name.as_str(), array.view().elements()))
            .collect();
        self.flow
            .check_sizes(self.window.local, &specs, &provided)
            .map_err(size_error)?;
        let labels = match p.layers.last() {
            Some(&Layer::SoftmaxCrossEntropy { labels }) => Some(usize::from(labels)),
            _ => None,
        };
        let classes = p.output_width();
        let mut out = Vec::with_capacity(p.streams.len());
        for (i, s) in p.streams.iter().enumerate() {
            let name = s.name.as_str();
            let Some(array) = io.get(name).map(AsView::view) else {
                return Err(RuntimeError::MissingStream {
                    name: name.to_string(),
                });
            };
            let data = if array.dtype() == s.dtype {
                Cow::Borrowed(array.bytes())
            } else {
                let mut data = vec![0u8; array.elements() * s.dtype.size()];
                convert_input(name, array.dtype(), array.bytes(), s.dtype, &mut data)
                    .map_err(convert_error)?;
                self.converted += data.len() as u64;
                Cow::Owned(data)
            };
            if labels == Some(i) {
                check_labels(name, &data, classes)?;
            }
            super::values::check(name, "step input", s.dtype, array.shape(), &data)?;
            out.push(data);
        }
        Ok(out)
    }
}

/// Every `i32` label in `[0, classes)`.
fn check_labels(name: &str, data: &[u8], classes: usize) -> Result<(), RuntimeError> {
    for (index, bytes) in data.chunks_exact(4).enumerate() {
        let value = i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        if usize::try_from(value).map_or(true, |v| v >= classes) {
            return Err(RuntimeError::Label {
                name: name.to_string(),
                index,
                value: i64::from(value),
                classes,
            });
        }
    }
    Ok(())
}

fn size_error(e: SizeError<'_>) -> RuntimeError {
    match e {
        SizeError::UnknownTensor { tensor } => RuntimeError::UnknownTensor {
            name: tensor.to_string(),
            expected: "stream",
        },
        SizeError::Missing { tensor } => RuntimeError::MissingStream {
            name: tensor.to_string(),
        },
        SizeError::Mismatch {
            tensor,
            expected,
            received,
            sample,
            per_replica,
            replicas,
            ..
        } => RuntimeError::Elements {
            name: tensor.to_string(),
            expected,
            received,
            sample,
            per_replica,
            replicas,
        },
    }
}

fn convert_error(e: ConvertError<'_>) -> RuntimeError {
    match e {
        ConvertError::TypeDiscrepancy {
            tensor,
            provided,
            expected,
        } => RuntimeError::Type {
            name: tensor.to_string(),
            expected,
            actual: provided,
        },
        ConvertError::OutOfRange {
            tensor,
            index,
            value,
        } => RuntimeError::OutOfRange {
            name: tensor.to_string(),
            index,
            value,
        },
        ConvertError::SizeMismatch {
            tensor,
            provided_bytes,
            expected_bytes,
            ..
        } => RuntimeError::Bytes {
            name: tensor.to_string(),
            expected: expected_bytes,
            actual: provided_bytes,
            what: "input array",
        },
    }
}

/// The splitter's view of the user's arrays: buffer handles are sample indices, counted
/// per tensor in upstream order.
#[derive(Default)]
struct Counters {
    next: [usize; TENSORS],
}

impl UpstreamIo for Counters {
    type Buffer = usize;
    type Error = core::convert::Infallible;

    fn input(&mut self, tensor: usize, _: usize, _: bool) -> Result<Option<usize>, Self::Error> {
        Ok(self.take(tensor))
    }
    fn input_complete(&mut self, _: usize) -> Result<(), Self::Error> {
        Ok(())
    }
    fn output(&mut self, tensor: usize, _: usize) -> Result<Option<usize>, Self::Error> {
        Ok(self.take(tensor))
    }
    fn output_complete(&mut self, _: usize) -> Result<(), Self::Error> {
        Ok(())
    }
}

impl Counters {
    fn take(&mut self, tensor: usize) -> Option<usize> {
        let slot = self.next.get_mut(tensor)?;
        *slot += 1;
        Some(*slot - 1)
    }
}

/// The spans of every lane of a device of `lanes` lanes: each lane's FIFOs (named by one
/// replica's ids in `one`, with their lengths) as its own, lane after lane.
fn lane_spans(one: &[(u16, usize)], lanes: usize) -> Result<Vec<Span>, RuntimeError> {
    let mut spans = Vec::with_capacity(lanes * one.len());
    for lane in 0..lanes {
        let seat = Seat { channel: 0, lane };
        for &(fifo, len) in one {
            spans.push(Span {
                target: Target::Fifo(seat.id(fifo)?),
                offset: 0,
                len,
            });
        }
    }
    Ok(spans)
}
