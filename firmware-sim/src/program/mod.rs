//! A program prepared on one replica — or on several consecutive ones that share a walk,
//! the device's *lanes* ([`lanes`](tessera_core::program::lanes)) — and the training step
//! that runs it.
//!
//! [`prepare`] places a core [`Program`] in the device's arena, for each lane (with the
//! lane's own ids, [`in_lane`](tessera_core::program::lanes::in_lane)): each variable as the
//! replica holds it (its shard, padding included, when it is sharded across its group; the
//! whole variable otherwise), the variable's remote-buffer slot of the same size, the
//! momentum's velocity when the optimizer has one, a FIFO per stream and per anchor deep
//! enough for one step, and one scratch block for the model ([`scratch`]). Ids come from
//! core's [`ids`]. The program is checked with core's own rules first (a broken one is
//! refused with [`ErrorCode::Program`], naming the rule and the tensor), the device's lanes
//! must be replicas of the run that share every variable's group
//! ([`ErrorCode::LanesApart`] otherwise), every exchange of reductions it will make must
//! fit one frame, every FIFO must hold its step's items, and a placement that runs out of
//! memory is rolled back: a refused program leaves nothing of it behind.
//!
//! [`advance`] executes one step, leg by leg, as [`step`] describes, with core's
//! [`grouping`] placing each lane's replica in each variable's group and core's [`shard`]
//! saying which elements its shard holds (worked out once, at [`prepare`]: [`Held`] for the
//! first lane, and every lane's shard that is one piece; another lane's shard of several
//! pieces is worked out as it is moved).
//!
//! [`grouping`]: tessera_core::grouping
//! [`shard`]: tessera_core::shard

mod held;
mod layers;
pub mod math;
pub mod narrow;
pub mod scratch;
pub mod step;

use tessera_core::program::lanes::{lane_bytes, LANE_IDS};
use tessera_core::program::{
    elements, ids, AnchorTensor, Exchange, LaneError, Program, Reduction, Sharding, MAX_INTERVALS,
    MAX_VARIABLES,
};
use tessera_core::shard::Piece;
use tessera_core::wire::{ErrorCode, Invariant, Limits};

use crate::arena::{saturate, Arena, Block, Owner};
use crate::broken;
use crate::fifo::Fifos;
use scratch::{Cut, Scratch};
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
    /// lane; a shard of several pieces is worked out as it is moved. (Every lane's [`Held`] made a device of many lanes too large to
    /// move on a thread's stack.)
    pub shards: heapless::Vec<[Option<Piece>; MAX_VARIABLES], MAX_LANES>,
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
/// core's [`ids`] (all below [`LANE_IDS`], core's rule), where `in_lane` never refuses.
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
/// once at [`prepare`]: a step walks them at every batch, twice per variable, and the
/// grouping and layout behind them do not change while the program stays placed.
///
/// [`ShardLayout`]: tessera_core::shard::ShardLayout
pub type Held = heapless::Vec<Piece, MAX_INTERVALS>;

/// Every variable's [`Held`] pieces.
pub type Holdings = heapless::Vec<Held, MAX_VARIABLES>;

/// A batch's rounds: each variable gathered and averaged at most once.
pub type Rounds = heapless::Vec<Reduction, { 2 * MAX_VARIABLES }>;

/// A batch's exchanges: at most one per round.
pub type Exchanges = heapless::Vec<Exchange, { 2 * MAX_VARIABLES }>;

