//! The same scripted session on every device placement: hello, weights to remote slots
//! (4 replicas, 2 groups), stream data through the splitter, training steps with the
//! gradient averaged in each group, anchors and weights back — checked against a host
//! reference computed in f64.

use std::path::{Path, PathBuf};

use tessera_core::grouping::{CommGroup, ReplicaGrouping, RetrievalMode, VariableSettings};
use tessera_core::stream::{DataFlow, Splitter, UpstreamIo};
use tessera_core::transfer::{InstanceWindow, WeightLayout};
use tessera_core::wire::{Request, Response, StepConfig};
use tessera_firmware_sim::rng::Rng;
use tessera_host::transport::{hub, Channel, ChannelSlots};

const R: usize = 4;
const INPUTS: usize = 3;
const OUTPUTS: usize = 2;
const BPS: usize = 2;
const AF: usize = 2;
const STEPS: usize = 2;
const LR: f32 = 0.05;
const DROPOUT: f32 = 0.25;
const SEED: u64 = 1234;
/// The remote-buffer slot the host writes weights to, and the on-device variable the step
/// trains.
const WEIGHTS: u16 = 1;
const W_VARIABLE: u16 = 7;
const X_FIFO: u16 = 10;
const T_FIFO: u16 = 11;
const LOSS_FIFO: u16 = 12;

/// Deterministic data: value `i` of a named array.
fn value(salt: u64, i: usize) -> f32 {
    let mut rng = Rng::from_seed(salt.wrapping_mul(1_000_003).wrapping_add(i as u64));
    rng.next_f32() * 2.0 - 1.0
}

