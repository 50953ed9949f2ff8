//! Waiting that costs the host nothing: the CPU sleeps (`wfi`) until an interrupt, and the
//! two interrupts that matter are enabled — UART0 receive (a byte arrived) and SysTick at
//! [`TICKS_PER_S`] (so that a wait with a deadline looks at the clock again within a tick).
//! QEMU stops emulating a sleeping CPU, so four QEMUs waiting for their host leave its
//! cores to the one that works; spinning on the UART's status register took a whole host
//! core each.
//!
//! The handlers do nothing but acknowledge: the interrupt's only job is to end the sleep,
//! and the code that slept looks at the UART itself.

use core::sync::atomic::{AtomicBool, Ordering};

use cortex_m::peripheral::syst::SystClkSource;
use cortex_m::peripheral::NVIC;
use cortex_m_rt::exception;

use super::mmio::uart0::{CTRL, INTCLEAR, STATE};

/// UART0's receive interrupt: IRQ 0 on the mps2 boards.
#[derive(Clone, Copy)]
struct Uart0Rx;

// SAFETY: 0 is UART0 RX's interrupt number on mps2-an385/an386 (Application Note 385's
// interrupt map, as QEMU wires it), a valid external interrupt.
#[allow(unsafe_code)]
unsafe impl cortex_m::interrupt::InterruptNumber for Uart0Rx {
    fn number(self) -> u16 {
        0
    }
}

const CTRL_RX_INTERRUPT: u32 = 1 << 3;
const STATE_RX_FULL: u32 = 1 << 1;
const INTERRUPT_RX: u32 = 1 << 1;

/// SysTick's rate: a sleep with a deadline looks at the clock at least this often. Bytes do
/// not wait for it (see [`sleep`]); each tick wakes every board's QEMU (at 1 kHz, four
/// sleeping boards took a sixth of a 2-core host's time, and the default job 9.4 s instead
/// of 7.6–8.0 s at 100 Hz).
const TICKS_PER_S: u32 = 100;

/// Set once both wake-ups are on: without them a sleep could last forever.
static AWAKENED: AtomicBool = AtomicBool::new(false);

/// Enables the wake-ups, UART0's receive interrupt and SysTick at [`TICKS_PER_S`], once the
/// UART is enabled. Without the core peripherals (taken elsewhere) waits keep spinning.
pub fn enable() {
    let Some(core) = cortex_m::Peripherals::take() else {
        return;
    };
    let mut systick = core.SYST;
    CTRL.write(CTRL.read() | CTRL_RX_INTERRUPT);
    systick.set_clock_source(SystClkSource::Core);
    systick.set_reload(super::CPU_HZ / TICKS_PER_S - 1);
    systick.clear_current();
    systick.enable_interrupt();
    systick.enable_counter();
    // SAFETY: the interrupt's handler (`DefaultHandler` below) only acknowledges it; no
    // critical section relies on it staying masked.
    #[allow(unsafe_code)]
    unsafe {
        NVIC::unmask(Uart0Rx)
    };
    AWAKENED.store(true, Ordering::Release);
}

/// True when a received byte waits in UART0.
pub fn byte_ready() -> bool {
    STATE.read() & STATE_RX_FULL != 0
}

/// Sleeps until the next interrupt (a byte, or the next tick) unless a byte is already
/// there. The look and the sleep run with interrupts masked: a byte whose interrupt comes
/// between them leaves it pending, and a pending interrupt ends `wfi` whatever the mask
/// (it is taken once the mask lifts), so no byte waits for the next tick.
pub fn sleep() {
    if AWAKENED.load(Ordering::Acquire) {
        cortex_m::interrupt::free(|_| {
            if !byte_ready() {
                cortex_m::asm::wfi();
            }
        });
    }
}

#[exception]
fn SysTick() {}

// Device interrupts: only UART0 receive is enabled. Acknowledged, so that its level drops
// until the next byte. cortex-m-rt requires this handler to be declared `unsafe`; it only
// writes one UART register.
#[allow(unsafe_code)]
#[exception]
unsafe fn DefaultHandler(_irq: i16) {
    INTCLEAR.write(INTERRUPT_RX);
}
