//! Assembling: each destination filled with pieces of the sources, end to end — what a
//! broadcast (one whole piece of one source, to every destination), a scatter (piece `i`
//! of one source to destination `i`), a gather (every source whole, to one destination),
//! an allgather (every source whole, to every destination) and copies from member to
//! member are made of.
//!
//! # Rules
//!
//! - Every piece lies in its source, and a destination's pieces fill it exactly; checked
//!   before a byte moves.
//! - Every source is read before any destination is written (each source once, into a
//!   host buffer of its own), so a destination may be any source.
//! - In place, the bytes go from the members' memory to theirs; through the host, by the
//!   channels' data path.

use std::ops::Range;

use super::in_place::Memories;
use super::{Group, GroupError, Path, Place};

/// Bytes `bytes` of source `source` (its index among the operation's sources).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    /// The source.
    pub source: usize,
    /// Its bytes taken.
    pub bytes: Range<usize>,
}

impl Piece {
    /// The whole of source `source`, `len` bytes.
    pub fn whole(source: usize, len: usize) -> Self {
        Self {
            source,
            bytes: 0..len,
        }
    }
}

/// [`Group::assemble`] by the module's rules.
pub(super) fn run(
    group: &mut Group,
    sources: &[Place],
    dests: &[(Place, Vec<Piece>)],
) -> Result<(), GroupError> {
    let places: Vec<Place> = dests.iter().map(|(place, _)| *place).collect();
    group.check(sources, None)?;
    group.check(&places, None)?;
    for (place, pieces) in dests {
        let mut filled = 0usize;
        for piece in pieces {
            let source = sources.get(piece.source).ok_or(GroupError::NoSource {
                index: piece.source,
                sources: sources.len(),
            })?;
            if piece.bytes.start > piece.bytes.end || piece.bytes.end > source.span.len {
                return Err(GroupError::Length {
                    member: source.member,
                    expected: piece.bytes.end,
                    actual: source.span.len,
                });
            }
            filled += piece.bytes.len();
        }
        if filled != place.span.len {
            return Err(GroupError::Length {
                member: place.member,
                expected: filled,
                actual: place.span.len,
            });
        }
    }
    let all: Vec<Place> = sources.iter().chain(&places).copied().collect();
    match group.path(&all)? {
        Path::InPlace(at) => {
            let (source_at, dest_at) = at.split_at(sources.len());
            let mut memories = Memories::of(&mut group.members, &all)?;
            let mut staged = Vec::with_capacity(sources.len());
            for (source, &at) in sources.iter().zip(source_at) {
                let mut copy = crate::pages::zeroed(source.span.len)?;
                copy.copy_from_slice(memories.read(source.member, at, source.span.len)?);
                staged.push(copy);
            }
            for ((place, pieces), &at) in dests.iter().zip(dest_at) {
                let mut offset = at;
                for piece in pieces {
                    let bytes = &staged[piece.source][piece.bytes.clone()];
                    memories.write(place.member, offset, bytes)?;
                    offset += bytes.len();
                }
            }
            group.confirm(&places)
        }
        Path::Host => {
            let staged = group.read(sources)?;
            let mut joined = Vec::new();
            for (_, pieces) in dests.iter().filter(|(_, pieces)| pieces.len() > 1) {
                let mut bytes = Vec::new();
                for piece in pieces {
                    bytes.extend_from_slice(&staged[piece.source][piece.bytes.clone()]);
                }
                joined.push(bytes);
            }
            let mut joined = joined.iter();
            let mut data: Vec<&[u8]> = Vec::with_capacity(dests.len());
            for (_, pieces) in dests {
                data.push(match pieces.as_slice() {
                    [] => &[],
                    [piece] => &staged[piece.source][piece.bytes.clone()],
                    _ => joined.next().map_or(&[][..], Vec::as_slice),
                });
            }
            group.write(&places, &data)
        }
    }
}
