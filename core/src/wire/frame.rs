//! Frames on a byte link: `COBS(postcard body ‖ CRC-32 of the body, little-endian) ‖ 0x00`.
//!
//! COBS removes every zero from the frame, so `0x00` marks frame ends unambiguously: after
//! any damage the decoder starts afresh at the next delimiter.

use serde::{Deserialize, Serialize};

/// CRC-32 as Ethernet and zlib use it.
const CRC: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);

/// Bytes a frame adds to its body, besides COBS's one byte in 254: the CRC, COBS's leading
/// byte and the delimiter.
pub const FRAME_OVERHEAD: usize = 4 + 1 + 1;

/// The largest encoded frame (delimiter included) for a body of `body` bytes.
pub const fn max_frame_len(body: usize) -> usize {
    // COBS adds one byte per 254 and one more at the start.
    // Saturating: a body near `usize::MAX` can never be encoded anyway.
    let with_crc = body.saturating_add(4);
    with_crc.saturating_add(with_crc / 254).saturating_add(2)
}

/// Encodes `message` as one frame into `out`, using `scratch` for the body; returns the
/// frame's length (delimiter included).
pub fn encode_frame<T: Serialize>(
    message: &T,
    scratch: &mut [u8],
    out: &mut [u8],
) -> Result<usize, FrameError> {
    let body_len = postcard::to_slice(message, scratch)
        .map_err(|_| FrameError::TooLarge)?
        .len();
    let crc = CRC.checksum(&scratch[..body_len]).to_le_bytes();
    let with_crc = body_len + crc.len();
    scratch
        .get_mut(body_len..with_crc)
        .ok_or(FrameError::TooLarge)?
        .copy_from_slice(&crc);
    if out.len() < max_frame_len(body_len) {
        return Err(FrameError::TooLarge);
    }
    let encoded = cobs::encode(&scratch[..with_crc], out);
    *out.get_mut(encoded).ok_or(FrameError::TooLarge)? = 0;
    Ok(encoded + 1)
}

/// Encodes `message` as a bare body (postcard, no CRC, no framing) into `out`; returns its
/// length. Links that carry whole messages (threads of one process) send bodies as they are.
pub fn encode_body<T: Serialize>(message: &T, out: &mut [u8]) -> Result<usize, FrameError> {
    postcard::to_slice(message, out)
        .map(|body| body.len())
        .map_err(|_| FrameError::TooLarge)
}

/// Frames a body that is already encoded (`COBS(body ‖ CRC-32) ‖ 0x00`) into `out`;
/// returns the frame's length (delimiter included).
pub fn frame_body(body: &[u8], out: &mut [u8]) -> Result<usize, FrameError> {
    if out.len() < max_frame_len(body.len()) {
        return Err(FrameError::TooLarge);
    }
    let crc = CRC.checksum(body).to_le_bytes();
    let mut encoder = cobs::CobsEncoder::new(out);
    encoder.push(body).map_err(|_| FrameError::TooLarge)?;
    encoder.push(&crc).map_err(|_| FrameError::TooLarge)?;
    let n = encoder.finalize();
    *out.get_mut(n).ok_or(FrameError::TooLarge)? = 0;
    Ok(n + 1)
}

/// Decodes one message from a frame body returned by [`FrameDecoder`].
pub fn decode_body<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, FrameError> {
    postcard::from_bytes(body).map_err(|_| FrameError::Malformed)
}

/// Reassembles frames from a byte stream in a fixed buffer of `N` bytes.
#[derive(Debug, Clone)]
pub struct FrameDecoder<const N: usize> {
    buf: [u8; N],
    len: usize,
    /// The current frame outgrew the buffer: drop bytes until the next delimiter.
    overflowed: bool,
}

impl<const N: usize> Default for FrameDecoder<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> FrameDecoder<N> {
    /// An empty decoder.
    pub const fn new() -> Self {
        Self {
            buf: [0; N],
            len: 0,
            overflowed: false,
        }
    }

    /// Forgets any partial frame.
    pub fn clear(&mut self) {
        self.len = 0;
        self.overflowed = false;
    }

    /// Feeds one byte. At a delimiter, returns the frame's checked body (`Ok`) or why the
    /// frame was dropped (`Err`); otherwise `None`. Empty frames (two delimiters in a row)
    /// are skipped silently.
    pub fn push(&mut self, byte: u8) -> Option<Result<&[u8], FrameError>> {
        if byte != 0 {
            match self.buf.get_mut(self.len) {
                Some(slot) if !self.overflowed => {
                    *slot = byte;
                    self.len += 1;
                }
                _ => self.overflowed = true,
            }
            return None;
        }
        let (len, overflowed) = (self.len, self.overflowed);
        self.clear();
        if overflowed {
            return Some(Err(FrameError::Oversized));
        }
        if len == 0 {
            return None;
        }
        Some(self.check(len))
    }

