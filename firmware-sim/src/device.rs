//! One replica's device: its memory, its programs, and the answer to every request.

use core::cell::Cell;

use critical_section::Mutex;
use tessera_core::rng::Rng;
use tessera_core::wire::{
    Arg, ErrorCode, Limits, Request, Response, MAX_CALL_ARGS, PROTOCOL_VERSION,
};

use crate::arena::{saturate, Arena, Owner};
use crate::fifo::Fifos;
use crate::functions::{self, Function};
use crate::program::{self, Prepared, Reducer, StepContext};
use crate::registers::Registers;
use crate::serve::LinkLimits;

/// Cycles the device has counted, shareable with an interrupt handler (hence the critical
/// section): the step adds its work, a timer interrupt on hardware could add ticks.
#[derive(Debug)]
pub struct CycleCounter(Mutex<Cell<u64>>);

impl Default for CycleCounter {
    fn default() -> Self {
        Self::new()
    }
}

impl CycleCounter {
    /// A counter at zero.
    pub const fn new() -> Self {
        Self(Mutex::new(Cell::new(0)))
    }

    /// Adds `n` cycles.
    pub fn add(&self, n: u64) {
        critical_section::with(|cs| {
            let cell = self.0.borrow(cs);
            cell.set(cell.get().saturating_add(n));
        });
    }

    /// The count so far.
    pub fn get(&self) -> u64 {
        critical_section::with(|cs| self.0.borrow(cs).get())
    }
}

/// Where a bulk request's bytes come from or go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkTarget {
    /// An array register.
    Register(u16),
    /// A remote-buffer slot.
    Slot(u16),
}

/// A simulated accelerator replica. All its memory is the arena it was given.
pub struct Device<'a> {
    arena: Arena<'a>,
    fifos: Fifos,
    registers: Registers,
    limits: Limits,
    seed: u64,
    rng: Rng,
    /// Learning rate and momentum.
    optimizer: (f32, f32),
    prepared: Option<Prepared>,
    cycles: &'a CycleCounter,
    functions: &'a [(&'static str, Function)],
}

impl core::fmt::Debug for Device<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Device")
            .field("limits", &self.limits)
            .field("seed", &self.seed)
            .field("prepared", &self.prepared)
            .finish_non_exhaustive()
    }
}

impl<'a> Device<'a> {
    /// Replica `replica` (until a hello assigns another), with `memory` as its arena, taking
    /// frames and keeping replies as `link` says (see [`Server::link`](crate::Server::link)),
    /// counting cycles in `cycles`.
    pub fn new(
        replica: u32,
        memory: &'a mut [u8],
        link: LinkLimits,
        cycles: &'a CycleCounter,
    ) -> Self {
        let arena = Arena::new(memory);
        let limits = Limits {
            memory: saturate(arena.capacity()),
            max_frame: saturate(link.max_frame),
            window: link.window,
            replica,
        };
        Self {
            arena,
            fifos: Fifos::default(),
            registers: Registers::default(),
            limits,
            seed: 0,
            // Replicas draw their own streams even before a seed arrives.
            rng: Rng::for_replica(0, replica),
            optimizer: (0.0, 0.0),
            prepared: None,
            cycles,
            functions: &[],
        }
    }

