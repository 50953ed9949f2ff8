//! The cross-crate suites, in one test binary: each module is one suite (what was one file
//! under `tests/tests/`, one binary each), so `cargo test` links them once.

mod conformance;
mod splitter;
mod stream_conformance;
mod transfer_roundtrip;
