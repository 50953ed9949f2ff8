//! Remote-buffer slots on devices, as core's [`RemoteSlots`] sees them: weights move
//! between host buffers and devices through the same layout code as everywhere else, and
//! their bytes through the channel's one data path (in place, in bulk or in chunks).

use tessera_core::transfer::RemoteSlots;
use tessera_core::wire::{Request, Target};

use super::{Channel, Span, TransportError};

/// Slot `slot` on each of `channels` (local replica `i` is `channels[i]`), all `bytes`
/// long: allocate them with [`ChannelSlots::allocate`]. Or any other byte range core's
/// layout code may treat as one: an on-device variable read in place
/// ([`ChannelSlots::variable`]).
#[derive(Debug)]
pub struct ChannelSlots<'c> {
    channels: &'c mut [Channel],
    target: Target,
    bytes: usize,
}

impl<'c> ChannelSlots<'c> {
    /// Allocates slot `slot` of `bytes` bytes on every channel.
    pub fn allocate(
        channels: &'c mut [Channel],
        slot: u16,
        bytes: usize,
    ) -> Result<Self, TransportError> {
        let size = u32::try_from(bytes).map_err(|_| TransportError::Overflow {
            what: "slot size",
            value: bytes,
        })?;
        for channel in channels.iter_mut() {
            channel.request(&Request::AllocSlot { slot, bytes: size })?;
        }
        Ok(Self::existing(channels, slot, bytes))
    }

    /// Slot `slot` already allocated with `bytes` bytes on every channel.
    pub fn existing(channels: &'c mut [Channel], slot: u16, bytes: usize) -> Self {
        Self {
            channels,
            target: Target::Slot(slot),
            bytes,
        }
    }

    /// The on-device variable `variable` (`bytes` held on every channel), read and written
    /// where it lies: no copy through a slot on the device.
    pub fn variable(channels: &'c mut [Channel], variable: u16, bytes: usize) -> Self {
        Self {
            channels,
            target: Target::Variable(variable),
            bytes,
        }
    }

    fn channel(&mut self, local: usize) -> Result<&mut Channel, TransportError> {
        let replicas = self.channels.len();
        self.channels
            .get_mut(local)
            .ok_or(TransportError::NoReplica { local, replicas })
    }
}

impl RemoteSlots for ChannelSlots<'_> {
    type Error = TransportError;

    fn slot_len(&self, local: usize) -> Result<usize, TransportError> {
        if local < self.channels.len() {
            Ok(self.bytes)
        } else {
            Err(TransportError::NoReplica {
                local,
                replicas: self.channels.len(),
            })
        }
    }

    fn write(&mut self, local: usize, at: usize, data: &[u8]) -> Result<(), TransportError> {
        let target = self.target;
        let channel = self.channel(local)?;
        let sent = channel.write(target, at, data, None)?;
        channel.confirm(sent)
    }

    fn zero(&mut self, local: usize, at: usize, len: usize) -> Result<(), TransportError> {
        let span = Span {
            target: self.target,
            offset: at,
            len,
        };
        let channel = self.channel(local)?;
        let sent = channel.write_spans(&[span], |_, bytes| bytes.fill(0))?;
        channel.confirm(sent)
    }

    fn read(&mut self, local: usize, at: usize, out: &mut [u8]) -> Result<(), TransportError> {
        let target = self.target;
        self.channel(local)?.read(target, at, out)
    }
}
