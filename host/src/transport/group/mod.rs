//! The devices of a session as one group, and the data path between them: what the
//! channel's data path (`channel/data_path.rs`) is for one device, this is for several.
//!
//! A group's operations move bytes between [`Place`]s — a span of a target (a register, a
//! slot, a FIFO) on one member: read and write ([`Group::read`], [`Group::write`]), reduce
//! sources into destinations ([`Group::reduce`]), assemble destinations from pieces of
//! sources ([`Group::broadcast`], [`Group::scatter`], [`Group::gather`],
//! [`Group::allgather`], and [`Group::copy`] from member to member: `spread`), and fill
//! places from a file ([`Group::fill`]). The caller (a session) says *what* moves; the group
//! alone decides *how*.
//!
//! # Paths
//!
//! Chosen once per operation, in `Group::path`, the first that every place allows:
//!
//! 1. **In place**: every member's memory is mapped by the host (device threads and child
//!    processes) and every place lies in it, as its device locates it. The group moves the
//!    bytes itself while the members are idle (`in_place` states why that is sound).
//! 2. **Across MPI ranks** (feature `mpi`): members on other ranks, whose hosts map their
//!    memory, take part through their ranks (`ranks`).
//! 3. **Through the host**: every source read into host buffers by the channels' data path,
//!    the result made on the host, written back the same way (QEMU members, or a place the
//!    device does not locate — which then comes back as the device's refusal of the move).
//!
//! # Rules
//!
//! - **Checked before a byte moves.** Every place's length against the operation's, every
//!   member index, and (in place) every place against its member's memory; a failure
//!   writes nothing.
//! - **A member lost during an in-place move fails the move**: its memory stays mapped, so
//!   once the bytes are in, every destination's member is confirmed there — a device
//!   thread's end is seen by the host without a message; any other member answers a
//!   `Locate` (one round trip, every member asked before any answer is awaited).
//! - **A source may be a destination**: every source is read before the destinations of
//!   the same bytes are written, on every path.
//! - **The same result on every path**: reductions combine their sources in the order given
//!   with one kernel (`crate::combine`), whole blocks at a time; assembling copies bytes.
//! - Errors are [`GroupError`]s naming the member.

mod fill;
mod in_place;
#[cfg(feature = "mpi")]
pub mod ranks;
mod reduce;
mod spread;

use std::ops::{Index, IndexMut};

use serde::{Deserialize, Serialize};
use tessera_core::dtype::DataType;

pub use fill::Runs;
use spread::Piece;

use super::{Channel, Span, TransportError};
use crate::combine::{CombineError, ReduceOrder};
use crate::input::{Input, InputError};
use crate::pages::OutOfMemory;
use tessera_core::wire::ReduceOp;

/// A span of one member's target: what a group operation reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// The member (its index in the group).
    pub member: usize,
    /// The bytes.
    pub span: Span,
}

/// One collective's places: its sources and its destinations, each on a member, in member
/// order (what "the leader" means: the first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Set {
    /// The places read.
    pub sources: Vec<Place>,
    /// The places written.
    pub dests: Vec<Place>,
}

/// Which collective (how a set's destinations are made of its sources).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Kind {
    /// The sources combined element by element in the order given, into every
    /// destination.
    Reduce(ReduceOp, ReduceOrder),
    /// The sources end to end, into every destination.
    Allgather,
    /// The one source, into every destination.
    Broadcast,
    /// The one source cut into as many equal parts as destinations, part `i` into
    /// destination `i`.
    Scatter,
    /// The sources end to end, into the one destination.
    Gather,
}

