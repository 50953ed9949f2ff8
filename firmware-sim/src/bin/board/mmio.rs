//! Volatile access to the board's memory-mapped registers.
//!
//! With `host_file` (semihosting calls), one of the board's two modules with `unsafe`:
//! single aligned 32-bit accesses to
//! registers of the mps2-an385 board (UART0, timer 0, FPGA IO). Callers name registers by
//! the constants of their own module; every address used is one the board documents.

use core::ptr::{read_volatile, write_volatile};

/// Reads the 32-bit register at `address`.
pub fn read(address: usize) -> u32 {
    // SAFETY: every caller passes one of the documented, always-mapped UART, timer or FPGA
    // registers of the board; they are 4-byte aligned and reading them has no effect on
    // memory.
    #[allow(unsafe_code)]
    unsafe {
        read_volatile(address as *const u32)
    }
}

/// Writes the 32-bit register at `address`.
pub fn write(address: usize, value: u32) {
    // SAFETY: as for `read`; writes to these registers change device state only, never
    // memory the program uses.
    #[allow(unsafe_code)]
    unsafe {
        write_volatile(address as *mut u32, value)
    }
}
