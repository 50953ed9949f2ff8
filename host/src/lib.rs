//! tessera-host: the std runtime users program against, and the `tessera` command.
//!
//! - [`layout`]: inspect a variable's grouping and shard layout before running anything
//!   (`tessera layout`).
//! - [`runtime`]: the device runtime: prepare replicas, weights to and from the host, training
//!   steps from user arrays, seeds, RNG state, cycle counts.
//! - [`session`]: the SPMD session (TVM Disco's controller and workers): registers, named
//!   functions, copies to and from worker 0, collectives.
//! - [`train`]: the main job (`tessera train`): a model trained on the simulated accelerator
//!   and checked against the host reference.
//! - [`transport`]: channels to devices in every placement, with deadlines and retries, and
//!   the hub that runs training steps across them.
// `unsafe` lives in one module, `transport::window` (the shared-memory mapping), which
// allows it item by item with a SAFETY note each.
#![deny(unsafe_code)]

pub mod layout;
pub mod runtime;
pub mod session;
pub mod train;
pub mod transport;