/// Places `program` for the lanes `limits` names (replicas `limits.replica ..`, one per
/// lane) of `replicas` (see the module documentation). `previous`, the program placed
/// before, stays placed when the checks refuse the new one, and is freed (and taken) once
/// they pass.
pub fn prepare(
    arena: &mut Arena<'_>,
    fifos: &mut Fifos,
    program: Program,
    replicas: u32,
    limits: &Limits,
    previous: &mut Option<Prepared>,
) -> Result<Prepared, ErrorCode> {
    let (replicas, replica) = (replicas as usize, limits.replica as usize);
    // The hello took at most MAX_LANES, and at least one.
    let lanes = one_to_max(usize::from(limits.lanes));
    program
        .check(replicas)
        .map_err(|e| ErrorCode::Program(e.fault(&program)))?;
    if replica.saturating_add(lanes) > replicas {
        return Err(ErrorCode::ReplicaOutOfRange {
            replica: saturate(replica.saturating_add(lanes) - 1),
            replicas: saturate(replicas),
        });
    }
    if lanes > 1 {
        if let Err(e) = program.check_lanes(replicas, replica, lanes) {
            let LaneError::Apart {
                variable, replica, ..
            } = e
            else {
                return Err(broken(Invariant::Placement));
            };
            return Err(ErrorCode::LanesApart {
                variable: variable as u8, // At most MAX_VARIABLES.
                replica: saturate(replica),
            });
        }
    }
    // Every exchange of reductions travels in one frame, every lane's side by side.
    let max = limits.max_chunk();
    let cut = program.exchanges(replicas, lane_bytes(max, lanes));
    let rounds = Rounds::from_slice(cut.rounds()).map_err(|_| broken(Invariant::Placement))?;
    let exchanges: Exchanges = cut.take(2 * MAX_VARIABLES).collect();
    if let Some(e) = exchanges
        .iter()
        .find(|e| e.bytes.saturating_mul(lanes) > max)
    {
        return Err(ErrorCode::ReductionTooLarge {
            bytes: saturate(e.bytes.saturating_mul(lanes)),
            max: saturate(max),
        });
    }
    let cut = Cut {
        rounds: &rounds,
        exchanges: &exchanges,
        lanes,
    };
    let scratch = Scratch::new(&program, replicas, cut).ok_or(broken(Invariant::Placement))?;
    let held = holdings(&program, replicas, replica)?;
    let mut shards = heapless::Vec::new();
    // The firmware runs one lane, whose pieces `held` has.
    if MAX_LANES > 1 {
        for lane in 0..lanes {
            let mut pieces = [None; MAX_VARIABLES];
            for (i, one) in pieces.iter_mut().enumerate().take(program.variables.len()) {
                let mut count = 0;
                shard_pieces(&program, (replicas, replica + lane), i, |piece| {
                    *one = Some(piece);
                    count += 1;
                })?;
                match count {
                    1 => {}
                    // A shard of only padding (more replicas than elements) moves nothing:
                    // an empty piece says so, where working it out again at every batch
                    // would cost a layout.
                    0 => {
                        *one = Some(Piece {
                            src_begin: 0,
                            src_end: 0,
                            dst_offset: 0,
                        })
                    }
                    _ => *one = None,
                }
            }
            shards
                .push(pieces)
                .map_err(|_| broken(Invariant::Placement))?;
        }
    }
    // Every anchored value leaves in one reply.
    let output = saturate(scratch.output_elements().saturating_mul(4));
    if program
        .anchors
        .iter()
        .any(|a| a.tensor == AnchorTensor::Output)
        && output > saturate(max)
    {
        return Err(ErrorCode::ReplyTooLarge);
    }
    if let Some(old) = previous.take() {
        release(arena, fifos, &old.program, old.lanes());
    }
    release(arena, fifos, &program, lanes);
    #[cfg(not(feature = "firmware"))]
    let scratch = wider(arena, fifos, &program, replicas, cut, &scratch).unwrap_or(scratch);
    let placed = place(arena, fifos, &program, replicas, lanes, &scratch).inspect_err(|_| {
        release(arena, fifos, &program, lanes);
    })?;
    Ok(Prepared {
        program,
        replicas,
        replica,
        lanes,
        scratch,
        rounds,
        exchanges,
        held,
        shards,
        placed,
    })
}

/// Each variable's [`Held`] pieces on replica `replica` of `replicas` (the program is
/// checked: a failure here is a broken invariant, not a bad program).
fn holdings(program: &Program, replicas: usize, replica: usize) -> Result<Holdings, ErrorCode> {
    let mut all = Holdings::new();
    let fault = broken(Invariant::Sharding);
    for i in 0..program.variables.len() {
        let mut held = Held::new();
        let mut fits = true;
        shard_pieces(program, (replicas, replica), i, |piece| {
            fits &= held.push(piece).is_ok();
        })?;
        // A shard's pieces are its share of the layout's intervals: at most as many.
        if !fits {
            return Err(fault);
        }
        all.push(held).map_err(|_| fault)?;
    }
    Ok(all)
}

