//! Copies and allreduces that run in place in the workers' memory (device threads and child
//! processes, whose memory the host maps), held to the same results as the copying path
//! (which QEMU workers take: ignored by default, `tests/ci.sh` runs them). Expected values
//! are computed on the host.

use crate::common;

use std::path::PathBuf;

use tessera_core::dtype::DataType;
use tessera_host::runtime::Placement;
use tessera_host::session::collective::{ReduceOp, Scope};
use tessera_host::session::{CallArg, HostArray, HostValue, Register, Session, SessionError};

/// Elements per worker: two blocks of the combination kernel and a few more, so that the
/// blocks split between host threads and a short last block are all exercised.
const ELEMENTS: usize = 2 * 4096 + 3;

fn placements() -> [Placement; 2] {
    [
        Placement::Thread,
        Placement::Process(PathBuf::from(env!("CARGO_BIN_EXE_tessera"))),
    ]
}

fn open(placement: &Placement, workers: usize, groups: usize) -> Session {
    Session::new(placement, workers, groups, 4 << 20)
        .unwrap_or_else(|e| panic!("{workers} workers on {placement:?}: {e}"))
}

/// Worker `w`'s value at element `i`: distinct per worker and element, exact in f32.
fn value(w: usize, i: usize) -> f64 {
    ((i % 97) as f64 - 40.0) * 0.25 + w as f64 * 3.5
}

fn array(session: &Session, reg: &Register, worker: usize) -> HostArray {
    match session.debug_get(reg, worker) {
        Ok(HostValue::Array(a)) => a,
        other => panic!("register {} on worker {worker}: {other:?}", reg.id()),
    }
}

/// Sets `reg` on every worker to that worker's values, as `dtype`.
fn fill(session: &Session, reg: &Register, dtype: DataType) {
    for w in 0..session.num_workers() {
        let values: Vec<f64> = (0..ELEMENTS).map(|i| value(w, i)).collect();
        let host = match dtype {
            DataType::F32 => {
                let v: Vec<f32> = values.iter().map(|&x| x as f32).collect();
                HostArray::from_f32(&[ELEMENTS as u32], &v)
            }
            _ => HostArray::from_f64(&[ELEMENTS as u32], &values),
        }
        .unwrap();
        session.debug_set(reg, w, &HostValue::Array(host)).unwrap();
    }
}

fn as_f64(array: &HostArray) -> Vec<f64> {
    match array.dtype() {
        DataType::F32 => array.to_f32().unwrap().into_iter().map(f64::from).collect(),
        _ => array.to_f64().unwrap(),
    }
}

/// The rule: members' values combined in f64 in rank order, rounded once to the type.
fn expected(op: ReduceOp, members: std::ops::Range<usize>, i: usize, dtype: DataType) -> f64 {
    let values: Vec<f64> = members.clone().map(|w| value(w, i)).collect();
    let first = values[0];
    let combined = match op {
        ReduceOp::Sum => values.iter().sum(),
        ReduceOp::Avg => values.iter().sum::<f64>() / values.len() as f64,
        ReduceOp::Prod => values.iter().product(),
        ReduceOp::Min => values.iter().copied().fold(first, f64::min),
        ReduceOp::Max => values.iter().copied().fold(first, f64::max),
    };
    match dtype {
        DataType::F32 => f64::from(combined as f32),
        _ => combined,
    }
}

fn check_allreduce(placement: &Placement, in_place_src: bool) {
    let session = open(placement, 4, 2);
    for dtype in [DataType::F32, DataType::F64] {
        for op in [
            ReduceOp::Sum,
            ReduceOp::Avg,
            ReduceOp::Prod,
            ReduceOp::Min,
            ReduceOp::Max,
        ] {
            for scope in [Scope::Global, Scope::InGroup] {
                let src = session.empty(dtype, &[ELEMENTS as u32]).unwrap();
                fill(&session, &src, dtype);
                let dst = if in_place_src {
                    None
                } else {
                    Some(session.empty(dtype, &[ELEMENTS as u32]).unwrap())
                };
                let out = dst.as_ref().unwrap_or(&src);
                session.allreduce(&src, out, op, scope).unwrap();
                for w in 0..4 {
                    let members = match scope {
                        Scope::Global => 0..4,
                        Scope::InGroup => (w / 2) * 2..(w / 2) * 2 + 2,
                    };
                    let got = as_f64(&array(&session, out, w));
                    assert_eq!(got.len(), ELEMENTS);
                    for (i, g) in got.iter().enumerate() {
                        let want = expected(op, members.clone(), i, dtype);
                        assert_eq!(
                            *g, want,
                            "{placement:?} {dtype} {op:?} {scope:?} worker {w} element {i} \
                             (source is destination: {in_place_src})"
                        );
                    }
                }
            }
        }
    }
}

