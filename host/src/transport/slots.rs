//! Remote-buffer slots on devices, as core's [`RemoteSlots`] sees them: weights move
//! between host buffers and devices through the same layout code as everywhere else,
//! in chunks that fit the devices' frames.

use tessera_core::transfer::RemoteSlots;
use tessera_core::wire::{Request, Response};

use super::{Channel, TransportError};

/// Slot `slot` on each of `channels` (local replica `i` is `channels[i]`), all `bytes`
/// long: allocate them with [`ChannelSlots::allocate`].
pub struct ChannelSlots<'c> {
    channels: &'c mut [Channel],
    slot: u16,
    bytes: usize,
}

impl<'c> ChannelSlots<'c> {
    /// Allocates slot `slot` of `bytes` bytes on every channel.
    pub fn allocate(
        channels: &'c mut [Channel],
        slot: u16,
        bytes: usize,
    ) -> Result<Self, TransportError> {
        let size = u32::try_from(bytes)
            .map_err(|_| TransportError::Protocol(format!("slot of {bytes} bytes exceeds u32")))?;
        for channel in channels.iter_mut() {
            channel.request(&Request::AllocSlot { slot, bytes: size })?;
        }
        Ok(Self {
            channels,
            slot,
            bytes,
        })
    }

    /// Slot `slot` already allocated with `bytes` bytes on every channel.
    pub fn existing(channels: &'c mut [Channel], slot: u16, bytes: usize) -> Self {
        Self {
            channels,
            slot,
            bytes,
        }
    }

    fn channel(&mut self, local: usize) -> Result<&mut Channel, TransportError> {
        self.channels.get_mut(local).ok_or_else(|| {
            TransportError::Protocol(format!("no channel for local replica {local}"))
        })
    }
}

fn offset(at: usize) -> Result<u32, TransportError> {
    u32::try_from(at).map_err(|_| TransportError::Protocol(format!("slot offset {at} exceeds u32")))
}

impl RemoteSlots for ChannelSlots<'_> {
    type Error = TransportError;

    fn slot_len(&self, local: usize) -> Result<usize, TransportError> {
        if local < self.channels.len() {
            Ok(self.bytes)
        } else {
            Err(TransportError::Protocol(format!(
                "no channel for local replica {local}"
            )))
        }
    }

    fn write(&mut self, local: usize, at: usize, data: &[u8]) -> Result<(), TransportError> {
        let slot = self.slot;
        let channel = self.channel(local)?;
        let chunk = channel.limits().max_chunk().max(1);
        for (i, piece) in data.chunks(chunk).enumerate() {
            let offset = offset(at + i * chunk)?;
            channel.request(&Request::WriteSlot {
                slot,
                offset,
                data: piece,
            })?;
        }
        Ok(())
    }

    fn zero(&mut self, local: usize, at: usize, len: usize) -> Result<(), TransportError> {
        let chunk = self.channel(local)?.limits().max_chunk().max(1);
        let zeros = vec![0u8; chunk.min(len)];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(zeros.len());
            self.write(local, at + done, &zeros[..n])?;
            done += n;
        }
        Ok(())
    }

    fn read(&mut self, local: usize, at: usize, out: &mut [u8]) -> Result<(), TransportError> {
        let slot = self.slot;
        let channel = self.channel(local)?;
        let chunk = channel.limits().max_chunk().max(1);
        for (i, piece) in out.chunks_mut(chunk).enumerate() {
            let offset = offset(at + i * chunk)?;
            let len = offset_len(piece.len())?;
            let reply = channel.request(&Request::ReadSlot { slot, offset, len })?;
            match reply.response() {
                Response::Data { data } if data.len() == piece.len() => piece.copy_from_slice(data),
                other => {
                    return Err(TransportError::Protocol(format!(
                        "unexpected reply to ReadSlot: {other:?}"
                    )))
                }
            }
        }
        Ok(())
    }
}

fn offset_len(n: usize) -> Result<u32, TransportError> {
    offset(n)
}
