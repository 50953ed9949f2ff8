//! Faults on purpose, for testing recovery: [`FaultInjector`] damages the bytes it
//! forwards (bit flips, dropped bytes, truncated writes, each at a seeded per-byte rate);
//! [`Delayed`] delivers them late, as a slow or stalled device link would. (A device that
//! fails a training step on purpose is the runtime's `StepFault`.)

use std::io::{self, Write};
use std::sync::mpsc::{self, Sender};
use std::thread;
use std::time::{Duration, Instant};

/// How often each kind of damage strikes, per byte.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultConfig {
    /// Seed of the damage pattern.
    pub seed: u64,
    /// Probability that a byte has one bit flipped.
    pub flip_rate: f64,
    /// Probability that a byte is dropped.
    pub drop_rate: f64,
    /// Probability that the rest of a write is dropped from this byte on.
    pub truncate_rate: f64,
    /// How late every host → device write arrives (zero: at once).
    pub latency: Duration,
}

impl FaultConfig {
    /// No faults at all.
    pub const NONE: Self = Self {
        seed: 0,
        flip_rate: 0.0,
        drop_rate: 0.0,
        truncate_rate: 0.0,
        latency: Duration::ZERO,
    };
}

/// Counts of damage done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Bytes with a flipped bit.
    pub flipped: u64,
    /// Bytes dropped.
    pub dropped: u64,
    /// Writes cut short.
    pub truncated: u64,
}

/// Forwards writes to `inner`, damaged as `config` says.
#[derive(Debug)]
pub struct FaultInjector<W> {
    inner: W,
    config: FaultConfig,
    state: u64,
    /// What it has done so far.
    pub counts: FaultCounts,
}

impl<W: Write> FaultInjector<W> {
    /// Wraps `inner`.
    pub fn new(inner: W, config: FaultConfig) -> Self {
        Self {
            inner,
            config,
            state: config.seed,
            counts: FaultCounts::default(),
        }
    }

    fn chance(&mut self) -> f64 {
        // SplitMix64: cheap, seeded, good enough for choosing faults.
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) as f64 / u64::MAX as f64
    }
}

impl<W: Write> Write for FaultInjector<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut out = Vec::with_capacity(buf.len());
        for &byte in buf {
            if self.chance() < self.config.truncate_rate {
                self.counts.truncated += 1;
                break;
            }
            if self.chance() < self.config.drop_rate {
                self.counts.dropped += 1;
                continue;
            }
            if self.chance() < self.config.flip_rate {
                self.counts.flipped += 1;
                let bit = (self.chance() * 8.0) as u32 % 8;
                out.push(byte ^ (1 << bit));
                continue;
            }
            out.push(byte);
        }
        self.inner.write_all(&out)?;
        // The caller's bytes all count as written, damaged or not: the link lost them.
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Forwards writes to a writer on a thread of its own, each `latency` after it was made,
/// in order. A flush returns at once: the bytes are in flight, as on a slow link.
#[derive(Debug)]
pub struct Delayed {
    tx: Sender<(Instant, Vec<u8>)>,
    latency: Duration,
}

impl Delayed {
    /// Wraps `inner`; the thread ends when the `Delayed` is dropped or `inner` fails.
    pub fn new<W: Write + Send + 'static>(mut inner: W, latency: Duration) -> Self {
        let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
        thread::spawn(move || {
            for (due, bytes) in rx {
                thread::sleep(due.saturating_duration_since(Instant::now()));
                if inner
                    .write_all(&bytes)
                    .and_then(|()| inner.flush())
                    .is_err()
                {
                    return;
                }
            }
        });
        Self { tx, latency }
    }
}

impl Write for Delayed {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let due = Instant::now() + self.latency;
        self.tx
            .send((due, buf.to_vec()))
            .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
