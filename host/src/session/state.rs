//! The controller's state: the workers' channels, the commands awaiting their replies,
//! the register ids, and arrays moved between the host and a worker's register — by the
//! channel's one data path, which picks in place, bulk or chunks for the placement.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::Arc;

use tessera_core::dtype::DataType;
use tessera_core::wire::endpoint::{DescribeRegister, Description, GetRegister};
use tessera_core::wire::{ErrorCode, KernelRequest, Request, Target, Value, ValueKind};

use super::claims;
use super::pending::{Parked, Pending};
use super::{ArrayError, Command, HostArray, HostValue, SessionError, MAX_REGISTER_ID};
use crate::array::{ArrayView, ArrayViewMut};
use crate::transport::group::Group;
use crate::transport::{Ticket, TransportError};

/// Everything the controller holds; register handles reach it through a weak reference.
#[derive(Debug)]
pub(super) struct State {
    /// The workers, as the group that moves bytes between them.
    pub(super) workers: Group,
    pub(super) pending: Vec<VecDeque<Pending>>,
    /// Failures claimed by another thread's sync, kept for the thread that sent the
    /// command (see `pending`).
    pub(super) parked: Vec<Parked>,
    /// Ids never handed out start here.
    pub(super) next_id: u16,
    /// Freed ids, reused last-in-first-out.
    pub(super) free_ids: Vec<u16>,
    /// The function whose call made each register (until it is freed): a register a call
    /// left without a value names it when read.
    pub(super) called: HashMap<u16, String>,
    pub(super) num_groups: usize,
    /// The order the session's allreduces combine in, unless a call names one.
    pub(super) reduce_order: crate::combine::ReduceOrder,
    pub(super) shut_down: bool,
    /// MPI to finalize at the session's end, when the session spans an MPI job's ranks.
    #[cfg(feature = "mpi")]
    pub(super) finalize: Option<super::ranks::Finalize>,
}

pub(super) fn alloc_request(
    id: u16,
    dtype: DataType,
    shape: &[u32],
) -> Result<Request<'static>, SessionError> {
    Ok(Request::Kernels(KernelRequest::AllocArray {
        id,
        dtype,
        shape: heapless::Vec::from_slice(shape)
            .map_err(|_| ArrayError::Rank { rank: shape.len() })?,
    }))
}

