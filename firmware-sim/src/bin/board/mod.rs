//! What both firmware binaries need from the board they run on, behind one interface:
//!
//! - [`Uart`] (`take()`, then `embedded-io`'s `Read`, `ReadReady` and `Write`): the link to
//!   the host, asleep while it waits for a byte (the board's `wait`);
//! - [`BusyLed`]: lit while the device serves a request, where the board has an LED;
//! - [`Timer`] (`take()`, then tessera's `Clock`): real-time milliseconds for deadlines;
//! - [`SpinDelay`]: a short busy wait;
//! - [`exit`]: ends QEMU with a passing or a failing exit status;
//! - [`entry`]: the runtime's attribute for `main`;
//! - [`host_file`] and [`bulk_link`]: the bulk window, a file of the machine running QEMU
//!   read and written by semihosting, the same on every board;
//!
//! and the handlers that end QEMU with a failing exit status, so that a crash is never
//! mistaken for a pass: the panic handler here, the fault handler in each board.
//!
//! # Boards
//!
//! | folder | QEMU machine | targets |
//! | --- | --- | --- |
//! | `arm/` | `mps2-an386` (Cortex-M4F), `mps2-an385` (Cortex-M3) | `thumbv7em-none-eabihf`, `thumbv7m-none-eabi` |
//! | `riscv/` | `virt` (RV32IMAC) | `riscv32imac-unknown-none-elf` |
//!
//! A board is a folder of a few small files, chosen below by its target: `mmio` (its
//! registers, the only addresses the firmware names), `uart`, `timer`, `wait` (`sleep`,
//! and `enable` for the UART's `take`), its `semihosting` (`nr`, `syscall1` and the
//! operation type `Number`), and a `mod.rs` with the items above and its fault handler.
//! Its memory layout is firmware-sim's build script's, and QEMU's machine for it
//! `qemu-run.sh`'s and the host's QEMU placement's. The `unsafe` of every board stays in
//! `mmio`, `wait`, semihosting and the fault handler — and on RISC-V in `save_restore`, the
//! register save and restore routines `-C target-feature=+save-restore` calls (about 2 KiB
//! less code; compiler-builtins lacks them) — each item allowing it with the SAFETY
//! argument beside it.

pub mod bulk_link;
pub mod host_file;

#[cfg(target_arch = "arm")]
mod arm;
#[cfg(target_arch = "arm")]
use arm as chip;

#[cfg(target_arch = "riscv32")]
mod riscv;
#[cfg(target_arch = "riscv32")]
use self::riscv as chip;

pub use chip::{entry, exit, BusyLed, Timer, Uart};
// Only the self-test spins on its own; the firmware waits through its `Timer`.
#[allow(unused_imports)]
pub use chip::SpinDelay;
use chip::{semihosting, wait};
use defmt_semihosting as _;

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    // The place, not the message: formatting the message links `core::fmt` (about 1.5 KiB
    // of .text, which the Cortex-M3 build has no room for); file and line find it.
    match info.location() {
        Some(at) => defmt::error!("panic at {=str}:{=u32}", at.file(), at.line()),
        None => defmt::error!("panic"),
    }
    exit(false)
}
