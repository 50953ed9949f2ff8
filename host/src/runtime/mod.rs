//! The device runtime (PopART's `Devicex`): it prepares a core [`Program`] on every replica
//! of a placement, moves its named weights between the host and the replicas, runs
//! training steps fed from named user arrays and returns the anchors, and handles the
//! optimizer's values, the random seed, every replica's RNG state and cycle counts.
//!
//! # Contract
//!
//! - [`Runtime::prepare`] checks the program with core's rules ([`Program::check`]) before
//!   any device starts, then starts the replicas' devices — on threads and in child
//!   processes one per core, each running consecutive replicas as its lanes when they
//!   share every variable's group (core's [`lanes`](tessera_core::program::lanes) rule;
//!   [`placement::devices`]), else one per replica (an unreachable one is an error naming
//!   its replica) — and places the program on each; a device that cannot hold it refuses
//!   with the reason (memory, a reduction larger than a frame). A replica's weights, step
//!   IO, RNG state and cycle count are its lane's, whatever device runs it: the results
//!   are the bits of a device per replica. One exception: a step that fails on a device
//!   (an empty FIFO, a label outside the classes) fails every lane of it, where the other
//!   replicas on devices of their own would have finished; the failed step is settled by
//!   [`recovery`]'s rule either way.
//! - Weights travel by name ([`WeightsIo`]), through core's [`transfer`] layouts: in their
//!   *host shape* from the host (the group dimension first when a variable has several
//!   groups) and in their *returned shape* to the host (one row per group or per replica, as
//!   the retrieval mode says); sharded variables are split and reassembled by the same
//!   layout code the devices use ([`weights`]).
//! - [`Runtime::run`] takes one array per stream ([`StepIo`]), checks every size on every
//!   run and converts each to its stream's type (checked `int64 → int32`, `uint8 → fp8`),
//!   sends each replica its share as one byte stream per stream and step, runs the step
//!   (answering the devices' reductions under the program's schedule), and returns every
//!   anchor ([`step_io`]).
//! - A step that fails leaves a defined state: every device's step state is reset, and
//!   when the replicas may have applied different parts of the step the runtime refuses
//!   steps and weights to host until the host loads the variables again ([`recovery`]).
//! - Cycle counts come only from an instrumented program (otherwise the devices refuse);
//!   their unit is the device's work unit, one multiply-add.
//!
//! ```
//! use tessera_core::{dtype::DataType, grouping::*, program::*, stream::AnchorReturnType};
//! use tessera_host::runtime::{Placement, Runtime, StepIo, WeightsIo};
//! use tessera_host::session::HostArray;
//!
//! let mut p = Program::new(4, 2, Optimizer::Sgd { learning_rate: 0.1 }); // bps 4, af 2
//! let all = GroupingSpec::Comm(CommGroup::All);
//! let w = p.add_variable("w", &[3, 2], all, RetrievalMode::OnePerGroup, Sharding::Balanced)?;
//! p.input = p.add_stream("x", DataType::F32, &[2], false)?;
//! let label = p.add_stream("label", DataType::I32, &[1], false)?;
//! p.add_layer(Layer::Linear { weight: w })?;
//! p.add_layer(Layer::SoftmaxCrossEntropy { labels: label })?;
//! p.add_anchor(AnchorTensor::Loss, AnchorReturnType::All)?;
//!
//! let mut runtime = Runtime::prepare(p, 4, &Placement::Thread, 1 << 20)?; // checked first
//! let initial = HostArray::from_f32(&[3, 2], &[0.1, -0.2, 0.3, 0.4, -0.5, 0.6])?;
//! let x = HostArray::from_f32(&[32, 2], &[0.5; 64])?; // bps·af·4 samples of 2
//! let labels = HostArray::from_i32(&[32], &[1; 32])?; // i32 or i64
//! runtime.weights_from_host(&WeightsIo::from([("w".into(), initial)]))?;
//! let anchors = runtime.run(&StepIo::from([("x".into(), x), ("label".into(), labels)]))?;
//! let loss = anchors["loss"].to_f32().unwrap(); // [8, 4]: micro-batches × replicas
//! assert!(loss[31] < loss[0]); // four SGD updates in one step: the loss falls
//! let weights = runtime.weights_to_host()?; // gathered from its four shards
//! assert_eq!(weights["w"].shape(), [3, 2]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`transfer`]: tessera_core::transfer

