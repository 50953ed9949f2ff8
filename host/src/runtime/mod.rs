//! The device runtime (PopART's `Devicex`, for the simulated accelerator): it prepares the
//! replicas, moves weights between a host buffer and the replicas through core's
//! [`transfer`](tessera_core::transfer), runs training steps fed from user arrays through
//! core's [`Splitter`], and handles seeds (each replica derives its own stream), RNG state
//! (every replica's words, concatenated in replica order) and cycle counts.
//!
//! The model is the device's training step: `y = W·x` with SGD, one weight per replica
//! group, the gradient averaged within each group.

pub mod reference;

use std::fmt;
use std::path::PathBuf;

use tessera_core::grouping::{GroupingSpec, RetrievalMode, VariableSettings};
use tessera_core::stream::{
    AnchorReturnType, DataFlow, SizeCheck, Splitter, StreamKind, StreamSpec, UpstreamIo,
};
use tessera_core::transfer::{InstanceWindow, WeightLayout};
use tessera_core::wire::endpoint::{CycleCount, GetRngState, GetSeed, PopFifo};
use tessera_core::wire::{Request, RequestKind, StepConfig};

use crate::transport::{check_firmware, hub, Channel, ChannelSlots, TransportError};

/// The remote-buffer slot weights travel through, and the variable the step trains.
const WEIGHT_SLOT: u16 = 1;
const WEIGHT_VARIABLE: u16 = 1;
/// Stream FIFOs on every device.
const INPUT_FIFO: u16 = 1;
const TARGET_FIFO: u16 = 2;
const LOSS_FIFO: u16 = 3;
/// Most replicas one runtime drives (the splitter's capacity).
pub const MAX_REPLICAS: usize = 64;

/// The linear model and its training schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelConfig {
    /// Elements of one input sample.
    pub inputs: usize,
    /// Elements of one output and target.
    pub outputs: usize,
    /// Batches per step.
    pub batches_per_step: usize,
    /// Micro-batches per batch (gradient accumulation).
    pub accumulation: usize,
    /// SGD learning rate.
    pub learning_rate: f32,
    /// Input dropout probability.
    pub dropout: f32,
}

/// Where the devices run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Threads of this process.
    Thread,
    /// Child processes running `exe device` (`exe` being the `tessera` binary).
    Process(PathBuf),
    /// QEMU processes running this firmware ELF.
    Qemu(PathBuf),
}

/// Everything a runtime is built from.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeConfig {
    /// Number of replicas.
    pub replicas: usize,
    /// Which replicas share a weight.
    pub grouping: GroupingSpec,
    /// How weights come back to the host.
    pub retrieval: RetrievalMode,
    /// The model.
    pub model: ModelConfig,
    /// Bytes of memory per host-placed device.
    pub device_memory: usize,
}

/// One step's user arrays, shaped `[bps, accumulation, replicas, sample]`, flat.
#[derive(Debug, Clone, Copy)]
pub struct StepData<'a> {
    /// Input samples.
    pub inputs: &'a [f32],
    /// Targets.
    pub targets: &'a [f32],
}

/// Why the runtime failed.
#[derive(Debug)]
pub enum RuntimeError {
    /// Talking to a device failed.
    Transport(TransportError),
    /// The configuration breaks a rule (grouping, data flow, sizes).
    Config(String),
    /// The user's arrays do not fit the streams.
    Size(String),
    /// An RNG state of the wrong length.
    RngState {
        /// Words expected: words per replica × replicas.
        expected: usize,
        /// Words given.
        actual: usize,
    },
}

impl fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Transport(e) => e.fmt(f),
            Self::Config(text) | Self::Size(text) => f.write_str(text),
            Self::RngState { expected, actual } => {
                write!(
                    f,
                    "the RNG state must have exactly {expected} words, not {actual}"
                )
            }
        }
    }
}

impl std::error::Error for RuntimeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Transport(e) => Some(e),
            _ => None,
        }
    }
}

impl From<TransportError> for RuntimeError {
    fn from(e: TransportError) -> Self {
        Self::Transport(e)
    }
}

fn config_error(e: impl fmt::Display) -> RuntimeError {
    RuntimeError::Config(e.to_string())
}

/// Words of RNG state per replica.
pub const RNG_WORDS: usize = 4;

