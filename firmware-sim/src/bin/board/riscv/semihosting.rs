//! Semihosting on RISC-V: the host's services (a file, the exit) through the `semihosting`
//! crate's trap — `ebreak` between the two marker instructions the RISC-V semihosting
//! specification names, which QEMU catches with `-semihosting-config enable=on` — with the
//! operations and parameter blocks of the Arm semihosting specification, as on the Arm
//! boards (`cortex-m-semihosting`'s names: [`nr`], [`syscall1`]).
//!
//! With `mmio` and `wait`, one of the board's modules with `unsafe`: [`syscall1`] is
//! `unsafe` to use, with the contract of the trap (the addresses the parameter passes must
//! be live buffers); the host file's calls argue it from the slices they hold.

use semihosting::sys::arm_compat::syscall::{syscall, OperationNumber, ParamRegW};

/// A semihosting operation.
pub type Number = OperationNumber;

/// The operations the host file makes, and the mode it opens the file in.
pub mod nr {
    use super::Number;

    /// SYS_OPEN.
    pub const OPEN: Number = Number::SYS_OPEN;
    /// SYS_WRITE.
    pub const WRITE: Number = Number::SYS_WRITE;
    /// SYS_READ.
    pub const READ: Number = Number::SYS_READ;
    /// SYS_SEEK.
    pub const SEEK: Number = Number::SYS_SEEK;
    /// SYS_FLEN.
    pub const FLEN: Number = Number::SYS_FLEN;

    /// SYS_OPEN's modes.
    pub mod open {
        /// "r+b": reading and writing an existing file, in binary.
        pub const RW_BINARY: usize = 3;
    }
}

/// Issues semihosting call `number` with `parameter`: a word, or the address of the
/// operation's parameter block.
///
/// # Safety
///
/// `parameter` must be what `number` reads, and every address it passes (itself, or in its
/// block) must be that of a live buffer of the length given beside it, readable (and
/// writable, for a buffer the call fills) for the whole call.
#[allow(unsafe_code)]
#[inline(never)]
pub unsafe fn syscall1(number: Number, parameter: usize) -> usize {
    // SAFETY: this function's contract is the trap's.
    unsafe { syscall(number, ParamRegW::usize(parameter)) }.usize()
}

/// Ends QEMU: exit status 0 for `success`, 1 otherwise (SYS_EXIT_EXTENDED, then SYS_EXIT).
pub fn exit(success: bool) -> ! {
    semihosting::process::exit(if success { 0 } else { 1 })
}
