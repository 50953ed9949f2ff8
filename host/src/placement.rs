//! Where devices run, and the one place that starts them there.
//!
//! A [`Placement`] names how a device runs: a thread of this process, a child process
//! (`tessera device` for a session's worker, `tessera devices` serving a share of a
//! training runtime's devices), the firmware under QEMU, or a board flashed with it on a
//! serial port (one port per device of this process, in replica order: device `i` of the
//! ones a process starts is on port `i`). [`open`] starts one device per
//! replica on it, in replica order, for the session (and [`open_devices`] a training
//! runtime's devices, each running consecutive replicas as lanes: [`devices`] says how); everything the
//! placement needs (QEMU's firmware and tools, the serial ports) is checked once, before
//! the first device starts, so a missing piece fails at once instead of after some devices
//! are up.
//! `serve` (feature `mpi`) starts one device on a byte link whose controller is on
//! another rank.
//!
//! # Memory
//!
//! A device the host places (a thread or a child process) gets the memory its caller asks
//! for, per replica: [`DEVICE_MEMORY`], 4 KiB (the smallest arena a program fits) to 1 GiB
//! (what one process maps per device without surprising its host), checked before anything
//! starts. A device running several replicas as lanes holds as many times that, and a
//! device's memory travels as 32 bits ([`Limits`]): [`devices`] runs no more lanes on one
//! device than fit [`MAX_DEVICE_BYTES`]. QEMU's boards, and boards on serial ports, have
//! the memory they have; the request is not theirs to take.

use std::ops::{Range, RangeInclusive};
use std::path::PathBuf;

use tessera_core::program::lanes::lane_bytes;
use tessera_core::program::Program;
use tessera_core::wire::Limits;

use crate::transport::{check_firmware, check_ports, port_of, Channel, TransportError, HOST_FRAME};

/// Where the devices run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Threads of this process.
    Thread,
    /// Child processes running `exe device` or `exe devices` (`exe` being the `tessera`
    /// binary; [`Serving`] says which).
    Process(PathBuf),
    /// QEMU processes running this firmware ELF, each on the board it was built for
    /// (mps2-an386, mps2-an385 or RISC-V's virt: `transport::spawn`'s `board_of`).
    Qemu(PathBuf),
    /// Boards flashed with the firmware, on serial ports: one port per device this process
    /// starts, in replica order, each opened in raw mode at `baud` (see
    /// [`Channel::serial`]).
    Serial {
        /// The ports (`/dev/ttyACM0`, ...), one per device.
        ports: Vec<PathBuf>,
        /// Their baud rate, within [`BAUD`](crate::transport::BAUD)
        /// ([`DEFAULT_BAUD`](crate::transport::DEFAULT_BAUD) is the usual one).
        baud: u32,
    },
}

/// How the devices share the machine's cores with the host's thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serving {
    /// The devices work while the host does anything else (a session's workers, whose
    /// kernels run while the controller goes on): threads of their own (at most one per
    /// core), a child process per device.
    Alongside,
    /// The host only waits while the devices work, handling every message of every device
    /// (a training step): on threads, the host's own thread is one of the pool's servers,
    /// serving ready devices whenever it waits on any of them (three threads on two cores
    /// made every wait a context switch); in child processes, each process serves a share
    /// of the devices and the host keeps a core of its own (a process per device left the
    /// host a third of a core).
    HostWaits,
}

/// Bytes of memory per replica a host-placed device may be given (module doc).
pub const DEVICE_MEMORY: RangeInclusive<usize> = (4 << 10)..=(1 << 30);
/// The most bytes one device (all its lanes) holds: its memory travels as 32 bits.
pub const MAX_DEVICE_BYTES: usize = u32::MAX as usize;

/// Everything `placement` needs before any device starts: for QEMU, its firmware and
/// tools; for serial ports, a baud rate within [`BAUD`](crate::transport::BAUD) and each port
/// a character device given once; for the host's own devices, `memory` within
/// [`DEVICE_MEMORY`].
pub fn check(placement: &Placement, memory: usize) -> Result<(), TransportError> {
    match placement {
        Placement::Qemu(firmware) => Ok(check_firmware(firmware)?),
        Placement::Serial { ports, baud } => Ok(check_ports(ports, *baud)?),
        Placement::Thread | Placement::Process(_) if !DEVICE_MEMORY.contains(&memory) => {
            Err(TransportError::DeviceMemory {
                bytes: memory,
                min: *DEVICE_MEMORY.start(),
                max: *DEVICE_MEMORY.end(),
            })
        }
        Placement::Thread | Placement::Process(_) => Ok(()),
    }
}

