//! The step-IO splitter: one upstream IO (the user's arrays or callbacks) shared by `R`
//! replicas, each served by its own adapter per tensor.
//!
//! Replica `r`'s `j`-th buffer of a tensor is upstream buffer `j·R + r`: the splitter
//! fetches upstream in strict round-robin replica order, parking buffers for replicas that
//! have not asked yet in their adapter's FIFO. Completions are released upstream in the
//! same round-robin order, so the upstream sees its buffers completed in the order it
//! handed them out, whatever order the replicas finish in.
//!
//! Capacities are const generics: `TENSORS` streams, `REPLICAS` replicas, `DEPTH` parked
//! buffers per adapter. Exceeding one is an error; no buffer is ever dropped.
//!
//! # Panics
//!
//! Nothing here panics: unknown tensors, replicas out of range, calls out of order and full
//! FIFOs are all errors.

use heapless::Deque;

use super::{AnchorReturnType, DataFlow};

/// The user's side of a run's step IO, as the splitter calls it. `tensor` is the index
/// [`Splitter::add_input`] or [`Splitter::add_output`] returned.
pub trait UpstreamIo {
    /// A handle to one buffer (an index, a pointer-sized token): copied, never owned.
    type Buffer: Copy;
    /// What a failed call reports.
    type Error;

    /// The next input buffer of `tensor`. May return `None` only when `prefetch` is set and
    /// no buffer is ready yet.
    fn input(
        &mut self,
        tensor: usize,
        elements: usize,
        prefetch: bool,
    ) -> Result<Option<Self::Buffer>, Self::Error>;

    /// Releases the oldest input buffer of `tensor` not yet released.
    fn input_complete(&mut self, tensor: usize) -> Result<(), Self::Error>;

    /// The next output buffer of `tensor` (`None` is an error).
    fn output(
        &mut self,
        tensor: usize,
        elements: usize,
    ) -> Result<Option<Self::Buffer>, Self::Error>;

    /// Releases the oldest output buffer of `tensor` not yet released: it has been written.
    fn output_complete(&mut self, tensor: usize) -> Result<(), Self::Error>;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Input { broadcast: bool },
    Output,
}

/// One (tensor, replica) adapter's state.
#[derive(Debug, Clone)]
struct Adapter<B, const DEPTH: usize> {
    /// Fetched for this replica, not yet handed to it.
    parked: Deque<B, DEPTH>,
    /// Buffers fetched for this replica this run.
    fetched: usize,
    /// Handed to the replica and not yet completed.
    outstanding: usize,
    /// Completed by the replica, not yet released upstream.
    unreleased: usize,
}

impl<B, const DEPTH: usize> Adapter<B, DEPTH> {
    const fn new() -> Self {
        Self {
            parked: Deque::new(),
            fetched: 0,
            outstanding: 0,
            unreleased: 0,
        }
    }
}

/// One tensor's stream: its per-replica adapters and round-robin positions.
#[derive(Debug, Clone)]
struct Stream<B, const REPLICAS: usize, const DEPTH: usize> {
    elements: usize,
    direction: Direction,
    /// Buffers each replica takes per run.
    cap: usize,
    /// Replica whose buffer is fetched next.
    next_fetch: usize,
    /// Replica whose completion is released next.
    next_release: usize,
    adapters: [Adapter<B, DEPTH>; REPLICAS],
}

/// Splits one upstream IO over the replicas. See the module documentation.
#[derive(Debug, Clone)]
pub struct Splitter<B, const TENSORS: usize, const REPLICAS: usize, const DEPTH: usize> {
    replicas: usize,
    flow: DataFlow,
    streams: heapless::Vec<Stream<B, REPLICAS, DEPTH>, TENSORS>,
}

