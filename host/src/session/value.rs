//! The arguments a session call takes.

use super::Register;
use crate::array::HostArray;

/// An argument of [`Session::call`](super::Session::call).
#[derive(Debug, Clone, Copy)]
pub enum CallArg<'a> {
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Str(&'a str),
    /// A shape.
    Shape(&'a [u32]),
    /// A host array, sent with the call to every worker (it must fit one frame; larger
    /// arrays go through a register).
    Array(&'a HostArray),
    /// Each worker's own value of this register.
    Register(&'a Register),
}
