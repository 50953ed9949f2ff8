//! The board's memory-mapped registers, as [`Register`] and [`Register8`] values only this
//! module can build: one constant for each register of QEMU's `virt` machine (its memory map
//! in QEMU's `hw/riscv/virt.c`; the devices' own layouts in the 16550's, the PLIC's and the
//! CLINT's specifications) that the firmware uses. Safe code elsewhere names a constant and
//! reads or writes it; it cannot name an address, so it cannot reach memory through this
//! module.
//!
//! With `semihosting` (the trap) and `wait` (the interrupt enables), one of the board's
//! modules with `unsafe`. The argument for it is this module's invariant: **every
//! `Register` holds the address of a documented, always-mapped, 4-byte aligned 32-bit device
//! register, and every `Register8` that of a documented, always-mapped 8-bit one** — true
//! of every constant below, and no other register can exist, since the constructors are
//! private here and nothing else builds one.
//!
//! | device | base | registers used |
//! | --- | --- | --- |
//! | 16550 UART0 (`-serial`'s first) | `0x1000_0000` | bytes at offsets 0, 1, 5 |
//! | CLINT (hart 0) | `0x0200_0000` | `mtimecmp` at +`0x4000`, `mtime` at +`0xBFF8` |
//! | PLIC (hart 0, machine mode: context 0) | `0x0C00_0000` | UART0's priority, enable, threshold, claim |

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
        // 4-byte aligned 32-bit device register; a volatile read of it touches no memory the
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

/// An 8-bit device register of the board (the 16550's registers are bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Register8 {
    address: usize,
}

impl Register8 {
    /// The register at `address`: private, as [`Register::at`].
    const fn at(address: usize) -> Self {
        Self { address }
    }

    /// Reads the register.
    pub fn read(self) -> u8 {
        // SAFETY: by this module's invariant, `self.address` is a documented, always-mapped
        // 8-bit device register; a volatile read of it touches no memory the program holds.
        #[allow(unsafe_code)]
        unsafe {
            read_volatile(self.address as *const u8)
        }
    }

    /// Writes `value` to the register.
    pub fn write(self, value: u8) {
        // SAFETY: as for `read`; a write to a device register changes device state only.
        #[allow(unsafe_code)]
        unsafe {
            write_volatile(self.address as *mut u8, value)
        }
    }
}

/// The NS16550A UART0, at 0x1000_0000 (register stride 1, QEMU's `virt`), interrupt 10 at
/// the PLIC.
pub mod uart0 {
    use super::Register8;

    const BASE: usize = 0x1000_0000;
    /// Received byte (read, RBR), byte to send (write, THR).
    pub const DATA: Register8 = Register8::at(BASE);
    /// Interrupt enables (IER).
    pub const IER: Register8 = Register8::at(BASE + 1);
    /// Line status (LSR): data ready, transmitter empty.
    pub const LSR: Register8 = Register8::at(BASE + 5);
    /// LSR's bit 0: a received byte waits in DATA.
    pub const LSR_DATA_READY: u8 = 1 << 0;
    /// LSR's bit 5: the transmitter takes another byte.
    pub const LSR_THR_EMPTY: u8 = 1 << 5;
}

/// The CLINT's machine timer for hart 0, at 0x0200_0000: `mtime` counts at 10 MHz on `virt`
/// (QEMU runs it on the host's clock, whatever the emulated CPU's speed); the timer
/// interrupt is pending while `mtime ≥ mtimecmp`. Both are 64 bits, as two 32-bit halves.
pub mod clint {
    use super::Register;

    const BASE: usize = 0x0200_0000;
    /// `mtimecmp` of hart 0, low half.
    pub const MTIMECMP_LO: Register = Register::at(BASE + 0x4000);
    /// `mtimecmp` of hart 0, high half.
    pub const MTIMECMP_HI: Register = Register::at(BASE + 0x4004);
    /// `mtime`, low half.
    pub const MTIME_LO: Register = Register::at(BASE + 0xBFF8);
    /// `mtime`, high half.
    pub const MTIME_HI: Register = Register::at(BASE + 0xBFFC);
}

/// The PLIC, at 0x0C00_0000: the registers of UART0's source (10) and of context 0 (hart 0
/// in machine mode).
pub mod plic {
    use super::Register;

    const BASE: usize = 0x0C00_0000;
    /// UART0's interrupt source number on `virt`.
    pub const UART0_SOURCE: u32 = 10;
    /// UART0's priority (0 never interrupts).
    pub const UART0_PRIORITY: Register = Register::at(BASE + 4 * UART0_SOURCE as usize);
    /// Context 0's enables of sources 0–31, one bit each.
    pub const ENABLE: Register = Register::at(BASE + 0x2000);
    /// Context 0's priority threshold: sources at or below it do not interrupt.
    pub const THRESHOLD: Register = Register::at(BASE + 0x20_0000);
    /// Context 0's claim (read: the highest pending source, now claimed) and complete
    /// (write that source back).
    pub const CLAIM: Register = Register::at(BASE + 0x20_0004);
}
