//! The controller's state: the workers' channels, the commands awaiting their replies,
//! the register ids, and the ways arrays move between the host and a worker's register:
//! copied in place in the worker's memory where the host maps it (threads, child
//! processes), else beside one request where the link carries bulk bytes, else in framed
//! chunks.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

use tessera_core::dtype::DataType;
use tessera_core::wire::endpoint::{DescribeRegister, Description, GetRegister, ReadArray};
use tessera_core::wire::{Request, RequestKind, Value, ValueKind};
use tessera_firmware_sim::std_link::Bulk;

use super::claims;
use super::pending::{Parked, Pending};
use super::{byte_len, ArrayError, Command, HostArray, HostValue, SessionError, MAX_REGISTER_ID};
use crate::transport::{Channel, SharedMemory, TransportError};

/// Everything the controller holds; register handles reach it through a weak reference.
#[derive(Debug)]
pub(super) struct State {
    pub(super) workers: Vec<Channel>,
    pub(super) pending: Vec<VecDeque<Pending>>,
    /// Failures claimed by another thread's sync, kept for the thread that sent the
    /// command (see `pending`).
    pub(super) parked: Vec<Parked>,
    /// Ids never handed out start here.
    pub(super) next_id: u16,
    /// Freed ids, reused last-in-first-out.
    pub(super) free_ids: Vec<u16>,
    pub(super) num_groups: usize,
    pub(super) shut_down: bool,
}

pub(super) fn alloc_request(
    id: u16,
    dtype: DataType,
    shape: &[u32],
) -> Result<Request<'static>, SessionError> {
    Ok(Request::AllocArray {
        id,
        dtype,
        shape: heapless::Vec::from_slice(shape)
            .map_err(|_| ArrayError::Rank { rank: shape.len() })?,
    })
}

pub(super) fn offset(at: usize) -> Result<u32, SessionError> {
    u32::try_from(at).map_err(|_| {
        SessionError::Transport(TransportError::Overflow {
            what: "array offset",
            value: at,
        })
    })
}

/// One worker's bytes in [`State::read_arrays`].
enum Read {
    /// In hand.
    Done(Arc<Vec<u8>>),
    /// To come beside the reply to the bulk read sent under this number.
    Sent(u32),
}

/// The element type and shape of the array a description names (a tensor is flat `f32`).
pub(super) fn array_shape(
    worker: usize,
    id: u16,
    described: &Description,
) -> Result<(DataType, Vec<u32>), SessionError> {
    match (described.kind, described.dtype) {
        (ValueKind::Array, Some(dtype)) => Ok((dtype, described.shape.to_vec())),
        (kind, _) => Err(SessionError::NotAnArray {
            worker,
            register: id,
            kind,
        }),
    }
}

impl State {
    pub(super) fn check_worker(&self, worker: usize) -> Result<(), SessionError> {
        if worker < self.workers.len() {
            Ok(())
        } else {
            Err(SessionError::NoWorker {
                worker,
                workers: self.workers.len(),
            })
        }
    }

    /// The largest bulk chunk every worker takes in one frame.
    pub(super) fn max_chunk(&self) -> usize {
        self.workers
            .iter()
            .map(|w| w.limits().max_chunk())
            .min()
            .unwrap_or(0)
            .max(1)
    }

    pub(super) fn allocate_id(&mut self) -> Result<u16, SessionError> {
        if let Some(id) = self.free_ids.pop() {
            return Ok(id);
        }
        // Ids past the workers' capacity are never handed out, so no worker's table fills.
        if self.next_id > MAX_REGISTER_ID {
            return Err(SessionError::RegistersExhausted {
                capacity: usize::from(MAX_REGISTER_ID),
            });
        }
        self.next_id += 1;
        Ok(self.next_id - 1)
    }

    /// Frees `id` on every worker (pipelined) and returns it to the free list, even when a
    /// worker cannot be reached (the first such failure is the error).
    pub(super) fn free(&mut self, id: u16) -> Result<(), SessionError> {
        let mut first = Ok(());
        for worker in 0..self.workers.len() {
            let sent = self.submit(worker, &Request::FreeRegister { id }, Command::Free(id));
            if first.is_ok() {
                first = sent;
            }
        }
        self.free_ids.push(id);
        first
    }

    pub(super) fn set_value(
        &mut self,
        worker: usize,
        id: u16,
        value: Value<'_>,
    ) -> Result<(), SessionError> {
        self.submit(
            worker,
            &Request::SetRegister { id, value },
            Command::Set(id),
        )
    }

