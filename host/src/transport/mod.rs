//! Channels to devices, whatever their placement: a thread in this process, a child
//! process speaking over stdio (or, serving a share of a training runtime's devices, on
//! message rings in shared memory), the firmware under QEMU on a UART socket, or a board
//! flashed with it on a serial port.
//!
//! - [`Channel`] (`channel`): the request protocol — sequence numbers, deadlines, retries
//!   answered from the device's reply cache — and the one data path: spans of a register,
//!   slot or FIFO written and read in place, in bulk or in chunks, as the placement allows.
//! - `spawn`: starting and stopping a device in each placement (device threads pooled, at
//!   most one per core); [`check_firmware`] checks what the QEMU placement needs before
//!   anything starts, `check_ports` the serial placement's ports ([`SerialError`]).
//! - `reader`: the thread that decodes a byte link's frames (QEMU, a serial port, a thread
//!   with faults);
//!   `frames`: a channel's source of messages — that thread's queue, a device thread's, a
//!   child process's stdout read in place, or a process share's ring.
//! - `pipe_link`: a pipe read in place without blocking (a child's stdin on the device's
//!   side, its stdout on the host's); `io_link`: a device's byte link over any reader and
//!   writer (a socket to a device thread, a tunnel's chunks, stdin/stdout).
//! - `queue`: the message queue between the host and a device thread (no framing, bulk
//!   bytes beside the messages); `spin`: how every wait for a message looks before it
//!   sleeps (`SPIN`).
//! - `process_share`: the device side of `tessera devices`, one process serving a share of
//!   a training runtime's devices; `ring`: the message rings in shared memory they and the
//!   host speak on.
//! - `tunnel` (feature `mpi`): byte links between the ranks of an MPI job, for workers
//!   whose controller is on another rank; `spawn`'s relay serves such a link.
//! - [`children`]: every child process tessera starts, stopped on drop and on SIGINT/SIGTERM.
//! - [`fault`]: links that damage or delay bytes, for tests.
//! - [`run_device`]: the device side, for threads and `tessera device`; `board`: what such
//!   a device has for a board (a clock, busy lines).
//! - `shared`: memory shared with a device — the whole memory of a device thread or child
//!   process, which the host reads and writes in place while the device is idle
//!   (`Channel::device_memory`), a child's bulk window, and a ring's memory (with `pages`,
//!   the only modules with `unsafe`).

mod board;
mod channel;
pub mod children;
mod contention;
mod device;
mod error;
pub mod fault;
mod frames;
pub mod group;
mod io_link;
mod pipe_link;
mod process_share;
mod queue;
mod reader;
mod reply;
mod ring;
mod seat;
mod shared;
mod slots;
mod spawn;
mod spin;
#[cfg(feature = "mpi")]
pub mod tunnel;

pub(crate) use channel::Silence;
pub use channel::{
    Channel, Reading, Sent, Span, Ticket, Traffic, BUSY_DEADLINE, DEFAULT_DEADLINE,
    UNREACHABLE_AFTER,
};
pub use device::{run_device, run_device_process, Inherited, HOST_FRAME, HOST_WINDOW};
pub use error::TransportError;
pub use fault::{FaultConfig, FaultInjector};
pub use process_share::{run_process_share, InheritedDevice};
pub use reply::{Reply, Typed};
pub use ring::RingError;
pub use seat::Seat;
pub(crate) use shared::{stream, SharedMemory, SplitError};
pub use slots::ChannelSlots;
pub use spawn::{check_firmware, FirmwareError, Liveness, SerialError, BAUD, DEFAULT_BAUD};
pub(crate) use spawn::{check_ports, port_of};
#[cfg(feature = "mpi")]
pub(crate) use spawn::{child_on, qemu_on, serial_on, thread_on, Served};
