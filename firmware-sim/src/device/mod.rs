//! One device — a replica, or several consecutive ones run as its lanes (see
//! [`lanes`](tessera_core::program::lanes)) — its memory, its programs, and the answer to
//! every request.
//!
//! [`Device::handle`] is the one entry point. It answers a hello itself (the protocol
//! version must match exactly) and hands every other request to the area that serves it —
//! the area core's [`Request`] names it by — each a module with its own handler, taking its
//! area's requests only ([`DataRequest`](tessera_core::wire::DataRequest), …), and its own
//! list of the errors it can answer:
//!
//! - `data`: the bytes of every register, slot and FIFO, however the host moves them (in a
//!   frame, beside it, or in place);
//! - `memory`: remote-buffer slots, loads and stores between slots and variables;
//! - `streams`: creating the stream FIFOs;
//! - `program`: the prepared program and everything around its step — optimizer
//!   values, seed and RNG state, prepare, step, reset-step, the step's reductions, cycle
//!   counts;
//! - `kernels`: the register file (set, get, free, describe, arrays) and the named
//!   functions that run on it.
//!
//! A refusal becomes [`Response::Error`] naming the request; the device is left as the
//! area's module documentation says (never half-changed where it promises otherwise).
//!
//! # Panics
//!
//! Never, whatever the request: every id, offset and length is checked, and an invariant
//! of the device's own found broken is answered [`ErrorCode::Internal`], naming its site.

mod data;
mod kernels;
mod memory;
mod program;
mod stepping;
mod streams;

use core::cell::Cell;

use critical_section::Mutex;
use tessera_core::rng::Rng;
use tessera_core::wire::{ErrorCode, Limits, Request, Response, PROTOCOL_VERSION};

use crate::arena::{saturate, Arena, Memory};
use crate::fifo::Fifos;
use crate::functions::Function;
use crate::lent::Shared;
use crate::link::LinkLimits;
use crate::program::{Prepared, MAX_LANES};
use crate::registers::Registers;
pub use stepping::Progress;
use stepping::Stepping;

/// What an area's handler answers: a reply with a payload, `None` for [`Response::Done`],
/// or why the request was refused.
type Answer<'d> = Result<Option<Response<'d>>, ErrorCode>;

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