    /// Feeds bytes until a frame ends; returns how many bytes were used and the frame's
    /// outcome, if one ended.
    pub fn feed(&mut self, bytes: &[u8]) -> (usize, Option<Result<&[u8], FrameError>>) {
        // The bytes up to the next delimiter are copied in one go, not one by one.
        let end = bytes.iter().position(|&b| b == 0);
        let run = end.and_then(|end| bytes.get(..end)).unwrap_or(bytes);
        if !self.overflowed {
            // No room (or a length past usize, which is certainly no room): overflowed.
            let room = self.len.checked_add(run.len());
            let room = room.and_then(|end| self.buf.get_mut(self.len..end));
            if room.is_some_and(|room| crate::panic_free::copy_exact(room, run)) {
                self.len += run.len();
            } else {
                self.overflowed = true;
            }
        }
        match end {
            Some(at) => (at + 1, self.push(0)),
            None => (bytes.len(), None),
        }
    }

    fn check(&mut self, len: usize) -> Result<&[u8], FrameError> {
        let frame = self.buf.get_mut(..len).ok_or(FrameError::Oversized)?;
        let decoded = decode_in_place(frame).ok_or(FrameError::Cobs)?;
        // The body, then its CRC-32's four bytes (split without an index that could
        // panic: four bounds checks and their panic paths cost flash on a device).
        let (body, crc) = (self.buf.get(..decoded))
            .and_then(<[u8]>::split_last_chunk::<4>)
            .ok_or(FrameError::TooShort)?;
        let sent = u32::from_le_bytes(*crc);
        let actual = CRC.checksum(body);
        if sent != actual {
            return Err(FrameError::Crc { sent, actual });
        }
        Ok(body)
    }
}

/// Why a frame could not be built or was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum FrameError {
    /// The message does not fit the buffers given.
    #[error("the message does not fit the frame buffers")]
    TooLarge,
    /// A frame longer than the decoder's buffer; dropped whole.
    #[error("a frame exceeded the decoder's buffer and was dropped")]
    Oversized,
    /// Bytes that are not valid COBS.
    #[error("a frame is not valid COBS")]
    Cobs,
    /// A frame too short to hold a CRC.
    #[error("a frame is too short to hold its CRC")]
    TooShort,
    /// The CRC does not match: the frame was damaged.
    #[error("frame CRC mismatch: sent {sent:#010x}, computed {actual:#010x}")]
    Crc {
        /// CRC in the frame.
        sent: u32,
        /// CRC of the body received.
        actual: u32,
    },
    /// A body that is not the expected message.
    #[error("a frame's body is not a valid message")]
    Malformed,
}

