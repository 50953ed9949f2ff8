//! Copies between the host and worker 0, Disco's way: into a new register (worker 0 holds
//! the array, every other worker a zeroed one of its type and shape), or destination-passing
//! into a register or an array that already exists.
//!
//! # Rules
//!
//! - **After worker 0's earlier commands**: a copy runs after them, and a read reports their
//!   failures first.
//! - **In place where it fits**: a copy into a register that already holds an array of the
//!   same type and shape overwrites its bytes (in the worker's memory itself where the host
//!   maps it); otherwise the register's value is replaced. A copy out into an array needs
//!   the register's element type and count, and overwrites the array's bytes in place.
//! - **Failures name the worker and the command** (`on_worker`); a copy to worker 0 that
//!   fails on the device is reported at the next sync, as a call's is.

use tessera_core::dtype::DataType;
use tessera_core::wire::ValueKind;

use super::state::alloc_request;
use super::{
    on_worker, ArrayView, ArrayViewMut, Command, HostArray, Register, Session, SessionError,
};
use crate::trace::traced;
use crate::transport::TransportError;

impl Session {
    /// Copies `array` (a [`HostArray`], or an [`ArrayView`] of bytes borrowed from their
    /// owner) from the host into a new register: worker 0 holds `array`, every other worker
    /// a zeroed array of the same type and shape (so a call on the register runs
    /// everywhere, as in Disco, where the register exists on every worker).
    pub fn copy_to_worker0<'a>(
        &self,
        array: impl Into<ArrayView<'a>>,
    ) -> Result<Register, SessionError> {
        let _traced = traced!("copy_to_worker0");
        let array = array.into();
        let register = self.new_register()?;
        let mut state = self.lock()?;
        let id = register.id();
        let zeroed = alloc_request(id, array.dtype(), array.shape())?;
        for worker in 1..state.workers.len() {
            state.submit(worker, &zeroed, Command::Alloc(id))?;
        }
        state.write_host_array(0, id, array)?;
        Ok(register)
    }

    /// Copies `array` from the host into `dst` on worker 0, as Disco's destination-passing
    /// copy does: in place when `dst` already holds an array of its type and shape (nothing
    /// allocated or zeroed; in the worker's memory itself where the host maps it), else
    /// replacing what `dst` held. Failures are reported at the next sync, as for a call.
    pub fn copy_to_worker0_into<'a>(
        &self,
        array: impl Into<ArrayView<'a>>,
        dst: &Register,
    ) -> Result<(), SessionError> {
        let _traced = traced!("copy_to_worker0");
        let array = array.into();
        let id = self.own(dst)?;
        let mut state = self.lock()?;
        // Asked after worker 0's earlier commands, which it runs first.
        let held = match state.describe(0, id) {
            Ok(held) => Some(held),
            // An empty register, say: it is replaced.
            Err(
                SessionError::Transport(TransportError::Device { .. })
                | SessionError::NoValue { .. },
            ) => None,
            Err(e) => return Err(e),
        };
        let fits = held.as_ref().is_some_and(|held| {
            held.kind == ValueKind::Array
                && held.dtype == Some(array.dtype())
                && held.shape[..] == *array.shape()
        });
        if !fits {
            return state.write_host_array(0, id, array);
        }
        state.overwrite_array(0, id, array)
    }

    /// Copies `register`'s array from worker 0 to the host (after worker 0's earlier
    /// commands: their failures are reported first).
    pub fn copy_from_worker0(&self, register: &Register) -> Result<HostArray, SessionError> {
        let _traced = traced!("copy_from_worker0");
        let id = self.own(register)?;
        let mut state = self.lock()?;
        state.sync(0)?;
        on_worker(0, Command::Read(id), state.read_array(0, id))
    }

    /// The element type and shape of `register`'s array on worker 0 (after worker 0's
    /// earlier commands: their failures are reported first): the room a copy from worker 0
    /// needs, for a caller that makes it itself (a NumPy array, say).
    pub fn array_on_worker0(
        &self,
        register: &Register,
    ) -> Result<(DataType, Vec<u32>), SessionError> {
        let id = self.own(register)?;
        let mut state = self.lock()?;
        state.sync(0)?;
        let held = on_worker(0, Command::Read(id), state.array_of(0, id))?;
        Ok((held.0, held.1))
    }

    /// Copies `register`'s array from worker 0 into `into`, as Disco's destination-passing
    /// copy does: `into` must have the register's element type and element count (it takes
    /// on its shape), and its bytes are overwritten in place (copied first only if another
    /// array shares them). Worker 0's earlier failures are reported first.
    pub fn copy_from_worker0_into(
        &self,
        register: &Register,
        into: &mut HostArray,
    ) -> Result<(), SessionError> {
        let _traced = traced!("copy_from_worker0");
        let dtype = into.dtype();
        let shape =
            self.copy_from_worker0_to(register, ArrayViewMut::new(dtype, into.bytes_mut())?)?;
        Ok(into.set_shape(&shape)?)
    }

    /// Copies `register`'s array from worker 0 into bytes borrowed from their owner (a
    /// NumPy array, say), which must have room for exactly the register's elements, of its
    /// type; returns the register's shape (the owner keeps its own). Worker 0's earlier
    /// failures are reported first.
    pub fn copy_from_worker0_to(
        &self,
        register: &Register,
        into: ArrayViewMut<'_>,
    ) -> Result<Vec<u32>, SessionError> {
        let _traced = traced!("copy_from_worker0");
        let id = self.own(register)?;
        let mut state = self.lock()?;
        state.sync(0)?;
        on_worker(0, Command::Read(id), state.read_array_into(0, id, into))
    }
}
