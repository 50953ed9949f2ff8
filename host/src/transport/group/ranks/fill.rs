//! A fill from a file across ranks: each rank reads its own members' parts of the file,
//! straight into their memory, and no rank reads another's.
//!
//! # Rules
//!
//! - **When** (besides the module's conditions): the file is readable at the same path on
//!   every rank (a shared file system); rank 0 names it by its absolute path.
//! - **Each rank reads its parts**, opening the file under the input rules
//!   (`crate::input`) and finding it the size rank 0 found: for each of its members, each
//!   part's runs, read where they lie into the member's memory at the part's address.
//!   Rank 0 does the same for its own members.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::super::fill::{read_runs, Runs};
use super::super::{Group, GroupError, Place};
use super::failure::RankFailure;
use crate::input::Input;
use crate::transport::SharedMemory;

/// What one rank reads: the file (and its size as rank 0 found it), and each part for its
/// members: the member's index on the rank, the address, the runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct FillPart {
    file: PathBuf,
    len: u64,
    parts: Vec<(usize, usize, Runs)>,
}

/// `parts` filled from `input` by the ranks, by the module's rules; `false` when they
/// cannot be (nothing was sent).
pub(in crate::transport::group) fn run_fill(
    group: &mut Group,
    input: &Input,
    parts: &[(Place, Runs)],
) -> Result<bool, GroupError> {
    let Some(ranks) = group.mapped_ranks() else {
        return Ok(false);
    };
    let per_rank = ranks.per_rank;
    let file = std::path::absolute(input.path()).map_err(|source| {
        GroupError::Input(crate::input::InputError::Io {
            path: input.path().to_path_buf(),
            source,
        })
    })?;
    let count = group.members.len() / per_rank;
    let mut per: Vec<FillPart> = (0..count)
        .map(|_| FillPart {
            file: file.clone(),
            len: input.len(),
            parts: Vec::new(),
        })
        .collect();
    for (place, runs) in parts {
        if runs.len() != place.span.len {
            return Err(GroupError::Length {
                member: place.member,
                expected: runs.len(),
                actual: place.span.len,
            });
        }
        let Some(at) = group.address(place)? else {
            return Ok(false);
        };
        let (rank, j) = (place.member / per_rank, place.member % per_rank);
        per[rank].parts.push((j, at, runs.clone()));
    }
    let ranks = match group.ranks.as_mut() {
        Some(ranks) => ranks,
        None => return Ok(false),
    };
    // Taken before any rank is told: past this point, nothing stops rank 0 taking part.
    let mut memories = Vec::with_capacity(per_rank);
    for (member, channel) in group.members[..per_rank].iter_mut().enumerate() {
        memories.push(channel.device_memory().map_err(GroupError::on(member))?);
    }
    ranks.tell_all(|rank| per[rank].clone())?;
    let mine = run(&per[0], &mut memories);
    ranks.outcome(mine, "load")?;
    let places: Vec<Place> = parts.iter().map(|(place, _)| *place).collect();
    group.confirm(&places)?;
    Ok(true)
}

/// Reads `part`'s runs into `memories`, this rank's members' memory in order (`None` where
/// it is not mapped); every part is tried, the first failure is the answer.
pub(crate) fn run(
    part: &FillPart,
    memories: &mut [Option<&mut SharedMemory>],
) -> Result<(), RankFailure> {
    let file_failure = |reason: String| RankFailure::File {
        file: part.file.clone(),
        reason,
    };
    let input = Input::open(&part.file).map_err(|e| file_failure(e.to_string()))?;
    if input.len() != part.len {
        return Err(file_failure(format!(
            "{} bytes on this rank, {} on rank 0: not the same file",
            input.len(),
            part.len
        )));
    }
    let mut first = None;
    for (j, at, runs) in &part.parts {
        let target = memories
            .get_mut(*j)
            .and_then(|m| m.as_mut())
            .and_then(|m| m.range_mut(*at, runs.len()));
        let read = match target {
            Some(target) => {
                read_runs(&input, runs, target).map_err(|e| file_failure(e.to_string()))
            }
            None => Err(RankFailure::Outside {
                member: *j,
                at: *at,
                len: runs.len(),
            }),
        };
        if let Err(failure) = read {
            first.get_or_insert(failure);
        }
    }
    match first {
        None => Ok(()),
        Some(failure) => Err(failure),
    }
}
