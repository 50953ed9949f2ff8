//! Byte links between the ranks of an MPI job, one per worker that lives on another rank
//! than its controller: what a socket would carry (the channel's frames one way, the
//! device's the other), so the request protocol — sequence numbers, deadlines, re-sends,
//! the device's reply cache — runs end to end over them unchanged.
//!
//! # Rules
//!
//! - **One post office per rank.** A thread of its own makes every point-to-point MPI call
//!   of the session, on a communicator of the offices' own (a duplicate of the world's, so
//!   the program's own messages are never taken); links hand it their bytes through a
//!   queue and read what it routes to them. (MPI is initialized for threads: the
//!   controller's thread may run collectives meanwhile.)
//! - **A link is its worker's global id**, which is the MPI tag of its messages, between
//!   the controller's rank and the worker's. An office's messages to a rank all leave from
//!   its one thread, and the office there takes them whatever their tag: MPI does not let
//!   one overtake another, so a link's bytes arrive as they were written, whole or not at
//!   all, and in their place among the control messages and the other links' bytes.
//! - **What is posted together travels together.** The office takes everything posted
//!   since it last looked and sends each rank its small messages as one, on [`BATCH_TAG`]
//!   (the `batch` module: the parts in the order posted, each routed there as if it had
//!   come alone; bulk bytes go alone). A command's requests to a rank's workers — and the
//!   frees posted before them — thereby cost that rank one receive, and its replies one
//!   message back: measured on the `ranks` bench's call + sync, one message each way per
//!   command, four posts in each.
//! - **A message is a kind byte and its payload**: bytes of the link, or its end (the
//!   writer was dropped: the reader at the other end reads the end of the stream). Control
//!   messages between the ranks (what the session asks of a rank, and its answers) travel
//!   whole on [`CONTROL_TAG`], and bulk bytes one rank sends another for the session
//!   (a worker's array on its way to a worker of another rank) on [`BULK_TAG`]; no worker
//!   id reaches either, and the office hands them on unread, each on a queue of its own.
//! - **A send never waits without receiving.** A message is sent without blocking and the
//!   office keeps receiving until it is delivered: two ranks sending large messages to
//!   each other at once (MPI delivers those only once the receiver takes them) would
//!   otherwise each wait for the other forever.
//! - **A peer that stops answering ends the job, within the deadline.** Each office sends
//!   the ranks it serves or is served by (its watched peers: rank 0 watches every serving
//!   rank, a serving rank watches rank 0) a heartbeat on [`BEAT_TAG`] every [`beat`] of
//!   the deadline, and notes when it last heard from each. A watched peer silent for the
//!   whole deadline (`TESSERA_MPI_DEADLINE`), or a message to a peer not taken for that
//!   long, means the peer is stopped (SIGSTOP, a debugger) or gone without MPI noticing:
//!   the office prints which rank was silent, for how long and what this rank was waiting
//!   for ([`PostOffice::waiting_for`]), and ends the process (`abort`, as the collectives'
//!   watchdog does), so `mpirun` ends the job. Every wait of a session between ranks — a
//!   worker's reply, a rank's answer, a collective, the finish — is thereby bounded by the
//!   deadline, and a thread joining the office never waits longer: its sends end
//!   delivered, or the process ends.
//! - **Waiting.** While traffic flows the office looks for work without sleeping, yielding
//!   its core between looks, for [`LOOK`]; after a quiet spell it sleeps on its queue in
//!   steps of [`IDLE`], looking for incoming messages between steps — so the first message
//!   after a quiet spell waits at most that long, and an idle rank costs a wake-up per step.
//! - **Hushed while the rank moves bytes itself** ([`PostOffice::hush`]): while this rank
//!   runs its part of a collective (MPI's own messages, its members' memory copied), the
//!   office sleeps as if quiet, whatever the traffic: on a host with fewer cores than busy
//!   threads its looking took half a core from the thread doing the work, and the
//!   collective waited for the rank whose office looked. The
//!   hush ends by waking the office, which looks again at once.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use crate::instance::DEADLINE_VAR;

mod batch;
mod link;

use batch::BATCH_BYTES;
use link::gone;
pub use link::{LinkReader, LinkWriter};

