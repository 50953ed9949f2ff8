//! Waiting for another process on a core that other processes want.
//!
//! A training runtime's host and its device processes hand each other the work of a step
//! message by message, on message rings: each side waits for the other's next message,
//! looking for it and yielding its core between looks for up to a spin (a sleeping process
//! takes tens of microseconds to wake on an idle virtual machine), then sleeping until the
//! other side wakes it. A yield lets any other runnable task on the core run first, for the
//! whole of its time slice (milliseconds). With every core busy with other work, each
//! hand-off of a step then waited a time slice, and the default job in child processes ran
//! 35–180× slower than alone; a sleeping waiter, woken by the other side, runs sooner.
//!
//! # Rules
//!
//! - A waiter that found nothing yields its core ([`yield_core`]) and looks again, while
//!   its core is free ([`may_yield`]): a yield that comes back within [`LATE`] gave nobody
//!   a time slice.
//! - A yield that takes `LATE` or more gave the core to another task for a time slice. A
//!   second such yield within [`AGAIN`] of the last makes the core *contended*: the waiter
//!   looks once more, then sleeps until it is woken, and every wait of the same thread
//!   sleeps after its first look, without a yield, for [`HOLD`] after that yield; the
//!   first yield after the hold finds out whether the core is still contended.
//! - Only the waits between a training runtime's host and its device processes follow these
//!   rules. Among a process's own device threads any server serves any ready device, so a
//!   server held behind another task's time slice delays only itself (the same rule there
//!   slowed them beside busy loops). A session's process per worker shares the cores with
//!   the other workers, whose yields hand a core back at once: there a sleeping worker paid
//!   a wake-up at every call (a call and sync beside busy loops took up to twice as long
//!   with the rule). The MPI post office, which cannot sleep on an incoming message, keeps
//!   yielding.
//!
//! With these rules the default job in child processes beside two busy loops ran about 20×
//! faster (38 k against 753 k samples/s), and alone as fast as before; the runs, and what
//! holding the core on the first late yield cost, are in the README's history
//! (`git log -p README.md`).

use std::cell::Cell;
use std::thread;
use std::time::{Duration, Instant};

/// A yield that takes this long gave the core to another task's time slice, not back at
/// once: a slice is 0.75 ms or more on Linux, a yield to nobody a microsecond, and a
/// virtual CPU stolen by its host for a moment (tens to hundreds of microseconds on the
/// VM measured) is not yet a contended core.
const LATE: Duration = Duration::from_micros(500);

/// How long a thread's waits sleep at once once its core is found contended. A probe of
/// the core costs a late yield while it is still contended, so once every `HOLD` at most.
const HOLD: Duration = Duration::from_millis(20);

/// A late yield marks the core contended only when the thread's last late yield came
/// within this long before it. One late yield alone is no evidence: the host's core hosts
/// its device process for the moment it starts, and a training run's checks between steps
/// keep a core busy for a slice now and then; a task that keeps the core busy makes every
/// probe late.
const AGAIN: Duration = Duration::from_millis(50);

std::thread_local! {
    /// When this thread's last yield came back late.
    static LAST_LATE: Cell<Option<Instant>> = const { Cell::new(None) };
    /// Until when this thread's core counts as contended.
    static CONTENDED_UNTIL: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// True unless the calling thread's core counts as contended (module rules): a waiter that
/// found nothing may yield and look again; otherwise it sleeps.
pub(super) fn may_yield() -> bool {
    !held(CONTENDED_UNTIL.get(), Instant::now())
}

/// Yields the calling thread's core once; a yield that comes back late, within [`AGAIN`]
/// of the last late one, holds the core contended for [`HOLD`] (module rules).
pub(super) fn yield_core() {
    let before = Instant::now();
    thread::yield_now();
    let after = Instant::now();
    if after.saturating_duration_since(before) >= LATE {
        if let Some(until) = hold_after(LAST_LATE.replace(Some(after)), after) {
            CONTENDED_UNTIL.set(Some(until));
        }
    }
}

/// True while a core found contended until `until` still counts as such at `now`.
fn held(until: Option<Instant>, now: Instant) -> bool {
    until.is_some_and(|until| now < until)
}

/// For a yield that came back late at `now`, the last one having come back at `last`:
/// until when the core counts as contended, if it does.
fn hold_after(last: Option<Instant>, now: Instant) -> Option<Instant> {
    last.filter(|&last| now.saturating_duration_since(last) <= AGAIN)
        .map(|_| now + HOLD)
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

    /// Catches a rule that holds the core on one late yield (a device process starting on
    /// the host's core put a short training run's every hand-off to sleep: 0.64–0.98× its
    /// speed)
    /// or that never holds it.
    #[test]
    fn a_second_late_yield_soon_after_the_first_holds_the_core() {
        let t = Instant::now();
        assert_eq!(hold_after(None, t), None, "a first late yield");
        assert_eq!(hold_after(Some(t), t + AGAIN), Some(t + AGAIN + HOLD));
        let later = t + AGAIN + Duration::from_micros(1);
        assert_eq!(
            hold_after(Some(t), later),
            None,
            "a late yield long after the last"
        );
    }

    #[test]
    fn the_core_counts_as_contended_for_the_hold_and_no_longer() {
        let t = Instant::now();
        assert!(!held(None, t));
        assert!(held(Some(t + HOLD), t));
        assert!(held(Some(t + HOLD), t + HOLD - Duration::from_nanos(1)));
        assert!(!held(Some(t + HOLD), t + HOLD));
    }

    /// Stops the busy thread however the test ends.
    struct Stop(Arc<AtomicBool>);

    impl Drop for Stop {
        fn drop(&mut self) {
            self.0.store(false, Ordering::Relaxed);
        }
    }

    /// Catches a waiter that goes on yielding to a busy task on its own core, losing a time
    /// slice at every look (the child-process placement beside busy cores ran 35–180×
    /// slower): this thread and a busy thread share one core, and within 10 s of yields
    /// (the busy thread takes the core at one of them and again at a later one) the core
    /// must be found contended, so that this thread's next waits sleep.
    #[test]
    fn a_waiter_beside_a_busy_task_on_its_core_stops_yielding() {
        let allowed = sched_getaffinity(None).expect("this thread's CPUs");
        let cpu = (0..CpuSet::MAX_CPU)
            .find(|&cpu| allowed.is_set(cpu))
            .expect("this thread may run on some CPU");
        let mut one = CpuSet::new();
        one.set(cpu);
        let busy = Arc::new(AtomicBool::new(true));
        let _stop = Stop(Arc::clone(&busy));
        let hog = {
            let busy = Arc::clone(&busy);
            thread::spawn(move || {
                sched_setaffinity(None, &one).expect("the busy thread pinned");
                while busy.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        };
        sched_setaffinity(None, &one).expect("this thread pinned");
        // Each yield either hands the busy thread the core (late) or finds it not yet
        // running here: a late one comes within a few time slices.
        let deadline = Instant::now() + Duration::from_secs(10);
        while may_yield() && Instant::now() < deadline {
            yield_core();
        }
        assert!(!may_yield(), "no yield came back late in 10 s");
        drop(_stop);
        hog.join().unwrap();
    }
}
