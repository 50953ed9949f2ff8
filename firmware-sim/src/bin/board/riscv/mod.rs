//! QEMU's `virt` RISC-V machine (`qemu-system-riscv32 -machine virt -bios none`: one RV32
//! hart in machine mode, its RAM at 0x8000_0000 where QEMU loads the ELF and jumps to its
//! start): the 16550 UART0 link (`uart`), a real-time clock on the CLINT's `mtime`
//! (`timer`), a spinning delay on the same, sleeping until a byte arrives (`wait`), the
//! semihosting trap (`semihosting`), the register save and restore routines the compiler
//! calls in function prologues and epilogues (`save_restore`), and an exception handler
//! that ends QEMU with a failing exit status. Its registers and their addresses are
//! `mmio`'s.
//!
//! The target, `riscv32imac-unknown-none-elf`, has no FPU: the device's `f32` arithmetic
//! runs in compiler-builtins' software routines, as on the Cortex-M3 board.

mod mmio;
mod save_restore;
pub mod semihosting;
pub mod timer;
pub mod uart;
pub mod wait;

use riscv::register::{mcause, mepc};

pub use self::semihosting::exit;
pub use riscv_rt::entry;
pub use timer::MtimeClock as Timer;
pub use uart::{BusyLed, Uart0 as Uart};

use mmio::clint::MTIME_LO;

/// A delay that spins the hart on `mtime` (real time, whatever the emulated hart's speed).
pub struct SpinDelay;

/// Nanoseconds an `mtime` tick takes (exactly: the timer divides a second into whole
/// nanoseconds), so that a delay is a 32-bit division.
const NS_PER_TICK: u32 = 1_000_000_000 / timer::TICKS_PER_S;
const _: () = assert!(NS_PER_TICK * timer::TICKS_PER_S == 1_000_000_000);

impl embedded_hal::delay::DelayNs for SpinDelay {
    fn delay_ns(&mut self, ns: u32) {
        let ticks = (ns / NS_PER_TICK).max(1);
        let start = MTIME_LO.read();
        while MTIME_LO.read().wrapping_sub(start) < ticks {}
    }
}

/// Every trap: riscv-rt's trap entry calls `_dispatch_exception` for an exception (a fault,
/// an illegal instruction, a misaligned access) and `_dispatch_core_interrupt` for an
/// interrupt (none is ever taken: `wait` leaves `mstatus.MIE` clear). Either logs `mcause`
/// (its top bit set for an interrupt) and the faulting `pc` and ends QEMU with a failing
/// status, so that a crash is never mistaken for a pass (or for a hang until the test's
/// timeout). The two dispatchers are the firmware's, not riscv-rt's tables of named
/// handlers (its features `custom-exceptions` and `custom-interrupts`): every trap ends the
/// same way, and that saves 80 bytes of .text and 112 of .rodata (RISC-V firmware).
#[inline(never)]
fn trap() -> ! {
    defmt::error!(
        "trap: mcause {=usize:#x} at pc {=usize:#x}",
        mcause::read().bits(),
        mepc::read()
    );
    exit(false)
}

// SAFETY: exporting a symbol by name is the `unsafe` part: riscv-rt declares
// `_dispatch_exception` as `extern "C" fn(&TrapFrame, usize)` and calls it from its trap
// entry with the saved frame and the exception code, which is this signature (never
// returning is allowed); nothing else defines the name (riscv-rt's own is off by its
// `custom-exceptions` feature; a second definition would fail to link, not alias).
#[allow(unsafe_code)]
#[export_name = "_dispatch_exception"]
extern "C" fn exception(_frame: &riscv_rt::TrapFrame, _code: usize) -> ! {
    trap()
}

// SAFETY: as `exception`'s: riscv-rt declares `_dispatch_core_interrupt` as
// `extern "C" fn(usize)` and calls it from its trap entry with the interrupt code;
// riscv-rt's own is off by its `custom-interrupts` feature.
#[allow(unsafe_code)]
#[export_name = "_dispatch_core_interrupt"]
extern "C" fn interrupt(_code: usize) -> ! {
    trap()
}