impl<B: Copy, const TENSORS: usize, const REPLICAS: usize, const DEPTH: usize>
    Splitter<B, TENSORS, REPLICAS, DEPTH>
{
    /// A splitter for `replicas` replicas running `flow`.
    ///
    /// ```
    /// use core::convert::Infallible;
    /// use tessera_core::stream::{DataFlow, Splitter, UpstreamIo};
    ///
    /// /// Hands out input buffers 0, 1, 2, … in the order it is asked.
    /// struct Counter(usize);
    ///
    /// impl UpstreamIo for Counter {
    ///     type Buffer = usize;
    ///     type Error = Infallible;
    ///     fn input(&mut self, _: usize, _: usize, _: bool) -> Result<Option<usize>, Infallible> {
    ///         self.0 += 1;
    ///         Ok(Some(self.0 - 1))
    ///     }
    ///     fn input_complete(&mut self, _: usize) -> Result<(), Infallible> { Ok(()) }
    ///     fn output(&mut self, _: usize, _: usize) -> Result<Option<usize>, Infallible> {
    ///         Ok(None)
    ///     }
    ///     fn output_complete(&mut self, _: usize) -> Result<(), Infallible> { Ok(()) }
    /// }
    ///
    /// // 2 replicas, one batch of 2 micro-batches per step; capacities: 4 tensors, 8
    /// // replicas, 2 parked buffers per replica.
    /// let mut splitter = Splitter::<usize, 4, 8, 2>::new(2, DataFlow::new(1, 2)?)?;
    /// let x = splitter.add_input(3, false)?;
    /// let mut upstream = Counter(0);
    /// // Replica r's j-th buffer is upstream buffer 2·j + r, whoever asks first: replica 1's
    /// // first request fetches buffer 0 for replica 0 (parked) and buffer 1 for itself.
    /// assert_eq!(splitter.input(&mut upstream, x, 1, false)?, Some(1));
    /// assert_eq!(splitter.input(&mut upstream, x, 1, false)?, Some(3));
    /// assert_eq!(splitter.input(&mut upstream, x, 0, false)?, Some(0));
    /// assert_eq!(splitter.input(&mut upstream, x, 0, false)?, Some(2));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(replicas: usize, flow: DataFlow) -> Result<Self, SetupError> {
        if replicas == 0 || replicas > REPLICAS {
            return Err(SetupError::Replicas {
                replicas,
                capacity: REPLICAS,
            });
        }
        Ok(Self {
            replicas,
            flow,
            streams: heapless::Vec::new(),
        })
    }

    /// Number of replicas served.
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// Adds an input stream of `elements` per buffer; returns its tensor index. Each
    /// replica takes `bps·af` buffers per run; a broadcast stream has one buffer for all.
    pub fn add_input(&mut self, elements: usize, broadcast: bool) -> Result<usize, SetupError> {
        self.add(
            elements,
            Direction::Input { broadcast },
            self.flow.inputs_per_replica(),
        )
    }

    /// Adds an output stream anchored with `anchor`; returns its tensor index.
    pub fn add_output(
        &mut self,
        elements: usize,
        anchor: AnchorReturnType,
    ) -> Result<usize, SetupError> {
        self.add(
            elements,
            Direction::Output,
            self.flow.outputs_per_replica(Some(anchor)),
        )
    }

    fn add(
        &mut self,
        elements: usize,
        direction: Direction,
        cap: usize,
    ) -> Result<usize, SetupError> {
        let stream = Stream {
            elements,
            direction,
            cap,
            next_fetch: 0,
            next_release: 0,
            adapters: core::array::from_fn(|_| Adapter::new()),
        };
        let index = self.streams.len();
        self.streams
            .push(stream)
            .map_err(|_| SetupError::Tensors { capacity: TENSORS })?;
        Ok(index)
    }

    /// Replica `replica`'s next input buffer of `tensor`, fetching upstream as needed.
    ///
    /// `Ok(None)` only when `prefetch` is set and nothing is ready (or the replica has had
    /// all its buffers this run); without `prefetch` that is an error.
    pub fn input<U: UpstreamIo<Buffer = B>>(
        &mut self,
        io: &mut U,
        tensor: usize,
        replica: usize,
        prefetch: bool,
    ) -> Result<Option<B>, SplitterError<U::Error>> {
        let replicas = self.replicas;
        let stream = self.stream(tensor, replica, true)?;
        let elements = stream.elements;
        let got = stream.take(tensor, replica, replicas, prefetch, |flag| {
            io.input(tensor, elements, flag)
        })?;
        match got {
            Some(buffer) => Ok(Some(buffer)),
            None if prefetch => Ok(None),
            None => Err(SplitterError::Exhausted {
                tensor,
                replica,
                cap: stream.cap,
            }),
        }
    }

    /// Replica `replica`'s next input buffer of `tensor`, fetched upstream now: the
    /// [`input`](Self::input) of a caller that does not prefetch, whose buffer is never
    /// missing (an upstream with nothing left is [`SplitterError::Exhausted`]).
    pub fn next_input<U: UpstreamIo<Buffer = B>>(
        &mut self,
        io: &mut U,
        tensor: usize,
        replica: usize,
    ) -> Result<B, SplitterError<U::Error>> {
        let cap = self.stream(tensor, replica, true)?.cap;
        self.input(io, tensor, replica, false)?
            .ok_or(SplitterError::Exhausted {
                tensor,
                replica,
                cap,
            })
    }

    /// Replica `replica` has finished with its oldest input buffer of `tensor`.
    pub fn input_complete<U: UpstreamIo<Buffer = B>>(
        &mut self,
        io: &mut U,
        tensor: usize,
        replica: usize,
    ) -> Result<(), SplitterError<U::Error>> {
        let replicas = self.replicas;
        let stream = self.stream(tensor, replica, true)?;
        stream.complete(tensor, replica, replicas, || io.input_complete(tensor))
    }

    /// Replica `replica`'s next output buffer of `tensor`; an error past the anchor's count.
    pub fn output<U: UpstreamIo<Buffer = B>>(
        &mut self,
        io: &mut U,
        tensor: usize,
        replica: usize,
    ) -> Result<B, SplitterError<U::Error>> {
        let replicas = self.replicas;
        let stream = self.stream(tensor, replica, false)?;
        let elements = stream.elements;
        let got = stream.take(tensor, replica, replicas, false, |_| {
            io.output(tensor, elements)
        })?;
        got.ok_or(SplitterError::Exhausted {
            tensor,
            replica,
            cap: stream.cap,
        })
    }

    /// Replica `replica` has written its oldest output buffer of `tensor`.
    pub fn output_complete<U: UpstreamIo<Buffer = B>>(
        &mut self,
        io: &mut U,
        tensor: usize,
        replica: usize,
    ) -> Result<(), SplitterError<U::Error>> {
        let replicas = self.replicas;
        let stream = self.stream(tensor, replica, false)?;
        stream.complete(tensor, replica, replicas, || io.output_complete(tensor))
    }

    /// Forgets all positions, parked buffers and counts: the start of a run.
    pub fn reset(&mut self) {
        for stream in &mut self.streams {
            stream.next_fetch = 0;
            stream.next_release = 0;
            for adapter in &mut stream.adapters {
                *adapter = Adapter::new();
            }
        }
    }

    fn stream<E>(
        &mut self,
        tensor: usize,
        replica: usize,
        input: bool,
    ) -> Result<&mut Stream<B, REPLICAS, DEPTH>, SplitterError<E>> {
        let replicas = self.replicas;
        let stream = self
            .streams
            .get_mut(tensor)
            .ok_or(SplitterError::UnknownTensor { tensor })?;
        if matches!(stream.direction, Direction::Input { .. }) != input {
            return Err(SplitterError::WrongDirection { tensor, input });
        }
        if replica >= replicas {
            return Err(SplitterError::ReplicaOutOfRange {
                tensor,
                replica,
                replicas,
            });
        }
        if stream.direction == (Direction::Input { broadcast: true }) && replica != 0 {
            return Err(SplitterError::BroadcastReplica { tensor, replica });
        }
        Ok(stream)
    }
}

