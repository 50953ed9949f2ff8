//! The device's side of the link contract (`serve`): reductions are applied only to the
//! round they answer, bytes read together with a request are not set aside, a malformed
//! frame leaves the reply cache alone, every frame is flushed before the device waits, a
//! retried step fed in place counts its inputs once, and a silent host gets a step's
//! contribution again at each deadline until the step fails.

use crate::support;

use support::{combined, frame, linear_program, replies, serve_all, MemLink};
use tessera_core::grouping::CommGroup;
use tessera_core::wire::{DataRequest, MemoryRequest, ProgramRequest, Request, Target};
use tessera_firmware_sim::{REDUCE_ATTEMPTS, REDUCE_DEADLINE_MS};

/// The step's sequence number in these scripts: it follows the 8 set-up requests (the
/// device runs requests strictly in order).
const STEP: u32 = 9;
/// The requests that read the weight back, after the step.
const STORE: u32 = STEP + 1;
const READ: u32 = STEP + 2;

/// Prepares a 1→1 linear model in a group of 2 with 3 batches per step (three reductions),
/// weight 0, learning rate 0.5, and queues its samples; then the step's frames, then reads
/// the weight back (sequence numbers `STORE` and `READ`).
fn script(step: &[Vec<u8>]) -> Vec<u8> {
    script_fed(step, false)
}

/// [`script`], with the samples left in place (`fed`) instead of queued: a request that
/// changes nothing stands in for each write, keeping the step at `STEP`. (The weight
/// depends only on the answers the script gives, not on the samples.)
fn script_fed(step: &[Vec<u8>], fed: bool) -> Vec<u8> {
    let f32s = |v: f32| v.to_le_bytes();
    let mut bytes = Vec::new();
    let mut seq = 0;
    let mut push = |request: Request<'_>| {
        seq += 1;
        bytes.extend_from_slice(&frame(seq, &request));
    };
    let program = support::encoded(&linear_program(1, 1, CommGroup::All, 3, 1));
    push(Request::Program(ProgramRequest::Prepare {
        replicas: 2,
        program: &program,
    }));
    push(Request::Program(ProgramRequest::SetOptimizer {
        learning_rate: 0.5,
        momentum: 0.0,
    }));
    for sample in 0..3 {
        if fed {
            push(Request::Program(ProgramRequest::GetSeed));
            push(Request::Program(ProgramRequest::GetSeed));
            continue;
        }
        // Each FIFO's samples are appended at its stream's next position.
        let (x, y) = (f32s(1.0), f32s(0.0));
        push(Request::Data(DataRequest::Write {
            target: Target::Fifo(1),
            offset: sample * x.len() as u32,
            data: &x,
        }));
        push(Request::Data(DataRequest::Write {
            target: Target::Fifo(2),
            offset: sample * y.len() as u32,
            data: &y,
        }));
    }
    for f in step {
        bytes.extend_from_slice(f);
    }
    assert_eq!(seq + 1, STEP, "the step follows the set-up");
    bytes.extend_from_slice(&frame(
        STORE,
        &Request::Memory(MemoryRequest::RemoteStore {
            variable: 1,
            slot: 1,
        }),
    ));
    bytes.extend_from_slice(&frame(
        READ,
        &Request::Data(DataRequest::Read {
            target: Target::Slot(1),
            offset: 0,
            len: 4,
        }),
    ));
    bytes
}

/// The step's `RunStep`, its samples queued (not fed in place), framed.
fn run_step() -> Vec<u8> {
    let request = Request::Program(ProgramRequest::RunStep {
        fed: false,
        took: false,
    });
    frame(STEP, &request)
}

/// The host's answer to round `round` of the step: a gradient of `value`.
fn answer(round: u32, value: f32) -> Vec<u8> {
    combined(STEP, round, &value.to_le_bytes())
}

