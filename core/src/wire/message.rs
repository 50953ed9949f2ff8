//! The messages. Payloads borrow from the frame they were decoded from.

use serde::{Deserialize, Serialize};

use crate::dtype::DataType;

pub use super::error::{ErrorCode, Invariant};

use super::target::Target;

/// The protocol version a [`Request::Hello`] carries; bumped on any change to the bytes of
/// any message (host and device must run exactly the same one: see the [`wire`](super)
/// module).
pub const PROTOCOL_VERSION: u16 = 19;

/// Registers hold shapes of at most this rank.
pub const MAX_SHAPE_RANK: usize = 8;

/// Arguments a [`Request::Invoke`] can pass.
pub const MAX_CALL_ARGS: usize = 4;

/// One message and its sequence number. Replies carry the sequence number of the request
/// they answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope<T> {
    /// Chosen by the host, increasing per request; retries reuse it.
    pub seq: u32,
    /// The message.
    pub body: T,
}

/// What a device can hold, announced in its hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Limits {
    /// Bytes of arena for slots, FIFOs and registers.
    pub memory: u32,
    /// Largest frame the device accepts or sends, delimiter included.
    pub max_frame: u32,
    /// The replica this device is (its first lane's, when it runs several).
    pub replica: u32,
    /// Replicas it runs from `replica` on, one per lane
    /// ([`lanes`](crate::program::lanes)): as the hello asked.
    pub lanes: u16,
    /// Requests whose replies the device keeps for retries: the host never has more than
    /// this many outstanding.
    pub window: u16,
}

impl Limits {
    /// The largest bulk chunk that fits one frame with its envelope.
    pub fn max_chunk(&self) -> usize {
        // Worst case for COBS is one extra byte per 254; the envelope and payload header
        // take at most 32 bytes.
        let frame = self.max_frame as usize;
        frame.saturating_sub(super::FRAME_OVERHEAD + frame / 254 + 32)
    }
}

/// A register value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Value<'a> {
    /// A signed integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A shape.
    Shape(heapless::Vec<u32, MAX_SHAPE_RANK>),
    /// A short string.
    #[serde(borrow)]
    Str(&'a str),
    /// An array of any element type.
    #[serde(borrow)]
    Array(Array<'a>),
}

/// An array: element type, shape (row-major) and little-endian bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Array<'a> {
    /// Element type.
    pub dtype: DataType,
    /// Dimensions; empty for a scalar.
    pub shape: heapless::Vec<u32, MAX_SHAPE_RANK>,
    /// The elements, `dtype`'s size each, little-endian.
    #[serde(borrow, serialize_with = "super::bytes::serialize")]
    pub data: &'a [u8],
}

/// What a register holds, without its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ValueKind {
    /// An integer ([`Value::Int`]).
    Int,
    /// A float ([`Value::Float`]).
    Float,
    /// A shape ([`Value::Shape`]).
    Shape,
    /// A string ([`Value::Str`]).
    Str,
    /// An array ([`Value::Array`]) of any element type.
    Array,
}

/// An argument of a [`Request::Invoke`]: a register the device holds, or a value sent
/// with the call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Arg<'a> {
    /// The value of this register.
    Register(u16),
    /// This value.
    #[serde(borrow)]
    Value(Value<'a>),
}

/// How arrays combine element by element: a device's
/// [`Contribution`](super::Contribution) with its group's others, and the host's
/// collectives (tessera-host's session allreduce, whose combine kernel states the
/// arithmetic).
///
/// # Rules
///
/// - A device's step contributes only [`Sum`](Self::Sum) (gathers) and
///   [`Avg`](Self::Avg) (means) of `f32` buffers; the host's step rounds refuse a
///   contribution asking for any other operation.
/// - The wire writes a variant as its position: `Sum` and `Avg` keep 0 and 1 (`Avg` was
///   named `Mean`), and the operations only the host's collectives use come after them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ReduceOp {
    /// Element-wise sum.
    Sum,
    /// Element-wise mean: the sum divided by the number of members (integers truncate).
    Avg,
    /// Element-wise product.
    Prod,
    /// Element-wise minimum.
    Min,
    /// Element-wise maximum.
    Max,
}

