//! Which request an error reply is about: a request's kind, without its fields, in one
//! flat list whatever the request's area.

use serde::{Deserialize, Serialize};

/// Which request an error reply is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RequestKind {
    /// [`Request::Hello`](super::Request::Hello): opening a session.
    Hello,
    /// [`MemoryRequest::AllocSlot`](super::MemoryRequest::AllocSlot): reserving a
    /// remote-buffer slot.
    AllocSlot,
    /// [`StreamRequest::CreateFifo`](super::StreamRequest::CreateFifo): creating a stream
    /// FIFO.
    CreateFifo,
    /// [`ProgramRequest::SetOptimizer`](super::ProgramRequest::SetOptimizer): the
    /// optimizer's values.
    SetOptimizer,
    /// [`ProgramRequest::SetSeed`](super::ProgramRequest::SetSeed): the random seed from
    /// the host.
    SetSeed,
    /// [`ProgramRequest::GetSeed`](super::ProgramRequest::GetSeed): the random seed to the
    /// host.
    GetSeed,
    /// [`ProgramRequest::SetRngState`](super::ProgramRequest::SetRngState): the generator's
    /// state from the host.
    SetRngState,
    /// [`ProgramRequest::GetRngState`](super::ProgramRequest::GetRngState): the generator's
    /// state to the host.
    GetRngState,
    /// [`ProgramRequest::Prepare`](super::ProgramRequest::Prepare): placing a program.
    Prepare,
    /// [`ProgramRequest::RunStep`](super::ProgramRequest::RunStep): one training step.
    RunStep,
    /// [`ProgramRequest::CycleCount`](super::ProgramRequest::CycleCount): the cycle count
    /// to the host.
    CycleCount,
    /// [`KernelRequest::SetRegister`](super::KernelRequest::SetRegister): a value into a
    /// register.
    SetRegister,
    /// [`KernelRequest::GetRegister`](super::KernelRequest::GetRegister): a register's
    /// value.
    GetRegister,
    /// [`KernelRequest::FreeRegister`](super::KernelRequest::FreeRegister): freeing a
    /// register.
    FreeRegister,
    /// [`MemoryRequest::RemoteLoad`](super::MemoryRequest::RemoteLoad): a slot into an
    /// on-device variable.
    RemoteLoad,
    /// [`MemoryRequest::RemoteStore`](super::MemoryRequest::RemoteStore): an on-device
    /// variable into a slot.
    RemoteStore,
    /// [`KernelRequest::Invoke`](super::KernelRequest::Invoke): calling a named function.
    Invoke,
    /// [`KernelRequest::HasFunction`](super::KernelRequest::HasFunction): asking for a
    /// function by name.
    HasFunction,
    /// [`KernelRequest::AllocArray`](super::KernelRequest::AllocArray): an array register,
    /// zeroed.
    AllocArray,
    /// [`KernelRequest::DescribeRegister`](super::KernelRequest::DescribeRegister): what a
    /// register holds.
    DescribeRegister,
    /// [`DataRequest::Write`](super::DataRequest::Write): bytes into a target, in the
    /// frame.
    Write,
    /// [`DataRequest::Read`](super::DataRequest::Read): bytes of a target, in the reply's
    /// frame.
    Read,
    /// [`DataRequest::WriteBulk`](super::DataRequest::WriteBulk): bytes into a target,
    /// beside the message.
    WriteBulk,
    /// [`DataRequest::ReadBulk`](super::DataRequest::ReadBulk): bytes of a target, beside
    /// the reply.
    ReadBulk,
    /// [`DataRequest::Locate`](super::DataRequest::Locate): where a target lies in the
    /// device's memory.
    Locate,
    /// [`DataRequest::Wrote`](super::DataRequest::Wrote): bytes the host wrote in place.
    Wrote,
    /// [`DataRequest::Took`](super::DataRequest::Took): bytes the host read in place.
    Took,
    /// [`ProgramRequest::ResetStep`](super::ProgramRequest::ResetStep): resetting the
    /// step's FIFOs and scratch.
    ResetStep,
    /// A frame that did not decode as any request.
    Malformed,
}

impl RequestKind {
    /// True for a request the device runs while it reads its link for topic messages (a
    /// [`ProgramRequest::RunStep`](super::ProgramRequest::RunStep), which waits for the
    /// host's combined results): any other request that reaches the device meanwhile ends
    /// it ([`ErrorCode::StepAbandoned`](crate::wire::ErrorCode::StepAbandoned)) and is
    /// dropped unrun, so a host keeps every request it sends while one is unanswered, to
    /// send it again.
    pub fn is_interruptible(self) -> bool {
        matches!(self, Self::RunStep)
    }
}
