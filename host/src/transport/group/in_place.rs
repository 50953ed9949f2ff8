//! Moves in place: the host reads and writes its members' memory itself.
//!
//! # Why it is sound
//!
//! A member's memory is mapped twice: by its device (its arena) and by the host. The host
//! touches its mapping only through [`Memories`], which borrows each member's memory from
//! its channel ([`Channel::device_memory`]): that first waits for every request in flight,
//! so the device is idle, waiting for its next request, and the exclusive borrow of the
//! channel lasts as long as the memory is used, so no request can reach the device
//! meanwhile. The device and the host never touch the memory at once.
//!
//! Every byte is reached through the mapping's checked ranges (`SharedMemory::range`,
//! `range_mut`, `split_mut`): an address a device reported is never used unchecked, and the
//! views several threads write are disjoint (`split_mut` refuses ranges that share a
//! byte). The only `unsafe` is the mapping's own (`transport::shared`'s `mapping`).

use std::ops::Range;

use super::{GroupError, Place};
use crate::transport::{Channel, SharedMemory, SplitError};

/// The memory of every member an operation touches, each member idle (module doc).
pub(super) struct Memories<'g> {
    /// By member: `None` for a member the operation does not touch.
    by_member: Vec<Option<&'g mut SharedMemory>>,
}

impl<'g> Memories<'g> {
    /// The memory of every member `places` name, each member idle once this returns.
    pub(super) fn of(channels: &'g mut [Channel], places: &[Place]) -> Result<Self, GroupError> {
        let members: Vec<usize> = places.iter().map(|p| p.member).collect();
        Self::of_members(channels, &members)
    }

    /// The memory of each of `members`, each member idle once this returns.
    pub(super) fn of_members(
        channels: &'g mut [Channel],
        members: &[usize],
    ) -> Result<Self, GroupError> {
        let mut by_member = Vec::with_capacity(channels.len());
        for (member, channel) in channels.iter_mut().enumerate() {
            if !members.contains(&member) {
                by_member.push(None);
                continue;
            }
            let memory = channel
                .device_memory()
                .map_err(GroupError::on(member))?
                .ok_or(GroupError::NotMapped { member })?;
            by_member.push(Some(memory));
        }
        Ok(Self { by_member })
    }

    fn member(&self, member: usize) -> Result<&SharedMemory, GroupError> {
        match self.by_member.get(member) {
            Some(Some(memory)) => Ok(memory),
            _ => Err(GroupError::NotMapped { member }),
        }
    }

    /// `len` bytes of `member`'s memory at `at`.
    pub(super) fn read(&self, member: usize, at: usize, len: usize) -> Result<&[u8], GroupError> {
        let memory = self.member(member)?;
        memory.range(at, len).ok_or(GroupError::Outside {
            member,
            at,
            len,
            memory: memory.len(),
        })
    }

    /// `data` into `member`'s memory at `at`.
    pub(super) fn write(
        &mut self,
        member: usize,
        at: usize,
        data: &[u8],
    ) -> Result<(), GroupError> {
        self.range_mut(member, at, data.len())?
            .copy_from_slice(data);
        Ok(())
    }

    /// `len` bytes of `member`'s memory at `at`, to write.
    pub(super) fn range_mut(
        &mut self,
        member: usize,
        at: usize,
        len: usize,
    ) -> Result<&mut [u8], GroupError> {
        let memory = match self.by_member.get_mut(member) {
            Some(Some(memory)) => memory,
            _ => return Err(GroupError::NotMapped { member }),
        };
        let size = memory.len();
        memory.range_mut(at, len).ok_or(GroupError::Outside {
            member,
            at,
            len,
            memory: size,
        })
    }

    /// Disjoint views of `ranges[m]` in member `m`'s memory, for every member, in the order
    /// given: what several threads write at once. Refused, nothing split, where ranges of
    /// one member share a byte or leave its memory.
    pub(super) fn split(
        self,
        ranges: &[Vec<Range<usize>>],
    ) -> Result<Vec<Vec<&'g mut [u8]>>, GroupError> {
        let mut views = Vec::with_capacity(self.by_member.len());
        for (member, memory) in self.by_member.into_iter().enumerate() {
            let wanted = ranges.get(member).map_or(&[][..], Vec::as_slice);
            let Some(memory) = memory else {
                if !wanted.is_empty() {
                    return Err(GroupError::NotMapped { member });
                }
                views.push(Vec::new());
                continue;
            };
            let len = memory.len();
            let split = memory.split_mut(wanted).map_err(|e| match e {
                SplitError::Outside { range, .. } => GroupError::Outside {
                    member,
                    at: range.start,
                    len: range.len(),
                    memory: len,
                },
                SplitError::Overlap(first, second) => GroupError::Overlap {
                    member,
                    first,
                    second,
                },
            })?;
            views.push(split);
        }
        Ok(views)
    }
}
