//! What the device tests share: a link over fixed input bytes, a clock that advances on
//! every reading, a busy line to nowhere, and helpers to frame requests and read replies.
#![allow(dead_code)] // each test file uses its own part

use std::convert::Infallible;

use embedded_io::{ErrorType, Read, ReadReady, Write};
use tessera_core::dtype::DataType;
use tessera_core::grouping::{CommGroup, GroupingSpec, RetrievalMode};
use tessera_core::program::{Layer, Optimizer, Program, Sharding};
use tessera_core::wire::frame::decode_body;
use tessera_core::wire::{
    encode_frame, Combined, Envelope, FrameDecoder, FromDevice, Request, ToDevice,
};
use tessera_firmware_sim::{serve, Clock, CycleCounter, Device, Server};

/// Frame capacity of the devices under test.
pub const FRAME: usize = 1024;
/// Requests they keep replies for.
pub const WINDOW: usize = 4;

/// The limits of a link whose frames carry a whole step's exchanges (the passes' and the
/// lanes' suites step devices directly, without framing).
pub const WIDE_LINK: tessera_firmware_sim::LinkLimits = tessera_firmware_sim::LinkLimits {
    max_frame: 1 << 16,
    window: 1,
};

/// A link that reads a fixed input (at most `chunk` bytes per read) and collects what the
/// device writes.
pub struct MemLink {
    pub input: Vec<u8>,
    pub at: usize,
    pub chunk: usize,
    pub output: Vec<u8>,
    /// `output.len()` at the last flush.
    pub flushed: usize,
    /// Reads made while written bytes were not yet flushed: a device that waits for input
    /// holding back output it already wrote (a buffered link would never send it).
    pub unflushed_reads: usize,
}

impl MemLink {
    pub fn new(input: Vec<u8>) -> Self {
        Self {
            input,
            at: 0,
            chunk: usize::MAX,
            output: Vec::new(),
            flushed: 0,
            unflushed_reads: 0,
        }
    }
}

impl ErrorType for MemLink {
    type Error = Infallible;
}

impl Read for MemLink {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, Infallible> {
        if self.flushed != self.output.len() {
            self.unflushed_reads += 1;
        }
        let n = buf.len().min(self.chunk).min(self.input.len() - self.at);
        buf[..n].copy_from_slice(&self.input[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl ReadReady for MemLink {
    fn read_ready(&mut self) -> Result<bool, Infallible> {
        Ok(true)
    }
}

impl Write for MemLink {
    fn write(&mut self, buf: &[u8]) -> Result<usize, Infallible> {
        self.output.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> Result<(), Infallible> {
        self.flushed = self.output.len();
        Ok(())
    }
}

/// A clock that advances one millisecond every time it is read, so every deadline ends.
#[derive(Default)]
pub struct TickClock(u64);

impl embedded_hal::delay::DelayNs for TickClock {
    fn delay_ns(&mut self, _: u32) {}
}

impl Clock for TickClock {
    fn now_ms(&mut self) -> u64 {
        self.0 += 1;
        self.0
    }
}

pub struct NoPin;

impl embedded_hal::digital::ErrorType for NoPin {
    type Error = Infallible;
}

impl embedded_hal::digital::OutputPin for NoPin {
    fn set_low(&mut self) -> Result<(), Infallible> {
        Ok(())
    }
    fn set_high(&mut self) -> Result<(), Infallible> {
        Ok(())
    }
}

/// `body` under `seq`, framed.
pub fn frame(seq: u32, body: &Request<'_>) -> Vec<u8> {
    let message = ToDevice::Request(Envelope {
        seq,
        body: body.clone(),
    });
    let (mut scratch, mut out) = ([0u8; FRAME], [0u8; FRAME + 64]);
    let n = encode_frame(&message, &mut scratch, &mut out).unwrap();
    out[..n].to_vec()
}

/// The host's combined result for round `round` of step `step`, framed.
pub fn combined(step: u32, round: u32, data: &[u8]) -> Vec<u8> {
    let message = ToDevice::Combined(Combined { step, round, data });
    let (mut scratch, mut out) = ([0u8; FRAME], [0u8; FRAME + 64]);
    let n = encode_frame(&message, &mut scratch, &mut out).unwrap();
    out[..n].to_vec()
}

/// Serves a fresh device (4 KiB of memory) on `link` until its input runs out; returns the
/// server, for its counters.
pub fn serve_all(link: &mut MemLink) -> Counters {
    let mut arena = vec![0u8; 4096];
    serve_with(link, &mut arena)
}

/// Like [`serve_all`], over `arena`.
pub fn serve_with(link: &mut MemLink, mut arena: &mut [u8]) -> Counters {
    let cycles = CycleCounter::new();
    let mut replies = Box::new([[0u8; FRAME]; WINDOW]);
    let mut server = Box::new(Server::new(&mut replies));
    let mut device = Device::new(0, &mut arena, server.link(), &cycles);
    serve(
        &mut server,
        &mut device,
        link,
        &mut TickClock::default(),
        &mut NoPin,
    )
    .unwrap();
    Counters {
        bad_frames: server.bad_frames,
        stale_answers: server.stale_answers,
        dropped: server.dropped,
    }
}

/// A server's counters after it served a script.
#[derive(Debug)]
pub struct Counters {
    pub bad_frames: u32,
    pub stale_answers: u32,
    pub dropped: u32,
}
/// Every intact frame in `output`, decoded: a reply as its sequence number and its
/// response, a contribution as its step and `Contribution { round: R, op: O }`; a damaged
/// frame fails the test.
pub fn replies(output: &[u8]) -> Vec<(u32, String)> {
    let mut decoder = FrameDecoder::<FRAME>::new();
    let mut out = Vec::new();
    for &b in output {
        if let Some(frame) = decoder.push(b) {
            let message: FromDevice<'_> =
                decode_body(frame.expect("the device's frames are intact")).unwrap();
            out.push(match message {
                FromDevice::Reply(reply) => (reply.seq, format!("{:?}", reply.body)),
                FromDevice::Contribution(c) => (
                    c.step,
                    format!("Contribution {{ round: {}, op: {:?} }}", c.round, c.op),
                ),
            });
        }
    }
    out
}

/// A linear model `y = W·x` (`W` shaped `[outputs, inputs]`, grouped by `comm`) trained
/// with plain SGD (learning rate 0.5) on a mean-squared error: input stream 0 (FIFO 1),
/// target stream 1 (FIFO 2), no anchors.
pub fn linear_program(
    inputs: u32,
    outputs: u32,
    comm: CommGroup,
    batches_per_step: u32,
    accumulation: u32,
) -> Program {
    let sgd = Optimizer::Sgd { learning_rate: 0.5 };
    let mut p = Program::new(batches_per_step, accumulation, sgd);
    let grouping = GroupingSpec::Comm(comm);
    let w = p
        .add_variable(
            "w",
            &[outputs, inputs],
            grouping,
            RetrievalMode::OnePerGroup,
            Sharding::None,
        )
        .unwrap();
    p.add_stream("x", DataType::F32, &[inputs], false).unwrap();
    let t = p.add_stream("t", DataType::F32, &[outputs], false).unwrap();
    p.add_layer(Layer::Linear { weight: w }).unwrap();
    p.add_layer(Layer::MeanSquaredError { targets: t }).unwrap();
    p
}

/// `program` as a `Prepare` request carries it.
pub fn encoded(program: &Program) -> Vec<u8> {
    let mut bytes = vec![0u8; 1 << 16];
    let len = program
        .encode(&mut bytes)
        .expect("a program fits 64 KiB")
        .len();
    bytes.truncate(len);
    bytes
}