/// `each` on every piece of variable `index` replica `replica` of `replicas` holds: its
/// shard's (core's layout for its group), or the whole variable at offset 0 when it is not
/// sharded.
pub(super) fn shard_pieces(
    program: &Program,
    (replicas, replica): (usize, usize),
    index: usize,
    mut each: impl FnMut(Piece),
) -> Result<(), ErrorCode> {
    let fault = broken(Invariant::Sharding);
    let v = program.variables.get(index).ok_or(fault)?;
    if v.sharding == Sharding::None {
        let n = elements(&v.shape).ok_or(fault)?;
        each(Piece {
            src_begin: 0,
            src_end: n,
            dst_offset: 0,
        });
        return Ok(());
    }
    let layout = program
        .shard_layout(index, replicas)
        .ok()
        .flatten()
        .ok_or(fault)?;
    let settings = program.settings(index, replicas).map_err(|_| fault)?;
    let shard = settings
        .grouping()
        .index_in_group(replica)
        .map_err(|_| fault)?;
    layout.pieces(shard).map_err(|_| fault)?.for_each(each);
    Ok(())
}

/// The layout of the widest pass of several micro-batches whose block grows `single`'s
/// (one micro-batch a pass) by at most a quarter of the memory `single`'s placement leaves
/// free ([`scratch`]'s rule), if one does; nothing stays placed. Not in the firmware
/// binary: its 64 KiB flash budget has no room for the search, so it computes one
/// micro-batch a pass (the same numbers, more slowly).
#[cfg(not(feature = "firmware"))]
fn wider(
    arena: &mut Arena<'_>,
    fifos: &mut Fifos,
    program: &Program,
    replicas: usize,
    cut: Cut<'_>,
    single: &Scratch,
) -> Option<Scratch> {
    let lanes = cut.lanes;
    let placed = place(arena, fifos, program, replicas, lanes, single).is_ok();
    let free = arena.free();
    release(arena, fifos, program, lanes);
    if !placed {
        return None;
    }
    Scratch::passes(program)
        .take_while(|&chunk| chunk > 1)
        .filter_map(|chunk| Scratch::passing(program, replicas, chunk, cut))
        .filter(|wide| wide.bytes().saturating_sub(single.bytes()) <= free / 4)
        .find(|wide| {
            // Free bytes may lie in pieces: the block must fit where placing puts it.
            let fits = place(arena, fifos, program, replicas, lanes, wide).is_ok();
            release(arena, fifos, program, lanes);
            fits
        })
}

/// Allocates everything the module documentation lists, for each of `lanes` lanes.
fn place(
    arena: &mut Arena<'_>,
    fifos: &mut Fifos,
    program: &Program,
    replicas: usize,
    lanes: usize,
    scratch: &Scratch,
) -> Result<Placed, ErrorCode> {
    let flow = program
        .data_flow()
        .map_err(|_| broken(Invariant::Placement))?;
    let momentum = program.optimizer.has_velocity();
    let mut placed = heapless::Vec::new();
    for lane in 0..lanes {
        let mut variables = Variables::new();
        for i in 0..program.variables.len() {
            let held = program
                .held_elements(i, replicas)
                .ok()
                .and_then(|n| n.checked_mul(4))
                .ok_or(broken(Invariant::Placement))?;
            let index = i as u8; // At most MAX_VARIABLES variables.
            let variable = Owner::Variable(lane_id(lane, ids::variable(index)));
            let variable = arena.alloc(variable, held)?;
            arena.alloc(Owner::Slot(lane_id(lane, ids::slot(index))), held)?;
            let velocity = if momentum {
                let velocity = Owner::Variable(lane_id(lane, ids::velocity(index)));
                Some(arena.alloc(velocity, held)?)
            } else {
                None
            };
            variables
                .push((variable, velocity))
                .map_err(|_| broken(Invariant::Placement))?;
        }
        placed
            .push(variables)
            .map_err(|_| broken(Invariant::Placement))?;
    }
    // A FIFO holds one step's items; a step of more than u16::MAX of them, or an item of
    // more than u32::MAX bytes, cannot be placed.
    let shape = |item: Option<usize>, items: usize| {
        let item_bytes = item.and_then(|n| u32::try_from(n).ok());
        match (item_bytes, u16::try_from(items)) {
            (Some(item_bytes), Ok(depth)) => Ok((item_bytes, depth)),
            _ => Err(ErrorCode::FifoShape {
                item_bytes: item_bytes.unwrap_or(u32::MAX),
                depth: saturate(items),
            }),
        }
    };
    for lane in 0..lanes {
        for (i, s) in program.streams.iter().enumerate() {
            // One item: a micro-batch of samples.
            let item = program
                .item_elements(i)
                .and_then(|n| n.checked_mul(s.dtype.size()));
            let (item, depth) = shape(item, flow.inputs_per_replica())?;
            let fifo = lane_id(lane, ids::stream_fifo(i as u8));
            fifos.create(arena, fifo, item, depth)?;
        }
        for (j, a) in program.anchors.iter().enumerate() {
            let width = program.anchor_width(a.tensor);
            let items = flow.outputs_per_replica(Some(a.return_type));
            let (item, depth) = shape(width.and_then(|w| w.checked_mul(4)), items)?;
            let fifo = lane_id(lane, ids::anchor_fifo(j as u8));
            fifos.create(arena, fifo, item, depth)?;
        }
    }
    let scratch = arena.alloc(Owner::StepScratch, scratch.bytes())?;
    Ok(Placed {
        scratch,
        per_lane: placed,
    })
}

