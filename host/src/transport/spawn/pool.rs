//! The thread placement's devices, served by at most as many threads as the machine has
//! cores.
//!
//! One thread per device put 64 threads on 2 cores, and every wait in a step became a
//! context switch or a yield (a third of a step's time went to the scheduler). A device
//! never waits inside a request — a step runs in legs, each ending at an exchange
//! ([`Device::start_step`](tessera_firmware_sim::Device::start_step)) — so one thread can
//! serve many: each device has a queue of mail, and a device with mail waits on the pool's
//! *ready queue* until one of the pool's *servers* takes it and serves its mail
//! ([`serve_pending`]).
//!
//! A training step made that three threads on two cores: the host, waiting for the
//! devices' contributions, took a core's turn at every look. So the host's own thread may
//! be one of the servers: every wait of the host on a channel of the pool serves ready
//! devices, one at a time, until its message is in.
//!
//! The devices were first split into fixed shares, one per server. The host, whose waits
//! also run the step driver, then ended each round late while the pool's thread sat idle
//! for half of a step (perf, 64 replicas on 2 cores). Any server now takes any ready
//! device, so a round's work spreads over the servers as they come free — but the device
//! it served last first, when that one is ready: a device of 32 lanes keeps tens of
//! kilobytes (its lanes' activations, gradients, FIFOs) in its server's core caches, and
//! taking whichever came first moved it to the other core at half of its legs. Measured on
//! 2 cores (64 replicas, 2 devices of 32 lanes), the devices' legs took 138–195 µs a step
//! that way and 134–142 µs this way, and a step 85–125 µs against 82–90 µs.
//!
//! # Rules
//!
//! - `k = min(n, cores)` servers for `n` devices: `k` threads, or `k − 1` and the host's
//!   thread when the host serves.
//! - The host serves only inside its waits on the pool's channels, never in the background:
//!   a session, whose workers compute while the controller goes on, has a thread for every
//!   server ([`Serving`](crate::placement::Serving)). A request the host serves runs inside
//!   that wait to its end: no busy deadline applies to it (a step's legs are bounded).
//! - One server at a time serves a device; a device's messages are served in the order they
//!   were sent; its replies go on a queue of its own.
//! - A server takes the device it served last if it is ready, else the one readied first
//!   (`Ready::take`): a preference, never a wait — a server whose device is not ready takes
//!   another, so no ready device waits while a server looks for work — and a bounded one:
//!   the device first in line is passed over at most twice, then taken, so a device readied
//!   again and again while its server serves it keeps no other waiting longer.
//! - A pool thread that finds no ready device looks again, yielding between looks, for
//!   [`SPIN`], then sleeps on the pool's bell; a device readied while a thread sleeps
//!   rings it. A woken thread looks for a whole `SPIN` again before it sleeps again: the
//!   device it was rung for is often gone — the host, serving in its waits, takes devices
//!   as soon as they are ready — and the next one comes within microseconds (a step
//!   readies its devices round after round). Sleeping again at once meant a new wake-up
//!   (4–35 µs measured on a 2-core VM) whenever the host had taken that device, and a
//!   step's first rounds ran on the host's thread alone.
//! - A device is readied once until a server takes it; its server marks it unready before
//!   it reads its mail, so a message sent while it is being served readies it again: no
//!   message waits unseen. A server that finds a ready device being served by another
//!   leaves it to that one, which serves it again when it lets go: no server ever waits
//!   for another (a session's kernel may run for seconds). So only a server takes a
//!   device's lock, and it always lets go through `let_go`; what the host asks of a device
//!   while it is silent (has it ended?) is kept beside the lock.
//! - A device is busy while a server runs its request, and while it is ready and every
//!   pool thread is at work on another device's: a device whose mail waits behind its
//!   siblings' long requests is busy, not silent. Any other device is idle, whatever its
//!   siblings do (a silent device that nobody serves and that waits for nobody is not kept
//!   alive by a busy sibling).
//! - A device that panics, fails, or whose channel is gone is served no more: it is dropped
//!   with its reply queue, and its channel finds the queue closed. Its siblings go on. A
//!   panic is caught where it happens, on a thread or inside the host's wait.
//! - The threads end once every channel to the pool is gone (the last mailbox closes the
//!   ready queue); the last channel to drop joins them.

