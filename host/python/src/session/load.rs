//! Loading safetensors files into registers: one file split or replicated by rules
//! (`load_safetensors`), or one file per worker (`load_presharded`).
//!
//! # Rules
//!
//! - Every tensor becomes a register, returned by name; a load that fails frees the
//!   registers it made, and raises `SessionError` with the session error under it as
//!   `kind` and `workers` when there is one (see `error`).
//! - A split names a dimension cut into equal parts, part `r` to the worker of rank `r`
//!   over all the workers, or within each group with `in_group`; tensors no rule names
//!   follow `default_split`, or are replicated.

use std::collections::HashMap;
use std::path::PathBuf;

use pyo3::prelude::*;
use tessera_host::session::loader::{ShardRule, ShardRules};

use super::collective::scope;
use super::{PyRegister, PySession};
use crate::error::OrRaise;

#[pymethods]
impl PySession {
    /// Loads every tensor of the safetensors file at `path`: tensors named in `split` are
    /// cut into equal parts along the given dimension (part `r` to the worker of rank `r`,
    /// over all workers or, with `in_group`, within each group); the others follow
    /// `default_split` (a dimension), or are replicated. Returns a register per tensor.
    #[pyo3(signature = (path, split = HashMap::new(), default_split = None, in_group = false))]
    fn load_safetensors(
        &self,
        py: Python<'_>,
        path: PathBuf,
        split: HashMap<String, usize>,
        default_split: Option<usize>,
        in_group: bool,
    ) -> PyResult<HashMap<String, PyRegister>> {
        let mut rules = ShardRules::new().with_scope(scope(in_group));
        if let Some(dim) = default_split {
            rules = rules.with_default(ShardRule::Split { dim });
        }
        for (name, dim) in split {
            rules = rules.split(name, dim);
        }
        let loaded = py
            .detach(|| self.session.load_safetensors(&path, &rules))
            .or_raise()?;
        Ok(loaded
            .into_iter()
            .map(|(k, r)| (k, PyRegister::new(r)))
            .collect())
    }

    /// Loads presharded files, `paths[i]` holding worker `i`'s part of every tensor.
    fn load_presharded(
        &self,
        py: Python<'_>,
        paths: Vec<PathBuf>,
    ) -> PyResult<HashMap<String, PyRegister>> {
        let loaded = py
            .detach(|| self.session.load_presharded(&paths))
            .or_raise()?;
        Ok(loaded
            .into_iter()
            .map(|(k, r)| (k, PyRegister::new(r)))
            .collect())
    }
}
