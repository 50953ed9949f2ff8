//! The simulated tessera accelerator.
//!
//! A [`Device`] is one replica: a memory arena the caller provides (remote-buffer slots,
//! stream FIFOs, registers, step scratch), a random seed and RNG state, a cycle counter,
//! and the program set — weights and optimizer from the host, seed and RNG state both
//! ways, the training step, weights and cycle counts to the host, named functions on
//! registers. [`serve()`] runs a device on any `embedded_io` byte link with deadlines measured
//! on a real-time [`Clock`], so the same code runs in a host thread, in a child process
//! (`tessera device`) and on bare metal.
//!
//! # Panics
//!
//! No request, however malformed, makes the device panic or touch memory outside its
//! arena: every id, offset and length is checked and answered with an error reply.
#![no_std]
#![forbid(unsafe_code)]

#[cfg(feature = "std")]
extern crate std;

pub mod arena;
pub mod clock;
pub mod device;
pub mod fifo;
pub mod functions;
pub mod registers;
pub mod rng;
pub mod serve;
pub mod step;

pub use clock::Clock;
pub use device::{CycleCounter, Device};
pub use serve::{serve, ServeError, Server};

#[cfg(feature = "std")]
pub mod std_link;