    /// Makes register `id` on `worker` an array of `dtype` and `shape` holding `data`
    /// (pipelined: an allocation, then one write per chunk).
    pub(super) fn write_array(
        &mut self,
        worker: usize,
        id: u16,
        dtype: DataType,
        shape: &[u32],
        data: &[u8],
    ) -> Result<(), SessionError> {
        let expected = byte_len(dtype, shape)?;
        if data.len() != expected {
            return Err(ArrayError::Length {
                expected,
                actual: data.len(),
            }
            .into());
        }
        self.submit(
            worker,
            &alloc_request(id, dtype, shape)?,
            Command::Alloc(id),
        )?;
        self.write_chunks(worker, id, data)
    }

    /// Writes `data` over the array register `id` on `worker`, in framed chunks.
    pub(super) fn write_chunks(
        &mut self,
        worker: usize,
        id: u16,
        data: &[u8],
    ) -> Result<(), SessionError> {
        let chunk = self.workers[worker].limits().max_chunk().max(1);
        for (i, piece) in data.chunks(chunk).enumerate() {
            let request = Request::WriteArray {
                id,
                offset: offset(i * chunk)?,
                data: piece,
            };
            self.submit(worker, &request, Command::Set(id))?;
        }
        Ok(())
    }

    /// What register `id` on `worker` holds (its earlier commands already claimed),
    /// checked against the memory the worker announced before anything is sized by it
    /// ([`claims`](super::claims)).
    pub(super) fn describe(&mut self, worker: usize, id: u16) -> Result<Description, SessionError> {
        let channel = &mut self.workers[worker];
        let described = channel.call(&DescribeRegister { id })?.get();
        claims::check(worker, id, &described, channel.limits().memory)?;
        Ok(described)
    }

    /// Register `id`'s description on each of `workers`, every request sent before any
    /// reply is awaited (one round trip for all, not one each), each checked as
    /// [`State::describe`] checks it. The workers' earlier commands are already claimed.
    pub(super) fn describe_all(
        &mut self,
        workers: Range<usize>,
        id: u16,
    ) -> Result<Vec<Description>, SessionError> {
        let mut tickets = Vec::with_capacity(workers.len());
        for worker in workers {
            tickets.push((
                worker,
                self.workers[worker].submit_typed(&DescribeRegister { id })?,
            ));
        }
        let mut described = Vec::with_capacity(tickets.len());
        for (worker, ticket) in tickets {
            let channel = &mut self.workers[worker];
            let description = channel.receive_typed(ticket)?.get();
            claims::check(worker, id, &description, channel.limits().memory)?;
            described.push(description);
        }
        Ok(described)
    }

    /// The element type and shape of the array register `id` holds on `worker`, and its
    /// description (its earlier commands already claimed).
    pub(super) fn array_of(
        &mut self,
        worker: usize,
        id: u16,
    ) -> Result<(DataType, Vec<u32>, Description), SessionError> {
        let described = self.describe(worker, id)?;
        let (dtype, shape) = array_shape(worker, id, &described)?;
        Ok((dtype, shape, described))
    }

    /// Register `id`'s array on every worker of `workers`, pipelined: every description
    /// asked for, then every read sent, before any reply is awaited, so a small array
    /// costs two round trips whatever the number of workers. The caller has synced them.
    pub(super) fn read_arrays(
        &mut self,
        workers: Range<usize>,
        id: u16,
    ) -> Result<Vec<HostArray>, SessionError> {
        let described = self.describe_all(workers.clone(), id)?;
        // Each worker's bytes: read already (in place, or in chunks), or awaited beside
        // the reply to a bulk read sent here.
        let mut reads = Vec::with_capacity(described.len());
        for (worker, held) in workers.clone().zip(&described) {
            let len = held.bytes as usize;
            let channel = &mut self.workers[worker];
            let read = if channel.shares_memory() {
                let mut bytes = vec![0u8; len];
                self.read_in_place(worker, id, held.at as usize, &mut bytes)?;
                Read::Done(Arc::new(bytes))
            } else if len > channel.bulk_capacity() {
                Read::Done(Arc::new(self.read_bytes(worker, id, len)?))
            } else {
                let request = Request::ReadArrayBulk {
                    id,
                    offset: 0,
                    len: offset(len)?,
                };
                Read::Sent(channel.submit(&request)?)
            };
            reads.push(read);
        }
        let mut arrays = Vec::with_capacity(reads.len());
        for ((worker, held), read) in workers.zip(&described).zip(reads) {
            let data = match read {
                Read::Done(data) => data,
                Read::Sent(seq) => {
                    let channel = &mut self.workers[worker];
                    let mut reply = channel.receive(seq)?;
                    match reply.take_bulk() {
                        Some(Bulk(bytes)) if bytes.len() == held.bytes as usize => bytes,
                        _ => {
                            let request = Request::ReadArrayBulk {
                                id,
                                offset: 0,
                                len: held.bytes,
                            };
                            return Err(channel.unexpected(&request, &reply.response()).into());
                        }
                    }
                }
            };
            let (dtype, shape) = array_shape(worker, id, held)?;
            arrays.push(HostArray::shared(dtype, &shape, data)?);
        }
        Ok(arrays)
    }