/// `cobs::decode_in_place` for a frame without its delimiter (so without zeros), by cobs's
/// own state machine fed one byte at a time: `decode_in_place` indexes its buffer with a
/// bounds-check panic path, whose formatting costs a device flash. The decoded bytes are
/// written behind the ones read (each code byte yields at most one), so in place is safe;
/// `None` where `decode_in_place` errs.
fn decode_in_place(frame: &mut [u8]) -> Option<usize> {
    use cobs::{DecodeResult, DecoderState};
    let mut state = DecoderState::Idle;
    let mut len = 0;
    // The delimiter the frame came without ends it.
    for at in 0..=frame.len() {
        match state.feed(frame.get(at).copied().unwrap_or(0)).ok()? {
            DecodeResult::NoData | DecodeResult::DataStart => {}
            DecodeResult::DataContinue(byte) => {
                *frame.get_mut(len)? = byte;
                len += 1;
            }
            DecodeResult::DataComplete => return Some(len),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{DataRequest, Envelope, ProgramRequest, Request};
    use proptest::prelude::*;

    proptest! {
        /// The state machine decodes in place as `cobs::decode_in_place` does: any bytes
        /// without zeros (as frames reach the decoder), valid COBS or not, and encoded
        /// bodies of every length across the 254-byte runs.
        #[test]
        fn decode_in_place_matches_cobs(
            raw in proptest::collection::vec(1u8..=255, 0..600),
            body in proptest::collection::vec(any::<u8>(), 0..600),
        ) {
            let mut encoded = std::vec![0u8; cobs::max_encoding_length(body.len())];
            let n = cobs::encode(&body, &mut encoded);
            encoded.truncate(n);
            for bytes in [raw, encoded] {
                let (mut ours, mut theirs) = (bytes.clone(), bytes);
                let want = cobs::decode_in_place(&mut theirs).ok();
                let got = decode_in_place(&mut ours);
                prop_assert_eq!(got, want);
                if let Some(n) = want {
                    prop_assert_eq!(&ours[..n], &theirs[..n]);
                }
            }
        }
    }
    use std::vec::Vec;

    fn frame(message: &Envelope<Request<'_>>) -> Vec<u8> {
        let (mut scratch, mut out) = ([0u8; 256], [0u8; 300]);
        let n = encode_frame(message, &mut scratch, &mut out).unwrap();
        out[..n].to_vec()
    }

    fn decode_all<const N: usize>(
        decoder: &mut FrameDecoder<N>,
        bytes: &[u8],
    ) -> Vec<Result<Vec<u8>, FrameError>> {
        let mut out = Vec::new();
        for &b in bytes {
            if let Some(r) = decoder.push(b) {
                out.push(r.map(<[u8]>::to_vec));
            }
        }
        out
    }

    #[test]
    fn round_trip_and_zero_free_encoding() {
        let msg = Envelope {
            seq: 7,
            body: Request::Data(DataRequest::Write {
                target: crate::wire::Target::Slot(1),
                offset: 0,
                data: &[0, 0, 1, 0],
            }),
        };
        let bytes = frame(&msg);
        assert_eq!(
            bytes.iter().filter(|&&b| b == 0).count(),
            1,
            "only the delimiter is zero"
        );
        let mut d = FrameDecoder::<64>::new();
        let frames = decode_all(&mut d, &bytes);
        let body = frames[0].as_ref().unwrap();
        let back: Envelope<Request<'_>> = decode_body(body).unwrap();
        assert_eq!(back, msg);
    }

    #[test]
    fn damage_is_detected_and_the_next_frame_decodes() {
        let a = frame(&Envelope {
            seq: 1,
            body: Request::Program(ProgramRequest::GetSeed),
        });
        let b = frame(&Envelope {
            seq: 2,
            body: Request::Program(ProgramRequest::CycleCount { lane: 0 }),
        });
        let mut flipped = a.clone();
        flipped[2] ^= 0x10;
        let mut d = FrameDecoder::<64>::new();
        let mut stream = flipped;
        stream.extend_from_slice(&b);
        let frames = decode_all(&mut d, &stream);
        assert!(frames[0].is_err());
        let back: Envelope<Request<'_>> = decode_body(frames[1].as_ref().unwrap()).unwrap();
        assert_eq!(back.seq, 2);
    }

    #[test]
    fn truncated_and_oversized_frames_are_dropped() {
        let a = frame(&Envelope {
            seq: 1,
            body: Request::Program(ProgramRequest::GetSeed),
        });
        let b = frame(&Envelope {
            seq: 2,
            body: Request::Program(ProgramRequest::GetSeed),
        });
        let mut d = FrameDecoder::<8>::new();
        // A truncated frame runs into the next one: one bad frame, then nothing lost after.
        let mut stream = a[..a.len() - 3].to_vec();
        stream.extend_from_slice(&b);
        stream.extend_from_slice(&[1; 20]);
        stream.push(0);
        stream.extend_from_slice(&b);
        let frames = decode_all(&mut d, &stream);
        assert_eq!(frames.len(), 3);
        assert!(frames[0].is_err());
        assert_eq!(frames[1], Err(FrameError::Oversized));
        assert!(frames[2].is_ok());
    }

    #[test]
    fn a_framed_body_is_the_frame_of_its_message() {
        let msg = Envelope {
            seq: 3,
            body: Request::Program(ProgramRequest::GetSeed),
        };
        let mut body = [0u8; 32];
        let n = postcard::to_slice(&msg, &mut body).unwrap().len();
        let mut out = [0u8; 64];
        let m = frame_body(&body[..n], &mut out).unwrap();
        assert_eq!(out[..m], frame(&msg)[..]);
        assert_eq!(
            frame_body(&body[..n], &mut out[..4]),
            Err(FrameError::TooLarge)
        );
    }

    #[test]
    fn encoding_checks_buffer_sizes() {
        let msg = Envelope {
            seq: 1,
            body: Request::Data(DataRequest::Write {
                target: crate::wire::Target::Slot(1),
                offset: 0,
                data: &[1; 100],
            }),
        };
        let (mut scratch, mut out) = ([0u8; 64], [0u8; 300]);
        assert_eq!(
            encode_frame(&msg, &mut scratch, &mut out),
            Err(FrameError::TooLarge)
        );
        let (mut scratch, mut out) = ([0u8; 256], [0u8; 50]);
        assert_eq!(
            encode_frame(&msg, &mut scratch, &mut out),
            Err(FrameError::TooLarge)
        );
    }
}
