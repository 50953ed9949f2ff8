//! Named device functions (kernels), called by [`KernelRequest::Invoke`] —
//! the workers' side of a Disco-style session.
//!
//! # Contract
//!
//! - **Arguments.** A call names its arguments as registers ([`Arg::Register`]) or sends
//!   them with the call ([`Arg::Value`]). A literal is checked like a register value (an
//!   array's bytes must match its shape) and handed to the function straight from the
//!   request: it never takes a register or an arena block, so nothing is left behind
//!   whether the call succeeds or fails. A register that does not exist is
//!   [`ErrorCode::UnknownId`]; a function name the device does not know is
//!   [`ErrorCode::UnknownFunction`], before anything runs.
//! - **Results.** A function returns a new value for the result register `out` (0 discards
//!   it); arguments are never modified, except by functions documented as in-place
//!   (`scale`), whose result is their first argument. A result with bytes (string, array)
//!   is computed into scratch and only then replaces `out`, so `out` may be one of the
//!   arguments.
//! - **Failures.** Every function checks its arguments (count, kinds, dtypes, shapes) and
//!   its arithmetic (integer overflow is [`ErrorCode::BadArguments`], never a wrap) and
//!   answers an [`ErrorCode`]; nothing here panics, whatever the request. A failed call
//!   frees its scratch and leaves every register as it was, except that a call whose new
//!   result is larger than the old value of `out` and does not fit the arena leaves `out`
//!   empty.
//! - No heap: scratch is one arena block (owner `Register(0)`) that lives for one call. A
//!   call with a string or array result needs arena room for the result twice and for one
//!   more copy of its register arguments' bytes.
//!
//! # The built-in functions
//!
//! | name | arguments | result |
//! |---|---|---|
//! | `replica_id` | — | int: this device's replica |
//! | `add` | int, int / float, float | their sum (int overflow is an error) |
//! | `add_one` | int / float / numeric array | the argument + 1, element-wise for arrays |
//! | `str_suffix` | string | the string + `"_suffix"` |
//! | `shape_extend` | shape | the shape + `[4, 5]` (still a shape) |
//! | `elements` | shape / array | int: element count |
//! | `sum` | f32 or f64 array | float: sum of the elements |
//! | `scale` | f32 array, float | **in place**: the array times the float |
//! | `relu` | numeric array | `max(x, 0)` element-wise, same dtype |
//! | `gelu` | f32 array | GELU, tanh approximation, element-wise |
//! | `fill` | array, int or float | a new array of the same dtype and shape, every element the value |
//! | `transpose` | 2-D array of any dtype | the transposed array |
//! | `matmul` | f32 `(m, k)` array, f32 `(k, n)` array | f32 `(m, n)` product |
//!
//! Numeric dtypes are every integer type, `bool` (0 or 1) and `f32`/`f64`; the 16- and
//! 8-bit float types are refused by arithmetic.
//!
//! # Test kernels
//!
//! `TEST_KERNELS` holds functions that exist only to make tests fail on purpose:
//!
//! | name | arguments | result |
//! |---|---|---|
//! | `fail_on_replica` | int `r` | [`ErrorCode::BadArguments`] on replica `r`, else `r` |
//!
//! They are test code: built only for this crate's unit tests and with its `test-kernels`
//! feature, so the firmware never ships them. With the feature, every device searches
//! them after the built-ins, so that devices the host spawns itself (threads and child
//! processes, which a test cannot hand a table) have them; the host enables it only as a
//! dev-dependency, so only its test builds do. A test that builds its own device hands it
//! a failing function of its own ([`Device::with_functions`](crate::Device::with_functions)).
//!
//! # Your own kernels
//!
//! A firmware built on this crate registers its own functions with
//! [`Device::with_functions`](crate::Device::with_functions): its table is searched before
//! the built-ins (so an entry may also replace a built-in of the same name). A
//! [`Function`] looks at its [`Args`] and returns an [`Output`]: an inline value, or the
//! dtype and shape of an array plus a [`Fill`] that writes its bytes (the device allocates
//! them in between, which is why it comes in two steps).
//!
//! ```
//! use tessera_core::dtype::DataType;
//! use tessera_core::wire::{Arg, ErrorCode, KernelRequest, Request, Response, Value};
//! use tessera_firmware_sim::functions::{element, Args, Function, Output};
//! use tessera_firmware_sim::{CycleCounter, Device, LinkLimits};
//!
//! /// `double(x)`: twice an int, or twice every element of an f32 array.
//! fn double(args: &Args<'_>) -> Result<Output, ErrorCode> {
//!     args.expect(1)?;
//!     if let Value::Int(v) = args.get(0)? {
//!         return v.checked_mul(2).map(Output::Int).ok_or(ErrorCode::BadArguments);
//!     }
//!     let x = args.array(0)?;
//!     if x.dtype != DataType::F32 {
//!         return Err(ErrorCode::BadArguments);
//!     }
//!     Output::array(x.dtype, &x.shape, |args, out| {
//!         element::map_f32(args.array(0)?.data, out, |v| v * 2.0)
//!     })
//! }
//!
//! const KERNELS: &[(&str, Function)] = &[("double", double)];
//!
//! let (mut memory, cycles) = ([0u8; 1024], CycleCounter::new());
//! let link = LinkLimits { max_frame: 256, window: 1 };
//! let mut device = Device::new(0, &mut memory, link, &cycles).with_functions(KERNELS);
//! let call = KernelRequest::Invoke {
//!     function: "double",
//!     args: heapless::Vec::from_slice(&[Arg::Value(Value::Int(21))]).unwrap(),
//!     out: 1,
//! };
//! assert_eq!(device.handle(Request::Kernels(call)), Response::Done);
//! let reply = device.handle(Request::Kernels(KernelRequest::GetRegister { id: 1 }));
//! assert_eq!(reply, Response::Register { value: Value::Int(42) });
//! ```
//!
//! `examples/custom_kernel.rs` does the same on arrays.
//!
//! [`KernelRequest::Invoke`]: tessera_core::wire::KernelRequest::Invoke
//! [`Arg::Register`]: tessera_core::wire::Arg::Register
//! [`Arg::Value`]: tessera_core::wire::Arg::Value

