//! What the host believes of a worker's description of a register.
//!
//! # Rule
//!
//! A worker's [`Description`] of a register is a claim the host sizes buffers and indexes
//! the worker's mapped memory by, so nothing in it is used before it is checked against
//! what the host knows without asking:
//!
//! - the bytes, from where they start to where they end (`at + bytes`, without
//!   overflowing), lie inside the memory the worker announced in its hello
//!   ([`Limits::memory`](tessera_core::wire::Limits)): no register can be larger, so no
//!   host buffer is ever allocated larger;
//! - an array's bytes are exactly its element size times its shape's element count (a
//!   shape whose count overflows is refused the same way).
//!
//! Bytes outside the memory are [`SessionError::OutsideMemory`] — the same error a read or
//! write in place past the mapping would be; a size the shape does not take is a
//! [`BadDescription`]. Each names the worker, the register, the value and the cap. The
//! check never allocates and never panics.

use std::fmt;

use tessera_core::wire::endpoint::Description;
use tessera_core::wire::ValueKind;

use super::SessionError;

/// How a worker's description of a register broke the rule (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BadDescription {
    /// An array's byte count disagrees with its type and shape.
    #[error(fmt = describe_size)]
    Size {
        /// The worker.
        worker: usize,
        /// The register.
        register: u16,
        /// Bytes the worker claims.
        bytes: u32,
        /// Bytes its type and shape take (`None`: more than `usize` holds).
        expected: Option<usize>,
    },
}

/// [`BadDescription::Size`]'s message: the size its type and shape take, unless it
/// overflows.
fn describe_size(
    worker: &usize,
    register: &u16,
    bytes: &u32,
    expected: &Option<usize>,
    f: &mut fmt::Formatter<'_>,
) -> fmt::Result {
    match expected {
        Some(expected) => write!(
            f,
            "worker {worker} describes register {register} as {bytes} bytes, but its type and \
             shape take {expected}"
        ),
        None => write!(
            f,
            "worker {worker} describes register {register} ({bytes} bytes) with a shape whose \
             size overflows"
        ),
    }
}

/// Checks `described`, worker `worker`'s description of register `register`, against the
/// `memory` bytes it announced (module doc).
pub fn check(
    worker: usize,
    register: u16,
    described: &Description,
    memory: u32,
) -> Result<(), SessionError> {
    let Description {
        kind,
        dtype,
        ref shape,
        bytes,
        at,
    } = *described;
    // u64: two u32s cannot overflow it, so the sum is the true end.
    if u64::from(at) + u64::from(bytes) > u64::from(memory) {
        return Err(SessionError::OutsideMemory {
            worker,
            register,
            at: at as usize,
            bytes: bytes as usize,
            memory: memory as usize,
        });
    }
    let expected = match (kind, dtype) {
        (ValueKind::Array, Some(dtype)) => shape
            .iter()
            .try_fold(dtype.size(), |n, &d| n.checked_mul(d as usize)),
        _ => return Ok(()),
    };
    if expected != Some(bytes as usize) {
        return Err(SessionError::Description(BadDescription::Size {
            worker,
            register,
            bytes,
            expected,
        }));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::dtype::DataType;

    fn array(dtype: DataType, shape: &[u32], bytes: u32, at: u32) -> Description {
        Description {
            kind: ValueKind::Array,
            dtype: Some(dtype),
            shape: heapless::Vec::from_slice(shape).unwrap(),
            bytes,
            at,
        }
    }

    #[test]
    fn an_honest_description_passes() {
        assert!(check(0, 1, &array(DataType::F32, &[2, 3], 24, 100), 124).is_ok());
        let text = Description {
            kind: ValueKind::Str,
            dtype: None,
            shape: heapless::Vec::new(),
            bytes: 5,
            at: 0,
        };
        assert!(check(0, 1, &text, 5).is_ok());
    }

    /// Catches a host that allocates whatever a worker claims: a register of 4 GiB on a
    /// device of 64 KiB used to become a 4 GiB host buffer.
    #[test]
    fn more_bytes_than_the_device_has_are_refused() {
        let lie = array(DataType::U8, &[u32::MAX], u32::MAX, 0);
        let e = check(3, 7, &lie, 65_536).unwrap_err();
        assert!(
            matches!(
                e,
                SessionError::OutsideMemory {
                    worker: 3,
                    register: 7,
                    at: 0,
                    bytes: 4_294_967_295,
                    memory: 65_536
                }
            ),
            "{e:?}"
        );
        let message = e.to_string();
        for part in ["worker 3", "register 7", "4294967295", "65536"] {
            assert!(message.contains(part), "{message}");
        }
    }

    /// Catches an end computed in u32 (or usize on a 32-bit host): `at + bytes` wrapping
    /// past zero would look inside memory.
    #[test]
    fn an_end_that_wraps_is_refused() {
        let lie = array(DataType::U8, &[16], 16, u32::MAX - 8);
        assert!(matches!(
            check(0, 1, &lie, u32::MAX),
            Err(SessionError::OutsideMemory { .. })
        ));
    }

    /// Catches a host that sizes its buffer by a byte count its shape does not take: the
    /// array built from it would be refused later, after the allocation.
    #[test]
    fn bytes_that_disagree_with_the_shape_are_refused() {
        let lie = array(DataType::F32, &[2, 3], 28, 0);
        assert!(matches!(
            check(1, 2, &lie, 1 << 20),
            Err(SessionError::Description(BadDescription::Size {
                worker: 1,
                register: 2,
                bytes: 28,
                expected: Some(24)
            }))
        ));
        let overflowing = array(DataType::F64, &[u32::MAX, u32::MAX, u32::MAX], 8, 0);
        assert!(matches!(
            check(1, 2, &overflowing, 1 << 20),
            Err(SessionError::Description(BadDescription::Size {
                expected: None,
                ..
            }))
        ));
    }
}