    /// Register `id`'s array on `worker`. The caller has synced the worker.
    pub(super) fn read_array(&mut self, worker: usize, id: u16) -> Result<HostArray, SessionError> {
        let (dtype, shape, described) = self.array_of(worker, id)?;
        let len = described.bytes as usize;
        let mut bytes = vec![
            0u8;
            if self.workers[worker].shares_memory() {
                len
            } else {
                0
            }
        ];
        let data = if self.read_in_place(worker, id, described.at as usize, &mut bytes)? {
            Arc::new(bytes)
        } else {
            self.read_shared(worker, id, len)?
        };
        Ok(HostArray::shared(dtype, &shape, data)?)
    }

    /// Register `id`'s array on `worker` into `into`, which must have its element type and
    /// element count (and takes on its shape). The caller has synced the worker.
    pub(super) fn read_array_into(
        &mut self,
        worker: usize,
        id: u16,
        into: &mut HostArray,
    ) -> Result<(), SessionError> {
        let (dtype, shape, described) = self.array_of(worker, id)?;
        let len = described.bytes as usize;
        if dtype != into.dtype() || len != into.bytes().len() {
            let elements = |dtype: DataType, bytes: usize| bytes / dtype.size().max(1);
            return Err(SessionError::HostMismatch {
                operation: "copy from worker 0",
                register: id,
                held: (dtype, elements(dtype, len)),
                host: (into.dtype(), elements(into.dtype(), into.bytes().len())),
            });
        }
        if !self.read_in_place(worker, id, described.at as usize, into.bytes_mut())? {
            let data = self.read_shared(worker, id, len)?;
            into.bytes_mut().copy_from_slice(&data);
        }
        Ok(into.set_shape(&shape)?)
    }

    /// Runs `f` on the memory `worker` shares with the host, once every request sent to it
    /// has been answered; `None` when it shares none.
    pub(super) fn with_memory<R>(
        &mut self,
        worker: usize,
        f: impl FnOnce(&mut SharedMemory) -> R,
    ) -> Result<Option<R>, SessionError> {
        Ok(self.workers[worker].device_memory()?.map(f))
    }

    /// Copies the bytes of register `id` on `worker`, at `at` in the worker's memory, into
    /// `into`: `Ok(false)` (nothing done) when the host maps none of its memory.
    fn read_in_place(
        &mut self,
        worker: usize,
        id: u16,
        at: usize,
        into: &mut [u8],
    ) -> Result<bool, SessionError> {
        let bytes = into.len();
        match self.with_memory(worker, |memory| (memory.read_at(at, into), memory.len()))? {
            Some((true, _)) => Ok(true),
            Some((false, memory)) => Err(SessionError::OutsideMemory {
                worker,
                register: id,
                at,
                bytes,
                memory,
            }),
            None => Ok(false),
        }
    }

    /// Writes `bytes` over register `id` on `worker` in the worker's memory, which the host
    /// maps, once its earlier commands have run (`held`: the register's description, if the
    /// caller has it). `Ok(false)`, nothing done, when the host maps none of its memory or
    /// the register does not hold exactly as many bytes (an earlier command failed, say):
    /// the caller then sends the write, and the failure is reported at the next sync as
    /// on any other placement. Earlier failures stay pending for that sync too.
    pub(super) fn write_in_place(
        &mut self,
        worker: usize,
        id: u16,
        bytes: &[u8],
        held: Option<Description>,
    ) -> Result<bool, SessionError> {
        if !self.workers[worker].shares_memory() {
            return Ok(false);
        }
        let described = match held {
            Some(held) => held,
            // Asked after the earlier commands, which the worker runs first.
            None => match self.describe(worker, id) {
                Ok(described) => described,
                Err(SessionError::Transport(TransportError::Device { .. })) => return Ok(false),
                Err(e) => return Err(e),
            },
        };
        if described.bytes as usize != bytes.len() {
            return Ok(false);
        }
        let at = described.at as usize;
        match self.with_memory(worker, |memory| (memory.write_at(at, bytes), memory.len()))? {
            Some((true, _)) => Ok(true),
            Some((false, memory)) => Err(SessionError::OutsideMemory {
                worker,
                register: id,
                at,
                bytes: bytes.len(),
                memory,
            }),
            None => Ok(false),
        }
    }

