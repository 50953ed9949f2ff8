//! Why a device refuses a request: [`ErrorCode`], one variant per rule, and [`Invariant`],
//! the site of a device bug found at run time. Each names the rule that failed, never a
//! catch-all for unrelated failures.

use core::fmt;

use serde::{Deserialize, Serialize};

use crate::program::ProgramFault;

/// Why the device refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ErrorCode {
    /// The host speaks another protocol version.
    #[error("the device speaks protocol version {device}")]
    Version {
        /// The device's version.
        device: u16,
    },
    /// The arena cannot hold the allocation.
    #[error("the device arena cannot hold {requested} more bytes ({available} left)")]
    OutOfMemory {
        /// Bytes asked for.
        requested: u32,
        /// Bytes left.
        available: u32,
    },
    /// A table (slots, FIFOs, registers) is full.
    #[error("the device table for that kind of object is full")]
    TableFull,
    /// No slot, FIFO or register with that id.
    #[error("no object with id {id} on the device")]
    UnknownId {
        /// The id.
        id: u16,
    },
    /// An id already in use.
    #[error("id {id} is already in use on the device")]
    IdInUse {
        /// The id.
        id: u16,
    },
    /// A range outside the object it addresses.
    #[error("bytes [{offset}, {offset}+{len}) are outside an object of {size} bytes")]
    OutOfBounds {
        /// Byte offset asked for.
        offset: u32,
        /// Bytes asked for.
        len: u32,
        /// Size of the object.
        size: u32,
    },
    /// A FIFO read of bytes that are not whole items.
    #[error("FIFO items are {expected} bytes: {actual} bytes are not whole items")]
    ItemSize {
        /// The FIFO's item size.
        expected: u32,
        /// Bytes given.
        actual: u32,
    },
    /// Pushing to a full FIFO.
    #[error("FIFO {fifo} is full")]
    FifoFull {
        /// The FIFO.
        fifo: u16,
    },
    /// Popping an empty FIFO.
    #[error("FIFO {fifo} is empty")]
    FifoEmpty {
        /// The FIFO.
        fifo: u16,
    },
    /// A FIFO written or read at another position than its stream's: a write must start
    /// where the next byte goes, a read at the oldest item (see
    /// [`target`](super::target)).
    #[error(
        "FIFO {fifo} is at position {expected}, not {offset}: a write appends where the \
         next byte goes, a read starts at the oldest item"
    )]
    FifoPosition {
        /// The FIFO.
        fifo: u16,
        /// The position the stream is at.
        expected: u32,
        /// The offset asked for.
        offset: u32,
    },
    /// A program (or optimizer values) breaking a rule of core's
    /// [`Program::check`](crate::program::Program::check): the device checks with the very
    /// rules the host does, and names the one that failed and where, as a
    /// [`ProgramFault`] (a few bytes: why not the whole [`ProgramError`] is said there).
    ///
    /// [`ProgramError`]: crate::program::ProgramError
    #[error("the program breaks a rule: {0}")]
    Program(ProgramFault),
    /// A request that needs a prepared program
    /// ([`ProgramRequest::RunStep`](super::ProgramRequest::RunStep),
    /// [`ProgramRequest::ResetStep`](super::ProgramRequest::ResetStep)) before any
    /// [`ProgramRequest::Prepare`](super::ProgramRequest::Prepare) succeeded.
    #[error("no program is prepared on the device")]
    NotPrepared,
    /// A program prepared for a replica outside the run: the hello made this device
    /// `replica`, and the run has only `replicas`.
    #[error("the device is replica {replica}, outside a run of {replicas} replicas")]
    ReplicaOutOfRange {
        /// This device's replica.
        replica: u32,
        /// Replicas of the run.
        replicas: u32,
    },
    /// A FIFO of zero-byte items, or with a depth of zero or past `u16::MAX` items
    /// (saturated to `u32::MAX` when it does not fit).
    #[error(
        "a FIFO of {depth} items of {item_bytes} bytes: items need at least 1 byte, \
         the depth must lie in 1..=65535"
    )]
    FifoShape {
        /// Bytes per item.
        item_bytes: u32,
        /// Items it would hold.
        depth: u32,
    },
    /// A rule the device keeps by construction was found broken at `site`: a device bug,
    /// never the host's fault. The request is refused instead of panicking.
    #[error("device invariant broken ({site}): a device bug")]
    Internal {
        /// Where.
        site: Invariant,
    },
    /// A reply that does not fit in one frame.
    #[error("the reply does not fit in one frame")]
    ReplyTooLarge,
    /// No device function of that name.
    #[error("no device function of that name")]
    UnknownFunction,
    /// Arguments of the wrong number or kind for the function.
    #[error("wrong arguments for the device function")]
    BadArguments,
    /// The frame did not decode as a request, or a program it carries did not decode as
    /// exactly one program (a `Prepare`).
    #[error("the frame, or the program it carries, does not decode")]
    Malformed,
    /// A combined result (a [`Combined`](super::Combined)) of another length than the
    /// contribution it answers.
    #[error("the combined result of a reduction has the wrong length")]
    UnexpectedReduced,
    /// The host did not answer a [`Contribution`](super::Contribution) in time.
    #[error("the host did not answer the reduction in time")]
    ReduceTimeout,
    /// A step whose reduction would not fit one frame.
    #[error("a reduction of {bytes} bytes does not fit the device's frame ({max} bytes at most)")]
    ReductionTooLarge {
        /// Bytes one contribution would carry.
        bytes: u32,
        /// The most one frame carries.
        max: u32,
    },
    /// A bulk request on a link that carries no bytes beside its messages, or whose bytes
    /// beside it are not the length it names.
    #[error("no bulk bytes of that length came with the request on this link")]
    BulkUnavailable,
    /// A step abandoned while it waited for a reduction: the host sent a later request,
    /// so it will not answer this step's reductions any more.
    #[error("the step was abandoned: the host moved on while it waited for a reduction")]
    StepAbandoned,
    /// A cycle count from a device whose program is not instrumented.
    #[error("cycle counts need a program prepared with instrumentation enabled")]
    NotInstrumented,
    /// A hello asking a device to run more lanes than it can (or none).
    #[error("the device runs 1 to {max} lanes (replicas in one walk), not {lanes}")]
    Lanes {
        /// The lanes asked for.
        lanes: u16,
        /// The most this device runs.
        max: u16,
    },
    /// A program whose groupings put two of the device's lanes in different groups of a
    /// variable: they cannot share a walk ([`lanes`](crate::program::lanes)).
    #[error(
        "variable {variable} puts replica {replica} in another group than the \
         device's first lane: its lanes cannot share a walk"
    )]
    LanesApart {
        /// The variable's index.
        variable: u8,
        /// The lane's replica outside the first lane's group.
        replica: u32,
    },
    /// A request naming a lane the device does not run.
    #[error("no lane {lane}: the device runs {lanes} lanes")]
    NoSuchLane {
        /// The lane named.
        lane: u16,
        /// Lanes the device runs.
        lanes: u16,
    },
}