use std::collections::VecDeque;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, TryLockError};
use std::thread::{self, JoinHandle};
use std::time::Instant;

use embedded_hal::digital::OutputPin;
use tessera_firmware_sim::std_link::{BusyLine, Message, Queue, SPIN};
use tessera_firmware_sim::{serve_pending, Device, Memory, Server};

use super::{DeviceHandle, Incoming, Link, Outgoing};
use crate::transport::device::{HOST_FRAME, HOST_WINDOW};
use crate::transport::shared::SharedMemory;
use crate::transport::TransportError;

/// Where messages to one pooled device go: its queue of mail, and the pool's ready queue.
#[derive(Debug)]
pub(in crate::transport) struct Mailbox {
    mail: Sender<Message>,
    /// The pool and the device's index in it (`None`: a queue nobody serves, for tests).
    pool: Option<(Arc<Pool>, usize)>,
}

impl Mailbox {
    /// Queues `message` and readies the device; an error once the device is served no
    /// more.
    pub(in crate::transport) fn send(&self, message: Message) -> Result<(), ()> {
        self.mail.send(message).map_err(|_| ())?;
        if let Some((pool, device)) = &self.pool {
            pool.ready(*device);
        }
        Ok(())
    }

    /// A mailbox whose messages only wait on `mail`: no pool serves them.
    #[cfg(test)]
    pub(in crate::transport) fn unserved(mail: Sender<Message>) -> Self {
        Self { mail, pool: None }
    }
}

impl Drop for Mailbox {
    fn drop(&mut self) {
        if let Some((pool, _)) = &self.pool {
            pool.mailbox_gone();
        }
    }
}