/// A simulated accelerator: one replica, or several as its lanes. All its memory is the arena it was given, which it
/// borrows only while it runs a request.
pub struct Device<'a> {
    arena: Arena<'a>,
    fifos: Fifos,
    registers: Registers,
    limits: Limits,
    seed: u64,
    /// Each lane's generator, lane by lane (as many as the hello's lanes).
    rngs: heapless::Vec<Rng, MAX_LANES>,
    /// Learning rate and momentum.
    optimizer: (f32, f32),
    prepared: Option<Prepared>,
    /// The step under way between two legs, if one is.
    stepping: Option<Stepping>,
    cycles: Shared<'a, CycleCounter>,
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
    /// Replica `replica` (until a hello assigns another), with `memory` as its arena (lent
    /// to the device access by access: see [`Memory`]), taking
    /// frames and keeping replies as `link` says (see [`Server::link`](crate::Server::link)),
    /// counting cycles in `cycles`.
    ///
    /// ```
    /// use tessera_core::wire::{Request, Response, PROTOCOL_VERSION};
    /// use tessera_firmware_sim::{CycleCounter, Device, LinkLimits};
    ///
    /// let (mut memory, cycles) = ([0u8; 1024], CycleCounter::new());
    /// let link = LinkLimits { max_frame: 256, window: 4 };
    /// let mut device = Device::new(0, &mut memory, link, &cycles);
    /// // The host's hello assigns the replica; the device answers with its limits.
    /// let hello = Request::Hello { version: PROTOCOL_VERSION, replica: 3, lanes: 1 };
    /// let Response::Hello { version, limits } = device.handle(hello) else {
    ///     panic!("a hello is answered with a hello");
    /// };
    /// assert_eq!(version, PROTOCOL_VERSION);
    /// assert_eq!((limits.replica, limits.memory, limits.window), (3, 1024, 4));
    /// ```
    pub fn new(
        replica: u32,
        memory: &'a mut (dyn Memory + Send),
        link: LinkLimits,
        cycles: &'a CycleCounter,
    ) -> Self {
        Self::built(replica, Arena::new(memory), link, Shared::Borrowed(cycles))
    }

    /// Replica `replica` on `arena`, counting in `cycles`.
    fn built(
        replica: u32,
        arena: Arena<'a>,
        link: LinkLimits,
        cycles: Shared<'a, CycleCounter>,
    ) -> Self {
        let limits = Limits {
            memory: saturate(arena.capacity()),
            max_frame: saturate(link.max_frame),
            window: link.window,
            replica,
            lanes: 1,
        };
        let mut rngs = heapless::Vec::new();
        // Replicas draw their own streams even before a seed arrives (one lane: room).
        let _ = rngs.push(Rng::for_replica(0, replica));
        Self {
            arena,
            fifos: Fifos::default(),
            registers: Registers::default(),
            limits,
            seed: 0,
            rngs,
            optimizer: (0.0, 0.0),
            prepared: None,
            stepping: None,
            cycles,
            functions: &[],
        }
    }

    /// Replica `replica` owning its `memory` and cycle counter (where [`Device::new`] lends
    /// them): a device a host can keep in a struct of its own.
    #[cfg(feature = "std")]
    pub fn owning(
        replica: u32,
        memory: std::boxed::Box<dyn Memory + Send>,
        link: LinkLimits,
    ) -> Device<'static> {
        let arena = Arena::on(crate::lent::Lent::Owned(memory));
        Device::built(replica, arena, link, Shared::Owned(CycleCounter::new()))
    }

    /// This device with `functions` callable by name besides the built-ins, and searched
    /// before them (an entry may replace a built-in of the same name). See
    /// [`functions`](crate::functions) for how to write one.
    ///
    /// ```
    /// use tessera_core::wire::{ErrorCode, KernelRequest, Request, Response};
    /// use tessera_firmware_sim::functions::{Args, Function, Output};
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
    /// let has = |name| Request::Kernels(KernelRequest::HasFunction { function: name });
    /// assert_eq!(device.handle(has("answer")), Response::Done);
    /// assert_eq!(device.handle(has("add_one")), Response::Done);
    /// ```
    pub fn with_functions(mut self, functions: &'a [(&'static str, Function)]) -> Self {
        self.functions = functions;
        self
    }

    /// What the device announces in its hello.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Runs `request`; a failure becomes an error reply naming the request. A `RunStep`
    /// here has no host to answer its exchanges: it runs whole on a replica alone in every
    /// group and fails with [`ErrorCode::ReduceTimeout`] at its first exchange otherwise (the
    /// serve loop runs steps leg by leg: [`Device::start_step`]).
    // Out of line: inlined into the serve loop, the firmware's .text grows by about 850 B.
    #[inline(never)]
    pub fn handle(&mut self, request: Request<'_>) -> Response<'_> {
        let kind = request.kind();
        match self.route(&request) {
            Ok(Some(reply)) => reply,
            Ok(None) => Response::Done,
            Err(code) => Response::Error {
                request: kind,
                code,
            },
        }
    }

    /// Hands `request` to the area that serves it (a hello is the device's own).
    fn route(&mut self, request: &Request<'_>) -> Answer<'_> {
        match request {
            &Request::Hello {
                version,
                replica,
                lanes,
            } => self.hello(version, replica, lanes),
            Request::Data(request) => data::handle(self, request),
            Request::Memory(request) => memory::handle(self, request),
            Request::Streams(request) => streams::handle(self, request),
            Request::Program(request) => program::handle(self, request),
            Request::Kernels(request) => kernels::handle(self, request),
        }
    }

    /// A hello: the exact protocol version (see the [`wire`](tessera_core::wire) module), then
    /// this device's replicas from now on: `lanes` of them from `replica` on, 1 to
    /// [`MAX_LANES`] ([`ErrorCode::Lanes`] otherwise), each drawing its own stream. A hello
    /// that changes them frees the program prepared for the old ones and ends any step of
    /// it (a step after it is [`ErrorCode::NotPrepared`]).
    fn hello(&mut self, version: u16, replica: u32, lanes: u16) -> Answer<'_> {
        if version != PROTOCOL_VERSION {
            return Err(ErrorCode::Version {
                device: PROTOCOL_VERSION,
            });
        }
        if lanes == 0 || usize::from(lanes) > MAX_LANES {
            return Err(ErrorCode::Lanes {
                lanes,
                max: MAX_LANES as u16, // At most core's MAX_LANES.
            });
        }
        if (replica, lanes) != (self.limits.replica, self.limits.lanes) {
            // A program placed for other replicas is theirs: it goes, with any step of it.
            if let Some(old) = self.prepared.take() {
                crate::program::unplace(&mut self.arena, &mut self.fifos, &old);
            }
            self.stepping = None;
        }
        self.limits.replica = replica;
        self.limits.lanes = lanes;
        self.reseed();
        Ok(Some(Response::Hello {
            version: PROTOCOL_VERSION,
            limits: self.limits,
        }))
    }

    /// Every lane's generator at the start of its replica's stream for the seed.
    fn reseed(&mut self) {
        self.rngs.clear();
        for lane in 0..crate::program::one_to_max(usize::from(self.limits.lanes)) {
            let replica = self.limits.replica.wrapping_add(lane as u32);
            // At most MAX_LANES lanes (the hello's rule): always room.
            let _ = self.rngs.push(Rng::for_replica(self.seed, replica));
        }
    }

    /// Lane `lane`'s generator ([`ErrorCode::NoSuchLane`] past the device's lanes).
    fn lane_rng(&mut self, lane: u16) -> Result<&mut Rng, ErrorCode> {
        let lanes = self.limits.lanes;
        self.rngs
            .get_mut(usize::from(lane))
            .ok_or(ErrorCode::NoSuchLane { lane, lanes })
    }
}
