//! 10,000 requests over a link that flips bits, drops bytes and cuts writes short (1e-3 per
//! byte in all, both directions): every reply must be exactly right. CRCs catch the damage,
//! deadlines and retries recover, and the device's reply cache keeps retried requests from
//! running twice (a FIFO push that ran twice would show up as an extra item). Once one
//! request at a time, once pipelined (many in flight, go-back-N retransmission).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use tessera_core::wire::endpoint::{Command, Read};
use tessera_core::wire::{
    DataRequest, ErrorCode, MemoryRequest, Request, Response, StreamRequest, Target,
};
use tessera_host::transport::{Channel, FaultConfig, TransportError};

const REQUESTS: usize = 10_000;
const SLOT_BYTES: usize = 512;

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// About 1e-3 damage per byte in all: bit flips, dropped bytes and cut writes.
fn damage(seed: u64) -> FaultConfig {
    FaultConfig {
        seed,
        flip_rate: 4e-4,
        drop_rate: 3e-4,
        truncate_rate: 3e-4,
        ..FaultConfig::NONE
    }
}

/// A device behind a damaged link (15 ms deadline), with slot 1 of `slot_bytes` bytes and
/// FIFO 2 of four 8-byte items.
fn damaged_device(seed: u64, slot_bytes: usize) -> Channel {
    let mut channel =
        Channel::in_process(0, 1 << 16, Some(damage(seed))).expect("hello gets through eventually");
    channel.set_deadline(Duration::from_millis(15));
    channel
        .call(&command(Request::Memory(MemoryRequest::AllocSlot {
            slot: 1,
            bytes: slot_bytes as u32,
        })))
        .unwrap();
    channel
        .call(&command(Request::Streams(StreamRequest::CreateFifo {
            fifo: 2,
            item_bytes: 8,
            depth: 4,
        })))
        .unwrap();
    channel
}

/// FIFO 2 as the device must hold it: its items and where its ring's oldest starts, so
/// that every write appends at the stream's position and every read starts at the oldest
/// item (the FIFO rules of `tessera_core::wire::target`). A push or pop run twice would
/// put the device at another position than this model, and the next request would be
/// refused.
#[derive(Default)]
struct FifoModel {
    items: VecDeque<[u8; 8]>,
    head: usize,
}

impl FifoModel {
    const DEPTH: usize = 4;

    fn len(&self) -> usize {
        self.items.len()
    }

    /// The stream position a write of `item` goes to; the write is counted as done.
    fn push(&mut self, item: [u8; 8]) -> u32 {
        let at = (self.head + self.items.len()) % Self::DEPTH * 8;
        self.items.push_back(item);
        at as u32
    }

    /// The read of the oldest item, and the item if there is one (counted as taken).
    fn pop(&mut self) -> (Request<'static>, Option<[u8; 8]>) {
        let read = Request::Data(DataRequest::Read {
            target: Target::Fifo(2),
            offset: (self.head * 8) as u32,
            len: 8,
        });
        let item = self.items.pop_front();
        if item.is_some() {
            self.head = (self.head + 1) % Self::DEPTH;
        }
        // An emptied FIFO restarts its ring at the beginning.
        if self.items.is_empty() {
            self.head = 0;
        }
        (read, item)
    }
}

/// `request`, answered `Done`, as its typed endpoint.
fn command(request: Request<'_>) -> Command<'_> {
    Command::new(request).expect("a request answered Done")
}

/// A read request as its typed endpoint.
fn read(request: &Request<'_>) -> Read {
    match *request {
        Request::Data(DataRequest::Read {
            target,
            offset,
            len,
        }) => Read {
            target,
            offset,
            len,
        },
        _ => panic!("not a read: {request:?}"),
    }
}

/// A write of `item` into FIFO 2 at stream position `offset`.
fn write_fifo(offset: u32, item: &[u8]) -> Request<'_> {
    Request::Data(DataRequest::Write {
        target: Target::Fifo(2),
        offset,
        data: item,
    })
}