/// Prepared replicas, ready to take weights and run steps.
#[derive(Debug)]
pub struct Runtime {
    channels: Vec<Channel>,
    config: RuntimeConfig,
    settings: VariableSettings,
    flow: DataFlow,
    size_check: SizeCheck,
    weights_in_sync: bool,
}

impl Runtime {
    /// Checks `config` and derives what the devices are set up with.
    fn check(
        config: &RuntimeConfig,
    ) -> Result<(VariableSettings, DataFlow, StepConfig, u16), RuntimeError> {
        let settings = VariableSettings::new(config.grouping, config.retrieval, config.replicas)
            .map_err(config_error)?;
        if config.replicas > MAX_REPLICAS {
            return Err(RuntimeError::Config(format!(
                "at most {MAX_REPLICAS} replicas, not {}",
                config.replicas
            )));
        }
        let m = config.model;
        let flow = DataFlow::new(m.batches_per_step, m.accumulation).map_err(config_error)?;
        let small = |n: usize, what: &str| {
            u16::try_from(n)
                .map_err(|_| RuntimeError::Config(format!("{what} ({n}) must fit 16 bits")))
        };
        let step = StepConfig {
            inputs: small(m.inputs, "inputs")?,
            outputs: small(m.outputs, "outputs")?,
            weights: WEIGHT_VARIABLE,
            input_fifo: INPUT_FIFO,
            target_fifo: TARGET_FIFO,
            loss_fifo: LOSS_FIFO,
            batches_per_step: small(m.batches_per_step, "batches per step")?,
            accumulation: small(m.accumulation, "accumulation")?,
            group_size: small(settings.grouping().group_size(), "group size")?,
            dropout: m.dropout,
        };
        let depth = small(flow.inputs_per_replica(), "buffers per replica per step")?;
        Ok((settings, flow, step, depth))
    }

    /// Starts the devices and sets up their streams, weight slot and training step.
    pub fn prepare(config: RuntimeConfig, placement: &Placement) -> Result<Self, RuntimeError> {
        let (settings, flow, step, depth) = Self::check(&config)?;
        // Everything the placement needs is checked before the first device starts.
        if let Placement::Qemu(firmware) = placement {
            check_firmware(firmware).map_err(TransportError::from)?;
        }
        let mut channels = Vec::with_capacity(config.replicas);
        for replica in 0..config.replicas as u32 {
            channels.push(match placement {
                Placement::Thread => Channel::in_process(replica, config.device_memory, None)?,
                Placement::Process(exe) => {
                    Channel::child_process(exe, replica, config.device_memory)?
                }
                Placement::Qemu(firmware) => Channel::qemu(firmware, replica)?,
            });
        }
        Self::set_up(config, settings, flow, step, depth, channels)
    }

    /// Like [`Runtime::prepare`], on devices the caller has already opened (one channel per
    /// replica, in replica order): for links with faults injected, or devices placed in
    /// ways [`Placement`] does not name.
    pub fn prepare_on(config: RuntimeConfig, channels: Vec<Channel>) -> Result<Self, RuntimeError> {
        if channels.len() != config.replicas {
            return Err(RuntimeError::Config(format!(
                "{} channels for {} replicas: one channel per replica",
                channels.len(),
                config.replicas
            )));
        }
        let (settings, flow, step, depth) = Self::check(&config)?;
        Self::set_up(config, settings, flow, step, depth, channels)
    }

    fn set_up(
        config: RuntimeConfig,
        settings: VariableSettings,
        flow: DataFlow,
        step: StepConfig,
        depth: u16,
        mut channels: Vec<Channel>,
    ) -> Result<Self, RuntimeError> {
        let m = config.model;
        let weight_bytes = m.inputs * m.outputs * 4;
        ChannelSlots::allocate(&mut channels, WEIGHT_SLOT, weight_bytes)?;
        for c in &mut channels {
            for (fifo, item) in [
                (INPUT_FIFO, m.inputs * 4),
                (TARGET_FIFO, m.outputs * 4),
                (LOSS_FIFO, 4),
            ] {
                c.request(&Request::CreateFifo {
                    fifo,
                    item_bytes: item as u32,
                    depth,
                })?;
            }
            c.request(&Request::SetOptimizer {
                learning_rate: m.learning_rate,
            })?;
            // The step needs its variable to exist: load the (zeroed) slot once.
            c.request(&Request::RemoteLoad {
                slot: WEIGHT_SLOT,
                variable: WEIGHT_VARIABLE,
            })?;
            c.request(&Request::ConfigureStep(step))?;
        }
        Ok(Self {
            channels,
            config,
            settings,
            flow,
            size_check: SizeCheck::new(),
            weights_in_sync: false,
        })
    }

