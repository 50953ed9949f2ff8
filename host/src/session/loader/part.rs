//! One worker's part of a tensor that lies in a file, read where it lies.
//!
//! # Rules
//!
//! - **A cut.** A row-major tensor of `shape` (elements of `size` bytes) cut on dimension
//!   `dim` into `parts` equal parts: part *p* takes, of every row of the dimensions before
//!   `dim`, the *p*-th run of `shape[dim] / parts` slices. One part is the whole tensor.
//! - **Read by ranges.** A part is read straight from the file into its destination: one
//!   read for a cut on the outermost dimension (or no cut), one per row otherwise. Nothing
//!   larger than the part is held, and nothing is read past the file's end
//!   ([`Input::read_exact_at`]).
//! - **Checked first.** The caller checked the cut when it planned the load (the dimension
//!   exists and divides, the tensor's bytes are what its shape makes them); a destination
//!   of another length than the part is refused before anything is read.

use serde::{Deserialize, Serialize};

use crate::input::{Input, InputError};

/// How a tensor is cut into parts (module rules).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(in crate::session) struct Cut {
    /// Where the whole tensor's data start in the file.
    pub offset: u64,
    /// The whole tensor's shape.
    pub shape: Vec<usize>,
    /// Bytes of an element.
    pub size: usize,
    /// The dimension cut.
    pub dim: usize,
    /// The parts it is cut into (1: not cut).
    pub parts: usize,
}

/// Why a part was not read.
#[derive(Debug, thiserror::Error)]
pub enum PartError {
    /// The file refused the read.
    #[error(transparent)]
    Input(#[from] InputError),
    /// The destination is not the part's length.
    #[error("a part of {part} bytes cannot fill {given} bytes")]
    Length {
        /// The part's bytes.
        part: usize,
        /// The destination's.
        given: usize,
    },
}

impl Cut {
    /// The runs of one part: how many rows, the bytes each row gives the part, and the
    /// bytes between rows in the file.
    fn runs(&self) -> (usize, usize, usize) {
        let parts = self.parts.max(1);
        let total: usize = self.shape.iter().product::<usize>() * self.size;
        if parts == 1 {
            return (1, total, total);
        }
        let outer: usize = self.shape.get(..self.dim).map_or(1, |d| d.iter().product());
        let inner: usize = self
            .shape
            .get(self.dim + 1..)
            .map_or(1, |d| d.iter().product())
            * self.size;
        let extent = self.shape.get(self.dim).copied().unwrap_or(1);
        (outer, extent / parts * inner, extent * inner)
    }

    /// Bytes in one part.
    pub fn part_len(&self) -> usize {
        let (rows, run, _) = self.runs();
        rows * run
    }

    /// Part `part` (taken modulo the parts) read from `input` into `out`, which must be
    /// [`part_len`](Self::part_len) bytes.
    pub fn read(&self, input: &Input, part: usize, out: &mut [u8]) -> Result<(), PartError> {
        let (rows, run, stride) = self.runs();
        let part = part % self.parts.max(1);
        if out.len() != rows * run {
            return Err(PartError::Length {
                part: rows * run,
                given: out.len(),
            });
        }
        for (row, dest) in out.chunks_exact_mut(run.max(1)).enumerate() {
            let from = self.offset + (row * stride + part * run) as u64;
            input.read_exact_at(dest, from)?;
        }
        Ok(())
    }
}