#[test]
fn ten_thousand_requests_over_a_damaging_link() {
    let mut channel = damaged_device(99, SLOT_BYTES);

    // What the device must hold, tracked on the host.
    let mut slot = vec![0u8; SLOT_BYTES];
    let mut fifo = FifoModel::default();
    let mut rng = Lcg(5);
    let mut checked = 0;
    for i in 0..REQUESTS {
        match rng.below(4) {
            0 => {
                let len = 1 + rng.below(48);
                let at = rng.below(SLOT_BYTES - len);
                let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                channel
                    .call(&command(Request::Data(DataRequest::Write {
                        target: Target::Slot(1),
                        offset: at as u32,
                        data: &data,
                    })))
                    .unwrap();
                slot[at..at + len].copy_from_slice(&data);
            }
            1 => {
                let len = 1 + rng.below(48);
                let at = rng.below(SLOT_BYTES - len);
                let reply = channel
                    .call(&Read {
                        target: Target::Slot(1),
                        offset: at as u32,
                        len: len as u32,
                    })
                    .unwrap();
                assert_eq!(
                    reply.get(),
                    &slot[at..at + len],
                    "request {i}: slot read back wrong"
                );
                checked += 1;
            }
            2 if fifo.len() < 4 => {
                let item = (rng.next() ^ i as u64).to_le_bytes();
                let offset = fifo.push(item);
                channel.call(&command(write_fifo(offset, &item))).unwrap();
            }
            _ => match fifo.pop() {
                (pop, Some(want)) => {
                    let reply = channel.call(&read(&pop)).unwrap();
                    assert_eq!(
                        reply.get(),
                        want,
                        "request {i}: FIFO item wrong (a push or pop ran twice?)"
                    );
                    checked += 1;
                }
                (pop, None) => {
                    let err = channel.call(&read(&pop)).unwrap_err();
                    assert!(err.to_string().contains("empty"), "request {i}: {err}");
                }
            },
        }
    }
    assert!(
        checked > REQUESTS / 3,
        "most requests must be checked reads ({checked})"
    );
    let retries = channel.retries();
    eprintln!("{REQUESTS} requests, {checked} checked replies, {retries} retries");
    assert!(
        retries > 50,
        "the link must actually have been damaged ({retries} retries)"
    );
}

/// What the reply to a pipelined request must be, decided from the host-side model when
/// the request was submitted (the device runs requests in submission order).
#[derive(Debug)]
enum Expect {
    /// `Done` (a slot write or a FIFO push).
    Done,
    /// Exactly these bytes (a slot read or a FIFO pop).
    Data(Vec<u8>),
    /// A `FifoEmpty` error (a pop the model knows finds the FIFO empty).
    FifoEmpty,
}

