//! `kind`: the name of the Rust variant a tessera exception stands for.
//!
//! # Rules
//!
//! - Every Rust error the bindings raise has a function here that matches each of its
//!   variants to a string: the variant's name as written in Rust (`SessionError::Workers`
//!   is `"Workers"`), the string `kind` has always been. Python programs compare these
//!   strings: a variant renamed in Rust keeps its old string here.
//! - The matches are exhaustive, with no wildcard arm: a variant added in Rust does not
//!   compile until it has a kind. None of these enums is `#[non_exhaustive]` (all live in
//!   this workspace), so none needs a fallback.
//! - The kind is the variant of the error raised, not of an error it wraps:
//!   `SessionError::Transport` is `"Transport"` and `RuntimeError::StepFailed` is
//!   `"StepFailed"` whatever their cause (a `TransportError`'s own variants are never a
//!   kind). The one exception is a load ([`load`]): a load that failed in the session is
//!   the session error's kind, as its workers are the session error's.

use tessera_core::program::{CapacityError, ProgramError};
use tessera_host::checkpoint::CheckpointError;
use tessera_host::executable::ExecutableError;
use tessera_host::runtime::RuntimeError;
use tessera_host::session::loader::LoadError;
use tessera_host::session::SessionError;
use tessera_host::trace::TraceError;

/// A session error's kind.
pub(crate) fn session(error: &SessionError) -> &'static str {
    match error {
        SessionError::Transport(_) => "Transport",
        SessionError::HostMemory(_) => "HostMemory",
        SessionError::Workers { .. } => "Workers",
        SessionError::Groups { .. } => "Groups",
        SessionError::UnknownFunction { .. } => "UnknownFunction",
        SessionError::Worker { .. } => "Worker",
        SessionError::Failures(_) => "Failures",
        SessionError::ShutDown => "ShutDown",
        SessionError::NoWorker { .. } => "NoWorker",
        SessionError::RegistersExhausted { .. } => "RegistersExhausted",
        SessionError::ForeignRegister { .. } => "ForeignRegister",
        SessionError::ForeignFunction { .. } => "ForeignFunction",
        SessionError::NoValue { .. } => "NoValue",
        SessionError::NotAnArray { .. } => "NotAnArray",
        SessionError::Count { .. } => "Count",
        SessionError::Elements { .. } => "Elements",
        SessionError::DtypeMismatch { .. } => "DtypeMismatch",
        SessionError::Dtype { .. } => "Dtype",
        SessionError::Indivisible { .. } => "Indivisible",
        SessionError::NoNextGroup { .. } => "NoNextGroup",
        SessionError::Overflow { .. } => "Overflow",
        SessionError::Array(_) => "Array",
        SessionError::Description(_) => "Description",
        SessionError::OutsideMemory { .. } => "OutsideMemory",
        SessionError::HostMismatch { .. } => "HostMismatch",
        SessionError::Ranks { .. } => "Ranks",
        SessionError::Instances(_) => "Instances",
        SessionError::Group { .. } => "Group",
        SessionError::InlineTooLarge { .. } => "InlineTooLarge",
    }
}

/// A load error's kind: the variant's, but for a load that failed in the session
/// (`Worker`, `Session`), whose kind is the session error's under it.
pub(crate) fn load(error: &LoadError) -> &'static str {
    match error {
        LoadError::Read { .. } => "Read",
        LoadError::Input(_) => "Input",
        LoadError::Claim { .. } => "Claim",
        LoadError::Fill { .. } => "Fill",
        LoadError::Format { .. } => "Format",
        LoadError::Dtype { .. } => "Dtype",
        LoadError::UnknownTensor { .. } => "UnknownTensor",
        LoadError::NoDim { .. } => "NoDim",
        LoadError::Indivisible { .. } => "Indivisible",
        LoadError::Shape { .. } => "Shape",
        LoadError::FileCount { .. } => "FileCount",
        LoadError::ShardMissing { .. } => "ShardMissing",
        LoadError::ShardMismatch { .. } => "ShardMismatch",
        // Failed in the session (writing a tensor on a worker, or the session refusing the
        // load): the session error's kind, as the exception's workers are its workers.
        LoadError::Worker { source, .. } => session(source),
        LoadError::Session { source, .. } => session(source),
    }
}

