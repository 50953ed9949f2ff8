//! What a prepared program occupies on each of the device's lanes, and freeing it.
//!
//! # Rules
//!
//! - For each lane, with the lane's own ids (core's [`ids`], then
//!   [`lane_id`]): each variable as the replica holds it (its shard,
//!   padding included, when it is sharded across its group; the whole variable
//!   otherwise), the variable's remote-buffer slot of the same size, the momentum's
//!   velocity when the optimizer has one, and a FIFO per stream and per anchor deep enough
//!   for one step (one that cannot be is [`ErrorCode::FifoShape`]); then one scratch block
//!   for the model ([`scratch`](super::scratch)). The blocks a step reads are found once,
//!   here ([`Placed`]).
//! - Anything placed under the program's ids before is freed first; a placement that runs
//!   out of memory is rolled back: a refused program leaves nothing of it behind.
//! - Outside the firmware, the pass is the widest of several micro-batches whose block
//!   grows one micro-batch's by at most a quarter of the memory left free ([`wider`]).
//! - A reset empties every lane's stream and anchor FIFOs and zeroes the scratch; the
//!   variables, their velocities and slots keep their values.

use tessera_core::program::{ids, Program};
use tessera_core::wire::{ErrorCode, Invariant};

use super::scratch::{Cut, Scratch};
use super::{lane_id, one_to_max, Placed, Prepared, Variables};
use crate::arena::{saturate, Arena, Owner};
use crate::broken;
use crate::fifo::Fifos;

/// Places `program` for `cut.lanes` lanes of `replicas` in `scratch`'s layout — outside
/// the firmware, in the widest pass that fits ([`wider`]) — once anything placed under its
/// ids is freed; frees what it placed if it does not fit. The layout placed, and where.
pub(super) fn place_fresh(
    arena: &mut Arena<'_>,
    fifos: &mut Fifos,
    program: &Program,
    replicas: usize,
    cut: Cut<'_>,
    scratch: Scratch,
) -> Result<(Scratch, Placed), ErrorCode> {
    let lanes = cut.lanes;
    release(arena, fifos, program, lanes);
    #[cfg(not(feature = "firmware"))]
    let scratch = wider(arena, fifos, program, replicas, cut, &scratch).unwrap_or(scratch);
    let placed = place(arena, fifos, program, replicas, lanes, &scratch).inspect_err(|_| {
        release(arena, fifos, program, lanes);
    })?;
    Ok((scratch, placed))
}

/// The layout of the widest pass of several micro-batches whose block grows `single`'s
/// (one micro-batch a pass) by at most a quarter of the memory `single`'s placement leaves
/// free ([`scratch`](super::scratch)'s rule), if one does; nothing stays placed. Not in the firmware
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
pub(super) fn release(arena: &mut Arena<'_>, fifos: &mut Fifos, program: &Program, lanes: usize) {
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
    use tessera_core::stream::AnchorReturnType;
    use tessera_core::wire::Limits;

    use super::super::{lane_id, prepare, Prepared};
    use crate::arena::{Arena, Owner};
    use crate::fifo::Fifos;
    #[cfg(not(feature = "firmware"))]
    use {
        super::super::scratch::{Cut, Scratch},
        tessera_core::wire::ErrorCode,
    };

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
                let id = |id| Owner::Variable(lane_id(lane, id));
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
