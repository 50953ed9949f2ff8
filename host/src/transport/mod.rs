//! Channels to devices, whatever their placement: a thread in this process, a child
//! process speaking over stdio, or (later) QEMU on a UART socket.
//!
//! A [`Channel`] frames requests with sequence numbers and waits for the reply with the
//! same number under a deadline; a missing or damaged reply is retried with the same
//! number (the device answers a retry from its reply cache instead of running the request
//! twice). A device that stops answering or closes its link is an error, never a hang.
//! [`hub`] runs training steps across channels and answers the devices' reductions.

mod channel;
pub mod fault;
pub mod hub;
mod slots;

pub use channel::{run_device, Channel, Reply, TransportError, DEFAULT_DEADLINE};
pub use fault::{FaultConfig, FaultInjector};
pub use slots::ChannelSlots;
