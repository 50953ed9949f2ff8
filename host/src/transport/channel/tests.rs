use std::os::unix::net::UnixStream;
use std::sync::{mpsc, Arc, Mutex};

use crate::transport::spawn::Mailbox;
use crate::transport::spin::SPIN;
use std::io::Write;

use tessera_core::wire::{
    Envelope, FrameDecoder, FromDevice, KernelRequest, ProgramRequest, ToDevice,
};

use super::*;

/// A writer that keeps what it is given.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A channel writing to `writer` whose device never answers.
fn channel(writer: Outgoing) -> Channel {
    let (_, frames) = mpsc::channel();
    let (ours, _theirs) = UnixStream::pair().unwrap();
    Channel {
        writer,
        frames: Frames::Queue(frames),
        next_seq: 1,
        deadline: DEFAULT_DEADLINE,
        busy_deadline: BUSY_DEADLINE,
        limits: Limits {
            memory: 0,
            max_frame: 256,
            replica: 0,
            lanes: 1,
            window: 4,
        },
        scratch: vec![0; 512],
        out: vec![0; 600],
        spares: Spares::default(),
        in_flight: VecDeque::new(),
        held: None,
        quiet_since: None,
        arrived: VecDeque::new(),
        retries: 0,
        window: None,
        memory: None,
        located: Located::default(),
        traffic: Traffic::default(),
        spin: SPIN,
        handle: DeviceHandle::Thread(None, Some(ours), Default::default()),
    }
}

/// Catches a queue link keeping a copy of every frame for a retransmission a queue never
/// needs (a megabyte-sized write held twice until its reply), and one that keeps none
/// while a step is in flight, when the device drops the next request and it must be sent
/// again.
#[test]
fn queue_frames_are_kept_only_while_a_step_is_in_flight() {
    let (to_device, device_in) = mpsc::channel();
    let mut queue = channel(Outgoing::Messages(Mailbox::unserved(to_device)));
    let kept = |c: &Channel| {
        c.in_flight
            .iter()
            .map(|f| f.frame.is_some())
            .collect::<Vec<_>>()
    };
    queue
        .submit(&Request::Program(ProgramRequest::GetSeed))
        .unwrap();
    queue
        .submit(&Request::Program(ProgramRequest::RunStep {
            fed: false,
            took: false,
        }))
        .unwrap();
    queue
        .submit(&Request::Program(ProgramRequest::GetSeed))
        .unwrap();
    assert_eq!(kept(&queue), [false, false, true]);
    assert_eq!(
        device_in.try_iter().count(),
        3,
        "every request went out once"
    );

    let mut bytes = channel(Outgoing::Bytes(Box::new(Capture::default())));
    bytes
        .submit(&Request::Program(ProgramRequest::GetSeed))
        .unwrap();
    assert_eq!(kept(&bytes), [true], "a byte link can lose a frame");
}

/// Catches a channel that frees a read reply's buffer and allocates the next message's
/// (the allocator's slow path in a step's bursts): a recycled reply's buffer carries the
/// next request to the device thread, holding exactly that request.
#[test]
fn a_recycled_reply_carries_the_next_request() {
    let (to_device, device_in) = mpsc::channel::<Message>();
    let mut queue = channel(Outgoing::Messages(Mailbox::unserved(to_device)));
    queue
        .submit(&Request::Program(ProgramRequest::GetSeed))
        .unwrap();
    // The device answers in the request's buffer, as the device end of a `queue::Queue` does.
    let mut buffer = device_in.try_recv().unwrap().body;
    buffer.clear();
    let reply = FromDevice::Reply(Envelope {
        seq: 1,
        body: Response::Seed { seed: 7 },
    });
    buffer.extend_from_slice(&postcard::to_allocvec(&reply).unwrap());
    let at = buffer.as_ptr();
    queue.accept(Message::alone(buffer));
    let reply = queue.receive(1).unwrap();
    assert_eq!(reply.response(), Some(Response::Seed { seed: 7 }));
    queue.recycle(reply);
    queue
        .submit(&Request::Program(ProgramRequest::GetSeed))
        .unwrap();
    let next = device_in.try_recv().unwrap().body;
    assert_eq!(
        next.as_ptr(),
        at,
        "the reply's buffer carries the next request"
    );
    let sent: ToDevice<'_> = postcard::from_bytes(&next).unwrap();
    assert!(matches!(
        sent,
        ToDevice::Request(Envelope {
            seq: 2,
            body: Request::Program(ProgramRequest::GetSeed)
        })
    ));
}