/// Puts `prepared`'s step state back to where a step starts (after a failed one): every
/// lane's stream and anchor FIFOs emptied and the step's scratch zeroed, so no sample,
/// anchored value or partial `Sum` anchor of the failed step reaches the next. Variables,
/// their velocity and slots keep their values: which of them a failed step changed is for
/// the host to settle.
pub fn reset(
    arena: &mut Arena<'_>,
    fifos: &mut Fifos,
    prepared: &Prepared,
) -> Result<(), ErrorCode> {
    let program = &prepared.program;
    for lane in 0..prepared.lanes() {
        for i in 0..program.streams.len() as u8 {
            fifos.empty(lane_id(lane, ids::stream_fifo(i)))?;
        }
        for j in 0..program.anchors.len() as u8 {
            fifos.empty(lane_id(lane, ids::anchor_fifo(j)))?;
        }
    }
    arena.bytes_mut(prepared.placed.scratch).fill(0);
    Ok(())
}

/// Frees everything `prepared` placed (a hello gave the device other replicas).
pub(crate) fn unplace(arena: &mut Arena<'_>, fifos: &mut Fifos, prepared: &Prepared) {
    release(arena, fifos, &prepared.program, prepared.lanes());
}

/// Frees every block and FIFO `program` may have placed on `lanes` lanes.
fn release(arena: &mut Arena<'_>, fifos: &mut Fifos, program: &Program, lanes: usize) {
    for lane in 0..one_to_max(lanes) {
        let id = |id| lane_id(lane, id);
        for i in 0..program.variables.len() as u8 {
            arena.free_block(Owner::Variable(id(ids::variable(i))));
            arena.free_block(Owner::Variable(id(ids::velocity(i))));
            arena.free_block(Owner::Slot(id(ids::slot(i))));
        }
        for i in 0..program.streams.len() as u8 {
            fifos.remove(arena, id(ids::stream_fifo(i)));
        }
        for j in 0..program.anchors.len() as u8 {
            fifos.remove(arena, id(ids::anchor_fifo(j)));
        }
    }
    arena.free_block(Owner::StepScratch);
}

#[cfg(test)]
mod tests {
    use tessera_core::dtype::DataType;
    use tessera_core::grouping::{CommGroup, GroupingSpec, RetrievalMode};
    use tessera_core::program::{ids, AnchorTensor, Layer, Optimizer, Program, Sharding};
    use tessera_core::shard::Piece;
    use tessera_core::stream::AnchorReturnType;
    use tessera_core::wire::Limits;

    use super::{holdings, prepare, Prepared};
    use crate::arena::{Arena, Owner};
    use crate::fifo::Fifos;
    #[cfg(not(feature = "firmware"))]
    use {
        super::scratch::{Cut, Scratch},
        tessera_core::wire::ErrorCode,
    };

    fn piece(src: core::ops::Range<usize>) -> Piece {
        Piece {
            src_begin: src.start,
            src_end: src.end,
            dst_offset: 0,
        }
    }