/// How a training runtime's replicas `local` (of a run of `replicas`) of `program` share
/// devices on `placement`, one range of consecutive replicas per device: on threads and in
/// child processes, runs of [`lanes_per_device`] replicas as the lanes of one device (one
/// walk of the step per core instead of one per replica, and one message per device where
/// there was one per replica) when every run shares each variable's group (core's
/// [`lanes`](tessera_core::program::lanes) rule); else — and always on QEMU and serial
/// ports, whose firmware runs one lane — one device per replica. No device runs more lanes than
/// [`MAX_DEVICE_BYTES`] holds at `memory` bytes each.
pub fn devices(
    placement: &Placement,
    program: &Program,
    replicas: usize,
    local: Range<u32>,
    memory: usize,
) -> Vec<Range<u32>> {
    let n = local.len();
    let most = match placement {
        Placement::Qemu(_) | Placement::Serial { .. } => 1,
        Placement::Thread | Placement::Process(_) => {
            let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
            lanes_per_device(n, cores)
        }
    };
    // The most lanes, at most `most` and dividing the replicas, that the rule and the
    // frame allow.
    let lanes = (2..=most)
        .rev()
        .filter(|k| n.is_multiple_of(*k))
        .filter(|k| k.checked_mul(memory).is_some_and(|b| b <= MAX_DEVICE_BYTES))
        .find(|&k| shares_a_device(program, replicas, local.clone(), k))
        .unwrap_or(1);
    let step = lanes as u32; // At most the window's replicas, which fit 32 bits.
    (local.clone())
        .step_by(lanes)
        .map(|first| first..first.saturating_add(step).min(local.end))
        .collect()
}

/// Whether runs of `lanes` replicas of `local` may each be one device's lanes: every run
/// shares each variable's group (core's lane rule), and every reduction round of a lane
/// fits its share of a device's frame (a device of `lanes` lanes sends each lane's part of
/// an exchange side by side in one frame of [`HOST_FRAME`] bytes, and refuses a program
/// whose round would not fit).
fn shares_a_device(program: &Program, replicas: usize, local: Range<u32>, lanes: usize) -> bool {
    let share = frame_share(lanes);
    let fits = (program.reductions(replicas)).all(|r| program.round_bytes(r.variable()) <= share);
    fits && local
        .step_by(lanes)
        .all(|first| program.check_lanes(replicas, first as usize, lanes).is_ok())
}

/// A lane's share of a host frame's payload when `lanes` lanes send their rounds in one
/// contribution (core's [`lane_bytes`]).
fn frame_share(lanes: usize) -> usize {
    let limits = Limits {
        memory: 0,
        max_frame: HOST_FRAME as u32, // 66 KiB.
        replica: 0,
        lanes: 1,
        window: 1,
    };
    lane_bytes(limits.max_chunk(), lanes)
}

/// Lanes per device for `n` replicas on `cores` cores: the most, up to ⌈n / cores⌉ (a
/// device per core), that divide `n`, so that every device runs as many replicas — and
/// has the memory of as many (an executable keeps one replica's, and is refused on
/// devices of another).
pub fn lanes_per_device(n: usize, cores: usize) -> usize {
    let most = n.div_ceil(cores.max(1)).max(1);
    (1..=most).rev().find(|k| n.is_multiple_of(*k)).unwrap_or(1)
}

/// Starts a training runtime's devices on `placement`, one for each range of `devices`
/// (consecutive replicas, run as its lanes: see [`devices`]), each with `memory` bytes per
/// lane where the host places it, in replica order, after [`check`]. A device that does not
/// start is an error naming its replica; the devices started before it stop as the error
/// returns.
pub fn open_devices(
    placement: &Placement,
    devices: &[Range<u32>],
    memory: usize,
) -> Result<Vec<Channel>, TransportError> {
    check(placement, memory)?;
    match placement {
        Placement::Thread => Channel::in_process_lanes(devices, memory, true),
        Placement::Process(exe) => Channel::device_processes(exe, devices, memory),
        Placement::Qemu(firmware) => devices
            .iter()
            .flat_map(|d| d.clone())
            .map(|replica| Channel::qemu_checked(firmware, replica))
            .collect(),
        Placement::Serial { ports, baud } => {
            let replicas: Vec<u32> = devices.iter().flat_map(|d| d.clone()).collect();
            on_ports(ports, *baud, &replicas)
        }
    }
}