    /// This device with `functions` callable by name besides the built-ins, and searched
    /// before them (an entry may replace a built-in of the same name). See
    /// [`functions`] for how to write one.
    ///
    /// ```
    /// use tessera_core::wire::{ErrorCode, Request, Response};
    /// use tessera_firmware_sim::functions::{Args, Function, Output};
    /// use tessera_firmware_sim::program::NoReduce;
    /// use tessera_firmware_sim::{CycleCounter, Device, LinkLimits};
    ///
    /// fn answer(args: &Args<'_>) -> Result<Output, ErrorCode> {
    ///     args.expect(0)?;
    ///     Ok(Output::Int(42))
    /// }
    /// const MINE: &[(&str, Function)] = &[("answer", answer)];
    ///
    /// let (mut memory, cycles) = ([0u8; 256], CycleCounter::new());
    /// let link = LinkLimits { max_frame: 256, window: 1 };
    /// let mut device = Device::new(0, &mut memory, link, &cycles).with_functions(MINE);
    /// let has = |name| Request::HasFunction { function: name };
    /// assert_eq!(device.handle(&has("answer"), &mut NoReduce), Response::Done);
    /// assert_eq!(device.handle(&has("add_one"), &mut NoReduce), Response::Done);
    /// ```
    pub fn with_functions(mut self, functions: &'a [(&'static str, Function)]) -> Self {
        self.functions = functions;
        self
    }

    /// What the device announces in its hello.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Runs `request`; a failure becomes an error reply naming the request. `reducer`
    /// answers the step's collective requests.
    pub fn handle(&mut self, request: &Request<'_>, reducer: &mut dyn Reducer) -> Response<'_> {
        let kind = request.kind();
        match self.run(request, reducer) {
            Ok(Some(reply)) => reply,
            Ok(None) => Response::Done,
            Err(code) => Response::Error {
                request: kind,
                code,
            },
        }
    }

    fn run(
        &mut self,
        request: &Request<'_>,
        reducer: &mut dyn Reducer,
    ) -> Result<Option<Response<'_>>, ErrorCode> {
        match *request {
            Request::Hello { version, .. } if version != PROTOCOL_VERSION => {
                return Err(ErrorCode::Version {
                    device: PROTOCOL_VERSION,
                })
            }
            Request::Hello { replica, .. } => {
                self.limits.replica = replica;
                self.rng = Rng::for_replica(self.seed, replica);
                return Ok(Some(Response::Hello {
                    version: PROTOCOL_VERSION,
                    limits: self.limits,
                }));
            }
            Request::Reset => {
                self.arena.clear();
                self.fifos.clear();
                self.registers.clear();
                self.prepared = None;
            }
            Request::AllocSlot { slot, bytes } => {
                self.arena.alloc(Owner::Slot(slot), bytes as usize)?;
            }
            Request::WriteSlot { slot, offset, data } => {
                self.slot_range(slot, offset, saturate(data.len()))?
                    .copy_from_slice(data);
            }
            Request::ReadSlot { slot, offset, len } => {
                if len > self.limits.max_frame {
                    return Err(ErrorCode::ReplyTooLarge);
                }
                return Ok(Some(Response::Data {
                    data: self.slot_range(slot, offset, len)?,
                }));
            }
            Request::CreateFifo {
                fifo,
                item_bytes,
                depth,
            } => {
                self.fifos
                    .create(&mut self.arena, fifo, item_bytes, depth)?;
            }
            Request::PushFifo { fifo, data } => self.fifos.push(&mut self.arena, fifo, data)?,
            Request::PopFifo { fifo, items } => {
                // Refused before anything is taken: the items must fit one reply.
                let bytes = self
                    .fifos
                    .get(fifo)?
                    .item_bytes
                    .saturating_mul(items as usize);
                if bytes > self.limits.max_chunk() {
                    return Err(ErrorCode::ReplyTooLarge);
                }
                let (block, range) = self.fifos.pop(&self.arena, fifo, items as usize)?;
                let data = self.arena.bytes(block).get(range).unwrap_or(&[]);
                return Ok(Some(Response::Data { data }));
            }
            Request::SetOptimizer {
                learning_rate,
                momentum,
            } => {
                // The program's rule for its optimizer holds for the host's values too.
                let valid = learning_rate.is_finite()
                    && learning_rate >= 0.0
                    && (0.0..1.0).contains(&momentum);
                if !valid {
                    return Err(ErrorCode::BadConfig);
                }
                self.optimizer = (learning_rate, momentum);
            }
            Request::SetSeed { seed } => {
                self.seed = seed;
                self.rng = Rng::for_replica(seed, self.limits.replica);
            }
            Request::GetSeed => return Ok(Some(Response::Seed { seed: self.seed })),
            Request::SetRngState { state } => self.rng = Rng::from_state(state),
            Request::GetRngState => {
                return Ok(Some(Response::RngState {
                    state: self.rng.state(),
                }))
            }
            Request::Prepare {
                replicas,
                ref program,
            } => {
                let prepared = program::prepare(
                    &mut self.arena,
                    &mut self.fifos,
                    program,
                    replicas,
                    &self.limits,
                    &mut self.prepared,
                )?;
                let o = &prepared.program.optimizer;
                self.optimizer = (o.learning_rate(), o.momentum());
                self.prepared = Some(prepared);
            }
            Request::RunStep => {
                let prepared = self.prepared.as_ref().ok_or(ErrorCode::NotConfigured)?;
                let ctx = StepContext {
                    arena: &mut self.arena,
                    fifos: &mut self.fifos,
                    rng: &mut self.rng,
                    prepared,
                    optimizer: self.optimizer,
                };
                let work = program::run(ctx, reducer)?;
                self.cycles.add(work);
            }
            Request::ResetStep => {
                let prepared = self.prepared.as_ref().ok_or(ErrorCode::NotConfigured)?;
                program::reset(&mut self.arena, &mut self.fifos, prepared)?;
            }
            Request::Reduced { .. } => return Err(ErrorCode::UnexpectedReduced),
            Request::CycleCount => {
                if !self
                    .prepared
                    .as_ref()
                    .is_some_and(|p| p.program.instrumented)
                {
                    return Err(ErrorCode::NotInstrumented);
                }
                return Ok(Some(Response::Cycles {
                    cycles: self.cycles.get(),
                }));
            }
            Request::SetRegister { id, ref value } => {
                self.registers.set(&mut self.arena, id, value)?
            }
            Request::GetRegister { id } => {
                return Ok(Some(Response::Register {
                    value: self.registers.get(&self.arena, id)?,
                }))
            }
            Request::FreeRegister { id } => {
                self.registers.stored(id)?;
                self.registers.free(&mut self.arena, id);
            }
            Request::Call {
                function,
                ref args,
                out,
            } => {
                let f = functions::lookup(self.functions, function)?;
                let mut named = heapless::Vec::<Arg<'_>, MAX_CALL_ARGS>::new();
                for &id in args {
                    named
                        .push(Arg::Register(id))
                        .map_err(|_| ErrorCode::BadArguments)?;
                }
                let (replica, regs) = (self.limits.replica, &mut self.registers);
                functions::call::run(regs, &mut self.arena, f, &named, out, replica)?;
            }
            Request::Invoke {
                function,
                ref args,
                out,
            } => {
                let f = functions::lookup(self.functions, function)?;
                let (replica, regs) = (self.limits.replica, &mut self.registers);
                functions::call::run(regs, &mut self.arena, f, args, out, replica)?;
            }
            Request::HasFunction { function } => {
                functions::lookup(self.functions, function)?;
            }
            Request::AllocArray {
                id,
                dtype,
                ref shape,
            } => {
                self.registers
                    .alloc_array(&mut self.arena, id, dtype, shape)?;
            }
            Request::WriteArray { id, offset, data } => {
                self.registers.write(&mut self.arena, id, offset, data)?;
            }
            Request::ReadArray { id, offset, len } => {
                if len > self.limits.max_frame {
                    return Err(ErrorCode::ReplyTooLarge);
                }
                return Ok(Some(Response::Data {
                    data: self.registers.read(&self.arena, id, offset, len)?,
                }));
            }
            Request::DescribeRegister { id } => {
                return Ok(Some(self.registers.describe(&self.arena, id)?));
            }
            // The serve loop turns these into WriteArray / reads of `register_bytes` when
            // its link carries bytes beside messages; reaching here means it does not.
            Request::WriteArrayBulk { .. }
            | Request::ReadArrayBulk { .. }
            | Request::WriteSlotBulk { .. }
            | Request::ReadSlotBulk { .. } => return Err(ErrorCode::BulkUnavailable),
            Request::RemoteLoad { slot, variable } => {
                let from = self
                    .arena
                    .find(Owner::Slot(slot))
                    .ok_or(ErrorCode::UnknownId { id: slot })?;
                let to = match self.arena.find(Owner::Variable(variable)) {
                    Some(block) => block,
                    None => self.arena.alloc(Owner::Variable(variable), from.len)?,
                };
                self.arena.copy(from, to)?;
            }
            Request::Ping => {}
            Request::RemoteStore { variable, slot } => {
                let from = self
                    .arena
                    .find(Owner::Variable(variable))
                    .ok_or(ErrorCode::UnknownId { id: variable })?;
                let to = self
                    .arena
                    .find(Owner::Slot(slot))
                    .ok_or(ErrorCode::UnknownId { id: slot })?;
                self.arena.copy(from, to)?;
            }
        }
        Ok(None)
    }

    /// Bytes `[offset, offset + len)` of register `id` (an array, tensor or string),
    /// checked, whatever their length: what a bulk read sends beside its reply.
    pub fn register_bytes(&self, id: u16, offset: u32, len: u32) -> Result<&[u8], ErrorCode> {
        self.registers.read(&self.arena, id, offset, len)
    }

    /// Bytes `[offset, offset + len)` of array register `id`, checked, to be written in
    /// place: where a bulk write's bytes land.
    pub fn register_bytes_mut(
        &mut self,
        id: u16,
        offset: u32,
        len: u32,
    ) -> Result<&mut [u8], ErrorCode> {
        self.registers.bytes_mut(&mut self.arena, id, offset, len)
    }

    /// Bytes `[offset, offset + len)` of a bulk request's register or slot, checked, to be
    /// read or written in place.
    pub fn bulk_bytes(
        &mut self,
        target: BulkTarget,
        offset: u32,
        len: u32,
    ) -> Result<&mut [u8], ErrorCode> {
        match target {
            BulkTarget::Register(id) => self.registers.bytes_mut(&mut self.arena, id, offset, len),
            BulkTarget::Slot(slot) => self.slot_range(slot, offset, len),
        }
    }

    /// Bytes `[offset, offset + len)` of slot `slot`, checked.
    fn slot_range(&mut self, slot: u16, offset: u32, len: u32) -> Result<&mut [u8], ErrorCode> {
        let block = self
            .arena
            .find(Owner::Slot(slot))
            .ok_or(ErrorCode::UnknownId { id: slot })?;
        let out_of_bounds = ErrorCode::OutOfBounds {
            offset,
            len,
            size: saturate(block.len),
        };
        let start = offset as usize;
        let end = start.checked_add(len as usize).ok_or(out_of_bounds)?;
        self.arena
            .bytes_mut(block)
            .get_mut(start..end)
            .ok_or(out_of_bounds)
    }
}
