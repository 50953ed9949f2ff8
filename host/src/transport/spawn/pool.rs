//! The thread placement's devices, served by at most as many threads as the machine has
//! cores.
//!
//! One thread per device put 64 threads on 2 cores, and every wait in a step became a
//! context switch or a yield (a third of a step's time went to the scheduler). A device
//! never waits inside a request — a step runs in legs, each ending at an exchange
//! ([`tessera_firmware_sim::program::step`]) — so one thread can serve many: it sleeps on a
//! single queue carrying every message for its devices, each tagged with its device, and
//! serves each device's mail in turn ([`serve_pending`]).
//!
//! A training step made that three threads on two cores: the host, waiting for the
//! devices' contributions, took a core's turn at every look, and the scheduler put both
//! device threads on the other core (`perf sched`: one core running the host's waits, the
//! other switching between the two devices' legs). So a pool may give one share of its
//! devices to the host's own thread instead of a thread of their own (the *host share*):
//! every wait of the host on any channel of the pool serves that share's mail, so the host
//! computes one share's legs while the pool's threads compute the others, with as many
//! threads as cores and none of them waiting on another for a core.
//!
//! # Rules
//!
//! - Device `i` of `n` opened together is in share `i mod k`, `k = min(n, cores)`; each
//!   share has a thread, except share 0 when the host serves it.
//! - The host share is served only inside the host's waits on the pool's channels (any of
//!   them: a device of another share may be waiting for a round the host share's devices
//!   contribute to), never in the background: a session, whose workers compute while the
//!   controller goes on, keeps a thread for every share
//!   ([`Serving`](crate::placement::Serving)). A request of a hosted device runs inside
//!   that wait to its end: no busy deadline applies to it (a step's legs are bounded).
//! - A panic in a hosted device closes the host share (as it ends a pool thread): its
//!   channels find their queues closed; the host's call does not panic.
//! - A device's messages are served in the order they were sent; its replies go on a queue
//!   of its own.
//! - A thread's busy line is every one of its devices' line: a device whose mail waits
//!   behind a sibling's long request is busy, not silent.
//! - A thread ends once every channel to its devices is gone (their mailboxes hold its
//!   only senders); the last of them to drop joins it. The host share goes with the last
//!   channel of the pool.
//! - A device whose reply queue is gone (its channel dropped) is served no more; the other
//!   devices of its thread go on.

use std::io;
use std::ops::Range;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use tessera_firmware_sim::std_link::{receive_spinning, BusyLine, Message, Queue, StdClock, SPIN};
use tessera_firmware_sim::{serve_pending, Device, Memory, Server};

use super::{DeviceHandle, Incoming, Link, Outgoing};
use crate::transport::device::{HOST_FRAME, HOST_WINDOW};
use crate::transport::shared::SharedMemory;
use crate::transport::TransportError;

/// Where messages to one pooled device go: its thread's queue, tagged with the device.
#[derive(Debug, Clone)]
pub(in crate::transport) struct Mailbox {
    queue: Sender<(usize, Message)>,
    device: usize,
}

impl Mailbox {
    /// Messages for device `device` of the thread behind `queue`.
    pub(in crate::transport) fn new(queue: Sender<(usize, Message)>, device: usize) -> Self {
        Self { queue, device }
    }

    /// Queues `message`; an error when the thread is gone.
    pub(in crate::transport) fn send(&self, message: Message) -> Result<(), ()> {
        self.queue.send((self.device, message)).map_err(|_| ())
    }
}

/// A thread serving devices, joined when the last channel to them drops.
#[derive(Debug)]
pub(in crate::transport) struct Worker {
    thread: Mutex<Option<JoinHandle<()>>>,
    busy: BusyLine,
}

impl Worker {
    /// True while the thread serves any of its devices.
    pub(in crate::transport) fn is_busy(&self) -> bool {
        self.busy.is_high()
    }