/// The weight the script reads back, and the step's reply.
fn outcome(link: &MemLink) -> (String, String) {
    let replies = replies(&link.output);
    // The reply to `seq` (the step's contributions travel under its number too).
    let find = |seq| {
        replies
            .iter()
            .find(|(s, r)| *s == seq && !r.starts_with("Contribution"))
            .map(|(_, r)| r.clone())
            .unwrap_or_default()
    };
    (find(READ), find(STEP))
}

/// The step answered `Done` and the weight moved by every answer once:
/// 0 − 0.5·(1 + 2 + 4) = −3.5.
fn assert_trained(link: &MemLink, context: &str) {
    let (weight, step_reply) = outcome(link);
    assert_eq!(step_reply, "Done", "{context}");
    let expected = format!("Data {{ data: {:?} }}", (-3.5f32).to_le_bytes());
    assert_eq!(weight, expected, "{context}");
}

/// A step (`RunStep { fed }`) the host sent twice (its answer was late): the device sends
/// its round-0 contribution again, and the host answers both copies.
fn retried_step(fed: bool) -> [Vec<u8>; 6] {
    [
        frame(
            STEP,
            &Request::Program(ProgramRequest::RunStep { fed, took: false }),
        ),
        frame(
            STEP,
            &Request::Program(ProgramRequest::RunStep { fed, took: false }),
        ), // the host's retry
        answer(0, 1.0),
        answer(0, 1.0), // its answer to the re-sent contribution
        answer(1, 2.0),
        answer(2, 4.0),
    ]
}

/// The rounds of the contributions the device sent, in order.
fn contributions(link: &MemLink) -> Vec<String> {
    replies(&link.output)
        .into_iter()
        .filter(|(seq, body)| *seq == STEP && body.starts_with("Contribution"))
        .map(|(_, body)| body[..body.find(',').unwrap_or(body.len())].to_string())
        .collect()
}

/// The off-by-one seen on the wire under QEMU: the host retried the step, the device sent
/// its round-0 contribution twice, the host answered both, and the device applied the
/// second round-0 answer to round 1. The device must discard it: the weight ends at
/// 0 − 0.5·(1 + 2 + 4) = −3.5, not −0.5·(1 + 1 + 2) = −2.
#[test]
fn a_duplicate_answer_is_never_applied_to_the_next_round() {
    let mut link = MemLink::new(script(&retried_step(false)));
    let server = serve_all(&mut link);
    assert_trained(&link, "");
    assert_eq!(
        server.stale_answers, 1,
        "the duplicate was seen and discarded"
    );
    assert_eq!(
        contributions(&link),
        [
            "Contribution { round: 0",
            "Contribution { round: 0",
            "Contribution { round: 1",
            "Contribution { round: 2"
        ],
        "the step retry re-sent round 0, once"
    );
}

/// A step fed in place and retried by the host (its answer was late) counts its inputs
/// once: run again, the count would find its FIFOs full and refuse the step, and the
/// weight would not move. The retry is answered with the pending contribution, as any
/// step's is.
#[test]
fn a_retried_fed_step_counts_its_inputs_once() {
    let mut link = MemLink::new(script_fed(&retried_step(true), true));
    serve_all(&mut link);
    assert_trained(&link, "");
}

/// Answers naming another step are discarded too, as are answers arriving after the step.
#[test]
fn answers_for_another_step_are_discarded() {
    let other = |round| combined(STEP + 1, round, &9.0f32.to_le_bytes());
    let step = [
        run_step(),
        other(0),
        answer(0, 1.0),
        other(1),
        answer(1, 2.0),
        answer(2, 4.0),
        answer(2, 4.0), // late: the step is over
    ];
    let mut link = MemLink::new(script(&step));
    let server = serve_all(&mut link);
    assert_trained(&link, "");
    assert_eq!(server.stale_answers, 3);
}

