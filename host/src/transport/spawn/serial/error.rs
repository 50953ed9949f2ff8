//! Why a serial port was refused, or its board did not answer: each error names the port
//! and the rule it broke.

use std::io;
use std::path::{Path, PathBuf};

use crate::transport::TransportError;

/// Why the serial placement could not use a port.
#[derive(Debug, thiserror::Error)]
pub enum SerialError {
    /// Nothing is at the path.
    #[error(
        "serial port {}: no such device (a port is a board's serial device, such as \
         /dev/ttyACM0 or /dev/ttyUSB0: is the board plugged in?)",
        .port.display()
    )]
    Missing {
        /// The path given.
        port: PathBuf,
    },
    /// The path is not a terminal device.
    #[error(
        "serial port {}: it is {kind}, not a terminal (a port must be a serial device, \
         which is a character device that takes terminal settings)",
        .port.display()
    )]
    NotATerminal {
        /// The path given.
        port: PathBuf,
        /// What it is instead ("a regular file", "a directory", ...).
        kind: &'static str,
    },
    /// This user may not read and write the port.
    #[error(
        "serial port {}: permission denied (a port must be readable and writable by this \
         user: on most systems, by members of the `dialout` group)",
        .port.display()
    )]
    Denied {
        /// The path given.
        port: PathBuf,
    },
    /// Another program (or another device of this one) holds the port.
    #[error(
        "serial port {}: busy (another program has it open and locked: a port serves one \
         device, for one program at a time)",
        .port.display()
    )]
    Busy {
        /// The path given.
        port: PathBuf,
    },
    /// The same port is given for two devices (by one path or two).
    #[error(
        "serial port {} is given twice (each device needs a port of its own)",
        .port.display()
    )]
    Twice {
        /// The path given the second time.
        port: PathBuf,
    },
    /// Not one port per device.
    #[error(
        "the serial placement needs one port per device: {devices} devices, {ports} ports \
         given"
    )]
    Count {
        /// Ports given.
        ports: usize,
        /// Devices to start.
        devices: usize,
    },
    /// A baud rate outside the range ports are set to.
    #[error("a baud rate of {baud}: a port is set to {min} to {max} baud")]
    Baud {
        /// The rate given.
        baud: u32,
        /// The slowest.
        min: u32,
        /// The fastest.
        max: u32,
    },
    /// The port could not be opened for another reason.
    #[error("serial port {}: cannot open it: {source}", .port.display())]
    Open {
        /// The path given.
        port: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The port refused raw mode at the baud rate (or its lock, or its flush).
    #[error(
        "serial port {}: cannot set it to raw mode at {baud} baud: {source}",
        .port.display()
    )]
    Configure {
        /// The path given.
        port: PathBuf,
        /// The rate asked for.
        baud: u32,
        /// Why.
        source: io::Error,
    },
    /// The board on the port did not answer its hello as the device firmware does (no
    /// answer, another protocol version, garbage).
    #[error(
        "serial port {}: device {replica} did not answer its hello as the tessera firmware \
         does: {source}",
        .port.display()
    )]
    Hello {
        /// The port.
        port: PathBuf,
        /// The replica the hello was for.
        replica: u32,
        /// What went wrong.
        source: Box<TransportError>,
    },
}

impl SerialError {
    /// The error for `port` that could not be looked at or opened.
    pub(super) fn opening(port: &Path, source: io::Error) -> Self {
        let port = port.to_path_buf();
        match source.kind() {
            io::ErrorKind::NotFound => Self::Missing { port },
            io::ErrorKind::PermissionDenied => Self::Denied { port },
            io::ErrorKind::ResourceBusy => Self::Busy { port },
            _ => Self::Open { port, source },
        }
    }

    /// The port named, if the error is about one.
    pub fn port(&self) -> Option<&Path> {
        match self {
            Self::Missing { port }
            | Self::NotATerminal { port, .. }
            | Self::Denied { port }
            | Self::Busy { port }
            | Self::Twice { port }
            | Self::Open { port, .. }
            | Self::Configure { port, .. }
            | Self::Hello { port, .. } => Some(port),
            Self::Count { .. } | Self::Baud { .. } => None,
        }
    }
}