fn f32s(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// The user's arrays for one step, shaped [bps, af, replicas, sample], flat.
struct StepData {
    x: Vec<f32>,
    t: Vec<f32>,
}

fn step_data(step: usize) -> StepData {
    let samples = BPS * AF * R;
    StepData {
        x: (0..samples * INPUTS)
            .map(|i| value(100 + step as u64, i))
            .collect(),
        t: (0..samples * OUTPUTS)
            .map(|i| value(200 + step as u64, i))
            .collect(),
    }
}

/// The splitter's upstream over one step's arrays: buffer = flat sample index.
struct Arrays {
    next: [usize; 2],
}

impl UpstreamIo for Arrays {
    type Buffer = usize;
    type Error = ();
    fn input(&mut self, tensor: usize, _: usize, _: bool) -> Result<Option<usize>, ()> {
        self.next[tensor] += 1;
        Ok(Some(self.next[tensor] - 1))
    }
    fn input_complete(&mut self, _: usize) -> Result<(), ()> {
        Ok(())
    }
    fn output(&mut self, _: usize, _: usize) -> Result<Option<usize>, ()> {
        Err(())
    }
    fn output_complete(&mut self, _: usize) -> Result<(), ()> {
        Err(())
    }
}

struct Reference {
    weights: Vec<Vec<f64>>,
    /// [step][replica][micro-batch]
    losses: Vec<Vec<Vec<f64>>>,
}

fn reference(grouping: &ReplicaGrouping, initial: &[f32]) -> Reference {
    let n = OUTPUTS * INPUTS;
    let mut w: Vec<Vec<f64>> = (0..grouping.num_groups())
        .map(|g| {
            initial[g * n..(g + 1) * n]
                .iter()
                .map(|&v| f64::from(v))
                .collect()
        })
        .collect();
    let mut rngs: Vec<Rng> = (0..R).map(|r| Rng::from_seed(SEED + r as u64)).collect();
    let mut losses = vec![vec![Vec::new(); R]; STEPS];
    for (step, step_losses) in losses.iter_mut().enumerate() {
        let data = step_data(step);
        for b in 0..BPS {
            let mut grads = vec![vec![0f64; n]; R];
            for (r, grad) in grads.iter_mut().enumerate() {
                let g = grouping.group_of(r).unwrap();
                for m in 0..AF {
                    let sample = (b * AF + m) * R + r;
                    let x: Vec<f64> = data.x[sample * INPUTS..][..INPUTS]
                        .iter()
                        .map(|&v| {
                            let dropped = rngs[r].next_f32() < DROPOUT;
                            if dropped {
                                0.0
                            } else {
                                f64::from(v) / (1.0 - f64::from(DROPOUT))
                            }
                        })
                        .collect();
                    let t = &data.t[sample * OUTPUTS..][..OUTPUTS];
                    let mut loss = 0.0;
                    for o in 0..OUTPUTS {
                        let y: f64 = (0..INPUTS).map(|i| w[g][o * INPUTS + i] * x[i]).sum();
                        let e = y - f64::from(t[o]);
                        loss += 0.5 * e * e;
                        for i in 0..INPUTS {
                            grad[o * INPUTS + i] += e * x[i] / AF as f64;
                        }
                    }
                    step_losses[r].push(loss);
                }
            }
            for (g, wg) in w.iter_mut().enumerate() {
                let members: Vec<usize> = grouping.members(g).unwrap().collect();
                for (k, wk) in wg.iter_mut().enumerate() {
                    let mean =
                        members.iter().map(|&r| grads[r][k]).sum::<f64>() / members.len() as f64;
                    *wk -= f64::from(LR) * mean;
                }
            }
        }
    }
    Reference { weights: w, losses }
}

fn close(device: f64, host: f64) -> bool {
    (device - host).abs() <= 1e-4 * (1.0 + host.abs())
}

fn run_session(channels: &mut [Channel]) {
    let grouping = CommGroup::Consecutive(2).to_grouping(R).unwrap();
    let settings = VariableSettings::from_grouping(grouping, RetrievalMode::OnePerGroup);
    for (r, channel) in channels.iter().enumerate() {
        assert_eq!(channel.replica() as usize, r, "hello reports the replica");
    }
    let depth = (BPS * AF) as u16;
    for (r, c) in channels.iter_mut().enumerate() {
        c.request(&Request::CreateFifo {
            fifo: X_FIFO,
            item_bytes: (INPUTS * 4) as u32,
            depth,
        })
        .unwrap();
        c.request(&Request::CreateFifo {
            fifo: T_FIFO,
            item_bytes: (OUTPUTS * 4) as u32,
            depth,
        })
        .unwrap();
        c.request(&Request::CreateFifo {
            fifo: LOSS_FIFO,
            item_bytes: 4,
            depth,
        })
        .unwrap();
        c.request(&Request::SetOptimizer { learning_rate: LR })
            .unwrap();
        c.request(&Request::SetSeed {
            seed: SEED + r as u64,
        })
        .unwrap();
    }

    // Weights from host: one row per group, placed by core's transfer.
    let n = OUTPUTS * INPUTS;
    let initial: Vec<f32> = (0..grouping.num_groups() * n)
        .map(|i| value(7, i))
        .collect();
    let layout = WeightLayout::new(settings, n, 4, None, InstanceWindow::whole(R)).unwrap();
    layout
        .to_replicas(
            &f32s(&initial),
            &mut ChannelSlots::allocate(channels, WEIGHTS, n * 4).unwrap(),
        )
        .unwrap();

    let config = StepConfig {
        inputs: INPUTS as u16,
        outputs: OUTPUTS as u16,
        weights: W_VARIABLE,
        input_fifo: X_FIFO,
        target_fifo: T_FIFO,
        loss_fifo: LOSS_FIFO,
        batches_per_step: BPS as u16,
        accumulation: AF as u16,
        group_size: 2,
        dropout: DROPOUT,
    };
    for c in channels.iter_mut() {
        c.request(&Request::RemoteLoad {
            slot: WEIGHTS,
            variable: W_VARIABLE,
        })
        .unwrap();
        c.request(&Request::ConfigureStep(config)).unwrap();
    }

    let expected = reference(&grouping, &initial);
    let flow = DataFlow::new(BPS, AF).unwrap();
    for step in 0..STEPS {
        // Stream data: replica r's j-th buffer is the user's sample j·R + r.
        let data = step_data(step);
        let mut splitter = Splitter::<usize, 2, R, 4>::new(R, flow).unwrap();
        let (xs, ts) = (
            splitter.add_input(INPUTS, false).unwrap(),
            splitter.add_input(OUTPUTS, false).unwrap(),
        );
        let mut arrays = Arrays { next: [0, 0] };
        for (r, c) in channels.iter_mut().enumerate() {
            for _ in 0..BPS * AF {
                let i = splitter.input(&mut arrays, xs, r, false).unwrap().unwrap();
                c.request(&Request::PushFifo {
                    fifo: X_FIFO,
                    data: &f32s(&data.x[i * INPUTS..][..INPUTS]),
                })
                .unwrap();
                splitter.input_complete(&mut arrays, xs, r).unwrap();
                let i = splitter.input(&mut arrays, ts, r, false).unwrap().unwrap();
                c.request(&Request::PushFifo {
                    fifo: T_FIFO,
                    data: &f32s(&data.t[i * OUTPUTS..][..OUTPUTS]),
                })
                .unwrap();
                splitter.input_complete(&mut arrays, ts, r).unwrap();
            }
        }

        hub::run_step(channels, &grouping).unwrap();

        // Anchors: one loss per micro-batch per replica.
        for (r, c) in channels.iter_mut().enumerate() {
            for (j, want) in expected.losses[step][r].iter().enumerate() {
                let reply = c.request(&Request::PopFifo { fifo: LOSS_FIFO }).unwrap();
                let Response::Data { data } = reply.response() else {
                    panic!("loss is data")
                };
                let got = f64::from(floats(data)[0]);
                assert!(
                    close(got, *want),
                    "step {step} replica {r} loss {j}: device {got}, host {want}"
                );
            }
        }
    }

    // Weights to host: variables to their remote buffers, then each group's
    // representative's slot through the same layout.
    for c in channels.iter_mut() {
        c.request(&Request::RemoteStore {
            variable: W_VARIABLE,
            slot: WEIGHTS,
        })
        .unwrap();
    }
    let mut back = vec![0u8; layout.to_host_bytes()];
    layout
        .to_host(
            &mut ChannelSlots::existing(channels, WEIGHTS, n * 4),
            &mut back,
        )
        .unwrap();
    let got = floats(&back);
    for (g, want) in expected.weights.iter().enumerate() {
        for (k, w) in want.iter().enumerate() {
            let d = f64::from(got[g * n + k]);
            assert!(close(d, *w), "group {g} weight {k}: device {d}, host {w}");
        }
    }
    // The groups trained on different data: their weights differ.
    assert_ne!(got[..n], got[n..]);

    for (r, c) in channels.iter_mut().enumerate() {
        let Response::Seed { seed } = c.request(&Request::GetSeed).unwrap().response() else {
            panic!()
        };
        assert_eq!(seed, SEED + r as u64);
        let Response::Cycles { cycles } = c.request(&Request::CycleCount).unwrap().response()
        else {
            panic!()
        };
        assert!(cycles > 0, "the steps counted their work");
        let Response::RngState { state } = c.request(&Request::GetRngState).unwrap().response()
        else {
            panic!()
        };
        c.request(&Request::SetRngState {
            state: [1, 2, 3, 4],
        })
        .unwrap();
        let Response::RngState { state: set } =
            c.request(&Request::GetRngState).unwrap().response()
        else {
            panic!()
        };
        assert_eq!(set, [1, 2, 3, 4]);
        assert_ne!(state, [0; 4]);
    }
}

#[test]
fn session_in_process() {
    let mut channels: Vec<Channel> = (0..R as u32)
        .map(|r| Channel::in_process(r, 1 << 20, None).unwrap())
        .collect();
    run_session(&mut channels);
}

#[test]
fn session_in_child_processes() {
    let exe = Path::new(env!("CARGO_BIN_EXE_tessera"));
    let mut channels: Vec<Channel> = (0..R as u32)
        .map(|r| Channel::child_process(exe, r, 1 << 20).unwrap())
        .collect();
    run_session(&mut channels);
}

/// The firmware ELF: `$TESSERA_FIRMWARE`, or the release build in this workspace.
fn firmware() -> PathBuf {
    let path = std::env::var_os("TESSERA_FIRMWARE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../target/thumbv7m-none-eabi/release/tessera-firmware")
        });
    assert!(
        path.exists(),
        "the QEMU session cannot run: no firmware at {}; build it with `cargo build -p \
         tessera-firmware-sim --target thumbv7m-none-eabi --features firmware --release` \
         (tests/ci.sh does)",
        path.display()
    );
    path
}

#[test]
fn session_in_qemu() {
    let elf = firmware();
    let mut channels: Vec<Channel> = (0..R as u32)
        .map(|r| Channel::qemu(&elf, r).unwrap())
        .collect();
    // Bare-metal frames are 2 KiB: the session runs in small chunks, all checked.
    assert!(channels[0].limits().max_frame <= 4096);
    run_session(&mut channels);
}