/// Host to device.
// `Invoke` carries its arguments inline (a few hundred bytes): a request is built once on
// the stack and encoded at once, and no_std has no box to put them in.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Request<'a> {
    /// Opens a session and tells the device which replicas it is (the controller assigns
    /// worker ids); the device answers with its limits. A device refuses more lanes than
    /// it can run ([`ErrorCode::Lanes`]).
    Hello {
        /// The host's [`PROTOCOL_VERSION`].
        version: u16,
        /// The replica this device serves from now on (its first lane's).
        replica: u32,
        /// Replicas it serves, `replica` and the ones after it, one per lane
        /// ([`lanes`](crate::program::lanes)): 1 for a device of one replica.
        lanes: u16,
    },
    /// Reserves a remote-buffer slot of `bytes` bytes, zeroed.
    AllocSlot {
        /// Slot id, chosen by the host.
        slot: u16,
        /// Size in bytes.
        bytes: u32,
    },
    /// Creates a stream FIFO of `depth` items of `item_bytes` bytes.
    CreateFifo {
        /// FIFO id, chosen by the host.
        fifo: u16,
        /// Bytes per item.
        item_bytes: u32,
        /// Items it holds.
        depth: u16,
    },
    /// Optimizer values from host, between steps.
    SetOptimizer {
        /// Learning rate.
        learning_rate: f32,
        /// Momentum (ignored by a program trained with plain SGD).
        momentum: f32,
    },
    /// Random seed from host; also reseeds the RNG with this replica's stream for it.
    SetSeed {
        /// The seed.
        seed: u64,
    },
    /// Random seed to host.
    GetSeed,
    /// RNG state from host, for one lane's replica.
    SetRngState {
        /// The lane.
        lane: u16,
        /// The generator's words.
        state: [u32; 4],
    },
    /// RNG state to host, of one lane's replica.
    GetRngState {
        /// The lane.
        lane: u16,
    },
    /// Places a program for a run on `replicas` replicas: its variables, their optimizer
    /// state and remote-buffer slots, a FIFO per stream and per anchor deep enough for one
    /// step (ids as [`program::ids`](crate::program::ids) assigns them), and the model's
    /// scratch memory. The device checks the program with core's own rules, and its arena,
    /// and places nothing when either refuses.
    ///
    /// The program travels encoded, as bytes inside the request, and the device decodes it
    /// when it prepares (bytes that are not exactly one
    /// [`Program`](crate::program::Program) are [`ErrorCode::Malformed`]): carried inline,
    /// a program's fixed capacities made every decoded request some two kilobytes, copied
    /// at every message a device reads, though only this one carries a program.
    Prepare {
        /// Replicas of the run (the program's groupings resolve on them).
        replicas: u32,
        /// The program, as [`Program::encode`](crate::program::Program::encode) writes it.
        #[serde(serialize_with = "super::bytes::serialize")]
        program: &'a [u8],
    },
    /// Runs one training step of the prepared program (`batches_per_step` batches).
    RunStep {
        /// The host wrote every stream FIFO's step in place, whole, into FIFOs the last step
        /// left empty (one step's items each, from the ring's start): the device counts each
        /// FIFO full, by the rules a [`Request::Wrote`] of its whole ring is checked by,
        /// before the step's first leg, and refuses the step if one does not hold. This
        /// spares a host that moves the step's inputs in place one `Wrote` and its reply
        /// per stream per replica. `false`: the FIFOs were filled by requests of their own.
        fed: bool,
        /// The host read every anchor FIFO's bytes in place, whole, as the last step left
        /// them (a step that ends [`Response::Done`] leaves each anchor FIFO holding exactly
        /// its ring, from the ring's start): the device drops each FIFO's items, by the
        /// rules a [`Request::Took`] of its whole ring is checked by, before it counts the
        /// inputs (`fed`) and runs the step's first leg, and refuses the step if one does
        /// not hold. This spares a host that reads the anchors in place one `Took` and its
        /// reply per anchor per replica per step. `false`: nothing was read in place
        /// unreported (the anchors left by requests of their own, or nothing to drop).
        took: bool,
    },
    /// Cycle count to host, of one lane's replica: the work it would have counted on a
    /// device of its own.
    CycleCount {
        /// The lane.
        lane: u16,
    },
    /// Stores a value in register `id` (replacing what it held).
    SetRegister {
        /// Register id (0 is reserved).
        id: u16,
        /// The value.
        value: Value<'a>,
    },
    /// Returns the value of register `id`.
    GetRegister {
        /// Register id.
        id: u16,
    },
    /// Frees register `id`.
    FreeRegister {
        /// Register id.
        id: u16,
    },
    /// Copies a remote-buffer slot into an on-device variable (created with the slot's
    /// size if it does not exist).
    RemoteLoad {
        /// Source slot.
        slot: u16,
        /// Destination variable.
        variable: u16,
    },
    /// Copies an on-device variable into a remote-buffer slot of the same size.
    RemoteStore {
        /// Source variable.
        variable: u16,
        /// Destination slot.
        slot: u16,
    },
    /// Calls a named device function on registers and values, storing the result in `out`
    /// (0: discard).
    Invoke {
        /// Function name.
        function: &'a str,
        /// Arguments, in order.
        args: heapless::Vec<Arg<'a>, MAX_CALL_ARGS>,
        /// Result register.
        out: u16,
    },
    /// Done if the device has a function of this name, else an `UnknownFunction` error.
    HasFunction {
        /// Function name.
        function: &'a str,
    },
    /// Makes register `id` a zeroed array (replacing what it held), to be filled with
    /// [`Request::Write`] (or moved in place).
    AllocArray {
        /// Register id (0 is reserved).
        id: u16,
        /// Element type.
        dtype: DataType,
        /// Dimensions.
        shape: heapless::Vec<u32, MAX_SHAPE_RANK>,
    },
    /// What register `id` holds, without its bytes.
    DescribeRegister {
        /// Register id.
        id: u16,
    },
    /// Writes `data` into `target` at `offset` (see [`target`](super::target) for what an
    /// offset means in each kind of target).
    Write {
        /// Where the bytes go.
        target: Target,
        /// Byte offset.
        offset: u32,
        /// The bytes.
        #[serde(borrow, serialize_with = "super::bytes::serialize")]
        data: &'a [u8],
    },
    /// Reads `len` bytes of `target` at `offset`, answered with [`Response::Data`] in one
    /// frame.
    Read {
        /// Where the bytes come from.
        target: Target,
        /// Byte offset.
        offset: u32,
        /// Bytes wanted.
        len: u32,
    },
    /// Like [`Request::Write`], with the `len` bytes beside the message instead of inside
    /// it: handed over on a device thread's queue, or in the link's shared window (a child
    /// process's memory, QEMU's host file).
    WriteBulk {
        /// Where the bytes go.
        target: Target,
        /// Byte offset.
        offset: u32,
        /// Bytes beside the message.
        len: u32,
    },
    /// Like [`Request::Read`], answered with [`Response::Bulk`] and the bytes beside the
    /// reply, whatever their length.
    ReadBulk {
        /// Where the bytes come from.
        target: Target,
        /// Byte offset.
        offset: u32,
        /// Bytes wanted.
        len: u32,
    },
    /// Where `target`'s bytes lie in the device's memory ([`Response::Located`]), for a
    /// host that maps that memory and moves the bytes itself while the device is idle.
    Locate {
        /// The target.
        target: Target,
    },
    /// The host wrote `len` bytes of `target` at `offset` in place: a FIFO now holds them
    /// (checked as a [`Request::Write`] there would be).
    Wrote {
        /// The target.
        target: Target,
        /// Byte offset.
        offset: u32,
        /// Bytes written.
        len: u32,
    },
    /// The host read `len` bytes of `target` at `offset` in place: a FIFO drops them
    /// (checked as a [`Request::Read`] there would be).
    Took {
        /// The target.
        target: Target,
        /// Byte offset.
        offset: u32,
        /// Bytes read.
        len: u32,
    },
    /// Puts the prepared program's step state back to where a step starts: every stream and
    /// anchor FIFO emptied (complete and partial items alike) and the step's scratch zeroed
    /// (the running sums of `Sum` anchors live there). Variables, their optimizer state,
    /// slots and the RNG are left as they are. The host sends it to every replica after a
    /// failed step, so that nothing the failure left behind is read by the next one.
    ResetStep,
}

