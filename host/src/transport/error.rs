//! Why talking to a device failed: one typed case per way it can fail, each naming the
//! replica and the request where there is one.

use std::io;
use std::path::PathBuf;
use std::process::ExitStatus;

use tessera_core::wire::{ErrorCode, RequestKind, Target};

use super::ring::RingError;
use super::spawn::{self, FirmwareError, SerialError};

/// Why a request, a step or a placement failed.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The link could not be read or written, or a pipe or socket could not be made.
    #[error("link error: {0}")]
    Io(#[from] io::Error),
    /// A program (a device process, QEMU, defmt-print) could not be started.
    #[error("device {replica}: cannot start {}: {source}", .program.display())]
    Spawn {
        /// The replica it was to serve.
        replica: u32,
        /// The program.
        program: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The firmware for the QEMU placement is missing or is not the device firmware.
    #[error("{0}")]
    Firmware(#[from] FirmwareError),
    /// A serial port was refused, or the board on it did not answer its hello (the error
    /// names the port).
    #[error("{0}")]
    Serial(#[from] SerialError),
    /// The device closed its link.
    #[error("device {replica} closed its link")]
    Closed {
        /// The replica.
        replica: u32,
    },
    /// A message ring to or from a device of a process share broke its rules (full,
    /// corrupt): the link is unusable.
    #[error("device {replica}'s message ring: {error}")]
    Ring {
        /// The replica.
        replica: u32,
        /// The rule broken.
        #[source]
        error: RingError,
    },
    /// A message under a request's number that is no reply to it (a contribution to a
    /// reduction).
    #[error(
        "device {replica} sent a contribution to a reduction under request {seq}, where its \
         reply was due"
    )]
    NotAReply {
        /// The replica.
        replica: u32,
        /// The request's number.
        seq: u32,
    },
    /// The device's process (or QEMU) exited before it answered.
    #[error(
        "device {replica} ({program}) exited ({status}) before it answered{}",
        qemu_hint(.program)
    )]
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
    #[error(
        "device {replica} has been working on {request:?} for {:.1} s without answering: it is \
         busy, not dead, but past the deadline for one request",
        .waited.as_secs_f64()
    )]
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
    #[error("device {replica} is stopped (SIGSTOP or a debugger) and cannot answer {request:?}")]
    Stopped {
        /// The replica.
        replica: u32,
        /// The request that went unanswered.
        request: RequestKind,
    },
    /// No reply after every attempt while the device was not working on anything: what it
    /// was sent does not reach it, or its answers do not reach the host.
    #[error("device {replica} did not answer {request:?} after {attempts} attempts")]
    Timeout {
        /// The replica.
        replica: u32,
        /// The request that went unanswered.
        request: RequestKind,
        /// Attempts made.
        attempts: u32,
    },
    /// The device answered with an error.
    #[error("device {replica} refused {request:?}: {code}")]
    Device {
        /// The replica.
        replica: u32,
        /// The request.
        request: RequestKind,
        /// Why.
        #[source]
        code: ErrorCode,
    },
    /// The device speaks another protocol version.
    #[error("device {replica} speaks protocol version {device}, this host {host}")]
    Version {
        /// The replica.
        replica: u32,
        /// The device's version.
        device: u16,
        /// Ours.
        host: u16,
    },
    /// The device answered with a reply of the wrong type for the request.
    #[error("device {replica} answered {request:?} with {reply}")]
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
    #[error(
        "request {seq} to device {replica} is not in flight (never sent, or its reply was \
         claimed)"
    )]
    NotInFlight {
        /// The replica.
        replica: u32,
        /// The sequence number.
        seq: u32,
    },
    /// A request does not fit the device's frame (the device would drop it unread).
    #[error(
        "a {request:?} frame of {bytes} bytes exceeds device {replica}'s maximum frame of {max} \
         bytes"
    )]
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
    #[error("no local replica {local} (there are {replicas})")]
    NoReplica {
        /// The index asked for.
        local: usize,
        /// Channels there are.
        replicas: usize,
    },
    /// A size or offset that the protocol's 32-bit fields cannot carry.
    #[error("{what} {value} does not fit the protocol's 32 bits")]
    Overflow {
        /// What it is.
        what: &'static str,
        /// Its value.
        value: usize,
    },
    /// A device's memory outside what the host gives a device it places (checked before
    /// anything starts).
    #[error(
        "a device's memory is {min} to {max} bytes per replica, not {bytes}; nothing was started"
    )]
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
    #[error(
        "replica {replica} puts {len} bytes of {target} at {at}, outside the {memory} bytes of \
         memory it shares with the host"
    )]
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

/// [`TransportError::Exited`]'s hint for QEMU: a firmware that is not the device's.
fn qemu_hint(program: &str) -> &'static str {
    if spawn::QEMUS.contains(&program) {
        ": is the firmware the tessera device (tessera-firmware)?"
    } else {
        ""
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
