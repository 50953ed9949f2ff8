//! Memory shared with a device: its whole memory (the arena of a device in a thread or a
//! child process, which the host reads and writes in place), and the windows bulk bytes
//! pass through beside a link's messages (a memfd a child process maps too, or a file
//! QEMU's firmware reaches by semihosting), and the memory of message rings.
//!
//! - `mapping`: [`SharedMemory`], one mapping of a shared-memory file — the `mmap` and
//!   `munmap`, the two views of the mapping as a Rust slice, the hook that hands a memory to
//!   one child — and Rust's rules within this process, the argument for its `unsafe`.
//! - `views`: what every other module uses of a mapping, all safe: bounds-checked copies
//!   in and out, ranges read or written in place, disjoint mutable views for several
//!   threads ([`SplitError`] when refused).
//! - `ring_memory`: [`RingMemory`], a mapping two processes use at once, reached only
//!   through atomic words and copies (a message ring's).
//! - `window`: [`Window`], where a channel's bulk bytes pass (shared memory or a file).
//! - `stream`: [`stream()`], a copy by stores that bypass the cache.
//!
//! Besides `pages`' huge-page advice, `unsafe` in tessera-host lives in this module's
//! `mapping` (the `mmap` and `munmap` calls — rustix's; the memfd and its descriptor's
//! flags need no `unsafe` through rustix —, the hook run between a child's fork and its
//! exec, the views of a mapping as a Rust slice), `ring_memory` (a ring memory's atomic
//! words and copies) and `stream` (the streaming stores), each `unsafe` block with its
//! SAFETY note. Every other module sees a safe API.
//!
//! # Between mappings: the protocol (what makes the shared bytes safe to touch)
//!
//! Within this process, a mapping hands out views by Rust's rules (`mapping`'s doc). The
//! same bytes can also be reached through a second mapping: [`SharedMemory::map_again`]
//! in this process, or the file opened by a child ([`SharedMemory::open`]). Rust's rules
//! cannot see that aliasing, so the two sides keep to a protocol: **shared memory belongs
//! to one side at a time, and the link says which**; the request/reply exchange orders the
//! accesses (a message between threads, or a pipe or a ring's atomics between processes,
//! each a happens-before edge).
//!
//! - **A device's memory** is mapped twice: once by the device, as its arena, once by the
//!   host. The device touches it only while it runs a request, before it replies. The host
//!   touches it only once every request it sent that device has been answered, and only
//!   while no other request can be sent: its mapping lives inside the device's channel and
//!   is reached only through [`Channel::device_memory`](super::Channel::device_memory),
//!   which drains the channel first and returns a view that borrows the channel mutably —
//!   so, by the borrow checker, no request goes out while the host's view exists. This is
//!   how a host treats an accelerator's memory it can map: DMA while the device is idle.
//!   (The device's side is upheld by the device loop, which touches its arena only to run
//!   a request; its arena holds the device's mapping and borrows a slice of it for one
//!   access at a time — see [`Memory`](tessera_firmware_sim::Memory) — so no Rust
//!   reference to those bytes lives across the moments the host writes them.)
//! - **A window**: the host writes it only before sending a bulk write and reads it only
//!   after the device's reply to a bulk read has arrived; the device reads it only while it
//!   runs that bulk write and writes it only while it runs that bulk read, before it
//!   replies (a repeated request is answered from the reply cache and never touches the
//!   window). The host keeps at most one bulk request in flight per window.
//! - **A message ring** (`transport::ring`) is used by both sides at once, through a
//!   [`RingMemory`]: its counters are reached only as atomics, never by a copy, and its
//!   bytes only by copies of exactly the range its counters give one side; the counters'
//!   stores and loads order each copy before the other side's. A `RingMemory` makes no
//!   views and is not `Sync`: in this process one thread at a time reaches it, so its
//!   atomics and its copies never race here.

mod mapping;
mod ring_memory;
mod stream;
mod views;
mod window;

pub(crate) use mapping::SharedMemory;
pub(crate) use ring_memory::RingMemory;
pub(crate) use stream::stream;
pub(crate) use views::SplitError;
pub use window::Window;