pub mod check;
mod error;
mod items;
pub mod recovery;
pub mod reference;
mod round;
mod step_driver;
pub mod step_io;
pub(crate) mod values;
pub mod weights;

use std::collections::BTreeMap;
use std::sync::Arc;

use tessera_core::program::{Checked, Optimizer, Program, ProgramError};
use tessera_core::stream::DataFlow;
use tessera_core::transfer::InstanceWindow;
use tessera_core::wire::endpoint::{CycleCount, GetRngState, GetSeed};
use tessera_core::wire::{Limits, ProgramRequest, Request};

pub use error::RuntimeError;
pub use recovery::{StepFault, StepPhase};
pub use step_io::{Anchors, StepCallbacks};

use crate::array::HostArray;
use crate::executable::Executable;
use crate::instance::{Instances, Single};
use crate::placement;
pub use crate::placement::Placement;
use crate::trace::{TraceError, TraceSummary};
use crate::transport::{Channel, Seat, Traffic, TransportError};
use round::Plan;
use step_driver::plans;

/// Most replicas one runtime drives (the splitter's capacity).
pub const MAX_REPLICAS: usize = 64;
/// Words of RNG state per replica.
pub const RNG_WORDS: usize = 4;

/// Named host arrays: weights by variable name, or a step's inputs by stream name.
pub type WeightsIo = BTreeMap<String, HostArray>;
/// A step's inputs, one array per stream, by stream name.
pub type StepIo = BTreeMap<String, HostArray>;

/// This instance's window of `replicas`.
fn window(replicas: usize, instances: &dyn Instances) -> Result<InstanceWindow, RuntimeError> {
    InstanceWindow::split(replicas, instances.size(), instances.rank()).ok_or(
        RuntimeError::Window {
            replicas,
            instances: instances.size(),
        },
    )
}

/// Starts the devices of `window`'s replicas of a run of `replicas` on `placement`, in
/// replica order: as lanes of fewer devices where `program` lets them share a walk
/// ([`placement::devices`]).
fn start(
    program: &Program,
    replicas: usize,
    window: InstanceWindow,
    placement: &Placement,
    device_memory: usize,
) -> Result<Vec<Channel>, RuntimeError> {
    // At most MAX_REPLICAS: the window's bounds fit 32 bits.
    let local = window.offset as u32..(window.offset + window.local) as u32;
    let devices = placement::devices(placement, program, replicas, local, device_memory);
    Ok(placement::open_devices(placement, &devices, device_memory)?)
}

/// `limits` as one replica's: a device of several lanes has the memory of one per lane.
/// An executable keeps these, so that it runs on devices of other lanes (another machine's
/// cores) as long as each replica has the memory, frame and window it was prepared for.
fn per_replica(limits: Limits) -> Limits {
    let lanes = u32::from(limits.lanes.max(1));
    Limits {
        memory: limits.memory / lanes,
        lanes: 1,
        ..limits
    }
}

