//! How a thread of this host waits for a message: it looks without sleeping (yielding its
//! core between looks) for up to [`SPIN`], then sleeps until the message comes. Every wait
//! for a device, and every device thread's wait for the host, waits this way; a pool
//! thread with no device to serve stays awake longer (the pool's `ready` module: a training
//! loop's own work between steps outlasts a spin).

use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::thread;
use std::time::{Duration, Instant};

/// How long a thread waiting for a message keeps looking (yielding its core between looks)
/// before it sleeps. Waking a sleeping thread costs tens of microseconds on a small virtual
/// machine, more than a whole request: while traffic flows, both ends stay awake; an idle
/// end sleeps after this long.
///
/// The yield is what makes the spin cheap: a waiting thread hands its core to one that has
/// work (spinning without yielding starved the device threads that work, and sleeping at
/// once ran the default job at a tenth of the speed; the train bench's runs are in the
/// README's history, `git log -p README.md`). The cost that remains is the number of messages a step exchanges,
/// not how each is waited for.
pub const SPIN: Duration = Duration::from_micros(200);

/// The next item on `incoming` within `limit` (`None`: wait as long as it takes): looked for
/// without sleeping for up to `spin`, then waited for asleep.
pub fn receive_spinning<T>(
    incoming: &Receiver<T>,
    limit: Option<Duration>,
    spin: Duration,
) -> Result<T, RecvTimeoutError> {
    let spin = limit.map_or(spin, |limit| limit.min(spin));
    // The clock is read once the first look finds nothing.
    let mut begun = None;
    let start = loop {
        match incoming.try_recv() {
            Ok(item) => return Ok(item),
            Err(TryRecvError::Disconnected) => return Err(RecvTimeoutError::Disconnected),
            Err(TryRecvError::Empty) => {}
        }
        let start = *begun.get_or_insert_with(Instant::now);
        if start.elapsed() >= spin {
            break start;
        }
        thread::yield_now();
    };
    match limit {
        None => incoming.recv().map_err(|_| RecvTimeoutError::Disconnected),
        Some(limit) => incoming.recv_timeout(limit.saturating_sub(start.elapsed())),
    }
}
