//! The mps2-an385 and mps2-an386 boards (the same peripherals at the same addresses; the
//! AN386 image has a Cortex-M4F): the UART0 link (`uart`) and the busy LED, a real-time
//! clock on timer 0 (`timer`), a spinning delay, sleeping until a byte arrives (`wait`),
//! semihosting through `cortex-m-semihosting`, and a HardFault handler that ends QEMU with a
//! failing exit status. Its registers and their addresses are `mmio`'s.

mod mmio;
pub mod timer;
pub mod uart;
pub mod wait;

use cortex_m_rt::{exception, ExceptionFrame};
use cortex_m_semihosting::debug::{self, EXIT_FAILURE, EXIT_SUCCESS};

pub use cortex_m_rt::entry;
pub use timer::Timer0Clock as Timer;
pub use uart::{BusyLed, Uart0 as Uart};

/// Semihosting calls (`bkpt 0xAB`), as `cortex-m-semihosting` makes them.
pub mod semihosting {
    pub use cortex_m_semihosting::{nr, syscall1};

    /// A semihosting operation.
    pub type Number = usize;
}

/// QEMU's mps2 CPU clock, for busy-wait delays and SysTick.
const CPU_HZ: u32 = 25_000_000;

/// A delay that spins the CPU: only for short waits, since QEMU's emulated CPU runs at no
/// fixed speed (deadlines use [`timer::Timer0Clock`]).
pub struct SpinDelay;

/// Nanoseconds a CPU cycle takes (exactly: the clock divides a second into whole
/// nanoseconds), so that a delay is a 32-bit division: the Cortex-M3 divides 32 bits in
/// hardware, and 64 bits only by a routine of almost 900 bytes of its flash.
const NS_PER_CYCLE: u32 = 1_000_000_000 / CPU_HZ;
const _: () = assert!(NS_PER_CYCLE * CPU_HZ == 1_000_000_000);

impl embedded_hal::delay::DelayNs for SpinDelay {
    fn delay_ns(&mut self, ns: u32) {
        cortex_m::asm::delay((ns / NS_PER_CYCLE).max(1));
    }
}

/// Ends QEMU with `success`'s exit status.
pub fn exit(success: bool) -> ! {
    debug::exit(if success { EXIT_SUCCESS } else { EXIT_FAILURE });
    // Only reached without a semihosting host (real hardware): stop here.
    loop {
        cortex_m::asm::wfi();
    }
}

// cortex-m-rt requires the HardFault handler to be declared `unsafe`.
#[allow(unsafe_code)]
#[exception]
unsafe fn HardFault(frame: &ExceptionFrame) -> ! {
    defmt::error!("hard fault at pc {=u32:#x}", frame.pc());
    exit(false)
}
