//! How a tensor is cut into the parts its workers hold, and where one part lies in its file.
//!
//! # Rule
//!
//! A row-major tensor of `shape` (elements of `size` bytes) cut on dimension `dim` into
//! `parts` equal parts: part *p* takes, of every row of the dimensions before `dim`, the
//! *p*-th run of `shape[dim] / parts` slices — one run for a cut on the outermost dimension
//! (or no cut), one per row otherwise. The planner checked the cut (the dimension exists and
//! divides, the tensor's bytes are what its shape makes them), so every product here fits.

use serde::{Deserialize, Serialize};

use crate::transport::group::Runs;

/// How a tensor is cut into parts (module rule).
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

impl Cut {
    /// Where part `part` (taken modulo the parts) lies in the file.
    pub fn runs(&self, part: usize) -> Runs {
        let parts = self.parts.max(1);
        let total: usize = self.shape.iter().product::<usize>() * self.size;
        if parts == 1 {
            return Runs {
                offset: self.offset,
                run: total,
                stride: total,
                rows: 1,
            };
        }
        let outer: usize = self.shape.get(..self.dim).map_or(1, |d| d.iter().product());
        let inner: usize = self
            .shape
            .get(self.dim + 1..)
            .map_or(1, |d| d.iter().product())
            * self.size;
        let extent = self.shape.get(self.dim).copied().unwrap_or(1);
        let run = extent / parts * inner;
        Runs {
            offset: self.offset + ((part % parts) * run) as u64,
            run,
            stride: extent * inner,
            rows: outer,
        }
    }
}