impl Kind {
    /// The operation's name, as errors give it.
    #[cfg(feature = "mpi")]
    pub(crate) fn operation(self) -> &'static str {
        match self {
            Self::Reduce(..) => "allreduce",
            Self::Allgather => "allgather",
            Self::Broadcast => "broadcast",
            Self::Scatter => "scatter",
            Self::Gather => "gather",
        }
    }

    /// Each destination of `set` as pieces of its sources.
    fn pieces(self, set: &Set) -> Vec<(Place, Vec<Piece>)> {
        let whole = |i: usize| Piece::whole(i, set.sources[i].span.len);
        let every = || (0..set.sources.len()).map(whole).collect::<Vec<_>>();
        let parts = set.dests.len().max(1);
        let part = set.sources.first().map_or(0, |s| s.span.len / parts);
        set.dests
            .iter()
            .enumerate()
            .map(|(i, dest)| {
                let pieces = match self {
                    Self::Allgather | Self::Gather => every(),
                    Self::Broadcast | Self::Reduce(..) => vec![whole(0)],
                    Self::Scatter => vec![Piece {
                        source: 0,
                        bytes: i * part..(i + 1) * part,
                    }],
                };
                (*dest, pieces)
            })
            .collect()
    }
}

/// Why a group operation failed; nothing was written unless the error says otherwise.
#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    /// A member's link or device failed (the error names its replica): bytes may have been
    /// written to other members.
    #[error("member {member}: {source}")]
    Member {
        /// The member.
        member: usize,
        /// What failed.
        source: TransportError,
    },
    /// A member index past the group.
    #[error("no member {member}: the group has {members}")]
    NoMember {
        /// The index given.
        member: usize,
        /// Members there are.
        members: usize,
    },
    /// A piece of a source the operation does not have.
    #[error("no source {index}: the operation has {sources}")]
    NoSource {
        /// The index given.
        index: usize,
        /// Sources there are.
        sources: usize,
    },
    /// A place of another length than the operation moves.
    #[error("member {member}'s place holds {actual} bytes where the operation moves {expected}")]
    Length {
        /// The member.
        member: usize,
        /// Bytes the operation moves there.
        expected: usize,
        /// Bytes of the place.
        actual: usize,
    },
    /// A member whose memory the host does not map, in a move in place (the path chose it
    /// for members whose memory it maps: a member that lost it meanwhile).
    #[error("member {member}'s memory is not mapped by the host")]
    NotMapped {
        /// The member.
        member: usize,
    },
    /// A member's device located bytes outside its memory (a device breaking its layout).
    #[error("member {member} places {len} bytes at {at}, outside its {memory} bytes of memory")]
    Outside {
        /// The member.
        member: usize,
        /// Where the bytes start.
        at: usize,
        /// How many.
        len: usize,
        /// The memory's size.
        memory: usize,
    },
    /// Two places of one member that share bytes without being the same place.
    #[error("member {member}'s places {first:?} and {second:?} share bytes")]
    Overlap {
        /// The member.
        member: usize,
        /// One place's bytes in its memory.
        first: std::ops::Range<usize>,
        /// The other's.
        second: std::ops::Range<usize>,
    },
    /// The sources could not be combined (an integer result out of range, a type the
    /// kernel does not combine).
    #[error("combining: {0}")]
    Combine(CombineError),
    /// The host could not allocate a buffer the operation needs.
    #[error(transparent)]
    HostMemory(#[from] OutOfMemory),
    /// The file of a fill was refused or could not be read.
    #[error(transparent)]
    Input(InputError),
    /// A control message to another rank could not be posted (its post office stopped).
    #[error("rank {rank}: cannot post a control message: {source}")]
    Post {
        /// The rank.
        rank: usize,
        /// Why.
        source: std::io::Error,
    },
    /// A rank did not answer a command within the MPI deadline.
    #[error("rank {rank} did not answer the {operation} within {seconds} s")]
    RankSilent {
        /// The rank.
        rank: usize,
        /// The operation.
        operation: &'static str,
        /// The deadline.
        seconds: u64,
    },
    /// A rank failed its part of a command (it took part in every MPI collective of it).
    #[cfg(feature = "mpi")]
    #[error("rank {rank} failed its part of the {operation}: {failure}")]
    Rank {
        /// The rank.
        rank: usize,
        /// The operation.
        operation: &'static str,
        /// Why.
        failure: ranks::RankFailure,
    },
    /// A rank answered a command saying it has finished serving.
    #[error("rank {rank} has finished serving, before the {operation}")]
    RankFinished {
        /// The rank.
        rank: usize,
        /// The operation.
        operation: &'static str,
    },
}

