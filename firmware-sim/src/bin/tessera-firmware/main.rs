//! The simulated accelerator as bare-metal firmware for QEMU's mps2-an386 (Cortex-M4F) or mps2-an385 (Cortex-M3):
//! one device serving its replica on UART0, with bulk bytes through `bulk.bin` in QEMU's
//! working folder (semihosting) when the host made one. Logs go out as defmt over
//! semihosting; a panic or a HardFault ends QEMU with a failing exit status.
#![no_std]
#![no_main]
#![deny(unsafe_code)]
#![deny(missing_docs)]

#[path = "../board/mod.rs"]
mod board;

// The custom kernel example's kernel (feature `custom-kernel`): its own file, not a copy.
#[cfg(feature = "custom-kernel")]
#[path = "../../../examples/kernels/double.rs"]
mod double;

use board::entry;
use static_cell::ConstStaticCell;
use tessera_firmware_sim::{serve_messages, CycleCounter, Device, Framed, Framing, Server};

/// Frame capacity: bulk data moves in chunks of a little under 2 KiB.
const FRAME: usize = 2048;
/// Requests the host may have in flight (replies kept for retries).
const WINDOW: usize = 8;
/// Device memory: most of the board's 4 MiB of data RAM.
const ARENA: usize = 3 << 20;

/// The firmware's buffers: the device's memory, the replies kept for retries, the link's
/// frames. Const-initialised, they live in .bss from the start, never on the stack; in one
/// cell, so that taking them is one piece of code (each cell's `take` is some 56 bytes).
struct Buffers {
    memory: [u8; ARENA],
    replies: [[u8; FRAME]; WINDOW],
    framing: Framing<FRAME>,
}
static BUFFERS: ConstStaticCell<Buffers> = ConstStaticCell::new(Buffers {
    memory: [0; ARENA],
    replies: [[0; FRAME]; WINDOW],
    framing: Framing::new(),
});
static CYCLES: CycleCounter = CycleCounter::new();
/// The host file bulk bytes pass through, relative to QEMU's working folder.
const BULK_FILE: &str = "bulk.bin\0";

#[entry]
fn main() -> ! {
    let Buffers {
        memory,
        replies,
        framing,
    } = BUFFERS.take();
    // The server itself (four frames) lives on main's stack; its replies in .bss.
    let server = &mut Server::new(replies);
    // The host assigns the replica id in its hello.
    let device = Device::new(0, memory, server.link(), &CYCLES);
    #[cfg(feature = "custom-kernel")]
    let device = device.with_functions(double::KERNELS);
    let mut device = device;
    let mut uart = board::Uart::take();
    let file = board::host_file::HostFile::open(BULK_FILE);
    defmt::info!(
        "tessera device up: {} bytes of memory, {}-byte frames, {} bytes of bulk window",
        ARENA,
        FRAME,
        file.as_ref().map_or(0, board::host_file::HostFile::len)
    );
    let mut link = board::bulk_link::UartWithFile {
        framed: Framed {
            link: &mut uart,
            framing,
        },
        file,
    };
    // A UART has no end of file: the loop only returns on a failure.
    let _ = serve_messages(
        server,
        &mut device,
        &mut link,
        &mut board::Timer::take(),
        &mut board::BusyLed,
    );
    defmt::error!("serve loop failed");
    board::exit(false)
}
