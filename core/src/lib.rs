//! tessera-core: the layout math shared by the tessera host runtime and the accelerator
//! firmware.
//!
//! Everything here is `no_std`, allocation-free and `unsafe`-free. Memory comes from the
//! caller (slices, const-generic capacities); every fallible operation returns a small
//! `Copy` error enum that implements `Display` and `core::error::Error` (and
//! `defmt::Format` behind the `defmt` feature). Both come from `thiserror`, each message
//! beside its variant. An error that wraps another shows the inner message in its own and
//! reports no `source()`, so that a reporter walking the chain does not print it twice.
//!
//! # Panics
//!
//! No function in this crate panics, whatever its input: out-of-range indices, invalid
//! groupings, mismatched buffer sizes and arithmetic overflow are all reported as errors.
//! The property tests of each module check this.
//!
//! # Modules
//!
//! - [`grouping`]: replica groupings, comm groups, retrieval modes, variable settings and
//!   the host/replica shapes of grouped variables.
//! - [`shard`]: how a sharded variable is split over a shard domain of replicas.
//! - [`transfer`]: weights between a host buffer and the replicas' remote buffers.
//! - [`stream`]: step IO: anchors, data flow and size checks, the per-replica splitter.
//! - [`dtype`]: element types and the checked conversion of input buffers.
//! - [`finite`]: which `f32` values may enter training.
//! - [`program`]: what a device runs: named variables, streams, anchors, data flow, the
//!   optimizer and the layers, checked before anything is placed.
//! - [`rng`]: the replicas' random generator and the seed-derivation rule both sides use.
//! - [`wire`]: the host↔device protocol: messages, envelopes, framing.
//! - [`panic_free`]: slice copies and UTF-8 checks with no panic path, for device code.
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[cfg(test)]
extern crate std;

pub mod dtype;
pub mod finite;
pub mod grouping;
pub mod panic_free;
pub mod program;
pub mod rng;
pub mod shard;
pub mod stream;
pub mod transfer;
pub mod wire;
