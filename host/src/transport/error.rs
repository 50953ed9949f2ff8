//! Why talking to a device failed: one typed case per way it can fail, each naming the
//! replica and the request where there is one.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::process::ExitStatus;

use tessera_core::wire::{ErrorCode, RequestKind, Target};

use super::ring::RingError;
use super::spawn::{self, FirmwareError};

/// Why a request, a step or a placement failed.
#[derive(Debug)]
pub enum TransportError {
    /// The link could not be read or written, or a pipe or socket could not be made.
    Io(io::Error),
    /// A program (a device process, QEMU, defmt-print) could not be started.
    Spawn {
        /// The replica it was to serve.
        replica: u32,
        /// The program.
        program: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The firmware for the QEMU placement is missing or is not the device firmware.
    Firmware(FirmwareError),
    /// The device closed its link.
    Closed {
        /// The replica.
        replica: u32,
    },
    /// A message ring to or from a device of a process share broke its rules (full,
    /// corrupt): the link is unusable.
    Ring {
        /// The replica.
        replica: u32,
        /// The rule broken.
        error: RingError,
    },
    /// A message under a request's number that is no reply to it (a contribution to a
    /// reduction).
    NotAReply {
        /// The replica.
        replica: u32,
        /// The request's number.
        seq: u32,
    },
    /// The device's process (or QEMU) exited before it answered.
    Exited {
        /// The replica.
        replica: u32,
        /// The program that ran it.
        program: &'static str,
        /// How it ended.
        status: ExitStatus,
    },
    /// Still working on a request past the deadline for one request (its busy line high,
    /// or its process on a core): busy, not dead.
    Busy {
        /// The replica.
        replica: u32,
        /// The request it is working on.
        request: RequestKind,
        /// How long it has been sent.
        waited: std::time::Duration,
    },
    /// The device's process is stopped (SIGSTOP, a debugger): it cannot answer until it is
    /// continued.
    Stopped {
        /// The replica.
        replica: u32,
        /// The request that went unanswered.
        request: RequestKind,
    },
    /// No reply after every attempt while the device was not working on anything: what it
    /// was sent does not reach it, or its answers do not reach the host.
    Timeout {
        /// The replica.
        replica: u32,
        /// The request that went unanswered.
        request: RequestKind,
        /// Attempts made.
        attempts: u32,
    },
    /// The device answered with an error.
    Device {
        /// The replica.
        replica: u32,
        /// The request.
        request: RequestKind,
        /// Why.
        code: ErrorCode,
    },
    /// The device speaks another protocol version.
    Version {
        /// The replica.
        replica: u32,
        /// The device's version.
        device: u16,
        /// Ours.
        host: u16,
    },
    /// The device answered with a reply of the wrong type for the request.
    UnexpectedReply {
        /// The replica.
        replica: u32,
        /// The request.
        request: RequestKind,
        /// The reply received, as text.
        reply: String,
    },
    /// A reply was claimed for a sequence number that is not in flight (never sent, or
    /// already claimed).
    NotInFlight {
        /// The replica.
        replica: u32,
        /// The sequence number.
        seq: u32,
    },
    /// A request does not fit the device's frame (the device would drop it unread).
    TooLarge {
        /// The replica.
        replica: u32,
        /// The request.
        request: RequestKind,
        /// Its encoded size.
        bytes: usize,
        /// The device's largest frame.
        max: usize,
    },
    /// A local replica index with no channel.
    NoReplica {
        /// The index asked for.
        local: usize,
        /// Channels there are.
        replicas: usize,
    },
    /// A size or offset that the protocol's 32-bit fields cannot carry.
    Overflow {
        /// What it is.
        what: &'static str,
        /// Its value.
        value: usize,
    },
    /// A device's memory outside what the host gives a device it places (checked before
    /// anything starts).
    DeviceMemory {
        /// Bytes asked for.
        bytes: usize,
        /// The fewest bytes a device is given.
        min: usize,
        /// The most.
        max: usize,
    },
    /// A device located a target's bytes outside the memory it shares with the host: a
    /// device that breaks its own layout, refused before a byte moves.
    OutsideMemory {
        /// The replica.
        replica: u32,
        /// The target.
        target: Target,
        /// Where its bytes would start.
        at: usize,
        /// How many were to move.
        len: usize,
        /// The shared memory's size.
        memory: usize,
    },
}

impl TransportError {
    /// True when the device's link is gone for good (closed, its process ended, its ring
    /// broken, its pipe or socket failed): the device will not answer again, whatever is
    /// retried. A busy, stopped or silent device may still.
    pub fn link_gone(&self) -> bool {
        matches!(
            self,
            Self::Closed { .. } | Self::Exited { .. } | Self::Ring { .. } | Self::Io(_)
        )
    }
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(e) => write!(f, "link error: {e}"),
            Self::Spawn {
                replica,
                program,
                source,
            } => write!(
                f,
                "device {replica}: cannot start {}: {source}",
                program.display()
            ),
            Self::Firmware(e) => e.fmt(f),
            Self::Closed { replica } => write!(f, "device {replica} closed its link"),
            Self::Ring { replica, error } => write!(f, "device {replica}'s message ring: {error}"),
            Self::NotAReply { replica, seq } => write!(
                f,
                "device {replica} sent a contribution to a reduction under request {seq}, \
                 where its reply was due"
            ),
            Self::Exited {
                replica,
                program,
                status,
            } => {
                write!(f, "device {replica} ({program}) exited ({status}) before it answered")?;
                if *program == spawn::QEMU {
                    f.write_str(": is the firmware the tessera device (tessera-firmware)?")?;
                }
                Ok(())
            }
            Self::Busy {
                replica,
                request,
                waited,
            } => write!(
                f,
                "device {replica} has been working on {request:?} for {:.1} s without answering: \
                 it is busy, not dead, but past the deadline for one request",
                waited.as_secs_f64()
            ),
            Self::Stopped { replica, request } => write!(
                f,
                "device {replica} is stopped (SIGSTOP or a debugger) and cannot answer {request:?}"
            ),
            Self::Timeout {
                replica,
                request,
                attempts,
            } => write!(
                f,
                "device {replica} did not answer {request:?} after {attempts} attempts"
            ),
            Self::Device {
                replica,
                request,
                code,
            } => write!(f, "device {replica} refused {request:?}: {code}"),
            Self::Version {
                replica,
                device,
                host,
            } => write!(
                f,
                "device {replica} speaks protocol version {device}, this host {host}"
            ),
            Self::UnexpectedReply {
                replica,
                request,
                reply,
            } => write!(f, "device {replica} answered {request:?} with {reply}"),
            Self::TooLarge {
                replica,
                request,
                bytes,
                max,
            } => write!(
                f,
                "a {request:?} frame of {bytes} bytes exceeds device {replica}'s maximum frame of {max} bytes"
            ),
            Self::NotInFlight { replica, seq } => write!(
                f,
                "request {seq} to device {replica} is not in flight (never sent, or its reply was claimed)"
            ),
            Self::NoReplica { local, replicas } => {
                write!(f, "no local replica {local} (there are {replicas})")
            }
            Self::Overflow { what, value } => {
                write!(f, "{what} {value} does not fit the protocol's 32 bits")
            }
            Self::DeviceMemory { bytes, min, max } => write!(
                f,
                "a device's memory is {min} to {max} bytes per replica, not {bytes}; \
                 nothing was started"
            ),
            Self::OutsideMemory {
                replica,
                target,
                at,
                len,
                memory,
            } => write!(
                f,
                "replica {replica} puts {len} bytes of {target} at {at}, outside the {memory} \
                 bytes of memory it shares with the host"
            ),
        }
    }
}

impl std::error::Error for TransportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io(e) | Self::Spawn { source: e, .. } => Some(e),
            Self::Firmware(e) => Some(e),
            Self::Ring { error, .. } => Some(error),
            Self::Device { code, .. } => Some(code),
            _ => None,
        }
    }
}

impl From<io::Error> for TransportError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

impl From<FirmwareError> for TransportError {
    fn from(e: FirmwareError) -> Self {
        Self::Firmware(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches a version mismatch reported without one of the two versions (the user
    /// cannot tell which side to rebuild).
    #[test]
    fn a_version_mismatch_names_both_versions() {
        let e = TransportError::Version {
            replica: 2,
            device: 9,
            host: 10,
        };
        let text = e.to_string();
        assert!(
            text.contains("version 9") && text.contains("host 10"),
            "{text}"
        );
    }
}
