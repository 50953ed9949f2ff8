//! The device's half of exactly-once delivery with many requests in flight: go-back-N over
//! the host's sequence numbers, with the replies of the last `WINDOW` requests kept for
//! retries.
//!
//! # Rule
//!
//! The host numbers its requests 1, 2, 3, … (after `u32::MAX` comes 1 again; 0 is never
//! used) and never has more than `WINDOW` of them unanswered. The device runs requests
//! strictly in that order:
//!
//! - the request numbered `next` runs, its reply is kept, and `next` moves on;
//! - a request numbered one of the `WINDOW` before `next` already ran: it is answered again
//!   from the cache, never run twice;
//! - any other number is a request after a gap (an earlier one was lost) or an ancient
//!   retry: it is dropped unanswered. The host, hearing nothing, sends again every request
//!   from its oldest unanswered one (go-back-N), in order.
//!
//! A hello starts a new session: it always runs, forgets every kept reply and sets `next`
//! after itself. Before the first hello, any number is taken as the start.
//!
//! The rule holds across the wrap: "one of the `WINDOW` before `next`" counts along the
//! host's numbering (…, `u32::MAX`, 1, 2, …), and replies are kept in the order their
//! requests ran, each overwriting the oldest, so the last `WINDOW` are always all kept.
//! (A slot chosen by `seq % WINDOW` would not do: the numbering skips 0, so unless `WINDOW`
//! divides `u32::MAX`, request 1 lands on the slot of a request still in the window, whose
//! retry would then be dropped for ever instead of answered.)
//!
//! # Memory
//!
//! `WINDOW` replies of at most `FRAME` bytes each, in storage the caller provides (a
//! static on bare metal, the heap on a host): no allocation, nothing large on a stack.

use crate::lent::Lent;

/// What to do with a request, by its sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Run it (and keep its reply).
    Run,
    /// Answer it again from the cache.
    Repeat,
    /// Drop it unanswered.
    Drop,
}

/// The sequence number after `seq`, skipping 0.
pub const fn after(seq: u32) -> u32 {
    if seq == u32::MAX {
        1
    } else {
        seq + 1
    }
}

/// Replies kept for retries, and the number of the request that runs next.
pub struct ReplyCache<'b, const FRAME: usize, const WINDOW: usize> {
    replies: Lent<'b, [[u8; FRAME]; WINDOW]>,
    lens: [usize; WINDOW],
    seqs: [Option<u32>; WINDOW],
    next: Option<u32>,
    /// The slot the next request to run overwrites: the oldest kept reply.
    head: usize,
    /// The slot [`ReplyCache::slot`] last handed out, which [`ReplyCache::keep`] fills.
    open: usize,
}

impl<const FRAME: usize, const WINDOW: usize> core::fmt::Debug for ReplyCache<'_, FRAME, WINDOW> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ReplyCache")
            .field("next", &self.next)
            .field("kept", &self.seqs)
            .finish()
    }
}

impl<'b, const FRAME: usize, const WINDOW: usize> ReplyCache<'b, FRAME, WINDOW> {
    /// Nothing kept, in `replies`; the first request sets the numbering. (The server makes
    /// its cache with [`ReplyCache::in_storage`]: this is the tests'.)
    #[cfg(test)]
    pub fn new(replies: &'b mut [[u8; FRAME]; WINDOW]) -> Self {
        Self::in_storage(Lent::Borrowed(replies))
    }

    /// Nothing kept, in `replies` (lent or owned).
    pub(crate) fn in_storage(replies: Lent<'b, [[u8; FRAME]; WINDOW]>) -> Self {
        Self {
            replies,
            lens: [0; WINDOW],
            seqs: [None; WINDOW],
            next: None,
            head: 0,
            open: 0,
        }
    }

    /// What to do with request `seq` (`hello`: it is a hello).
    pub fn verdict(&self, seq: u32, hello: bool) -> Verdict {
        let Some(next) = self.next else {
            return Verdict::Run;
        };
        if hello || seq == next {
            return Verdict::Run;
        }
        // Walk forward from `seq` at most WINDOW steps: reaching `next` means `seq` is one
        // of the last WINDOW requests (this also handles the wrap past u32::MAX).
        let mut at = seq;
        for _ in 0..WINDOW {
            at = after(at);
            if at == next {
                return match self.cached(seq) {
                    Some(_) => Verdict::Repeat,
                    None => Verdict::Drop,
                };
            }
        }
        Verdict::Drop
    }

    /// Forgets every kept reply (a new session starts).
    pub fn restart(&mut self) {
        self.seqs = [None; WINDOW];
        self.next = None;
    }

