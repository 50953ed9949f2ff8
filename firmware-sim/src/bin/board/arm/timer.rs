//! The board's real-time clock: CMSDK APB timer 0, a 32-bit down-counter at the 25 MHz
//! peripheral clock (QEMU runs it on the host's clock, whatever the emulated CPU's speed).
//!
//! The counter wraps every 171 s; the clock counts whole milliseconds in 64 bits from the
//! ticks since its previous reading (32-bit arithmetic only: the Cortex-M3 divides 64 bits
//! by a routine of almost 900 bytes of its flash), carrying the remainder to the next
//! reading. Readings further apart than one wrap lose whole wraps, which keeps the clock
//! monotonic but slow across long idle gaps: deadlines read it every poll, so they are
//! exact.

use tessera_firmware_sim::Clock;

use super::mmio::timer0::{CTRL, RELOAD, VALUE};

const CTRL_ENABLE: u32 = 1;
/// Timer ticks per millisecond (the peripheral clock).
const TICKS_PER_MS: u32 = super::CPU_HZ / 1000;

/// Milliseconds from timer 0.
pub struct Timer0Clock {
    last: u32,
    /// Whole milliseconds counted.
    ms: u64,
    /// Ticks counted toward the next millisecond (fewer than [`TICKS_PER_MS`]).
    partial: u32,
}

impl Timer0Clock {
    /// Starts timer 0 free-running from its largest value.
    pub fn take() -> Self {
        CTRL.write(0);
        RELOAD.write(u32::MAX);
        VALUE.write(u32::MAX);
        CTRL.write(CTRL_ENABLE);
        Self {
            last: VALUE.read(),
            ms: 0,
            partial: 0,
        }
    }
}

impl embedded_hal::delay::DelayNs for Timer0Clock {
    fn delay_ns(&mut self, ns: u32) {
        super::SpinDelay.delay_ns(ns);
    }
}

impl Clock for Timer0Clock {
    fn now_ms(&mut self) -> u64 {
        let now = VALUE.read();
        // A down-counter: the ticks since the last reading are last − now, modulo a wrap.
        let ticks = self.last.wrapping_sub(now);
        self.last = now;
        // `partial < TICKS_PER_MS` and `ticks % TICKS_PER_MS < TICKS_PER_MS`: no overflow.
        let partial = self.partial + ticks % TICKS_PER_MS;
        let whole = ticks / TICKS_PER_MS + partial / TICKS_PER_MS;
        self.partial = partial % TICKS_PER_MS;
        self.ms = self.ms.saturating_add(u64::from(whole));
        self.ms
    }
}
