//! `tessera layout`: how a variable is grouped, sharded and placed, as a table, JSON or SVG.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::layout::{svg, table, Report, Request, MAX_ELEMENTS, MAX_REPLICAS};
use clap::ValueEnum;
use tessera_core::grouping::{CommGroup, GroupingSpec, RetrievalMode};
use tessera_core::shard::LayoutKind;

use super::parse::{count, parse_stride_size};
use super::Retrieval;

#[derive(clap::Args)]
pub(crate) struct LayoutArgs {
    /// Number of replicas, global across all instances (1–4096).
    #[arg(long, value_parser = count::<1, MAX_REPLICAS>, allow_negative_numbers = true)]
    replicas: usize,
    /// Explicit grouping as STRIDE:SIZE (each 1–4096; STRIDE × SIZE must divide --replicas).
    #[arg(long, value_parser = parse_stride_size, conflicts_with = "comm")]
    grouping: Option<(usize, usize)>,
    /// Comm group: all, none, consecutive:K or orthogonal:K, K dividing --replicas [default: all].
    #[arg(long)]
    comm: Option<CommGroup>,
    /// How weights come back to the host.
    #[arg(long, value_enum, default_value_t = Retrieval::OnePerGroup)]
    retrieval: Retrieval,
    /// The variable's shape on one replica, as D0,D1,... (at most 8 dimensions, each
    /// 0–1073741824, at most 1073741824 elements in all) [default: scalar].
    #[arg(
        long,
        value_delimiter = ',',
        value_parser = count::<0, MAX_ELEMENTS>,
        allow_negative_numbers = true
    )]
    shape: Vec<usize>,
    /// Shard the variable over this many replicas of each group (1–4096, dividing the group size).
    #[arg(long, value_parser = count::<1, MAX_REPLICAS>, allow_negative_numbers = true)]
    shard_domain: Option<usize>,
    /// Shard layout rule [default: balanced].
    #[arg(long, value_enum, requires = "shard_domain")]
    layout: Option<Layout>,
    /// Number of instances (host processes) splitting the replicas evenly (1–4096, dividing --replicas).
    #[arg(
        long,
        default_value_t = 1,
        value_parser = count::<1, MAX_REPLICAS>,
        allow_negative_numbers = true
    )]
    instances: usize,
    /// Which instance's replicas to place (0–4095, below --instances).
    #[arg(
        long,
        default_value_t = 0,
        value_parser = count::<0, { MAX_REPLICAS - 1 }>,
        allow_negative_numbers = true
    )]
    instance: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Also draw the layout as an SVG picture into FILE (at most 256 replicas are drawn).
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Layout {
    Balanced,
    PaddedTail,
}

pub(crate) fn run(args: LayoutArgs) -> ExitCode {
    let spec = match args.grouping {
        Some((stride, group_size)) => GroupingSpec::Strided { stride, group_size },
        None => GroupingSpec::Comm(args.comm.unwrap_or(CommGroup::All)),
    };
    let retrieval = match args.retrieval {
        Retrieval::OnePerGroup => RetrievalMode::OnePerGroup,
        Retrieval::AllReplicas => RetrievalMode::AllReplicas,
    };
    let kind = match args.layout {
        Some(Layout::PaddedTail) => LayoutKind::PaddedTail,
        _ => LayoutKind::Balanced,
    };
    let request = Request {
        replicas: args.replicas,
        spec,
        retrieval,
        shape: args.shape,
        shard: args.shard_domain.map(|domain| (domain, kind)),
        instances: args.instances,
        instance: args.instance,
    };
    let report = match Report::build(&request) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(path) = &args.svg {
        if let Err(e) = std::fs::write(path, svg::render(&report)) {
            eprintln!("error: cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    super::print_report(&report, args.json, table::render)
}
