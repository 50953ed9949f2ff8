//! A call's arguments as a function sees them: wire values whose bytes borrow from the
//! device's registers or from the request, plus the replica the call runs on.

use tessera_core::wire::{Array, ErrorCode, Value, MAX_CALL_ARGS};

use crate::registers::parse;

/// The resolved arguments of one call. Every accessor answers
/// [`ErrorCode::BadArguments`] for a missing argument or one of another kind.
#[derive(Debug, Clone, PartialEq)]
pub struct Args<'x> {
    values: heapless::Vec<Value<'x>, MAX_CALL_ARGS>,
    replica: u32,
}

impl<'x> Args<'x> {
    /// `values` as the arguments of a call on replica `replica` (to test a function without
    /// a device). Each is checked like a register value: at most
    /// [`MAX_CALL_ARGS`], arrays whose bytes match their shape.
    pub fn new(values: &[Value<'x>], replica: u32) -> Result<Self, ErrorCode> {
        let mut args = Self::empty(replica);
        for value in values {
            parse(value)?;
            args.push(value.clone())?;
        }
        Ok(args)
    }

    /// An empty list, for the call engine (which checks what it appends).
    pub(crate) fn empty(replica: u32) -> Self {
        Self {
            values: heapless::Vec::new(),
            replica,
        }
    }

    /// Appends a value the caller has checked.
    pub(crate) fn push(&mut self, value: Value<'x>) -> Result<(), ErrorCode> {
        self.values.push(value).map_err(|_| ErrorCode::BadArguments)
    }

    /// The replica the call runs on.
    pub fn replica(&self) -> u32 {
        self.replica
    }

    /// How many arguments there are.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Checks that there are exactly `n` arguments.
    pub fn expect(&self, n: usize) -> Result<(), ErrorCode> {
        if self.values.len() == n {
            Ok(())
        } else {
            Err(ErrorCode::BadArguments)
        }
    }

    /// Argument `i`.
    pub fn get(&self, i: usize) -> Result<&Value<'x>, ErrorCode> {
        self.values.get(i).ok_or(ErrorCode::BadArguments)
    }

    /// Argument `i`, an integer.
    pub fn int(&self, i: usize) -> Result<i64, ErrorCode> {
        match self.get(i)? {
            Value::Int(v) => Ok(*v),
            _ => Err(ErrorCode::BadArguments),
        }
    }

    /// Argument `i`, a float.
    pub fn float(&self, i: usize) -> Result<f64, ErrorCode> {
        match self.get(i)? {
            Value::Float(v) => Ok(*v),
            _ => Err(ErrorCode::BadArguments),
        }
    }

    /// Argument `i`, a string.
    pub fn str(&self, i: usize) -> Result<&'x str, ErrorCode> {
        match self.get(i)? {
            Value::Str(text) => Ok(text),
            _ => Err(ErrorCode::BadArguments),
        }
    }

    /// Argument `i`, a shape.
    pub fn shape(&self, i: usize) -> Result<&[u32], ErrorCode> {
        match self.get(i)? {
            Value::Shape(dims) => Ok(dims),
            _ => Err(ErrorCode::BadArguments),
        }
    }

    /// Argument `i`, an array.
    #[inline(never)]
    pub fn array(&self, i: usize) -> Result<Array<'x>, ErrorCode> {
        match self.get(i)? {
            Value::Array(array) => Ok(array.clone()),
            _ => Err(ErrorCode::BadArguments),
        }
    }
}