/// Which request an error reply is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RequestKind {
    /// [`Request::Hello`]: opening a session.
    Hello,
    /// [`Request::AllocSlot`]: reserving a remote-buffer slot.
    AllocSlot,
    /// [`Request::CreateFifo`]: creating a stream FIFO.
    CreateFifo,
    /// [`Request::SetOptimizer`]: the optimizer's values.
    SetOptimizer,
    /// [`Request::SetSeed`]: the random seed from the host.
    SetSeed,
    /// [`Request::GetSeed`]: the random seed to the host.
    GetSeed,
    /// [`Request::SetRngState`]: the generator's state from the host.
    SetRngState,
    /// [`Request::GetRngState`]: the generator's state to the host.
    GetRngState,
    /// [`Request::Prepare`]: placing a program.
    Prepare,
    /// [`Request::RunStep`]: one training step.
    RunStep,
    /// [`Request::CycleCount`]: the cycle count to the host.
    CycleCount,
    /// [`Request::SetRegister`]: a value into a register.
    SetRegister,
    /// [`Request::GetRegister`]: a register's value.
    GetRegister,
    /// [`Request::FreeRegister`]: freeing a register.
    FreeRegister,
    /// [`Request::RemoteLoad`]: a slot into an on-device variable.
    RemoteLoad,
    /// [`Request::RemoteStore`]: an on-device variable into a slot.
    RemoteStore,
    /// [`Request::Invoke`]: calling a named function.
    Invoke,
    /// [`Request::HasFunction`]: asking for a function by name.
    HasFunction,
    /// [`Request::AllocArray`]: an array register, zeroed.
    AllocArray,
    /// [`Request::DescribeRegister`]: what a register holds.
    DescribeRegister,
    /// [`Request::Write`]: bytes into a target, in the frame.
    Write,
    /// [`Request::Read`]: bytes of a target, in the reply's frame.
    Read,
    /// [`Request::WriteBulk`]: bytes into a target, beside the message.
    WriteBulk,
    /// [`Request::ReadBulk`]: bytes of a target, beside the reply.
    ReadBulk,
    /// [`Request::Locate`]: where a target lies in the device's memory.
    Locate,
    /// [`Request::Wrote`]: bytes the host wrote in place.
    Wrote,
    /// [`Request::Took`]: bytes the host read in place.
    Took,
    /// [`Request::ResetStep`]: resetting the step's FIFOs and scratch.
    ResetStep,
    /// A frame that did not decode as any request.
    Malformed,
}