impl GroupError {
    /// `source`, failed on `member`.
    fn on(member: usize) -> impl FnOnce(TransportError) -> Self {
        move |source| Self::Member { member, source }
    }
}

/// How an operation's bytes travel (module doc).
enum Path {
    /// In place: each place's address in its member's memory, in the order given.
    InPlace(Vec<usize>),
    /// Through the host, by the channels' data path.
    Host,
}

/// The devices of a session (module doc): channels in member order.
#[derive(Debug)]
pub struct Group {
    members: Vec<Channel>,
    /// The other ranks, when the members live on an MPI job's ranks.
    #[cfg(feature = "mpi")]
    ranks: Option<ranks::Ranks>,
}

impl Group {
    /// A group of `members`, member `i` being `members[i]`.
    pub fn new(members: Vec<Channel>) -> Self {
        Self {
            members,
            #[cfg(feature = "mpi")]
            ranks: None,
        }
    }

    /// A group of `members` living on the ranks of an MPI job (`ranks`: rank 0's view; a
    /// remote member's channel is its link to its rank).
    #[cfg(feature = "mpi")]
    pub fn across(members: Vec<Channel>, ranks: ranks::Ranks) -> Self {
        Self {
            members,
            ranks: Some(ranks),
        }
    }

    /// The other ranks' view, when the group spans an MPI job's ranks.
    #[cfg(feature = "mpi")]
    pub fn ranks(&self) -> Option<&ranks::Ranks> {
        self.ranks.as_ref()
    }

    /// Ends the group: every member's channel dropped (its device stops), then, across
    /// ranks, every rank told to finish and waited for.
    pub fn shutdown(&mut self) {
        self.members.clear();
        #[cfg(feature = "mpi")]
        if let Some(ranks) = self.ranks.take() {
            ranks.finish();
        }
    }