    /// Makes register `id` on `worker` the array `array`: an allocation, then the bytes
    /// written in place where the host maps the worker's memory, else beside one request
    /// where the link carries bulk of that size (a device thread's queue, a child's window,
    /// QEMU's file), else in framed chunks.
    pub(super) fn write_host_array(
        &mut self,
        worker: usize,
        id: u16,
        array: &HostArray,
    ) -> Result<(), SessionError> {
        self.submit(
            worker,
            &alloc_request(id, array.dtype(), array.shape())?,
            Command::Alloc(id),
        )?;
        self.overwrite_array(worker, id, array, None)
    }

    /// Writes `array`'s bytes over register `id` on `worker`, which already holds an array of
    /// the same type and shape (the caller checked, and passes the register's description
    /// as `held` if it has it): no new allocation, nothing zeroed.
    pub(super) fn overwrite_array(
        &mut self,
        worker: usize,
        id: u16,
        array: &HostArray,
        held: Option<Description>,
    ) -> Result<(), SessionError> {
        if self.write_in_place(worker, id, array.bytes(), held)? {
            return Ok(());
        }
        // Decided before anything is sent: an array larger than the window goes in chunks.
        if array.bytes().len() > self.workers[worker].bulk_capacity() {
            return self.write_chunks(worker, id, array.bytes());
        }
        let request = Request::WriteArrayBulk {
            id,
            offset: 0,
            len: offset(array.bytes().len())?,
        };
        let bulk = Bulk(array.share());
        match self.workers[worker].submit_bulk(&request, bulk) {
            Ok(seq) => {
                self.pending[worker].push_back(Pending::new(seq, Command::Set(id)));
                Ok(())
            }
            Err(source) => Err(SessionError::Worker {
                worker,
                command: Command::Set(id),
                source,
            }),
        }
    }

    /// `len` bytes of register `id` on `worker`, shared: taken whole from beside one reply
    /// on a link that carries bulk, else read in chunks.
    pub(super) fn read_shared(
        &mut self,
        worker: usize,
        id: u16,
        len: usize,
    ) -> Result<Arc<Vec<u8>>, SessionError> {
        let channel = &mut self.workers[worker];
        if len > channel.bulk_capacity() {
            return Ok(Arc::new(self.read_bytes(worker, id, len)?));
        }
        let request = Request::ReadArrayBulk {
            id,
            offset: 0,
            len: offset(len)?,
        };
        let seq = channel.submit(&request)?;
        let mut reply = channel.receive(seq)?;
        match reply.take_bulk() {
            Some(Bulk(bytes)) if bytes.len() == len => Ok(bytes),
            _ => Err(channel.unexpected(&request, &reply.response()).into()),
        }
    }

    /// `len` bytes of register `id` on `worker`.
    pub(super) fn read_bytes(
        &mut self,
        worker: usize,
        id: u16,
        len: usize,
    ) -> Result<Vec<u8>, SessionError> {
        let channel = &mut self.workers[worker];
        let chunk = channel.limits().max_chunk().max(1);
        let mut tickets = Vec::with_capacity(len.div_ceil(chunk));
        for at in (0..len).step_by(chunk) {
            let piece = (len - at).min(chunk);
            let request = ReadArray {
                id,
                offset: offset(at)?,
                len: offset(piece)?,
            };
            tickets.push((channel.submit_typed(&request)?, piece));
        }
        let mut data = Vec::with_capacity(len);
        for (ticket, piece) in tickets {
            let reply = channel.receive_typed(ticket)?;
            let bytes = reply.get();
            if bytes.len() != piece {
                return Err(channel
                    .wrong_length(RequestKind::ReadArray, bytes.len(), piece)
                    .into());
            }
            data.extend_from_slice(bytes);
        }
        Ok(data)
    }

    /// Register `id`'s value on `worker` (synced by the caller).
    pub(super) fn read_value(&mut self, worker: usize, id: u16) -> Result<HostValue, SessionError> {
        let described = self.describe(worker, id)?;
        match described.kind {
            ValueKind::Array => Ok(HostValue::Array(self.read_array(worker, id)?)),
            ValueKind::Str => {
                let bytes = self.read_bytes(worker, id, described.bytes as usize)?;
                Ok(HostValue::Str(String::from_utf8_lossy(&bytes).into_owned()))
            }
            ValueKind::Int | ValueKind::Float | ValueKind::Shape => {
                let reply = self.workers[worker].call(&GetRegister { id })?;
                Ok(match reply.get() {
                    Value::Int(v) => HostValue::Int(v),
                    Value::Float(v) => HostValue::Float(v),
                    Value::Shape(dims) => HostValue::Shape(dims.to_vec()),
                    Value::Str(text) => HostValue::Str(text.into()),
                    Value::Array(array) => HostValue::Array(HostArray::new(
                        array.dtype,
                        &array.shape,
                        array.data.to_vec(),
                    )?),
                })
            }
        }
    }
}