    /// True once the thread has ended.
    pub(in crate::transport) fn has_ended(&self) -> bool {
        self.thread
            .lock()
            .map(|t| t.as_ref().is_none_or(JoinHandle::is_finished))
            .unwrap_or(true)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let thread = self.thread.get_mut().map(Option::take);
        if let Ok(Some(thread)) = thread {
            let _ = thread.join();
        }
    }
}

/// One device per replica of `replicas`, each with `memory` bytes of arena (shared with
/// the host when the device can name every offset of it on the wire), in `k = min(n,
/// cores)` shares; links in replica order. With `host_serves`, share 0 is the calling
/// thread's ([`HostShare`]) and the others get a thread each; without, every share gets a
/// thread.
pub(in crate::transport) fn in_process_pool(
    replicas: Range<u32>,
    memory: usize,
    host_serves: bool,
) -> Result<Vec<Link>, TransportError> {
    let n = replicas.len();
    let cores = thread::available_parallelism().map_or(1, |c| c.get());
    let k = n.min(cores).max(1);
    let mut specs: Vec<Vec<Spec>> = (0..k).map(|_| Vec::new()).collect();
    let mut queues = Vec::with_capacity(k);
    let mut busy_lines = Vec::with_capacity(k);
    for _ in 0..k {
        queues.push(mpsc::channel::<(usize, Message)>());
        busy_lines.push(BusyLine::default());
    }
    // Declared before the links so that, should a thread fail to start, the links (the
    // mailboxes: the threads' only senders) drop first and the started threads end
    // before their workers join them.
    let mut host_share = None;
    let mut workers = Vec::with_capacity(k);
    let mut links = Vec::with_capacity(n);
    for (i, replica) in replicas.enumerate() {
        let (host_memory, shared) = match u32::try_from(memory) {
            Ok(1..) => {
                let host = SharedMemory::create(memory)?;
                let device = host.map_again()?;
                (Some(host), Some(device))
            }
            _ => (None, None),
        };
        let (replies, from_device) = mpsc::channel();
        let share_specs = &mut specs[i % k];
        let mailbox = Mailbox::new(queues[i % k].0.clone(), share_specs.len());
        share_specs.push(Spec {
            replica,
            shared,
            bytes: memory,
            replies,
        });
        links.push((i % k, from_device, mailbox, host_memory));
    }
    for (w, ((specs, (sender, inbox)), busy)) in
        specs.into_iter().zip(queues).zip(busy_lines).enumerate()
    {
        // The mailboxes hold the only senders: a share ends when they are all gone.
        drop(sender);
        if host_serves && w == 0 {
            let share = Share::new(specs, inbox, busy)?;
            host_share = Some(Arc::new(HostShare(Mutex::new(Some(share)))));
            workers.push(None);
            continue;
        }
        let line = busy.clone();
        let first = specs.first().map_or(0, |s| s.replica);
        let thread = thread::Builder::new()
            .name(format!("tessera-devices-{first}"))
            .spawn(move || match Share::new(specs, inbox, line) {
                Ok(share) => share.serve_until_closed(),
                Err(e) => tracing::warn!(error = %e, "device thread stopped"),
            })?;
        workers.push(Some(Arc::new(Worker {
            thread: Mutex::new(Some(thread)),
            busy,
        })));
    }
    Ok(links
        .into_iter()
        .map(|(w, from_device, mailbox, memory)| Link {
            incoming: match &host_share {
                // Every wait of the host on any of the pool's channels serves its share.
                Some(share) => Incoming::Served(from_device, Arc::clone(share)),
                None => Incoming::Messages(from_device),
            },
            outgoing: Outgoing::Messages(mailbox),
            handle: match &workers[w] {
                Some(worker) => DeviceHandle::Pooled(Arc::clone(worker)),
                // Only the host's share has no thread.
                None => DeviceHandle::Hosted,
            },
            window: None,
            memory,
        })
        .collect())
}

/// What a share needs to build one device.
struct Spec {
    replica: u32,
    /// The device's mapping of memory the host maps too; `None`: `bytes` of its own.
    shared: Option<SharedMemory>,
    bytes: usize,
    replies: Sender<Message>,
}

