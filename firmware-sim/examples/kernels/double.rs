//! `double`, a kernel of a user's own: multiplies an int, a float, or every element of an
//! f32/f64 array by two. One file for both places it runs: the `custom_kernel` example (a
//! device in a host process) and the firmware built with feature `custom-kernel` (each
//! board's, in QEMU), so that what CI runs on the boards is the example's code, not a copy.

use tessera_core::wire::{ErrorCode, Value};
use tessera_firmware_sim::functions::{element, Args, Function, Output};

/// `double(x)`: checks its argument first (count, kind, dtype), says what it returns, and
/// leaves the bytes to its fill function, which the device calls once the result's memory
/// is allocated.
pub fn double(args: &Args<'_>) -> Result<Output, ErrorCode> {
    args.expect(1)?;
    match args.get(0)? {
        Value::Int(v) => v
            .checked_mul(2)
            .map(Output::Int)
            .ok_or(ErrorCode::BadArguments),
        Value::Float(v) => Ok(Output::Float(v * 2.0)),
        _ => {
            let x = args.array(0)?;
            if !element::is_float(x.dtype) {
                return Err(ErrorCode::BadArguments);
            }
            Output::array(x.dtype, &x.shape, |args, out| {
                let x = args.array(0)?;
                element::map(x.dtype, x.data, out, Some, |v| v * 2.0)
            })
        }
    }
}

/// The kernels of this file, for `Device::with_functions` (searched before the built-ins).
pub const KERNELS: &[(&str, Function)] = &[("double", double)];
