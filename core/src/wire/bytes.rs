//! Byte fields written as one run of bytes.
//!
//! serde's derive writes a `&[u8]` field as a sequence: its length, then each byte as a
//! `u8` value of its own, one call per byte. Postcard writes a `u8` as the byte itself, so
//! the sequence's bytes on the link are exactly those of `serialize_bytes` (the length as
//! a varint, then the bytes): marking a field `#[serde(serialize_with =
//! "bytes::serialize")]` changes no message's bytes (the golden bytes pin that), only
//! the cost of writing it — one copy instead of a call per byte, which mattered for every
//! contribution and combination of a step. Reading needs no help: a borrowed `&[u8]`
//! already reads its bytes in place.

use serde::Serializer;

/// Writes `data` as one run of bytes (see the module documentation).
pub fn serialize<S: Serializer>(data: &&[u8], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_bytes(data)
}

#[cfg(test)]
mod tests {
    use serde::Serialize;

    /// Catches a byte field whose bytes change when it is written in one run: the same
    /// bytes as serde's sequence of `u8`s, at lengths on both sides of a varint's
    /// one-byte limit.
    #[test]
    fn one_run_writes_the_bytes_a_sequence_writes() {
        #[derive(Serialize)]
        struct AsSequence<'a> {
            data: &'a [u8],
        }
        #[derive(Serialize)]
        struct AsRun<'a> {
            #[serde(serialize_with = "super::serialize")]
            data: &'a [u8],
        }
        let source: [u8; 300] = core::array::from_fn(|i| (i * 7) as u8);
        for len in [0, 1, 127, 128, 300] {
            let data = &source[..len];
            let mut a = [0u8; 320];
            let mut b = [0u8; 320];
            let a = postcard::to_slice(&AsSequence { data }, &mut a).unwrap();
            let b = postcard::to_slice(&AsRun { data }, &mut b).unwrap();
            assert_eq!(a, b, "{len} bytes");
        }
    }
}