    /// Catches held pieces worked out for the wrong shard: under an orthogonal grouping of
    /// 4 replicas into groups {0, 2} and {1, 3}, replica 2 holds its group's second shard
    /// (not shard 2, nor replica 0's), and an unsharded variable is held whole everywhere.
    #[test]
    fn each_replica_holds_its_shard_within_its_group() {
        let mut p = Program::new(1, 1, Optimizer::Sgd { learning_rate: 0.1 });
        let orthogonal = GroupingSpec::Comm(CommGroup::Orthogonal(2));
        let one = RetrievalMode::OnePerGroup;
        p.add_variable("w", &[5], orthogonal, one, Sharding::Balanced)
            .unwrap();
        p.add_variable("b", &[3], orthogonal, one, Sharding::None)
            .unwrap();
        // Five elements over two shards of three: [0, 2) and [2, 5) (core's balanced rule).
        let first = [piece(0..2)];
        let second = [piece(2..5)];
        for (replica, w) in [(0, &first), (1, &first), (2, &second), (3, &second)] {
            let held = holdings(&p, 4, replica).unwrap();
            assert_eq!(held.len(), 2);
            assert_eq!(held[0].as_slice(), w.as_slice(), "replica {replica}'s w");
            assert_eq!(held[1].as_slice(), [piece(0..3)], "replica {replica}'s b");
        }
    }

    /// A one-layer classifier of `inputs` features, trained with `optimizer`.
    fn classifier(inputs: u32, optimizer: Optimizer) -> Program {
        let mut p = Program::new(1, 2, optimizer);
        let all = GroupingSpec::Comm(CommGroup::All);
        let one = RetrievalMode::OnePerGroup;
        let w = p
            .add_variable("w", &[3, inputs], all, one, Sharding::Balanced)
            .unwrap();
        p.input = p.add_stream("x", DataType::F32, &[inputs], false).unwrap();
        let labels = p.add_stream("label", DataType::I32, &[1], false).unwrap();
        p.add_layer(Layer::Linear { weight: w }).unwrap();
        p.add_layer(Layer::SoftmaxCrossEntropy { labels }).unwrap();
        p.add_anchor(AnchorTensor::Loss, AnchorReturnType::All)
            .unwrap();
        p
    }

    /// The blocks `prepared` says its step reads are the ones the arena holds for them, on
    /// every lane.
    fn placed_as_held(arena: &Arena<'_>, prepared: &Prepared) {
        let placed = &prepared.placed;
        assert_eq!(arena.find(Owner::StepScratch), Some(placed.scratch));
        assert_eq!(placed.per_lane.len(), prepared.lanes());
        for (lane, variables) in placed.per_lane.iter().enumerate() {
            assert_eq!(variables.len(), prepared.program.variables.len());
            for (i, &(variable, velocity)) in variables.iter().enumerate() {
                let id = |id| Owner::Variable(super::lane_id(lane, id));
                let i = i as u8;
                assert_eq!(arena.find(id(ids::variable(i))), Some(variable));
                assert_eq!(velocity, arena.find(id(ids::velocity(i))));
            }
        }
    }

    /// Catches a step that reads blocks found at placement after they moved or went: the
    /// blocks a prepared program keeps are the arena's for every lane's variables and
    /// velocities and the scratch, and a program prepared in its place (other sizes, a velocity now) keeps
    /// the new ones, the old ones freed.
    #[test]
    fn the_placed_blocks_are_the_arenas() {
        let mut memory = [0u8; 1 << 14];
        let mut arena = Arena::new(&mut memory);
        let mut fifos = Fifos::default();
        let limits = Limits {
            memory: 1 << 14,
            max_frame: 1024,
            replica: 1,
            lanes: 2,
            window: 4,
        };
        let mut previous = None;
        let sgd = Optimizer::Sgd { learning_rate: 0.1 };
        let first = prepare(
            &mut arena,
            &mut fifos,
            classifier(2, sgd),
            4,
            &limits,
            &mut previous,
        )
        .unwrap();
        placed_as_held(&arena, &first);
        assert_eq!(
            first.placed.per_lane[1][0].1, None,
            "no velocity without momentum"
        );
        let momentum = Optimizer::SgdMomentum {
            learning_rate: 0.1,
            momentum: 0.9,
        };
        let mut previous = Some(first.clone());
        let second = prepare(
            &mut arena,
            &mut fifos,
            classifier(6, momentum),
            4,
            &limits,
            &mut previous,
        )
        .unwrap();
        placed_as_held(&arena, &second);
        assert!(
            second.placed.per_lane[1][0].1.is_some(),
            "a velocity with momentum"
        );
        assert_ne!(
            second.placed.per_lane[1][0].0,
            first.placed.per_lane[1][0].0
        );
    }

