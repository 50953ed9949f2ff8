//! Functions and calls: a [`Function`] handle checked on every worker, and a call of it on
//! every worker, its result in a new register.
//!
//! # Rules
//!
//! - **A function is checked before anything runs**: [`Session::get_function`] asks every
//!   worker and refuses a name any of them lacks ([`SessionError::UnknownFunction`]).
//! - **Handles belong to their session**: a function or register of another session is
//!   refused before anything is sent, and before the result register is made.
//! - **Pipelined**: a call returns once it is sent to every worker; its failures come back
//!   at the next sync. A function that returns nothing leaves its result register without
//!   a value, which names the function when read ([`SessionError::NoValue`]).
//! - **Arguments travel with the call**: at most [`MAX_CALL_ARGS`]; an inline array must
//!   fit one frame ([`SessionError::InlineTooLarge`]); larger arrays go through a register.

use tessera_core::wire::{Arg, Array, ErrorCode, KernelRequest, Request, Value, MAX_CALL_ARGS};

use super::{ArrayError, CallArg, Command, HostArray, Register, Session, SessionError};
use crate::trace::traced;
use crate::transport::TransportError;

/// A function the workers of one session have, checked by [`Session::get_function`]:
/// valid in that session only, as its registers are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    name: String,
    /// The session that checked it.
    session: u64,
}

impl Function {
    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The identity of the session whose workers have it ([`Session::id`]).
    pub fn session(&self) -> u64 {
        self.session
    }
}

impl Session {
    /// The function `name`, once every worker confirms it has one (else an error, and
    /// nothing runs).
    pub fn get_function(&self, name: &str) -> Result<Function, SessionError> {
        let _traced = traced!("get_function");
        let mut state = self.lock()?;
        let request = Request::Kernels(KernelRequest::HasFunction { function: name });
        let seqs = state.submit_everywhere(&request)?;
        // Every reply is claimed, so none is left behind; the first failure is the answer.
        let mut first = Ok(());
        for (worker, seq) in seqs.into_iter().enumerate() {
            let failure = match state.workers[worker].receive(seq) {
                Ok(_) => continue,
                Err(TransportError::Device {
                    code: ErrorCode::UnknownFunction,
                    ..
                }) => SessionError::UnknownFunction {
                    name: name.into(),
                    worker,
                },
                Err(e) => e.into(),
            };
            if first.is_ok() {
                first = Err(failure);
            }
        }
        first.map(|()| Function {
            name: name.into(),
            session: self.id,
        })
    }

    /// Calls `function` on every worker with `args` (a register argument is each worker's
    /// own value); the result goes into a new register. Returns once the call is sent:
    /// failures come back at the next sync. A function that returns nothing (one that
    /// changes an argument in place) leaves the new register without a value: reading it
    /// is [`SessionError::NoValue`], naming the function. A function handle of another
    /// session is refused ([`SessionError::ForeignFunction`]) before anything is sent.
    pub fn call(
        &self,
        function: &Function,
        args: &[CallArg<'_>],
    ) -> Result<Register, SessionError> {
        let _traced = traced!("call", function = function.name());
        if function.session != self.id {
            return Err(SessionError::ForeignFunction {
                name: function.name.clone(),
                owner: function.session,
                session: self.id,
            });
        }
        // Checked before the result register is made: dropping that one would send frees.
        for arg in args {
            if let CallArg::Register(register) = arg {
                self.own(register)?;
            }
        }
        // Made first, so that an early return frees the id on every worker that got it.
        let register = self.new_register()?;
        let mut state = self.lock()?;
        let wire_args = self.wire_args(args, state.max_chunk())?;
        let request = Request::Kernels(KernelRequest::Invoke {
            function: &function.name,
            args: wire_args,
            out: register.id(),
        });
        for worker in 0..state.workers.len() {
            state.submit(worker, &request, Command::Call(function.name.clone()))?;
        }
        state.called.insert(register.id(), function.name.clone());
        Ok(register)
    }

    /// `args` as they travel with a call: each inline array at most `max` bytes, each
    /// register this session's own.
    fn wire_args<'a>(
        &self,
        args: &'a [CallArg<'a>],
        max: usize,
    ) -> Result<heapless::Vec<Arg<'a>, MAX_CALL_ARGS>, SessionError> {
        let mut wire_args: heapless::Vec<Arg<'a>, MAX_CALL_ARGS> = heapless::Vec::new();
        for arg in args {
            let arg = match *arg {
                CallArg::Int(v) => Arg::Value(Value::Int(v)),
                CallArg::Float(v) => Arg::Value(Value::Float(v)),
                CallArg::Str(text) => Arg::Value(Value::Str(text)),
                CallArg::Shape(dims) => Arg::Value(Value::Shape(
                    heapless::Vec::from_slice(dims)
                        .map_err(|_| ArrayError::Rank { rank: dims.len() })?,
                )),
                CallArg::Array(array) => {
                    if array.bytes().len() > max {
                        return Err(SessionError::InlineTooLarge {
                            bytes: array.bytes().len(),
                            max,
                        });
                    }
                    Arg::Value(Value::Array(wire_array(array)?))
                }
                CallArg::Register(register) => Arg::Register(self.own(register)?),
            };
            wire_args.push(arg).map_err(|_| SessionError::Count {
                what: "call arguments",
                expected: MAX_CALL_ARGS,
                actual: args.len(),
            })?;
        }
        Ok(wire_args)
    }
}

/// A host array as a wire value (borrowing its bytes).
fn wire_array(array: &HostArray) -> Result<Array<'_>, SessionError> {
    Ok(Array {
        dtype: array.dtype(),
        shape: heapless::Vec::from_slice(array.shape()).map_err(|_| ArrayError::Rank {
            rank: array.shape().len(),
        })?,
        data: array.bytes(),
    })
}