/// 10,000 requests over the same kind of damaging link, pipelined: batches of 1 to 16
/// requests (up to the device's window) are submitted back to back, then, now and then
/// after a `drain`, their replies are claimed in a shuffled order. The host-side model of
/// the slot and the FIFO is updated in submission order, and every reply must be exactly
/// what the model says at that point in the order.
///
/// What this catches, beyond the one-at-a-time test above:
///
/// - **a request run twice** after a go-back-N retransmission (a device that re-runs a
///   retried request instead of answering it from its reply cache, or a cache that does
///   not cover the whole window): a FIFO push shows up as an extra item, a slot write
///   replayed after a later overlapping write shows up in a later read (the slot is small
///   so that writes overlap often);
/// - **requests run out of order or past a gap** (a device that runs a request after a
///   lost one instead of dropping it, or a host that retransmits only the oldest request
///   or not in order): a write lands after a read that should have seen it, a pop comes
///   before its push;
/// - **replies matched to the wrong request** (by position instead of sequence number,
///   or a cached reply of a reused cache slot given to an older number): a read of the
///   wrong length or bytes, `Done` where data was due, or a reply whose `seq` is not the
///   ticket's;
/// - **replies lost or claimed twice** when they are claimed in another order than they
///   arrived, or after `drain`: `receive` fails (`NotInFlight`, `Timeout`) or never
///   returns;
/// - **a stuck window or a retry storm**: a window that does not free up as replies arrive
///   ends in `Timeout`; a channel that resends more than the unanswered requests once per
///   deadline (or on every reply) fails the bound on retries;
/// - **a window counted in requests instead of sequence numbers**: batches larger than the
///   device's window, with the oldest reply lost, once pushed that reply out of the
///   device's cache and its retries were dropped until `Timeout`.
#[test]
fn ten_thousand_pipelined_requests_over_a_damaging_link() {
    // Small, so that writes in flight together overlap and a replayed one shows.
    const SLOT: usize = 128;
    // Larger than the device's window: `submit` must wait for room.
    const MAX_BATCH: usize = 24;
    let started = Instant::now();
    let mut channel = damaged_device(4242, SLOT);
    let window = usize::from(channel.limits().window);
    assert!(
        (8..MAX_BATCH).contains(&window),
        "batches must outgrow the device's window ({window}), which pipelines at least 8"
    );

    // What the device must hold once every request submitted so far has run.
    let mut slot = [0u8; SLOT];
    let mut fifo = FifoModel::default();
    let mut rng = Lcg(17);
    let (mut sent, mut checked, mut batches, mut drained) = (0, 0, 0, 0);
    while sent < REQUESTS {
        let size = (1 + rng.below(MAX_BATCH)).min(REQUESTS - sent);
        let mut batch: Vec<(usize, u32, Expect)> = Vec::with_capacity(size);
        for i in sent..sent + size {
            let (seq, expect) = match rng.below(4) {
                0 => {
                    let len = 1 + rng.below(48);
                    let at = rng.below(SLOT - len);
                    let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                    slot[at..at + len].copy_from_slice(&data);
                    let seq = channel
                        .submit(&Request::Data(DataRequest::Write {
                            target: Target::Slot(1),
                            offset: at as u32,
                            data: &data,
                        }))
                        .unwrap();
                    (seq, Expect::Done)
                }
                1 => {
                    let len = 1 + rng.below(48);
                    let at = rng.below(SLOT - len);
                    let seq = channel
                        .submit(&Request::Data(DataRequest::Read {
                            target: Target::Slot(1),
                            offset: at as u32,
                            len: len as u32,
                        }))
                        .unwrap();
                    (seq, Expect::Data(slot[at..at + len].to_vec()))
                }
                2 if fifo.len() < 4 => {
                    let item = (rng.next() ^ i as u64).to_le_bytes();
                    let offset = fifo.push(item);
                    let seq = channel.submit(&write_fifo(offset, &item)).unwrap();
                    (seq, Expect::Done)
                }
                _ => {
                    let (pop, want) = fifo.pop();
                    let seq = channel.submit(&pop).unwrap();
                    match want {
                        Some(want) => (seq, Expect::Data(want.to_vec())),
                        None => (seq, Expect::FifoEmpty),
                    }
                }
            };
            batch.push((i, seq, expect));
        }
        sent += size;
        batches += 1;
        if rng.below(4) == 0 {
            channel.drain().unwrap();
            assert_eq!(channel.in_flight(), 0, "drain leaves nothing in flight");
            drained += 1;
        }
        // Claim the replies in a shuffled order (Fisher-Yates).
        for k in (1..batch.len()).rev() {
            batch.swap(k, rng.below(k + 1));
        }
        for (i, seq, expect) in batch {
            let outcome = channel.receive(seq);
            match (expect, outcome) {
                (Expect::Done, Ok(reply)) => {
                    assert_eq!(reply.seq(), seq, "request {i}: reply to another request");
                    assert!(
                        matches!(reply.response(), Some(Response::Done)),
                        "request {i}: {:?} instead of Done",
                        reply.response()
                    );
                }
                (Expect::Data(want), Ok(reply)) => {
                    assert_eq!(reply.seq(), seq, "request {i}: reply to another request");
                    let Some(Response::Data { data }) = reply.response() else {
                        panic!("request {i}: {:?} instead of data", reply.response())
                    };
                    assert_eq!(
                        data, want,
                        "request {i}: wrong bytes (a request ran twice or out of order?)"
                    );
                    checked += 1;
                }
                (
                    Expect::FifoEmpty,
                    Err(TransportError::Device {
                        code: ErrorCode::FifoEmpty { fifo: 2 },
                        ..
                    }),
                ) => {}
                (expect, outcome) => {
                    panic!("request {i} (seq {seq}): expected {expect:?}, got {outcome:?}")
                }
            }
        }
        assert_eq!(
            channel.in_flight(),
            0,
            "nothing is in flight once the batch's replies are claimed"
        );
    }
    assert!(
        checked > REQUESTS / 3,
        "most requests must be checked reads ({checked})"
    );
    let retries = channel.retries();
    eprintln!(
        "{REQUESTS} pipelined requests in {batches} batches ({drained} drained first), \
         {checked} checked replies, {retries} retries, {:.1?}",
        started.elapsed()
    );
    assert!(
        retries > 50,
        "the link must actually have been damaged ({retries} retries)"
    );
    // About 1,300 at these rates: each go-back resends every unanswered request.
    assert!(
        retries < REQUESTS as u64 / 2,
        "a retry storm ({retries} retries for {REQUESTS} requests)"
    );
}