/// One channel per replica of `replicas`, replica `replicas[i]` on `ports[i]` (as many
/// ports as replicas), in order.
fn on_ports(
    ports: &[PathBuf],
    baud: u32,
    replicas: &[u32],
) -> Result<Vec<Channel>, TransportError> {
    (replicas.iter().enumerate())
        .map(|(i, &replica)| {
            let port = port_of(ports, replicas.len(), i)?;
            Channel::serial_checked(port, baud, replica)
        })
        .collect()
}

/// Starts one device for each of `replicas` on `placement` (each with `memory` bytes where
/// the host places it), in replica order, after [`check`]. A device that does not start is
/// an error naming its replica; the devices started before it stop as the error returns.
pub fn open(
    placement: &Placement,
    replicas: Range<u32>,
    memory: usize,
    serving: Serving,
) -> Result<Vec<Channel>, TransportError> {
    check(placement, memory)?;
    match placement {
        // Together: they share threads (at most one per core).
        Placement::Thread => {
            Channel::in_process_all(replicas, memory, serving == Serving::HostWaits)
        }
        Placement::Process(exe) => match serving {
            Serving::Alongside => replicas
                .map(|replica| Channel::child_process(exe, replica, memory))
                .collect(),
            Serving::HostWaits => {
                let devices: Vec<_> = replicas.map(|r| r..r + 1).collect();
                Channel::device_processes(exe, &devices, memory)
            }
        },
        Placement::Qemu(firmware) => replicas
            .map(|replica| Channel::qemu_checked(firmware, replica))
            .collect(),
        Placement::Serial { ports, baud } => on_ports(ports, *baud, &replicas.collect::<Vec<_>>()),
    }
}

