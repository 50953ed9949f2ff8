//! Remote-buffer slots on devices, as core's [`RemoteSlots`] sees them: weights move
//! between host buffers and devices through the same layout code as everywhere else,
//! in chunks that fit the devices' frames.

use std::sync::Arc;

use tessera_core::transfer::RemoteSlots;
use tessera_core::wire::endpoint::ReadSlot;
use tessera_core::wire::{Request, RequestKind};
use tessera_firmware_sim::std_link::Bulk;

use super::{Channel, TransportError};

/// Slot `slot` on each of `channels` (local replica `i` is `channels[i]`), all `bytes`
/// long: allocate them with [`ChannelSlots::allocate`].
#[derive(Debug)]
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
        let size = u32::try_from(bytes).map_err(|_| TransportError::Overflow {
            what: "slot size",
            value: bytes,
        })?;
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
        let replicas = self.channels.len();
        self.channels
            .get_mut(local)
            .ok_or(TransportError::NoReplica { local, replicas })
    }
}

fn offset(at: usize) -> Result<u32, TransportError> {
    u32::try_from(at).map_err(|_| TransportError::Overflow {
        what: "slot offset",
        value: at,
    })
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
        let slot = self.slot;
        let channel = self.channel(local)?;
        if channel.carries_bulk() && data.len() <= channel.bulk_capacity() {
            // Beside one request: no framing, no chunks.
            let request = Request::WriteSlotBulk {
                slot,
                offset: offset(at)?,
                len: offset(data.len())?,
            };
            let seq = channel.submit_bulk(&request, Bulk(Arc::new(data.to_vec())))?;
            channel.receive(seq)?;
            return Ok(());
        }
        let chunk = channel.limits().max_chunk().max(1);
        // Every chunk is sent before any reply is awaited (the channel keeps the window).
        let mut sent = Vec::with_capacity(data.len().div_ceil(chunk));
        for (i, piece) in data.chunks(chunk).enumerate() {
            let offset = offset(at + i * chunk)?;
            sent.push(channel.submit(&Request::WriteSlot {
                slot,
                offset,
                data: piece,
            })?);
        }
        for seq in sent {
            channel.receive(seq)?;
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
        if channel.carries_bulk() && out.len() <= channel.bulk_capacity() {
            // Beside one reply: no framing, no chunks.
            let request = Request::ReadSlotBulk {
                slot,
                offset: offset(at)?,
                len: offset(out.len())?,
            };
            let seq = channel.submit(&request)?;
            let mut reply = channel.receive(seq)?;
            return match reply.take_bulk() {
                Some(Bulk(bytes)) if bytes.len() == out.len() => {
                    out.copy_from_slice(&bytes);
                    Ok(())
                }
                Some(Bulk(bytes)) => {
                    Err(channel.wrong_length(RequestKind::ReadSlotBulk, bytes.len(), out.len()))
                }
                None => Err(channel.unexpected(&request, &reply.response())),
            };
        }
        let chunk = channel.limits().max_chunk().max(1);
        let mut sent = Vec::with_capacity(out.len().div_ceil(chunk));
        for (i, piece) in out.chunks(chunk).enumerate() {
            let offset = offset(at + i * chunk)?;
            let len = offset_len(piece.len())?;
            sent.push(channel.submit_typed(&ReadSlot { slot, offset, len })?);
        }
        for (ticket, piece) in sent.into_iter().zip(out.chunks_mut(chunk)) {
            let reply = channel.receive_typed(ticket)?;
            let data = reply.get();
            if data.len() != piece.len() {
                return Err(channel.wrong_length(RequestKind::ReadSlot, data.len(), piece.len()));
            }
            piece.copy_from_slice(data);
        }
        Ok(())
    }
}

fn offset_len(n: usize) -> Result<u32, TransportError> {
    offset(n)
}
