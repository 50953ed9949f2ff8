//! Waiting for another process on a core that other processes want.
//!
//! A host and its device processes hand each other the work of a step message by message:
//! each side waits for the other's next message, looking for it and yielding its core
//! between looks for up to a spin (a sleeping process takes tens of microseconds to wake
//! on an idle virtual machine), then sleeping until the other side wakes it. A yield lets
//! any other runnable task on the core run first, for the whole of its time slice
//! (milliseconds). With every core busy with other work, each hand-off of a step then waited
//! a time slice, and the default job in child processes ran 20–100× slower than alone; a
//! sleeping waiter, woken by the other side, runs at once (the scheduler favours a task
//! that slept over one that has used its slice).
//!
//! # Rules
//!
//! - A waiter on another process yields its core between looks ([`yield_core`]) while the
//!   core is free: a yield that comes back within [`LATE`] gave nobody a time slice, and the waiter
//!   looks again.
//! - A yield that comes back after `LATE` or later gave the core to another task for a time
//!   slice: the core is *contended*. The waiter stops looking and sleeps until it is woken,
//!   and every wait of the same thread sleeps at once, without a yield, for [`HOLD`] after
//!   it; the first yield after that finds out whether the core is still contended.
//! - Only waits on another process follow these rules. Among a process's own device
//!   threads any server serves any ready device, so a server held behind another task's
//!   time slice delays only itself, and a yield gives its turn to the thread with work.
//!
//! Measured (`tessera train --placement process`, default job, 2-core VM, 2026-12-03,
//! alternated pairs against the waits before these rules): beside two busy loops, 12–63 k
//! samples/s before, 0.56–1.56 M after (median of six pairs 36×); alone 1.00× (eight
//! pairs) and beside one busy loop 0.99× (six pairs): within the runs' noise.

use std::cell::Cell;
use std::thread;
use std::time::{Duration, Instant};

/// A yield that takes this long gave the core to another task's time slice, not back at
/// once: a slice is 0.75 ms or more on Linux, a yield to nobody a microsecond, and a
/// virtual CPU stolen by its host for a moment (tens to hundreds of microseconds on the
/// VM measured) is not yet a contended core.
pub(super) const LATE: Duration = Duration::from_micros(500);

/// How long a thread's waits sleep at once after a late yield. A probe of the core costs a
/// late yield while it is still contended, so once every `HOLD` at most.
pub(super) const HOLD: Duration = Duration::from_millis(20);

/// What a waiter does after a look that found nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// The core was yielded and came back at once: look again.
    LookAgain,
    /// The core is contended: sleep until woken.
    Sleep,
}

std::thread_local! {
    /// Until when this thread's core counts as contended.
    static CONTENDED_UNTIL: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Yields the calling thread's core once, unless the core counts as contended, and says
/// what the waiter does next (module rules).
pub(super) fn yield_core() -> Verdict {
    let until = CONTENDED_UNTIL.get();
    let before = Instant::now();
    if held(until, before) {
        return Verdict::Sleep;
    }
    thread::yield_now();
    let after = Instant::now();
    let (verdict, until) = judge(before, after);
    if until.is_some() {
        CONTENDED_UNTIL.set(until);
    }
    verdict
}

/// True while a core found contended until `until` still counts as such at `now`.
fn held(until: Option<Instant>, now: Instant) -> bool {
    until.is_some_and(|until| now < until)
}

/// The verdict on a yield made at `before` that came back at `after`, and, when it came
/// back late, until when the core counts as contended.
fn judge(before: Instant, after: Instant) -> (Verdict, Option<Instant>) {
    if after.saturating_duration_since(before) < LATE {
        (Verdict::LookAgain, None)
    } else {
        (Verdict::Sleep, Some(after + HOLD))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

    #[test]
    fn a_prompt_yield_looks_again_and_a_late_one_holds_the_core() {
        let t = Instant::now();
        let prompt = t + LATE - Duration::from_micros(1);
        assert_eq!(judge(t, prompt), (Verdict::LookAgain, None));
        let late = t + LATE;
        assert_eq!(judge(t, late), (Verdict::Sleep, Some(late + HOLD)));
    }

    #[test]
    fn the_core_counts_as_contended_for_the_hold_and_no_longer() {
        let t = Instant::now();
        assert!(!held(None, t));
        assert!(held(Some(t + HOLD), t));
        assert!(held(Some(t + HOLD), t + HOLD - Duration::from_nanos(1)));
        assert!(!held(Some(t + HOLD), t + HOLD));
    }

    /// Catches a waiter that goes on yielding to a busy task on its own core, losing a time
    /// slice at every look (the child-process placement beside busy cores ran 30× slower):
    /// this thread and a busy thread share one core, and within a few yields the core must
    /// be found contended, and this thread's next waits must sleep at once.
    #[test]
    fn a_waiter_beside_a_busy_task_on_its_core_sleeps() {
        let first = (0..CpuSet::MAX_CPU)
            .find(|&cpu| sched_getaffinity(None).is_ok_and(|set| set.is_set(cpu)))
            .expect("this thread may run on some CPU");
        let mut one = CpuSet::new();
        one.set(first);
        let busy = Arc::new(AtomicBool::new(true));
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
        let mut verdict = Verdict::LookAgain;
        while verdict == Verdict::LookAgain && Instant::now() < deadline {
            verdict = yield_core();
        }
        let held_after = yield_core();
        busy.store(false, Ordering::Relaxed);
        hog.join().unwrap();
        assert_eq!(verdict, Verdict::Sleep, "no yield came back late in 10 s");
        assert_eq!(
            held_after,
            Verdict::Sleep,
            "the next wait yielded again at once"
        );
    }
}
