//! The message queue between the host and a device thread: memory does not corrupt, so
//! message bodies move as they are, without framing, and bulk bytes (a whole array) travel
//! beside them as one buffer handed over — one copy between the host's array and the
//! device's memory, whatever the size. The host's channel writes [`Message`]s to the
//! device and reads its replies; the device reads its end as the firmware's
//! [`Messages`] link.

use std::io;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::Arc;
use std::time::Duration;

use tessera_firmware_sim::{Incoming, Messages};

use super::spin::{receive_spinning, SPIN};

/// Bytes that travel beside a message between threads: one buffer, shared, never copied on
/// the way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bulk(pub Arc<Vec<u8>>);

impl AsRef<[u8]> for Bulk {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// One message between threads: its body, and perhaps bulk bytes beside it.
#[derive(Debug, Clone)]
pub struct Message {
    /// The encoded envelope.
    pub body: Vec<u8>,
    /// Bytes beside it.
    pub bulk: Option<Bulk>,
}

/// The least room a message's buffer is given: a reply sent back in it (a step's
/// contribution, for the default job's model) fits without another allocation.
pub const REPLY_ROOM: usize = 1024;

/// A link between threads of one process that carries whole messages: memory does not
/// corrupt, so there is no framing, no CRC and no per-byte work, and bulk bytes travel
/// beside the messages.
///
/// A message's buffer, once its body is copied out, carries the next message sent back when
/// it has the room: the host's thread allocates a buffer and frees it again, and the
/// device's side neither allocates nor frees one per message (a buffer freed by a thread
/// other than the one that allocated it takes the allocator's slow path). The host gives
/// its messages room for a reply ([`REPLY_ROOM`]).
#[derive(Debug)]
pub struct Queue {
    incoming: Receiver<Message>,
    outgoing: Sender<Message>,
    bulk: Option<Bulk>,
    /// The last message's buffer, for the next message sent.
    spare: Option<Vec<u8>>,
}

impl Queue {
    /// Files `message`: its bulk bytes aside, its body into `into` (its buffer kept).
    fn take(&mut self, message: Message, into: &mut [u8]) -> Incoming {
        self.bulk = message.bulk;
        let filed = match into.get_mut(..message.body.len()) {
            Some(to) => {
                to.copy_from_slice(&message.body);
                Incoming::Message(message.body.len())
            }
            None => Incoming::Damaged,
        };
        self.spare = Some(message.body);
        filed
    }

    /// Messages arrive on `incoming` and leave on `outgoing`.
    pub fn new(incoming: Receiver<Message>, outgoing: Sender<Message>) -> Self {
        Self {
            incoming,
            outgoing,
            bulk: None,
            spare: None,
        }
    }
}

impl Messages for Queue {
    type Error = io::Error;

    fn receive(&mut self, into: &mut [u8], wait: bool) -> Result<Incoming, io::Error> {
        let message = if wait {
            match receive_spinning(&self.incoming, None, SPIN) {
                Ok(message) => message,
                Err(_) => return Ok(Incoming::Closed),
            }
        } else {
            match self.incoming.try_recv() {
                Ok(message) => message,
                Err(TryRecvError::Empty) => return Ok(Incoming::Idle),
                Err(TryRecvError::Disconnected) => return Ok(Incoming::Closed),
            }
        };
        Ok(self.take(message, into))
    }

    fn receive_within(&mut self, into: &mut [u8], us: u32) -> Result<Option<Incoming>, io::Error> {
        Ok(Some(
            match receive_spinning(
                &self.incoming,
                Some(Duration::from_micros(u64::from(us))),
                SPIN,
            ) {
                Ok(message) => self.take(message, into),
                Err(RecvTimeoutError::Timeout) => Incoming::Idle,
                Err(RecvTimeoutError::Disconnected) => Incoming::Closed,
            },
        ))
    }

    fn send(&mut self, body: &[u8]) -> Result<(), io::Error> {
        self.send_message(body, None)
    }

    fn bulk_capacity(&self) -> usize {
        usize::MAX
    }

    fn receive_bulk(&mut self, into: &mut [u8]) -> Result<bool, io::Error> {
        let Some(Bulk(bytes)) = self.bulk.take() else {
            return Ok(false);
        };
        match bytes.get(..into.len()) {
            Some(from) => {
                into.copy_from_slice(from);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn send_bulk(&mut self, body: &[u8], bulk: &[u8]) -> Result<bool, io::Error> {
        // The one copy of a bulk read: the device's memory into a buffer the host keeps.
        self.send_message(body, Some(Bulk(Arc::new(bulk.to_vec()))))?;
        Ok(true)
    }
}

impl Queue {
    fn send_message(&mut self, body: &[u8], bulk: Option<Bulk>) -> Result<(), io::Error> {
        let buffer = match self.spare.take() {
            // Never grown: a reallocation costs more than the allocation it saves.
            Some(mut spare) if spare.capacity() >= body.len() => {
                spare.clear();
                spare.extend_from_slice(body);
                spare
            }
            _ => body.to_vec(),
        };
        self.outgoing
            .send(Message { body: buffer, bulk })
            .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use tessera_firmware_sim::{Incoming, Messages};

    use super::{Message, Queue, REPLY_ROOM};

    /// Catches a queue that allocates a buffer for every message it sends (and frees every
    /// one it receives on the device's thread): a reply that fits goes back in the buffer
    /// its request came in, and one that does not still arrives whole, in a buffer of its
    /// own.
    #[test]
    fn a_reply_goes_back_in_its_request_buffer_when_it_fits() {
        let (to_device, incoming) = mpsc::channel();
        let (outgoing, from_device) = mpsc::channel();
        let mut queue = Queue::new(incoming, outgoing);
        let mut body = Vec::with_capacity(REPLY_ROOM);
        body.extend_from_slice(b"request");
        let sent = body.as_ptr();
        to_device.send(Message { body, bulk: None }).unwrap();
        let mut into = [0u8; 64];
        assert_eq!(
            queue.receive(&mut into, false).unwrap(),
            Incoming::Message(7)
        );
        assert_eq!(&into[..7], b"request");
        queue.send(&[9; 600]).unwrap();
        let reply = from_device.try_recv().unwrap();
        assert_eq!(reply.body, [9; 600]);
        assert_eq!(reply.body.as_ptr(), sent, "the request's buffer");
        // A request's buffer too small for the reply: the reply gets one of its own.
        let tiny = b"tiny".to_vec();
        let small = tiny.as_ptr();
        to_device
            .send(Message {
                body: tiny,
                bulk: None,
            })
            .unwrap();
        assert_eq!(
            queue.receive(&mut into, false).unwrap(),
            Incoming::Message(4)
        );
        queue.send(&[5; 600]).unwrap();
        let reply = from_device.try_recv().unwrap();
        assert_eq!(reply.body, [5; 600]);
        assert_ne!(reply.body.as_ptr(), small);
    }
}