/// The tag of control messages between ranks (worker ids stay below it).
pub const CONTROL_TAG: i32 = 32_767;
/// The tag of bulk bytes between ranks (worker ids stay below it).
pub const BULK_TAG: i32 = 32_766;
/// The tag of heartbeats between offices (worker ids stay below it).
pub const BEAT_TAG: i32 = 32_765;
/// The tag of several messages to one rank sent as one (worker ids stay below it).
pub const BATCH_TAG: i32 = 32_764;
/// The most posts the office takes from its queue before it sends them.
const BATCH_POSTS: usize = 256;
/// How long a quiet office sleeps before it looks for incoming messages again.
pub const IDLE: Duration = Duration::from_millis(1);
/// How long after its last message the office keeps looking without sleeping (yielding its
/// core between looks). An incoming message cannot wake a sleeping office (MPI has no
/// descriptor to wait on), so a reply arriving while it sleeps waits for the end of the
/// step: with a look of 200 µs every reply of a call + sync waited for one (the `ranks`
/// bench measured it; the runs are in the README's history, `git log -p README.md`).
pub const LOOK: Duration = Duration::from_millis(5);

/// How often an office with `deadline` sends each watched peer a heartbeat: a quarter of
/// the deadline, at most a second, so that a live peer is heard from several times within
/// any deadline.
pub fn beat(deadline: Duration) -> Duration {
    (deadline / 4).min(Duration::from_secs(1))
}

/// The kind byte of a message carrying bytes of a link.
const BYTES: u8 = 0;
/// The kind byte of a message ending a link.
const END: u8 = 1;

/// A message held for a batch: its tag and bytes.
type Part = (i32, Vec<u8>);

/// What the office is asked to do.
enum Post {
    /// Send `bytes` (kind byte first) to rank `to` under `tag`.
    Send { to: i32, tag: i32, bytes: Vec<u8> },
    /// Send what is queued before this, then stop.
    Stop,
    /// Nothing to send: look again now (a hush has ended).
    Wake,
}

/// One end of a link: the rank at the other end and the worker it serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LinkId {
    /// The rank at the other end.
    pub peer: usize,
    /// The worker's global id (the messages' tag).
    pub worker: u32,
}

/// This rank's post office: the thread making its point-to-point MPI calls.
#[derive(Debug)]
pub struct PostOffice {
    posts: Sender<Post>,
    /// Control messages that arrived, with the rank that sent each (behind a lock: the
    /// office is shared between threads).
    control: Mutex<Receiver<(usize, Vec<u8>)>>,
    /// Bulk messages that arrived, with the rank that sent each.
    bulk: Mutex<Receiver<(usize, Vec<u8>)>>,
    /// What this rank waits for, for the message that ends the job (module rules).
    waiting: Arc<Mutex<String>>,
    /// Set while the rank moves bytes itself (module rules: hushed).
    hushed: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// A hush of the office ([`PostOffice::hush`]), which ends when this is dropped.
#[must_use = "the hush ends when this is dropped"]
#[derive(Debug)]
pub struct Hush<'a> {
    office: &'a PostOffice,
}

impl Drop for Hush<'_> {
    fn drop(&mut self) {
        self.office.hushed.store(false, Ordering::Relaxed);
        // An office that has stopped needs no waking.
        let _ = self.office.posts.send(Post::Wake);
    }
}

impl PostOffice {
    /// Opens `links` (whose tags must be below [`BATCH_TAG`]) and starts the office of rank
    /// `me`, which watches every rank at the other end of a link under `deadline`; each
    /// link's reader and writer, in the order given.
    pub fn open(
        me: usize,
        links: &[LinkId],
        deadline: Duration,
    ) -> io::Result<(Self, Vec<(LinkReader, LinkWriter)>)> {
        let (posts, queue) = mpsc::channel();
        let (control_tx, control) = mpsc::channel();
        let (bulk_tx, bulk) = mpsc::channel();
        let mut routes = HashMap::new();
        let mut ends = Vec::with_capacity(links.len());
        for &link in links {
            let tag = tag_of(link.worker)?;
            let peer = rank_of(link.peer)?;
            let (tx, rx) = mpsc::channel();
            routes.insert((peer, tag), tx);
            ends.push((
                LinkReader::new(rx),
                LinkWriter::new(peer, tag, posts.clone()),
            ));
        }
        let mut watched: Vec<i32> = routes.keys().map(|&(peer, _)| peer).collect();
        watched.sort_unstable();
        watched.dedup();
        let waiting = Arc::new(Mutex::new(String::from("its session's messages")));
        let hushed = Arc::new(AtomicBool::new(false));
        let now = Instant::now();
        let office = Office {
            routes,
            control: control_tx,
            bulk: bulk_tx,
            me,
            heard: watched.into_iter().map(|peer| (peer, now)).collect(),
            deadline,
            last_beat: now,
            last_look: now,
            waiting: waiting.clone(),
            hushed: hushed.clone(),
        };
        let thread = thread::Builder::new()
            .name("tessera-post-office".into())
            .spawn(move || office.run(queue))?;
        Ok((
            Self {
                posts,
                control: Mutex::new(control),
                bulk: Mutex::new(bulk),
                waiting,
                hushed,
                thread: Some(thread),
            },
            ends,
        ))
    }