/// The share of the host's own thread: served whenever that thread waits on any channel of
/// the pool (see the module's rules), never by a thread of its own.
pub(in crate::transport) struct HostShare(Mutex<Option<Share>>);

impl std::fmt::Debug for HostShare {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostShare").finish_non_exhaustive()
    }
}

impl HostShare {
    /// Serves every message its devices have waiting; true if there was any. A panic
    /// while serving (a device's bug) ends the share as it ends a pool thread: it is
    /// caught here, the share's devices are dropped, and their channels find their
    /// queues closed — the host's own call goes on.
    pub(in crate::transport) fn serve(&self) -> bool {
        let Ok(mut share) = self.0.lock() else {
            return false;
        };
        let Some(devices) = share.as_mut() else {
            return false;
        };
        let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| devices.serve(None)));
        served.unwrap_or_else(|_| {
            tracing::warn!("a device of the host's share panicked: the share is closed");
            *share = None;
            true
        })
    }
}

/// One share of a pool's devices, owned with everything serving them takes: their memory,
/// their servers (and kept replies), the queue of every message to them, each device's own
/// queue of mail and replies.
struct Share {
    inbox: Receiver<(usize, Message)>,
    devices: Vec<Device<'static>>,
    servers: Vec<Box<HostServer>>,
    links: Vec<Queue>,
    mail: Vec<Sender<Message>>,
    replicas: Vec<u32>,
    /// A device whose channel is gone (or that failed) is served no more.
    open: Vec<bool>,
    clock: StdClock,
    busy: BusyLine,
}

/// A pooled device's server: frames and kept replies as the host's links have them.
type HostServer = Server<'static, HOST_FRAME, HOST_WINDOW>;

impl Share {
    /// Builds `specs`' devices, served from `inbox`, with `busy` high while any of them
    /// runs a request.
    fn new(
        specs: Vec<Spec>,
        inbox: Receiver<(usize, Message)>,
        busy: BusyLine,
    ) -> Result<Self, io::Error> {
        let n = specs.len();
        let mut share = Self {
            inbox,
            devices: Vec::with_capacity(n),
            servers: Vec::with_capacity(n),
            links: Vec::with_capacity(n),
            mail: Vec::with_capacity(n),
            replicas: Vec::with_capacity(n),
            open: vec![true; n],
            clock: StdClock::new(),
            busy,
        };
        for spec in specs {
            // The kept replies (a megabyte per device) live on the heap.
            let replies: Box<[[u8; HOST_FRAME]; HOST_WINDOW]> =
                vec![[0u8; HOST_FRAME]; HOST_WINDOW]
                    .into_boxed_slice()
                    .try_into()
                    .map_err(|_| io::Error::other("reply storage of the wrong size"))?;
            let server = Box::new(Server::owning(replies));
            let memory: Box<dyn Memory + Send> = match spec.shared {
                Some(shared) => Box::new(shared),
                None => Box::new(vec![0u8; spec.bytes]),
            };
            share
                .devices
                .push(Device::owning(spec.replica, memory, server.link()));
            share.servers.push(server);
            let (to_device, device_in) = mpsc::channel();
            share.links.push(Queue::new(device_in, spec.replies));
            share.mail.push(to_device);
            share.replicas.push(spec.replica);
        }
        Ok(share)
    }

    /// Files `first` and every message already queued, each to its device's mail, then
    /// serves each device that has mail; true if any had.
    fn serve(&mut self, first: Option<(usize, Message)>) -> bool {
        // The host looks here at every turn of its waits: nothing queued costs one look.
        let Some(first) = first.or_else(|| self.inbox.try_recv().ok()) else {
            return false;
        };
        let mut has_mail = vec![false; self.devices.len()];
        for (i, message) in std::iter::once(first).chain(self.inbox.try_iter()) {
            if let (Some(to), Some(flag)) = (self.mail.get(i), has_mail.get_mut(i)) {
                *flag = to.send(message).is_ok();
            }
        }
        for (i, &mail) in has_mail.iter().enumerate() {
            if !(mail && self.open[i]) {
                continue;
            }
            let served = serve_pending(
                &mut self.servers[i],
                &mut self.devices[i],
                &mut self.links[i],
                &mut self.clock,
                &mut self.busy,
            );
            match served {
                Ok(true) => {}
                // Its channel is gone: nobody reads its replies any more.
                Ok(false) => self.open[i] = false,
                Err(e) => {
                    tracing::debug!(replica = self.replicas[i], error = %e, "device stopped");
                    self.open[i] = false;
                }
            }
        }
        true
    }