    /// `x[3] → w1[6, 3] → +b1 → ReLU → dropout → w2[4, 6] → +b2 → softmax cross-entropy`,
    /// 8 micro-batches of 2 samples a batch, its loss and output anchored.
    #[cfg(not(feature = "firmware"))]
    fn with_dropout() -> Program {
        let momentum = Optimizer::SgdMomentum {
            learning_rate: 0.3,
            momentum: 0.9,
        };
        let mut p = Program::new(2, 8, momentum);
        p.micro_batch_size = 2;
        let none = GroupingSpec::Comm(CommGroup::None);
        let one = RetrievalMode::OnePerGroup;
        let mut var = |name, shape: &[u32]| {
            p.add_variable(name, shape, none, one, Sharding::None)
                .unwrap()
        };
        let (w1, b1, w2, b2) = (
            var("w1", &[6, 3]),
            var("b1", &[6]),
            var("w2", &[4, 6]),
            var("b2", &[4]),
        );
        p.input = p.add_stream("x", DataType::F32, &[3], false).unwrap();
        let labels = p.add_stream("label", DataType::I32, &[1], false).unwrap();
        for layer in [
            Layer::Linear { weight: w1 },
            Layer::Bias { bias: b1 },
            Layer::Relu,
            Layer::Dropout { rate: 0.25 },
            Layer::Linear { weight: w2 },
            Layer::Bias { bias: b2 },
            Layer::SoftmaxCrossEntropy { labels },
        ] {
            p.add_layer(layer).unwrap();
        }
        p.add_anchor(AnchorTensor::Loss, AnchorReturnType::All)
            .unwrap();
        p.add_anchor(AnchorTensor::Output, AnchorReturnType::EveryN(2))
            .unwrap();
        p
    }

    /// The largest arena [`pass_in`] tries.
    #[cfg(not(feature = "firmware"))]
    const MEMORY: usize = 1 << 16;

    /// The micro-batches a pass of `program`, prepared alone on one replica in an arena of
    /// `memory` bytes, computes; `None` when it does not fit there.
    #[cfg(not(feature = "firmware"))]
    fn pass_in(program: &Program, memory: usize) -> Option<usize> {
        #[repr(align(8))]
        struct Aligned([u8; MEMORY]);
        let mut buffer = Aligned([0; MEMORY]);
        let mut bytes = &mut buffer.0[..memory];
        let mut arena = Arena::new(&mut bytes);
        let limits = Limits {
            memory: memory as u32,
            max_frame: 1 << 16,
            replica: 0,
            lanes: 1,
            window: 1,
        };
        let prepared = prepare(
            &mut arena,
            &mut Fifos::default(),
            program.clone(),
            1,
            &limits,
            &mut None,
        );
        match prepared {
            Ok(prepared) => Some(prepared.scratch.chunk()),
            Err(ErrorCode::OutOfMemory { .. }) => None,
            Err(code) => panic!("{code}"),
        }
    }

    /// Catches a wide pass that takes memory later requests need: its block may grow the
    /// single pass's by at most a quarter of what the program leaves free.
    #[cfg(not(feature = "firmware"))]
    #[test]
    fn a_wide_pass_leaves_three_quarters_of_the_free_memory() {
        let p = with_dropout();
        // One replica: no rounds to cut.
        let cut = Cut {
            rounds: &[],
            exchanges: &[],
            lanes: 1,
        };
        let wide = Scratch::passing(&p, 1, 8, cut).unwrap().bytes();
        let extra = wide - Scratch::new(&p, 1, cut).unwrap().bytes();
        // The smallest arena the program fits (within 16 bytes).
        let (mut fits, mut fails) = (MEMORY, 0);
        while fits - fails > 16 {
            let mid = (fits + fails) / 2;
            match pass_in(&p, mid) {
                Some(_) => fits = mid,
                None => fails = mid,
            }
        }
        assert_eq!(pass_in(&p, fits), Some(1), "no room to spare: one a pass");
        // Room for the pass of 8, but not for four times its extra bytes: a narrower one.
        let pass = pass_in(&p, fits + 2 * extra).unwrap();
        assert!((2..8).contains(&pass), "a pass of {pass}");
        assert!(fits + 5 * extra <= MEMORY);
        assert_eq!(pass_in(&p, fits + 5 * extra), Some(8));
    }
}