/// A device runtime error's kind.
pub(crate) fn runtime(error: &RuntimeError) -> &'static str {
    match error {
        RuntimeError::Transport(_) => "Transport",
        RuntimeError::Program(_) => "Program",
        RuntimeError::Replicas { .. } => "Replicas",
        RuntimeError::Window { .. } => "Window",
        RuntimeError::Channels { .. } => "Channels",
        RuntimeError::UnknownTensor { .. } => "UnknownTensor",
        RuntimeError::MissingStream { .. } => "MissingStream",
        RuntimeError::Elements { .. } => "Elements",
        RuntimeError::Shape { .. } => "Shape",
        RuntimeError::Type { .. } => "Type",
        RuntimeError::OutOfRange { .. } => "OutOfRange",
        RuntimeError::Label { .. } => "Label",
        RuntimeError::Bytes { .. } => "Bytes",
        RuntimeError::Layout { .. } => "Layout",
        RuntimeError::SplitterSetup(_) => "SplitterSetup",
        RuntimeError::Splitter(_) => "Splitter",
        RuntimeError::Limits { .. } => "Limits",
        RuntimeError::NoOptimizerState => "NoOptimizerState",
        RuntimeError::RngState { .. } => "RngState",
        RuntimeError::StepFailed { .. } => "StepFailed",
        RuntimeError::DeviceLost { .. } => "DeviceLost",
        RuntimeError::Instance(_) => "Instance",
        RuntimeError::ReductionOps { .. } => "ReductionOps",
        RuntimeError::ReductionElements { .. } => "ReductionElements",
        RuntimeError::ReductionLength { .. } => "ReductionLength",
        RuntimeError::ReductionRound { .. } => "ReductionRound",
        RuntimeError::ReductionOp { .. } => "ReductionOp",
        RuntimeError::NotInRound { .. } => "NotInRound",
        RuntimeError::ReductionSkipped { .. } => "ReductionSkipped",
        RuntimeError::ReductionGroup { .. } => "ReductionGroup",
        RuntimeError::MixedLanes { .. } => "MixedLanes",
        RuntimeError::LanesApart { .. } => "LanesApart",
        RuntimeError::BadValue { .. } => "BadValue",
        RuntimeError::HostMemory { .. } => "HostMemory",
        RuntimeError::Diverged { .. } => "Diverged",
    }
}

/// A checkpoint error's kind.
pub(crate) fn checkpoint(error: &CheckpointError) -> &'static str {
    match error {
        CheckpointError::Input(_) => "Input",
        CheckpointError::Fingerprint(_) => "Fingerprint",
        CheckpointError::Save(_) => "Save",
        CheckpointError::Claim { .. } => "Claim",
        CheckpointError::Dimension { .. } => "Dimension",
        CheckpointError::Impossible { .. } => "Impossible",
        CheckpointError::Format(_) => "Format",
        CheckpointError::NotACheckpoint { .. } => "NotACheckpoint",
        CheckpointError::Version { .. } => "Version",
        CheckpointError::Checksum { .. } => "Checksum",
        CheckpointError::Program { .. } => "Program",
        CheckpointError::Unexpected { .. } => "Unexpected",
        CheckpointError::Missing { .. } => "Missing",
        CheckpointError::Shape { .. } => "Shape",
        CheckpointError::BadValue { .. } => "BadValue",
        CheckpointError::RngState { .. } => "RngState",
        CheckpointError::Runtime(_) => "Runtime",
    }
}

/// A saved executable's error's kind.
pub(crate) fn executable(error: &ExecutableError) -> &'static str {
    match error {
        ExecutableError::Input(_) => "Input",
        ExecutableError::Save(_) => "Save",
        ExecutableError::NotAnExecutable => "NotAnExecutable",
        ExecutableError::Version { .. } => "Version",
        ExecutableError::Checksum { .. } => "Checksum",
        ExecutableError::Body(_) => "Body",
    }
}

/// A trace error's kind.
pub(crate) fn trace(error: &TraceError) -> &'static str {
    match error {
        TraceError::AlreadyTracing => "AlreadyTracing",
        TraceError::File { .. } => "File",
    }
}

/// A program error's kind.
pub(crate) fn program(error: &ProgramError) -> &'static str {
    match error {
        ProgramError::Variable { .. } => "Variable",
        ProgramError::Stream { .. } => "Stream",
        ProgramError::Layer { .. } => "Layer",
        ProgramError::Anchor { .. } => "Anchor",
        ProgramError::DataFlow(_) => "DataFlow",
        ProgramError::Optimizer => "Optimizer",
        ProgramError::NoSuchVariable { .. } => "NoSuchVariable",
        ProgramError::NoLoss => "NoLoss",
        ProgramError::NoReplicas => "NoReplicas",
        ProgramError::MicroBatch { .. } => "MicroBatch",
        ProgramError::NoInput { .. } => "NoInput",
    }
}

/// A program capacity error's kind (raised as a `ProgramError` too).
pub(crate) fn capacity(error: &CapacityError) -> &'static str {
    match error {
        CapacityError::TooMany { .. } => "TooMany",
        CapacityError::NameTooLong => "NameTooLong",
        CapacityError::RankTooLarge => "RankTooLarge",
    }
}
