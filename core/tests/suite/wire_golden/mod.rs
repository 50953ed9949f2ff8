//! Golden bytes for every wire message.
//!
//! One representative value of every `Request` (every area's, and a hello), `Response`,
//! `ErrorCode`, `Value`, `Arg`,
//! `ValueKind`, `RequestKind`, `ReduceOp` and `DataType` variant, and of `Limits`,
//! `Program`, `Array` and `Envelope`, is encoded and compared with bytes written
//! literally below; each also decodes back to the value it came from. A few whole frames
//! pin the framing (CRC-32 and COBS) as well.
//!
//! What this catches: host and device built from different commits must agree byte for
//! byte, and postcard writes an enum variant as its position and a struct as its fields in
//! declaration order. So reordering variants, inserting one anywhere but at the end,
//! reordering, adding, removing or retyping a field, or changing the framing changes bytes
//! here and fails, instead of passing silently and breaking the link. Such a change must
//! come with a [`PROTOCOL_VERSION`] bump, which [`protocol_version_is_pinned`] asks for.
//!
//! The `*_variant` helpers match exhaustively (no `_` arm): a new variant does not compile
//! until it is given a position there, and then the coverage checks fail until it has a
//! golden case. The number of variants is also probed from the decoder itself, so a
//! variant cannot be left out of both.
//!
//! The literals were produced once by running the encoder and checked by hand against
//! postcard's format (varints, zigzag for signed, fixed little-endian floats, length-prefixed
//! slices and strings). To update after an intended change: bump the version, run this
//! test, and paste the `actual` bytes it prints.

use tessera_core::dtype::DataType;
use tessera_core::grouping::{CommGroup, GroupingSpec, RetrievalMode};
use tessera_core::program::{
    Anchor, AnchorTensor, Layer, Optimizer, Program, ProgramFault, ProgramPart, RuleKind, Sharding,
    Stream, Variable,
};
use tessera_core::stream::AnchorReturnType;
use tessera_core::wire::{
    decode_body, encode_frame, Arg, Array, Combined, Contribution, DataRequest, Envelope,
    ErrorCode, FrameDecoder, FromDevice, Invariant, KernelRequest, Limits, MemoryRequest,
    ProgramRequest, ReduceOp, Request, RequestKind, Response, StreamRequest, Target, ToDevice,
    Value, ValueKind, PROTOCOL_VERSION,
};

/// `"0a ff"` → `[0x0a, 0xff]`.
fn bytes(hex: &str) -> Vec<u8> {
    hex.split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).expect("two hex digits"))
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Encodes every `(name, value, golden)` of `$cases` with postcard, compares with the
/// golden bytes and decodes them back as `$ty`; panics with every mismatch at once (the
/// `actual` lines are what to paste after an intended change).
macro_rules! check_golden {
    ($ty:ty, $cases:expr) => {{
        let mut failures = Vec::new();
        for (name, value, golden) in $cases.iter() {
            let mut buf = [0u8; 256];
            let encoded = postcard::to_slice(value, &mut buf).expect("fits the buffer");
            let actual = hex(encoded);
            if actual != hex(&bytes(golden)) {
                failures.push(format!(
                    "{name}: expected {golden}\n{name}: actual   {actual}"
                ));
                continue;
            }
            let decoded: $ty = decode_body(encoded).expect("golden bytes decode");
            if decoded != *value {
                failures.push(format!("{name}: decodes to {decoded:?}, not {value:?}"));
            }
        }
        assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    }};
}

/// How many variants the decoder knows: the first variant index that no longer decodes
/// (fields filled with zero bytes, which every field type here accepts).
fn probed_variants(decodes: impl Fn(&[u8]) -> bool) -> u32 {
    let mut index = 0u8;
    loop {
        let mut body = [0u8; 64];
        body[0] = index;
        if !decodes(&body) {
            return u32::from(index);
        }
        index += 1;
        assert!(index < 0x80, "more variants than one varint byte");
    }
}

/// Asserts that `positions` (the variant position of every golden case) are exactly
/// `0..n`, each once, where `n` is what the decoder knows.
fn assert_covers(what: &str, mut positions: Vec<u32>, variants: u32) {
    positions.sort_unstable();
    let expected: Vec<u32> = (0..variants).collect();
    assert_eq!(
        positions, expected,
        "{what}: every variant needs exactly one golden case"
    );
}

mod variants;
use variants::*;
mod values;
use values::*;
mod golden;
