//! What a device served from this host has for a board: a clock on `Instant`, and busy
//! lines — one nobody watches, and one the host reads to tell a device that is working
//! from one that is gone.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// Real time from `Instant`; its waits sleep the thread.
#[derive(Debug)]
pub struct InstantClock {
    start: Instant,
}

impl Default for InstantClock {
    fn default() -> Self {
        Self::new()
    }
}

impl InstantClock {
    /// A clock starting now.
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
        }
    }
}

impl embedded_hal::delay::DelayNs for InstantClock {
    fn delay_ns(&mut self, ns: u32) {
        thread::sleep(Duration::from_nanos(u64::from(ns)));
    }
}

impl tessera_firmware_sim::Clock for InstantClock {
    fn now_ms(&mut self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// A busy line connected to nothing.
#[derive(Debug)]
pub struct NoPin;

impl embedded_hal::digital::ErrorType for NoPin {
    type Error = core::convert::Infallible;
}

impl embedded_hal::digital::OutputPin for NoPin {
    fn set_low(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }

    fn set_high(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// A busy line the host watches: high while the device runs a request. A device that is
/// silent while its line is high is working (a long kernel), not dead. Clones share the
/// line: the device drives one, the host reads another.
#[derive(Debug, Clone, Default)]
pub struct BusyLine(Arc<AtomicBool>);

impl BusyLine {
    /// True while the device runs a request.
    pub fn is_high(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

impl embedded_hal::digital::ErrorType for BusyLine {
    type Error = core::convert::Infallible;
}

impl embedded_hal::digital::OutputPin for BusyLine {
    fn set_low(&mut self) -> Result<(), Self::Error> {
        self.0.store(false, Ordering::Relaxed);
        Ok(())
    }

    fn set_high(&mut self) -> Result<(), Self::Error> {
        self.0.store(true, Ordering::Relaxed);
        Ok(())
    }
}
