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
//! # Rules
//!
//! - Device `i` of `n` opened together runs on thread `i mod k`, `k = min(n, cores)`.
//! - A device's messages are served in the order they were sent; its replies go on a queue
//!   of its own.
//! - A thread's busy line is every one of its devices' line: a device whose mail waits
//!   behind a sibling's long request is busy, not silent.
//! - A thread ends once every channel to its devices is gone (their mailboxes hold its
//!   only senders); the last of them to drop joins it.
//! - A device whose reply queue is gone (its channel dropped) is served no more; the other
//!   devices of its thread go on.

use std::io;
use std::ops::Range;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use tessera_firmware_sim::std_link::{receive_spinning, BusyLine, Message, Queue, StdClock, SPIN};
use tessera_firmware_sim::{serve_pending, CycleCounter, Device, Memory, Server};

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

/// What a thread needs to build one device.
struct Spec {
    replica: u32,
    /// The device's mapping of memory the host maps too; `None`: `bytes` of its own.
    shared: Option<SharedMemory>,
    bytes: usize,
    replies: Sender<Message>,
}

/// One device per replica of `replicas`, each with `memory` bytes of arena (shared with
/// the host when the device can name every offset of it on the wire), on at most as many
/// threads as the machine has cores; links in replica order.
pub(in crate::transport) fn in_process_pool(
    replicas: Range<u32>,
    memory: usize,
) -> Result<Vec<Link>, TransportError> {
    let n = replicas.len();
    let cores = thread::available_parallelism().map_or(1, |c| c.get());
    let k = n.min(cores).max(1);
    let mut specs: Vec<Vec<Spec>> = (0..k).map(|_| Vec::new()).collect();
    let mut queues = Vec::with_capacity(k);
    let mut links = Vec::with_capacity(n);
    let mut busy_lines = Vec::with_capacity(k);
    for _ in 0..k {
        queues.push(mpsc::channel::<(usize, Message)>());
        busy_lines.push(BusyLine::default());
    }
    for (i, replica) in replicas.enumerate() {
        let (host_memory, shared) = match u32::try_from(memory) {
            Ok(1..) => {
                let host = SharedMemory::create(memory, false)?;
                let device = host.map_again()?;
                (Some(host), Some(device))
            }
            _ => (None, None),
        };
        let (replies, from_device) = mpsc::channel();
        let thread_specs = &mut specs[i % k];
        let mailbox = Mailbox::new(queues[i % k].0.clone(), thread_specs.len());
        thread_specs.push(Spec {
            replica,
            shared,
            bytes: memory,
            replies,
        });
        links.push((i % k, from_device, mailbox, host_memory));
    }
    let mut workers = Vec::with_capacity(k);
    for ((specs, (sender, inbox)), busy) in specs.into_iter().zip(queues).zip(busy_lines) {
        // The mailboxes hold the only senders: the thread ends when they are all gone.
        drop(sender);
        let line = busy.clone();
        let first = specs.first().map_or(0, |s| s.replica);
        let thread = thread::Builder::new()
            .name(format!("tessera-devices-{first}"))
            .spawn(move || {
                if let Err(e) = serve_devices(specs, &inbox, line) {
                    tracing::warn!(error = %e, "device thread stopped");
                }
            })?;
        workers.push(Arc::new(Worker {
            thread: Mutex::new(Some(thread)),
            busy,
        }));
    }
    Ok(links
        .into_iter()
        .map(|(w, from_device, mailbox, memory)| Link {
            incoming: Incoming::Messages(from_device),
            outgoing: Outgoing::Messages(mailbox),
            handle: DeviceHandle::Pooled(Arc::clone(&workers[w])),
            window: None,
            memory,
        })
        .collect())
}

/// A thread's devices' memory: shared with the host, or its own.
enum Arena {
    Shared(SharedMemory),
    Own(Vec<u8>),
}

impl Arena {
    fn memory(&mut self) -> &mut dyn Memory {
        match self {
            Self::Shared(m) => m,
            Self::Own(v) => v,
        }
    }
}

/// What one thread's devices are built on and outlive: their memory, cycle counters,
/// replicas and links, and the mail queue each link reads.
struct Parts {
    arenas: Vec<Arena>,
    cycles: Vec<CycleCounter>,
    replicas: Vec<u32>,
    links: Vec<Queue>,
    mail: Vec<Sender<Message>>,
}

