//! A program as bytes: how it travels to a device inside a `Prepare` request.
//!
//! # Rule
//!
//! The encoding is postcard's, of the whole [`Program`] (the same bytes it took inline in
//! the request before, now behind a length). Decoding takes exactly one program: bytes
//! that do not decode, or that hold anything after the program, are
//! [`FrameError::Malformed`], never a program read from a prefix. Neither side allocates:
//! the caller gives the buffer, and a buffer too small is [`FrameError::TooLarge`].

use crate::wire::decode::Reader;
use crate::wire::FrameError;

use super::Program;

impl Program {
    /// Encodes the program into `out`; returns the bytes written.
    pub fn encode<'o>(&self, out: &'o mut [u8]) -> Result<&'o mut [u8], FrameError> {
        postcard::to_slice(self, out).map_err(|_| FrameError::TooLarge)
    }

    /// The program `bytes` holds, exactly (module rule). Decoded by hand, without serde
    /// (core's device-side decoders: postcard's bytes for a fraction of serde's code in a
    /// device's flash). Out of line: it runs once per prepare, and inlined into a device's
    /// request handler it grew the firmware.
    #[inline(never)]
    pub fn decode(bytes: &[u8]) -> Result<Program, FrameError> {
        let mut reader = Reader::new(bytes);
        match reader.read::<Program>() {
            Some(program) if reader.rest().is_empty() => Ok(program),
            _ => Err(FrameError::Malformed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::tests::mlp;

    /// Catches a decoder that reads a program from a prefix and ignores what follows (a
    /// request whose program was cut or padded would prepare something else than sent).
    #[test]
    fn a_program_round_trips_and_only_whole() {
        let program = mlp();
        let mut buffer = [0u8; 1024];
        let len = program.encode(&mut buffer).map(|b| b.len()).unwrap();
        assert_eq!(Program::decode(&buffer[..len]), Ok(program.clone()));
        assert_eq!(
            Program::decode(&buffer[..len + 1]),
            Err(FrameError::Malformed)
        );
        assert_eq!(
            Program::decode(&buffer[..len - 1]),
            Err(FrameError::Malformed)
        );
        assert_eq!(
            program.encode(&mut buffer[..len - 1]).map(|b| b.len()),
            Err(FrameError::TooLarge)
        );
    }
}
