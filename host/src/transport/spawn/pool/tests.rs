//! The pool through its channels: threads per core, the host as a server, no server waiting
//! for another, a woken thread's look, busy lines, and siblings of a dropped device.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tessera_core::wire::endpoint::{Command, GetSeed};
use tessera_core::wire::{ProgramRequest, Request, Response};

use embedded_hal::digital::OutputPin;

use super::{lock, Workers};
use crate::transport::spawn::{DeviceHandle, Liveness};
use crate::transport::spin::SPIN;
use crate::transport::{Channel, TransportError};

/// Sets device `c`'s seed to `seed` and reads it back.
fn seed_round_trip(c: &mut Channel, seed: u64) -> Result<u64, TransportError> {
    let set = Command::new(Request::Program(ProgramRequest::SetSeed { seed })).expect("a command");
    c.call(&set)?;
    Ok(c.call(&GetSeed)?.get())
}

/// The pool's threads behind `channels` (all of one pool).
fn workers(channels: &[Channel]) -> Arc<Workers> {
    let all: Vec<_> = channels
        .iter()
        .map(|c| match c.device_handle() {
            DeviceHandle::Pooled(w, _) => Arc::clone(w),
            _ => panic!("a thread device is pooled"),
        })
        .collect();
    assert!(all.iter().all(|w| Arc::ptr_eq(w, &all[0])), "one pool");
    Arc::clone(&all[0])
}

/// Catches a pool that gives each device a thread of its own (64 threads on 2 cores),
/// or that mixes up which device a message is for.
#[test]
fn many_devices_share_at_most_one_thread_per_core_and_keep_their_state() {
    let mut channels = Channel::in_process_all(0..8, 4096, false).unwrap();
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    assert_eq!(workers(&channels).threads(), 8.min(cores));
    each_keeps_its_seed(&mut channels, 100);
}

/// Gives device `i` of `channels` the seed `base + i`, then reads every seed back once
/// all are set: a device that answered for another, or lost its state, shows.
fn each_keeps_its_seed(channels: &mut [Channel], base: u64) {
    for (i, c) in channels.iter_mut().enumerate() {
        assert_eq!(
            seed_round_trip(c, base + i as u64).unwrap(),
            base + i as u64
        );
    }
    for (i, c) in channels.iter_mut().enumerate() {
        let seed = c.call(&GetSeed).unwrap().get();
        assert_eq!(seed, base + i as u64, "device {i}");
    }
}

/// Catches a pool that is not served while the host waits (with one device, a call
/// would hang until its deadline), a thread too many beside the host's, or devices that
/// mix up their state: eight devices on `k = min(8, cores)` servers, one of them the
/// host's thread.
#[test]
fn the_host_is_one_of_the_servers_and_devices_keep_their_state() {
    let mut channels = Channel::in_process_all(0..8, 4096, true).unwrap();
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    assert_eq!(workers(&channels).threads(), 8.min(cores) - 1);
    each_keeps_its_seed(&mut channels, 200);
    // One device: the host's alone, no thread at all.
    let mut one = Channel::in_process_all(5..6, 4096, true).unwrap();
    assert_eq!(workers(&one).threads(), 0);
    assert_eq!(seed_round_trip(&mut one[0], 3).unwrap(), 3);
}

/// Catches a server that waits for another: device 0 is held (standing in for a server
/// deep in a session's long kernel) and readied twice, so that a waiting server would
/// park each of the pool's two threads on it; device 1 must still be answered, and
/// device 0's requests once it is let go.
#[test]
fn no_server_waits_for_another() {
    let mut channels = Channel::in_process_on(0..2, 4096, false, 2).unwrap();
    let pool = Arc::clone(&workers(&channels).pool);
    assert_eq!(workers(&channels).threads(), 2);
    let taken = || {
        while !lock(&pool.ready).devices.is_empty() {
            std::thread::yield_now();
        }
    };
    let held = lock(&pool.members[0].slot);
    let first = channels[0]
        .submit(&Request::Program(ProgramRequest::GetSeed))
        .unwrap();
    taken();
    // As if its server had marked it unready and were still at work: the next message
    // readies it again, for the other thread.
    pool.members[0].queued.store(false, Ordering::Release);
    let second = channels[0]
        .submit(&Request::Program(ProgramRequest::GetSeed))
        .unwrap();
    taken();
    assert_eq!(seed_round_trip(&mut channels[1], 7).unwrap(), 7);
    drop(held);
    pool.let_go(0);
    for seq in [first, second] {
        let reply = channels[0].receive(seq).unwrap();
        assert!(
            matches!(reply.response(), Some(Response::Seed { .. })),
            "{reply:?}"
        );
    }
}

