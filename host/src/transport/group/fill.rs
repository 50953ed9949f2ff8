//! Fills from a file: each place gets bytes of a file, taken in equal runs where they lie —
//! what a sharded load of a safetensors file is made of.
//!
//! # Rules
//!
//! - A place's runs fill it exactly (checked before anything is read), and nothing is read
//!   past the file's end (`crate::input`'s rule: the input refuses it).
//! - In place, the runs are read straight into the member's memory; through the host, into
//!   a buffer of the place's size, then written by the channel's data path.

use serde::{Deserialize, Serialize};

use super::in_place::Memories;
use super::{Group, GroupError, Path, Place};
use crate::input::{Input, InputError};

/// Bytes of a file taken in equal runs: `rows` runs of `run` bytes, the first at `offset`,
/// each `stride` bytes after the one before (one run: a contiguous range).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Runs {
    /// Where the first run starts in the file.
    pub offset: u64,
    /// Bytes of a run.
    pub run: usize,
    /// Bytes from a run's start to the next's.
    pub stride: usize,
    /// Runs.
    pub rows: usize,
}

impl Runs {
    /// Bytes in all the runs (at most what the caller checked its file holds).
    pub fn len(&self) -> usize {
        self.run.saturating_mul(self.rows)
    }

    /// True when the runs hold no byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Reads `runs` of `input` into `out`, end to end (`out` is [`Runs::len`] bytes).
pub(super) fn read_runs(input: &Input, runs: &Runs, out: &mut [u8]) -> Result<(), InputError> {
    for (row, dest) in out
        .chunks_exact_mut(runs.run.max(1))
        .enumerate()
        .take(runs.rows)
    {
        let from = runs.offset + (row * runs.stride) as u64;
        input.read_exact_at(dest, from)?;
    }
    Ok(())
}

/// [`Group::fill`] on one host, by the module's rules.
pub(super) fn run(
    group: &mut Group,
    input: &Input,
    parts: &[(Place, Runs)],
) -> Result<(), GroupError> {
    let places: Vec<Place> = parts.iter().map(|(place, _)| *place).collect();
    group.check(&places, None)?;
    for (place, runs) in parts {
        if runs.len() != place.span.len {
            return Err(GroupError::Length {
                member: place.member,
                expected: runs.len(),
                actual: place.span.len,
            });
        }
    }
    match group.path(&places)? {
        Path::InPlace(at) => {
            let mut memories = Memories::of(&mut group.members, &places)?;
            for ((place, runs), at) in parts.iter().zip(at) {
                let target = memories.range_mut(place.member, at, runs.len())?;
                read_runs(input, runs, target).map_err(GroupError::Input)?;
            }
            group.confirm(&places)
        }
        Path::Host => {
            for (place, runs) in parts {
                let mut buffer = crate::pages::zeroed(runs.len())?;
                read_runs(input, runs, &mut buffer).map_err(GroupError::Input)?;
                group.write(&[*place], &[&buffer])?;
            }
            Ok(())
        }
    }
}