/// Every operation, both float types, global and in groups, into another register: the
/// in-place path gives the copying path's results element for element (a block offset bug
/// would show a wrong value past element 4096, a host-thread split bug past the middle).
#[test]
fn allreduce_in_place_matches_the_rule() {
    for placement in placements() {
        check_allreduce(&placement, false);
    }
}

/// The source as destination: every member's block must be read before any is written
/// (writing worker 0's result first would feed it into worker 1's sum).
#[test]
fn allreduce_into_its_own_source() {
    for placement in placements() {
        check_allreduce(&placement, true);
    }
}

/// A destination of the wrong size on the last worker is refused before anything is
/// written: worker 0's destination keeps its old values.
#[test]
fn a_refused_allreduce_writes_nothing() {
    for placement in placements() {
        let session = open(&placement, 4, 1);
        let src = session.empty(DataType::F32, &[8]).unwrap();
        let dst = session.empty(DataType::F32, &[8]).unwrap();
        let old = HostArray::from_f32(&[8], &[9.0; 8]).unwrap();
        session
            .debug_set(&dst, 0, &HostValue::Array(old.clone()))
            .unwrap();
        let short = HostArray::from_f32(&[4], &[0.0; 4]).unwrap();
        session
            .debug_set(&dst, 3, &HostValue::Array(short))
            .unwrap();
        let outcome = session.allreduce(&src, &dst, ReduceOp::Sum, Scope::Global);
        assert!(
            matches!(
                outcome,
                Err(SessionError::Elements {
                    worker: 3,
                    expected: 4,
                    actual: 8,
                    ..
                })
            ),
            "{placement:?}: {outcome:?}"
        );
        assert_eq!(array(&session, &dst, 0), old, "{placement:?}");
    }
}

/// Destination-passing copies both ways; what the host wrote in place is what the worker
/// computes on (a write that missed the register's bytes would leave add_one zeros).
#[test]
fn copies_into_existing_arrays_round_trip() {
    for placement in placements() {
        let session = open(&placement, 4, 1);
        let add_one = session.get_function("add_one").unwrap();
        let values: Vec<f32> = (0..1000).map(|i| i as f32 * 0.5).collect();
        let host = HostArray::from_f32(&[10, 100], &values).unwrap();
        let reg = session.empty(DataType::F32, &[10, 100]).unwrap();
        session.copy_to_worker0_into(&host, &reg).unwrap();
        let plus = session.call(&add_one, &[CallArg::Register(&reg)]).unwrap();
        let mut back = HostArray::from_f32(&[1000], &[0.0; 1000]).unwrap();
        session.copy_from_worker0_into(&plus, &mut back).unwrap();
        let want: Vec<f32> = values.iter().map(|v| v + 1.0).collect();
        assert_eq!(back.to_f32().unwrap(), want, "{placement:?}");
        assert_eq!(back.shape(), [10, 100], "the host array takes the shape");

        // Into a register of another shape: it is replaced, not overrun.
        let small = session.empty(DataType::F32, &[3]).unwrap();
        session.copy_to_worker0_into(&host, &small).unwrap();
        assert_eq!(array(&session, &small, 0), host, "{placement:?}");
    }
}

