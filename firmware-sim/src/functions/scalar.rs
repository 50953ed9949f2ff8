//! Kernels on integers, floats, strings and shapes.

use tessera_core::wire::{ErrorCode, Value};

use super::{Args, Output};
use crate::registers::{copy_exact, Dims};

const BAD: ErrorCode = ErrorCode::BadArguments;

/// What `str_suffix` appends.
const SUFFIX: &str = "_suffix";

/// What `shape_extend` appends.
const EXTENSION: [u32; 2] = [4, 5];

/// `replica_id()`: this device's replica.
pub(super) fn replica_id(args: &Args<'_>) -> Result<Output, ErrorCode> {
    args.expect(0)?;
    Ok(Output::Int(i64::from(args.replica())))
}

/// `add(a, b)`: two integers (overflow is an error) or two floats.
pub(super) fn add(args: &Args<'_>) -> Result<Output, ErrorCode> {
    args.expect(2)?;
    match (args.get(0)?, args.get(1)?) {
        (Value::Int(x), Value::Int(y)) => x.checked_add(*y).map(Output::Int).ok_or(BAD),
        // f64 addition in flash-lean software: see `add_f64`.
        (Value::Float(x), Value::Float(y)) => Ok(Output::Float(super::float_bits::add_f64(*x, *y))),
        _ => Err(BAD),
    }
}

/// `elements(s)`: the element count of a shape or an array.
pub(super) fn elements(args: &Args<'_>) -> Result<Output, ErrorCode> {
    args.expect(1)?;
    let dims = match args.get(0)? {
        Value::Shape(dims) => dims.clone(),
        _ => args.array(0)?.shape,
    };
    // Checked: a count past i64 cannot be reported.
    dims.iter()
        .try_fold(1i64, |n, &d| n.checked_mul(i64::from(d)))
        .map(Output::Int)
        .ok_or(BAD)
}

/// `str_suffix(s)`: `s` followed by `"_suffix"`.
pub(super) fn str_suffix(args: &Args<'_>) -> Result<Output, ErrorCode> {
    args.expect(1)?;
    // Checked: a string that long does not fit the arena anyway.
    let len = args.str(0)?.len().checked_add(SUFFIX.len()).ok_or(BAD)?;
    Ok(Output::Str {
        len,
        fill: |args, out| {
            let text = args.str(0)?.as_bytes();
            let (head, tail) = out.split_at_mut_checked(text.len()).ok_or(BAD)?;
            copy_exact(head, text)?;
            copy_exact(tail, SUFFIX.as_bytes())
        },
    })
}

/// `shape_extend(s)`: the shape `s` followed by 4 and 5, still a shape.
pub(super) fn shape_extend(args: &Args<'_>) -> Result<Output, ErrorCode> {
    args.expect(1)?;
    let mut dims = Dims::from_slice(args.shape(0)?).map_err(|_| BAD)?;
    dims.extend_from_slice(&EXTENSION).map_err(|_| BAD)?;
    Ok(Output::Shape(dims))
}

/// `fail_on_replica(r)`: fails with [`ErrorCode::BadArguments`] on replica `r` and returns
/// `r` on every other replica (a function that fails on one worker). A test kernel: built
/// only where [`TEST_KERNELS`](super::TEST_KERNELS) is.
#[cfg(any(test, feature = "test-kernels"))]
pub(super) fn fail_on_replica(args: &Args<'_>) -> Result<Output, ErrorCode> {
    args.expect(1)?;
    let r = args.int(0)?;
    if r == i64::from(args.replica()) {
        return Err(BAD);
    }
    Ok(Output::Int(r))
}