/// A program prepared on its replicas.
#[derive(Debug)]
pub struct Runtime {
    /// One per device, in replica order.
    channels: Vec<Channel>,
    /// Where each local replica runs, in replica order.
    seats: Vec<Seat>,
    /// The program, checked for the run's replicas: what the check established (each
    /// stream's item, each anchor's width) is read from it, never looked up again.
    program: Checked,
    replicas: usize,
    window: InstanceWindow,
    instances: Arc<dyn Instances>,
    flow: DataFlow,
    /// The grouping each reduction round of a batch combines, in schedule order.
    /// How each exchange of a batch combines.
    rounds: Vec<Plan>,
    /// By exchange, its last round answered (its layout, not its sums), opened again by
    /// the next batch or step (see [`step_driver::run_step`]).
    kept_rounds: Vec<Option<round::OpenRound>>,
    weights_in_sync: bool,
    /// What failed steps left to settle (see [`recovery`]).
    recovery: recovery::Recovery,
    /// Per device: its last step's anchors were read in place and not reported yet; its
    /// next `RunStep` reports them (`took`). Cleared by that step and by a reset (which
    /// empties the FIFOs).
    anchors_taken: Vec<bool>,
    /// A failure the next step injects, for tests.
    fault: Option<StepFault>,
    /// Input bytes converted to their stream's type in a buffer of the runtime's own.
    converted: u64,
    /// Where each step's items go, once the first step has worked it out
    /// ([`step_io`]'s contract).
    split: Option<Arc<step_io::SplitPlan>>,
    /// A trace this runtime keeps (`start_trace`).
    trace: crate::trace::Held,
}

/// How the bytes of a runtime's steps and weights moved so far: summed over its devices'
/// channels (with the requests they sent), and what the runtime itself converted into
/// buffers of its own on the way (an input array not already of its stream's type). A test
/// counts copies and requests with it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuntimeTraffic {
    /// The channels' paths (see [`Traffic`]).
    pub channels: Traffic,
    /// Input bytes converted before they were sent.
    pub converted: u64,
}

impl Runtime {
    /// Starts `replicas` devices on `placement` (each with `device_memory` bytes when the
    /// host places them) and prepares `program` on them.
    ///
    /// ```
    /// use tessera_core::dtype::DataType;
    /// use tessera_core::grouping::{CommGroup, GroupingSpec, RetrievalMode};
    /// use tessera_core::program::{Layer, Optimizer, Program, Sharding};
    /// use tessera_host::runtime::{Placement, Runtime, RuntimeError};
    ///
    /// let mut p = Program::new(1, 1, Optimizer::Sgd { learning_rate: 0.1 });
    /// p.input = p.add_stream("x", DataType::F32, &[4], false)?;
    /// let y = p.add_stream("y", DataType::F32, &[1], false)?;
    /// // Orthogonal groups of 2: on 4 replicas, [0, 2] and [1, 3]; 3 replicas have none.
    /// let pairs = GroupingSpec::Comm(CommGroup::Orthogonal(2));
    /// let sharded = Sharding::Balanced; // each member holds 2 of the group's 4 elements
    /// let w = p.add_variable("w", &[1, 4], pairs, RetrievalMode::OnePerGroup, sharded)?;
    /// p.add_layer(Layer::Linear { weight: w })?;
    /// p.add_layer(Layer::MeanSquaredError { targets: y })?;
    ///
    /// // The program is checked against the replica count before any device starts.
    /// let refused = Runtime::prepare(p.clone(), 3, &Placement::Thread, 1 << 16);
    /// assert!(matches!(refused, Err(RuntimeError::Program(_))));
    /// let mut runtime = Runtime::prepare(p, 4, &Placement::Thread, 1 << 16)?;
    /// assert_eq!(runtime.weights_to_host()?["w"].shape(), [2, 1, 4]); // one row per group
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn prepare(
        program: Program,
        replicas: usize,
        placement: &Placement,
        device_memory: usize,
    ) -> Result<Self, RuntimeError> {
        Self::prepare_in(
            program,
            replicas,
            Arc::new(Single),
            placement,
            device_memory,
        )
    }

    /// Like [`Runtime::prepare`], as one of `instances`: this process starts and drives
    /// only its window of the `replicas` global replicas (see [`instance`](crate::instance)).
    pub fn prepare_in(
        program: Program,
        replicas: usize,
        instances: Arc<dyn Instances>,
        placement: &Placement,
        device_memory: usize,
    ) -> Result<Self, RuntimeError> {
        let program = Self::check(program, replicas)?;
        let window = window(replicas, &*instances)?;
        let channels = start(&program, replicas, window, placement, device_memory)?;
        Self::set_up(program, channels, instances, window)
    }

