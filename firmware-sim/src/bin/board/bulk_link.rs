//! The firmware's link: frames on the board's UART, and bulk bytes through a host file (semihosting)
//! when QEMU's working folder holds one. The host writes the file before it sends a bulk
//! write and reads it after the reply to a bulk read, so the two never touch it at once.

// The self-test binary shares the board module but serves no link.
#![allow(dead_code)]

use core::convert::Infallible;

use tessera_firmware_sim::{Framed, Incoming, Messages};

use super::host_file::HostFile;
use super::Uart;

/// The UART framed, plus the bulk file if there is one.
pub struct UartWithFile<'f, const FRAME: usize> {
    /// The framed UART.
    pub framed: Framed<'f, Uart, FRAME>,
    /// The bulk window.
    pub file: Option<HostFile>,
}

impl<const FRAME: usize> Messages for UartWithFile<'_, FRAME> {
    type Error = Infallible;

    fn receive(&mut self, into: &mut [u8], wait: bool) -> Result<Incoming, Infallible> {
        self.framed.receive(into, wait)
    }

    /// Asleep until a byte arrives or the next tick (see `wait`): so up to a tick whatever
    /// `us` asks for, which only the step's reductions use, between looks at a deadline of
    /// seconds.
    fn receive_within(
        &mut self,
        into: &mut [u8],
        _us: u32,
    ) -> Result<Option<Incoming>, Infallible> {
        match self.framed.receive(into, false)? {
            Incoming::Idle => {
                super::wait::sleep();
                self.framed.receive(into, false).map(Some)
            }
            heard => Ok(Some(heard)),
        }
    }

    fn send(&mut self, body: &[u8]) -> Result<(), Infallible> {
        self.framed.send(body)
    }

    fn bulk_capacity(&self) -> usize {
        self.file.as_ref().map_or(0, HostFile::len)
    }

    fn receive_bulk(&mut self, into: &mut [u8]) -> Result<bool, Infallible> {
        Ok(self.file.as_mut().is_some_and(|file| file.read_start(into)))
    }

    fn send_bulk(&mut self, body: &[u8], bulk: &[u8]) -> Result<bool, Infallible> {
        // The bytes first: the host reads the file once the reply has arrived.
        let written = self
            .file
            .as_mut()
            .is_some_and(|file| file.write_start(bulk));
        if written {
            self.framed.send(body)?;
        }
        Ok(written)
    }
}
