//! What a collective checks of its registers, worker by worker, before anything moves: the
//! sources are arrays of one type (and, where the collective needs it, one size), the
//! destinations take the result's type and element count, and a destination that is not
//! an array yet is made one (flat) — its allocation sent now, answered before the bytes
//! move. Every refusal names the operation, the worker and both sizes or types.

use std::ops::Range;

use tessera_core::dtype::DataType;
use tessera_core::wire::endpoint::DescribeRegister;
use tessera_core::wire::{Target, ValueKind};

use super::super::state::{alloc_request, array_shape};
use super::super::{Command, SessionError, State};
use crate::combine;
use crate::transport::group::Place;
use crate::transport::{Span, Ticket};

/// A source register's array on one worker, as described.
pub(super) struct Held {
    worker: usize,
    dtype: DataType,
    bytes: usize,
}

impl Held {
    fn elements(&self) -> usize {
        self.bytes / self.dtype.size().max(1)
    }
}

/// One collective's checks, on the session's state (module doc).
pub(super) struct Checks<'s> {
    state: &'s mut State,
    src: u16,
    dst: u16,
    operation: &'static str,
    /// Workers whose destination is being made an array.
    anew: Vec<usize>,
    /// The destination's descriptions asked ahead ([`Checks::ask_dests`]), not yet
    /// claimed.
    ahead: Option<(Range<usize>, Asked)>,
}

/// Descriptions asked and not yet claimed: each worker's ticket.
type Asked = Vec<(usize, Ticket<DescribeRegister>)>;

impl<'s> Checks<'s> {
    /// The checks of `operation` from register `src` into `dst`.
    pub(super) fn new(
        state: &'s mut State,
        (src, dst): (u16, u16),
        operation: &'static str,
    ) -> Self {
        Self {
            state,
            src,
            dst,
            operation,
            anew: Vec::new(),
            ahead: None,
        }
    }

    /// Asks each of `workers` now for the destination register's description, which
    /// [`Checks::dests`] of the same workers then claims: asked before the sources'
    /// ([`Checks::arrays`]), both travel in one round trip. A refusal is still reported
    /// where `dests` reports it, after every check of the sources.
    pub(super) fn ask_dests(&mut self, workers: Range<usize>) -> Result<(), SessionError> {
        let asked = self.state.ask_all(workers.clone(), self.dst)?;
        self.ahead = Some((workers, asked));
        Ok(())
    }

    /// Worker `worker` exists.
    pub(super) fn worker(&self, worker: usize) -> Result<(), SessionError> {
        self.state.check_worker(worker)
    }

    /// The source register's array on each of `workers` (every one asked at once).
    pub(super) fn arrays(&mut self, workers: Range<usize>) -> Result<Vec<Held>, SessionError> {
        let described = self.state.describe_all(workers.clone(), self.src)?;
        let mut held = Vec::with_capacity(described.len());
        for (worker, description) in workers.zip(described) {
            let (dtype, _) = array_shape(worker, self.src, &description)?;
            held.push(Held {
                worker,
                dtype,
                bytes: description.bytes as usize,
            });
        }
        Ok(held)
    }

    /// The first array's type and element count, once every array has its type (and, with
    /// `same_size`, its element count).
    pub(super) fn alike(
        &self,
        held: &[Held],
        same_size: bool,
    ) -> Result<(DataType, usize), SessionError> {
        let Some(first) = held.first() else {
            return Ok((DataType::F32, 0));
        };
        for h in held {
            if h.dtype != first.dtype {
                return Err(SessionError::DtypeMismatch {
                    operation: self.operation,
                    worker: h.worker,
                    expected: first.dtype,
                    actual: h.dtype,
                });
            }
        }
        for h in held.iter().filter(|_| same_size) {
            if h.elements() != first.elements() {
                return Err(SessionError::Elements {
                    operation: self.operation,
                    worker: h.worker,
                    expected: first.elements(),
                    actual: h.elements(),
                });
            }
        }
        Ok((first.dtype, first.elements()))
    }

    /// `dtype` is one the reduction kernel combines.
    pub(super) fn reducible(&self, dtype: DataType) -> Result<(), SessionError> {
        if combine::supported(dtype) {
            Ok(())
        } else {
            Err(SessionError::Dtype {
                operation: self.operation,
                dtype,
            })
        }
    }

    /// Elements of every array together.
    pub(super) fn total(&self, held: &[Held]) -> usize {
        held.iter().map(Held::elements).sum()
    }

    /// `elements` cut into `parts` equal parts: the elements of one.
    pub(super) fn part(&self, elements: usize, parts: usize) -> Result<usize, SessionError> {
        if parts == 0 || !elements.is_multiple_of(parts) {
            return Err(SessionError::Indivisible {
                operation: self.operation,
                elements,
                parts,
            });
        }
        Ok(elements / parts)
    }

    /// The arrays' places (the source register, whole).
    pub(super) fn places(&self, held: &[Held]) -> Vec<Place> {
        (held.iter())
            .map(|h| register(h.worker, self.src, h.bytes))
            .collect()
    }

    /// The destination register on each of `workers`, checked to take `elements` of `dtype`
    /// (every one asked at once); one that is not an array yet is made one.
    pub(super) fn dests(
        &mut self,
        workers: Range<usize>,
        dtype: DataType,
        elements: usize,
    ) -> Result<Vec<Place>, SessionError> {
        let (operation, dst) = (self.operation, self.dst);
        let described = match self.ahead.take() {
            Some((asked, tickets)) if asked == workers => self.state.answers(tickets, dst)?,
            ahead => {
                self.ahead = ahead;
                self.state.describe_all(workers.clone(), dst)?
            }
        };
        let mut places = Vec::with_capacity(described.len());
        for (worker, target) in workers.zip(described) {
            let held = target.dtype.unwrap_or(DataType::F32);
            if held != dtype {
                return Err(SessionError::DtypeMismatch {
                    operation,
                    worker,
                    expected: dtype,
                    actual: held,
                });
            }
            let room = target.bytes as usize / held.size().max(1);
            if room != elements {
                return Err(SessionError::Elements {
                    operation,
                    worker,
                    expected: room,
                    actual: elements,
                });
            }
            if target.kind != ValueKind::Array {
                // Not an array, yet with room for the elements (a string register: no other
                // value has bytes): it becomes an array of its element count.
                let shape =
                    [u32::try_from(elements).map_err(|_| crate::array::ArrayError::Overflow)?];
                let alloc = alloc_request(dst, dtype, &shape)?;
                self.state.submit(worker, &alloc, Command::Alloc(dst))?;
                self.anew.push(worker);
            }
            places.push(register(worker, dst, elements * dtype.size()));
        }
        Ok(places)
    }

    /// The workers whose destination is being made an array (their allocations pending).
    pub(super) fn made_anew(mut self) -> Vec<usize> {
        std::mem::take(&mut self.anew)
    }
}

impl Drop for Checks<'_> {
    /// Descriptions asked ahead and never claimed (a check of the sources failed first)
    /// are claimed here, their outcome dropped: a reply nobody claims would stay on its
    /// channel for good.
    fn drop(&mut self) {
        if let Some((_, asked)) = self.ahead.take() {
            let _unclaimed = self.state.answers(asked, self.dst);
        }
    }
}

/// Register `id` on `worker`, `len` bytes from its start.
fn register(worker: usize, id: u16, len: usize) -> Place {
    Place {
        member: worker,
        span: Span {
            target: Target::Register(id),
            offset: 0,
            len,
        },
    }
}
