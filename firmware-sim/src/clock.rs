//! Real time for the device's deadlines.
//!
//! A deadline counted in loop turns or in delay calls stretches and shrinks with the speed
//! of whatever runs the device: under QEMU a "2 s" spin count expired after about 110 ms of
//! real time, so the device gave up on answers that were merely late. Every deadline in the
//! device is therefore measured on a [`Clock`]: a monotonic millisecond count from a real
//! timer (a hardware timer on bare metal, `Instant` on a host), plus a short wait to poll
//! with.

use embedded_hal::delay::DelayNs;

/// A monotonic clock in milliseconds that can also wait a little between polls.
pub trait Clock: DelayNs {
    /// Milliseconds since an arbitrary start. Never goes backwards.
    fn now_ms(&mut self) -> u64;
}

/// How long `clock` has run since `start` (a value of its [`Clock::now_ms`]).
pub fn elapsed_ms<C: Clock + ?Sized>(clock: &mut C, start: u64) -> u64 {
    clock.now_ms().saturating_sub(start)
}
