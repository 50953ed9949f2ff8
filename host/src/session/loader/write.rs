//! Writing a planned load: every register allocated on every worker and answered (room
//! before a byte is read), then every part read from its file into its register by the
//! group, then answered; all or nothing — a failure frees the load's registers.

use std::collections::HashMap;

use super::plan::Planned;
use super::LoadError;
use crate::input::Input;
use crate::session::{Command, Register, Session, SessionError, State};
use crate::transport::group::{Place, Runs};

impl Session {
    /// Allocates every planned tensor's register on every worker and waits for them, then
    /// fills them (worker `w`'s part from `files[w % files.len()]`) by the group, which
    /// reads each part where it lies — into the workers' memory in place, on each worker's
    /// own rank, or through the host — and waits again; hands out the registers, or frees
    /// them all on a failure.
    pub(super) fn write_planned(
        &self,
        files: &[Input],
        planned: Vec<Planned>,
    ) -> Result<HashMap<String, Register>, LoadError> {
        let file_of = |worker: usize| files[worker % files.len()].path().to_path_buf();
        let session_error = |source| LoadError::Session {
            file: file_of(0),
            source,
        };
        let mut state = self.lock().map_err(session_error)?;
        let workers = state.workers.len();
        // Earlier failures are reported now, not blamed on this load.
        state.sync_each(0..workers).map_err(session_error)?;
        let mut ids: Vec<u16> = Vec::with_capacity(planned.len());
        if let Err(source) = allocate(&mut state, &planned, &mut ids) {
            abandon(&mut state, &ids);
            return Err(session_error(source));
        }
        // Room on every worker before a byte is read.
        if let Err(source) = state.sync_each(0..workers) {
            release(&mut state, &ids);
            return Err(named(source, &ids, &planned, file_of).unwrap_or_else(session_error));
        }
        for (f, input) in files.iter().enumerate() {
            let parts: Vec<(Place, Runs)> = (planned.iter().zip(&ids))
                .flat_map(|(tensor, &id)| {
                    (0..workers)
                        .filter(|w| w % files.len() == f)
                        .map(move |w| (tensor.place(w, id), tensor.runs(w)))
                })
                .collect();
            if let Err(source) = state.workers.fill(input, &parts) {
                abandon(&mut state, &ids);
                return Err(LoadError::Fill {
                    file: input.path().to_path_buf(),
                    source: Box::new(source),
                });
            }
        }
        if let Err(source) = state.sync_each(0..workers) {
            release(&mut state, &ids);
            return Err(named(source, &ids, &planned, file_of).unwrap_or_else(session_error));
        }
        drop(state);
        tracing::debug!(
            file = %file_of(0).display(),
            files = files.len(),
            tensors = planned.len(),
            "loaded safetensors"
        );
        Ok(planned
            .into_iter()
            .zip(ids)
            .map(|(tensor, id)| (tensor.name, self.handle(id)))
            .collect())
    }
}

/// The worker failure in `source` that names one of this load's registers (`ids`, of the
/// tensors `planned`), as an error naming the tensor and the file (`file_of` the worker).
pub(super) fn named(
    source: SessionError,
    ids: &[u16],
    planned: &[Planned],
    file_of: impl Fn(usize) -> std::path::PathBuf,
) -> Result<LoadError, SessionError> {
    let failed =
        source
            .worker_failures()
            .into_iter()
            .find_map(|(worker, command, _)| match command {
                Command::Alloc(id) | Command::Set(id) => ids
                    .iter()
                    .position(|i| i == id)
                    .map(|at| (worker, planned[at].name.clone())),
                _ => None,
            });
    match failed {
        Some((worker, tensor)) => Ok(LoadError::Worker {
            file: file_of(worker),
            tensor,
            source: Box::new(source),
        }),
        None => Err(source),
    }
}

/// Allocates a register per planned tensor (its id pushed to `ids` at once, so a failure
/// can free it) on every worker.
pub(super) fn allocate(
    state: &mut State,
    planned: &[Planned],
    ids: &mut Vec<u16>,
) -> Result<(), SessionError> {
    for tensor in planned {
        let id = state.allocate_id()?;
        ids.push(id);
        let alloc = crate::session::state::alloc_request(id, tensor.dtype, &tensor.shape)?;
        for worker in 0..state.workers.len() {
            state.submit(worker, &alloc, Command::Alloc(id))?;
        }
    }
    Ok(())
}

/// After a load failed part-way: what was sent is claimed (its outcome overshadowed), so
/// no later sync reports this load's commands, and its registers are freed.
pub(super) fn abandon(state: &mut State, ids: &[u16]) {
    for worker in 0..state.workers.len() {
        let _ = state.sync(worker);
    }
    release(state, ids);
}

/// Frees `ids` on every worker after a failed load (a failure to free is already
/// overshadowed by the error being returned).
pub(super) fn release(state: &mut State, ids: &[u16]) {
    for &id in ids {
        if let Err(e) = state.free(id) {
            tracing::warn!(register = id, error = %e, "cannot free a register of a failed load");
        }
    }
}
