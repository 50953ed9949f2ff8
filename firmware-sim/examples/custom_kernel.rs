//! A device with a kernel of your own: `double` multiplies an int, a float, or every element
//! of an f32/f64 array by two (`kernels/double.rs`). The device is built with
//! `Device::with_functions` and driven through `Device::handle`, exactly as the serve loop
//! would drive it; the firmware built with feature `custom-kernel` has the same kernel.
//!
//! Run it with `cargo run -p tessera-firmware-sim --example custom_kernel`.

use tessera_core::dtype::DataType;
use tessera_core::wire::{
    Arg, Array, DataRequest, ErrorCode, KernelRequest, Request, Response, Target, Value,
};
use tessera_firmware_sim::{CycleCounter, Device, LinkLimits};

// The kernel itself, in a file of its own: the firmware built with feature `custom-kernel`
// takes the same file, and CI runs it on every board.
#[path = "kernels/double.rs"]
mod double;
use double::KERNELS;

fn main() {
    let mut memory = &mut vec![0u8; 64 * 1024][..];
    let cycles = CycleCounter::new();
    let link = LinkLimits {
        max_frame: 1024,
        window: 1,
    };
    let mut device = Device::new(0, &mut memory, link, &cycles).with_functions(KERNELS);

    double_an_array(&mut device);
    chain_through_registers(&mut device);
    refuse_a_string(&mut device);
}

/// An f32 array (2, 3) sent with the call, the result in register 1.
fn double_an_array(device: &mut Device<'_>) {
    let data: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let x = Array {
        dtype: DataType::F32,
        shape: heapless::Vec::from_slice(&[2, 3]).expect("rank 2"),
        data: &data,
    };
    let invoke = Request::Kernels(KernelRequest::Invoke {
        function: "double",
        args: heapless::Vec::from_slice(&[Arg::Value(Value::Array(x))]).expect("one argument"),
        out: 1,
    });
    assert_eq!(device.handle(invoke), Response::Done);
    let reply = device.handle(Request::Kernels(KernelRequest::GetRegister { id: 1 }));
    let Response::Register {
        value: Value::Array(doubled),
    } = reply
    else {
        panic!("register 1 should hold an array, got {reply:?}");
    };
    let values: Vec<f32> = doubled
        .data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    println!(
        "double(arange(6) as (2, 3)) = {values:?}, shape {:?}",
        doubled.shape
    );
    assert_eq!(values, [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
}

/// Chained through registers with a built-in: add_one(double(r1)) into r2.
fn chain_through_registers(device: &mut Device<'_>) {
    let chain = [
        ("double", 1, 2),
        ("add_one", 2, 2), // the result may replace its own argument
    ];
    for (function, from, out) in chain {
        let call = Request::Kernels(KernelRequest::Invoke {
            function,
            args: heapless::Vec::from_slice(&[Arg::Register(from)]).expect("one argument"),
            out,
        });
        assert_eq!(device.handle(call), Response::Done);
    }
    let reply = device.handle(Request::Data(DataRequest::Read {
        target: Target::Register(2),
        offset: 4,
        len: 4,
    }));
    println!("add_one(double(double(x)))[1] = {reply:?}");
    assert_eq!(
        reply,
        Response::Data {
            data: &5.0f32.to_le_bytes()
        }
    );
}

/// Refusals are error replies, never panics.
fn refuse_a_string(device: &mut Device<'_>) {
    let wrong = Request::Kernels(KernelRequest::Invoke {
        function: "double",
        args: heapless::Vec::from_slice(&[Arg::Value(Value::Str("two"))]).expect("one argument"),
        out: 3,
    });
    let reply = device.handle(wrong);
    println!("double(\"two\") = {reply:?}");
    assert!(matches!(
        reply,
        Response::Error {
            code: ErrorCode::BadArguments,
            ..
        }
    ));
}