impl RequestKind {
    /// True for a request the device runs while it reads its link for topic messages (a
    /// [`Request::RunStep`], which waits for the host's combined results): any other
    /// request that reaches the device meanwhile ends it ([`ErrorCode::StepAbandoned`]) and
    /// is dropped unrun, so a host keeps every request it sends while one is unanswered, to
    /// send it again.
    pub fn is_interruptible(self) -> bool {
        matches!(self, Self::RunStep)
    }
}

impl Request<'_> {
    /// The kind of this request, for error replies.
    pub fn kind(&self) -> RequestKind {
        match self {
            Self::Hello { .. } => RequestKind::Hello,
            Self::AllocSlot { .. } => RequestKind::AllocSlot,
            Self::CreateFifo { .. } => RequestKind::CreateFifo,
            Self::SetOptimizer { .. } => RequestKind::SetOptimizer,
            Self::SetSeed { .. } => RequestKind::SetSeed,
            Self::GetSeed => RequestKind::GetSeed,
            Self::SetRngState { .. } => RequestKind::SetRngState,
            Self::GetRngState { .. } => RequestKind::GetRngState,
            Self::Prepare { .. } => RequestKind::Prepare,
            Self::RunStep { .. } => RequestKind::RunStep,
            Self::CycleCount { .. } => RequestKind::CycleCount,
            Self::SetRegister { .. } => RequestKind::SetRegister,
            Self::GetRegister { .. } => RequestKind::GetRegister,
            Self::FreeRegister { .. } => RequestKind::FreeRegister,
            Self::RemoteLoad { .. } => RequestKind::RemoteLoad,
            Self::RemoteStore { .. } => RequestKind::RemoteStore,
            Self::Invoke { .. } => RequestKind::Invoke,
            Self::HasFunction { .. } => RequestKind::HasFunction,
            Self::AllocArray { .. } => RequestKind::AllocArray,
            Self::DescribeRegister { .. } => RequestKind::DescribeRegister,
            Self::Write { .. } => RequestKind::Write,
            Self::Read { .. } => RequestKind::Read,
            Self::WriteBulk { .. } => RequestKind::WriteBulk,
            Self::ReadBulk { .. } => RequestKind::ReadBulk,
            Self::Locate { .. } => RequestKind::Locate,
            Self::Wrote { .. } => RequestKind::Wrote,
            Self::Took { .. } => RequestKind::Took,
            Self::ResetStep => RequestKind::ResetStep,
        }
    }
}