/// A session's collectives over four damaged links: every allreduce (sum, max, min, avg;
/// global and in groups) comes back exact on every worker. A corrupted contribution, a
/// write applied to the wrong register or a copy applied twice out of order would show as a
/// wrong element; a lost reply as a `Timeout`.
#[test]
fn collectives_over_damaging_links() {
    use tessera_host::session::collective::{ReduceOp, Scope};
    use tessera_host::session::{HostArray, HostValue, Session};

    const WORKERS: usize = 4;
    const ELEMENTS: usize = 48;
    const ROUNDS: usize = 230;
    let channels = (0..WORKERS as u32)
        .map(|replica| {
            let faults = damage(77 + u64::from(replica));
            let mut channel = Channel::in_process(replica, 1 << 20, Some(faults)).unwrap();
            channel.set_deadline(Duration::from_millis(15));
            channel
        })
        .collect();
    let session = Session::on(channels, 2).unwrap();
    let mut rng = Lcg(11);
    let ops = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg];
    for round in 0..ROUNDS {
        // Small integers: every op is exact in f32, so the check is equality.
        let values: Vec<Vec<f32>> = (0..WORKERS)
            .map(|_| (0..ELEMENTS).map(|_| rng.below(100) as f32).collect())
            .collect();
        let arrays: Vec<HostArray> = values
            .iter()
            .map(|v| HostArray::from_f32(&[ELEMENTS as u32], v).unwrap())
            .collect();
        let src = session.copy_to_workers(&arrays).unwrap();
        let dst = session
            .empty(tessera_core::dtype::DataType::F32, &[ELEMENTS as u32])
            .unwrap();
        let op = ops[round % ops.len()];
        let scope = if round % 2 == 0 {
            Scope::Global
        } else {
            Scope::InGroup
        };
        session.allreduce(&src, &dst, op, scope).unwrap();
        for worker in 0..WORKERS {
            let members: Vec<usize> = match scope {
                Scope::Global => (0..WORKERS).collect(),
                Scope::InGroup => {
                    let first = worker / 2 * 2;
                    vec![first, first + 1]
                }
            };
            let expected: Vec<f32> = (0..ELEMENTS)
                .map(|i| {
                    let column = members.iter().map(|&m| f64::from(values[m][i]));
                    (match op {
                        ReduceOp::Sum => column.sum(),
                        ReduceOp::Max => column.fold(f64::MIN, f64::max),
                        ReduceOp::Min => column.fold(f64::MAX, f64::min),
                        ReduceOp::Avg => column.sum::<f64>() / members.len() as f64,
                        ReduceOp::Prod => column.product(),
                    }) as f32
                })
                .collect();
            match session.debug_get(&dst, worker).unwrap() {
                HostValue::Array(array) => assert_eq!(
                    array.to_f32(),
                    Some(expected),
                    "round {round}, worker {worker}, {op:?} {scope:?}"
                ),
                other => panic!("round {round}: not an array: {other:?}"),
            }
        }
    }
}