/// Where the device found one of its own invariants broken ([`ErrorCode::Internal`]).
/// Each is something [`ProgramRequest::Prepare`](super::ProgramRequest::Prepare) set up and
/// the step relies on; none can be reached by a request the host sends, so seeing one is a
/// device bug, named precisely enough to find.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Invariant {
    /// Placing a checked program: its data flow, a variable's held size, or the scratch
    /// layout did not build, though core's check passed.
    Placement,
    /// The step's scratch block is missing or not the size its layout says.
    StepScratch,
    /// A tensor the scratch layout should hold (activation, gradient, anchor sum, mask,
    /// a variable's whole copy) is missing from it.
    ScratchLayout,
    /// A block is not aligned or sized for `f32`s.
    Alignment,
    /// Two tensors of one layer overlap, or one lies outside the scratch block.
    Regions,
    /// A placed variable's block is missing.
    Variable,
    /// Two blocks that must be distinct are not (or one is missing).
    BlockPair,
    /// A variable's sharding (layout, settings, its shard's pieces) did not resolve,
    /// though it did when the program was prepared.
    Sharding,
    /// A piece of a shard lies outside the variable or its whole copy.
    Piece,
    /// The program's last layer is not a loss, or a loss appears before it.
    LossLayer,
    /// A reduction's round number overflows.
    Round,
    /// A stream item is not the size of the tensor it fills.
    ItemSize,
    /// A FIFO's items lie outside its ring.
    FifoRing,
    /// A step ended without filling each anchor FIFO exactly (its ring, from the ring's
    /// start): what the host reads in place after the step would not all be this step's.
    AnchorsWhole,
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Placement => "placing a checked program",
            Self::StepScratch => "the step's scratch block",
            Self::ScratchLayout => "a tensor of the scratch layout",
            Self::Alignment => "f32 alignment",
            Self::Regions => "disjoint tensor regions",
            Self::Variable => "a placed variable's block",
            Self::BlockPair => "two distinct blocks",
            Self::Sharding => "a variable's sharding",
            Self::Piece => "a shard piece's bounds",
            Self::LossLayer => "the loss layer",
            Self::Round => "a reduction round number",
            Self::ItemSize => "a stream item's size",
            Self::FifoRing => "a FIFO's ring bounds",
            Self::AnchorsWhole => "a finished step's anchors filling their FIFOs",
        })
    }
}