    /// The buffer request `seq`'s reply goes into; whatever it kept is forgotten. Until
    /// [`ReplyCache::keep`], the caller may use it as scratch. A request that kept a reply
    /// already (one that replaces its reply) gets its own slot back; any other gets the
    /// oldest.
    pub fn slot(&mut self, seq: u32) -> &mut [u8; FRAME] {
        // Below WINDOW always; `%` lets the compiler see it, so that the indexing below has
        // no panic path (WINDOW is at least 1 for any cache that can hold a reply).
        let at = self.position(seq).unwrap_or(self.head) % WINDOW.max(1);
        self.open = at;
        self.seqs[at] = None;
        &mut self.replies[at]
    }

    /// Keeps the first `len` bytes of the slot [`ReplyCache::slot`] last handed out as
    /// `seq`'s reply; `seq` has run.
    pub fn keep(&mut self, seq: u32, len: usize) {
        // Below WINDOW always (see `slot`).
        let at = self.open % WINDOW.max(1);
        self.seqs[at] = Some(seq);
        self.lens[at] = len.min(FRAME);
        self.next = Some(after(seq));
        // WINDOW is at least 1 for any cache that can hold a reply; max(1) keeps a
        // zero-window cache from dividing by zero (it then keeps nothing useful).
        self.head = (at + 1) % WINDOW.max(1);
    }

    /// The kept reply to `seq`.
    pub fn cached(&self, seq: u32) -> Option<&[u8]> {
        let at = self.position(seq)?;
        self.replies.get(at)?.get(..*self.lens.get(at)?)
    }

