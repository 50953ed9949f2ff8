//! The board's memory-mapped registers, as [`Register`] values only this module can build:
//! one constant for each register of the mps2-an385/an386 boards (Arm Application Note 385's
//! memory map) that the firmware uses. Safe code elsewhere names a constant and reads or
//! writes it; it cannot name an address, so it cannot reach memory through this module.
//!
//! With `host_file` (semihosting calls) and `wait` (the receive interrupt's number and its
//! unmasking), one of the board's modules with `unsafe`.
//! The argument for it is this module's invariant: **every `Register` holds the address of
//! a documented, always-mapped, 4-byte aligned 32-bit device register** — true of every
//! constant below, and no other `Register` can exist, since [`Register::at`] is private
//! here and nothing else builds one.

use core::ptr::{read_volatile, write_volatile};

/// A 32-bit device register of the board.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Register {
    address: usize,
}

impl Register {
    /// The register at `address`: private, so that only the documented addresses below
    /// become registers.
    const fn at(address: usize) -> Self {
        Self { address }
    }

    /// Reads the register.
    pub fn read(self) -> u32 {
        // SAFETY: by this module's invariant, `self.address` is a documented, always-mapped,
        // 4-byte aligned device register; a volatile read of it touches no memory the
        // program holds (device registers are not Rust memory).
        #[allow(unsafe_code)]
        unsafe {
            read_volatile(self.address as *const u32)
        }
    }

    /// Writes `value` to the register.
    pub fn write(self, value: u32) {
        // SAFETY: as for `read` (this module's invariant); a write to a device register
        // changes device state only, never memory the program uses.
        #[allow(unsafe_code)]
        unsafe {
            write_volatile(self.address as *mut u32, value)
        }
    }
}

/// CMSDK APB UART0, at 0x4000_4000.
pub mod uart0 {
    use super::Register;

    const BASE: usize = 0x4000_4000;
    /// Received byte (read), byte to send (write).
    pub const DATA: Register = Register::at(BASE);
    /// Transmit-full and receive-full flags.
    pub const STATE: Register = Register::at(BASE + 0x04);
    /// Transmit and receive enables.
    pub const CTRL: Register = Register::at(BASE + 0x08);
    /// Interrupt status (read) and clear (write 1s).
    pub const INTCLEAR: Register = Register::at(BASE + 0x0C);
    /// Baud-rate divider.
    pub const BAUDDIV: Register = Register::at(BASE + 0x10);
}

/// CMSDK APB timer 0, at 0x4000_0000.
pub mod timer0 {
    use super::Register;

    const BASE: usize = 0x4000_0000;
    /// Control (enable).
    pub const CTRL: Register = Register::at(BASE);
    /// The current count.
    pub const VALUE: Register = Register::at(BASE + 0x04);
    /// The value the counter restarts from.
    pub const RELOAD: Register = Register::at(BASE + 0x08);
}

/// The FPGA IO block, at 0x4002_8000.
pub mod fpgaio {
    use super::Register;

    /// The user LEDs, one bit each.
    pub const LED: Register = Register::at(0x4002_8000);
}
