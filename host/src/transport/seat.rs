//! Where a replica runs: its device's channel and its lane on that device.
//!
//! A device may run several consecutive replicas in one walk, as its lanes (core's
//! [`lanes`](tessera_core::program::lanes) rule); every object a replica owns on it (its
//! slots, variables, FIFOs) then has the lane's own id. A runtime's replicas are its
//! channels' lanes in order: channel 0's lanes first, then channel 1's, and so on.

use tessera_core::program::lanes::in_lane;
use tessera_core::wire::Target;

use super::{Channel, TransportError};

/// A replica's device (an index into the runtime's channels) and its lane there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seat {
    /// Its device's channel.
    pub channel: usize,
    /// Its lane on that device.
    pub lane: usize,
}

impl Seat {
    /// Every replica of `channels`, in replica order (each channel's lanes in turn).
    pub fn all(channels: &[Channel]) -> Vec<Seat> {
        channels
            .iter()
            .enumerate()
            .flat_map(|(channel, c)| (0..c.lanes()).map(move |lane| Seat { channel, lane }))
            .collect()
    }

    /// One-replica id `id` as this lane's: lane 0's is `id` itself (any id a device of one
    /// replica takes); another lane's is core's [`in_lane`] (ids of a prepared program,
    /// all within a lane's space).
    pub fn id(self, id: u16) -> Result<u16, TransportError> {
        if self.lane == 0 {
            return Ok(id);
        }
        // Built only when refused: an error built and dropped at every call cost a step on
        // many lanes a drop of it per span.
        in_lane(self.lane, id).ok_or_else(|| TransportError::Overflow {
            what: "an id of a lane past the first (ids of a prepared program only)",
            value: usize::from(id),
        })
    }

    /// `target` (named by its one-replica id) as this lane's.
    pub fn target(self, target: Target) -> Result<Target, TransportError> {
        Ok(match target {
            Target::Register(id) => Target::Register(id),
            Target::Slot(id) => Target::Slot(self.id(id)?),
            Target::Fifo(id) => Target::Fifo(self.id(id)?),
            Target::Variable(id) => Target::Variable(self.id(id)?),
        })
    }

    /// The lane as the wire numbers it.
    pub fn wire_lane(self) -> u16 {
        // At most MAX_LANES lanes: they fit 16 bits.
        u16::try_from(self.lane).unwrap_or(u16::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches a lane addressed with another lane's id: lane 0 keeps the one-replica ids,
    /// lane 1's lie a lane's ids above, and a register (not a replica's) is never moved.
    #[test]
    fn a_lane_names_its_own_objects() {
        let lane = |lane| Seat { channel: 0, lane };
        assert_eq!(lane(0).target(Target::Fifo(3)).unwrap(), Target::Fifo(3));
        assert_eq!(
            lane(1).target(Target::Slot(3)).unwrap(),
            Target::Slot(0x203)
        );
        assert_eq!(
            lane(2).target(Target::Register(3)).unwrap(),
            Target::Register(3)
        );
        assert!(lane(64).target(Target::Variable(1)).is_err());
        assert_eq!(
            lane(0).id(0x300).unwrap(),
            0x300,
            "a one-lane device takes any id"
        );
        assert!(lane(1).id(0x300).is_err());
    }
}
