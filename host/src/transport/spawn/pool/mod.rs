//! The thread placement's devices, served by at most as many threads as the machine has
//! cores.
//!
//! A device never waits inside a request — a step runs in legs, each ending at an exchange
//! ([`Device::start_step`](tessera_firmware_sim::Device::start_step)) — so one thread can serve many: each device
//! has a queue of mail, and a device with mail waits on the pool's *ready queue* until one
//! of the pool's *servers* takes it and serves its mail
//! ([`serve_pending`](tessera_firmware_sim::serve_pending)). (One thread per device put 64
//! threads on 2 cores, and a third of a step's time went to the scheduler.)
//!
//! The host's own thread may be one of the servers: every wait of the host on a channel of
//! the pool serves ready devices, one at a time, until its message is in (a pool thread in
//! its place took a core's turn at every look of the host's). Any server takes any ready
//! device, so a round's work spreads over the servers as they come free (with fixed shares,
//! one per server, the host — whose waits also run the step driver — ended each round late
//! while the pool's thread sat idle) — but the device it served last first, when that one is
//! ready: a device of 32 lanes keeps tens of kilobytes (its lanes' activations, gradients,
//! FIFOs) in its server's core's caches, which taking whichever came first moved to the
//! other core at half of its legs. The measurements behind these choices are in the
//! README's history (`git log -p README.md`).
//!
//! - `ready`: the ready queue — which device a server takes next, how a pool thread waits
//!   for one, and how a readied device wakes it.
//! - `serve`: serving one device's mail (on a pool thread, or inside the host's wait), and
//!   letting it go.
//! - `slot`: one device with everything serving it takes.
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
//! - A pool thread that finds no ready device looks again, yielding between looks, for a
//!   while, then sleeps on the pool's bell; a device readied while a thread sleeps rings
//!   it. A training runtime's pool (the host serves) stays awake for `ready`'s `AWAKE`,
//!   longer than a channel's wait spins, to span a training loop's own work between steps,
//!   which leaves the pool's cores idle; a session's pool for a channel's [`SPIN`]: its
//!   controller may put every core to work between calls (an allreduce's combine is cut
//!   between cores), and a thread yielding beside it for that long took a share of each
//!   core's time (the runs are in the README's speed section). A woken thread looks for as
//!   long again before it sleeps again: the device it was rung for is often gone — the
//!   host, serving in its waits, takes devices as soon as they are ready — and the next one
//!   comes within microseconds (a step readies its devices round after round). Sleeping
//!   again at once meant a new wake-up whenever the host had taken that device, and a
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

mod ready;
mod serve;
mod slot;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::{DeviceHandle, Incoming, Link};
use crate::transport::board::BusyLine;
use crate::transport::queue::Message;
use crate::transport::shared::SharedMemory;
use crate::transport::spin::SPIN;
use crate::transport::TransportError;
use ready::Ready;
use slot::Slot;

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
    // No device, no server (a thread would wait for mail forever).
    let servers = devices.len().min(cores.max(1));
    let (members, ends) = open_devices(devices, memory)?;
    let pool = Arc::new(Pool::new(members, servers, host_serves));
    // The mailboxes come first: should a thread fail to start, they drop with the links,
    // the pool closes, and the threads already started end.
    let ends: Vec<HostEnd> = (ends.into_iter().enumerate())
        .map(|(i, (replies, mail, memory))| HostEnd {
            replies,
            mailbox: Mailbox {
                mail,
                pool: Some((Arc::clone(&pool), i)),
            },
            memory,
        })
        .collect();
    let threads = serve::start_threads(&pool, usize::from(host_serves)..servers)?;
    let workers = Arc::new(Workers {
        pool: Arc::clone(&pool),
        threads: Mutex::new(threads),
    });
    Ok((ends.into_iter().enumerate())
        .map(|(i, end)| end.link(i, &pool, &workers, host_serves))
        .collect())
}

/// The host's ends of one device before the pool has them: the queue its replies come on,
/// the queue its mail goes on, and the host's mapping of its memory (when shared).
type Ends = (Receiver<Message>, Sender<Message>, Option<SharedMemory>);

/// One device per replica of `devices`, each with `memory` bytes of arena (shared with the
/// host when the wire can name every offset of it): the pool's members, and the host's
/// ends of each.
fn open_devices(
    devices: &[u32],
    memory: usize,
) -> Result<(Vec<Member>, Vec<Ends>), TransportError> {
    let mut members = Vec::with_capacity(devices.len());
    let mut ends = Vec::with_capacity(devices.len());
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
    Ok((members, ends))
}

/// The host's ends of one pooled device, its mailbox made: what its link is made of.
struct HostEnd {
    replies: Receiver<Message>,
    mailbox: Mailbox,
    memory: Option<SharedMemory>,
}

impl HostEnd {
    /// Device `i`'s link, served by `pool`'s `workers` (and, with `host_serves`, by every
    /// wait of the host on it).
    fn link(self, i: usize, pool: &Arc<Pool>, workers: &Arc<Workers>, host_serves: bool) -> Link {
        Link::Pooled {
            from: if host_serves {
                // Every wait of the host on any of the pool's channels serves the pool.
                Incoming::Served(self.replies, Arc::clone(pool))
            } else {
                Incoming::Messages(self.replies)
            },
            to: self.mailbox,
            handle: DeviceHandle::Pooled(Arc::clone(workers), i),
            memory: self.memory,
        }
    }
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
    /// How long a pool thread with nothing to serve stays awake (module rules).
    awake: Duration,
}

impl Pool {
    /// A pool of `members`, none ready, with a busy line for each of `servers` (at least
    /// one: the host's line is the first, whether it serves or not).
    fn new(members: Vec<Member>, servers: usize, host_serves: bool) -> Self {
        let n = members.len();
        Self {
            members,
            ready: Mutex::new(Ready::new(n)),
            bell: Condvar::new(),
            mailboxes: AtomicUsize::new(n),
            lines: (0..servers.max(1)).map(|_| BusyLine::default()).collect(),
            first_thread: usize::from(host_serves),
            host_last: AtomicUsize::new(usize::MAX),
            awake: if host_serves { ready::AWAKE } else { SPIN },
        }
    }
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

/// Locks `m`, whatever a panic elsewhere left in it (every lock here guards state a panic
/// cannot leave half-changed: a panic while serving is caught inside the lock).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