/// Device to host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Response<'a> {
    /// Answer to [`Request::Hello`].
    Hello {
        /// The device's [`PROTOCOL_VERSION`].
        version: u16,
        /// What it can hold.
        limits: Limits,
    },
    /// The request ran.
    Done,
    /// Bytes read ([`Request::Read`]).
    Data {
        /// The bytes.
        #[serde(borrow, serialize_with = "super::bytes::serialize")]
        data: &'a [u8],
    },
    /// The random seed.
    Seed {
        /// The seed.
        seed: u64,
    },
    /// The RNG state.
    RngState {
        /// The generator's words.
        state: [u32; 4],
    },
    /// Cycles counted by the device.
    Cycles {
        /// The count.
        cycles: u64,
    },
    /// A register's value.
    Register {
        /// The value.
        value: Value<'a>,
    },
    /// The request failed.
    Error {
        /// Which request.
        request: RequestKind,
        /// Why.
        code: ErrorCode,
    },
    /// What a register holds ([`Request::DescribeRegister`]).
    Described {
        /// The kind of value.
        kind: ValueKind,
        /// The element type, for arrays (F32 for tensors).
        dtype: Option<DataType>,
        /// The shape, for arrays and shapes.
        shape: heapless::Vec<u32, MAX_SHAPE_RANK>,
        /// Bytes the value's data takes (arrays, tensors, strings), else 0.
        bytes: u32,
        /// Where those bytes start in the device's memory, counted from its first byte (0
        /// when there are none): a host that shares the device's memory reads and writes
        /// them there while the device is idle.
        at: u32,
    },
    /// Answer to [`Request::Locate`]: the target's bytes are `[at, at + len)` of the
    /// device's memory, counted from its first byte (a FIFO's: its whole ring).
    Located {
        /// Where they start.
        at: u32,
        /// How many there are.
        len: u32,
    },
    /// Answer to [`Request::ReadBulk`]: the `len` bytes travel beside this reply.
    Bulk {
        /// Bytes beside the reply.
        len: u32,
    },
}
