//! The reading half of the data path (`data_path`): spans read in place (handed over at
//! once), in bulk or in framed chunks, every read started before any is awaited, and
//! finished with each span's bytes checked against its length.

use tessera_core::wire::{DataRequest, Request, RequestKind, Target};

use super::data_path::{wire, Access, Route, Sent, Span};
use super::{Channel, TransportError};
use crate::transport::queue::Bulk;

/// A read under way ([`Channel::start_read`]): per span, what is still to arrive.
#[derive(Debug)]
#[must_use = "a read's bytes arrive only through Channel::finish_read"]
pub struct Reading {
    spans: Vec<Pending>,
}

/// What one span of a read still waits for.
#[derive(Debug)]
enum Pending {
    /// Read in place already; a FIFO's report waits for its reply.
    Done(Option<u32>),
    /// A bulk reply.
    Bulk(u32),
    /// Framed replies: each request's sequence number, offset in the span and length.
    Chunks(Vec<(u32, usize, usize)>),
}

impl Channel {
    /// Reads `out.len()` bytes of `target` at `offset` into `out`.
    pub fn read(
        &mut self,
        target: Target,
        offset: usize,
        out: &mut [u8],
    ) -> Result<(), TransportError> {
        let span = Span {
            target,
            offset,
            len: out.len(),
        };
        let reading = self.start_read(&[span], |_, bytes| out.copy_from_slice(bytes))?;
        self.finish_read(reading, |_, bytes| out.copy_from_slice(bytes))
    }

    /// Starts reading each of `spans`: those moved in place are handed to `take(i, bytes)`
    /// at once (straight from the device's memory), the others are requested; finish with
    /// [`Channel::finish_read`], which hands over the rest. Reads of several channels
    /// started before any is finished cost one round trip between them.
    pub fn start_read(
        &mut self,
        spans: &[Span],
        take: impl FnMut(usize, &[u8]),
    ) -> Result<Reading, TransportError> {
        self.take_spans(spans, take, false)
            .map(|(reading, _)| reading)
    }

    /// Starts reading a finished training step's anchors as [`Channel::start_read`] does —
    /// `spans` being every anchor FIFO of the prepared program, each whole, from its start
    /// — except that when every span moved in place and took its FIFO's whole ring from its
    /// start (as the device located it), no `Took` is sent: the device's next
    /// [`RunStep`](tessera_core::wire::ProgramRequest::RunStep) must say so (`took`, the
    /// bool returned), and the device drops the items then, by the same rules. The step's
    /// `Done` is what vouches for the bytes: a device ends a step well only with every
    /// anchor FIFO holding exactly its ring. Saves a request and its reply per anchor per
    /// replica; any span that could not move in place has every span reported as
    /// `start_read` reports it.
    pub fn read_step_outputs(
        &mut self,
        spans: &[Span],
        take: impl FnMut(usize, &[u8]),
    ) -> Result<(Reading, bool), TransportError> {
        self.take_spans(spans, take, true)
    }

    /// `start_read`, leaving the reports to the next step when `step` and every span went
    /// in place (then `true`).
    fn take_spans(
        &mut self,
        spans: &[Span],
        mut take: impl FnMut(usize, &[u8]),
        step: bool,
    ) -> Result<(Reading, bool), TransportError> {
        let mut pending = Vec::with_capacity(spans.len());
        let mut reports = Vec::new();
        // Spans that take their FIFO's whole ring from its start: what a `RunStep` that says
        // `took` makes the device drop, and nothing less.
        let mut whole = 0;
        for (i, span) in spans.iter().enumerate() {
            pending.push(match self.route(span)? {
                Route::InPlace { at, whole_ring } => {
                    let memory = self.memory.as_ref().and_then(|m| m.range(at, span.len));
                    let Some(bytes) = memory else {
                        return Err(self.outside_memory(span, at));
                    };
                    take(i, bytes);
                    self.traffic.in_place += span.len as u64;
                    if span.target.is_stream() {
                        reports.push(*span);
                        whole += usize::from(whole_ring);
                    }
                    Pending::Done(None)
                }
                Route::Bulk => {
                    let request = Request::Data(DataRequest::ReadBulk {
                        target: span.target,
                        offset: wire(span.offset, "offset")?,
                        len: wire(span.len, "length")?,
                    });
                    Pending::Bulk(self.submit(&request)?)
                }
                Route::Chunks => Pending::Chunks(self.request_chunks(span)?),
            });
        }
        let took = step && whole == spans.len();
        if took {
            return Ok((Reading { spans: pending }, true));
        }
        // A FIFO's report waits behind the span it reports, in span order.
        let mut sent = Sent::default();
        self.report(&reports, &mut sent, Access::Read)?;
        let mut reports = sent.seqs.into_iter();
        for (p, span) in pending.iter_mut().zip(spans) {
            if let Pending::Done(report) = p {
                if span.target.is_stream() {
                    *report = reports.next();
                }
            }
        }
        Ok((Reading { spans: pending }, false))
    }

    /// Finishes a read: waits for what is still to arrive and hands each span's bytes to
    /// `take(i, bytes)`; every length is checked against the span's.
    pub fn finish_read(
        &mut self,
        reading: Reading,
        mut take: impl FnMut(usize, &[u8]),
    ) -> Result<(), TransportError> {
        for (i, pending) in reading.spans.into_iter().enumerate() {
            match pending {
                Pending::Done(None) => {}
                Pending::Done(Some(report)) => drop(self.receive(report)?),
                Pending::Bulk(seq) => {
                    let mut reply = self.receive(seq)?;
                    match reply.take_bulk() {
                        Some(Bulk(bytes)) => {
                            self.traffic.bulk += bytes.len() as u64;
                            take(i, &bytes);
                        }
                        None => {
                            return Err(TransportError::UnexpectedReply {
                                replica: self.limits.replica,
                                request: RequestKind::ReadBulk,
                                reply: format!("{:?}", reply.response()),
                            })
                        }
                    }
                }
                Pending::Chunks(chunks) => {
                    let len = chunks.iter().map(|&(_, _, n)| n).sum();
                    let mut whole = vec![0u8; len];
                    for (seq, at, n) in chunks {
                        let reply = self.receive(seq)?;
                        let Some(tessera_core::wire::Response::Data { data }) = reply.response()
                        else {
                            return Err(TransportError::UnexpectedReply {
                                replica: self.limits.replica,
                                request: RequestKind::Read,
                                reply: format!("{:?}", reply.response()),
                            });
                        };
                        if data.len() != n {
                            return Err(self.wrong_length(RequestKind::Read, data.len(), n));
                        }
                        whole[at..at + n].copy_from_slice(data);
                    }
                    self.traffic.framed += len as u64;
                    self.traffic.staged += len as u64;
                    take(i, &whole);
                }
            }
        }
        Ok(())
    }

    /// Requests `span` in framed chunks.
    fn request_chunks(&mut self, span: &Span) -> Result<Vec<(u32, usize, usize)>, TransportError> {
        let chunk = self.limits.max_chunk().max(1);
        let mut chunks = Vec::with_capacity(span.len.div_ceil(chunk));
        for at in (0..span.len).step_by(chunk) {
            let n = (span.len - at).min(chunk);
            let request = Request::Data(DataRequest::Read {
                target: span.target,
                offset: wire(span.offset + at, "offset")?,
                len: wire(n, "length")?,
            });
            chunks.push((self.submit(&request)?, at, n));
        }
        Ok(chunks)
    }
}