/// The pool's threads, joined when the last channel to its devices drops.
#[derive(Debug)]
pub(in crate::transport) struct Workers {
    pool: Arc<Pool>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Workers {
    /// True while device `device` is busy (module rules): a server runs its request, or it
    /// is ready and every pool thread is at work.
    pub(in crate::transport) fn is_busy(&self, device: usize) -> bool {
        let pool = &self.pool;
        let Some(member) = pool.members.get(device) else {
            return false;
        };
        let threads = pool.lines.get(pool.first_thread..).unwrap_or_default();
        let waits = member.queued.load(Ordering::Acquire)
            && !threads.is_empty()
            && threads.iter().all(BusyLine::is_high);
        member.busy.is_high() || waits
    }

    /// True once device `device` is served no more (it panicked, failed or was dropped).
    /// Read from a flag, not the device's lock: only a server takes that (module rules).
    pub(in crate::transport) fn has_ended(&self, device: usize) -> bool {
        self.pool
            .members
            .get(device)
            .is_none_or(|member| member.ended.load(Ordering::Acquire))
    }

    /// The pool's threads (the host's thread, when it serves, not counted).
    #[cfg(test)]
    fn threads(&self) -> usize {
        lock(&self.threads).len()
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        let threads = std::mem::take(
            self.threads
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for thread in threads {
            let _ = thread.join();
        }
    }
}

/// One device per first replica of `devices` (each device's first lane's), each with
/// `memory` bytes of arena (shared with the host when the device can name every offset of
/// it on the wire), served by `k = min(n, cores)` servers: with `host_serves`, the calling
/// thread (inside its waits on the pool's channels) and `k − 1` threads; without, `k`
/// threads. Links in the order of `devices`.
pub(in crate::transport) fn in_process_pool(
    devices: &[u32],
    memory: usize,
    host_serves: bool,
) -> Result<Vec<Link>, TransportError> {
    let cores = thread::available_parallelism().map_or(1, |c| c.get());
    pool_on(devices, memory, host_serves, cores)
}

/// [`in_process_pool`] on a machine of `cores` cores.
pub(in crate::transport) fn pool_on(
    devices: &[u32],
    memory: usize,
    host_serves: bool,
    cores: usize,
) -> Result<Vec<Link>, TransportError> {
    let n = devices.len();
    // No device, no server (a thread would wait for mail forever).
    let servers = n.min(cores.max(1));
    let mut members = Vec::with_capacity(n);
    let mut ends = Vec::with_capacity(n);
    for &replica in devices {
        let (host_memory, shared) = match u32::try_from(memory) {
            Ok(1..) => {
                let host = SharedMemory::create(memory)?;
                let device = host.map_again()?;
                (Some(host), Some(device))
            }
            _ => (None, None),
        };
        let (replies, from_device) = mpsc::channel();
        let (mail, to_device) = mpsc::channel();
        let slot = Slot::new(replica, shared, memory, to_device, replies)?;
        members.push(Member {
            busy: slot.busy.clone(),
            slot: Mutex::new(Some(slot)),
            queued: AtomicBool::new(false),
            ended: AtomicBool::new(false),
        });
        ends.push((from_device, mail, host_memory));
    }
    let pool = Arc::new(Pool {
        members,
        ready: Mutex::new(Ready {
            devices: VecDeque::new(),
            passed: 0,
            again: vec![false; n],
            sleepers: 0,
            waking: 0,
            closed: false,
        }),
        bell: Condvar::new(),
        mailboxes: AtomicUsize::new(n),
        // The host's line is the first, whether it serves or not.
        lines: (0..servers.max(1)).map(|_| BusyLine::default()).collect(),
        first_thread: usize::from(host_serves),
        host_last: AtomicUsize::new(usize::MAX),
    });
    // The mailboxes come first: should a thread fail to start, they drop with the links,
    // the pool closes, and the threads already started end.
    let links: Vec<_> = ends
        .into_iter()
        .enumerate()
        .map(|(i, (from_device, mail, host_memory))| {
            let mailbox = Mailbox {
                mail,
                pool: Some((Arc::clone(&pool), i)),
            };
            (i, from_device, mailbox, host_memory)
        })
        .collect();
    let mut threads = Vec::with_capacity(servers);
    for server in usize::from(host_serves)..servers {
        let pool = Arc::clone(&pool);
        let thread = thread::Builder::new()
            .name(format!("tessera-devices-{server}"))
            .spawn(move || {
                let Some(mut line) = pool.lines.get(server).cloned() else {
                    return;
                };
                let mut last = None;
                while let Some(device) = pool.next(last) {
                    // Only a device it served is in its core's caches.
                    if pool.serve(device, &mut line) {
                        last = Some(device);
                    }
                }
            })?;
        threads.push(thread);
    }
    let workers = Arc::new(Workers {
        pool: Arc::clone(&pool),
        threads: Mutex::new(threads),
    });
    Ok(links
        .into_iter()
        .map(|(i, from_device, mailbox, memory)| Link {
            incoming: if host_serves {
                // Every wait of the host on any of the pool's channels serves the pool.
                Incoming::Served(from_device, Arc::clone(&pool))
            } else {
                Incoming::Messages(from_device)
            },
            outgoing: Outgoing::Messages(mailbox),
            handle: DeviceHandle::Pooled(Arc::clone(&workers), i),
            window: None,
            memory,
        })
        .collect())
}

/// The pool's devices, their ready queue and their servers' busy lines.
pub(in crate::transport) struct Pool {
    members: Vec<Member>,
    ready: Mutex<Ready>,
    /// Rung when a device is readied while a thread sleeps, and when the pool closes.
    bell: Condvar,
    /// Mailboxes still open: the last one closes the ready queue.
    mailboxes: AtomicUsize,
    /// One line per server (the host's first when it serves), high while it serves.
    lines: Vec<BusyLine>,
    /// The first of `lines` that is a pool thread's.
    first_thread: usize,
    /// The device the host's waits served last (`usize::MAX`: none yet).
    host_last: AtomicUsize,
}

/// One device of the pool: what serves it, under its lock (only a server takes it), and
/// what the others look at without it.
struct Member {
    /// Everything serving it takes; `None` once it is served no more.
    slot: Mutex<Option<Slot>>,
    /// On the ready queue (or about to be put there).
    queued: AtomicBool,
    /// Served no more (its slot is empty).
    ended: AtomicBool,
    /// High while a server runs one of its requests (the slot drives a clone of it).
    busy: BusyLine,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("devices", &self.members.len())
            .finish_non_exhaustive()
    }
}

/// Times the device first in line may be passed over for a server's own before it is
/// taken: a device readied again and again while its server serves it cannot keep the
/// others waiting (more devices than servers) for longer than that.
const PASSES: usize = 2;

impl Ready {
    /// The next device to serve: `last`, the device its server served before, if it is
    /// ready (its memory is still in that server's core's caches) and the first in line has
    /// not been passed over [`PASSES`] times already; else the first readied.
    fn take(&mut self, last: Option<usize>) -> Option<usize> {
        let mine = last.and_then(|d| self.devices.iter().position(|&r| r == d));
        match mine {
            Some(at) if at > 0 && self.passed < PASSES => {
                self.passed += 1;
                self.devices.remove(at)
            }
            _ => {
                self.passed = 0;
                self.devices.pop_front()
            }
        }
    }
}

/// Devices with mail, in the order they were readied.
struct Ready {
    devices: VecDeque<usize>,
    /// Times the device first in line was passed over (`take`).
    passed: usize,
    /// Device `i` was found being served while it was ready: its server readies it again
    /// when it lets go (module rules).
    again: Vec<bool>,
    /// Threads asleep on the bell, and how many of them a ring is already waking: a device
    /// readied while every sleeper is being woken rings nobody (a ring costs a system
    /// call, and a woken thread takes a while to take its lock back).
    sleepers: usize,
    waking: usize,
    /// Every mailbox is gone: the threads end.
    closed: bool,
}

impl Pool {
    /// Puts device `device` on the ready queue unless it is there already.
    fn ready(&self, device: usize) {
        let Some(member) = self.members.get(device) else {
            return;
        };
        // Acquire-release: whoever clears the flag next sees the mail sent before this.
        if member.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut ready = lock(&self.ready);
        ready.devices.push_back(device);
        self.ring(&mut ready);
    }