impl Parts {
    fn new(specs: Vec<Spec>) -> Self {
        let n = specs.len();
        let mut parts = Self {
            arenas: Vec::with_capacity(n),
            cycles: (0..n).map(|_| CycleCounter::new()).collect(),
            replicas: Vec::with_capacity(n),
            links: Vec::with_capacity(n),
            mail: Vec::with_capacity(n),
        };
        for spec in specs {
            parts.arenas.push(match spec.shared {
                Some(shared) => Arena::Shared(shared),
                None => Arena::Own(vec![0u8; spec.bytes]),
            });
            let (to_device, device_in) = mpsc::channel();
            parts.links.push(Queue::new(device_in, spec.replies));
            parts.mail.push(to_device);
            parts.replicas.push(spec.replica);
        }
        parts
    }
}

/// Builds `specs`' devices and serves them until every mailbox to them is gone, with
/// `busy` (the line of every one of them) high while any of them runs a request.
fn serve_devices(
    specs: Vec<Spec>,
    inbox: &Receiver<(usize, Message)>,
    mut busy: BusyLine,
) -> Result<(), io::Error> {
    let n = specs.len();
    let Parts {
        mut arenas,
        cycles,
        replicas,
        mut links,
        mail,
    } = Parts::new(specs);
    // The kept replies (a megabyte per device) live on the heap.
    let mut storage: Vec<Vec<[u8; HOST_FRAME]>> = (0..n)
        .map(|_| vec![[0u8; HOST_FRAME]; HOST_WINDOW])
        .collect();
    let mut servers = Vec::with_capacity(n);
    for replies in &mut storage {
        let replies: &mut [[u8; HOST_FRAME]; HOST_WINDOW] = replies
            .as_mut_slice()
            .try_into()
            .map_err(|_| io::Error::other("reply storage of the wrong size"))?;
        servers.push(Box::new(Server::new(replies)));
    }
    let mut devices: Vec<Device<'_>> = arenas
        .iter_mut()
        .zip(&cycles)
        .zip(&replicas)
        .zip(&servers)
        .map(|(((arena, cycles), &replica), server)| {
            Device::new(replica, arena.memory(), server.link(), cycles)
        })
        .collect();
    let mut open = vec![true; n];
    let mut clock = StdClock::new();
    // Waits for mail as every device wait does (looking, then asleep: `SPIN`); then files
    // every message already queued before serving.
    while let Ok(first) = receive_spinning(inbox, None, SPIN) {
        let mut has_mail = vec![false; n];
        for (i, message) in std::iter::once(first).chain(inbox.try_iter()) {
            if let (Some(to), Some(flag)) = (mail.get(i), has_mail.get_mut(i)) {
                *flag = to.send(message).is_ok();
            }
        }
        for i in 0..n {
            if !(has_mail[i] && open[i]) {
                continue;
            }
            let served = serve_pending(
                &mut servers[i],
                &mut devices[i],
                &mut links[i],
                &mut clock,
                &mut busy,
            );
            match served {
                Ok(true) => {}
                // Its channel is gone: nobody reads its replies any more.
                Ok(false) => open[i] = false,
                Err(e) => {
                    tracing::debug!(replica = replicas[i], error = %e, "device stopped");
                    open[i] = false;
                }
            }
        }
    }
    Ok(())
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
        let mut channels = Channel::in_process_all(0..8, 4096).unwrap();
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
        for (i, c) in channels.iter_mut().enumerate() {
            assert_eq!(seed_round_trip(c, 100 + i as u64).unwrap(), 100 + i as u64);
        }
        for (i, c) in channels.iter_mut().enumerate() {
            assert_eq!(
                c.call(&GetSeed).unwrap().get(),
                100 + i as u64,
                "device {i}"
            );
        }
    }

    /// Catches a thread that stops serving its devices once one of them is gone (its
    /// replies have nowhere to go): the siblings of a channel dropped with requests still
    /// in flight must go on answering. (The thread meets the dead reply queue only if it
    /// serves one of those requests after the drop: likely with eight queued, not certain.)
    #[test]
    fn a_dropped_device_leaves_its_siblings_running() {
        let mut channels = Channel::in_process_all(0..4, 4096).unwrap();
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
