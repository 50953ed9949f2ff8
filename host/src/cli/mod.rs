//! The `tessera` command's subcommands, one file each, and what they share.

pub(crate) mod inspect;
pub(crate) mod layout;
pub(crate) mod parse;
pub(crate) mod train;

use clap::ValueEnum;

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Retrieval {
    OnePerGroup,
    AllReplicas,
}