/// The element type and shape of the array a description names; any other value is
/// [`SessionError::NotAnArray`].
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

    /// Frees `id` on every worker (pipelined, each free held back to travel with the
    /// worker's next message) and returns it to the free list, even when a worker cannot be
    /// reached (the first such failure is the error).
    pub(super) fn free(&mut self, id: u16) -> Result<(), SessionError> {
        let mut first = Ok(());
        let request = Request::Kernels(KernelRequest::FreeRegister { id });
        for worker in 0..self.workers.len() {
            let sent = self.workers[worker].submit_held(&request);
            let filed = self.file(worker, sent, Command::Free(id));
            if first.is_ok() {
                first = filed;
            }
        }
        self.free_ids.push(id);
        self.called.remove(&id);
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
            &Request::Kernels(KernelRequest::SetRegister { id, value }),
            Command::Set(id),
        )
    }

    /// Writes `data` over the array register `id` on `worker` by the channel's data path
    /// (`shared`: the same bytes, if the caller holds them shared); its replies are
    /// claimed at the next sync, a refusal reported there as on every placement.
    pub(super) fn write_bytes(
        &mut self,
        worker: usize,
        id: u16,
        data: &[u8],
        shared: Option<&Arc<Vec<u8>>>,
    ) -> Result<(), SessionError> {
        match self.workers[worker].write(Target::Register(id), 0, data, shared) {
            Ok(sent) => {
                let pending = &mut self.pending[worker];
                pending.extend(
                    sent.seqs()
                        .iter()
                        .map(|&seq| Pending::new(seq, Command::Set(id))),
                );
                Ok(())
            }
            Err(source) => Err(SessionError::Worker {
                worker,
                command: Command::Set(id),
                source,
            }),
        }
    }

    /// What register `id` on `worker` holds (its earlier commands already claimed),
    /// checked against the memory the worker announced before anything is sized by it
    /// ([`claims`](super::claims)).
    pub(super) fn describe(&mut self, worker: usize, id: u16) -> Result<Description, SessionError> {
        let channel = &mut self.workers[worker];
        let described = channel
            .call(&DescribeRegister { id })
            .map_err(|e| self.no_value(worker, id, e))?
            .get();
        let channel = &mut self.workers[worker];
        claims::check(worker, id, &described, channel.limits().memory)?;
        Ok(described)
    }

    /// `error` from asking `worker` about register `id`: a register it does not know is
    /// [`SessionError::NoValue`] (naming the call that made it, if one did), any other
    /// error as it is.
    fn no_value(&self, worker: usize, id: u16, error: TransportError) -> SessionError {
        match error {
            TransportError::Device {
                code: ErrorCode::UnknownId { id: unknown },
                ..
            } if unknown == id => SessionError::NoValue {
                worker,
                register: id,
                function: self.called.get(&id).cloned(),
            },
            other => other.into(),
        }
    }

    /// Register `id`'s description on each of `workers`, every request sent before any
    /// reply is awaited (one round trip for all, not one each), each checked as
    /// [`State::describe`] checks it. The workers' earlier commands are already claimed.
    pub(super) fn describe_all(
        &mut self,
        workers: Range<usize>,
        id: u16,
    ) -> Result<Vec<Description>, SessionError> {
        let asked = self.ask_all(workers, id)?;
        self.answers(asked, id)
    }

    /// The first half of [`State::describe_all`]: register `id`'s description asked of
    /// each of `workers`, nothing awaited (its [`State::answers`] claim the replies). What
    /// a collective asks ahead, so that two registers' descriptions cost one round trip.
    pub(super) fn ask_all(
        &mut self,
        workers: Range<usize>,
        id: u16,
    ) -> Result<Vec<(usize, Ticket<DescribeRegister>)>, SessionError> {
        let mut tickets = Vec::with_capacity(workers.len());
        for worker in workers {
            tickets.push((
                worker,
                self.workers[worker].submit_typed(&DescribeRegister { id })?,
            ));
        }
        Ok(tickets)
    }

    /// The descriptions of register `id` that `asked` awaits, in its order, each checked as
    /// [`State::describe`] checks it. Every reply is claimed, whatever fails: one left
    /// unclaimed would stay on its channel for good. The first failure is the error.
    pub(super) fn answers(
        &mut self,
        asked: Vec<(usize, Ticket<DescribeRegister>)>,
        id: u16,
    ) -> Result<Vec<Description>, SessionError> {
        let mut described = Vec::with_capacity(asked.len());
        let mut first = Ok(());
        for (worker, ticket) in asked {
            let channel = &mut self.workers[worker];
            let answered = channel.receive_typed(ticket);
            if first.is_err() {
                continue;
            }
            let checked = answered
                .map_err(|e| self.no_value(worker, id, e))
                .and_then(|reply| {
                    let description = reply.get();
                    let memory = self.workers[worker].limits().memory;
                    claims::check(worker, id, &description, memory)?;
                    Ok(description)
                });
            match checked {
                Ok(description) => described.push(description),
                Err(e) => first = Err(e),
            }
        }
        first.map(|()| described)
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

    /// Register `id`'s array on `worker`. The caller has synced the worker.
    pub(super) fn read_array(&mut self, worker: usize, id: u16) -> Result<HostArray, SessionError> {
        let (dtype, shape, described) = self.array_of(worker, id)?;
        let bytes = self.read_bytes(worker, id, described.bytes as usize)?;
        Ok(HostArray::new(dtype, &shape, bytes)?)
    }

    /// Register `id`'s array on `worker` into `into`, which must have its element type and
    /// element count; returns the register's shape. The caller has synced the worker.
    pub(super) fn read_array_into(
        &mut self,
        worker: usize,
        id: u16,
        mut into: ArrayViewMut<'_>,
    ) -> Result<Vec<u32>, SessionError> {
        let (dtype, shape, described) = self.array_of(worker, id)?;
        let len = described.bytes as usize;
        let elements = |dtype: DataType, bytes: usize| bytes / dtype.size().max(1);
        if dtype != into.dtype() || elements(dtype, len) != into.elements() {
            return Err(SessionError::HostMismatch {
                operation: "copy from worker 0",
                register: id,
                held: (dtype, elements(dtype, len)),
                host: (into.dtype(), into.elements()),
            });
        }
        self.workers[worker].read(Target::Register(id), 0, into.bytes_mut())?;
        Ok(shape)
    }

    /// Makes register `id` on `worker` the array `array`: an allocation, then the bytes by
    /// the channel's data path.
    pub(super) fn write_host_array(
        &mut self,
        worker: usize,
        id: u16,
        array: ArrayView<'_>,
    ) -> Result<(), SessionError> {
        self.submit(
            worker,
            &alloc_request(id, array.dtype(), array.shape())?,
            Command::Alloc(id),
        )?;
        self.overwrite_array(worker, id, array)
    }

    /// Writes `array`'s bytes over register `id` on `worker`, which already holds an array of
    /// the same type and shape (the caller checked): no new allocation, nothing zeroed.
    pub(super) fn overwrite_array(
        &mut self,
        worker: usize,
        id: u16,
        array: ArrayView<'_>,
    ) -> Result<(), SessionError> {
        self.write_bytes(worker, id, array.bytes(), array.shared())
    }

    /// `len` bytes of register `id` on `worker`.
    pub(super) fn read_bytes(
        &mut self,
        worker: usize,
        id: u16,
        len: usize,
    ) -> Result<Vec<u8>, SessionError> {
        let mut data = crate::pages::zeroed(len)?;
        self.workers[worker].read(Target::Register(id), 0, &mut data)?;
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
