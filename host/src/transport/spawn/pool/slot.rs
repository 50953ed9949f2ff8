//! One pooled device with everything serving it takes ([`Slot`]): its memory, its server
//! and kept replies, its queues of mail and replies, and its busy line.
//!
//! # Rules
//!
//! - **Its memory**: the mapping the host maps too, when there is one; else memory of its
//!   own, allocated whole up front (refused, naming the device, when the host cannot).
//! - **Replies as the host's links keep them**: frames of [`HOST_FRAME`] bytes, a window
//!   of [`HOST_WINDOW`] kept replies, on the heap (a megabyte per device).
//! - Only a server reaches a slot, under its member's lock (the pool's rules).

use std::io;
use std::sync::mpsc::{self, Sender};

use tessera_firmware_sim::{Device, Memory, Server};

use crate::transport::board::BusyLine;
use crate::transport::device::{HOST_FRAME, HOST_WINDOW};
use crate::transport::queue::{Message, Queue};
use crate::transport::shared::SharedMemory;

/// One device with everything serving it takes: its memory, its server (and kept
/// replies), its queue of mail and replies, and its busy line.
pub(super) struct Slot {
    /// On the heap: a device is some 400 KiB, and each move of a slot built on the stack
    /// (a slot is made, put in its member, the member in the pool) copied it there — three
    /// or four copies at once on the thread that opens the pool.
    pub(super) device: Box<Device<'static>>,
    pub(super) server: Box<HostServer>,
    pub(super) link: Queue,
    pub(super) busy: BusyLine,
    pub(super) replica: u32,
}

/// A pooled device's server: frames and kept replies as the host's links have them.
type HostServer = Server<'static, HOST_FRAME, HOST_WINDOW>;

impl Slot {
    /// Device `replica` with `bytes` of memory (`shared`: the mapping the host maps too),
    /// its mail on `mail` and its replies to `replies`.
    pub(super) fn new(
        replica: u32,
        shared: Option<SharedMemory>,
        bytes: usize,
        mail: mpsc::Receiver<Message>,
        replies: Sender<Message>,
    ) -> Result<Self, io::Error> {
        // The kept replies (a megabyte per device) live on the heap.
        let kept: Box<[[u8; HOST_FRAME]; HOST_WINDOW]> = vec![[0u8; HOST_FRAME]; HOST_WINDOW]
            .into_boxed_slice()
            .try_into()
            .map_err(|_| io::Error::other("reply storage of the wrong size"))?;
        let server = Box::new(Server::owning(kept));
        let memory: Box<dyn Memory + Send> = match shared {
            Some(shared) => Box::new(shared),
            None => {
                let mut own = Vec::new();
                own.try_reserve_exact(bytes).map_err(|_| {
                    io::Error::new(
                        io::ErrorKind::OutOfMemory,
                        format!(
                            "device {replica}: the host cannot allocate {bytes} bytes of memory"
                        ),
                    )
                })?;
                own.resize(bytes, 0u8);
                Box::new(own)
            }
        };
        Ok(Self {
            device: Box::new(Device::owning(replica, memory, server.link())),
            server,
            link: Queue::new(mail, replies),
            busy: BusyLine::default(),
            replica,
        })
    }
}