    /// Wakes a sleeping thread for a device just put on the ready queue, unless every
    /// sleeper is being woken already.
    fn ring(&self, ready: &mut Ready) {
        if ready.sleepers > ready.waking {
            ready.waking += 1;
            self.bell.notify_one();
        }
    }

    /// One mailbox fewer; the last closes the ready queue.
    fn mailbox_gone(&self) {
        if self.mailboxes.fetch_sub(1, Ordering::AcqRel) == 1 {
            lock(&self.ready).closed = true;
            self.bell.notify_all();
        }
    }

    /// For a pool thread: the next ready device, looked for without sleeping for up to
    /// [`SPIN`] (yielding between looks, as every device wait does), then asleep on the
    /// bell, and for up to `SPIN` again each time it wakes; `None` once the pool has closed.
    fn next(&self, last: Option<usize>) -> Option<usize> {
        // The clock is read once a look finds nothing.
        let mut begun = None;
        let mut ready = lock(&self.ready);
        loop {
            if let Some(device) = ready.take(last) {
                return Some(device);
            }
            if ready.closed {
                return None;
            }
            if begun.get_or_insert_with(Instant::now).elapsed() < SPIN {
                drop(ready);
                thread::yield_now();
                ready = lock(&self.ready);
                continue;
            }
            // Woken (rung, or spuriously), a thread counts as awake again and looks, for a
            // whole spin again (module rules: the device it was rung for may be gone).
            ready.sleepers += 1;
            ready = self
                .bell
                .wait(ready)
                .unwrap_or_else(PoisonError::into_inner);
            ready.sleepers -= 1;
            ready.waking = ready.waking.saturating_sub(1);
            begun = None;
        }
    }

