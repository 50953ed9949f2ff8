/// The remote-buffer slots of an instance's local replicas, as the caller reaches them.
///
/// `local` is the replica's index within the instance window. Offsets and lengths are in
/// bytes. Transfers check every slot's length before moving data and only write or read
/// inside it, so an implementation may treat an out-of-range request as a bug of its own.
pub trait RemoteSlots {
    /// What a failed slot operation reports.
    type Error;

    /// Size in bytes of local replica `local`'s slot.
    fn slot_len(&self, local: usize) -> Result<usize, Self::Error>;

    /// Copies `data` into the slot at `offset`.
    fn write(&mut self, local: usize, offset: usize, data: &[u8]) -> Result<(), Self::Error>;

    /// Writes `len` zero bytes at `offset`.
    fn zero(&mut self, local: usize, offset: usize, len: usize) -> Result<(), Self::Error>;

    /// Copies `out.len()` bytes from the slot at `offset` into `out`.
    fn read(&mut self, local: usize, offset: usize, out: &mut [u8]) -> Result<(), Self::Error>;
}

/// Slots held in host memory, one buffer per local replica (tests, in-process devices).
impl<B: AsRef<[u8]> + AsMut<[u8]>> RemoteSlots for [B] {
    type Error = SliceSlotError;

    fn slot_len(&self, local: usize) -> Result<usize, SliceSlotError> {
        let slot = self.get(local).ok_or(SliceSlotError {
            local,
            offset: 0,
            len: 0,
        })?;
        Ok(slot.as_ref().len())
    }

    fn write(&mut self, local: usize, offset: usize, data: &[u8]) -> Result<(), SliceSlotError> {
        slot_range(self, local, offset, data.len())?.copy_from_slice(data);
        Ok(())
    }

    fn zero(&mut self, local: usize, offset: usize, len: usize) -> Result<(), SliceSlotError> {
        slot_range(self, local, offset, len)?.fill(0);
        Ok(())
    }

    fn read(&mut self, local: usize, offset: usize, out: &mut [u8]) -> Result<(), SliceSlotError> {
        out.copy_from_slice(slot_range(self, local, offset, out.len())?);
        Ok(())
    }
}

fn slot_range<B: AsMut<[u8]>>(
    slots: &mut [B],
    local: usize,
    offset: usize,
    len: usize,
) -> Result<&mut [u8], SliceSlotError> {
    let error = SliceSlotError { local, offset, len };
    let end = offset.checked_add(len).ok_or(error)?;
    slots
        .get_mut(local)
        .ok_or(error)?
        .as_mut()
        .get_mut(offset..end)
        .ok_or(error)
}

/// A request outside an in-memory slot (or for a slot that does not exist).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[error("bytes [{offset}, {offset}+{len}) are outside the slot of local replica {local}")]
pub struct SliceSlotError {
    /// Local replica index.
    pub local: usize,
    /// Byte offset asked for.
    pub offset: usize,
    /// Bytes asked for.
    pub len: usize,
}