    /// Starts the devices `executable` was prepared for on `placement` and places its
    /// program as saved (checked by core's rules first, as a prepared one is; the model is
    /// not built again); devices whose limits differ from the saved ones are refused (see
    /// [`executable`](crate::executable)).
    pub fn load_executable(
        executable: &Executable,
        placement: &Placement,
        device_memory: usize,
    ) -> Result<Self, RuntimeError> {
        Self::load_executable_in(executable, Arc::new(Single), placement, device_memory)
    }

    /// Like [`Runtime::load_executable`], as one of `instances`.
    pub fn load_executable_in(
        executable: &Executable,
        instances: Arc<dyn Instances>,
        placement: &Placement,
        device_memory: usize,
    ) -> Result<Self, RuntimeError> {
        let replicas = executable.replicas as usize;
        // A file can hold any program (a hand-built one, or one from another version of
        // the rules): core's check names the rule it breaks, where a device could only
        // refuse it as a bad configuration.
        let program = Self::check(executable.program.clone(), replicas)?;
        let window = window(replicas, &*instances)?;
        let channels = start(&program, replicas, window, placement, device_memory)?;
        let saved = executable.limits;
        for c in &channels {
            let actual = per_replica(c.limits());
            if (actual.memory, actual.max_frame, actual.window)
                != (saved.memory, saved.max_frame, saved.window)
            {
                return Err(RuntimeError::Limits {
                    replica: actual.replica,
                    saved,
                    actual,
                });
            }
        }
        Self::set_up(program, channels, instances, window)
    }

    /// This prepared program as an executable for the devices it runs on.
    pub fn executable(&self) -> Executable {
        Executable {
            program: self.program.program().clone(),
            replicas: self.replicas as u32, // At most MAX_REPLICAS.
            limits: per_replica(self.channels[0].limits()),
        }
    }

    /// The replicas each device runs, device by device (one each, or several as its lanes:
    /// [`placement::devices`]).
    pub fn devices(&self) -> Vec<std::ops::Range<u32>> {
        let lanes = |c: &Channel| c.replica()..c.replica() + c.lanes() as u32;
        self.channels.iter().map(lanes).collect()
    }

    /// Like [`Runtime::prepare`], on devices the caller has already opened (in replica
    /// order, each running one replica or several as lanes): for links with faults
    /// injected, or devices placed in ways [`Placement`] does not name.
    pub fn prepare_on(program: Program, channels: Vec<Channel>) -> Result<Self, RuntimeError> {
        let replicas = Seat::all(&channels).len();
        let program = Self::check(program, replicas)?;
        let window = InstanceWindow::whole(replicas);
        Self::set_up(program, channels, Arc::new(Single), window)
    }

    /// `program` checked for `replicas` (a runtime drives 1 to [`MAX_REPLICAS`]).
    fn check(program: Program, replicas: usize) -> Result<Checked, RuntimeError> {
        if replicas == 0 || replicas > MAX_REPLICAS {
            return Err(RuntimeError::Replicas {
                replicas,
                max: MAX_REPLICAS,
            });
        }
        Ok(program.checked(replicas)?)
    }