/// Starts device `replica` on `placement` (`memory` bytes where the host places it),
/// serving `reader` and `writer` (a link from a controller on another rank), after
/// [`check`]; it stops when the link ends ([`Served::wait`](crate::transport::Served)).
/// It is device `index` of the `count` this process serves (on serial ports, the port it
/// takes).
#[cfg(feature = "mpi")]
pub(crate) fn serve(
    placement: &Placement,
    (replica, index, count): (u32, usize, usize),
    memory: usize,
    reader: crate::transport::tunnel::LinkReader,
    writer: crate::transport::tunnel::LinkWriter,
) -> Result<crate::transport::Served, TransportError> {
    use crate::transport::{child_on, qemu_on, serial_on, thread_on};
    check(placement, memory)?;
    match placement {
        Placement::Thread => thread_on(replica, memory, reader.into_chunks(), writer),
        Placement::Process(exe) => child_on(exe, replica, memory, reader, writer),
        Placement::Qemu(firmware) => qemu_on(firmware, replica, reader, writer),
        Placement::Serial { ports, baud } => {
            let port = port_of(ports, count, index)?;
            serial_on(port, *baud, replica, reader, writer)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::array::HostArray;
    use crate::runtime::{Runtime, StepIo};
    use crate::train::data::Dataset;
    use crate::train::{model, TrainJob};
    use tessera_core::grouping::CommGroup;
    use tessera_core::transfer::InstanceWindow;

    /// The default job's program with `job`'s changes, on 2 features and 3 classes.
    fn program(job: &TrainJob) -> Program {
        model::program(job, 2, 3).unwrap()
    }

    /// Catches lanes given to replicas that cannot share a walk, or none where they can:
    /// runs of ⌈n / cores⌉ replicas when every run shares each variable's group, one
    /// device per replica otherwise and always on QEMU.
    #[test]
    fn replicas_share_a_device_only_where_they_share_every_group() {
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
        let all = TrainJob {
            replicas: 64,
            output_comm: CommGroup::All,
            ..TrainJob::default()
        };
        let shared = devices(&Placement::Thread, &program(&all), 64, 0..64, 1 << 20);
        let lanes = lanes_per_device(64, cores) as u32;
        assert_eq!(shared.len(), 64 / lanes as usize);
        assert!(shared.iter().all(|d| d.len() as u32 == lanes));
        assert_eq!(shared.first().map(|d| d.start), Some(0));
        assert_eq!(shared.last().map(|d| d.end), Some(64));
        let orthogonal = TrainJob {
            replicas: 64,
            output_comm: CommGroup::Orthogonal(2),
            ..TrainJob::default()
        };
        let apart = devices(
            &Placement::Thread,
            &program(&orthogonal),
            64,
            0..64,
            1 << 20,
        );
        let singles: Vec<_> = (0..64).map(|r| r..r + 1).collect();
        assert_eq!(apart, singles, "orthogonal pairs share no run of replicas");
        let qemu = Placement::Qemu(PathBuf::from("firmware"));
        assert_eq!(devices(&qemu, &program(&all), 64, 0..64, 1 << 20), singles);
    }

    /// Catches lanes granted without counting their memory: 1 GiB per replica on a device of
    /// 32 lanes is 32 GiB, which a device's 32-bit memory cannot say (and a thread's pool
    /// then allocated whole). Every device holds at most `MAX_DEVICE_BYTES`.
    #[test]
    fn no_device_holds_more_memory_than_32_bits_say() {
        let all = TrainJob {
            replicas: 64,
            output_comm: CommGroup::All,
            ..TrainJob::default()
        };
        let most = *DEVICE_MEMORY.end();
        let laned = devices(&Placement::Thread, &program(&all), 64, 0..64, most);
        assert_eq!(laned.iter().map(|d| d.len()).sum::<usize>(), 64);
        assert!(
            laned.iter().all(|d| d.len() * most <= MAX_DEVICE_BYTES),
            "{laned:?}"
        );
        let refused = check(&Placement::Thread, most + 1).unwrap_err();
        assert!(
            matches!(refused, TransportError::DeviceMemory { .. }),
            "{refused}"
        );
        assert!(check(&Placement::Process("tessera".into()), 100).is_err());
    }

    /// Catches lanes granted on the grouping alone: a device of 32 lanes of the 64 → 64 → 3
    /// model (a 16 KiB weight) cannot send a lane's part of its gradient in its share of a
    /// frame, and refused the program that a device per replica ran. Fewer lanes, whose
    /// parts fit, are granted instead (4 in a frame of 66 KiB).
    #[test]
    fn a_lanes_rounds_fit_its_share_of_a_frame() {
        let wide = TrainJob {
            replicas: 64,
            output_comm: CommGroup::All,
            hidden: 64,
            ..TrainJob::default()
        };
        let p = model::program(&wide, 64, 3).unwrap();
        let largest = (p.reductions(64))
            .map(|r| p.round_bytes(r.variable()))
            .max()
            .unwrap();
        assert_eq!(largest, 64 * 64 * 4);
        for d in devices(&Placement::Thread, &p, 64, 0..64, 1 << 20) {
            assert!(largest <= frame_share(d.len()), "{} lanes", d.len());
        }
        assert!(shares_a_device(&p, 64, 0..64, 4));
        assert!(
            !shares_a_device(&p, 64, 0..64, 8),
            "16 KiB for each of 8 lanes"
        );
    }

    /// Catches devices of unequal lanes (the last one short): their memory per replica
    /// differed, and a saved executable was refused on them.
    #[test]
    fn every_device_runs_as_many_replicas() {
        assert_eq!(lanes_per_device(64, 2), 32);
        assert_eq!(lanes_per_device(4, 2), 2);
        assert_eq!(lanes_per_device(6, 4), 2);
        assert_eq!(
            lanes_per_device(5, 2),
            1,
            "3 lanes would leave a device of 2"
        );
        assert_eq!(
            lanes_per_device(64, 3),
            16,
            "22 lanes would leave a device of 20"
        );
        assert_eq!(lanes_per_device(1, 8), 1);
        assert_eq!(lanes_per_device(0, 2), 1);
        assert_eq!(lanes_per_device(8, 0), 8);
    }

    /// Three steps of the default job's program (4 replicas, `w1` sharded across all,
    /// `w2` in pairs, momentum, dropout) on devices running `devices`' replicas: every
    /// anchor, weight and velocity, RNG state and cycle count.
    fn train(devices: &[Range<u32>]) -> Vec<u8> {
        let job = TrainJob::default();
        let p = program(&job);
        let channels = Channel::in_process_lanes(devices, 1 << 20, true).unwrap();
        let mut runtime = Runtime::prepare_on(p.clone(), channels).unwrap();
        let weights = model::initial_weights(&p, 4, 7).unwrap();
        runtime.weights_from_host(&weights).unwrap();
        runtime.set_random_seed(11).unwrap();
        let data = Dataset::spirals(3000, 3, 5).unwrap();
        let micro_batches = job.batches_per_step * job.accumulation;
        let mut out = Vec::new();
        for step in 0..3 {
            let start = step * micro_batches * 4;
            let window = InstanceWindow::whole(4);
            let (x, labels) = data.share(start, micro_batches, 4, window, 1).unwrap();
            let io: StepIo = [(model::INPUT.into(), x), (model::LABELS.into(), labels)].into();
            for anchor in runtime.run(&io).unwrap().values() {
                out.extend_from_slice(anchor.bytes());
            }
        }
        let weights = runtime.weights_to_host().unwrap();
        let velocity = runtime.optimizer_state_to_host().unwrap();
        for array in weights.values().chain(velocity.values()) {
            out.extend_from_slice(array.bytes());
        }
        out.extend(
            runtime
                .rng_state()
                .unwrap()
                .iter()
                .flat_map(|w| w.to_le_bytes()),
        );
        out.extend(
            runtime
                .cycle_counts()
                .unwrap()
                .iter()
                .flat_map(|c| c.to_le_bytes()),
        );
        out
    }

    /// Catches a host that cuts a batch's rounds for a whole frame while a device of two
    /// lanes cuts them for its lanes' half of one: with a 64 → 128 → 3 model (a 32 KiB
    /// weight, 35 KiB of gradients a batch) the device sends two gradient exchanges where
    /// the host expected one, and every step failed. Both now cut for the lanes' share, and
    /// two devices of two lanes train to the bits of four devices.
    #[test]
    fn host_and_lanes_cut_the_rounds_alike() {
        let job = TrainJob {
            hidden: 128,
            ..TrainJob::default()
        };
        let p = model::program(&job, 64, 3).unwrap();
        let samples = (job.batches_per_step * job.accumulation * 4) as u32;
        let x: Vec<f32> = (0..samples * 64).map(|i| (i as f32 * 0.37).sin()).collect();
        let labels: Vec<i32> = (0..samples as i32).map(|i| i % 3).collect();
        let io: StepIo = [
            (
                model::INPUT.into(),
                HostArray::from_f32(&[samples, 64], &x).unwrap(),
            ),
            (
                model::LABELS.into(),
                HostArray::from_i32(&[samples], &labels).unwrap(),
            ),
        ]
        .into();
        let run = |devices: &[Range<u32>]| {
            let channels = Channel::in_process_lanes(devices, 1 << 21, true).unwrap();
            let mut runtime = Runtime::prepare_on(p.clone(), channels).unwrap();
            runtime
                .weights_from_host(&model::initial_weights(&p, 4, 3).unwrap())
                .unwrap();
            let mut out: Vec<u8> = Vec::new();
            for anchor in runtime.run(&io).unwrap().values() {
                out.extend_from_slice(anchor.bytes());
            }
            for array in runtime.weights_to_host().unwrap().values() {
                out.extend_from_slice(array.bytes());
            }
            out
        };
        assert_eq!(run(&[0..2, 2..4]), run(&[0..1, 1..2, 2..3, 3..4]));
    }

    /// Catches a runtime whose replicas train otherwise as lanes of shared devices than on
    /// devices of their own: a lane's stream items or anchors taken from another lane, a
    /// contribution folded as one replica's, a lane's weights or RNG state read from
    /// another's, a device answered with the wrong groups' combination.
    #[test]
    fn lanes_train_to_the_bits_of_a_device_per_replica() {
        let alone = train(&[0..1, 1..2, 2..3, 3..4]);
        assert_eq!(train(&[0..2, 2..4]), alone, "two devices of two lanes");
    }
}
