//! A serial port opened and set up as the module doc says, and its two ends: a writer, and a
//! reader that a [`PortClosing`] ends.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;
use std::time::Duration;

use rustix::event::{eventfd, poll, EventfdFlags, PollFd, PollFlags};
use rustix::fs::{fcntl_getfl, fcntl_setfl, flock, FlockOperation, OFlags};
use rustix::io::Errno;
use rustix::termios::{
    self, ControlModes, InputModes, OptionalActions, QueueSelector, SpecialCodeIndex,
};

use super::{refuse_non_terminal, SerialError};

/// How long closing a link waits for its reader thread to let go of the port.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// An open port, shared by its writer and its reader; closed when both are gone.
struct Port {
    file: File,
}

impl Drop for Port {
    fn drop(&mut self) {
        // Lets other programs open it again (the exclusive flag can outlive this process's
        // descriptor: a pseudo-terminal's does, while its other end is open).
        let _ = termios::ioctl_tiocnxcl(&self.file);
    }
}

/// Writes to the port; a write blocks until the port has taken the bytes.
pub(in crate::transport) struct PortWriter(Arc<Port>);

impl Write for PortWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&self.0.file).write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Reads the port until it fails or the link is closed (then a read returns 0: the end of
/// the link).
pub(in crate::transport) struct PortReader {
    port: Arc<Port>,
    /// Readable once the link is closed.
    stop: Arc<OwnedFd>,
    /// Dropped with the reader: tells the closing link that this end has let go.
    _gone: SyncSender<()>,
}

impl Read for PortReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut fds = [
                PollFd::new(&self.port.file, PollFlags::IN),
                PollFd::new(&*self.stop, PollFlags::IN),
            ];
            match poll(&mut fds, None) {
                Ok(_) => {}
                Err(Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
            if !fds[1].revents().is_empty() {
                return Ok(0);
            }
            if fds[0].revents().is_empty() {
                continue;
            }
            // Readable, hung up or failed: the read says which (a hang-up reads as the end
            // of the link, or fails).
            match rustix::io::read(&self.port.file, &mut *buf) {
                Err(Errno::INTR | Errno::AGAIN) => continue,
                done => return done.map_err(io::Error::from),
            }
        }
    }
}

/// What closes a serial link ([`PortClosing::close`]).
pub(in crate::transport) struct PortClosing {
    stop: Arc<OwnedFd>,
    gone: Receiver<()>,
}

impl PortClosing {
    /// Wakes the link's reader thread, which ends and lets go of the port, and waits (a
    /// moment at most) until it has: the port can then be opened again.
    pub(in crate::transport) fn close(&self) {
        let _ = rustix::io::write(&*self.stop, &1u64.to_ne_bytes());
        // Disconnected once the reader is dropped (a reader no thread took is dropped with
        // the link's other parts, before its handle).
        let _ = self.gone.recv_timeout(CLOSE_WAIT);
    }
}

/// Opens `port` at `baud` under the module's rules: its writer, its reader, and what closes
/// them.
pub(super) fn open_port(
    port: &Path,
    baud: u32,
) -> Result<(PortWriter, PortReader, PortClosing), SerialError> {
    let opening = |e| SerialError::opening(port, e);
    refuse_non_terminal(port, &std::fs::metadata(port).map_err(opening)?)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags((OFlags::NOCTTY | OFlags::NONBLOCK).bits() as i32)
        .open(port)
        .map_err(opening)?;
    // What was opened, not what the path named a moment ago.
    refuse_non_terminal(port, &file.metadata().map_err(opening)?)?;
    if !termios::isatty(&file) {
        return Err(SerialError::NotATerminal {
            port: port.to_path_buf(),
            kind: "a character device that is not a terminal",
        });
    }
    match flock(&file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(Errno::WOULDBLOCK) => {
            return Err(SerialError::Busy {
                port: port.to_path_buf(),
            })
        }
        Err(e) => return Err(configure_error(port, baud, e)),
    }
    let port_file = Arc::new(Port { file });
    set_up(&port_file.file, baud).map_err(|e| configure_error(port, baud, e))?;
    let stop = Arc::new(eventfd(0, EventfdFlags::CLOEXEC).map_err(|e| opening(e.into()))?);
    let (gone_tx, gone) = mpsc::sync_channel(0);
    let reader = PortReader {
        port: Arc::clone(&port_file),
        stop: Arc::clone(&stop),
        _gone: gone_tx,
    };
    let closing = PortClosing { stop, gone };
    Ok((PortWriter(port_file), reader, closing))
}

fn configure_error(port: &Path, baud: u32, e: Errno) -> SerialError {
    SerialError::Configure {
        port: port.to_path_buf(),
        baud,
        source: e.into(),
    }
}

/// Exclusive use, raw mode at `baud` (8N1, no flow control, the modem lines ignored),
/// reads that return once a byte has arrived, the port's old bytes flushed, and writes that
/// block.
fn set_up(file: &File, baud: u32) -> Result<(), Errno> {
    termios::ioctl_tiocexcl(file)?;
    let mut settings = termios::tcgetattr(file)?;
    settings.make_raw();
    settings.input_modes -= InputModes::IXOFF | InputModes::IXANY;
    settings.control_modes -= ControlModes::CSTOPB | ControlModes::CRTSCTS;
    settings.control_modes |= ControlModes::CLOCAL | ControlModes::CREAD;
    settings.special_codes[SpecialCodeIndex::VMIN] = 1;
    settings.special_codes[SpecialCodeIndex::VTIME] = 0;
    settings.set_speed(baud)?;
    termios::tcsetattr(file, OptionalActions::Now, &settings)?;
    termios::tcflush(file, QueueSelector::IOFlush)?;
    let flags = fcntl_getfl(file)?;
    fcntl_setfl(file, flags - OFlags::NONBLOCK)
}
