//! Where a device's time goes, for a host that traces its run: each phase of a step —
//! `load` (wholes and stream items into the scratch block), `forward` (the layers and the
//! loss), `backward` (gradients zeroed, computed and scaled), `anchors`, `exchange` (a
//! contribution out, a combination in) and `update` — is a `tracing` span at the `TRACE`
//! level, target `tessera::device`, entered for the phase's length.
//!
//! Only the `std` build marks them (a device in a host's thread or child process); the
//! firmware has none. On a host nothing is built unless a subscriber wants the span.

/// Enters phase `$name` until the returned guard drops: `let _p = phase!("forward");`.
#[cfg(feature = "std")]
macro_rules! phase {
    ($name:literal) => {
        ::tracing::trace_span!(target: "tessera::device", $name).entered()
    };
}

/// Nothing on the firmware (module doc).
#[cfg(not(feature = "std"))]
macro_rules! phase {
    ($name:literal) => {
        ()
    };
}

pub(crate) use phase;