    /// Members there are.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// True when the group has no member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The members' channels, in order.
    pub fn iter(&self) -> std::slice::Iter<'_, Channel> {
        self.members.iter()
    }

    /// The members' channels, in order, to send requests on.
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, Channel> {
        self.members.iter_mut()
    }

    /// Every member's channel, ending the group.
    pub fn into_channels(self) -> Vec<Channel> {
        self.members
    }

    /// Reads every place into a buffer of its own, by the channels' data path (every read
    /// started before any is awaited: one round trip for all).
    pub fn read(&mut self, places: &[Place]) -> Result<Vec<Vec<u8>>, GroupError> {
        self.check(places, None)?;
        let mut out = places
            .iter()
            .map(|p| crate::pages::zeroed(p.span.len))
            .collect::<Result<Vec<_>, _>>()?;
        let mut readings = Vec::with_capacity(places.len());
        for (place, buffer) in places.iter().zip(out.iter_mut()) {
            let take = |_: usize, bytes: &[u8]| buffer.copy_from_slice(bytes);
            let channel = &mut self.members[place.member];
            let reading = channel.start_read(&[place.span], take);
            readings.push(reading.map_err(GroupError::on(place.member))?);
        }
        for ((place, buffer), reading) in places.iter().zip(out.iter_mut()).zip(readings) {
            let take = |_: usize, bytes: &[u8]| buffer.copy_from_slice(bytes);
            let channel = &mut self.members[place.member];
            let finished = channel.finish_read(reading, take);
            finished.map_err(GroupError::on(place.member))?;
        }
        Ok(out)
    }

    /// Writes `data[i]` into `places[i]`, by the channels' data path; waits for every
    /// member to confirm (all sent before any is awaited).
    pub fn write(&mut self, places: &[Place], data: &[&[u8]]) -> Result<(), GroupError> {
        for (place, bytes) in places.iter().zip(data) {
            if bytes.len() != place.span.len {
                return Err(GroupError::Length {
                    member: place.member,
                    expected: bytes.len(),
                    actual: place.span.len,
                });
            }
        }
        self.check(places, None)?;
        let mut sent = Vec::with_capacity(places.len());
        for (place, bytes) in places.iter().zip(data) {
            let span = place.span;
            let channel = &mut self.members[place.member];
            let moved = channel.write(span.target, span.offset, bytes, None);
            sent.push((place.member, moved.map_err(GroupError::on(place.member))?));
        }
        let mut first = Ok(());
        for (member, sent) in sent {
            let confirmed = self.members[member].confirm(sent);
            if first.is_ok() {
                first = confirmed.map_err(GroupError::on(member));
            }
        }
        first
    }

    /// In every set: its sources (each of the same bytes, a whole number of `dtype`
    /// elements) combined element by element with `op`, in `order` (`crate::combine`),
    /// into every one of its destinations (`reduce`).
    pub fn reduce(
        &mut self,
        dtype: DataType,
        op: ReduceOp,
        order: ReduceOrder,
        sets: &[Set],
    ) -> Result<(), GroupError> {
        self.collective(Kind::Reduce(op, order), dtype, sets)
    }

    /// In every set: its sources end to end into every one of its destinations.
    pub fn allgather(&mut self, dtype: DataType, sets: &[Set]) -> Result<(), GroupError> {
        self.collective(Kind::Allgather, dtype, sets)
    }

    /// In every set: its one source into every one of its destinations.
    pub fn broadcast(&mut self, dtype: DataType, sets: &[Set]) -> Result<(), GroupError> {
        self.collective(Kind::Broadcast, dtype, sets)
    }

    /// In every set: its one source cut into as many equal parts as it has destinations,
    /// part `i` into destination `i`.
    pub fn scatter(&mut self, dtype: DataType, sets: &[Set]) -> Result<(), GroupError> {
        self.collective(Kind::Scatter, dtype, sets)
    }

    /// In every set: its sources end to end into its one destination.
    pub fn gather(&mut self, dtype: DataType, sets: &[Set]) -> Result<(), GroupError> {
        self.collective(Kind::Gather, dtype, sets)
    }

    /// Each pair's source into its destination (of the same bytes): every source read
    /// before any destination is written.
    pub fn copy(&mut self, pairs: &[(Place, Place)]) -> Result<(), GroupError> {
        #[cfg(feature = "mpi")]
        if self.ranks.is_some() && ranks::moves::run_moves(self, pairs)? {
            return Ok(());
        }
        let sources: Vec<Place> = pairs.iter().map(|(from, _)| *from).collect();
        let dests: Vec<(Place, Vec<Piece>)> = (pairs.iter().enumerate())
            .map(|(i, (from, to))| (*to, vec![Piece::whole(i, from.span.len)]))
            .collect();
        spread::run(self, &sources, &dests)
    }

    /// Each place filled with its runs of `input`'s bytes (`fill`).
    pub fn fill(&mut self, input: &Input, parts: &[(Place, Runs)]) -> Result<(), GroupError> {
        #[cfg(feature = "mpi")]
        if self.ranks.is_some() && ranks::fill::run_fill(self, input, parts)? {
            return Ok(());
        }
        fill::run(self, input, parts)
    }

    /// Collective `kind` in every set: across the ranks where the group spans them and the
    /// sets allow, else set by set on this host (in place or through it).
    fn collective(&mut self, kind: Kind, dtype: DataType, sets: &[Set]) -> Result<(), GroupError> {
        #[cfg(feature = "mpi")]
        if self.ranks.is_some() {
            let size = sets
                .first()
                .map_or(0, |set| set.sources.len().max(set.dests.len()));
            if ranks::local::run_in_sets(self, kind, dtype, sets, size)?
                || ranks::collectives::run_across(self, kind, dtype, sets, size)?
            {
                return Ok(());
            }
            // A scatter's parts and a gather's pieces are copies from member to member:
            // each byte crosses between ranks once, from the rank that holds it.
            if let Some(pairs) = ranks::moves::as_copies(kind, sets) {
                if ranks::moves::run_moves(self, &pairs)? {
                    return Ok(());
                }
            }
        }
        for set in sets {
            match kind {
                Kind::Reduce(op, order) => {
                    let rule = reduce::Rule {
                        dtype,
                        op,
                        runs: self.runs(&set.sources, order),
                    };
                    reduce::run(self, &rule, &set.sources, &set.dests)?
                }
                _ => spread::run(self, &set.sources, &kind.pieces(set))?,
            }
        }
        Ok(())
    }

    /// How a reduction in `order` takes `sources`: ranks first, the number of consecutive
    /// sources each rank hosts; worker order (and on one host), no runs.
    fn runs(&self, sources: &[Place], order: ReduceOrder) -> Vec<usize> {
        #[cfg(feature = "mpi")]
        if let (ReduceOrder::RanksFirst, Some(ranks)) = (order, &self.ranks) {
            let per_rank = ranks.per_rank().max(1);
            let mut runs: Vec<usize> = Vec::new();
            let mut last = None;
            for place in sources {
                let rank = place.member / per_rank;
                match runs.last_mut() {
                    Some(run) if last == Some(rank) => *run += 1,
                    _ => runs.push(1),
                }
                last = Some(rank);
            }
            return runs;
        }
        // One host: worker order whatever was asked (they agree).
        let _ = (sources, order);
        Vec::new()
    }

    /// After bytes were moved without a request: tells a member lost meanwhile from one
    /// that is there to use them (module rules). The first member found gone, in the order
    /// of `places`, is the error.
    fn confirm(&mut self, places: &[Place]) -> Result<(), GroupError> {
        let asked: Vec<_> = places
            .iter()
            .map(|place| {
                let channel = &mut self.members[place.member];
                (place.member, channel.ask_present(place.span.target))
            })
            .collect();
        let mut first = Ok(());
        for (member, asked) in asked {
            let answered = match asked {
                Ok(Some(ticket)) => self.members[member].receive_typed(ticket).map(drop),
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            };
            if first.is_ok() {
                first = answered.map_err(GroupError::on(member));
            }
        }
        first
    }

    /// Every place names a member, and (with `len`) holds `len` bytes.
    fn check(&self, places: &[Place], len: Option<usize>) -> Result<(), GroupError> {
        for place in places {
            if place.member >= self.members.len() {
                return Err(GroupError::NoMember {
                    member: place.member,
                    members: self.members.len(),
                });
            }
            if let Some(len) = len.filter(|&len| len != place.span.len) {
                return Err(GroupError::Length {
                    member: place.member,
                    expected: len,
                    actual: place.span.len,
                });
            }
        }
        Ok(())
    }

    /// How an operation on `places` travels (module doc: the one place the path is
    /// chosen).
    fn path(&mut self, places: &[Place]) -> Result<Path, GroupError> {
        let mut at = Vec::with_capacity(places.len());
        for place in places {
            let channel = &mut self.members[place.member];
            match channel.in_memory(&place.span) {
                Ok(Some((address, _))) => at.push(address),
                Ok(None) => return Ok(Path::Host),
                Err(e) => {
                    return Err(GroupError::Member {
                        member: place.member,
                        source: e,
                    })
                }
            }
        }
        Ok(Path::InPlace(at))
    }
}

impl<'g> IntoIterator for &'g mut Group {
    type Item = &'g mut Channel;
    type IntoIter = std::slice::IterMut<'g, Channel>;

    fn into_iter(self) -> Self::IntoIter {
        self.members.iter_mut()
    }
}

impl Index<usize> for Group {
    type Output = Channel;

    fn index(&self, member: usize) -> &Channel {
        &self.members[member]
    }
}

impl IndexMut<usize> for Group {
    fn index_mut(&mut self, member: usize) -> &mut Channel {
        &mut self.members[member]
    }
}