/// A step followed at once by its answers: the answers arrive in the same read as the
/// step's frame. Setting those bytes aside until the step ended made the step wait for
/// answers it had already received, and time out.
#[test]
fn answers_read_together_with_their_step_are_seen() {
    let step = [run_step(), answer(0, 1.0), answer(1, 2.0), answer(2, 4.0)];
    let input = script(&step);
    for chunk in [usize::MAX, 256, 7] {
        let mut link = MemLink::new(input.clone());
        link.chunk = chunk;
        serve_all(&mut link);
        assert_trained(&link, &format!("reads of {chunk} bytes"));
    }
}

/// The device never waits for input while holding output it has not flushed: a child's
/// buffered stdout held a re-sent contribution back until the next round's, where the host
/// took it for a new one.
#[test]
fn every_frame_is_flushed_before_the_device_reads() {
    let step = [
        run_step(),
        run_step(),
        answer(0, 1.0),
        answer(1, 2.0),
        answer(2, 4.0),
    ];
    let mut link = MemLink::new(script(&step));
    link.chunk = 5;
    serve_all(&mut link);
    assert_eq!(link.unflushed_reads, 0);
    assert_eq!(link.flushed, link.output.len());
}

/// A CRC-valid frame that is not a request used to overwrite the reply cache while the
/// last sequence number stayed: the retry of the last request was then answered
/// `Malformed`, and the host timed out. The retry must get the cached reply.
#[test]
fn a_malformed_frame_leaves_the_reply_cache_alone() {
    let mut input = frame(5, &Request::Program(ProgramRequest::GetSeed));
    // A valid frame whose body (0xFF 0xFF 0xFF) decodes as no request.
    let (mut scratch, mut out) = ([0u8; 64], [0u8; 64]);
    let n = tessera_core::wire::encode_frame(&[0xFFu8; 3], &mut scratch, &mut out).unwrap();
    input.extend_from_slice(&out[..n]);
    input.extend_from_slice(&frame(5, &Request::Program(ProgramRequest::GetSeed)));
    let mut link = MemLink::new(input);
    serve_all(&mut link);
    let replies = replies(&link.output);
    assert_eq!(replies.len(), 3);
    assert_eq!(replies[0], (5, "Seed { seed: 0 }".to_string()));
    assert_eq!(replies[1].0, 0, "the malformed frame's reply");
    assert!(replies[1].1.contains("Malformed"), "{:?}", replies[1]);
    assert_eq!(
        replies[2], replies[0],
        "the retry is answered from the cache"
    );
}

/// Every reply starts with a delimiter, so garbage the host's decoder holds (a damaged
/// earlier frame) ends there and costs the reply nothing.
#[test]
fn replies_start_with_a_delimiter() {
    let mut link = MemLink::new(frame(1, &Request::Program(ProgramRequest::GetSeed)));
    serve_all(&mut link);
    assert_eq!(link.output.first(), Some(&0));
    let mut held = vec![0x55u8; 10]; // garbage without an end
    held.extend_from_slice(&link.output);
    let mut decoder = tessera_core::wire::FrameDecoder::<64>::new();
    let frames: Vec<bool> = held
        .iter()
        .filter_map(|&b| decoder.push(b).map(|f| f.is_ok()))
        .collect();
    assert_eq!(frames, [false, true], "the garbage, then the intact reply");
}

/// A bulk request on a byte link (which carries nothing beside its frames) is a clean
/// error naming the reason, never a write of missing bytes.
#[test]
fn bulk_requests_on_a_byte_link_are_refused() {
    let mut input = frame(
        1,
        &Request::Data(DataRequest::WriteBulk {
            target: Target::Register(1),
            offset: 0,
            len: 8,
        }),
    );
    input.extend_from_slice(&frame(
        2,
        &Request::Data(DataRequest::ReadBulk {
            target: Target::Register(1),
            offset: 0,
            len: 8,
        }),
    ));
    let mut link = MemLink::new(input);
    serve_all(&mut link);
    let replies = replies(&link.output);
    assert_eq!(replies.len(), 2);
    for (_, reply) in replies {
        assert!(reply.contains("BulkUnavailable"), "{reply}");
    }
}

