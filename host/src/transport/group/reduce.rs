//! Reductions: sources combined element by element into destinations.
//!
//! # Rules
//!
//! - Every source and destination holds the same bytes, a whole number of elements. The
//!   sources are combined by `crate::combine`'s kernel, in the order given (worker order,
//!   or ranks first: [`Rule`]), a block of [`PASS`] elements at a time — element by
//!   element, so how the elements are split changes no result: the same bits on every
//!   path.
//! - **Streamed in place** when every place lies in memory the host maps, the elements are
//!   floats (whose combination cannot fail once the sizes are checked) and each member's
//!   places are, two by two, the same bytes or apart: block by block, every source's block
//!   is combined straight from the member's memory into one host block and streamed from
//!   it into every destination before the next block, so every byte is read once and
//!   written once and no host array holds the whole. A large array is cut by element
//!   ranges between the host's cores (`combine::parts`; the members are idle meanwhile),
//!   each writing only through views of its own.
//! - **Whole** otherwise: every source is read (in place, or through the host), the result
//!   made whole, then written — so an integer result that overflows is refused before
//!   anything is written, and places that overlap partly read no result back in.

use std::ops::Range;

use tessera_core::dtype::DataType;

use super::in_place::Memories;
use super::{Group, GroupError, Path, Place};
use crate::combine::{self, CombineError, BLOCK};
use crate::transport::stream;
use tessera_core::wire::ReduceOp;

/// Elements of every source read, combined and written per block: four of the kernel's
/// blocks (64 KiB of f32 per source), so that the copies read and the result stay in the
/// L2 cache while the next block streams in.
const PASS: usize = 4 * BLOCK;

/// How one reduction combines its sources: their type, the operation, and the ranks' runs
/// of sources when it combines ranks first (none: worker order).
pub(super) struct Rule {
    pub dtype: DataType,
    pub op: ReduceOp,
    pub runs: Vec<usize>,
}

impl Rule {
    /// `inputs` (the sources' same elements, in order) combined into `out`.
    fn combine(&self, inputs: &[&[u8]], out: &mut [u8]) -> Result<(), GroupError> {
        combine::combine_ranks_first(self.dtype, self.op, inputs, &self.runs, out)
            .map_err(GroupError::Combine)
    }
}

/// [`Group::reduce`] by the module's rules.
pub(super) fn run(
    group: &mut Group,
    rule: &Rule,
    sources: &[Place],
    dests: &[Place],
) -> Result<(), GroupError> {
    let dtype = rule.dtype;
    let len = sources.first().map_or(0, |p| p.span.len);
    group.check(sources, Some(len))?;
    group.check(dests, Some(len))?;
    if !combine::supported(dtype) {
        return Err(GroupError::Combine(CombineError::Dtype(dtype)));
    }
    let all: Vec<Place> = sources.iter().chain(dests).copied().collect();
    match group.path(&all)? {
        Path::InPlace(at) => {
            let floats = matches!(dtype, DataType::F32 | DataType::F64);
            match Streamed::plan(&all, &at, len, sources.len()).filter(|_| floats) {
                Some(plan) => plan.run(group, rule, len)?,
                None => whole_in_place(group, rule, &all, &at, sources.len())?,
            }
            group.confirm(dests)
        }
        Path::Host => {
            let inputs = group.read(sources)?;
            let inputs: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
            let mut out = crate::pages::zeroed(len)?;
            rule.combine(&inputs, &mut out)?;
            let data: Vec<&[u8]> = dests.iter().map(|_| out.as_slice()).collect();
            group.write(dests, &data)
        }
    }
}

/// Every source read in place (`places`: the sources, then the destinations, at `at`),
/// combined whole, then written to every destination.
fn whole_in_place(
    group: &mut Group,
    rule: &Rule,
    places: &[Place],
    at: &[usize],
    sources: usize,
) -> Result<(), GroupError> {
    let len = places.first().map_or(0, |p| p.span.len);
    let mut memories = Memories::of(&mut group.members, places)?;
    let mut out = crate::pages::zeroed(len)?;
    {
        let inputs = places[..sources]
            .iter()
            .zip(at)
            .map(|(p, &at)| memories.read(p.member, at, len))
            .collect::<Result<Vec<_>, _>>()?;
        rule.combine(&inputs, &mut out)?;
    }
    for (place, &at) in places[sources..].iter().zip(&at[sources..]) {
        memories.write(place.member, at, &out)?;
    }
    Ok(())
}

