//! Where targets lie in the device's memory, as the device located them.
//!
//! A step moves the same spans every time — every stream FIFO of every lane, then every
//! anchor FIFO — so the host looks the same targets up in the same order step after step,
//! hundreds of them on a device of many lanes. A hash map answers any order; this keeps
//! the last run of lookups too, and a lookup that follows it (the next target of the run,
//! or its first again: a new step) is answered from it without hashing: a probe that
//! mostly missed the cache, where the run is read front to back. A lookup off the run
//! goes to the map, and the run is cut there and goes on from it.
//!
//! Both are forgotten together ([`Located::clear`]) whenever device memory may move.

use std::collections::HashMap;
use std::ops::Range;

use foldhash::fast::FixedState;
use tessera_core::wire::Target;

/// Targets' places in the device's memory (see the module documentation).
#[derive(Debug, Default)]
pub(super) struct Located {
    /// Every place the device said, by target (foldhash: SipHash's cost for these few
    /// small keys was some 1.9 k instructions per device per step at 64 replicas).
    places: HashMap<Target, Range<usize>, FixedState>,
    /// The last run of lookups, in order, with what they found.
    run: Vec<(Target, Range<usize>)>,
    /// The next lookup the run expects.
    next: usize,
}

impl Located {
    /// Where `target` lies, if the device said.
    pub(super) fn get(&mut self, target: Target) -> Option<Range<usize>> {
        for at in [self.next, 0] {
            if let Some((t, place)) = self.run.get(at) {
                if *t == target {
                    self.next = at + 1;
                    return Some(place.clone());
                }
            }
        }
        let place = self.places.get(&target)?.clone();
        self.follow(target, place.clone());
        Some(place)
    }

    /// Remembers that `target` lies at `place` (just located).
    pub(super) fn insert(&mut self, target: Target, place: Range<usize>) {
        self.places.insert(target, place.clone());
        self.follow(target, place);
    }

    /// Forgets every place: device memory may have moved.
    pub(super) fn clear(&mut self) {
        self.places.clear();
        self.run.clear();
        self.next = 0;
    }

    /// The run goes on with `target`, cut where it was expected to go otherwise. A run twice
    /// as long as the targets known (a step looks some up twice) starts again from
    /// `target` instead of growing: lookups that never come back to its first target would
    /// grow it without end.
    fn follow(&mut self, target: Target, place: Range<usize>) {
        self.run.truncate(self.next);
        if self.run.len() >= 2 * self.places.len() {
            self.run.clear();
        }
        self.run.push((target, place));
        self.next = self.run.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches a run that answers a target with another's place: lookups in one order,
    /// then another, then the first again, each answered as the device said, and a target
    /// never located unknown.
    #[test]
    fn every_order_of_lookups_finds_each_targets_own_place() {
        let mut located = Located::default();
        let targets: Vec<Target> = (0..6).map(Target::Fifo).collect();
        for (k, &t) in targets.iter().enumerate() {
            located.insert(t, k * 100..k * 100 + 10);
        }
        let place = |t: Target| match t {
            Target::Fifo(k) => usize::from(k) * 100..usize::from(k) * 100 + 10,
            _ => unreachable!(),
        };
        let orders: [&[usize]; 4] = [
            &[0, 1, 2, 3, 4, 5],
            &[5, 3, 1, 0],
            &[0, 1, 2, 3, 4, 5],
            &[2, 2, 0, 5],
        ];
        for order in orders.iter().chain(orders.iter()) {
            for &k in *order {
                assert_eq!(
                    located.get(targets[k]),
                    Some(place(targets[k])),
                    "{order:?}"
                );
            }
        }
        assert_eq!(located.get(Target::Slot(0)), None);
        assert_eq!(located.get(Target::Fifo(9)), None);
        located.clear();
        assert_eq!(located.get(targets[0]), None, "forgotten with the map");
    }

    /// Catches a run that grows without end: lookups that go round two targets and never
    /// come back to the first one looked up keep a run at most twice the targets known.
    #[test]
    fn a_run_never_outgrows_the_targets_known() {
        let mut located = Located::default();
        for k in 0..3 {
            located.insert(Target::Fifo(k), k as usize..k as usize + 1);
        }
        for _ in 0..100 {
            for k in [1, 2] {
                assert_eq!(
                    located.get(Target::Fifo(k)),
                    Some(k as usize..k as usize + 1)
                );
            }
        }
        assert!(located.run.len() <= 6, "{} entries", located.run.len());
    }

    /// Catches a run that grows without end: a step's lookups repeated answer from a run
    /// as long as one step's.
    #[test]
    fn a_repeated_step_keeps_one_run() {
        let mut located = Located::default();
        for k in 0..4 {
            located.insert(Target::Fifo(k), 0..1);
        }
        for _ in 0..10 {
            for k in 0..4 {
                located.get(Target::Fifo(k));
            }
        }
        assert_eq!(located.run.len(), 4);
    }
}
