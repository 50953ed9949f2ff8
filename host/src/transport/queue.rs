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

/// One message between threads: its body, perhaps bulk bytes beside it, and perhaps a
/// message sent before it that was held back to travel with it (see [`Queue`]).
#[derive(Debug, Clone)]
pub struct Message {
    /// The encoded envelope.
    pub body: Vec<u8>,
    /// Bytes beside it.
    pub bulk: Option<Bulk>,
    /// The body of a message sent before this one, held back to travel with it: taken in
    /// (served, filed) before `body`. It has no bulk bytes.
    pub ahead: Option<Vec<u8>>,
}

impl Message {
    /// A message of `body` alone.
    pub fn alone(body: Vec<u8>) -> Self {
        Self {
            body,
            bulk: None,
            ahead: None,
        }
    }
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
///
/// Two messages may come as one: a body held back by the host ([`Message::ahead`]) and the
/// one it travels with, taken in that order. The reply to the first is held in turn while
/// the second is in hand and travels ahead of the next message sent — or goes alone before
/// the device looks for more — so a pair costs one hand-over each way, not two.
#[derive(Debug)]
pub struct Queue {
    incoming: Receiver<Message>,
    outgoing: Sender<Message>,
    bulk: Option<Bulk>,
    /// The last message's buffer, for the next message sent.
    spare: Option<Vec<u8>>,
    /// The second message of a pair, once the first is taken in.
    second: Option<Message>,
    /// The reply to the first message of a pair, to travel ahead of the next one sent.
    held: Option<Vec<u8>>,
}

impl Queue {
    /// Files `message`: its bulk bytes aside, its body into `into` (its buffer kept); of a
    /// pair, the first body now and the rest for the next receive.
    fn take(&mut self, mut message: Message, into: &mut [u8]) -> Incoming {
        if let Some(first) = message.ahead.take() {
            self.second = Some(message);
            self.bulk = None;
            return self.file(first, into);
        }
        self.bulk = message.bulk;
        self.file(message.body, into)
    }

    /// Copies `body` into `into`, keeping its buffer for the next message sent.
    fn file(&mut self, body: Vec<u8>, into: &mut [u8]) -> Incoming {
        let filed = match into.get_mut(..body.len()) {
            Some(to) => {
                to.copy_from_slice(&body);
                Incoming::Message(body.len())
            }
            None => Incoming::Damaged,
        };
        self.spare = Some(body);
        filed
    }

    /// Before a look for new messages: the second of a pair, if one is in hand (`None`
    /// otherwise, after sending a held reply, whose request has nothing more to send).
    fn before_look(&mut self, into: &mut [u8]) -> Result<Option<Incoming>, io::Error> {
        if let Some(second) = self.second.take() {
            return Ok(Some(self.take(second, into)));
        }
        if let Some(held) = self.held.take() {
            self.outgoing
                .send(Message::alone(held))
                .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))?;
        }
        Ok(None)
    }

    /// Messages arrive on `incoming` and leave on `outgoing`.
    pub fn new(incoming: Receiver<Message>, outgoing: Sender<Message>) -> Self {
        Self {
            incoming,
            outgoing,
            bulk: None,
            spare: None,
            second: None,
            held: None,
        }
    }
}

impl Messages for Queue {
    type Error = io::Error;

    fn receive(&mut self, into: &mut [u8], wait: bool) -> Result<Incoming, io::Error> {
        if let Some(filed) = self.before_look(into)? {
            return Ok(filed);
        }
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
        if let Some(filed) = self.before_look(into)? {
            return Ok(Some(filed));
        }
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
        if self.second.is_some() && bulk.is_none() {
            // The first of a pair answered: its reply waits for the next one's company.
            if let Some(earlier) = self.held.replace(buffer) {
                // Two replies to one request: the earlier goes now, in order.
                self.outgoing
                    .send(Message::alone(earlier))
                    .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))?;
            }
            return Ok(());
        }
        self.outgoing
            .send(Message {
                body: buffer,
                bulk,
                ahead: self.held.take(),
            })
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
        to_device.send(Message::alone(body)).unwrap();
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
        to_device.send(Message::alone(tiny)).unwrap();
        assert_eq!(
            queue.receive(&mut into, false).unwrap(),
            Incoming::Message(4)
        );
        queue.send(&[5; 600]).unwrap();
        let reply = from_device.try_recv().unwrap();
        assert_eq!(reply.body, [5; 600]);
        assert_ne!(reply.body.as_ptr(), small);
    }

    /// Catches a pair of messages served out of order, or a reply held back for the
    /// second of a pair that never leaves: both bodies are taken in, in order; the first's
    /// reply travels ahead of the second's — or, when the second sends none, goes alone
    /// before the device looks for more.
    #[test]
    fn a_pair_is_taken_in_order_and_its_replies_travel_together() {
        let (to_device, incoming) = mpsc::channel();
        let (outgoing, from_device) = mpsc::channel();
        let mut queue = Queue::new(incoming, outgoing);
        let pair = |first: &[u8], second: &[u8]| Message {
            body: second.to_vec(),
            bulk: None,
            ahead: Some(first.to_vec()),
        };
        let mut into = [0u8; 64];
        to_device.send(pair(b"free", b"call")).unwrap();
        assert_eq!(
            queue.receive(&mut into, false).unwrap(),
            Incoming::Message(4)
        );
        assert_eq!(&into[..4], b"free");
        queue.send(b"freed").unwrap();
        assert!(
            from_device.try_recv().is_err(),
            "held for the second's reply"
        );
        assert_eq!(
            queue.receive(&mut into, false).unwrap(),
            Incoming::Message(4)
        );
        assert_eq!(&into[..4], b"call");
        queue.send(b"called").unwrap();
        let replies = from_device.try_recv().unwrap();
        assert_eq!(replies.ahead.as_deref(), Some(&b"freed"[..]));
        assert_eq!(replies.body, b"called");

        // The second answers nothing: the held reply goes as the device looks again.
        to_device.send(pair(b"free", b"mute")).unwrap();
        assert_eq!(
            queue.receive(&mut into, false).unwrap(),
            Incoming::Message(4)
        );
        queue.send(b"freed").unwrap();
        assert_eq!(
            queue.receive(&mut into, false).unwrap(),
            Incoming::Message(4)
        );
        assert!(from_device.try_recv().is_err());
        assert_eq!(queue.receive(&mut into, false).unwrap(), Incoming::Idle);
        let alone = from_device.try_recv().unwrap();
        assert_eq!((alone.ahead, alone.body), (None, b"freed".to_vec()));
    }
}
