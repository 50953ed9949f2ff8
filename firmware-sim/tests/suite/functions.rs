//! The worker side of a session, through `Device::handle`: the single-device behaviour of
//! the Disco scenarios (docs: shared/conformance/disco_scenarios.md, 1–6 and 8), array
//! registers of every dtype, the kernels' arithmetic, and a fuzz property that no call,
//! however wrong, panics or leaks a register or an arena block.

use proptest::prelude::*;
use tessera_core::dtype::DataType;
use tessera_core::wire::{
    Arg, Array, DataRequest, ErrorCode, KernelRequest, MemoryRequest, Request, Response, Target,
    Value, ValueKind, MAX_SHAPE_RANK,
};
use tessera_firmware_sim::functions::{Args, Function, Output};
use tessera_firmware_sim::{CycleCounter, Device, LinkLimits, MAX_REGISTERS};

const LINK: LinkLimits = LinkLimits {
    max_frame: 1024,
    window: 1,
};

/// A function that fails on one worker, as the device's test kernel of that name (built
/// only for its unit tests and with its `test-kernels` feature) does:
/// `fail_on_replica(r)` fails with [`ErrorCode::BadArguments`] on replica `r` and returns
/// `r` on every other replica.
fn fail_on_replica(args: &Args<'_>) -> Result<Output, ErrorCode> {
    args.expect(1)?;
    let r = args.int(0)?;
    if r == i64::from(args.replica()) {
        return Err(ErrorCode::BadArguments);
    }
    Ok(Output::Int(r))
}

/// The functions every device of these tests has besides the built-ins.
const TEST_KERNELS: &[(&str, Function)] = &[("fail_on_replica", fail_on_replica)];

/// Runs `f` on a fresh device of replica `replica` with `memory` bytes of arena.
fn with_device<R>(replica: u32, memory: usize, f: impl FnOnce(&mut Device<'_>) -> R) -> R {
    let mut arena = &mut vec![0u8; memory][..];
    let cycles = CycleCounter::new();
    // Opted in to a failing function, which no device has built in.
    let mut device = Device::new(replica, &mut arena, LINK, &cycles).with_functions(TEST_KERNELS);
    f(&mut device)
}

/// A register value the test owns (replies borrow from the device).
#[derive(Debug, Clone, PartialEq)]
enum Owned {
    Int(i64),
    Float(f64),
    Shape(Vec<u32>),
    Str(String),
    Array(DataType, Vec<u32>, Vec<u8>),
}

impl Owned {
    fn of(value: &Value<'_>) -> Self {
        match value {
            Value::Int(v) => Self::Int(*v),
            Value::Float(v) => Self::Float(*v),
            Value::Shape(s) => Self::Shape(s.to_vec()),
            Value::Str(s) => Self::Str(s.to_string()),
            Value::Array(a) => Self::Array(a.dtype, a.shape.to_vec(), a.data.to_vec()),
        }
    }

    fn value(&self) -> Value<'_> {
        match self {
            Self::Int(v) => Value::Int(*v),
            Self::Float(v) => Value::Float(*v),
            Self::Shape(s) => Value::Shape(dims(s)),
            Self::Str(s) => Value::Str(s),
            Self::Array(dtype, shape, data) => Value::Array(Array {
                dtype: *dtype,
                shape: dims(shape),
                data,
            }),
        }
    }
}

/// A shape for the wire; a rank past the limit is cut (the tests that need it say so).
fn dims(s: &[u32]) -> heapless::Vec<u32, MAX_SHAPE_RANK> {
    s.iter().take(MAX_SHAPE_RANK).copied().collect()
}