    fn set_up(
        program: Checked,
        mut channels: Vec<Channel>,
        instances: Arc<dyn Instances>,
        window: InstanceWindow,
    ) -> Result<Self, RuntimeError> {
        let replicas = program.replicas();
        let seats = Seat::all(&channels);
        // Each device's lanes start where the one before it ends: the window's replicas in
        // order.
        let mut next = window.offset;
        let in_order = channels.iter().all(|c| {
            let first = c.replica() as usize == next;
            next += c.lanes();
            first
        });
        if seats.len() != window.local || !in_order {
            return Err(RuntimeError::Channels {
                run: seats.len(),
                replicas: window.local,
            });
        }
        // Devices of one placement cut a batch's rounds alike only with as many lanes each.
        let lanes = channels.first().map_or(1, Channel::lanes);
        if let Some(other) = channels.iter().find(|c| c.lanes() != lanes) {
            return Err(RuntimeError::MixedLanes {
                lanes,
                replica: other.replica(),
                other: other.lanes(),
            });
        }
        let flow = program
            .data_flow()
            .map_err(|e| RuntimeError::Program(ProgramError::DataFlow(e)))?;
        let rounds = plans(&program, replicas, &channels)?;
        // The program travels as bytes in the request; a request too large for a device's
        // frame is refused by the channel, naming its size.
        let encoded = postcard::to_allocvec(program.program()).map_err(|e| {
            TransportError::Io(std::io::Error::other(format!(
                "the program does not encode: {e}"
            )))
        })?;
        let prepare = Request::Program(ProgramRequest::Prepare {
            replicas: replicas as u32, // At most MAX_REPLICAS.
            program: &encoded,
        });
        // Sent to every device before any reply is awaited.
        let seqs = channels
            .iter_mut()
            .map(|c| c.submit(&prepare))
            .collect::<Result<Vec<_>, _>>()?;
        for (c, seq) in channels.iter_mut().zip(seqs) {
            c.receive(seq)?;
        }
        Ok(Self {
            anchors_taken: vec![false; channels.len()],
            channels,
            seats,
            program,
            replicas,
            window,
            instances,
            flow,
            rounds,
            kept_rounds: Vec::new(),
            weights_in_sync: false,
            recovery: recovery::Recovery::default(),
            fault: None,
            converted: 0,
            split: None,
            trace: Default::default(),
        })
    }

    /// The prepared program.
    pub fn program(&self) -> &Program {
        self.program.program()
    }

    /// Starts a timeline of this process's work — this runtime's steps, weights and
    /// devices — written to `path` in the Chrome trace-event format when
    /// [`finish_trace`](Self::finish_trace) is called or the runtime drops
    /// ([`crate::trace`]'s rules: one trace at a time per process; the file is created now).
    /// Across MPI ranks each instance writes a file of its own (`run.json` becomes
    /// `run.rank1.json` on rank 1).
    pub fn start_trace(&self, path: impl AsRef<std::path::Path>) -> Result<(), TraceError> {
        let (rank, ranks) = (self.instances.rank(), self.instances.size());
        self.trace
            .start(&crate::trace::rank_file(path.as_ref(), rank, ranks))
    }

    /// Writes the trace [`start_trace`](Self::start_trace) began; `None` if none runs.
    pub fn finish_trace(&self) -> Result<Option<TraceSummary>, TraceError> {
        self.trace.finish()
    }

    /// Replicas of the run, across every instance.
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// The global replicas this instance drives.
    pub fn window(&self) -> InstanceWindow {
        self.window
    }

    /// The job's instances.
    pub fn instances(&self) -> &dyn Instances {
        &*self.instances
    }

    /// How this runtime's bytes moved so far (see [`RuntimeTraffic`]).
    pub fn traffic(&self) -> RuntimeTraffic {
        RuntimeTraffic {
            channels: self.channels.iter().map(Channel::traffic).sum(),
            converted: self.converted,
        }
    }

    /// Makes the next step fail as `fault` says, to test what a failed step leaves (see
    /// [`recovery`]); the steps after it run normally.
    pub fn inject_step_fault(&mut self, fault: StepFault) {
        self.fault = Some(fault);
    }

    /// Reduction rounds one step makes, as its devices count them: each batch's exchanges
    /// (core's [`exchange`](tessera_core::program::exchange) rule, for these devices'
    /// frames), batch after batch. [`StepFault::round`] counts the same.
    pub fn rounds_per_step(&self) -> u32 {
        (self.rounds.len() as u32).saturating_mul(self.program.batches_per_step)
    }

    /// True after weights to host, until the next training step.
    pub fn weights_in_sync(&self) -> bool {
        self.weights_in_sync
    }

    /// Optimizer values from host (the kind of optimizer is the program's; only its values
    /// change between runs).
    /// The values follow the program's rule: a finite, non-negative learning rate and a
    /// momentum in `[0, 1)`.
    pub fn set_optimizer(&mut self, optimizer: Optimizer) -> Result<(), RuntimeError> {
        let (lr, momentum) = (optimizer.learning_rate(), optimizer.momentum());
        Optimizer::check_values(lr, momentum)?;
        let request = Request::Program(ProgramRequest::SetOptimizer {
            learning_rate: optimizer.learning_rate(),
            momentum: optimizer.momentum(),
        });
        self.broadcast(&request)
    }

