//! The CMSDK UART0 of the mps2-an385/an386 boards as an `embedded-io` byte link, and the board's
//! user LED as the busy line. Register access goes through [`super::mmio`].

use core::convert::Infallible;

use embedded_io::{ErrorType, Read, ReadReady, Write};

use super::mmio::fpgaio::LED;
use super::mmio::uart0::{BAUDDIV, CTRL, DATA, STATE};

const STATE_TX_FULL: u32 = 1 << 0;
const STATE_RX_FULL: u32 = 1 << 1;
const CTRL_TX_RX_ENABLE: u32 = 0b11;

/// UART0, enabled for transmit and receive.
pub struct Uart0(());

impl Uart0 {
    /// Enables the UART (QEMU ignores the baud rate; 16 is the smallest legal divider) and
    /// the wake-ups a wait for its bytes sleeps on (`wait`).
    pub fn take() -> Self {
        BAUDDIV.write(16);
        CTRL.write(CTRL_TX_RX_ENABLE);
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
        while STATE.read() & STATE_RX_FULL == 0 {
            super::wait::sleep();
        }
        let mut n = 0;
        // Take whatever else has already arrived, without waiting.
        while n < buf.len() && STATE.read() & STATE_RX_FULL != 0 {
            buf[n] = DATA.read() as u8;
            n += 1;
        }
        Ok(n)
    }
}

impl ReadReady for Uart0 {
    fn read_ready(&mut self) -> Result<bool, Infallible> {
        Ok(STATE.read() & STATE_RX_FULL != 0)
    }
}

impl Write for Uart0 {
    fn write(&mut self, buf: &[u8]) -> Result<usize, Infallible> {
        for &byte in buf {
            while STATE.read() & STATE_TX_FULL != 0 {}
            DATA.write(u32::from(byte));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> Result<(), Infallible> {
        Ok(())
    }
}

/// User LED 0, lit while the device is busy with a request.
pub struct BusyLed;

impl embedded_hal::digital::ErrorType for BusyLed {
    type Error = Infallible;
}

impl embedded_hal::digital::OutputPin for BusyLed {
    fn set_low(&mut self) -> Result<(), Infallible> {
        LED.write(0);
        Ok(())
    }

    fn set_high(&mut self) -> Result<(), Infallible> {
        LED.write(1);
        Ok(())
    }
}