    /// Serves until every mailbox to the share is gone, waiting for mail as every device
    /// wait does (looking, then asleep: `SPIN`).
    fn serve_until_closed(mut self) {
        while let Ok(first) = receive_spinning(&self.inbox, None, SPIN) {
            self.serve(Some(first));
        }
    }
}

#[cfg(test)]
mod tests {
    use tessera_core::wire::endpoint::{Command, GetSeed};
    use tessera_core::wire::Request;

    use crate::transport::{Channel, TransportError};

    /// Sets device `c`'s seed to `seed` and reads it back.
    fn seed_round_trip(c: &mut Channel, seed: u64) -> Result<u64, TransportError> {
        let set = Command::new(Request::SetSeed { seed }).expect("a command");
        c.call(&set)?;
        Ok(c.call(&GetSeed)?.get())
    }

    /// Catches a pool that gives each device a thread of its own (64 threads on 2 cores),
    /// or that mixes up which device a message is for.
    #[test]
    fn many_devices_share_at_most_one_thread_per_core_and_keep_their_state() {
        let mut channels = Channel::in_process_all(0..8, 4096, false).unwrap();
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
        let mut workers: Vec<*const super::Worker> = channels
            .iter()
            .map(|c| match c.device_handle() {
                super::DeviceHandle::Pooled(w) => std::sync::Arc::as_ptr(w),
                _ => panic!("a thread device is pooled"),
            })
            .collect();
        workers.sort();
        workers.dedup();
        assert_eq!(workers.len(), 8.min(cores));
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

    /// Catches a host share that is not served while the host waits (a call to one of its
    /// devices, or to another thread's, would hang until its deadline), a share given a
    /// thread after all, or devices that mix up their state: eight devices on
    /// `k = min(8, cores)` shares, share 0 the host's — `k − 1` threads, one device in `k`
    /// hosted.
    #[test]
    fn the_host_serves_one_share_and_its_devices_keep_their_state() {
        let mut channels = Channel::in_process_all(0..8, 4096, true).unwrap();
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
        let k = 8.min(cores);
        let mut workers = Vec::new();
        let mut hosted = Vec::new();
        for (i, c) in channels.iter().enumerate() {
            match c.device_handle() {
                super::DeviceHandle::Pooled(w) => workers.push(std::sync::Arc::as_ptr(w)),
                super::DeviceHandle::Hosted => hosted.push(i),
                _ => panic!("a thread device is pooled or hosted"),
            }
        }
        workers.sort();
        workers.dedup();
        assert_eq!(workers.len(), k - 1, "threads besides the host's");
        assert_eq!(
            hosted,
            (0..8).step_by(k).collect::<Vec<_>>(),
            "the host's share"
        );
        each_keeps_its_seed(&mut channels, 200);
        // One device: the host's alone, no thread at all.
        let mut one = Channel::in_process_all(5..6, 4096, true).unwrap();
        assert!(matches!(
            one[0].device_handle(),
            super::DeviceHandle::Hosted
        ));
        assert_eq!(seed_round_trip(&mut one[0], 3).unwrap(), 3);
    }

    /// Catches a thread that stops serving its devices once one of them is gone (its
    /// replies have nowhere to go): the siblings of a channel dropped with requests still
    /// in flight must go on answering. (The thread meets the dead reply queue only if it
    /// serves one of those requests after the drop: likely with eight queued, not certain.)
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
}
