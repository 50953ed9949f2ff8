//! A board flashed with the firmware, on a serial port: one port per device (a USB CDC-ACM
//! port such as `/dev/ttyACM0`, a USB-UART's `/dev/ttyUSB0`, a pseudo-terminal).
//!
//! # What the host does
//!
//! - **Checks every port before any opens** ([`check_ports`]): a baud rate within [`BAUD`],
//!   each port a character device, none given twice (two paths to one device count as one).
//! - **Opens a port under rules** ([`open_port`]): looked at before it is opened (a terminal
//!   is a character device, never a regular file: the `input` module's rule for the files a
//!   user names does not apply); opened read-write with `O_NOCTTY` (it never becomes this
//!   process's controlling terminal), `O_CLOEXEC` and `O_NONBLOCK` (no wait for a modem's
//!   carrier); the opened descriptor checked again (a character device, and a terminal);
//!   locked for this process (`flock`, as other serial tools lock a port, and `TIOCEXCL`,
//!   so that no other program opens it meanwhile): a port another program holds is
//!   [`SerialError::Busy`]. Then raw mode (`cfmakeraw`: 8 data bits, no parity, no echo, no
//!   translation), no flow control, the receiver on and the modem lines ignored, the baud
//!   rate set; `VMIN` 1 and `VTIME` 0, so a read returns as soon as a byte has arrived (the
//!   reader thread sleeps in `poll` until one does, or until the link is closed); anything
//!   the port held from before is flushed, and the descriptor made blocking again for
//!   writes. Every failure is a [`SerialError`] naming the port and the rule.
//! - **Then the QEMU placement's framed link** ([`Link::Framed`]): the same reader thread
//!   and frames, the same request protocol — retransmission, deadlines, and a silent device
//!   reported after every attempt (the host cannot see a board, as it cannot see inside an
//!   emulator: its liveness is [`Liveness::Unknown`]). The hello checks the protocol version
//!   and the replica; any failure of it names the port ([`SerialError::Hello`]).
//! - **No bulk window.** A board has no file the host writes for it: the link has no window,
//!   so the channel moves every byte in framed chunks ([`Channel::carries_bulk`] is false).
//!   The firmware runs a bulk request only when the host sends one, so it never touches a
//!   bulk file on this link.
//! - **A deadline the wire can keep** ([`wire_deadline`]): a frame of the device's largest
//!   size takes time to cross a slow line (2 KiB, the firmware's, take 0.18 s at 115200
//!   baud), so the channel allows for a request and its reply on the wire at the port's
//!   baud rate before it sends anything again.
//!
//! Closing the link (dropping its channel) wakes the reader thread, which closes the port,
//! and waits for it: the port can be opened again at once.
//!
//! # What a real board needs
//!
//! The firmware built for it, with a board module of its own — the firmware's `bin/board`
//! for QEMU's mps2 boards is the model: its UART (or USB CDC-ACM) as an `embedded-io` byte
//! link at the port's baud rate, a timer as the device's clock (its deadlines), a memory map
//! (`memory.x`: flash for the code, RAM for the arena the host's requests place arrays in)
//! and, optionally, a busy line. Nothing of semihosting: the mps2 module opens its bulk file
//! and writes its logs by semihosting, which traps on a board with no debugger attached. A
//! board's module has no host file (its link carries no bulk, as the host sends none) and
//! logs elsewhere (defmt over RTT) or not at all.
//!
//! # What has been tested
//!
//! The firmware under QEMU (`mps2-an386`) with UART0 on a pseudo-terminal (`-serial pty`),
//! opened through this placement as a board's port would be: the default training job,
//! session scenarios, and the errors (a missing port, a regular file, a busy port, a port
//! that answers garbage or nothing). Not a physical board: a pseudo-terminal ignores the
//! baud rate and loses no byte. Its speed there is QEMU's UART model's: the model takes a
//! byte only once the firmware has read the one before (its receive buffer is one byte), so
//! the host's bytes reach the firmware as slowly on a pty as on QEMU's socket without its
//! bulk file (the session bench prints both, beside the QEMU placement's).
//!
//! [`Link::Framed`]: super::Link::Framed
//! [`Liveness::Unknown`]: super::Liveness::Unknown
//! [`Channel::carries_bulk`]: crate::transport::Channel::carries_bulk

