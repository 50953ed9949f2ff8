//! tessera-host: the std runtime users program against, and the `tessera` command.
//!
//! - [`array`](mod@array): host arrays (element type, shape, bytes) and register values,
//!   which the runtime and the session both speak.
//! - [`checkpoint`]: a training run's state in one safetensors file, saved atomically and
//!   restored bit for bit.
//! - [`cli`]: the `tessera` command (train, inspect, layout, and the hidden `device` that
//!   serves one child-process device), run by the binary and by the Python package.
//! - `combine` (crate-private): the one element-wise combination kernel, for the session's
//!   allreduce and the training step's reduction rounds.
//! - [`executable`]: a prepared program and the device limits it was prepared for, in one
//!   checked file that loads without preparing again.
//! - [`input`]: files the user names, read only when regular and never past their size.
//! - [`inspect`]: what a checkpoint or an executable holds (`tessera inspect`).
//! - [`instance`]: the host processes of one job (MPI ranks) and the collectives between
//!   them; one instance by default.
//! - [`layout`]: inspect a variable's grouping and shard layout before running anything
//!   (`tessera layout`).
//! - [`pages`]: large host buffers advised onto huge pages, where the kernel allows.
//! - [`placement`]: where devices run (threads, child processes, QEMU), and the one place
//!   that starts them there.
//! - [`runtime`]: the device runtime, generic over a core program: prepare replicas, weights
//!   and optimizer state to and from the host by name, training steps from named arrays,
//!   anchors, seeds, RNG state, cycle counts; and its f64 reference.
//! - [`session`]: the SPMD session (TVM Disco's controller and workers): registers, named
//!   functions, copies to and from worker 0, collectives.
//! - [`train`]: the main job (`tessera train`): a model trained on the simulated accelerator
//!   and checked against the host reference.
//! - [`transport`]: channels to devices in every placement, with deadlines and retries.
// `unsafe` lives in `transport::shared` (its `mapping`, the shared-memory mapping;
// `ring_memory`, a ring's atomic words and copies; `stream`, the streaming stores) and in
// `pages` (advice to back large buffers by huge pages), which allow it item by item with a
// SAFETY note each.
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod array;
pub mod atomic;
pub mod checkpoint;
pub mod cli;
mod combine;
pub mod executable;
pub mod input;
pub mod inspect;
pub mod instance;
pub mod layout;
pub mod pages;
pub mod placement;
#[cfg(test)]
mod readme;
pub mod runtime;
pub mod session;
pub mod trace;
pub mod train;
pub mod transport;
