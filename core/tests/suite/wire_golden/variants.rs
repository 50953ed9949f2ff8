//! Exhaustive matches: each variant's position, so that a new variant fails to compile
//! here.

use super::*;

// ---------------------------------------------------------------------------------------
// Exhaustive matches: a new variant fails to compile here.

pub(super) fn request_variant(request: &Request<'_>) -> u32 {
    match request {
        Request::Hello { .. } => 0,
        Request::AllocSlot { .. } => 1,
        Request::WriteSlot { .. } => 2,
        Request::ReadSlot { .. } => 3,
        Request::CreateFifo { .. } => 4,
        Request::PushFifo { .. } => 5,
        Request::PopFifo { .. } => 6,
        Request::SetOptimizer { .. } => 7,
        Request::SetSeed { .. } => 8,
        Request::GetSeed => 9,
        Request::SetRngState { .. } => 10,
        Request::GetRngState => 11,
        Request::Prepare { .. } => 12,
        Request::RunStep => 13,
        Request::CycleCount => 14,
        Request::SetRegister { .. } => 15,
        Request::GetRegister { .. } => 16,
        Request::FreeRegister { .. } => 17,
        Request::RemoteLoad { .. } => 18,
        Request::RemoteStore { .. } => 19,
        Request::Invoke { .. } => 20,
        Request::HasFunction { .. } => 21,
        Request::AllocArray { .. } => 22,
        Request::WriteArray { .. } => 23,
        Request::ReadArray { .. } => 24,
        Request::DescribeRegister { .. } => 25,
        Request::WriteArrayBulk { .. } => 26,
        Request::ReadArrayBulk { .. } => 27,
        Request::WriteSlotBulk { .. } => 28,
        Request::ReadSlotBulk { .. } => 29,
        Request::ResetStep => 30,
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
        Response::Bulk { .. } => 9,
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
        ErrorCode::Program(_) => 9,
        ErrorCode::NotPrepared => 10,
        ErrorCode::ReplicaOutOfRange { .. } => 11,
        ErrorCode::FifoShape { .. } => 12,
        ErrorCode::Internal { .. } => 13,
        ErrorCode::ReplyTooLarge => 14,
        ErrorCode::UnknownFunction => 15,
        ErrorCode::BadArguments => 16,
        ErrorCode::Malformed => 17,
        ErrorCode::UnexpectedReduced => 18,
        ErrorCode::ReduceTimeout => 19,
        ErrorCode::ReductionTooLarge { .. } => 20,
        ErrorCode::BulkUnavailable => 21,
        ErrorCode::StepAbandoned => 22,
        ErrorCode::NotInstrumented => 23,
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
        RequestKind::WriteSlot => 2,
        RequestKind::ReadSlot => 3,
        RequestKind::CreateFifo => 4,
        RequestKind::PushFifo => 5,
        RequestKind::PopFifo => 6,
        RequestKind::SetOptimizer => 7,
        RequestKind::SetSeed => 8,
        RequestKind::GetSeed => 9,
        RequestKind::SetRngState => 10,
        RequestKind::GetRngState => 11,
        RequestKind::Prepare => 12,
        RequestKind::RunStep => 13,
        RequestKind::CycleCount => 14,
        RequestKind::SetRegister => 15,
        RequestKind::GetRegister => 16,
        RequestKind::FreeRegister => 17,
        RequestKind::RemoteLoad => 18,
        RequestKind::RemoteStore => 19,
        RequestKind::Invoke => 20,
        RequestKind::HasFunction => 21,
        RequestKind::AllocArray => 22,
        RequestKind::WriteArray => 23,
        RequestKind::ReadArray => 24,
        RequestKind::DescribeRegister => 25,
        RequestKind::WriteArrayBulk => 26,
        RequestKind::ReadArrayBulk => 27,
        RequestKind::WriteSlotBulk => 28,
        RequestKind::ReadSlotBulk => 29,
        RequestKind::ResetStep => 30,
        RequestKind::Malformed => 31,
    }
}

pub(super) fn op_variant(op: ReduceOp) -> u32 {
    match op {
        ReduceOp::Sum => 0,
        ReduceOp::Mean => 1,
    }
}
