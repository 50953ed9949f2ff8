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
//! For SPMD sessions (a controller and its workers, as in TVM Disco) the device keeps
//! registers (up to [`MAX_REGISTERS`]) of integers, floats, shapes, strings and arrays of
//! any dtype, and runs named [`functions`] on them: the built-ins the session scenarios
//! need (`add_one`, `transpose`, `matmul`, `gelu`, …) and any you add. A firmware built on
//! this crate registers its own kernels with [`Device::with_functions`]; the [`functions`]
//! module doc shows how, and `examples/custom_kernel.rs` builds a device with a `double`
//! kernel and calls it through [`Device::handle`]
//! (`cargo run -p tessera-firmware-sim --example custom_kernel`).
//!
//! # What is public
//!
//! The device, its serve loop and what they take and give ([`Device`], [`Server`],
//! [`serve()`], [`Memory`], [`Clock`], [`Messages`], …), and the [`functions`] a firmware
//! extends the device with; with `std`, a device and a server that own their memory
//! (`Device::owning`, `Server::owning`), for a host that keeps them in structs of its
//! own. A host's links (a thread's message queue, a byte link over std IO) are the host's:
//! it implements [`Messages`], or hands [`serve()`] an `embedded-io` link, from its side.
//! Everything else — the arena, the FIFOs, the register file, the reply cache, the
//! prepared program and its step — is the crate's own, each module stating its rules.
//!
//! # Panics
//!
//! No request, however malformed, makes the device panic or touch memory outside its
//! arena: every id, offset and length is checked and answered with an error reply.
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[cfg(feature = "std")]
extern crate std;

// Everything below is the device's own: only what the re-exports after it name is public.
pub(crate) mod arena;
pub(crate) mod clock;
pub(crate) mod device;
pub(crate) mod divisor;
pub(crate) mod fifo;
pub mod functions;
pub(crate) mod lent;
pub(crate) mod link;
pub(crate) mod phase;
pub(crate) mod program;
pub(crate) mod registers;
pub(crate) mod reply_cache;
pub(crate) mod serve;
pub(crate) mod shift;

pub use arena::{Access, Memory};
pub use clock::Clock;
pub use device::{CycleCounter, Device, Progress};
pub use link::{Framed, Framing, Incoming, LinkLimits, Messages};
/// The training step's dot product, public so that a host's baseline can run the same
/// arithmetic as the device.
pub use program::math::dot;
pub use registers::MAX_REGISTERS;
pub use serve::{
    serve, serve_messages, serve_pending, ServeError, Server, REDUCE_ATTEMPTS, REDUCE_DEADLINE_MS,
};

/// The error for an invariant of the device's own found broken at `site`.
pub(crate) const fn broken(site: tessera_core::wire::Invariant) -> tessera_core::wire::ErrorCode {
    tessera_core::wire::ErrorCode::Internal { site }
}

pub(crate) use tessera_core::panic_free::copy_exact;
