//! Exhaustive matches: each variant's position, so that a new variant fails to compile
//! here.

use super::*;

// ---------------------------------------------------------------------------------------
// Exhaustive matches: a new variant fails to compile here.

pub(super) fn request_variant(request: &Request<'_>) -> u32 {
    match request {
        Request::Hello { .. } => 0,
        Request::Reset => 1,
        Request::AllocSlot { .. } => 2,
        Request::WriteSlot { .. } => 3,
        Request::ReadSlot { .. } => 4,
        Request::CreateFifo { .. } => 5,
        Request::PushFifo { .. } => 6,
        Request::PopFifo { .. } => 7,
        Request::SetOptimizer { .. } => 8,
        Request::SetSeed { .. } => 9,
        Request::GetSeed => 10,
        Request::SetRngState { .. } => 11,
        Request::GetRngState => 12,
        Request::Prepare { .. } => 13,
        Request::RunStep => 14,
        Request::Reduced { .. } => 15,
        Request::CycleCount => 16,
        Request::SetRegister { .. } => 17,
        Request::GetRegister { .. } => 18,
        Request::FreeRegister { .. } => 19,
        Request::Call { .. } => 20,
        Request::RemoteLoad { .. } => 21,
        Request::RemoteStore { .. } => 22,
        Request::Invoke { .. } => 23,
        Request::HasFunction { .. } => 24,
        Request::Ping => 25,
        Request::AllocArray { .. } => 26,
        Request::WriteArray { .. } => 27,
        Request::ReadArray { .. } => 28,
        Request::DescribeRegister { .. } => 29,
        Request::WriteArrayBulk { .. } => 30,
        Request::ReadArrayBulk { .. } => 31,
        Request::WriteSlotBulk { .. } => 32,
        Request::ReadSlotBulk { .. } => 33,
        Request::ResetStep => 34,
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
        Response::Reduce { .. } => 7,
        Response::Error { .. } => 8,
        Response::Described { .. } => 9,
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
        ErrorCode::NotConfigured => 9,
        ErrorCode::BadConfig => 10,
        ErrorCode::ReplyTooLarge => 11,
        ErrorCode::UnknownFunction => 12,
        ErrorCode::BadArguments => 13,
        ErrorCode::Malformed => 14,
        ErrorCode::UnexpectedReduced => 15,
        ErrorCode::ReduceTimeout => 16,
        ErrorCode::ReductionTooLarge { .. } => 17,
        ErrorCode::BulkUnavailable => 18,
        ErrorCode::StepAbandoned => 19,
        ErrorCode::NotInstrumented => 20,
    }
}

pub(super) fn value_variant(value: &Value<'_>) -> u32 {
    match value {
        Value::Int(_) => 0,
        Value::Float(_) => 1,
        Value::Shape(_) => 2,
        Value::Str(_) => 3,
        Value::Tensor(_) => 4,
        Value::Array(_) => 5,
    }
}

pub(super) fn value_kind_variant(kind: ValueKind) -> u32 {
    match kind {
        ValueKind::Int => 0,
        ValueKind::Float => 1,
        ValueKind::Shape => 2,
        ValueKind::Str => 3,
        ValueKind::Tensor => 4,
        ValueKind::Array => 5,
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
        RequestKind::Reset => 1,
        RequestKind::AllocSlot => 2,
        RequestKind::WriteSlot => 3,
        RequestKind::ReadSlot => 4,
        RequestKind::CreateFifo => 5,
        RequestKind::PushFifo => 6,
        RequestKind::PopFifo => 7,
        RequestKind::SetOptimizer => 8,
        RequestKind::SetSeed => 9,
        RequestKind::GetSeed => 10,
        RequestKind::SetRngState => 11,
        RequestKind::GetRngState => 12,
        RequestKind::Prepare => 13,
        RequestKind::RunStep => 14,
        RequestKind::Reduced => 15,
        RequestKind::CycleCount => 16,
        RequestKind::SetRegister => 17,
        RequestKind::GetRegister => 18,
        RequestKind::FreeRegister => 19,
        RequestKind::Call => 20,
        RequestKind::Malformed => 21,
        RequestKind::RemoteLoad => 22,
        RequestKind::RemoteStore => 23,
        RequestKind::Invoke => 24,
        RequestKind::HasFunction => 25,
        RequestKind::Ping => 26,
        RequestKind::AllocArray => 27,
        RequestKind::WriteArray => 28,
        RequestKind::ReadArray => 29,
        RequestKind::DescribeRegister => 30,
        RequestKind::WriteArrayBulk => 31,
        RequestKind::ReadArrayBulk => 32,
        RequestKind::WriteSlotBulk => 33,
        RequestKind::ReadSlotBulk => 34,
        RequestKind::ResetStep => 35,
    }
}

pub(super) fn op_variant(op: ReduceOp) -> u32 {
    match op {
        ReduceOp::Sum => 0,
        ReduceOp::Mean => 1,
    }
}
