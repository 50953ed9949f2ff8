use std::os::unix::net::UnixStream;
use std::sync::{mpsc, Arc, Mutex};

use crate::transport::spawn::Mailbox;
use crate::transport::spin::SPIN;
use std::io::Write;

use tessera_core::wire::{Envelope, FrameDecoder, FromDevice, ProgramRequest, ToDevice};

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
    queue.accept(Message {
        body: buffer,
        bulk: None,
    });
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