/// Without a leading delimiter, garbage the device's decoder held (the rest of a
/// truncated frame) ran into the next frame and cost it too: a truncated request cost
/// its retry as well.
#[test]
fn every_frame_starts_with_a_delimiter() {
    let capture = Capture::default();
    let mut channel = channel(Outgoing::Bytes(Box::new(capture.clone())));
    channel
        .submit(&Request::Program(ProgramRequest::GetSeed))
        .unwrap();
    let sent = capture.0.lock().unwrap().clone();
    assert_eq!(sent.first(), Some(&0), "the frame opens with 0x00");

    // What a device decodes when half a damaged frame came before it.
    let mut held = vec![0x42u8; 9];
    held.extend_from_slice(&sent);
    let mut decoder = FrameDecoder::<256>::new();
    let outcomes: Vec<bool> = held
        .iter()
        .filter_map(|&b| decoder.push(b).map(|frame| frame.is_ok()))
        .collect();
    assert_eq!(
        outcomes,
        [false, true],
        "the garbage, then the intact request"
    );
}

/// The request a message to a device thread carries, and the one travelling ahead of it.
fn requests_in(message: &Message) -> (Option<u32>, u32) {
    let seq = |body: &[u8]| match postcard::from_bytes::<ToDevice<'_>>(body).unwrap() {
        ToDevice::Request(Envelope { seq, .. }) => seq,
        other => panic!("not a request: {other:?}"),
    };
    (message.ahead.as_deref().map(seq), seq(&message.body))
}

/// Catches a held request (a register's free) that is never sent, that is overtaken by a
/// later request, or that waits while the channel waits for a reply: it travels ahead of
/// the next message, and goes alone before any wait.
#[test]
fn a_held_request_travels_with_the_next_message_or_alone_before_a_wait() {
    let (to_device, device_in) = mpsc::channel();
    let mut channel = channel(Outgoing::Messages(Mailbox::unserved(to_device)));
    let free = Request::Kernels(KernelRequest::FreeRegister { id: 3 });
    let first = channel.submit_held(&free).unwrap();
    assert!(device_in.try_recv().is_err(), "held back");
    let call = channel
        .submit(&Request::Program(ProgramRequest::GetSeed))
        .unwrap();
    let message = device_in.try_recv().unwrap();
    assert_eq!(requests_in(&message), (Some(first), call), "one message");
    assert!(device_in.try_recv().is_err());

    // Two held in a row: the first goes alone as the second is held.
    let second = channel.submit_held(&free).unwrap();
    let third = channel.submit_held(&free).unwrap();
    assert_eq!(requests_in(&device_in.try_recv().unwrap()), (None, second));
    assert!(device_in.try_recv().is_err(), "the third held back");
    // A wait sends it first (this one finds the replies' end gone: nothing answers here).
    let soon = Instant::now() + Duration::from_millis(1);
    let waited = channel.pump(Some(soon), false);
    assert!(matches!(waited, Err(TransportError::Closed { .. })));
    assert_eq!(requests_in(&device_in.try_recv().unwrap()), (None, third));
    assert_eq!(
        channel.in_flight(),
        4,
        "every request is in flight from its submit"
    );
}

/// Catches a reply the device held back (the one to the first of a pair) that the host
/// drops: it is filed before the reply it travels with.
#[test]
fn a_reply_travelling_ahead_of_another_is_filed_first() {
    let (to_device, _device_in) = mpsc::channel();
    let mut channel = channel(Outgoing::Messages(Mailbox::unserved(to_device)));
    let free = channel
        .submit_held(&Request::Kernels(KernelRequest::FreeRegister { id: 3 }))
        .unwrap();
    let seed = channel
        .submit(&Request::Program(ProgramRequest::GetSeed))
        .unwrap();
    let reply =
        |seq, body| postcard::to_allocvec(&FromDevice::Reply(Envelope { seq, body })).unwrap();
    channel.accept(Message {
        body: reply(seed, Response::Seed { seed: 7 }),
        bulk: None,
        ahead: Some(reply(free, Response::Done)),
    });
    assert!(
        channel.settle_done(free),
        "the free's reply is in, a plain success"
    );
    let answer = channel.receive(seed).unwrap();
    assert_eq!(answer.response(), Some(Response::Seed { seed: 7 }));
    assert_eq!(channel.in_flight(), 0);
}

/// Catches a held request that overtakes, or is lost behind, the next frame on a byte
/// link (a child process's pipe): nothing is written while it is held, and then both
/// frames, in order.
#[test]
fn a_held_request_goes_before_the_next_frame_on_a_byte_link() {
    let capture = Capture::default();
    let mut channel = channel(Outgoing::Bytes(Box::new(capture.clone())));
    let free = channel
        .submit_held(&Request::Kernels(KernelRequest::FreeRegister { id: 3 }))
        .unwrap();
    assert!(capture.0.lock().unwrap().is_empty(), "held back");
    let seed = channel
        .submit(&Request::Program(ProgramRequest::GetSeed))
        .unwrap();
    let sent = capture.0.lock().unwrap().clone();
    let mut decoder = FrameDecoder::<256>::new();
    let mut seqs = Vec::new();
    for &byte in &sent {
        if let Some(frame) = decoder.push(byte) {
            match postcard::from_bytes(frame.unwrap()).unwrap() {
                ToDevice::Request(Envelope { seq, .. }) => seqs.push(seq),
                other => panic!("not a request: {other:?}"),
            }
        }
    }
    assert_eq!(seqs, [free, seed]);
}