    /// For the host's wait: serves one ready device (skipping any another server is
    /// serving); false when none was left to serve.
    pub(in crate::transport) fn serve_one(&self) -> bool {
        let Some(mut line) = self.lines.first().cloned() else {
            return false;
        };
        loop {
            let last = self.host_last.load(Ordering::Relaxed);
            let Some(device) = lock(&self.ready).take(Some(last)) else {
                return false;
            };
            if self.serve(device, &mut line) {
                self.host_last.store(device, Ordering::Relaxed);
                return true;
            }
        }
    }

    /// Serves device `device`'s mail, its server's `line` high meanwhile and the device's
    /// while each request runs; true if it did (false: it has ended, or another server is
    /// serving it and will serve it again).
    fn serve(&self, device: usize, line: &mut BusyLine) -> bool {
        let Some(member) = self.members.get(device) else {
            return false;
        };
        let slot = &member.slot;
        let mut slot = match slot.try_lock() {
            Ok(slot) => slot,
            Err(TryLockError::Poisoned(slot)) => slot.into_inner(),
            Err(TryLockError::WouldBlock) => {
                // Left to its server, which looks at `again` once it has let go; should it
                // have let go already, the lock is free now (it looked under the same lock
                // this mark was made under, before or after it).
                if let Some(again) = lock(&self.ready).again.get_mut(device) {
                    *again = true;
                }
                match slot.try_lock() {
                    Ok(slot) => slot,
                    Err(TryLockError::Poisoned(slot)) => slot.into_inner(),
                    Err(TryLockError::WouldBlock) => return false,
                }
            }
        };
        // Unready before its mail is read (module rules): acquire-release, so that the mail
        // sent before it was readied is seen.
        member.queued.swap(false, Ordering::AcqRel);
        let Some(s) = slot.as_mut() else {
            return false;
        };
        let _ = line.set_high();
        let served = catch_unwind(AssertUnwindSafe(|| {
            serve_pending(&mut s.server, &mut s.device, &mut s.link, &mut s.busy)
        }));
        let _ = line.set_low();
        let ends = match served {
            Ok(Ok(true)) => false,
            // Its channel is gone: nobody reads its replies any more.
            Ok(Ok(false)) => true,
            Ok(Err(e)) => {
                tracing::debug!(replica = s.replica, error = %e, "device stopped");
                true
            }
            Err(_) => {
                tracing::warn!(
                    replica = s.replica,
                    "a pooled device panicked: it is served no more"
                );
                // The panic left its request's line high.
                let _ = s.busy.set_low();
                true
            }
        };
        if ends {
            *slot = None;
            member.ended.store(true, Ordering::Release);
        }
        drop(slot);
        self.let_go(device);
        true
    }