    /// The slot holding `seq`'s reply. A linear look: `WINDOW` is a handful, and a slot
    /// found by arithmetic on `seq` breaks where the numbering skips 0.
    fn position(&self, seq: u32) -> Option<usize> {
        self.seqs.iter().position(|kept| *kept == Some(seq))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ran(cache: &mut ReplyCache<'_, 4, 3>, seq: u32) {
        cache.slot(seq)[0] = seq as u8;
        cache.keep(seq, 1);
    }

    #[test]
    fn in_order_runs_duplicates_repeat_gaps_drop() {
        let mut storage = [[0; 4]; 3];
        let mut cache = ReplyCache::new(&mut storage);
        assert_eq!(
            cache.verdict(5, false),
            Verdict::Run,
            "the first number starts it"
        );
        ran(&mut cache, 5);
        ran(&mut cache, 6);
        ran(&mut cache, 7);
        assert_eq!(cache.verdict(8, false), Verdict::Run);
        for seq in [5, 6, 7] {
            assert_eq!(cache.verdict(seq, false), Verdict::Repeat);
            assert_eq!(cache.cached(seq), Some(&[seq as u8][..]));
        }
        assert_eq!(cache.verdict(9, false), Verdict::Drop, "a gap: 8 was lost");
        assert_eq!(
            cache.verdict(4, false),
            Verdict::Drop,
            "older than the window"
        );
        assert_eq!(cache.verdict(4, true), Verdict::Run, "a hello always runs");
    }

    /// A duplicate whose slot was reused by a later request must not get that request's
    /// reply.
    #[test]
    fn a_reused_slot_is_not_a_reply_to_an_older_number() {
        let mut storage = [[0; 4]; 3];
        let mut cache = ReplyCache::new(&mut storage);
        for seq in 1..=4 {
            ran(&mut cache, seq);
        }
        // 1 and 4 share a slot; 1 is outside the window anyway.
        assert_eq!(cache.verdict(1, false), Verdict::Drop);
        assert_eq!(cache.cached(1), None);
        assert_eq!(cache.cached(4), Some(&[4][..]));
    }

    #[test]
    fn numbering_wraps_past_the_largest_number_skipping_zero() {
        let mut storage = [[0; 4]; 3];
        let mut cache = ReplyCache::new(&mut storage);
        ran(&mut cache, u32::MAX - 1);
        ran(&mut cache, u32::MAX);
        assert_eq!(cache.verdict(1, false), Verdict::Run);
        ran(&mut cache, 1);
        assert_eq!(cache.verdict(u32::MAX, false), Verdict::Repeat);
        assert_eq!(cache.verdict(u32::MAX - 1, false), Verdict::Repeat);
        assert_eq!(cache.verdict(2, false), Verdict::Run);
    }

    /// Runs `count` requests numbered on from `first` as the host numbers them, each reply
    /// holding its number, in a cache of `W` slots.
    fn run_from<const W: usize>(cache: &mut ReplyCache<'_, 4, W>, first: u32, count: usize) {
        let mut seq = first;
        for _ in 0..count {
            assert_eq!(cache.verdict(seq, false), Verdict::Run, "{seq} is next");
            cache.slot(seq).copy_from_slice(&seq.to_le_bytes());
            cache.keep(seq, 4);
            seq = after(seq);
        }
    }

    /// Catches the wrap bug of slots chosen by `seq % WINDOW`: with 8 slots (the firmware's
    /// window), request 1 overwrote the reply of `u32::MAX - 6`, still one of the last 8, so
    /// its retry was dropped (for ever: the host resends it, the device drops it again)
    /// instead of answered from the cache.
    #[test]
    fn every_one_of_the_last_window_repeats_across_the_wrap() {
        let mut storage = [[0; 4]; 8];
        let mut cache = ReplyCache::new(&mut storage);
        run_from(&mut cache, u32::MAX - 6, 8);
        // Ran: MAX-6 ..= MAX, then 1; next is 2.
        assert_eq!(cache.verdict(2, false), Verdict::Run);
        for seq in (u32::MAX - 6..=u32::MAX).chain([1]) {
            assert_eq!(cache.verdict(seq, false), Verdict::Repeat, "{seq}");
            assert_eq!(cache.cached(seq), Some(&seq.to_le_bytes()[..]), "{seq}");
        }
        assert_eq!(cache.verdict(u32::MAX - 7, false), Verdict::Drop, "9 back");
        assert_eq!(cache.verdict(3, false), Verdict::Drop, "after a gap");
    }

    /// A request that replaces its reply (a bulk read whose bytes the link could not
    /// carry) must overwrite its own slot, not push out the oldest reply in the window.
    #[test]
    fn a_replaced_reply_keeps_the_window_whole() {
        let mut storage = [[0; 4]; 3];
        let mut cache = ReplyCache::new(&mut storage);
        run_from(&mut cache, u32::MAX - 1, 3);
        cache.slot(1)[0] = 0xEE;
        cache.keep(1, 1);
        assert_eq!(cache.cached(1), Some(&[0xEE][..]));
        for seq in [u32::MAX - 1, u32::MAX] {
            assert_eq!(cache.verdict(seq, false), Verdict::Repeat, "{seq}");
        }
        assert_eq!(cache.verdict(2, false), Verdict::Run);
    }

    /// Any number a host may start from (those just before the wrap especially).
    fn start() -> impl proptest::strategy::Strategy<Value = u32> {
        use proptest::prelude::*;
        prop_oneof![1..=u32::MAX, (u32::MAX - 40)..=u32::MAX]
    }

    /// The stated rule, checked for a cache of `W` slots after `count` requests from
    /// `first`: the next number runs, each of the `W` before it repeats its own reply, the
    /// `W` before those and the `W` after `next` are dropped.
    fn rule_holds<const W: usize>(first: u32, count: usize) {
        let mut storage = [[0; 4]; W];
        let mut cache = ReplyCache::new(&mut storage);
        run_from(&mut cache, first, count);
        let mut next = first;
        for _ in 0..count {
            next = after(next);
        }
        assert_eq!(cache.verdict(next, false), Verdict::Run);
        // The numbers before `next`, newest first, by walking the whole cycle backwards.
        let before = |seq: u32| if seq == 1 { u32::MAX } else { seq - 1 };
        let mut seq = next;
        for back in 1..=2 * W {
            seq = before(seq);
            let ran = back <= count;
            let expected = if back <= W && ran {
                Verdict::Repeat
            } else {
                Verdict::Drop
            };
            assert_eq!(cache.verdict(seq, false), expected, "{back} back: {seq}");
            if expected == Verdict::Repeat {
                assert_eq!(cache.cached(seq), Some(&seq.to_le_bytes()[..]), "{seq}");
            }
        }
        let mut seq = next;
        for _ in 0..W {
            seq = after(seq);
            assert_eq!(cache.verdict(seq, false), Verdict::Drop, "ahead: {seq}");
        }
    }

    proptest::proptest! {
        /// Catches any window size or starting number for which the verdicts stray from
        /// the rule; before slots were kept in running order, every start within a window
        /// of the wrap failed for 8 and 16 slots (the firmware's and the host's).
        #[test]
        fn the_rule_holds_from_any_start(first in start(), count in 1usize..40) {
            rule_holds::<3>(first, count);
            rule_holds::<8>(first, count);
            rule_holds::<16>(first, count);
        }
    }

    #[test]
    fn a_restart_forgets_everything() {
        let mut storage = [[0; 4]; 3];
        let mut cache = ReplyCache::new(&mut storage);
        ran(&mut cache, 7);
        cache.restart();
        assert_eq!(cache.cached(7), None);
        assert_eq!(cache.verdict(1, false), Verdict::Run);
    }
}
