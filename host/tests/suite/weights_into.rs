//! Weights to host into the caller's arrays (PopART's `weightsToHost` into the user's
//! buffers): the same values `weights_to_host` returns, nothing of what the arrays held
//! before, and a wrong array refused before any byte moves.

use crate::common;

use common::{initial_weights, Model, Placed};
use std::sync::Arc;
use tessera_core::grouping::{CommGroup, RetrievalMode};
use tessera_core::program::Sharding;

use tessera_host::instance::{InstanceError, Instances};
use tessera_host::runtime::{Placement, Runtime, RuntimeError, WeightsIo};
use tessera_host::session::HostArray;

const R: usize = 4;

/// Instance 0 of 2 whose peer holds nothing: its collectives leave this instance's bytes as
/// they are (the peer's share is zeros), so what this instance did not write shows.
#[derive(Debug)]
struct FirstOfTwo;

impl Instances for FirstOfTwo {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        2
    }
    fn barrier(&self) -> Result<(), InstanceError> {
        Ok(())
    }
    fn allreduce_sum(&self, _: &mut [f64]) -> Result<(), InstanceError> {
        Ok(())
    }
    fn allreduce_or(&self, _: &mut [u8]) -> Result<(), InstanceError> {
        Ok(())
    }
    fn allgather(&self, data: &[u8]) -> Result<Vec<u8>, InstanceError> {
        let mut all = data.to_vec();
        all.resize(2 * data.len(), 0);
        Ok(all)
    }
    fn abort(&self, code: i32) -> ! {
        std::process::exit(code)
    }
}

/// `w1` sharded across all four replicas (one row back), `w2` in pairs with every
/// replica's row back, weights loaded.
fn runtime() -> Runtime {
    runtime_in(Arc::new(tessera_host::instance::Single))
}

/// Like [`runtime`], as one of `instances`.
fn runtime_in(instances: Arc<dyn Instances>) -> Runtime {
    let p = Model {
        first: Placed::comm(CommGroup::All).sharded(Sharding::Balanced),
        second: Placed::comm(CommGroup::Consecutive(2)).returning(RetrievalMode::AllReplicas),
        ..Model::mlp(3, 5, 2)
    }
    .program();
    let mut runtime =
        Runtime::prepare_in(p.clone(), R, instances, &Placement::Thread, 1 << 16).unwrap();
    runtime
        .weights_from_host(&initial_weights(&p, R, 5))
        .unwrap();
    runtime
}

/// Arrays shaped like `like`, every element `value`.
fn filled(like: &WeightsIo, value: f32) -> WeightsIo {
    like.iter()
        .map(|(name, a)| {
            let values = vec![value; a.elements()];
            (
                name.clone(),
                HostArray::from_f32(a.shape(), &values).unwrap(),
            )
        })
        .collect()
}

/// Catches a buffer written only where this instance holds values: what the caller's array
/// held (here 7.0 everywhere) would stay in the rows and shard pieces it does not hold, and
/// be ORed into the other instances' values (a peer holding nothing shows them).
#[test]
fn arrays_filled_in_place_hold_what_weights_to_host_returns() {
    for mut runtime in [runtime(), runtime_in(Arc::new(FirstOfTwo))] {
        check_in_place(&mut runtime);
    }
}

fn check_in_place(runtime: &mut Runtime) {
    let expected = runtime.weights_to_host().unwrap();
    let mut into = filled(&expected, 7.0);
    runtime.weights_to_host_into(&mut into).unwrap();
    for (name, array) in &expected {
        assert_eq!(into[name].bytes(), array.bytes(), "{name}");
    }
}

/// Catches arrays checked one at a time as they are filled: a wrong `w2` must leave `w1`
/// (filled first, in name order) untouched.
#[test]
fn a_wrong_array_is_refused_before_any_byte_moves() {
    let mut runtime = runtime();
    let expected = runtime.weights_to_host().unwrap();
    let mut into = filled(&expected, 7.0);
    into.insert("w2".into(), HostArray::from_f32(&[3], &[0.0; 3]).unwrap());
    match runtime.weights_to_host_into(&mut into) {
        Err(RuntimeError::Shape { name, rule, .. }) => {
            assert_eq!(name, "w2");
            assert!(rule.contains("returned shape"), "{rule}");
        }
        other => panic!("expected a shape error for w2, got {other:?}"),
    }
    assert!(into["w1"].to_f32().unwrap().iter().all(|&v| v == 7.0));
    into.insert("nope".into(), HostArray::from_f32(&[1], &[0.0]).unwrap());
    into.remove("w2");
    assert!(matches!(
        runtime.weights_to_host_into(&mut into),
        Err(RuntimeError::UnknownTensor { .. })
    ));
}