    /// After its server has let go of device `device`: readies it again if another server
    /// found it being served meanwhile (module rules).
    fn let_go(&self, device: usize) {
        let mut ready = lock(&self.ready);
        if ready.again.get_mut(device).is_some_and(std::mem::take) {
            ready.devices.push_back(device);
            self.ring(&mut ready);
        }
    }
}

/// Locks `m`, whatever a panic elsewhere left in it (every lock here guards state a panic
/// cannot leave half-changed: a panic while serving is caught inside the lock).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One device with everything serving it takes: its memory, its server (and kept
/// replies), its queue of mail and replies, and its busy line.
struct Slot {
    device: Device<'static>,
    server: Box<HostServer>,
    link: Queue,
    busy: BusyLine,
    replica: u32,
}

/// A pooled device's server: frames and kept replies as the host's links have them.
type HostServer = Server<'static, HOST_FRAME, HOST_WINDOW>;

impl Slot {
    /// Device `replica` with `bytes` of memory (`shared`: the mapping the host maps too),
    /// its mail on `mail` and its replies to `replies`.
    fn new(
        replica: u32,
        shared: Option<SharedMemory>,
        bytes: usize,
        mail: mpsc::Receiver<Message>,
        replies: Sender<Message>,
    ) -> Result<Self, io::Error> {
        // The kept replies (a megabyte per device) live on the heap.
        let kept: Box<[[u8; HOST_FRAME]; HOST_WINDOW]> = vec![[0u8; HOST_FRAME]; HOST_WINDOW]
            .into_boxed_slice()
            .try_into()
            .map_err(|_| io::Error::other("reply storage of the wrong size"))?;
        let server = Box::new(Server::owning(kept));
        let memory: Box<dyn Memory + Send> = match shared {
            Some(shared) => Box::new(shared),
            None => {
                let mut own = Vec::new();
                own.try_reserve_exact(bytes).map_err(|_| {
                    io::Error::new(
                        io::ErrorKind::OutOfMemory,
                        format!(
                            "device {replica}: the host cannot allocate {bytes} bytes of memory"
                        ),
                    )
                })?;
                own.resize(bytes, 0u8);
                Box::new(own)
            }
        };
        Ok(Self {
            device: Device::owning(replica, memory, server.link()),
            server,
            link: Queue::new(mail, replies),
            busy: BusyLine::default(),
            replica,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use tessera_core::wire::endpoint::{Command, GetSeed};
    use tessera_core::wire::{Request, Response};

    use embedded_hal::digital::OutputPin;

    use super::{lock, Ready, Workers};
    use crate::transport::spawn::{DeviceHandle, Liveness};
    use crate::transport::{Channel, TransportError};

    /// Sets device `c`'s seed to `seed` and reads it back.
    fn seed_round_trip(c: &mut Channel, seed: u64) -> Result<u64, TransportError> {
        let set = Command::new(Request::SetSeed { seed }).expect("a command");
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
        let first = channels[0].submit(&Request::GetSeed).unwrap();
        taken();
        // As if its server had marked it unready and were still at work: the next message
        // readies it again, for the other thread.
        pool.members[0].queued.store(false, Ordering::Release);
        let second = channels[0].submit(&Request::GetSeed).unwrap();
        taken();
        assert_eq!(seed_round_trip(&mut channels[1], 7).unwrap(), 7);
        drop(held);
        pool.let_go(0);
        for seq in [first, second] {
            let reply = channels[0].receive(seq).unwrap();
            assert!(
                matches!(reply.response(), Response::Seed { .. }),
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
            gone.submit(&Request::GetSeed).unwrap();
        }
        drop(gone);
        for c in &mut channels {
            assert_eq!(seed_round_trip(c, 9).unwrap(), 9, "replica {}", c.replica());
        }
    }

    /// An open pool's line of `devices` readied in that order, of `n` devices.
    fn readied(devices: &[usize], n: usize) -> Ready {
        Ready {
            devices: devices.iter().copied().collect(),
            passed: 0,
            again: vec![false; n],
            sleepers: 0,
            waking: 0,
            closed: false,
        }
    }

    /// Catches a server that takes the first device readied while the one it served last
    /// is ready too (a device moved between cores' caches at every leg), and one that waits
    /// for its own device while another is ready.
    #[test]
    fn a_server_takes_its_last_device_first_and_else_the_first_readied() {
        let mut ready = readied(&[4, 1, 7], 8);
        assert_eq!(ready.take(Some(1)), Some(1));
        assert_eq!(
            ready.take(Some(1)),
            Some(4),
            "its own not ready: the first readied"
        );
        assert_eq!(ready.take(None), Some(7));
        assert_eq!(ready.take(Some(7)), None);
    }

    /// Catches a preference without a bound: a server whose device is readied again each
    /// time it lets go would pass over the first in line forever; it is taken after two.
    #[test]
    fn the_first_in_line_is_passed_over_at_most_twice() {
        let mut ready = readied(&[3], 4);
        for round in 0..3 {
            ready.devices.push_back(1);
            let taken = ready.take(Some(1));
            assert_eq!(taken, Some(if round < 2 { 1 } else { 3 }), "take {round}");
        }
        assert_eq!(ready.take(Some(1)), Some(1));
        assert_eq!(ready.take(Some(1)), None);
    }
}
