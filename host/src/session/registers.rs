//! Registers and their handles: ids handed out by the controller, a [`Register`] that frees
//! its id on every worker when dropped, and a register's value read or set on one worker.
//!
//! # Rules
//!
//! - **Ids from the controller**, 1 to [`MAX_REGISTERS`](super::MAX_REGISTERS) (0 means
//!   "discard"); a freed id is reused last-in-first-out, and the one past the last is
//!   refused where it is asked for ([`SessionError::RegistersExhausted`]), before anything
//!   is sent.
//! - **A handle belongs to its session**: it carries the session's identity, and another
//!   session refuses it ([`SessionError::ForeignRegister`]) before sending anything.
//! - **Dropping a handle frees the id on every worker**; after shutdown (or once its
//!   session is gone) it does nothing.
//! - **A new register exists on every worker**: [`Session::empty`] allocates a zeroed array
//!   everywhere, so a collective or a call on it runs on every worker.
//! - **Reads come after the worker's earlier commands** (their failures first).

use std::sync::{Arc, Mutex, PoisonError, Weak};

use tessera_core::dtype::DataType;
use tessera_core::wire::Value;

use super::state::{alloc_request, State};
use super::{byte_len, on_worker, ArrayError, Command, HostValue, Session, SessionError};

/// A register on the workers. Dropping it frees its id on every worker.
#[derive(Debug)]
pub struct Register {
    id: u16,
    /// The identity of the session that made it ([`Session::id`]).
    session: u64,
    state: Weak<Mutex<State>>,
}

impl Register {
    /// The register's id (the same on every worker).
    pub fn id(&self) -> u16 {
        self.id
    }

    /// The identity of the session it belongs to ([`Session::id`]).
    pub fn session(&self) -> u64 {
        self.session
    }
}

impl Drop for Register {
    fn drop(&mut self) {
        let Some(state) = self.state.upgrade() else {
            return;
        };
        let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.shut_down {
            return;
        }
        if let Err(e) = state.free(self.id) {
            tracing::warn!(register = self.id, error = %e, "cannot free a register");
        }
    }
}

impl Session {
    /// A handle on register `id` of this session.
    pub(super) fn handle(&self, id: u16) -> Register {
        Register {
            id,
            session: self.id,
            state: Arc::downgrade(&self.state),
        }
    }

    /// `register`'s id, if it is one of this session's registers (checked before anything
    /// is sent: another session's id names an unrelated value here).
    pub(super) fn own(&self, register: &Register) -> Result<u16, SessionError> {
        if register.session == self.id {
            Ok(register.id)
        } else {
            Err(SessionError::ForeignRegister {
                register: register.id,
                owner: register.session,
                session: self.id,
            })
        }
    }

    /// A handle on a fresh register id (nothing is sent).
    pub(super) fn new_register(&self) -> Result<Register, SessionError> {
        let id = self.lock()?.allocate_id()?;
        Ok(self.handle(id))
    }

    /// A new register holding a zeroed array of `dtype` and `shape` on every worker: the
    /// destination of a collective.
    pub fn empty(&self, dtype: DataType, shape: &[u32]) -> Result<Register, SessionError> {
        byte_len(dtype, shape)?;
        let register = self.new_register()?;
        let mut state = self.lock()?;
        let id = register.id;
        let request = alloc_request(id, dtype, shape)?;
        for worker in 0..state.workers.len() {
            state.submit(worker, &request, Command::Alloc(id))?;
        }
        Ok(register)
    }

    /// Register `register`'s value on worker `worker` (after its earlier commands).
    pub fn debug_get(&self, register: &Register, worker: usize) -> Result<HostValue, SessionError> {
        let id = self.own(register)?;
        let mut state = self.lock()?;
        state.check_worker(worker)?;
        state.sync(worker)?;
        on_worker(worker, Command::Read(id), state.read_value(worker, id))
    }

    /// Sets register `register` on worker `worker` to `value`.
    pub fn debug_set(
        &self,
        register: &Register,
        worker: usize,
        value: &HostValue,
    ) -> Result<(), SessionError> {
        let id = self.own(register)?;
        let mut state = self.lock()?;
        state.check_worker(worker)?;
        let set = match value {
            HostValue::Array(array) => state.write_host_array(worker, id, array.into()),
            HostValue::Int(v) => state.set_value(worker, id, Value::Int(*v)),
            HostValue::Float(v) => state.set_value(worker, id, Value::Float(*v)),
            HostValue::Str(text) => state.set_value(worker, id, Value::Str(text)),
            HostValue::Shape(dims) => {
                let dims = heapless::Vec::from_slice(dims)
                    .map_err(|_| ArrayError::Rank { rank: dims.len() })?;
                state.set_value(worker, id, Value::Shape(dims))
            }
        };
        on_worker(worker, Command::Set(id), set)
    }
}