/// Catches a woken thread that goes back to sleep at once when the device it was rung
/// for is gone (the host's wait took it first): the next device readied then had to
/// wake it again. The pool's one thread is let fall asleep, rung with nothing on the
/// ready queue, and must be seen awake — looking, not asleep — before it sleeps again. A
/// thread that sleeps again at once does so under the lock it woke with, so it is never
/// seen awake; each miss rings again, so a slow wake-up cannot fail the test.
#[test]
fn a_woken_thread_looks_again_before_it_sleeps() {
    let channels = Channel::in_process_on(0..1, 4096, false, 1).unwrap();
    let pool = Arc::clone(&workers(&channels).pool);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut rings = 0;
    loop {
        assert!(
            Instant::now() < deadline,
            "the woken thread was never seen awake ({rings} rings)"
        );
        let mut ready = lock(&pool.ready);
        match (ready.sleepers, ready.waking) {
            // Awake and looking: what a ring must bring about.
            (0, 0) if rings > 0 => break,
            // Asleep and not being woken: ring, as a device readied and taken at once
            // by another server would.
            (1, 0) => {
                pool.ring(&mut ready);
                rings += 1;
            }
            // Still spinning after it was started, or being woken.
            _ => {}
        }
        drop(ready);
        std::thread::yield_now();
    }
    drop(channels);
}

/// Catches a session's pool kept awake as long as a training runtime's (its threads,
/// yielding for milliseconds after each call, took a share of the cores a controller's
/// allreduce combine is cut across), and a runtime's pool that sleeps after a channel's
/// spin (the host's own work between steps outlasts it, and the next step's first message
/// then pays a wake-up).
#[test]
fn a_runtime_pool_stays_awake_between_steps_and_a_sessions_does_not() {
    let session = Channel::in_process_all(0..2, 4096, false).unwrap();
    let runtime = Channel::in_process_all(0..2, 4096, true).unwrap();
    assert_eq!(workers(&session).pool.awake, SPIN);
    assert_eq!(workers(&runtime).pool.awake, super::ready::AWAKE);
    assert!(
        super::ready::AWAKE > SPIN,
        "a runtime's threads outlast a spin"
    );
}

/// Catches a pool of no device that starts a thread anyway: with no mailbox to close
/// the pool, the thread would wait for mail forever and the call never return.
#[test]
fn a_pool_of_no_device_returns() {
    assert!(Channel::in_process_all(0..0, 4096, false)
        .unwrap()
        .is_empty());
    assert!(Channel::in_process_all(0..0, 4096, true)
        .unwrap()
        .is_empty());
}

/// Catches a busy line shared by the whole pool: a device that nobody serves and that
/// waits for no server must read idle while a sibling is served (a pool-wide line kept
/// such a silent device "busy", unreported, for the whole busy deadline), and a ready
/// device waiting for the pool's one thread, at work, must read busy.
#[test]
fn a_device_is_busy_only_while_served_or_waiting_for_a_server() {
    let channels = Channel::in_process_on(0..3, 4096, false, 1).unwrap();
    let pool = Arc::clone(&workers(&channels).pool);
    assert_eq!(workers(&channels).threads(), 1);
    let liveness = |i: usize| channels[i].device_handle().liveness();
    // As while the thread runs a request of device 0.
    let (mut thread, mut device) = (pool.lines[0].clone(), pool.members[0].busy.clone());
    thread.set_high().unwrap();
    device.set_high().unwrap();
    assert_eq!(liveness(0), Liveness::Busy);
    assert_eq!(liveness(1), Liveness::Idle, "a sibling at work");
    // Device 2 ready, waiting for that thread.
    pool.members[2].queued.store(true, Ordering::Release);
    assert_eq!(liveness(2), Liveness::Busy);
    pool.members[2].queued.store(false, Ordering::Release);
    thread.set_low().unwrap();
    device.set_low().unwrap();
    assert_eq!(liveness(0), Liveness::Idle);
}

/// Catches a pool that stops serving once one of its devices is gone (its replies have
/// nowhere to go): the siblings of a channel dropped with requests still in flight must
/// go on answering. (A server meets the dead reply queue only if it serves one of those
/// requests after the drop: likely with eight queued, not certain.)
#[test]
fn a_dropped_device_leaves_its_siblings_running() {
    let mut channels = Channel::in_process_all(0..4, 4096, false).unwrap();
    let mut gone = channels.remove(0);
    for _ in 0..8 {
        gone.submit(&Request::Program(ProgramRequest::GetSeed))
            .unwrap();
    }
    drop(gone);
    for c in &mut channels {
        assert_eq!(seed_round_trip(c, 9).unwrap(), 9, "replica {}", c.replica());
    }
}
