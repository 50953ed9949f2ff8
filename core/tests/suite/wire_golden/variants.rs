//! Exhaustive matches: each variant's position, so that a new variant fails to compile
//! here.

use super::*;

// ---------------------------------------------------------------------------------------
// Exhaustive matches: a new variant fails to compile here.

/// A request's area (its position in `Request`; a hello is one of its own) and its position
/// in that area's enum (0 for a hello).
pub(super) fn request_variant(request: &Request<'_>) -> (u32, u32) {
    match request {
        Request::Hello { .. } => (0, 0),
        Request::Data(request) => (1, data_request_variant(request)),
        Request::Memory(request) => (2, memory_request_variant(request)),
        Request::Streams(request) => (3, stream_request_variant(request)),
        Request::Program(request) => (4, program_request_variant(request)),
        Request::Kernels(request) => (5, kernel_request_variant(request)),
    }
}

fn data_request_variant(request: &DataRequest<'_>) -> u32 {
    match request {
        DataRequest::Write { .. } => 0,
        DataRequest::Read { .. } => 1,
        DataRequest::WriteBulk { .. } => 2,
        DataRequest::ReadBulk { .. } => 3,
        DataRequest::Locate { .. } => 4,
        DataRequest::Wrote { .. } => 5,
        DataRequest::Took { .. } => 6,
    }
}

fn memory_request_variant(request: &MemoryRequest) -> u32 {
    match request {
        MemoryRequest::AllocSlot { .. } => 0,
        MemoryRequest::RemoteLoad { .. } => 1,
        MemoryRequest::RemoteStore { .. } => 2,
    }
}

fn stream_request_variant(request: &StreamRequest) -> u32 {
    match request {
        StreamRequest::CreateFifo { .. } => 0,
    }
}

fn program_request_variant(request: &ProgramRequest<'_>) -> u32 {
    match request {
        ProgramRequest::SetOptimizer { .. } => 0,
        ProgramRequest::SetSeed { .. } => 1,
        ProgramRequest::GetSeed => 2,
        ProgramRequest::SetRngState { .. } => 3,
        ProgramRequest::GetRngState { .. } => 4,
        ProgramRequest::Prepare { .. } => 5,
        ProgramRequest::RunStep { .. } => 6,
        ProgramRequest::CycleCount { .. } => 7,
        ProgramRequest::ResetStep => 8,
    }
}

fn kernel_request_variant(request: &KernelRequest<'_>) -> u32 {
    match request {
        KernelRequest::SetRegister { .. } => 0,
        KernelRequest::GetRegister { .. } => 1,
        KernelRequest::FreeRegister { .. } => 2,
        KernelRequest::Invoke { .. } => 3,
        KernelRequest::HasFunction { .. } => 4,
        KernelRequest::AllocArray { .. } => 5,
        KernelRequest::DescribeRegister { .. } => 6,
    }
}

pub(super) fn response_variant(response: &Response<'_>) -> u32 {
    match response {
        Response::Hello { .. } => 0,
        Response::Done => 1,
        Response::Data { .. } => 2,
        Response::Seed { .. } => 3,
        Response::RngState { .. } => 4,
        Response::Cycles { .. } => 5,
        Response::Register { .. } => 6,
        Response::Error { .. } => 7,
        Response::Described { .. } => 8,
        Response::Located { .. } => 9,
        Response::Bulk { .. } => 10,
    }
}

