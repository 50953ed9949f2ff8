//! A program prepared on one replica — or on several consecutive ones that share a walk,
//! the device's *lanes* ([`lanes`](tessera_core::program::lanes)) — and the training step
//! that runs it.
//!
//! [`prepare()`] checks a core [`Program`] and places it in the device's arena, for each lane
//! (with the lane's own ids, [`in_lane`](tessera_core::program::lanes::in_lane)): what the
//! program may be, and what a refused one leaves behind, are its module's rules. What it
//! places, and how it is freed or put back to the start of a step, are [`place`]'s.
//!
//! [`advance`] executes one step, leg by leg, as [`step`] describes, with core's
//! [`grouping`] placing each lane's replica in each variable's group and core's [`shard`]
//! saying which elements its shard holds (worked out once, at [`prepare()`]: [`Held`] for the
//! first lane, and every lane's shard that is one piece; another lane's shard of several
//! pieces is worked out as it is moved: [`holdings`]).
//!
//! # Parts
//!
//! - [`prepare`](mod@prepare): the checks a program passes before anything is placed, and
//!   the order of replacing the program placed before;
//! - [`place`]: the blocks and FIFOs of a program on every lane, found once; freeing them;
//!   resetting a failed step's state; the wider pass (not in the firmware);
//! - [`holdings`]: the pieces of each variable each lane's replica holds;
//! - [`scratch`]: where the model's tensors lie in the step's scratch block;
//! - [`step`], with `held`, `layers`, [`math`] and [`narrow`]: the step itself.
//!
//! [`grouping`]: tessera_core::grouping
//! [`shard`]: tessera_core::shard

mod held;
mod holdings;
mod layers;
pub mod math;
pub mod narrow;
mod place;
mod prepare;
pub mod scratch;
pub mod step;
mod view;

use tessera_core::program::lanes::LANE_IDS;
use tessera_core::program::{Exchange, Program, Reduction, MAX_INTERVALS, MAX_VARIABLES};
use tessera_core::shard::Piece;

use crate::arena::Block;
pub use place::reset;
pub(crate) use place::unplace;
pub use prepare::prepare;
use scratch::Scratch;
pub use step::{advance, Cursor, Leg, StepContext};

/// Lanes a device runs at most: as many as a run has replicas on a host; one in the
/// firmware binary, whose flash has no room for more code.
pub const MAX_LANES: usize = if cfg!(feature = "firmware") {
    1
} else {
    tessera_core::program::MAX_LANES
};

/// `lanes` as 1 to [`MAX_LANES`]: what prepare keeps them to, known to the compiler too, so
/// that a build of one lane (the firmware's) computes no lane arithmetic at all.
pub(crate) const fn one_to_max(lanes: usize) -> usize {
    if MAX_LANES == 1 || lanes == 0 {
        1
    } else if lanes > MAX_LANES {
        MAX_LANES
    } else {
        lanes
    }
}

/// A program placed on this device's lanes.
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    /// The program.
    pub program: Program,
    /// Replicas of the run.
    pub replicas: usize,
    /// The first lane's replica.
    pub replica: usize,
    /// Lanes: replicas `replica ..` run in one walk (see [`Prepared::lanes`]).
    lanes: usize,
    /// Where the model's tensors lie in the scratch block.
    pub scratch: Scratch,
    /// The reduction rounds of one batch, in [`Program::reductions`] order.
    pub rounds: Rounds,
    /// How they travel, for this device's frame.
    pub exchanges: Exchanges,
    /// What the first lane's replica holds of each variable, in variable order (see
    /// [`Held`]). The other lanes hold the same of every variable held whole.
    pub held: Holdings,
    /// Each lane's shard of each sharded variable when it is one piece (a balanced or
    /// padded-tail layout's always are) or none (an empty piece stands for it), lane by
    /// lane; a shard of several pieces is worked out as it is moved. (Every lane's
    /// [`Held`] made a device of many lanes too large to move on a thread's stack.)
    pub shards: Shards,
    /// Where the step's blocks lie (see [`Placed`]).
    pub placed: Placed,
}

impl Prepared {
    /// Lanes the program runs: replicas `replica ..` in one walk, 1 to [`MAX_LANES`] as
    /// prepare took them (said again here so that a build of one lane drops its loops).
    pub fn lanes(&self) -> usize {
        one_to_max(self.lanes)
    }
}

/// The blocks a step reads at every batch, found once when the program is placed: a block
/// never moves while it is allocated, and these are freed only with the program. A step
/// on many replicas of a small model looked each one up at every leg and batch (a search
/// of the arena's table, a few percent of the step).
#[derive(Debug, Clone, PartialEq)]
pub struct Placed {
    /// The step's scratch block.
    pub scratch: Block,
    /// Each lane's [`Variables`], lane by lane.
    pub per_lane: heapless::Vec<Variables, MAX_LANES>,
}

/// One lane's blocks of each variable, and of its velocity when the optimizer has one, in
/// variable order.
pub type Variables = heapless::Vec<(Block, Option<Block>), MAX_VARIABLES>;

/// Lane `lane`'s copy of one-replica id `id`, as core's
/// [`in_lane`](tessera_core::program::lanes::in_lane) numbers it, for the lanes and ids a
/// prepared program has: a lane below [`MAX_LANES`] (prepare takes no more) and an id of
/// core's [`ids`](tessera_core::program::ids) (all below [`LANE_IDS`], core's rule), where `in_lane` never refuses.
/// Worked out without its refusal: the step asks at every pop and push, and the firmware's
/// flash has no room for the error paths.
pub(crate) const fn lane_id(lane: usize, id: u16) -> u16 {
    debug_assert!(
        lane < MAX_LANES && id < LANE_IDS,
        "a lane or an id past the lanes' space"
    );
    let lane = if lane < MAX_LANES {
        lane
    } else {
        MAX_LANES - 1
    };
    lane as u16 * LANE_IDS + id % LANE_IDS
}

/// The pieces of one variable a replica holds: its shard's (core's [`ShardLayout`] rule
/// for its group), or the whole variable at offset 0 when it is not sharded. Worked out
/// once at [`prepare()`]: a step walks them at every batch, twice per variable, and the
/// grouping and layout behind them do not change while the program stays placed.
///
/// [`ShardLayout`]: tessera_core::shard::ShardLayout
pub type Held = heapless::Vec<Piece, MAX_INTERVALS>;

/// Every variable's [`Held`] pieces.
pub type Holdings = heapless::Vec<Held, MAX_VARIABLES>;

/// Each lane's shard of each variable when it is one piece, lane by lane (see
/// [`Prepared::shards`]).
pub type Shards = heapless::Vec<[Option<Piece>; MAX_VARIABLES], MAX_LANES>;

/// A batch's rounds: each variable gathered and averaged at most once.
pub type Rounds = heapless::Vec<Reduction, { 2 * MAX_VARIABLES }>;

/// A batch's exchanges: at most one per round.
pub type Exchanges = heapless::Vec<Exchange, { 2 * MAX_VARIABLES }>;
