//! tessera-core's integration tests, in one test binary: each module is one suite (what
//! was one file under `core/tests/`, one binary each), so `cargo test` links the crate into
//! a test once.

mod device_decoders;
mod device_encoders;
mod grouping_laws;
mod no_panic;
mod program_props;
mod wire_golden;
mod wire_props;