/// Copying into a host array shares nothing with its clones: a clone made before keeps
/// its bytes (the copy goes into a buffer of the destination's own).
#[test]
fn copies_from_worker0_leave_clones_alone() {
    for placement in placements() {
        let session = open(&placement, 2, 1);
        let reg = session
            .copy_to_worker0(&HostArray::from_i64(&[3], &[7, 8, 9]).unwrap())
            .unwrap();
        let mut into = HostArray::from_i64(&[3], &[0, 0, 0]).unwrap();
        let clone = into.clone();
        session.copy_from_worker0_into(&reg, &mut into).unwrap();
        assert_eq!(into.to_i64(), Some(vec![7, 8, 9]), "{placement:?}");
        assert_eq!(clone.to_i64(), Some(vec![0, 0, 0]), "{placement:?}");
    }
}

/// A host array of another type or element count is refused, naming the register and both
/// sides, and left as it was.
#[test]
fn copies_into_a_mismatched_host_array_are_refused() {
    for placement in placements() {
        let session = open(&placement, 2, 1);
        let reg = session
            .copy_to_worker0(&HostArray::from_f32(&[4], &[1.0; 4]).unwrap())
            .unwrap();
        for mut into in [
            HostArray::from_f64(&[4], &[0.0; 4]).unwrap(),
            HostArray::from_f32(&[5], &[0.0; 5]).unwrap(),
        ] {
            let before = into.clone();
            let outcome = session.copy_from_worker0_into(&reg, &mut into);
            let Err(e @ SessionError::HostMismatch { register, held, .. }) = outcome else {
                panic!("{placement:?}: {outcome:?}");
            };
            assert_eq!((register, held), (reg.id(), (DataType::F32, 4)));
            assert!(e.to_string().contains("must match"), "{e}");
            assert_eq!(into, before);
        }
    }
}

/// A copy whose allocation fails is reported at the next sync, naming the allocation, as
/// on a link without shared memory (the in-place path first asked worker 0 for the
/// register's place and failed the copy itself, at once, with another error).
#[test]
fn a_failed_allocation_is_reported_at_the_next_sync() {
    for placement in placements() {
        let session = open(&placement, 2, 1);
        let big = HostArray::from_u8(&[8 << 20], &vec![1; 8 << 20]).unwrap();
        let reg = session
            .copy_to_worker0(&big)
            .unwrap_or_else(|e| panic!("{placement:?}: the copy is only sent: {e}"));
        let outcome = session.sync_worker(0);
        assert!(
            matches!(
                &outcome,
                Err(SessionError::Worker {
                    worker: 0,
                    command: tessera_host::session::Command::Alloc(id),
                    ..
                }) if *id == reg.id()
            ),
            "{placement:?}: {outcome:?}"
        );
        // The session goes on.
        let small = HostArray::from_u8(&[4], &[1, 2, 3, 4]).unwrap();
        let ok = session.copy_to_worker0(&small).unwrap();
        assert_eq!(array(&session, &ok, 0), small);
    }
}

/// The same copies and allreduce on 2 QEMU workers, whose memory the host cannot map: the
/// copying path, held to the same rule.
#[test]
#[ignore = "needs qemu-system-arm, defmt-print and the firmware: tests/ci.sh runs it (--include-ignored)"]
fn the_copying_path_on_qemu_gives_the_same_results() {
    let _exclusive = common::exclusive();
    let placement = Placement::Qemu(common::firmware());
    let session = Session::new(&placement, 2, 1, 0).unwrap();
    let src = session.empty(DataType::F32, &[64]).unwrap();
    for w in 0..2 {
        let v: Vec<f32> = (0..64).map(|i| value(w, i) as f32).collect();
        let host = HostArray::from_f32(&[64], &v).unwrap();
        session.debug_set(&src, w, &HostValue::Array(host)).unwrap();
    }
    session
        .allreduce(&src, &src, ReduceOp::Avg, Scope::Global)
        .unwrap();
    for w in 0..2 {
        let got = as_f64(&array(&session, &src, w));
        let want: Vec<f64> = (0..64)
            .map(|i| expected(ReduceOp::Avg, 0..2, i, DataType::F32))
            .collect();
        assert_eq!(got, want, "worker {w}");
    }
    let mut back = HostArray::from_f32(&[64], &[0.0; 64]).unwrap();
    session.copy_from_worker0_into(&src, &mut back).unwrap();
    assert_eq!(back, array(&session, &src, 0));
}
