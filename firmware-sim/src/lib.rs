//! The simulated tessera accelerator.
//!
//! This crate will hold the portable `no_std` device (memory arena, remote-buffer slots,
//! stream FIFOs, program table, `serve` loop) and its bare-metal firmware binary. Until the
//! wire protocol lands it only re-exports the layout core the device is built on, so that
//! the workspace and the bare-metal builds are in place.
#![no_std]
#![forbid(unsafe_code)]

pub use tessera_core as core;
