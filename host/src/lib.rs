//! tessera-host: the std runtime users program against, and the `tessera` command.
//!
//! - [`layout`]: inspect a variable's grouping and shard layout before running anything
//!   (`tessera layout`).
//! - [`transport`]: channels to devices in every placement, with deadlines and retries, and
//!   the hub that runs training steps across them.
#![forbid(unsafe_code)]

pub mod layout;
pub mod transport;