/// A reduction streamed in place (module rules): each member's distinct ranges, and which
/// of them each source and destination is.
struct Streamed {
    /// By member: its distinct ranges in its memory.
    ranges: Vec<Vec<Range<usize>>>,
    /// Each place's (member, index among its ranges), the sources first.
    places: Vec<(usize, usize)>,
    sources: usize,
}

impl Streamed {
    /// The plan for `places` (the sources, then the destinations) of `len` bytes at `at`;
    /// `None` where two places of a member overlap without being the same bytes.
    fn plan(places: &[Place], at: &[usize], len: usize, sources: usize) -> Option<Self> {
        let members = places.iter().map(|p| p.member + 1).max().unwrap_or(0);
        let mut ranges: Vec<Vec<Range<usize>>> = vec![Vec::new(); members];
        let mut indices = Vec::with_capacity(places.len());
        for (place, &at) in places.iter().zip(at) {
            let range = at..at + len;
            let mine = &mut ranges[place.member];
            let index = match mine.iter().position(|r| *r == range) {
                Some(index) => index,
                None if mine
                    .iter()
                    .any(|r| r.start < range.end && range.start < r.end) =>
                {
                    return None
                }
                None => {
                    mine.push(range);
                    mine.len() - 1
                }
            };
            indices.push((place.member, index));
        }
        Some(Self {
            ranges,
            places: indices,
            sources,
        })
    }

    /// Runs the plan on `group`'s memories, the elements cut between the host's cores
    /// (`combine::parts`).
    fn run(&self, group: &mut Group, rule: &Rule, len: usize) -> Result<(), GroupError> {
        let parts: Vec<Range<usize>> = combine::parts(len).collect();
        // Every member's ranges for every part, part after part.
        let wanted: Vec<Vec<Range<usize>>> = self
            .ranges
            .iter()
            .map(|mine| {
                (parts.iter())
                    .flat_map(|p| mine.iter().map(move |r| r.start + p.start..r.start + p.end))
                    .collect()
            })
            .collect();
        let touched: Vec<usize> = self.places.iter().map(|&(member, _)| member).collect();
        let memories = Memories::of_members(&mut group.members, &touched)?;
        let mut views: Vec<std::vec::IntoIter<&mut [u8]>> = memories
            .split(&wanted)?
            .into_iter()
            .map(Vec::into_iter)
            .collect();
        // Each part's views, member after member, and where each place's view is in them.
        let mut first_of = Vec::with_capacity(self.ranges.len());
        let mut count = 0;
        for mine in &self.ranges {
            first_of.push(count);
            count += mine.len();
        }
        let index: Vec<usize> = (self.places.iter())
            .map(|&(member, i)| first_of[member] + i)
            .collect();
        let (sources, dests) = index.split_at(self.sources);
        let mut per_part: Vec<Vec<&mut [u8]>> = Vec::with_capacity(parts.len());
        for _ in &parts {
            let mut part = Vec::with_capacity(count);
            for (member, mine) in self.ranges.iter().enumerate() {
                part.extend(views[member].by_ref().take(mine.len()));
            }
            per_part.push(part);
        }
        combine::on_cores(per_part, |part| reduce_part(rule, part, sources, dests))
    }
}

