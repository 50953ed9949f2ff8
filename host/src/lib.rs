//! tessera-host: the std runtime users program against, and the `tessera` command.
//!
//! - [`layout`]: inspect a variable's grouping and shard layout before running anything
//!   (`tessera layout`).
#![forbid(unsafe_code)]

pub mod layout;