/// A step whose host moved on (another device failed it): a later request ends the step at
/// once with `StepAbandoned`, instead of holding the device in its reduction through every
/// deadline (10 s) while it drops every request, so that the host took it for dead. The
/// later request then runs at once (its retry gets the same reply), not dropped to wait
/// for a retry.
#[test]
fn a_later_request_abandons_a_waiting_step() {
    let step = [
        run_step(),
        frame(STORE, &Request::Program(ProgramRequest::GetSeed)),
        frame(STORE, &Request::Program(ProgramRequest::GetSeed)), // the host's retry
    ];
    let mut link = MemLink::new(script(&step));
    let counters = serve_all(&mut link);
    let replies = replies(&link.output);
    let step_reply = replies
        .iter()
        .find(|(seq, body)| *seq == STEP && !body.starts_with("Contribution"))
        .map(|(_, body)| body.clone())
        .unwrap_or_default();
    assert!(step_reply.contains("StepAbandoned"), "{step_reply}");
    assert!(
        replies
            .iter()
            .any(|(seq, body)| *seq == STORE && body.starts_with("Seed")),
        "the later request is served: {replies:?}"
    );
    assert_eq!(counters.dropped, 0, "nothing dropped: {replies:?}");
}

/// Simulated time shared by [`SilentLink`] and [`SimClock`], in microseconds.
type Time = std::rc::Rc<std::cell::Cell<u64>>;

/// A link that falls silent, not closed, once its input is read while a step waits (the
/// host has stopped answering), and notes the simulated time of every frame it sends.
struct SilentLink {
    inner: MemLink,
    time: Time,
    /// The time of each flush: one per frame the device sends.
    sent_at: Vec<u64>,
}

impl embedded_io::ErrorType for SilentLink {
    type Error = std::convert::Infallible;
}

impl embedded_io::Read for SilentLink {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, Self::Error> {
        self.inner.read(buf)
    }
}

impl embedded_io::ReadReady for SilentLink {
    fn read_ready(&mut self) -> Result<bool, Self::Error> {
        Ok(self.inner.at < self.inner.input.len())
    }
}

impl embedded_io::Write for SilentLink {
    fn write(&mut self, buf: &[u8]) -> Result<usize, Self::Error> {
        self.inner.write(buf)
    }
    fn flush(&mut self) -> Result<(), Self::Error> {
        self.sent_at.push(self.time.get());
        self.inner.flush()
    }
}

/// A clock on simulated time: it moves only while the device waits.
struct SimClock(Time);

impl embedded_hal::delay::DelayNs for SimClock {
    fn delay_ns(&mut self, ns: u32) {
        let now = self.0.get() + u64::from(ns.div_ceil(1000));
        // Past every deadline of a step and then some: the device never timed its host out.
        let limit = (u64::from(REDUCE_ATTEMPTS) + 2) * REDUCE_DEADLINE_MS * 1000;
        assert!(now < limit, "still waiting after {now} µs of silence");
        self.0.set(now);
    }
}

impl tessera_firmware_sim::Clock for SimClock {
    fn now_ms(&mut self) -> u64 {
        self.0.get() / 1000
    }
}