use tessera_core::dtype::DataType;
use tessera_core::wire::ErrorCode;

use crate::registers::Dims;

mod args;
pub(crate) mod call;
pub mod element;
mod elementwise;
pub mod float_bits;
mod linalg;
mod scalar;

pub use args::Args;

/// A device function: checks its arguments and says what it returns.
pub type Function = fn(&Args<'_>) -> Result<Output, ErrorCode>;

/// Writes the bytes of a result into `out` (zeroed, exactly the result's size), from the
/// same arguments the [`Function`] saw.
pub type Fill = fn(&Args<'_>, &mut [u8]) -> Result<(), ErrorCode>;

/// What a function returns.
#[derive(Debug, Clone)]
pub enum Output {
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A shape.
    Shape(Dims),
    /// A string of `len` bytes, written by `fill` (and checked to be UTF-8).
    Str {
        /// Its length in bytes.
        len: usize,
        /// Writes it.
        fill: Fill,
    },
    /// An array, its bytes written by `fill`.
    Array {
        /// Element type.
        dtype: DataType,
        /// Dimensions.
        shape: Dims,
        /// Writes the elements.
        fill: Fill,
    },
    /// The function works in place on argument `arg`, a tensor or array register: `fill`
    /// gets that register's bytes as its `out`, and in its [`Args`] that argument keeps its
    /// kind and dtype (and an array's shape) but has empty data. The result register is left
    /// alone.
    InPlace {
        /// Which argument.
        arg: usize,
        /// Updates it.
        fill: Fill,
    },
}

impl Output {
    /// An array result of `dtype` and `shape` (at most
    /// [`MAX_SHAPE_RANK`](tessera_core::wire::MAX_SHAPE_RANK) dimensions, else
    /// [`ErrorCode::BadArguments`]).
    pub fn array(dtype: DataType, shape: &[u32], fill: Fill) -> Result<Self, ErrorCode> {
        let shape = Dims::from_slice(shape).map_err(|_| ErrorCode::BadArguments)?;
        Ok(Self::Array { dtype, shape, fill })
    }

    /// A shape result (at most
    /// [`MAX_SHAPE_RANK`](tessera_core::wire::MAX_SHAPE_RANK) dimensions).
    pub fn shape(dims: &[u32]) -> Result<Self, ErrorCode> {
        Dims::from_slice(dims)
            .map(Self::Shape)
            .map_err(|_| ErrorCode::BadArguments)
    }
}

/// The built-in functions, by name (see the table in the module doc).
pub const BUILTINS: &[(&str, Function)] = &[
    ("replica_id", scalar::replica_id),
    ("add", scalar::add),
    ("add_one", elementwise::add_one),
    ("str_suffix", scalar::str_suffix),
    ("shape_extend", scalar::shape_extend),
    ("elements", scalar::elements),
    ("sum", elementwise::sum),
    ("scale", elementwise::scale),
    ("relu", elementwise::relu),
    ("gelu", elementwise::gelu),
    ("fill", elementwise::fill),
    ("transpose", linalg::transpose),
    ("matmul", linalg::matmul),
];

/// Kernels for tests only (see the module doc): not in [`BUILTINS`], and built only for
/// this crate's unit tests and with the `test-kernels` feature.
#[cfg(any(test, feature = "test-kernels"))]
pub const TEST_KERNELS: &[(&str, Function)] = &[("fail_on_replica", scalar::fail_on_replica)];

/// The function called `name`: from `user` first, then the built-ins (then, with the
/// `test-kernels` feature, `TEST_KERNELS`: module doc).
pub fn lookup(user: &[(&str, Function)], name: &str) -> Result<Function, ErrorCode> {
    let found = find(user, name).or_else(|| find(BUILTINS, name));
    #[cfg(feature = "test-kernels")]
    let found = found.or_else(|| find(TEST_KERNELS, name));
    found.ok_or(ErrorCode::UnknownFunction)
}

#[inline(never)]
fn find(table: &[(&str, Function)], name: &str) -> Option<Function> {
    table.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two built-ins of one name would make the second unreachable, and a test kernel
    /// named like a built-in would never run.
    #[test]
    fn builtin_names_are_unique() {
        for (i, (a, _)) in BUILTINS.iter().enumerate() {
            assert!(BUILTINS[i + 1..].iter().all(|(b, _)| a != b), "{a}");
            assert!(TEST_KERNELS.iter().all(|(b, _)| a != b), "{a}");
        }
    }

    /// A test kernel in the production table would ship in the firmware.
    #[cfg(not(feature = "test-kernels"))]
    #[test]
    fn test_kernels_are_not_built_in() {
        for (name, _) in TEST_KERNELS {
            assert_eq!(lookup(&[], name).err(), Some(ErrorCode::UnknownFunction));
            assert!(lookup(TEST_KERNELS, name).is_ok());
        }
    }

    /// Scenario 26 on the device: `fail_on_replica(2)` fails on replica 2 only.
    #[test]
    fn fail_on_replica_fails_on_that_replica_only() {
        let f = lookup(TEST_KERNELS, "fail_on_replica").unwrap();
        for replica in 0..4 {
            let args = Args::new(&[tessera_core::wire::Value::Int(2)], replica).unwrap();
            match f(&args) {
                Ok(Output::Int(r)) => assert!(replica != 2 && r == 2, "replica {replica}"),
                Ok(other) => panic!("replica {replica}: {other:?}"),
                Err(code) => assert!(replica == 2 && code == ErrorCode::BadArguments),
            }
        }
    }

    /// A user table must shadow the built-ins, and an unknown name is an error.
    #[test]
    fn user_functions_come_first() {
        fn mine(_: &Args<'_>) -> Result<Output, ErrorCode> {
            Ok(Output::Int(7))
        }
        let user: &[(&str, Function)] = &[("add", mine)];
        let f = lookup(user, "add").unwrap();
        let args = Args::new(&[], 0).unwrap();
        assert!(matches!(f(&args), Ok(Output::Int(7))));
        assert!(lookup(user, "sum").is_ok());
        assert_eq!(lookup(user, "nope").err(), Some(ErrorCode::UnknownFunction));
    }
}