pub(super) fn error_variant(code: &ErrorCode) -> u32 {
    match code {
        ErrorCode::Version { .. } => 0,
        ErrorCode::OutOfMemory { .. } => 1,
        ErrorCode::TableFull => 2,
        ErrorCode::UnknownId { .. } => 3,
        ErrorCode::IdInUse { .. } => 4,
        ErrorCode::OutOfBounds { .. } => 5,
        ErrorCode::ItemSize { .. } => 6,
        ErrorCode::FifoFull { .. } => 7,
        ErrorCode::FifoEmpty { .. } => 8,
        ErrorCode::FifoPosition { .. } => 9,
        ErrorCode::Program(_) => 10,
        ErrorCode::NotPrepared => 11,
        ErrorCode::ReplicaOutOfRange { .. } => 12,
        ErrorCode::FifoShape { .. } => 13,
        ErrorCode::Internal { .. } => 14,
        ErrorCode::ReplyTooLarge => 15,
        ErrorCode::UnknownFunction => 16,
        ErrorCode::BadArguments => 17,
        ErrorCode::Malformed => 18,
        ErrorCode::UnexpectedReduced => 19,
        ErrorCode::ReduceTimeout => 20,
        ErrorCode::ReductionTooLarge { .. } => 21,
        ErrorCode::BulkUnavailable => 22,
        ErrorCode::StepAbandoned => 23,
        ErrorCode::NotInstrumented => 24,
        ErrorCode::Lanes { .. } => 25,
        ErrorCode::LanesApart { .. } => 26,
        ErrorCode::NoSuchLane { .. } => 27,
    }
}

pub(super) fn value_variant(value: &Value<'_>) -> u32 {
    match value {
        Value::Int(_) => 0,
        Value::Float(_) => 1,
        Value::Shape(_) => 2,
        Value::Str(_) => 3,
        Value::Array(_) => 4,
    }
}

pub(super) fn value_kind_variant(kind: ValueKind) -> u32 {
    match kind {
        ValueKind::Int => 0,
        ValueKind::Float => 1,
        ValueKind::Shape => 2,
        ValueKind::Str => 3,
        ValueKind::Array => 4,
    }
}

pub(super) fn arg_variant(arg: &Arg<'_>) -> u32 {
    match arg {
        Arg::Register(_) => 0,
        Arg::Value(_) => 1,
    }
}

pub(super) fn data_type_variant(dtype: DataType) -> u32 {
    match dtype {
        DataType::F16 => 0,
        DataType::BF16 => 1,
        DataType::F32 => 2,
        DataType::F64 => 3,
        DataType::I8 => 4,
        DataType::I16 => 5,
        DataType::I32 => 6,
        DataType::I64 => 7,
        DataType::U8 => 8,
        DataType::U16 => 9,
        DataType::U32 => 10,
        DataType::U64 => 11,
        DataType::Bool => 12,
        DataType::F8E4M3 => 13,
        DataType::F8E5M2 => 14,
    }
}

pub(super) fn kind_variant(kind: RequestKind) -> u32 {
    match kind {
        RequestKind::Hello => 0,
        RequestKind::AllocSlot => 1,
        RequestKind::CreateFifo => 2,
        RequestKind::SetOptimizer => 3,
        RequestKind::SetSeed => 4,
        RequestKind::GetSeed => 5,
        RequestKind::SetRngState => 6,
        RequestKind::GetRngState => 7,
        RequestKind::Prepare => 8,
        RequestKind::RunStep => 9,
        RequestKind::CycleCount => 10,
        RequestKind::SetRegister => 11,
        RequestKind::GetRegister => 12,
        RequestKind::FreeRegister => 13,
        RequestKind::RemoteLoad => 14,
        RequestKind::RemoteStore => 15,
        RequestKind::Invoke => 16,
        RequestKind::HasFunction => 17,
        RequestKind::AllocArray => 18,
        RequestKind::DescribeRegister => 19,
        RequestKind::Write => 20,
        RequestKind::Read => 21,
        RequestKind::WriteBulk => 22,
        RequestKind::ReadBulk => 23,
        RequestKind::Locate => 24,
        RequestKind::Wrote => 25,
        RequestKind::Took => 26,
        RequestKind::ResetStep => 27,
        RequestKind::Malformed => 28,
    }
}

pub(super) fn op_variant(op: ReduceOp) -> u32 {
    match op {
        ReduceOp::Sum => 0,
        ReduceOp::Avg => 1,
        ReduceOp::Prod => 2,
        ReduceOp::Min => 3,
        ReduceOp::Max => 4,
    }
}
