//! Remote-buffer slots on devices, as core's [`RemoteSlots`] sees them: weights move
//! between host buffers and devices through the same layout code as everywhere else, and
//! their bytes through the channel's one data path (in place, in bulk or in chunks).

use tessera_core::transfer::RemoteSlots;
use tessera_core::wire::{MemoryRequest, Request, Target};

use super::{Channel, Seat, Span, TransportError};

/// Slot `slot` of each local replica (replica `i` at `seats[i]`: its channel, and its lane
/// there, whose own slot it is), all `bytes` long: allocate them with
/// [`ChannelSlots::allocate`]. Or any other byte range core's layout code may treat as
/// one: an on-device variable read in place ([`ChannelSlots::variable`]).
#[derive(Debug)]
pub struct ChannelSlots<'c> {
    channels: &'c mut [Channel],
    seats: Vec<Seat>,
    target: Target,
    bytes: usize,
}

impl<'c> ChannelSlots<'c> {
    /// Allocates slot `slot` of `bytes` bytes for every replica of `channels`.
    pub fn allocate(
        channels: &'c mut [Channel],
        slot: u16,
        bytes: usize,
    ) -> Result<Self, TransportError> {
        let size = u32::try_from(bytes).map_err(|_| TransportError::Overflow {
            what: "slot size",
            value: bytes,
        })?;
        for seat in Seat::all(channels) {
            let slot = seat.id(slot)?;
            channels[seat.channel].request(&Request::Memory(MemoryRequest::AllocSlot {
                slot,
                bytes: size,
            }))?;
        }
        Ok(Self::existing(channels, slot, bytes))
    }

    /// Slot `slot` already allocated with `bytes` bytes for every replica of `channels`.
    pub fn existing(channels: &'c mut [Channel], slot: u16, bytes: usize) -> Self {
        Self {
            seats: Seat::all(channels),
            channels,
            target: Target::Slot(slot),
            bytes,
        }
    }

    /// The on-device variable `variable` (`bytes` held by every replica of `channels`),
    /// read and written where it lies: no copy through a slot on the device.
    pub fn variable(channels: &'c mut [Channel], variable: u16, bytes: usize) -> Self {
        Self {
            seats: Seat::all(channels),
            channels,
            target: Target::Variable(variable),
            bytes,
        }
    }

    /// Local replica `local`'s channel, and the target as its lane's.
    fn channel(&mut self, local: usize) -> Result<(&mut Channel, Target), TransportError> {
        let replicas = self.seats.len();
        let seat = *(self.seats.get(local)).ok_or(TransportError::NoReplica { local, replicas })?;
        let target = seat.target(self.target)?;
        let channel = (self.channels.get_mut(seat.channel))
            .ok_or(TransportError::NoReplica { local, replicas })?;
        Ok((channel, target))
    }
}

impl RemoteSlots for ChannelSlots<'_> {
    type Error = TransportError;

    fn slot_len(&self, local: usize) -> Result<usize, TransportError> {
        if local < self.seats.len() {
            Ok(self.bytes)
        } else {
            Err(TransportError::NoReplica {
                local,
                replicas: self.seats.len(),
            })
        }
    }

    fn write(&mut self, local: usize, at: usize, data: &[u8]) -> Result<(), TransportError> {
        let (channel, target) = self.channel(local)?;
        let sent = channel.write(target, at, data, None)?;
        channel.confirm(sent)
    }

    fn zero(&mut self, local: usize, at: usize, len: usize) -> Result<(), TransportError> {
        let (channel, target) = self.channel(local)?;
        let span = Span {
            target,
            offset: at,
            len,
        };
        let sent = channel.write_spans(&[span], |_, bytes| bytes.fill(0))?;
        channel.confirm(sent)
    }

    fn read(&mut self, local: usize, at: usize, out: &mut [u8]) -> Result<(), TransportError> {
        let (channel, target) = self.channel(local)?;
        channel.read(target, at, out)
    }
}