    /// The variable settings of the weight.
    pub fn settings(&self) -> &VariableSettings {
        &self.settings
    }

    fn layout(&self) -> Result<WeightLayout<'static>, RuntimeError> {
        let m = self.config.model;
        WeightLayout::new(
            self.settings,
            m.inputs * m.outputs,
            4,
            None,
            InstanceWindow::whole(self.config.replicas),
        )
        .map_err(config_error)
    }

    /// Weights from host: `weights` has one row per group.
    pub fn weights_from_host(&mut self, weights: &[f32]) -> Result<(), RuntimeError> {
        let layout = self.layout()?;
        let bytes: Vec<u8> = weights.iter().flat_map(|w| w.to_le_bytes()).collect();
        let mut slots =
            ChannelSlots::existing(&mut self.channels, WEIGHT_SLOT, layout.slot_bytes());
        layout
            .to_replicas(&bytes, &mut slots)
            .map_err(|e| RuntimeError::Size(format!("weights from host: {e}")))?;
        for c in &mut self.channels {
            c.request(&Request::RemoteLoad {
                slot: WEIGHT_SLOT,
                variable: WEIGHT_VARIABLE,
            })?;
        }
        Ok(())
    }

    /// Weights to host: one row per returning replica (one per group with OnePerGroup, one
    /// per replica with AllReplicas), or the bare weight when only one row returns.
    pub fn weights_to_host(&mut self) -> Result<Vec<f32>, RuntimeError> {
        for c in &mut self.channels {
            c.request(&Request::RemoteStore {
                variable: WEIGHT_VARIABLE,
                slot: WEIGHT_SLOT,
            })?;
        }
        let layout = self.layout()?;
        let mut bytes = vec![0u8; layout.to_host_bytes()];
        let mut slots =
            ChannelSlots::existing(&mut self.channels, WEIGHT_SLOT, layout.slot_bytes());
        layout
            .to_host(&mut slots, &mut bytes)
            .map_err(|e| RuntimeError::Size(format!("weights to host: {e}")))?;
        self.weights_in_sync = true;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// True after weights to host, until the next training step.
    pub fn weights_in_sync(&self) -> bool {
        self.weights_in_sync
    }

    /// Runs one training step on `data`; returns the losses, `[bps, af, replicas]`.
    pub fn run(&mut self, data: StepData<'_>) -> Result<Vec<f32>, RuntimeError> {
        let m = self.config.model;
        let replicas = self.config.replicas;
        let streams = [
            StreamSpec {
                name: "input",
                sample_elements: m.inputs,
                kind: StreamKind::Input { broadcast: false },
            },
            StreamSpec {
                name: "target",
                sample_elements: m.outputs,
                kind: StreamKind::Input { broadcast: false },
            },
        ];
        let provided = [("input", data.inputs.len()), ("target", data.targets.len())];
        self.size_check
            .run(&self.flow, replicas, &streams, &provided)
            .map_err(|e| RuntimeError::Size(e.to_string()))?;

        // Each replica's share of the user's arrays, handed out round-robin (micro-batch
        // by micro-batch), so no replica runs ahead of the splitter's FIFOs.
        let mut splitter = Splitter::<usize, 3, MAX_REPLICAS, 1>::new(replicas, self.flow)
            .map_err(config_error)?;
        let x = splitter.add_input(m.inputs, false).map_err(config_error)?;
        let t = splitter.add_input(m.outputs, false).map_err(config_error)?;
        let loss = splitter
            .add_output(1, AnchorReturnType::All)
            .map_err(config_error)?;
        let mut arrays = Counters::default();
        let streams = [
            (x, INPUT_FIFO, m.inputs, data.inputs),
            (t, TARGET_FIFO, m.outputs, data.targets),
        ];
        // Every sample is sent before any reply is awaited; the replies are claimed after.
        let mut sent: Vec<Vec<u32>> = vec![Vec::new(); replicas];
        for _ in 0..self.flow.inputs_per_replica() {
            for (r, c) in self.channels.iter_mut().enumerate() {
                for (tensor, fifo, width, source) in streams {
                    let i = splitter
                        .input(&mut arrays, tensor, r, false)
                        .map_err(config_error)?
                        .unwrap_or(0);
                    let sample: Vec<u8> = source[i * width..(i + 1) * width]
                        .iter()
                        .flat_map(|v| v.to_le_bytes())
                        .collect();
                    sent[r].push(c.submit(&Request::PushFifo {
                        fifo,
                        data: &sample,
                    })?);
                    splitter
                        .input_complete(&mut arrays, tensor, r)
                        .map_err(config_error)?;
                }
            }
        }
        for (c, seqs) in self.channels.iter_mut().zip(&sent) {
            for &seq in seqs {
                c.receive(seq)?;
            }
        }

        let grouping = *self.settings.grouping();
        hub::run_step(&mut self.channels, &grouping)?;
        self.weights_in_sync = false;

        let outputs = self.flow.outputs_per_replica(Some(AnchorReturnType::All));
        let mut losses = vec![0f32; outputs * replicas];
        let pop = PopFifo { fifo: LOSS_FIFO };
        // (replica, ticket, index in `losses`) of every pop, all sent first.
        let mut pops = Vec::with_capacity(outputs * replicas);
        for _ in 0..outputs {
            for (r, c) in self.channels.iter_mut().enumerate() {
                let k = splitter
                    .output(&mut arrays, loss, r)
                    .map_err(config_error)?;
                pops.push((r, c.submit_typed(&pop)?, k));
                splitter
                    .output_complete(&mut arrays, loss, r)
                    .map_err(config_error)?;
            }
        }
        for (r, ticket, k) in pops {
            let c = &mut self.channels[r];
            let reply = c.receive_typed(ticket)?;
            let bytes: [u8; 4] = reply
                .get()
                .try_into()
                .map_err(|_| c.wrong_length(RequestKind::PopFifo, reply.get().len(), 4))?;
            losses[k] = f32::from_le_bytes(bytes);
        }
        Ok(losses)
    }

    /// Sends the random seed to every replica (each derives its own stream from it).
    pub fn set_random_seed(&mut self, seed: u64) -> Result<(), RuntimeError> {
        for c in &mut self.channels {
            c.request(&Request::SetSeed { seed })?;
        }
        Ok(())
    }

    /// The random seed, as replica 0 holds it.
    pub fn random_seed(&mut self) -> Result<u64, RuntimeError> {
        let Some(c) = self.channels.first_mut() else {
            return Err(RuntimeError::Config("no replicas".into()));
        };
        Ok(c.call(&GetSeed)?.get())
    }

    /// Every replica's RNG state, concatenated in replica order.
    pub fn rng_state(&mut self) -> Result<Vec<u32>, RuntimeError> {
        let mut words = Vec::with_capacity(RNG_WORDS * self.channels.len());
        for c in &mut self.channels {
            words.extend_from_slice(&c.call(&GetRngState)?.get());
        }
        Ok(words)
    }

    /// Sets every replica's RNG state from exactly `RNG_WORDS × replicas` words.
    pub fn set_rng_state(&mut self, words: &[u32]) -> Result<(), RuntimeError> {
        let expected = RNG_WORDS * self.channels.len();
        if words.len() != expected {
            return Err(RuntimeError::RngState {
                expected,
                actual: words.len(),
            });
        }
        for (c, state) in self.channels.iter_mut().zip(words.chunks_exact(RNG_WORDS)) {
            let state = [state[0], state[1], state[2], state[3]];
            c.request(&Request::SetRngState { state })?;
        }
        Ok(())
    }

    /// Cycles each replica has counted.
    pub fn cycle_counts(&mut self) -> Result<Vec<u64>, RuntimeError> {
        let mut counts = Vec::with_capacity(self.channels.len());
        for c in &mut self.channels {
            counts.push(c.call(&CycleCount)?.get());
        }
        Ok(counts)
    }
}

/// The splitter's view of the user's arrays: buffer handles are sample indices, counted
/// per tensor in upstream order.
#[derive(Default)]
struct Counters {
    next: [usize; 3],
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