mod error;
mod port;

pub use error::SerialError;
pub(in crate::transport) use port::PortClosing;

use std::ops::RangeInclusive;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tessera_core::wire::Limits;

use super::{DeviceHandle, Link};
use crate::input::irregular_kind;
use crate::transport::DEFAULT_DEADLINE;

/// The baud rate when none is given: the common default of boards' serial consoles.
pub const DEFAULT_BAUD: u32 = 115_200;
/// The baud rates a port may be set to (a USB-UART's fastest is 12 Mbaud; 0 would hang
/// the line up).
pub const BAUD: RangeInclusive<u32> = 50..=12_000_000;

/// Checks, before any port is opened, that `baud` is within [`BAUD`] and that each of
/// `ports` is a character device given once.
pub fn check_ports(ports: &[PathBuf], baud: u32) -> Result<(), SerialError> {
    if !BAUD.contains(&baud) {
        return Err(SerialError::Baud {
            baud,
            min: *BAUD.start(),
            max: *BAUD.end(),
        });
    }
    let mut seen = Vec::with_capacity(ports.len());
    for port in ports {
        let meta = std::fs::metadata(port).map_err(|e| SerialError::opening(port, e))?;
        refuse_non_terminal(port, &meta)?;
        if seen.contains(&meta.rdev()) {
            return Err(SerialError::Twice { port: port.clone() });
        }
        seen.push(meta.rdev());
    }
    Ok(())
}

/// Refuses `port` unless its metadata says "character device" (what every terminal is).
fn refuse_non_terminal(port: &Path, meta: &std::fs::Metadata) -> Result<(), SerialError> {
    if meta.file_type().is_char_device() {
        return Ok(());
    }
    Err(SerialError::NotATerminal {
        port: port.to_path_buf(),
        kind: irregular_kind(meta).unwrap_or("a regular file"),
    })
}

/// The port of device `index` of this process's `count` devices: `ports[index]`, once the
/// ports are as many as the devices.
pub fn port_of(ports: &[PathBuf], count: usize, index: usize) -> Result<&Path, SerialError> {
    match ports.get(index) {
        Some(port) if ports.len() == count => Ok(port),
        _ => Err(SerialError::Count {
            ports: ports.len(),
            devices: count,
        }),
    }
}

/// A board on serial port `port` at `baud`, opened as the module doc says (after
/// [`check_ports`], which its caller runs once for all its ports).
pub(in crate::transport) fn serial(port: &Path, baud: u32) -> Result<Link, SerialError> {
    let (writer, reader, closing) = port::open_port(port, baud)?;
    Ok(Link::Framed {
        to: Box::new(writer),
        from: Box::new(reader),
        handle: DeviceHandle::Serial(closing),
    })
}

/// How long the oldest unanswered request waits on a line of `baud` before it is sent
/// again: the usual [`DEFAULT_DEADLINE`] beyond the time two of the device's largest frames
/// (`limits`) take on the wire each way, at ten bits a byte (8N1) — the request, and its
/// reply behind one the device was sending. A slow line would otherwise have every frame
/// sent again while it is still on its way. (The rest of the window waits behind the
/// oldest, whose deadline restarts with each reply.)
pub fn wire_deadline(baud: u32, limits: &Limits) -> Duration {
    let bits = 2 * 2 * u64::from(limits.max_frame) * 10;
    DEFAULT_DEADLINE + Duration::from_micros(bits * 1_000_000 / u64::from(baud.max(1)))
}

#[cfg(test)]
mod tests;
