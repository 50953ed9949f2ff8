//! Building a program one tensor at a time, with the capacities checked as it grows.

use crate::dtype::DataType;
use crate::grouping::{GroupingSpec, RetrievalMode};
use crate::stream::AnchorReturnType;

use super::{Anchor, AnchorTensor, Layer, Optimizer, Program, Sharding, Stream, Variable};

/// A program that would outgrow a fixed capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum CapacityError {
    /// More variables, streams, anchors or layers than the program holds.
    #[error("a program holds at most {max} {what}")]
    TooMany {
        /// What was added.
        what: &'static str,
        /// How many fit.
        max: usize,
    },
    /// A name longer than [`MAX_NAME`](super::MAX_NAME) bytes.
    #[error("names are at most {max} bytes", max = super::MAX_NAME)]
    NameTooLong,
    /// More than [`MAX_VARIABLE_RANK`](super::MAX_VARIABLE_RANK) dimensions.
    #[error("shapes have at most {max} dimensions", max = super::MAX_VARIABLE_RANK)]
    RankTooLarge,
}

impl Program {
    /// An empty program (no tensors, no layers; input stream 0, not instrumented).
    ///
    /// ```
    /// use tessera_core::dtype::DataType;
    /// use tessera_core::grouping::{CommGroup, GroupingSpec, RetrievalMode};
    /// use tessera_core::program::{Layer, Optimizer, Program, ProgramError, Sharding};
    ///
    /// // 2 batches of 4 micro-batches per step, plain SGD.
    /// let mut p = Program::new(2, 4, Optimizer::Sgd { learning_rate: 0.05 });
    /// p.input = p.add_stream("x", DataType::F32, &[8], false)?;
    /// let y = p.add_stream("y", DataType::F32, &[2], false)?;
    /// let each = GroupingSpec::Comm(CommGroup::None); // a weight of its own per replica
    /// let w = p.add_variable("w", &[2, 8], each, RetrievalMode::AllReplicas, Sharding::None)?;
    /// p.add_layer(Layer::Linear { weight: w })?;
    /// assert_eq!(p.check(4), Err(ProgramError::NoLoss)); // the rules are checked whole
    /// p.add_layer(Layer::MeanSquaredError { targets: y })?;
    /// assert_eq!(p.check(4), Ok(()));
    /// # Ok::<(), tessera_core::program::CapacityError>(())
    /// ```
    pub const fn new(batches_per_step: u32, accumulation: u32, optimizer: Optimizer) -> Self {
        Self {
            variables: heapless::Vec::new(),
            streams: heapless::Vec::new(),
            anchors: heapless::Vec::new(),
            layers: heapless::Vec::new(),
            input: 0,
            batches_per_step,
            accumulation,
            micro_batch_size: 1,
            optimizer,
            instrumented: false,
        }
    }

    /// Adds an `f32` variable; returns its index.
    pub fn add_variable(
        &mut self,
        name: &str,
        shape: &[u32],
        grouping: GroupingSpec,
        retrieval: RetrievalMode,
        sharding: Sharding,
    ) -> Result<u8, CapacityError> {
        let variable = Variable {
            name: name.try_into().map_err(|_| CapacityError::NameTooLong)?,
            dtype: DataType::F32,
            shape: heapless::Vec::from_slice(shape).map_err(|_| CapacityError::RankTooLarge)?,
            grouping,
            retrieval,
            sharding,
        };
        let index = self.variables.len() as u8; // Capacities are far below 256.
        self.variables
            .push(variable)
            .map_err(|_| too_many("variables", super::MAX_VARIABLES))?;
        Ok(index)
    }

    /// Adds a stream; returns its index.
    pub fn add_stream(
        &mut self,
        name: &str,
        dtype: DataType,
        sample: &[u32],
        broadcast: bool,
    ) -> Result<u8, CapacityError> {
        let stream = Stream {
            name: name.try_into().map_err(|_| CapacityError::NameTooLong)?,
            dtype,
            sample: heapless::Vec::from_slice(sample).map_err(|_| CapacityError::RankTooLarge)?,
            broadcast,
        };
        let index = self.streams.len() as u8;
        self.streams
            .push(stream)
            .map_err(|_| too_many("streams", super::MAX_STREAMS))?;
        Ok(index)
    }

    /// Anchors `tensor`.
    pub fn add_anchor(
        &mut self,
        tensor: AnchorTensor,
        return_type: AnchorReturnType,
    ) -> Result<(), CapacityError> {
        self.anchors
            .push(Anchor {
                tensor,
                return_type,
            })
            .map_err(|_| too_many("anchors", super::MAX_ANCHORS))
    }

    /// Appends a layer to the model.
    pub fn add_layer(&mut self, layer: Layer) -> Result<(), CapacityError> {
        self.layers
            .push(layer)
            .map_err(|_| too_many("layers", super::MAX_LAYERS))
    }
}

fn too_many(what: &'static str, max: usize) -> CapacityError {
    CapacityError::TooMany { what, max }
}