/// One part of a streamed reduction, block by block, through `views` (all of the part's
/// length): `sources` and `dests` index them. Each block is combined straight from the
/// sources' views into one host buffer, then streamed into every destination: a source
/// that is also a destination is read whole before it is written.
fn reduce_part(
    rule: &Rule,
    mut views: Vec<&mut [u8]>,
    sources: &[usize],
    dests: &[usize],
) -> Result<(), GroupError> {
    let block = PASS * rule.dtype.size();
    let part = views.first().map_or(0, |view| view.len());
    // No longer than the part: a small allreduce zeroes no more than it writes.
    let mut out = vec![0u8; block.min(part)];
    for start in (0..part).step_by(block) {
        let end = part.min(start + block);
        let out = &mut out[..end - start];
        let inputs: Vec<&[u8]> = sources.iter().map(|&s| &views[s][start..end]).collect();
        rule.combine(&inputs, out)?;
        for &d in dests {
            // Streaming stores: the result is not read again here, and a plain store would
            // read every line of the destination first (~15 % of the time, measured when
            // this was the session's own allreduce). Equal lengths by construction.
            let streamed = stream(&mut views[d][start..end], out);
            debug_assert!(streamed, "a block and its destination differ in length");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches a cut between cores that changes bits or misses elements: an odd element
    /// count (no part a whole number of blocks, the last part shorter), cut in three,
    /// with values whose f64 sum depends on the order (`1e30 + x - 1e30` is 0, `1e30 -
    /// 1e30 + x` is `x`), and a source that is its own destination — against one call
    /// of the kernel on the whole arrays. A part that read a neighbour's elements, folded
    /// in another order, skipped a tail or wrote a destination before its source was read
    /// would differ; every destination starts as NaN, so a missed element shows too.
    #[test]
    fn an_array_cut_between_cores_gives_the_kernels_bits() {
        let elements = (3 * combine::PART_MIN + 2 * PASS) / 4 + 13;
        let len = elements * 4;
        let parts: Vec<Range<usize>> = combine::parts_for(len, 3).collect();
        assert_eq!(parts.len(), 3, "the array is cut in three");
        assert!(parts.iter().all(|p| p.start % combine::LINE == 0));
        assert_eq!(parts.last().map(|p| p.end), Some(len));
        let value = |source: usize, i: usize| -> f32 {
            let big = if i.is_multiple_of(2) { 1e30 } else { 3e29 };
            match source {
                0 => big,
                1 => 1.0 + i as f32 / 7.0,
                2 => -big,
                _ => (i % 97) as f32 * 1e-3 - 0.05,
            }
        };
        let mut arrays: Vec<Vec<u8>> = (0..4)
            .map(|s| {
                (0..elements)
                    .flat_map(|i| value(s, i).to_le_bytes())
                    .collect()
            })
            .collect();
        let rule = Rule {
            dtype: DataType::F32,
            op: ReduceOp::Sum,
            runs: Vec::new(),
        };
        let mut want = vec![0u8; len];
        let inputs: Vec<&[u8]> = arrays.iter().map(Vec::as_slice).collect();
        rule.combine(&inputs, &mut want).unwrap();
        // Views 0-3 the sources, 0 and 4-6 the destinations (source 0 is its own).
        arrays.extend((0..3).map(|_| f32::NAN.to_le_bytes().repeat(elements)));
        let (sources, dests) = ([0, 1, 2, 3], [0, 4, 5, 6]);
        let mut rests: Vec<&mut [u8]> = arrays.iter_mut().map(Vec::as_mut_slice).collect();
        let mut per_part = Vec::new();
        for part in &parts {
            let mut views = Vec::new();
            for rest in &mut rests {
                let (view, others) = std::mem::take(rest).split_at_mut(part.len());
                views.push(view);
                *rest = others;
            }
            per_part.push(views);
        }
        combine::on_cores(per_part, |views| {
            reduce_part(&rule, views, &sources, &dests)
        })
        .unwrap();
        for &d in &dests {
            assert!(arrays[d] == want, "destination {d} holds the kernel's bits");
        }
    }

    /// Catches a cut that is no cut: below twice the smallest part, or on one core, the
    /// array stays whole (a thread started for a few kilobytes costs more than it saves),
    /// and an empty array is one empty part.
    #[test]
    fn small_arrays_and_one_core_stay_whole() {
        let whole = |len: usize, cores: usize| {
            let mut parts = combine::parts_for(len, cores);
            parts.next() == Some(0..len) && parts.next().is_none()
        };
        assert!(whole(4096, 2));
        assert!(whole(2 * combine::PART_MIN - 4, 8));
        assert!(whole(64 << 20, 1));
        assert!(whole(0, 2));
        let most = combine::parts_for(64 << 20, 64).count();
        assert_eq!(most, combine::MOST_PARTS);
    }
}
