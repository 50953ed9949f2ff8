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

/// Every exception (riscv-rt calls it for any without a handler of its own): a fault, an
/// illegal instruction, a misaligned access. It logs the cause and the faulting `pc` and
/// ends QEMU with a failing status, so that a crash is never mistaken for a pass (or for a
/// hang until the test's timeout).
// SAFETY: exporting a symbol by name is the `unsafe` part: riscv-rt declares
// `ExceptionHandler` as `extern "C" fn(&TrapFrame) -> !` and calls it from its trap entry
// with the saved frame, which is exactly this signature; nothing else defines the name
// (a second definition would fail to link, not alias).
#[allow(unsafe_code)]
#[export_name = "ExceptionHandler"]
extern "C" fn exception(_frame: &riscv_rt::TrapFrame) -> ! {
    defmt::error!(
        "exception {=usize} at pc {=usize:#x}",
        mcause::read().code(),
        mepc::read()
    );
    exit(false)
}
