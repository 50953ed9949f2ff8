//! tessera-firmware-sim's integration tests, in one test binary: each module is one suite
//! (what was one file under `firmware-sim/tests/`, one binary each), so `cargo test` links
//! the crate into a test once.

mod support;

mod device_props;
mod errors;
mod functions;
mod lanes;
mod link;
mod passes;
