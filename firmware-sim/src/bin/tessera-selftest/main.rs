//! On-target tests: the device's code paths that depend on the target (alignment, f32
//! arithmetic, 32-bit sizes, critical sections) checked on the Cortex-M4F and the Cortex-M3 under QEMU.
//! Exits 0 when every check passes; a failed check panics, which exits non-zero.
#![no_std]
#![no_main]
#![deny(unsafe_code)]
#![deny(missing_docs)]

#[path = "../board/mod.rs"]
mod board;

use board::entry;
use static_cell::ConstStaticCell;
use tessera_core::dtype::DataType;
use tessera_core::grouping::{CommGroup, GroupingSpec, RetrievalMode};
use tessera_core::program::{ids, AnchorTensor, Layer, Optimizer, Program, Sharding};
use tessera_core::rng::Rng;
use tessera_core::stream::AnchorReturnType;
use tessera_core::wire::frame::decode_body;
use tessera_core::wire::{
    encode_frame, Arg, Array, DataRequest, Envelope, FrameDecoder, KernelRequest, MemoryRequest,
    ProgramRequest, Request, Response, Target, Value,
};
use tessera_firmware_sim::{CycleCounter, Device};

static MEMORY: ConstStaticCell<[u8; 8192]> = ConstStaticCell::new([0; 8192]);
static CYCLES: CycleCounter = CycleCounter::new();

/// Runs `request` on `device`; it must succeed.
fn ok(device: &mut Device<'_>, request: Request<'_>) {
    let reply = device.handle(request.clone());
    assert!(matches!(reply, Response::Done), "request failed on target");
}

/// The first of `values` as little-endian bytes.
fn f32s(values: &[f32]) -> [u8; 4] {
    values[0].to_le_bytes()
}

#[entry]
fn main() -> ! {
    // One byte in, so the arena has to align itself.
    let mut memory = &mut MEMORY.take()[1..];
    let link = tessera_firmware_sim::LinkLimits {
        max_frame: 1024,
        window: 1,
    };
    let mut device = Device::new(0, &mut memory, link, &CYCLES);

    check_slots(&mut device);
    prepare_linear_program(&mut device);
    check_training_step(&mut device);
    check_registers(&mut device);
    let (frame, n) = check_rng_and_wire();
    check_board(&frame[..n]);

    defmt::info!("all on-target checks passed");
    board::exit(true)
}

/// Slots: bounds-checked writes and reads.
fn check_slots(device: &mut Device<'_>) {
    ok(
        device,
        Request::Memory(MemoryRequest::AllocSlot { slot: 1, bytes: 4 }),
    );
    ok(
        device,
        Request::Data(DataRequest::Write {
            target: Target::Slot(1),
            offset: 0,
            data: &f32s(&[0.5]),
        }),
    );
    let reply = device.handle(Request::Data(DataRequest::Write {
        target: Target::Slot(1),
        offset: 2,
        data: &[0; 4],
    }));
    assert!(
        matches!(reply, Response::Error { .. }),
        "an out-of-bounds write must fail"
    );
    defmt::info!("slots ok");
}

/// A prepared program on one replica, `y = w·x` with a mean-squared error and its loss as
/// anchor 0, with `w = 0.5` loaded from slot 0.
fn prepare_linear_program(device: &mut Device<'_>) {
    let mut program = Program::new(1, 1, Optimizer::Sgd { learning_rate: 0.1 });
    let none = GroupingSpec::Comm(CommGroup::None);
    let one = RetrievalMode::OnePerGroup;
    let built = program
        .add_variable("w", &[1, 1], none, one, Sharding::None)
        .and_then(|w| program.add_layer(Layer::Linear { weight: w }))
        .and_then(|()| program.add_stream("x", DataType::F32, &[1], false))
        .and_then(|_| program.add_stream("t", DataType::F32, &[1], false))
        .and_then(|t| program.add_layer(Layer::MeanSquaredError { targets: t }))
        .and_then(|()| program.add_anchor(AnchorTensor::Loss, AnchorReturnType::All));
    assert!(built.is_ok(), "the program fits its capacities");
    program.instrumented = true;
    let mut encoded = [0u8; 256];
    let program = program.encode(&mut encoded);
    assert!(program.is_ok(), "the program fits its buffer");
    ok(
        device,
        Request::Program(ProgramRequest::Prepare {
            replicas: 1,
            program: program.map_or(&[][..], |p| p),
        }),
    );
    ok(
        device,
        Request::Data(DataRequest::Write {
            target: Target::Slot(ids::slot(0)),
            offset: 0,
            data: &f32s(&[0.5]),
        }),
    );
    ok(
        device,
        Request::Memory(MemoryRequest::RemoteLoad {
            slot: ids::slot(0),
            variable: ids::variable(0),
        }),
    );
}