    /// Notes what this rank waits for from now on, for the message that ends the job if a
    /// peer falls silent (module rules).
    pub fn waiting_for(&self, what: impl Into<String>) {
        *self.waiting.lock().unwrap_or_else(PoisonError::into_inner) = what.into();
    }

    /// Hushes the office until the returned guard is dropped (module rules): for a rank's
    /// part of a collective, during which no message of this rank's is awaited.
    pub fn hush(&self) -> Hush<'_> {
        self.hushed.store(true, Ordering::Relaxed);
        Hush { office: self }
    }

    /// Sends control message `message` to rank `to` (after everything posted before).
    pub fn send_control(&self, to: usize, message: Vec<u8>) -> io::Result<()> {
        self.post(to, CONTROL_TAG, message)
    }

    /// Posts `bytes` for rank `to` under `tag`.
    fn post(&self, to: usize, tag: i32, bytes: Vec<u8>) -> io::Result<()> {
        let to = rank_of(to)?;
        self.posts
            .send(Post::Send { to, tag, bytes })
            .map_err(|_| gone())
    }

    /// The next control message and the rank that sent it, waiting up to `limit`; `None`
    /// when none came (or the office has stopped).
    pub fn next_control(&self, limit: Duration) -> Option<(usize, Vec<u8>)> {
        let control = self.control.lock().unwrap_or_else(PoisonError::into_inner);
        control.recv_timeout(limit).ok()
    }

    /// Sends bulk message `message` to rank `to` (after everything posted before).
    pub fn send_bulk(&self, to: usize, message: Vec<u8>) -> io::Result<()> {
        self.post(to, BULK_TAG, message)
    }

    /// The next bulk message and the rank that sent it, waiting up to `limit`; `None` when
    /// none came (or the office has stopped).
    pub fn next_bulk(&self, limit: Duration) -> Option<(usize, Vec<u8>)> {
        let bulk = self.bulk.lock().unwrap_or_else(PoisonError::into_inner);
        bulk.recv_timeout(limit).ok()
    }

    /// Sends everything posted so far, then stops the office and waits for its thread.
    pub fn stop(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        let _ = self.posts.send(Post::Stop);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for PostOffice {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// The office's side: where incoming messages go, and the peers it watches. (The world
/// communicator is looked up where it is used, on the office's thread.)
struct Office {
    /// Each link's reader, by (the rank at the other end, tag).
    routes: HashMap<(i32, i32), Sender<Vec<u8>>>,
    control: Sender<(usize, Vec<u8>)>,
    bulk: Sender<(usize, Vec<u8>)>,
    /// This rank.
    me: usize,
    /// Each watched peer and when it was last heard from.
    heard: Vec<(i32, Instant)>,
    /// How long a watched peer may be silent, or a message to it untaken.
    deadline: Duration,
    /// When the last heartbeats went out.
    last_beat: Instant,
    /// When the office last looked at its peers' silence.
    last_look: Instant,
    /// What this rank waits for (shared with [`PostOffice::waiting_for`]).
    waiting: Arc<Mutex<String>>,
    /// Shared with [`PostOffice::hush`].
    hushed: Arc<AtomicBool>,
}

impl Office {
    fn run(mut self, queue: Receiver<Post>) {
        // A communicator of the offices' own (every rank's office makes it, first thing):
        // the program's own point-to-point messages on the world communicator are not
        // theirs to take.
        let comm = SimpleCommunicator::world().duplicate();
        let mut last_traffic = Instant::now();
        loop {
            let mut worked = self.receive_all(&comm);
            self.watch();
            if self.last_beat.elapsed() >= beat(self.deadline) {
                self.last_beat = Instant::now();
                for at in 0..self.heard.len() {
                    let peer = self.heard[at].0;
                    self.send(&comm, peer, BEAT_TAG, &[]);
                }
            }
            let hushed = self.hushed.load(Ordering::Relaxed);
            let quiet = hushed || (!worked && last_traffic.elapsed() >= LOOK);
            let post = if quiet {
                match queue.recv_timeout(IDLE) {
                    Ok(post) => Some(post),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            } else {
                match queue.try_recv() {
                    Ok(post) => Some(post),
                    Err(TryRecvError::Empty) => None,
                    Err(TryRecvError::Disconnected) => return,
                }
            };
            if let Some(post) = post {
                if !self.send_posted(&comm, post, &queue) {
                    return;
                }
                worked = true;
            }
            if worked {
                last_traffic = Instant::now();
            } else if !quiet {
                thread::yield_now();
            }
        }
    }

    /// Sends `first` and every post queued behind it (up to [`BATCH_POSTS`]): the small
    /// ones to each rank as one message (module rules), in the order they were posted;
    /// false once the office is to stop (everything taken is sent first).
    fn send_posted(
        &mut self,
        comm: &SimpleCommunicator,
        first: Post,
        queue: &Receiver<Post>,
    ) -> bool {
        // Each rank's small posts not yet sent, in the order posted.
        let mut held: Vec<(i32, Vec<Part>)> = Vec::new();
        let mut next = Some(first);
        let mut taken = 0;
        let go_on = loop {
            let post = match next.take() {
                Some(post) => post,
                None if taken >= BATCH_POSTS => break true,
                None => match queue.try_recv() {
                    Ok(post) => post,
                    Err(TryRecvError::Empty) => break true,
                    Err(TryRecvError::Disconnected) => break false,
                },
            };
            taken += 1;
            let (to, tag, bytes) = match post {
                Post::Send { to, tag, bytes } => (to, tag, bytes),
                Post::Wake => continue,
                Post::Stop => break false,
            };
            let at = match held.iter().position(|(peer, _)| *peer == to) {
                Some(at) => at,
                None => {
                    held.push((to, Vec::new()));
                    held.len() - 1
                }
            };
            if bytes.len() > BATCH_BYTES {
                // Sent alone, after what was posted to its rank before it.
                let earlier = std::mem::take(&mut held[at].1);
                self.send_batch(comm, to, earlier);
                self.send(comm, to, tag, &bytes);
            } else {
                held[at].1.push((tag, bytes));
            }
        };
        for (to, parts) in held {
            self.send_batch(comm, to, parts);
        }
        go_on
    }

    /// Sends `parts` (tag, bytes) to rank `to`: one alone under its own tag, several as
    /// one message under [`BATCH_TAG`].
    fn send_batch(&mut self, comm: &SimpleCommunicator, to: i32, mut parts: Vec<Part>) {
        if parts.len() > 1 {
            match batch::encode(&parts) {
                Ok(batch) => self.send(comm, to, BATCH_TAG, &batch),
                // Not met (every tag here is below BATCH_TAG, every part at most
                // BATCH_BYTES); were it, each part would still arrive, alone.
                Err(_) => {
                    for (tag, bytes) in parts {
                        self.send(comm, to, tag, &bytes);
                    }
                }
            }
        } else if let Some((tag, bytes)) = parts.pop() {
            self.send(comm, to, tag, &bytes);
        }
    }

    /// Sends `bytes` to rank `to` under `tag`, receiving meanwhile (module doc); a message
    /// not taken within the deadline ends the job.
    fn send(&mut self, comm: &SimpleCommunicator, to: i32, tag: i32, bytes: &[u8]) {
        let start = Instant::now();
        mpi::request::scope(|scope| {
            let mut request = comm
                .process_at_rank(to)
                .immediate_send_with_tag(scope, bytes, tag);
            loop {
                match request.test() {
                    Ok(_) => break,
                    Err(pending) => request = pending,
                }
                if start.elapsed() > self.deadline {
                    self.end_job(
                        to,
                        &format!(
                            "a message of {} bytes to it was not taken for {} s",
                            bytes.len(),
                            self.deadline.as_secs_f64()
                        ),
                    );
                }
                self.watch();
                if !self.receive_all(comm) {
                    thread::yield_now();
                }
            }
        });
    }

    /// Ends the job if a watched peer has been silent for the whole deadline. An office
    /// that has not looked for longer than a heartbeat was not running (this rank was
    /// stopped, or starved of its core): its peers' silence is counted from now, as they
    /// could not have been heard meanwhile.
    fn watch(&mut self) {
        let now = Instant::now();
        if now.saturating_duration_since(self.last_look) > beat(self.deadline) {
            for (_, heard) in &mut self.heard {
                *heard = (*heard).max(now - beat(self.deadline));
            }
        }
        self.last_look = now;
        let silent = self
            .heard
            .iter()
            .find(|(_, heard)| now.saturating_duration_since(*heard) > self.deadline);
        if let Some(&(peer, heard)) = silent {
            self.end_job(
                peer,
                &format!(
                    "it has sent nothing (not even a heartbeat) for {:.1} s",
                    now.saturating_duration_since(heard).as_secs_f64()
                ),
            );
        }
    }

    /// Prints why the job ends (the silent `peer`, `what` it did not do, what this rank
    /// waited for) and ends the process: `mpirun` then ends the other ranks. No MPI call
    /// and no exit handler, either of which could wait on the silent peer.
    fn end_job(&self, peer: i32, what: &str) -> ! {
        let waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        eprintln!(
            "tessera: rank {}: rank {peer} is stopped or gone: {what} (the deadline, \
             {DEADLINE_VAR}); this rank was waiting for {waiting}; ending the job",
            self.me
        );
        std::process::abort();
    }

    /// Takes every message that has arrived and routes it; true if there was one.
    fn receive_all(&mut self, comm: &SimpleCommunicator) -> bool {
        let mut any = false;
        while let Some(probed) = comm.any_process().immediate_matched_probe() {
            any = true;
            let (bytes, status) = probed.matched_receive_vec::<u8>();
            self.route(status.source_rank(), status.tag(), bytes);
        }
        any
    }

    /// Routes each part of a batch from rank `from`, in order (`batch` module rules).
    fn route_batch(&mut self, from: i32, batch: &[u8]) {
        for part in batch::parts(batch) {
            match part {
                Ok((BATCH_TAG, _)) => {
                    tracing::warn!(from, "a batch inside a batch, dropped");
                }
                Ok((tag, bytes)) => self.route(from, tag, bytes.to_vec()),
                Err(at) => {
                    tracing::warn!(from, at, "a damaged batch between ranks, its rest dropped")
                }
            }
        }
    }

    fn route(&mut self, from: i32, tag: i32, mut bytes: Vec<u8>) {
        if let Some(heard) = self.heard.iter_mut().find(|(peer, _)| *peer == from) {
            heard.1 = Instant::now();
        }
        match tag {
            BEAT_TAG => return,
            BATCH_TAG => {
                self.route_batch(from, &bytes);
                return;
            }
            CONTROL_TAG => {
                let _ = self.control.send((from as usize, bytes));
                return;
            }
            BULK_TAG => {
                let _ = self.bulk.send((from as usize, bytes));
                return;
            }
            _ => {}
        }
        let Some(&kind) = bytes.first() else {
            tracing::warn!(from, tag, "an empty message between ranks, dropped");
            return;
        };
        match kind {
            END => {
                // Dropping the sender ends the reader's stream.
                self.routes.remove(&(from, tag));
            }
            BYTES => {
                let Some(route) = self.routes.get(&(from, tag)) else {
                    // A link already ended here (its reader gone): nobody reads it.
                    return;
                };
                bytes.remove(0);
                if route.send(bytes).is_err() {
                    self.routes.remove(&(from, tag));
                }
            }
            _ => tracing::warn!(from, tag, kind, "a message of an unknown kind, dropped"),
        }
    }
}

fn tag_of(worker: u32) -> io::Result<i32> {
    match i32::try_from(worker) {
        Ok(tag) if tag < BATCH_TAG => Ok(tag),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("worker {worker}: ids across ranks stay below {BATCH_TAG} (MPI tags)"),
        )),
    }
}

fn rank_of(rank: usize) -> io::Result<i32> {
    i32::try_from(rank).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("rank {rank} is not an MPI rank"),
        )
    })
}