fn f32s(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn to_f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn f32_array(shape: &[u32], values: &[f32]) -> Owned {
    Owned::Array(DataType::F32, shape.to_vec(), f32s(values))
}

/// Runs `request`: `Ok` for `Done`, the code for an error reply.
fn run(device: &mut Device<'_>, request: &Request<'_>) -> Result<(), ErrorCode> {
    match device.handle(request.clone()) {
        Response::Done => Ok(()),
        Response::Error { code, .. } => Err(code),
        other => panic!("unexpected reply {other:?} to {request:?}"),
    }
}

fn invoke(
    device: &mut Device<'_>,
    function: &str,
    args: &[Arg<'_>],
    out: u16,
) -> Result<(), ErrorCode> {
    let args = heapless::Vec::from_slice(args).expect("at most four arguments");
    run(
        device,
        &Request::Kernels(KernelRequest::Invoke {
            function,
            args,
            out,
        }),
    )
}

fn lit(value: &Owned) -> Arg<'_> {
    Arg::Value(value.value())
}

fn set(device: &mut Device<'_>, id: u16, value: &Owned) -> Result<(), ErrorCode> {
    run(
        device,
        &Request::Kernels(KernelRequest::SetRegister {
            id,
            value: value.value(),
        }),
    )
}

fn get(device: &mut Device<'_>, id: u16) -> Result<Owned, ErrorCode> {
    match device.handle(Request::Kernels(KernelRequest::GetRegister { id })) {
        Response::Register { value } => Ok(Owned::of(&value)),
        Response::Error { code, .. } => Err(code),
        other => panic!("unexpected reply {other:?}"),
    }
}

fn read(device: &mut Device<'_>, id: u16, offset: u32, len: u32) -> Result<Vec<u8>, ErrorCode> {
    match device.handle(Request::Data(DataRequest::Read {
        target: Target::Register(id),
        offset,
        len,
    })) {
        Response::Data { data } => Ok(data.to_vec()),
        Response::Error { code, .. } => Err(code),
        other => panic!("unexpected reply {other:?}"),
    }
}

fn alloc(
    device: &mut Device<'_>,
    id: u16,
    dtype: DataType,
    shape: impl AsRef<[u32]>,
) -> Result<(), ErrorCode> {
    let shape = dims(shape.as_ref());
    run(
        device,
        &Request::Kernels(KernelRequest::AllocArray { id, dtype, shape }),
    )
}

fn write(device: &mut Device<'_>, id: u16, offset: u32, data: &[u8]) -> Result<(), ErrorCode> {
    run(
        device,
        &Request::Data(DataRequest::Write {
            target: Target::Register(id),
            offset,
            data,
        }),
    )
}

fn free(device: &mut Device<'_>, id: u16) -> Result<(), ErrorCode> {
    run(
        device,
        &Request::Kernels(KernelRequest::FreeRegister { id }),
    )
}

/// The register's description, its place in memory left out (`at` is 0): where a value
/// lands is the allocator's business, checked in `arena`'s own tests.
fn describe(device: &mut Device<'_>, id: u16) -> Response<'static> {
    match device.handle(Request::Kernels(KernelRequest::DescribeRegister { id })) {
        Response::Described {
            kind,
            dtype,
            shape,
            bytes,
            ..
        } => Response::Described {
            kind,
            dtype,
            shape,
            bytes,
            at: 0,
        },
        Response::Error { request, code } => Response::Error { request, code },
        other => panic!("unexpected reply {other:?}"),
    }
}

/// True if nothing is left behind once registers `1..=last` are freed: a call still gets
/// its scratch (a leaked one, even empty, would be "in use"), every register id fits in
/// the table, and the whole arena (rounded down to the block alignment) fits one slot.
/// Leaves the arena full: the last check of a test.
fn frees_everything(device: &mut Device<'_>, last: u16) -> bool {
    for id in 1..=last {
        let _ = free(device, id);
    }
    let one = Owned::Array(DataType::U8, vec![1, 1], vec![1]);
    let scratch_free = set(device, 1, &one).is_ok()
        && set(device, 2, &Owned::Int(0)).is_ok()
        && invoke(device, "transpose", &[Arg::Register(1)], 2).is_ok()
        && free(device, 1).is_ok();
    let all_registers =
        (2..=MAX_REGISTERS as u16).all(|id| set(device, id, &Owned::Int(0)).is_ok());
    let whole = Request::Memory(MemoryRequest::AllocSlot {
        slot: 1,
        bytes: device.limits().memory & !7,
    });
    let arena_empty = run(device, &whole).is_ok();
    scratch_free && all_registers && arena_empty
}

/// Scenario 1: `add_one(1)` is 2 on every worker, from a literal and from a register.
#[test]
fn add_one_int_on_every_worker() {
    for replica in 0..4 {
        with_device(replica, 4096, |d| {
            invoke(d, "add_one", &[lit(&Owned::Int(1))], 1).unwrap();
            assert_eq!(get(d, 1), Ok(Owned::Int(2)));
            invoke(d, "add_one", &[Arg::Register(1)], 2).unwrap();
            assert_eq!(get(d, 2), Ok(Owned::Int(3)));
        });
    }
}

/// Scenario 2: `add_one(1.5)` is exactly 2.5; an integer at i64::MAX is an error, not a
/// wrap to i64::MIN.
#[test]
fn add_one_float_exact_and_int_overflow() {
    with_device(0, 4096, |d| {
        invoke(d, "add_one", &[lit(&Owned::Float(1.5))], 1).unwrap();
        assert_eq!(get(d, 1), Ok(Owned::Float(2.5)));
        let max = Owned::Int(i64::MAX);
        assert_eq!(
            invoke(d, "add_one", &[lit(&max)], 2),
            Err(ErrorCode::BadArguments)
        );
        assert_eq!(get(d, 2), Err(ErrorCode::UnknownId { id: 2 }));
    });
}

/// Scenario 3 on worker 0: arange(6) as (2, 3) f32 copied in with AllocArray and Write,
/// `add_one`, read back in chunks: x + 1, shape kept. A kernel that returned a tensor or
/// lost the shape shows up in DescribeRegister.
#[test]
fn add_one_on_a_copied_array() {
    with_device(0, 4096, |d| {
        let x: Vec<f32> = (0..6).map(|i| i as f32).collect();
        let bytes = f32s(&x);
        let shape = dims(&[2, 3]);
        alloc(d, 1, DataType::F32, shape).unwrap();
        write(d, 1, 0, &bytes[..10]).unwrap();
        write(d, 1, 10, &bytes[10..]).unwrap();
        invoke(d, "add_one", &[Arg::Register(1)], 2).unwrap();
        let mut back = read(d, 2, 0, 12).unwrap();
        back.extend(read(d, 2, 12, 12).unwrap());
        assert_eq!(to_f32s(&back), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let described = describe(d, 2);
        assert_eq!(
            described,
            Response::Described {
                kind: ValueKind::Array,
                dtype: Some(DataType::F32),
                shape: dims(&[2, 3]),
                bytes: 24,
                at: 0,
            }
        );
        assert_eq!(
            get(d, 1),
            Ok(f32_array(&[2, 3], &x)),
            "the argument is untouched"
        );
    });
}

/// Scenarios 4 and 5: strings get "_suffix", shapes get 4 and 5 and stay shapes.
#[test]
fn string_suffix_and_shape_extend() {
    with_device(0, 4096, |d| {
        invoke(d, "str_suffix", &[lit(&Owned::Str("hello".into()))], 1).unwrap();
        assert_eq!(get(d, 1), Ok(Owned::Str("hello_suffix".into())));
        set(d, 2, &Owned::Shape(vec![1, 2, 3])).unwrap();
        invoke(d, "shape_extend", &[Arg::Register(2)], 3).unwrap();
        assert_eq!(get(d, 3), Ok(Owned::Shape(vec![1, 2, 3, 4, 5])));
        let full = Owned::Shape(vec![1; 7]);
        assert_eq!(
            invoke(d, "shape_extend", &[lit(&full)], 4),
            Err(ErrorCode::BadArguments)
        );
        assert_eq!(
            invoke(d, "str_suffix", &[lit(&Owned::Int(1))], 4),
            Err(ErrorCode::BadArguments)
        );
    });
}

/// Scenario 6: transpose (8, 16) → (16, 8) → (8, 16), chained through registers; both
/// results checked element by element (a kernel that only swapped the shape fails).
#[test]
fn transpose_chained_through_registers() {
    with_device(0, 8192, |d| {
        let x: Vec<f32> = (0..128).map(|i| i as f32).collect();
        set(d, 1, &f32_array(&[8, 16], &x)).unwrap();
        invoke(d, "transpose", &[Arg::Register(1)], 2).unwrap();
        invoke(d, "transpose", &[Arg::Register(2)], 3).unwrap();
        let t: Vec<f32> = (0..16)
            .flat_map(|j| (0..8).map(move |i| (i * 16 + j) as f32))
            .collect();
        assert_eq!(get(d, 2), Ok(f32_array(&[16, 8], &t)));
        assert_eq!(get(d, 3), Ok(f32_array(&[8, 16], &x)));
        // Any dtype: bytes move by element size.
        let u16s = Owned::Array(
            DataType::U16,
            vec![2, 3],
            vec![0, 0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0],
        );
        invoke(d, "transpose", &[lit(&u16s)], 4).unwrap();
        let expected = vec![0, 0, 3, 0, 1, 0, 4, 0, 2, 0, 5, 0];
        assert_eq!(
            get(d, 4),
            Ok(Owned::Array(DataType::U16, vec![3, 2], expected))
        );
        assert_eq!(
            invoke(d, "transpose", &[lit(&Owned::Int(1))], 5),
            Err(ErrorCode::BadArguments)
        );
    });
}

/// Scenario 8: a freed id, allocated again, never shows its stale value, whether it comes
/// back as an array, a call's result, or a smaller value in the same arena gap.
#[test]
fn a_reused_register_never_shows_the_stale_value() {
    with_device(0, 4096, |d| {
        set(d, 7, &f32_array(&[4], &[9.0; 4])).unwrap();
        free(d, 7).unwrap();
        assert_eq!(get(d, 7), Err(ErrorCode::UnknownId { id: 7 }));
        assert_eq!(read(d, 7, 0, 4), Err(ErrorCode::UnknownId { id: 7 }));
        alloc(d, 7, DataType::F32, dims(&[4])).unwrap();
        assert_eq!(get(d, 7), Ok(f32_array(&[4], &[0.0; 4])));
        free(d, 7).unwrap();
        invoke(d, "add_one", &[lit(&Owned::Int(1))], 7).unwrap();
        assert_eq!(get(d, 7), Ok(Owned::Int(2)));
        set(d, 7, &Owned::Str("a longer string".into())).unwrap();
        set(d, 7, &Owned::Str("short".into())).unwrap();
        assert_eq!(get(d, 7), Ok(Owned::Str("short".into())));
    });
}

/// Scenario 28 on the device: a missing function is a clean error, runs nothing and
/// creates no result register.
#[test]
fn missing_functions_are_clean_errors() {
    with_device(0, 4096, |d| {
        assert_eq!(
            run(
                d,
                &Request::Kernels(KernelRequest::HasFunction {
                    function: "add_one"
                })
            ),
            Ok(())
        );
        assert_eq!(
            run(
                d,
                &Request::Kernels(KernelRequest::HasFunction {
                    function: "no_such"
                })
            ),
            Err(ErrorCode::UnknownFunction)
        );
        assert_eq!(
            invoke(d, "no_such", &[lit(&Owned::Int(1))], 1),
            Err(ErrorCode::UnknownFunction)
        );
        assert_eq!(get(d, 1), Err(ErrorCode::UnknownId { id: 1 }));
        assert_eq!(
            invoke(d, "add_one", &[Arg::Register(9)], 1),
            Err(ErrorCode::UnknownId { id: 9 })
        );
    });
}

/// Scenario 26 through the device: a user function that fails on replica 2 fails there
/// only, as an error reply naming the call (the device's own `fail_on_replica` is checked
/// by its unit tests).
#[test]
fn fail_on_replica_fails_on_that_replica_only() {
    for replica in 0..4 {
        with_device(replica, 4096, |d| {
            let got = invoke(d, "fail_on_replica", &[lit(&Owned::Int(2))], 1);
            if replica == 2 {
                assert_eq!(got, Err(ErrorCode::BadArguments));
            } else {
                assert_eq!(got, Ok(()));
                assert_eq!(get(d, 1), Ok(Owned::Int(2)));
            }
        });
    }
}

/// A failing call leaves no block, no register and no change behind: a kernel that forgot
/// its scratch, or a literal materialised in a register, would keep the arena from holding
/// one whole-arena slot afterwards, or the table from holding every register.
#[test]
fn failing_calls_leak_nothing() {
    with_device(2, 4096, |d| {
        let i8s = Owned::Array(DataType::I8, vec![3], vec![1, 127, 3]);
        set(d, 1, &i8s).unwrap();
        set(d, 2, &f32_array(&[2, 3], &[1.0; 6])).unwrap();
        set(d, 3, &Owned::Str("kept".into())).unwrap();
        let failing: [(&str, Vec<Arg<'_>>); 6] = [
            ("add_one", vec![Arg::Register(1)]),
            ("add_one", vec![lit(&i8s)]),
            ("matmul", vec![Arg::Register(2), Arg::Register(2)]),
            ("fail_on_replica", vec![lit(&Owned::Int(2))]),
            ("fill", vec![Arg::Register(1), lit(&Owned::Float(0.5))]),
            ("transpose", vec![Arg::Register(3)]),
        ];
        for (function, args) in &failing {
            assert_eq!(
                invoke(d, function, args, 3),
                Err(ErrorCode::BadArguments),
                "{function}"
            );
            assert_eq!(
                get(d, 3),
                Ok(Owned::Str("kept".into())),
                "{function} changed out"
            );
        }
        assert_eq!(get(d, 1), Ok(i8s.clone()));
        assert!(frees_everything(d, 3));
    });
}

/// Arrays of every dtype round-trip through AllocArray, chunked Write and Read of the register,
/// DescribeRegister and GetRegister: a wrong element size in the checks fails some dtype.
#[test]
fn arrays_of_every_dtype_round_trip() {
    for dtype in DataType::ALL {
        with_device(0, 4096, |d| {
            let n = 6 * dtype.size();
            let bytes: Vec<u8> = (0..n as u8).map(|b| b.wrapping_mul(37)).collect();
            alloc(d, 4, dtype, [3, 2]).unwrap();
            let half = n / 2;
            write(d, 4, 0, &bytes[..half]).unwrap();
            write(d, 4, half as u32, &bytes[half..]).unwrap();
            let mut back = read(d, 4, 0, half as u32).unwrap();
            back.extend(read(d, 4, half as u32, (n - half) as u32).unwrap());
            assert_eq!(back, bytes, "{dtype}");
            assert_eq!(
                get(d, 4),
                Ok(Owned::Array(dtype, vec![3, 2], bytes.clone()))
            );
            assert_eq!(
                describe(d, 4),
                Response::Described {
                    kind: ValueKind::Array,
                    dtype: Some(dtype),
                    shape: dims(&[3, 2]),
                    bytes: n as u32,
                    at: 0,
                }
            );
            let past = write(d, 4, 1, &bytes);
            assert!(
                matches!(past, Err(ErrorCode::OutOfBounds { .. })),
                "{dtype}"
            );
            let wrong = Owned::Array(dtype, vec![3, 2], bytes[1..].to_vec());
            assert_eq!(set(d, 5, &wrong), Err(ErrorCode::BadArguments), "{dtype}");
            assert_eq!(
                invoke(d, "transpose", &[lit(&wrong)], 5),
                Err(ErrorCode::BadArguments)
            );
            invoke(d, "transpose", &[Arg::Register(4)], 5).unwrap();
        });
    }
}

/// Sizes and ranges are checked everywhere: overflowing shapes, reads past the end or
/// larger than a frame, and chunk access to registers without bytes.
#[test]
fn sizes_and_ranges_are_checked() {
    with_device(0, 4096, |d| {
        let huge = alloc(d, 1, DataType::I64, [u32::MAX; 8]);
        assert!(matches!(huge, Err(ErrorCode::OutOfMemory { .. })));
        let big = alloc(d, 1, DataType::U8, [8192]);
        assert!(matches!(big, Err(ErrorCode::OutOfMemory { .. })));
        let zero = alloc(d, 0, DataType::U8, [1]);
        assert_eq!(zero, Err(ErrorCode::UnknownId { id: 0 }));
        set(d, 1, &f32_array(&[2], &[1.0, 2.0])).unwrap();
        assert!(matches!(
            read(d, 1, 4, 8),
            Err(ErrorCode::OutOfBounds {
                offset: 4,
                len: 8,
                size: 8
            })
        ));
        assert!(matches!(
            read(d, 1, u32::MAX, 2),
            Err(ErrorCode::OutOfBounds { .. })
        ));
        assert_eq!(
            read(d, 1, 0, LINK.max_frame as u32 + 1),
            Err(ErrorCode::ReplyTooLarge)
        );
        set(d, 2, &Owned::Str("héllo".into())).unwrap();
        assert_eq!(read(d, 2, 0, 3), Ok("hé".as_bytes().to_vec()));
        set(d, 3, &f32_array(&[1], &[0.5])).unwrap();
        assert_eq!(read(d, 3, 0, 4), Ok(f32s(&[0.5])));
        set(d, 4, &Owned::Int(1)).unwrap();
        assert_eq!(read(d, 4, 0, 0), Err(ErrorCode::BadArguments));
        let bad = Err(ErrorCode::BadArguments);
        assert_eq!(write(d, 2, 0, &[0]), bad, "strings stay UTF-8");
        assert_eq!(write(d, 4, 0, &[0]), bad);
        assert_eq!(write(d, 9, 0, &[0]), Err(ErrorCode::UnknownId { id: 9 }));
    });
}

/// `add_one` over the numeric dtypes, and overflow at each integer maximum (a wrap would
/// give the minimum).
#[test]
fn add_one_over_dtypes() {
    with_device(0, 4096, |d| {
        let cases: [(DataType, Vec<u8>, Vec<u8>); 5] = [
            (DataType::F32, f32s(&[-1.5, 0.25]), f32s(&[-0.5, 1.25])),
            (
                DataType::F64,
                [0.1f64, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect(),
                [1.1f64, 3.0].iter().flat_map(|v| v.to_le_bytes()).collect(),
            ),
            (
                DataType::I32,
                [-1i32, 7].iter().flat_map(|v| v.to_le_bytes()).collect(),
                [0i32, 8].iter().flat_map(|v| v.to_le_bytes()).collect(),
            ),
            (
                DataType::I64,
                [-9i64, i64::MAX - 1]
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect(),
                [-8i64, i64::MAX]
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect(),
            ),
            (DataType::U8, vec![0, 254], vec![1, 255]),
        ];
        for (dtype, input, expected) in cases {
            let x = Owned::Array(dtype, vec![2], input);
            invoke(d, "add_one", &[lit(&x)], 1).unwrap();
            assert_eq!(
                get(d, 1),
                Ok(Owned::Array(dtype, vec![2], expected)),
                "{dtype}"
            );
        }
        for (dtype, max) in [
            (DataType::U8, vec![255]),
            (DataType::I32, i32::MAX.to_le_bytes().to_vec()),
            (DataType::I64, i64::MAX.to_le_bytes().to_vec()),
            (DataType::U64, u64::MAX.to_le_bytes().to_vec()),
        ] {
            let x = Owned::Array(dtype, vec![1], max);
            assert_eq!(
                invoke(d, "add_one", &[lit(&x)], 1),
                Err(ErrorCode::BadArguments),
                "{dtype}"
            );
        }
        let halves = Owned::Array(DataType::F16, vec![1], vec![0, 0]);
        assert_eq!(
            invoke(d, "add_one", &[lit(&halves)], 1),
            Err(ErrorCode::BadArguments)
        );
    });
}

/// `fill` converts its value to the array's dtype, refusing truncation and overflow.
#[test]
fn fill_converts_and_checks() {
    with_device(0, 4096, |d| {
        let a = Owned::Array(DataType::F32, vec![3, 4], vec![0; 48]);
        invoke(d, "fill", &[lit(&a), lit(&Owned::Float(1.5))], 1).unwrap();
        assert_eq!(get(d, 1), Ok(f32_array(&[3, 4], &[1.5; 12])));
        let i = Owned::Array(DataType::I16, vec![2], vec![0; 4]);
        invoke(d, "fill", &[lit(&i), lit(&Owned::Float(-3.0))], 2).unwrap();
        assert_eq!(
            get(d, 2),
            Ok(Owned::Array(
                DataType::I16,
                vec![2],
                vec![0xFD, 0xFF, 0xFD, 0xFF]
            ))
        );
        for bad in [
            Owned::Float(2.5),
            Owned::Int(40_000),
            Owned::Float(f64::NAN),
            Owned::Str("1".into()),
        ] {
            assert_eq!(
                invoke(d, "fill", &[lit(&i), lit(&bad)], 2),
                Err(ErrorCode::BadArguments),
                "{bad:?}"
            );
        }
    });
}

/// `matmul`, `relu` and `gelu` against the host's f64 formulas (GELU's tanh form, as the
/// host-side tests write it) within 1e-5; mismatched shapes and dtypes are refused.
#[test]
fn matmul_relu_gelu_match_the_host() {
    with_device(0, 16384, |d| {
        let (m, k, n) = (3usize, 5usize, 4usize);
        let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.11).cos()).collect();
        set(d, 1, &f32_array(&[m as u32, k as u32], &a)).unwrap();
        set(d, 2, &f32_array(&[k as u32, n as u32], &b)).unwrap();
        invoke(d, "matmul", &[Arg::Register(1), Arg::Register(2)], 3).unwrap();
        let Ok(Owned::Array(DataType::F32, shape, c)) = get(d, 3) else {
            panic!("no product")
        };
        assert_eq!(shape, [m as u32, n as u32]);
        for (idx, got) in to_f32s(&c).into_iter().enumerate() {
            let (i, j) = (idx / n, idx % n);
            let want: f64 = (0..k)
                .map(|p| f64::from(a[i * k + p]) * f64::from(b[p * n + j]))
                .sum();
            assert!((f64::from(got) - want).abs() < 1e-5, "c[{i},{j}]");
        }
        assert_eq!(
            invoke(d, "matmul", &[Arg::Register(1), Arg::Register(1)], 4),
            Err(ErrorCode::BadArguments)
        );
        let xs: Vec<f32> = (0..=400)
            .map(|i| -10.0 + i as f32 * 0.05)
            .chain([-30.0, 30.0, 1e-4])
            .collect();
        let x = f32_array(&[xs.len() as u32], &xs);
        invoke(d, "relu", &[lit(&x)], 5).unwrap();
        invoke(d, "gelu", &[lit(&x)], 6).unwrap();
        let (Ok(Owned::Array(_, _, relu)), Ok(Owned::Array(_, _, gelu))) = (get(d, 5), get(d, 6))
        else {
            panic!("no results")
        };
        for ((x, r), g) in xs.iter().zip(to_f32s(&relu)).zip(to_f32s(&gelu)) {
            assert_eq!(r, x.max(0.0));
            let x = f64::from(*x);
            let tanh_form = 0.5
                * x
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh());
            assert!(
                (f64::from(g) - tanh_form).abs() < 1e-5,
                "gelu({x}) = {g}, host {tanh_form}"
            );
        }
        let f64s = Owned::Array(DataType::F64, vec![1], vec![0; 8]);
        assert_eq!(
            invoke(d, "gelu", &[lit(&f64s)], 7),
            Err(ErrorCode::BadArguments)
        );
    });
}

/// Result placement: `out` 0 discards, `out` may be the argument itself, `scale` works in
/// place (and only there), and the register-only `Call` runs the same functions.
#[test]
fn results_discarded_replaced_or_in_place() {
    with_device(0, 4096, |d| {
        set(d, 1, &f32_array(&[2], &[1.0, 2.0])).unwrap();
        invoke(d, "add_one", &[Arg::Register(1)], 0).unwrap();
        assert_eq!(get(d, 0), Err(ErrorCode::UnknownId { id: 0 }));
        invoke(d, "add_one", &[Arg::Register(1)], 1).unwrap();
        assert_eq!(get(d, 1), Ok(f32_array(&[2], &[2.0, 3.0])));
        invoke(d, "scale", &[Arg::Register(1), lit(&Owned::Float(0.5))], 0).unwrap();
        assert_eq!(get(d, 1), Ok(f32_array(&[2], &[1.0, 1.5])));
        let literal = f32_array(&[1], &[1.0]);
        assert_eq!(
            invoke(d, "scale", &[lit(&literal), lit(&Owned::Float(2.0))], 0),
            Err(ErrorCode::BadArguments)
        );
        set(d, 2, &f32_array(&[2], &[1.0, 2.5])).unwrap();
        invoke(d, "sum", &[Arg::Register(2)], 3).unwrap();
        assert_eq!(get(d, 3), Ok(Owned::Float(3.5)));
        invoke(d, "elements", &[Arg::Register(1)], 4).unwrap();
        assert_eq!(get(d, 4), Ok(Owned::Int(2)));
        assert!(frees_everything(d, 4));
    });
}

/// A firmware's own kernels: searched before the built-ins (here replacing `add_one`),
/// their strings checked for UTF-8, and a fill that fails frees its scratch like a
/// built-in's (a user kernel is the likeliest to get this wrong).
#[test]
fn user_kernels_come_first_and_are_checked_like_builtins() {
    fn add_two(args: &Args<'_>) -> Result<Output, ErrorCode> {
        Ok(Output::Int(args.int(0)? + 2))
    }
    fn bad_text(_: &Args<'_>) -> Result<Output, ErrorCode> {
        Ok(Output::Str {
            len: 2,
            fill: |_, out| {
                out.copy_from_slice(&[0xC3, 0x28]);
                Ok(())
            },
        })
    }
    fn fails_late(_: &Args<'_>) -> Result<Output, ErrorCode> {
        Output::array(DataType::U8, &[16], |_, _| Err(ErrorCode::NotInstrumented))
    }
    const MINE: &[(&str, Function)] = &[
        ("add_one", add_two),
        ("bad_text", bad_text),
        ("fails_late", fails_late),
    ];
    let mut arena = &mut vec![0u8; 4096][..];
    let cycles = CycleCounter::new();
    let d = &mut Device::new(0, &mut arena, LINK, &cycles).with_functions(MINE);
    invoke(d, "add_one", &[lit(&Owned::Int(1))], 1).unwrap();
    assert_eq!(get(d, 1), Ok(Owned::Int(3)));
    assert_eq!(invoke(d, "bad_text", &[], 2), Err(ErrorCode::BadArguments));
    assert_eq!(get(d, 2), Err(ErrorCode::UnknownId { id: 2 }));
    let one = f32_array(&[1], &[1.0]);
    assert_eq!(
        invoke(d, "fails_late", &[lit(&one), Arg::Register(1)], 1),
        Err(ErrorCode::NotInstrumented)
    );
    assert_eq!(get(d, 1), Ok(Owned::Int(3)));
    invoke(d, "transpose", &[lit(&f32_array(&[1, 1], &[4.0]))], 3).unwrap();
    assert!(frees_everything(d, 3));
}

// ---- Fuzz: random calls through `Device::handle` ----

/// Mostly f32 (what the kernels compute on), then any dtype.
fn dtype() -> impl Strategy<Value = DataType> {
    prop_oneof![
        Just(DataType::F32),
        prop::sample::select(DataType::ALL.to_vec())
    ]
}

/// Mostly small 2-D shapes (transpose and matmul need them), then anything up to rank 8.
fn shape() -> impl Strategy<Value = Vec<u32>> {
    prop_oneof![
        3 => prop::collection::vec(0u32..4, 2),
        2 => prop::collection::vec(0u32..5, 0..4),
        1 => prop::collection::vec(prop_oneof![0u32..3, any::<u32>()], 0..9),
    ]
}

/// Values of every kind; arrays usually the right size, sometimes not, with small or
/// arbitrary elements (NaNs, integer maxima).
fn owned() -> impl Strategy<Value = Owned> {
    let array = (
        dtype(),
        shape(),
        prop_oneof![Just(0u8), Just(0x3F), Just(0x7F), any::<u8>()],
        prop::bool::weighted(0.85),
        0usize..40,
    )
        .prop_map(|(dtype, shape, fill, right, wrong)| {
            let n = shape
                .iter()
                .try_fold(dtype.size(), |n, &d| n.checked_mul(d as usize))
                .filter(|&n| n <= 512);
            let len = if right { n.unwrap_or(wrong) } else { wrong };
            Owned::Array(dtype, shape, vec![fill; len])
        });
    prop_oneof![
        2 => prop_oneof![-3i64..5, any::<i64>()].prop_map(Owned::Int),
        2 => prop_oneof![-3.0f64..3.0, any::<f64>()].prop_map(Owned::Float),
        1 => shape().prop_map(Owned::Shape),
        1 => "[a-zé]{0,12}".prop_map(Owned::Str),
        4 => array,
    ]
}

/// Each function's name and argument count; "nope" does not exist.
const FUNCTIONS: &[(&str, usize)] = &[
    ("replica_id", 0),
    ("add", 2),
    ("add_one", 1),
    ("str_suffix", 1),
    ("shape_extend", 1),
    ("elements", 1),
    ("sum", 1),
    ("scale", 2),
    ("relu", 1),
    ("gelu", 1),
    ("fill", 2),
    ("transpose", 1),
    ("matmul", 2),
    ("fail_on_replica", 1),
    ("nope", 1),
];

/// Registers every case starts with, so that calls on registers mostly find one (and
/// `matmul`, `scale` and `fill` sometimes find the right ones).
fn starting_registers() -> Vec<Owned> {
    vec![
        f32_array(&[2, 3], &[1.0, -2.0, 3.0, 0.5, f32::NAN, 6.0]),
        f32_array(&[3, 3], &[0.25; 9]),
        Owned::Float(0.5),
        Owned::Str("hello".into()),
        Owned::Shape(vec![1, 2, 3]),
        Owned::Array(DataType::I8, vec![1, 2], vec![0x7F, 0x80]),
        Owned::Int(1),
    ]
}

#[derive(Debug, Clone)]
enum Op {
    Invoke(&'static str, Vec<Result<u16, Owned>>, u16),
    Set(u16, Owned),
    Alloc(u16, DataType, Vec<u32>),
    Free(u16),
    Write(u16, u32, Vec<u8>),
}

fn op() -> impl Strategy<Value = Op> {
    let id = || prop_oneof![1u16..8, 0u16..10];
    let arg = prop_oneof![2 => id().prop_map(Ok), 1 => owned().prop_map(Err)];
    let invoke = (
        prop::sample::select(FUNCTIONS),
        prop::bool::weighted(0.9),
        0usize..5,
        prop::collection::vec(arg, 4),
        id(),
    )
        .prop_map(|((name, arity), right, count, mut args, out)| {
            args.truncate(if right { arity } else { count });
            Op::Invoke(name, args, out)
        });
    prop_oneof![
        6 => invoke,
        2 => (id(), owned()).prop_map(|(id, v)| Op::Set(id, v)),
        1 => (id(), dtype(), shape()).prop_map(|(id, t, s)| Op::Alloc(id, t, s)),
        1 => id().prop_map(Op::Free),
        1 => (id(), 0u32..40, prop::collection::vec(any::<u8>(), 0..16))
            .prop_map(|(id, at, data)| Op::Write(id, at, data)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]

    /// Random calls on random registers and literals never panic, answer `Done` or an error
    /// (never anything else), never expose the engine's scratch as register 0, and leave
    /// nothing behind once their registers are freed.
    #[test]
    fn random_calls_never_panic_or_leak(
        replica in 0u32..3,
        ops in prop::collection::vec(op(), 1..30),
    ) {
        with_device(replica, 4096, |d| {
            for (id, value) in (1..).zip(starting_registers()) {
                set(d, id, &value).unwrap();
            }
            for op in &ops {
                let _ = match op {
                    Op::Invoke(name, args, out) => {
                        let args: Vec<Arg<'_>> = args
                            .iter()
                            .map(|a| match a {
                                Ok(id) => Arg::Register(*id),
                                Err(v) => lit(v),
                            })
                            .collect();
                        invoke(d, name, &args, *out)
                    }
                    Op::Set(id, v) => set(d, *id, v),
                    Op::Alloc(id, dtype, s) => alloc(d, *id, *dtype, dims(s)),
                    Op::Free(id) => free(d, *id),
                    Op::Write(id, offset, data) => write(d, *id, *offset, data),
                };
                prop_assert_eq!(get(d, 0), Err(ErrorCode::UnknownId { id: 0 }));
            }
            prop_assert!(frees_everything(d, 9));
            Ok(())
        })?;
    }
}