/// One step of the prepared program: w = 0.5, x = 2, t = 3 → y = 1, e = −2, loss = 4,
/// dL/dy = −4, grad = −8, w ← 0.5 + 0.1·8 = 1.3.
fn check_training_step(device: &mut Device<'_>) {
    for (stream, value) in [(0, 2.0), (1, 3.0)] {
        ok(
            device,
            Request::Data(DataRequest::Write {
                target: Target::Fifo(ids::stream_fifo(stream)),
                offset: 0,
                data: &f32s(&[value]),
            }),
        );
    }
    ok(
        device,
        Request::Program(ProgramRequest::RunStep {
            fed: false,
            took: false,
        }),
    );
    ok(
        device,
        Request::Memory(MemoryRequest::RemoteStore {
            variable: ids::variable(0),
            slot: ids::slot(0),
        }),
    );
    let pop = Request::Data(DataRequest::Read {
        target: Target::Fifo(ids::anchor_fifo(0)),
        offset: 0,
        len: 4,
    });
    let Response::Data { data } = device.handle(pop) else {
        panic!("no loss")
    };
    assert_eq!(
        f32::from_le_bytes([data[0], data[1], data[2], data[3]]),
        4.0,
        "loss"
    );
    let Response::Data { data } = device.handle(Request::Data(DataRequest::Read {
        target: Target::Slot(1),
        offset: 0,
        len: 4,
    })) else {
        panic!("no weights")
    };
    let w = f32::from_le_bytes([data[0], data[1], data[2], data[3]]);
    assert!((w - 1.3).abs() < 1e-6, "weight after one step");
    assert!(CYCLES.get() > 0, "the step counts its work");
    defmt::info!("training step ok");
}

/// Registers and a device function.
fn check_registers(device: &mut Device<'_>) {
    let tensor = [1.0f32.to_le_bytes(), 2.5f32.to_le_bytes()].concat_bytes();
    ok(
        device,
        Request::Kernels(KernelRequest::SetRegister {
            id: 1,
            value: Value::Array(Array {
                dtype: DataType::F32,
                shape: heapless::Vec::from_slice(&[2]).unwrap_or_default(),
                data: &tensor,
            }),
        }),
    );
    let args = heapless::Vec::from_slice(&[Arg::Register(1)]).unwrap_or_default();
    ok(
        device,
        Request::Kernels(KernelRequest::Invoke {
            function: "sum",
            args,
            out: 2,
        }),
    );
    let Response::Register {
        value: Value::Float(sum),
    } = device.handle(Request::Kernels(KernelRequest::GetRegister { id: 2 }))
    else {
        panic!("no sum")
    };
    assert_eq!(sum, 3.5, "sum of the tensor");
    defmt::info!("registers ok");
}

/// The RNG and the wire codec on this target; returns the frame encoded (and its length)
/// for the board check to send.
fn check_rng_and_wire() -> ([u8; 80], usize) {
    let mut a = Rng::from_seed(7);
    let mut b = Rng::from_state(a.state());
    assert_eq!(a.next_u32(), b.next_u32(), "RNG state round trip");
    let (mut scratch, mut frame) = ([0u8; 64], [0u8; 80]);
    let message = Envelope {
        seq: 9,
        body: Request::Program(ProgramRequest::SetSeed { seed: u64::MAX }),
    };
    let n = encode_frame(&message, &mut scratch, &mut frame).unwrap_or(0);
    let mut decoder = FrameDecoder::<80>::new();
    let mut decoded = false;
    for &byte in &frame[..n] {
        if let Some(Ok(body)) = decoder.push(byte) {
            decoded = decode_body::<Envelope<Request<'_>>>(body).ok() == Some(message.clone());
        }
    }
    assert!(decoded, "a frame round trip");
    defmt::info!("rng and wire ok");
    (frame, n)
}

/// The board: busy LED, delay, timer, host file, and the UART (not connected here: writes
/// of `frame` must not block).
fn check_board(frame: &[u8]) {
    use embedded_hal::delay::DelayNs;
    use embedded_hal::digital::OutputPin;
    use embedded_io::{ReadReady, Write};
    let mut led = board::BusyLed;
    let _ = led.set_high();
    board::SpinDelay.delay_us(50);
    let _ = led.set_low();
    check_clock();
    // No bulk file where none was made: the device then serves without bulk.
    assert!(
        board::host_file::HostFile::open("tessera-no-such-file.bin\0").is_none(),
        "a missing host file does not open"
    );
    let mut uart = board::Uart::take();
    let _ = uart.write_all(frame);
    assert_eq!(
        uart.read_ready(),
        Ok(false),
        "nothing arrives on an unconnected UART"
    );
    defmt::info!("board ok");
}

/// The clock counts real time: it advances across a busy wait and never goes back.
fn check_clock() {
    use embedded_hal::delay::DelayNs;
    use tessera_firmware_sim::Clock;
    let mut clock = board::Timer::take();
    let before = clock.now_ms();
    let mut waited = 0;
    while clock.now_ms() == before && waited < 100_000 {
        board::SpinDelay.delay_us(10);
        waited += 1;
    }
    assert!(clock.now_ms() > before, "timer 0 advances");
}

/// Two 4-byte arrays as one 8-byte array.
trait ConcatBytes {
    fn concat_bytes(self) -> [u8; 8];
}

impl ConcatBytes for [[u8; 4]; 2] {
    fn concat_bytes(self) -> [u8; 8] {
        let mut out = [0; 8];
        out[..4].copy_from_slice(&self[0]);
        out[4..].copy_from_slice(&self[1]);
        out
    }
}