/// Catches a waiting step whose host's silence is timed wrongly — a contribution sent again
/// at once (silence timed from a start left over from an earlier send) or never (silence
/// never timed: the clock stops the test) — and a contribution whose kept bytes change
/// before it is sent again. The host sends a stale answer, an earlier request and a damaged
/// frame after the step, then falls silent: the device sends its contribution again after
/// each `REDUCE_DEADLINE_MS` of silence, `REDUCE_ATTEMPTS` sends of the same bytes in all,
/// then fails the step with `ReduceTimeout`; never earlier than a deadline, and at most a
/// millisecond later.
#[test]
fn a_silent_host_gets_the_contribution_again_at_each_deadline_then_the_step_fails() {
    let step = [
        run_step(),
        // Handled while the step waits, none of them its answer: a round it does not wait
        // on, a request from before the step (dropped), a frame that fails its CRC.
        combined(STEP, 2, &1.0f32.to_le_bytes()),
        frame(STEP - 1, &Request::Program(ProgramRequest::GetSeed)),
        vec![0x01, 0x02, 0x03, 0x00],
    ];
    // The set-up and the step only: the requests after it would end the step at once.
    let mut input = script(&step);
    input.truncate(input.len() - script_tail_len());
    let time = Time::default();
    let mut link = SilentLink {
        inner: MemLink::new(input),
        time: time.clone(),
        sent_at: Vec::new(),
    };
    let mut arena = vec![0u8; 4096];
    let mut arena = &mut arena[..];
    let cycles = tessera_firmware_sim::CycleCounter::new();
    let mut replies_kept = Box::new([[0u8; support::FRAME]; support::WINDOW]);
    let mut server = Box::new(tessera_firmware_sim::Server::new(&mut replies_kept));
    let mut device = tessera_firmware_sim::Device::new(0, &mut arena, server.link(), &cycles);
    tessera_firmware_sim::serve(
        &mut server,
        &mut device,
        &mut link,
        &mut SimClock(time.clone()),
        &mut support::NoPin,
    )
    .unwrap();
    let handled = (server.stale_answers, server.dropped, server.bad_frames);
    assert_eq!(
        handled,
        (1, 1, 1),
        "the messages sent while it waited were handled"
    );
    let frames = replies(&link.inner.output);
    assert_eq!(frames.len(), link.sent_at.len(), "a flush per frame");
    let sends: Vec<u64> = frames
        .iter()
        .zip(&link.sent_at)
        .filter(|((seq, body), _)| *seq == STEP && body.starts_with("Contribution"))
        .map(|(_, &at)| at)
        .collect();
    assert_eq!(sends.len(), REDUCE_ATTEMPTS as usize, "{frames:?}");
    // Every send carries the same bytes, whatever the device handled in between.
    let bodies = contribution_bodies(&link.inner.output);
    assert_eq!(bodies.len(), sends.len());
    assert!(bodies.windows(2).all(|w| w[0] == w[1]), "{bodies:?}");
    let (step_reply, failed_at) = frames
        .iter()
        .zip(&link.sent_at)
        .find(|((seq, body), _)| *seq == STEP && !body.starts_with("Contribution"))
        .map(|((_, body), &at)| (body.clone(), at))
        .expect("the step is answered");
    assert!(step_reply.contains("ReduceTimeout"), "{step_reply}");
    let deadline = REDUCE_DEADLINE_MS * 1000;
    let mut times = sends.clone();
    times.push(failed_at);
    for gap in times.windows(2).map(|w| w[1] - w[0]) {
        assert!(
            (deadline..=deadline + 1000).contains(&gap),
            "{gap} µs between sends: {times:?}"
        );
    }
}

/// The body of every contribution in `output`, as sent.
fn contribution_bodies(output: &[u8]) -> Vec<Vec<u8>> {
    let mut decoder = tessera_core::wire::FrameDecoder::<{ support::FRAME }>::new();
    let mut bodies = Vec::new();
    for &b in output {
        if let Some(Ok(body)) = decoder.push(b) {
            let message = tessera_core::wire::decode_body(body);
            if let Ok(tessera_core::wire::FromDevice::Contribution(_)) = message {
                bodies.push(body.to_vec());
            }
        }
    }
    bodies
}

/// Bytes of the two requests [`script`] puts after the step (`STORE` and `READ`).
fn script_tail_len() -> usize {
    let store = Request::Memory(MemoryRequest::RemoteStore {
        variable: 1,
        slot: 1,
    });
    let read = Request::Data(DataRequest::Read {
        target: Target::Slot(1),
        offset: 0,
        len: 4,
    });
    frame(STORE, &store).len() + frame(READ, &read).len()
}
