//! The pool's ready queue: devices with mail, in the order they were readied, which device a
//! server takes next, and how a pool thread waits for one.
//!
//! # Rules
//!
//! - **Readied once**: a device goes on the queue only if it is not on it already (its
//!   `queued` flag), and the flag's acquire-release swap makes the mail sent before it
//!   visible to the server that clears it.
//! - **Its own device first, within a bound** ([`Ready::take`]): a server takes the device
//!   it served last when that one is ready and the first in line has been passed over fewer
//!   than [`PASSES`] times; else the first in line. Never a wait for its own device.
//! - **Look, then sleep, then look again**: a pool thread with nothing to take looks again,
//!   yielding between looks, for as long as its pool stays awake ([`AWAKE`] where the host
//!   serves, a channel's spin in a session), then sleeps on the bell; woken, it looks for as
//!   long again before it sleeps again.
//! - **A ring per sleeper**: a device readied while a thread sleeps rings the bell, unless
//!   every sleeper is already being woken (a ring costs a system call). The last mailbox to
//!   go closes the queue and wakes every thread, which then ends.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::PoisonError;
use std::thread;
use std::time::{Duration, Instant};

use super::{lock, Pool};

/// Times the device first in line may be passed over for a server's own before it is
/// taken: a device readied again and again while its server serves it cannot keep the
/// others waiting (more devices than servers) for longer than that.
const PASSES: usize = 2;

/// How long a training runtime's pool thread with nothing to serve stays awake, looking
/// for a ready device and yielding its core between looks, before it sleeps. Ten times a
/// channel's [`SPIN`](crate::transport::spin::SPIN): a training loop does work of its own
/// on the host between steps (the next batch, the checks: a few hundred microseconds in
/// `tessera train`), on the host's thread alone, and a pool thread asleep by the next step
/// is woken by its first message — a system call on the host's critical path, then a
/// wake-up the step's first legs wait for, each costing more on a virtual machine than a
/// short leg.
pub(super) const AWAKE: Duration = Duration::from_millis(2);

/// Devices with mail, in the order they were readied.
pub(super) struct Ready {
    pub(super) devices: VecDeque<usize>,
    /// Times the device first in line was passed over (`take`).
    passed: usize,
    /// Device `i` was found being served while it was ready: its server readies it again
    /// when it lets go (the pool's rules).
    pub(super) again: Vec<bool>,
    /// Threads asleep on the bell, and how many of them a ring is already waking: a device
    /// readied while every sleeper is being woken rings nobody (a ring costs a system
    /// call, and a woken thread takes a while to take its lock back).
    pub(super) sleepers: usize,
    pub(super) waking: usize,
    /// Every mailbox is gone: the threads end.
    closed: bool,
}

impl Ready {
    /// The ready queue of an open pool of `n` devices, none ready.
    pub(super) fn new(n: usize) -> Self {
        Self {
            devices: VecDeque::new(),
            passed: 0,
            again: vec![false; n],
            sleepers: 0,
            waking: 0,
            closed: false,
        }
    }

    /// The next device to serve: `last`, the device its server served before, if it is
    /// ready (its memory is still in that server's core's caches) and the first in line has
    /// not been passed over [`PASSES`] times already; else the first readied.
    pub(super) fn take(&mut self, last: Option<usize>) -> Option<usize> {
        let mine = last.and_then(|d| self.devices.iter().position(|&r| r == d));
        match mine {
            Some(at) if at > 0 && self.passed < PASSES => {
                self.passed += 1;
                self.devices.remove(at)
            }
            _ => {
                self.passed = 0;
                self.devices.pop_front()
            }
        }
    }
}

impl Pool {
    /// Puts device `device` on the ready queue unless it is there already.
    pub(super) fn ready(&self, device: usize) {
        let Some(member) = self.members.get(device) else {
            return;
        };
        // Acquire-release: whoever clears the flag next sees the mail sent before this.
        if member.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut ready = lock(&self.ready);
        ready.devices.push_back(device);
        self.ring(&mut ready);
    }

    /// Wakes a sleeping thread for a device just put on the ready queue, unless every
    /// sleeper is being woken already.
    pub(super) fn ring(&self, ready: &mut Ready) {
        if ready.sleepers > ready.waking {
            ready.waking += 1;
            self.bell.notify_one();
        }
    }

    /// One mailbox fewer; the last closes the ready queue.
    pub(super) fn mailbox_gone(&self) {
        if self.mailboxes.fetch_sub(1, Ordering::AcqRel) == 1 {
            lock(&self.ready).closed = true;
            self.bell.notify_all();
        }
    }

    /// For a pool thread: the next ready device, looked for without sleeping while the pool
    /// stays awake (yielding between looks, as every device wait does), then asleep on the
    /// bell, and for as long again each time it wakes; `None` once the pool has closed.
    pub(super) fn next(&self, last: Option<usize>) -> Option<usize> {
        // The clock is read once a look finds nothing.
        let mut begun = None;
        let mut ready = lock(&self.ready);
        loop {
            if let Some(device) = ready.take(last) {
                return Some(device);
            }
            if ready.closed {
                return None;
            }
            if begun.get_or_insert_with(Instant::now).elapsed() < self.awake {
                drop(ready);
                thread::yield_now();
                ready = lock(&self.ready);
                continue;
            }
            // Woken (rung, or spuriously), a thread counts as awake again and looks, for a
            // whole spin again (module rules: the device it was rung for may be gone).
            ready.sleepers += 1;
            ready = self
                .bell
                .wait(ready)
                .unwrap_or_else(PoisonError::into_inner);
            ready.sleepers -= 1;
            ready.waking = ready.waking.saturating_sub(1);
            begun = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Ready;

    /// An open pool's line of `devices` readied in that order, of `n` devices.
    fn readied(devices: &[usize], n: usize) -> Ready {
        Ready {
            devices: devices.iter().copied().collect(),
            ..Ready::new(n)
        }
    }

    /// Catches a server that takes the first device readied while the one it served last
    /// is ready too (a device moved between cores' caches at every leg), and one that waits
    /// for its own device while another is ready.
    #[test]
    fn a_server_takes_its_last_device_first_and_else_the_first_readied() {
        let mut ready = readied(&[4, 1, 7], 8);
        assert_eq!(ready.take(Some(1)), Some(1));
        assert_eq!(
            ready.take(Some(1)),
            Some(4),
            "its own not ready: the first readied"
        );
        assert_eq!(ready.take(None), Some(7));
        assert_eq!(ready.take(Some(7)), None);
    }

    /// Catches a preference without a bound: a server whose device is readied again each
    /// time it lets go would pass over the first in line forever; it is taken after two.
    #[test]
    fn the_first_in_line_is_passed_over_at_most_twice() {
        let mut ready = readied(&[3], 4);
        for round in 0..3 {
            ready.devices.push_back(1);
            let taken = ready.take(Some(1));
            assert_eq!(taken, Some(if round < 2 { 1 } else { 3 }), "take {round}");
        }
        assert_eq!(ready.take(Some(1)), Some(1));
        assert_eq!(ready.take(Some(1)), None);
    }
}
