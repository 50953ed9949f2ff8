//! Waiting that costs the host nothing: the hart sleeps (`wfi`) until an interrupt is
//! pending, and the two that matter are enabled — UART0's, through the PLIC (a byte
//! arrived), and the CLINT's machine timer, armed [`TICKS_PER_S`] times a second before each
//! sleep (so that a wait with a deadline looks at the clock again within a tick). QEMU stops
//! emulating a sleeping hart, as it does a sleeping Cortex-M.
//!
//! Interrupts are never taken: `mstatus.MIE` stays clear (riscv-rt starts with it clear,
//! and the single-hart critical sections only restore what they found), and the enables
//! in `mie` only end a `wfi`, which waits for an interrupt pending and enabled in `mie`
//! whatever `mstatus.MIE` says — as the Arm boards' `wfi` does under a mask. So the look at
//! the UART and the sleep need no critical section: a byte that comes between them leaves
//! the external interrupt pending, and `wfi` returns at once. With no handler, the sleeper
//! acknowledges for itself: it claims and completes UART0's source at the PLIC before it
//! looks, so that a byte read since does not keep waking it.

use core::sync::atomic::{AtomicBool, Ordering};

use super::mmio::clint::{MTIMECMP_HI, MTIMECMP_LO, MTIME_HI, MTIME_LO};
use super::mmio::plic::{CLAIM, ENABLE, THRESHOLD, UART0_PRIORITY, UART0_SOURCE};
use super::mmio::uart0::{LSR, LSR_DATA_READY};

/// The tick's rate: a sleep with a deadline looks at the clock at least this often (the Arm
/// boards' SysTick rate). Bytes do not wait for it (see [`sleep`]).
const TICKS_PER_S: u32 = 100;
/// `mtime` ticks in one tick.
const TICK: u32 = super::timer::TICKS_PER_S / TICKS_PER_S;

/// Set once both wake-ups are on: without them a sleep could last forever.
static AWAKENED: AtomicBool = AtomicBool::new(false);

/// Enables the wake-ups, UART0's interrupt at the PLIC and the machine external and timer
/// interrupts in `mie`, once the UART's receive interrupt is enabled.
pub fn enable() {
    UART0_PRIORITY.write(1);
    ENABLE.write(ENABLE.read() | 1 << UART0_SOURCE);
    THRESHOLD.write(0);
    // SAFETY: enabling interrupt sources in `mie` takes no interrupt while `mstatus.MIE`
    // is clear, and nothing sets it (this module's rule): they only end a `wfi`, and no
    // critical section relies on them staying off.
    #[allow(unsafe_code)]
    unsafe {
        riscv::register::mie::set_mext();
        riscv::register::mie::set_mtimer();
    }
    AWAKENED.store(true, Ordering::Release);
}

/// True when a received byte waits in UART0.
pub fn byte_ready() -> bool {
    LSR.read() & LSR_DATA_READY != 0
}

/// Sleeps until the next interrupt (a byte, or the tick armed here) unless a byte is
/// already there.
pub fn sleep() {
    if !AWAKENED.load(Ordering::Acquire) {
        return;
    }
    // Acknowledge UART0 at the PLIC: it stays pending only for a byte not yet read (the
    // look below sees that one).
    let source = CLAIM.read();
    if source != 0 {
        CLAIM.write(source);
    }
    arm_tick();
    if !byte_ready() {
        riscv::asm::wfi();
    }
}

/// Sets `mtimecmp` one tick after now, which also clears a timer interrupt still pending.
fn arm_tick() {
    let now = loop {
        let high = MTIME_HI.read();
        let low = MTIME_LO.read();
        if MTIME_HI.read() == high {
            break u64::from(high) << 32 | u64::from(low);
        }
    };
    let at = now + u64::from(TICK);
    // The low half first to its largest value: no moment with a compare value earlier
    // than both the old and the new one (the RISC-V privileged specification's order).
    MTIMECMP_LO.write(u32::MAX);
    MTIMECMP_HI.write((at >> 32) as u32);
    MTIMECMP_LO.write(at as u32);
}