impl<B: Copy, const REPLICAS: usize, const DEPTH: usize> Stream<B, REPLICAS, DEPTH> {
    fn broadcast(&self) -> bool {
        self.direction == (Direction::Input { broadcast: true })
    }

    /// Fetches round-robin up to and including `replica` if its FIFO is empty, then hands
    /// it its oldest parked buffer. `upstream(flag)` asks for one buffer; only the call on
    /// behalf of `replica` itself carries the prefetch flag.
    fn take<E>(
        &mut self,
        tensor: usize,
        replica: usize,
        replicas: usize,
        prefetch: bool,
        mut upstream: impl FnMut(bool) -> Result<Option<B>, E>,
    ) -> Result<Option<B>, SplitterError<E>> {
        let own_fifo_empty = self
            .adapters
            .get(replica)
            .is_none_or(|a| a.parked.is_empty());
        if own_fifo_empty {
            // At most one lap: every fetch advances `next_fetch`, and the loop ends at `replica`.
            for _ in 0..replicas {
                let r = self.next_fetch;
                let cap = self.cap;
                let Some(adapter) = self.adapters.get_mut(r) else {
                    break;
                };
                if adapter.fetched >= cap {
                    break;
                }
                if adapter.parked.is_full() {
                    return Err(SplitterError::FifoFull {
                        tensor,
                        replica: r,
                        depth: DEPTH,
                    });
                }
                let flag = prefetch && r == replica;
                match upstream(flag).map_err(SplitterError::Upstream)? {
                    Some(buffer) => {
                        // Cannot fail: fullness was checked above.
                        let _ = adapter.parked.push_back(buffer);
                        adapter.fetched += 1;
                        if !self.broadcast() {
                            self.next_fetch = (r + 1) % replicas;
                        }
                    }
                    None if flag => break,
                    None => return Err(SplitterError::UpstreamEmpty { tensor, replica: r }),
                }
                if r == replica {
                    break;
                }
            }
        }
        let Some(adapter) = self.adapters.get_mut(replica) else {
            return Ok(None);
        };
        let buffer = adapter.parked.pop_front();
        if buffer.is_some() {
            adapter.outstanding += 1;
        }
        Ok(buffer)
    }

