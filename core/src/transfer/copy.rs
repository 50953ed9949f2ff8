//! The copies themselves. Each public operation checks every size first, then moves bytes,
//! so a size error leaves all buffers untouched.

use core::convert::Infallible;
use core::ops::Range;

use super::{Collective, RemoteSlots, TransferError, WeightLayout};
use crate::grouping::RetrievalMode;

impl WeightLayout<'_> {
    /// Weights from the host: fills every local replica's slot from `host`, which holds one
    /// row per group. Sharded slots get their pieces and zeros in their padding.
    pub fn to_replicas<S: RemoteSlots + ?Sized>(
        &self,
        host: &[u8],
        slots: &mut S,
    ) -> Result<(), TransferError<S::Error>> {
        check_len(self.from_host_bytes(), host.len())?;
        self.check_slots(slots)?;
        for local in 0..self.window.local {
            let placement = self.placement(local)?;
            let replica = placement.replica;
            let remote = |error| TransferError::Remote { replica, error };
            let row = &host[self.rows(placement.row, 1)];
            let (Some(shard), Some(m)) = (&self.shard, placement.shard) else {
                slots.write(local, 0, row).map_err(remote)?;
                continue;
            };
            // Pieces lie inside `elements` and `per_replica`, whose byte sizes `new` checked.
            let es = self.element_size;
            for piece in shard.pieces(m).map_err(super::LayoutError::from)? {
                let src = &row[piece.src_begin * es..piece.src_end * es];
                slots
                    .write(local, piece.dst_offset * es, src)
                    .map_err(remote)?;
            }
            for gap in shard.padding(m).map_err(super::LayoutError::from)? {
                slots
                    .zero(local, gap.begin * es, gap.len() * es)
                    .map_err(remote)?;
            }
        }
        Ok(())
    }

    /// Weights to the host: fills `host` (one row per returning replica) from the local
    /// slots, zeroing whatever this instance does not hold, and returns the collective
    /// still needed across instances (see the module documentation).
    pub fn to_host<S: RemoteSlots + ?Sized>(
        &self,
        slots: &mut S,
        host: &mut [u8],
    ) -> Result<Collective, TransferError<S::Error>> {
        check_len(self.to_host_bytes(), host.len())?;
        self.check_slots(slots)?;
        match self.shard {
            None => self.unsharded_to_host(slots, host)?,
            Some(_) => self.sharded_to_host(slots, host)?,
        }
        Ok(self.collective())
    }

    /// Keeps one row per group of an all-replicas buffer: each group's representative's.
    ///
    /// `src` has one row per replica, `dst` one row per group. A `src` size that does not
    /// fit in `usize` is [`LayoutError::TooLarge`](super::LayoutError::TooLarge): `new`
    /// only checked the sizes of this layout's own host buffers, and with one row per group
    /// an all-replicas buffer can be larger than both.
    pub fn downsample(&self, src: &[u8], dst: &mut [u8]) -> Result<(), TransferError<Infallible>> {
        let grouping = self.settings.grouping();
        // Unchecked by `new` when returning < replicas (one row per group): may overflow.
        let src_bytes = self
            .row_bytes
            .checked_mul(grouping.replicas())
            .ok_or(layout(super::LayoutError::TooLarge))?;
        check_len(src_bytes, src.len())?;
        check_len(self.from_host_bytes(), dst.len())?;
        for group in 0..grouping.num_groups() {
            let representative = self.settings.representative(group).map_err(layout)?;
            dst[self.rows(group, 1)].copy_from_slice(&src[self.rows(representative, 1)]);
        }
        Ok(())
    }

    fn unsharded_to_host<S: RemoteSlots + ?Sized>(
        &self,
        slots: &mut S,
        host: &mut [u8],
    ) -> Result<(), TransferError<S::Error>> {
        let grouping = self.settings.grouping();
        // Row `row` of the host buffer is read from `source(row)`, if that replica is local.
        let source = |row: usize| match self.settings.retrieval() {
            RetrievalMode::AllReplicas => Ok(row),
            RetrievalMode::OnePerGroup => grouping.replica_at(row, 0),
        };
        for row in 0..self.settings.returning() {
            let replica = source(row).map_err(layout)?;
            let out = &mut host[self.rows(row, 1)];
            if self.window.contains(replica) {
                let local = replica - self.window.offset;
                slots
                    .read(local, 0, out)
                    .map_err(|error| TransferError::Remote { replica, error })?;
            } else {
                out.fill(0);
            }
        }
        Ok(())
    }

    fn sharded_to_host<S: RemoteSlots + ?Sized>(
        &self,
        slots: &mut S,
        host: &mut [u8],
    ) -> Result<(), TransferError<S::Error>> {
        let Some(shard) = &self.shard else {
            return Ok(());
        };
        let grouping = self.settings.grouping();
        // Pieces lie inside `elements` and `per_replica`, whose byte sizes `new` checked.
        let es = self.element_size;
        for group in 0..grouping.num_groups() {
            let first = grouping.replica_at(group, 0).map_err(layout)?;
            let target = match self.settings.retrieval() {
                RetrievalMode::OnePerGroup => group,
                RetrievalMode::AllReplicas => first,
            };
            // Members 0..D hold one shard each; later members hold copies of them.
            let holders = grouping
                .members(group)
                .map_err(layout)?
                .take(shard.domain());
            let complete = holders.clone().all(|r| self.window.contains(r));
            let row = &mut host[self.rows(target, 1)];
            if !complete {
                row.fill(0);
            }
            for (m, replica) in holders.enumerate() {
                if !self.window.contains(replica) {
                    continue;
                }
                let local = replica - self.window.offset;
                for piece in shard.pieces(m).map_err(layout)? {
                    let out = &mut row[piece.src_begin * es..piece.src_end * es];
                    slots
                        .read(local, piece.dst_offset * es, out)
                        .map_err(|error| TransferError::Remote { replica, error })?;
                }
            }
            if self.settings.retrieval() == RetrievalMode::AllReplicas {
                for member in grouping.members(group).map_err(layout)?.skip(1) {
                    host.copy_within(self.rows(target, 1), self.rows(member, 1).start);
                }
            }
        }
        Ok(())
    }

    /// Checks every local slot's size before any byte moves.
    fn check_slots<S: RemoteSlots + ?Sized>(
        &self,
        slots: &S,
    ) -> Result<(), TransferError<S::Error>> {
        for local in 0..self.window.local {
            let replica = self.window.offset + local;
            let actual = slots
                .slot_len(local)
                .map_err(|error| TransferError::Remote { replica, error })?;
            if actual != self.slot_bytes {
                return Err(TransferError::SlotSize {
                    replica,
                    expected: self.slot_bytes,
                    actual,
                });
            }
        }
        Ok(())
    }

    /// Byte range of `count` rows starting at row `first`. Callers pass rows below the
    /// buffer's row count, whose byte size was checked not to overflow.
    fn rows(&self, first: usize, count: usize) -> Range<usize> {
        first * self.row_bytes..(first + count) * self.row_bytes
    }
}

fn check_len<E>(expected: usize, actual: usize) -> Result<(), TransferError<E>> {
    if expected == actual {
        Ok(())
    } else {
        Err(TransferError::HostSize { expected, actual })
    }
}

fn layout<E>(e: impl Into<super::LayoutError>) -> TransferError<E> {
    TransferError::Layout(e.into())
}