    /// Sends the random seed to every replica (each derives its own stream from it by
    /// core's [`rng`](tessera_core::rng) rule).
    pub fn set_random_seed(&mut self, seed: u64) -> Result<(), RuntimeError> {
        self.broadcast(&Request::Program(ProgramRequest::SetSeed { seed }))
    }

    /// The random seed, as this instance's first replica holds it.
    pub fn random_seed(&mut self) -> Result<u64, RuntimeError> {
        self.check_alive()?;
        Ok(self.channels[0].call(&GetSeed)?.get())
    }

    /// Every replica's RNG state (of every instance), concatenated in replica order.
    pub fn rng_state(&mut self) -> Result<Vec<u32>, RuntimeError> {
        self.check_alive()?;
        let mut local = Vec::with_capacity(RNG_WORDS * 4 * self.seats.len());
        for seat in &self.seats {
            let c = &mut self.channels[seat.channel];
            for w in c.call(&GetRngState(seat.wire_lane()))?.get() {
                local.extend_from_slice(&w.to_le_bytes());
            }
        }
        let all = self.instances.allgather(&local)?;
        Ok(all
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect())
    }

    /// Sets every replica's RNG state from exactly `RNG_WORDS × replicas` words (every
    /// instance takes its window's).
    pub fn set_rng_state(&mut self, words: &[u32]) -> Result<(), RuntimeError> {
        self.check_alive()?;
        let expected = RNG_WORDS * self.replicas;
        if words.len() != expected {
            return Err(RuntimeError::RngState {
                expected,
                actual: words.len(),
            });
        }
        let mine = &words[RNG_WORDS * self.window.offset..][..RNG_WORDS * self.window.local];
        for (seat, state) in self.seats.iter().zip(mine.chunks_exact(RNG_WORDS)) {
            let state = [state[0], state[1], state[2], state[3]];
            let lane = seat.wire_lane();
            self.channels[seat.channel].request(&Request::Program(
                ProgramRequest::SetRngState { lane, state },
            ))?;
        }
        Ok(())
    }

    /// The work each replica has counted, in multiply-adds; refused by the devices unless
    /// the program is instrumented.
    pub fn cycle_counts(&mut self) -> Result<Vec<u64>, RuntimeError> {
        self.check_alive()?;
        let mut local = Vec::with_capacity(8 * self.seats.len());
        for seat in &self.seats {
            let c = &mut self.channels[seat.channel];
            local.extend_from_slice(&c.call(&CycleCount(seat.wire_lane()))?.get().to_le_bytes());
        }
        let all = self.instances.allgather(&local)?;
        Ok(all
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect())
    }

    /// Sends every replica the request `of` makes for it (its seat), all before any reply
    /// is awaited.
    pub(crate) fn send_every_replica(
        &mut self,
        of: impl Fn(Seat) -> Result<Request<'static>, RuntimeError>,
    ) -> Result<(), RuntimeError> {
        self.check_alive()?;
        let mut sent = Vec::with_capacity(self.seats.len());
        for &seat in &self.seats {
            let request = of(seat)?;
            sent.push((seat.channel, self.channels[seat.channel].submit(&request)?));
        }
        for (channel, seq) in sent {
            self.channels[channel].receive(seq)?;
        }
        Ok(())
    }

    /// Sends `request` to every device (whatever its lanes), all before any reply is
    /// awaited.
    pub(crate) fn broadcast(&mut self, request: &Request<'_>) -> Result<(), RuntimeError> {
        self.check_alive()?;
        let seqs = self
            .channels
            .iter_mut()
            .map(|c| c.submit(request))
            .collect::<Result<Vec<_>, _>>()?;
        for (c, seq) in self.channels.iter_mut().zip(seqs) {
            c.receive(seq)?;
        }
        Ok(())
    }
}
