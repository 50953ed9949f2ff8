//! A simulated device served from this host: the whole of a device thread and of the
//! `tessera device` child process.

use std::io::{self, Read, Write};

use tessera_firmware_sim::std_link::{NoPin, StdClock, StdLink};
use tessera_firmware_sim::{serve, CycleCounter, Device, ServeError, Server};

/// Frame capacity of host-placed devices (64 KiB chunks plus framing).
pub const HOST_FRAME: usize = 66 * 1024;

/// Serves a device for `replica` with `memory` bytes of arena on `reader`/`writer` until
/// the reader ends (the host went away), which returns `Ok`.
pub fn run_device(
    replica: u32,
    memory: usize,
    reader: impl Read + Send + 'static,
    writer: impl Write,
) -> Result<(), io::Error> {
    let mut arena = vec![0u8; memory];
    let cycles = CycleCounter::new();
    let mut device = Device::new(replica, &mut arena, HOST_FRAME, &cycles);
    // The server's buffers are large: keep them off the thread's stack.
    let mut server = Box::new(Server::<HOST_FRAME>::new());
    let mut link = StdLink::new(reader, writer);
    match serve(
        &mut server,
        &mut device,
        &mut link,
        &mut StdClock::new(),
        &mut NoPin,
    ) {
        Ok(()) => Ok(()),
        Err(ServeError::Link(e)) => Err(e),
        Err(e) => Err(io::Error::other(e)),
    }
}
