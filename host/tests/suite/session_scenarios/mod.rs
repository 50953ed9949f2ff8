//! TVM Disco's session scenarios (`shared/conformance/disco_scenarios.md`) on tessera's
//! [`Session`]: each scenario is written once, as a function of the placement, and run on
//! the thread placement and the child-process placement; the ones the list marks (Q) also
//! run on 2 QEMU workers (ignored by default: `tests/ci.sh` runs them). Scenarios 1, 3 and
//! 10 also run on 2 boards on serial ports: the firmware under QEMU with UART0 on a pty
//! ([`common::pty_board`]), ignored likewise.
//!
//! Expected values are computed on the host, never read from a worker. Each test's doc
//! names what it checks; for 26–31, the Disco failure it guards against.
//!
//! Not here: 23–25 (sharded loading) are the `session_loader` suite; 30 (the controller
//! dies, its child-process and QEMU workers exit) is the `signals` suite. Scenario 27 (a
//! worker killed mid-session) runs on the child-process placement only: a thread worker
//! cannot die without its controller, which is scenario 30.

mod across_ranks;

use crate::common;

use std::path::PathBuf;
use std::process;
use std::thread;
use std::time::{Duration, Instant};

use tessera_core::dtype::DataType;
use tessera_host::runtime::Placement;
use tessera_host::session::collective::{ReduceOp, Scope};
use tessera_host::session::{
    CallArg, Command, HostArray, HostValue, Register, Session, SessionError,
};

/// Device memory per host-placed worker.
const MEMORY: usize = 4 << 20;

/// How long a dead worker may take to be reported.
const PROMPT: Duration = Duration::from_secs(5);

fn process_placement() -> Placement {
    Placement::Process(PathBuf::from(env!("CARGO_BIN_EXE_tessera")))
}

/// 4 workers, or 2 under QEMU (and on its serial ports).
fn workers_on(placement: &Placement) -> usize {
    if matches!(placement, Placement::Qemu(_) | Placement::Serial { .. }) {
        2
    } else {
        4
    }
}

fn open_with(placement: &Placement, workers: usize, groups: usize, memory: usize) -> Session {
    Session::new(placement, workers, groups, memory).unwrap_or_else(|e| {
        panic!("a session of {workers} workers in {groups} groups on {placement:?}: {e}")
    })
}

fn open(placement: &Placement, workers: usize, groups: usize) -> Session {
    open_with(placement, workers, groups, MEMORY)
}

/// Instantiates scenario `$run` once per placement, the doc comment on every test.
macro_rules! scenario {
    ($(#[$doc:meta])* $run:ident: $thread:ident, $process:ident) => {
        $(#[$doc])*
        #[test]
        fn $thread() {
            $run(Placement::Thread);
        }

        $(#[$doc])*
        #[test]
        fn $process() {
            $run(process_placement());
        }
    };
    ($(#[$doc:meta])* $run:ident: $thread:ident, $process:ident, $qemu:ident) => {
        scenario!($(#[$doc])* $run: $thread, $process);

        $(#[$doc])*
        #[test]
        #[ignore = "needs qemu-system-arm, defmt-print and the firmware: tests/ci.sh runs it (--include-ignored)"]
        fn $qemu() {
            let _exclusive = common::exclusive();
            $run(Placement::Qemu(common::firmware()));
        }
    };
    ($(#[$doc:meta])* $run:ident: $thread:ident, $process:ident, $qemu:ident, $serial:ident) => {
        scenario!($(#[$doc])* $run: $thread, $process, $qemu);
        scenario!($(#[$doc])* $run: serial $serial);
    };
    ($(#[$doc:meta])* $run:ident: $thread:ident, $process:ident, serial $serial:ident) => {
        scenario!($(#[$doc])* $run: $thread, $process);
        scenario!($(#[$doc])* $run: serial $serial);
    };
    ($(#[$doc:meta])* $run:ident: serial $serial:ident) => {
        $(#[$doc])*
        #[test]
        #[ignore = "needs qemu-system-arm and the firmware: tests/ci.sh runs it (--include-ignored)"]
        fn $serial() {
            let _exclusive = common::exclusive();
            let boards = common::pty_board::boards(&common::firmware(), 2);
            $run(common::pty_board::placement(&boards));
        }
    };
}

// ---- arrays on the host -------------------------------------------------------------

/// `n` f32s from `start` in steps of `step` (numpy's `arange`).
fn arange(start: f32, n: usize, step: f32) -> Vec<f32> {
    (0..n).map(|i| start + step * i as f32).collect()
}

fn f32s(shape: &[u32], values: &[f32]) -> HostArray {
    HostArray::from_f32(shape, values).expect("the shape matches the values")
}

fn zeros(shape: &[u32]) -> HostArray {
    f32s(shape, &vec![0.0; shape.iter().product::<u32>() as usize])
}

fn negated(values: &[f32]) -> Vec<f32> {
    values.iter().map(|v| -v).collect()
}

// ---- registers on the workers -------------------------------------------------------

/// Register `reg`'s array on `worker`.
fn array(session: &Session, reg: &Register, worker: usize) -> HostArray {
    match session.debug_get(reg, worker) {
        Ok(HostValue::Array(a)) => a,
        other => panic!("register {} on worker {worker}: {other:?}", reg.id()),
    }
}

/// Sets register `reg` on `worker` to `value`.
fn set(session: &Session, reg: &Register, worker: usize, value: &HostArray) {
    session
        .debug_set(reg, worker, &HostValue::Array(value.clone()))
        .unwrap_or_else(|e| panic!("set register {} on worker {worker}: {e}", reg.id()));
}

/// A new zeroed f32 register on every worker.
fn empty(session: &Session, shape: &[u32]) -> Register {
    session
        .empty(DataType::F32, shape)
        .expect("an empty register")
}

/// Asserts that register `reg` holds `expected` on each of `workers`.
fn expect_value(
    session: &Session,
    reg: &Register,
    workers: impl IntoIterator<Item = usize>,
    expected: &HostValue,
) {
    for worker in workers {
        match session.debug_get(reg, worker) {
            Ok(value) => assert_eq!(&value, expected, "worker {worker}"),
            Err(e) => panic!("register {} on worker {worker}: {e}", reg.id()),
        }
    }
}

/// Asserts that register `reg` holds the array `expected` on each of `workers`.
fn expect_on(
    session: &Session,
    reg: &Register,
    workers: impl IntoIterator<Item = usize>,
    expected: &HostArray,
) {
    expect_value(session, reg, workers, &HostValue::Array(expected.clone()));
}

/// Calls the function `name` with `args`.
fn call(session: &Session, name: &str, args: &[CallArg<'_>]) -> Register {
    let function = session.get_function(name).expect("a built-in function");
    session.call(&function, args).expect("the call is sent")
}

mod collectives;
mod control_plane;
mod disco_failures;
