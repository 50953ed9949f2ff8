//! The board's real-time clock: the CLINT's `mtime`, a 64-bit up-counter at 10 MHz on
//! `virt` (QEMU runs it on the host's clock, whatever the emulated CPU's speed).
//!
//! As on the Arm boards, the clock reads the low 32 bits only (they wrap every 429 s) and
//! counts whole milliseconds in 64 bits from the ticks since its previous reading, in 32-bit
//! arithmetic (RV32 divides 64 bits only by a library routine), carrying the remainder to the
//! next reading. Readings further apart than one wrap lose whole wraps, which keeps the
//! clock monotonic but slow across long idle gaps: deadlines read it every poll, so they
//! are exact.

use tessera_firmware_sim::Clock;

use super::mmio::clint::MTIME_LO;

/// `mtime` ticks per second on `virt`.
pub(super) const TICKS_PER_S: u32 = 10_000_000;
/// `mtime` ticks per millisecond.
const TICKS_PER_MS: u32 = TICKS_PER_S / 1000;

/// Milliseconds from `mtime`.
pub struct MtimeClock {
    last: u32,
    /// Whole milliseconds counted.
    ms: u64,
    /// Ticks counted toward the next millisecond (fewer than [`TICKS_PER_MS`]).
    partial: u32,
}

impl MtimeClock {
    /// Starts counting from now (`mtime` runs from reset: nothing to start).
    pub fn take() -> Self {
        Self {
            last: MTIME_LO.read(),
            ms: 0,
            partial: 0,
        }
    }
}

impl embedded_hal::delay::DelayNs for MtimeClock {
    fn delay_ns(&mut self, ns: u32) {
        super::SpinDelay.delay_ns(ns);
    }
}

impl Clock for MtimeClock {
    fn now_ms(&mut self) -> u64 {
        let now = MTIME_LO.read();
        // An up-counter: the ticks since the last reading are now − last, modulo a wrap.
        let ticks = now.wrapping_sub(self.last);
        self.last = now;
        // `partial < TICKS_PER_MS` and `ticks % TICKS_PER_MS < TICKS_PER_MS`: no overflow.
        let partial = self.partial + ticks % TICKS_PER_MS;
        let whole = ticks / TICKS_PER_MS + partial / TICKS_PER_MS;
        self.partial = partial % TICKS_PER_MS;
        self.ms = self.ms.saturating_add(u64::from(whole));
        self.ms
    }
}
