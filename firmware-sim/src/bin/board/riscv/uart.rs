//! The 16550 UART0 of QEMU's `virt` as an `embedded-io` byte link, and the busy line (`virt`
//! has no LED: it goes nowhere). Register access goes through [`super::mmio`].
//!
//! The UART stays in its reset mode, without FIFOs, as the Arm boards' UART: QEMU then
//! hands it the host's bytes one at a time as the firmware reads them, and none is lost
//! (enabling the FIFOs would flush a byte that came before).

use core::convert::Infallible;

use embedded_io::{ErrorType, Read, ReadReady, Write};

use super::mmio::uart0::{DATA, IER, LSR, LSR_DATA_READY, LSR_THR_EMPTY};

/// Interrupt enable: received data available.
const IER_RX: u8 = 1 << 0;

/// UART0, its receive interrupt enabled (for `wait`).
pub struct Uart0(());

impl Uart0 {
    /// Enables the receive interrupt (QEMU ignores the line settings: the reset 8-N-1 is
    /// kept) and the wake-ups a wait for its bytes sleeps on (`wait`).
    pub fn take() -> Self {
        IER.write(IER_RX);
        super::wait::enable();
        Self(())
    }
}

impl ErrorType for Uart0 {
    type Error = Infallible;
}

impl Read for Uart0 {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, Infallible> {
        if buf.is_empty() {
            return Ok(0);
        }
        // Asleep until a byte comes (see `wait`), not spinning on the status register.
        while LSR.read() & LSR_DATA_READY == 0 {
            super::wait::sleep();
        }
        let mut n = 0;
        // Take whatever else has already arrived, without waiting.
        while n < buf.len() && LSR.read() & LSR_DATA_READY != 0 {
            buf[n] = DATA.read();
            n += 1;
        }
        Ok(n)
    }
}

impl ReadReady for Uart0 {
    fn read_ready(&mut self) -> Result<bool, Infallible> {
        Ok(LSR.read() & LSR_DATA_READY != 0)
    }
}

impl Write for Uart0 {
    fn write(&mut self, buf: &[u8]) -> Result<usize, Infallible> {
        for &byte in buf {
            while LSR.read() & LSR_THR_EMPTY == 0 {}
            DATA.write(byte);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> Result<(), Infallible> {
        Ok(())
    }
}

/// The busy line: `virt` has no LED, so setting it does nothing.
pub struct BusyLed;

impl embedded_hal::digital::ErrorType for BusyLed {
    type Error = Infallible;
}

impl embedded_hal::digital::OutputPin for BusyLed {
    fn set_low(&mut self) -> Result<(), Infallible> {
        Ok(())
    }

    fn set_high(&mut self) -> Result<(), Infallible> {
        Ok(())
    }
}