    /// Marks one of `replica`'s buffers completed and releases upstream every completion
    /// that is next in round-robin order.
    fn complete<E>(
        &mut self,
        tensor: usize,
        replica: usize,
        replicas: usize,
        mut release: impl FnMut() -> Result<(), E>,
    ) -> Result<(), SplitterError<E>> {
        let adapter = self
            .adapters
            .get_mut(replica)
            .ok_or(SplitterError::ReplicaOutOfRange {
                tensor,
                replica,
                replicas,
            })?;
        if adapter.outstanding == 0 {
            return Err(SplitterError::NothingOutstanding { tensor, replica });
        }
        adapter.outstanding -= 1;
        adapter.unreleased += 1;
        let broadcast = self.broadcast();
        while let Some(next) = self.adapters.get_mut(self.next_release) {
            if next.unreleased == 0 {
                break;
            }
            release().map_err(SplitterError::Upstream)?;
            next.unreleased -= 1;
            if !broadcast {
                self.next_release = (self.next_release + 1) % replicas;
            }
        }
        Ok(())
    }
}

/// Why a splitter could not be built or given another stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum SetupError {
    /// Zero replicas, or more than the `REPLICAS` capacity.
    #[error("a splitter serves 1 to {capacity} replicas, not {replicas}")]
    Replicas {
        /// Replicas asked for.
        replicas: usize,
        /// The capacity.
        capacity: usize,
    },
    /// More streams than the `TENSORS` capacity.
    #[error("a splitter holds at most {capacity} streams")]
    Tensors {
        /// The capacity.
        capacity: usize,
    },
}

/// Why a splitter call failed. `E` is the upstream IO's error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum SplitterError<E> {
    /// A tensor index no `add_*` call returned.
    #[error("tensor {tensor} is not a stream of this splitter")]
    UnknownTensor {
        /// The index.
        tensor: usize,
    },
    /// An input call on an output stream or the reverse.
    #[error(
        "tensor {tensor} is an {stream} stream, not an {asked}",
        stream = direction(!*.input),
        asked = direction(*.input)
    )]
    WrongDirection {
        /// The tensor.
        tensor: usize,
        /// True if the call was for an input.
        input: bool,
    },
    /// A replica index at or past the number of replicas.
    #[error("tensor {tensor}: replica {replica} is outside the {replicas} replicas")]
    ReplicaOutOfRange {
        /// The tensor.
        tensor: usize,
        /// The replica asked for.
        replica: usize,
        /// Number of replicas.
        replicas: usize,
    },
    /// A broadcast stream used by a replica other than 0.
    #[error("tensor {tensor} is broadcast: only replica 0 reads it, not replica {replica}")]
    BroadcastReplica {
        /// The tensor.
        tensor: usize,
        /// The replica.
        replica: usize,
    },
    /// A replica's parked buffers would exceed the `DEPTH` capacity: other replicas are too
    /// far ahead of it. Nothing was fetched.
    #[error(
        "tensor {tensor}: replica {replica} already has {depth} buffers waiting; the \
         other replicas are too far ahead of it"
    )]
    FifoFull {
        /// The tensor.
        tensor: usize,
        /// The replica whose FIFO is full.
        replica: usize,
        /// The capacity.
        depth: usize,
    },
    /// The replica has had all its buffers of this run.
    #[error("tensor {tensor}: replica {replica} has had all {cap} of its buffers this run")]
    Exhausted {
        /// The tensor.
        tensor: usize,
        /// The replica.
        replica: usize,
        /// Buffers per replica per run.
        cap: usize,
    },
    /// The upstream returned no buffer on a call that was not a prefetch.
    #[error("tensor {tensor}: the upstream IO provided no buffer for replica {replica}")]
    UpstreamEmpty {
        /// The tensor.
        tensor: usize,
        /// The replica the buffer was for.
        replica: usize,
    },
    /// A completion with no buffer handed out and not yet completed.
    #[error("tensor {tensor}: replica {replica} completed a buffer it does not hold")]
    NothingOutstanding {
        /// The tensor.
        tensor: usize,
        /// The replica.
        replica: usize,
    },
    /// The upstream IO failed.
    #[error("upstream IO failed: {0}")]
    Upstream(E),
}

/// How [`SplitterError::WrongDirection`] names a stream: `input` true for an input.
const fn direction(input: bool) -> &'static str {
    if input {
        "input"
    } else {
        "output"
    }
}
