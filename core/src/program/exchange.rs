//! Exchanges: a batch's reduction rounds packed into as few messages as a frame holds.
//!
//! A round costs a trip to the host and back whatever its size, so a device sends several
//! rounds in one message, an *exchange*, and the host answers them together. Both sides cut
//! the rounds of a batch ([`Program::reductions`]) into exchanges by one rule:
//!
//! - an exchange is a run of consecutive rounds of one kind: gathers with gathers, gradients
//!   with gradients (the update lies between a batch's gradients and the next batch's
//!   gathers, so the two never travel together);
//! - it takes the next round while its rounds' bytes (each round carries its whole variable,
//!   4 bytes per element) stay within `max_bytes`, the largest payload one frame carries;
//! - a round larger than `max_bytes` alone is an exchange of its own (a device refuses such a
//!   program when it is prepared: no frame could carry it).
//!
//! An exchange's message is its rounds' buffers one after another in round order, and each
//! segment is combined across its own variable's group: rounds of different groupings share a
//! message without sharing a combination. Exchange `b·e + j` of a step (batch `b`, `e`
//! exchanges per batch) is exchange `j` of that batch.
//!
//! # Panics
//!
//! Nothing here panics: a size that overflows counts as larger than any frame.

use core::ops::Range;

use super::{elements, Program, Reduction, MAX_VARIABLES};

/// One exchange: rounds `rounds` of a batch (positions in [`Program::reductions`] order),
/// `bytes` in all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exchange {
    /// The rounds it carries, as positions in the batch's list.
    pub rounds: Range<usize>,
    /// Bytes of its message's payload: the sum of its rounds' (saturating).
    pub bytes: usize,
}

/// The exchanges of one batch, in order (see the module documentation).
#[derive(Debug, Clone)]
pub struct Exchanges<'p> {
    program: &'p Program,
    rounds: heapless::Vec<Reduction, { 2 * MAX_VARIABLES }>,
    max_bytes: usize,
    next: usize,
}

impl Program {
    /// The exchanges of one batch on `replicas` replicas when a message carries at most
    /// `max_bytes` of payload (see [`exchange`](crate::program::exchange)).
    pub fn exchanges(&self, replicas: usize, max_bytes: usize) -> Exchanges<'_> {
        Exchanges {
            program: self,
            // Each variable is gathered at most once and averaged at most once.
            rounds: self.reductions(replicas).take(2 * MAX_VARIABLES).collect(),
            max_bytes,
            next: 0,
        }
    }

    /// Bytes a reduction round of variable `index` carries: the whole variable as `f32`;
    /// `usize::MAX` when it does not exist or its size overflows.
    pub fn round_bytes(&self, index: u8) -> usize {
        self.variables
            .get(usize::from(index))
            .and_then(|v| elements(&v.shape))
            .and_then(|n| n.checked_mul(4))
            .unwrap_or(usize::MAX)
    }
}

impl Exchanges<'_> {
    /// The batch's rounds, in order.
    pub fn rounds(&self) -> &[Reduction] {
        &self.rounds
    }
}

/// Whether two rounds are of one kind.
fn same_kind(a: Reduction, b: Reduction) -> bool {
    matches!(
        (a, b),
        (Reduction::Gather { .. }, Reduction::Gather { .. })
            | (Reduction::Gradient { .. }, Reduction::Gradient { .. })
    )
}

impl Iterator for Exchanges<'_> {
    type Item = Exchange;

    fn next(&mut self) -> Option<Exchange> {
        let start = self.next;
        let first = *self.rounds.get(start)?;
        let mut bytes = self.program.round_bytes(first.variable());
        let mut end = start + 1;
        while let Some(&r) = self.rounds.get(end) {
            let more = bytes.saturating_add(self.program.round_bytes(r.variable()));
            if !same_kind(first, r) || more > self.max_bytes {
                break;
            }
            bytes = more;
            end += 1;
        }
        self.next = end;
        Some(Exchange {
            rounds: start..end,
            bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::tests::mlp;

    fn cut(p: &Program, replicas: usize, max_bytes: usize) -> std::vec::Vec<Range<usize>> {
        p.exchanges(replicas, max_bytes).map(|e| e.rounds).collect()
    }

    /// Catches rounds of both kinds sent in one message: the update between them would
    /// have to run on gradients not yet averaged.
    #[test]
    fn gathers_and_gradients_never_share_an_exchange() {
        let p = mlp();
        let rounds: std::vec::Vec<Reduction> = p.reductions(4).collect();
        for e in p.exchanges(4, usize::MAX) {
            let first = rounds[e.rounds.start];
            assert!(rounds[e.rounds.clone()]
                .iter()
                .all(|&r| same_kind(first, r)));
        }
    }

    /// Catches an exchange that outgrows a frame, or a cut that drops or repeats a round.
    #[test]
    fn exchanges_cover_every_round_once_within_the_frame() {
        let p = mlp();
        let count = p.reductions(4).count();
        for max in [0, 4, 100, 1000, usize::MAX] {
            let mut next = 0;
            for e in p.exchanges(4, max) {
                assert_eq!(e.rounds.start, next, "max {max}");
                assert!(e.bytes <= max || e.rounds.len() == 1, "max {max}: {e:?}");
                next = e.rounds.end;
            }
            assert_eq!(next, count, "max {max}");
        }
        assert_eq!(cut(&p, 4, 0).len(), count, "a tiny frame: one round each");
    }

    /// Catches byte counts that disagree with what the rounds carry.
    #[test]
    fn an_exchange_counts_its_rounds_bytes() {
        let p = mlp();
        let rounds: std::vec::Vec<Reduction> = p.reductions(4).collect();
        for e in p.exchanges(4, usize::MAX) {
            let sum: usize = rounds[e.rounds.clone()]
                .iter()
                .map(|r| p.round_bytes(r.variable()))
                .sum();
            assert_eq!(e.bytes, sum);
        }
    }

    /// The MLP on 4 replicas gathers `w1`, then averages `w1` (group of 4) and `w2` (groups
    /// of 2) in one message. Catches rounds of different groupings kept apart, or one
    /// message per round.
    #[test]
    fn the_mlp_makes_one_exchange_per_phase() {
        assert_eq!(cut(&mlp(), 4, usize::MAX), [0..1, 1..3]);
        let w1 = mlp().round_bytes(0);
        assert_eq!(cut(&mlp(), 4, w1), [0..1, 1..2, 2..3], "a frame of one w1");
    }

    #[test]
    fn a_missing_variable_is_larger_than_any_frame() {
        assert_eq!(mlp().round_bytes(200), usize::MAX);
    }
}
