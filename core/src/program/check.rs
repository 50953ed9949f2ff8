//! [`Program::check`]: the rules of the module documentation, in order.

use crate::dtype::DataType;

use super::{elements, Layer, Optimizer, Program, ProgramError, ProgramRule, Stream, Variable};

impl Program {
    /// Checks every rule of the [module documentation](super) for `replicas` replicas;
    /// the first broken rule found is returned, naming its tensor or layer (the replica
    /// count and the data flow are checked first, then variables, streams, layers, anchors
    /// and the optimizer).
    pub fn check(&self, replicas: usize) -> Result<(), ProgramError> {
        if replicas == 0 {
            return Err(ProgramError::NoReplicas);
        }
        if !(1..=super::MAX_MICRO_BATCH).contains(&self.micro_batch_size) {
            return Err(ProgramError::MicroBatch {
                size: self.micro_batch_size,
            });
        }
        let flow = self.data_flow().map_err(ProgramError::DataFlow)?;
        for (i, v) in self.variables.iter().enumerate() {
            self.check_name(&v.name)
                .map_err(|rule| ProgramError::variable(v, rule))?;
            check_variable(v).map_err(|rule| ProgramError::variable(v, rule))?;
            // Resolves the grouping and builds the shard layout, naming the variable.
            self.held_elements(i, replicas)?;
        }
        for s in &self.streams {
            let error = |rule| ProgramError::Stream {
                name: s.name.clone(),
                rule,
            };
            self.check_name(&s.name).map_err(error)?;
            check_dims(&s.sample).map_err(error)?;
        }
        self.check_layers()?;
        for (i, a) in self.anchors.iter().enumerate() {
            let error = |rule| ProgramError::Anchor {
                tensor: a.tensor,
                rule,
            };
            flow.check_anchor(a.return_type)
                .map_err(|e| error(ProgramRule::ReturnType(e)))?;
            if self.anchors.iter().take(i).any(|b| b.tensor == a.tensor) {
                return Err(error(ProgramRule::AnchoredTwice));
            }
        }
        Optimizer::check_values(self.optimizer.learning_rate(), self.optimizer.momentum())
    }

    /// Non-empty, and the first variable or stream with this name.
    fn check_name(&self, name: &str) -> Result<(), ProgramRule> {
        if name.is_empty() {
            return Err(ProgramRule::EmptyName);
        }
        let uses = self.variables.iter().filter(|v| v.name == name).count()
            + self.streams.iter().filter(|s| s.name == name).count();
        if uses > 1 {
            return Err(ProgramRule::DuplicateName);
        }
        Ok(())
    }

    /// The model: widths chain from the input stream, one loss at the end.
    // Out of line: inlined into `check`, it took some 90 bytes more of a device's flash.
    #[inline(never)]
    fn check_layers(&self) -> Result<(), ProgramError> {
        let input = self
            .streams
            .get(usize::from(self.input))
            .ok_or(ProgramError::NoInput { index: self.input })?;
        let stream_error = |rule| ProgramError::Stream {
            name: input.name.clone(),
            rule,
        };
        check_type(input.dtype, DataType::F32).map_err(stream_error)?;
        let mut width = elements(&input.sample).ok_or(stream_error(ProgramRule::Size))?;
        let last = self
            .layers
            .len()
            .checked_sub(1)
            .ok_or(ProgramError::NoLoss)?;
        for (index, layer) in self.layers.iter().enumerate() {
            let error = |rule| ProgramError::Layer { index, rule };
            let is_loss = matches!(
                layer,
                Layer::SoftmaxCrossEntropy { .. } | Layer::MeanSquaredError { .. }
            );
            if is_loss != (index == last) {
                return Err(if is_loss {
                    error(ProgramRule::LossNotLast)
                } else {
                    ProgramError::NoLoss
                });
            }
            match *layer {
                Layer::Linear { weight } => {
                    let v = self.trained(weight, index)?;
                    let [outputs, inputs] = matrix(v).map_err(error)?;
                    check_width(width, inputs).map_err(error)?;
                    width = outputs;
                }
                Layer::Bias { bias } => {
                    let v = self.trained(bias, index)?;
                    if v.shape.len() != 1 {
                        return Err(error(ProgramRule::Rank {
                            expected: 1,
                            actual: v.shape.len(),
                        }));
                    }
                    check_width(width, v.shape[0] as usize).map_err(error)?;
                }
                Layer::Relu => {}
                Layer::Dropout { rate } => {
                    if !(0.0..1.0).contains(&rate) {
                        return Err(error(ProgramRule::Rate));
                    }
                }
                Layer::SoftmaxCrossEntropy { labels } => {
                    let s = self.loss_stream(labels, DataType::I32).map_err(error)?;
                    let per_sample = elements(&s.sample).unwrap_or(0);
                    if per_sample != 1 {
                        return Err(error(ProgramRule::Labels { per_sample }));
                    }
                    if width < 2 {
                        return Err(error(ProgramRule::Classes));
                    }
                }
                Layer::MeanSquaredError { targets } => {
                    let s = self.loss_stream(targets, DataType::F32).map_err(error)?;
                    check_width(width, elements(&s.sample).unwrap_or(0)).map_err(error)?;
                }
            }
        }
        Ok(())
    }

    /// Variable `index` as layer `layer`'s parameter: it exists and no other layer uses it.
    fn trained(&self, index: u8, layer: usize) -> Result<&Variable, ProgramError> {
        let error = |rule| ProgramError::Layer { index: layer, rule };
        let v = self
            .variables
            .get(usize::from(index))
            .ok_or(error(ProgramRule::Missing { index }))?;
        if self.layer_of(usize::from(index)) != Some(layer) {
            return Err(error(ProgramRule::UsedTwice));
        }
        Ok(v)
    }

    fn stream(&self, index: u8) -> Result<&Stream, ProgramRule> {
        self.streams
            .get(usize::from(index))
            .ok_or(ProgramRule::Missing { index })
    }

    /// The labels or targets stream `index`, of type `dtype`, not the input.
    fn loss_stream(&self, index: u8, dtype: DataType) -> Result<&Stream, ProgramRule> {
        let s = self.stream(index)?;
        if index == self.input {
            return Err(ProgramRule::InputStream);
        }
        check_type(s.dtype, dtype)?;
        Ok(s)
    }
}

fn check_variable(v: &Variable) -> Result<(), ProgramRule> {
    check_type(v.dtype, DataType::F32)?;
    check_dims(&v.shape)
}

fn check_type(actual: DataType, expected: DataType) -> Result<(), ProgramRule> {
    if actual == expected {
        Ok(())
    } else {
        Err(ProgramRule::Type { expected, actual })
    }
}

fn check_dims(dims: &[u32]) -> Result<(), ProgramRule> {
    if dims.is_empty() || dims.contains(&0) {
        return Err(ProgramRule::Dimensions);
    }
    elements(dims).map(|_| ()).ok_or(ProgramRule::Size)
}

fn check_width(expected: usize, actual: usize) -> Result<(), ProgramRule> {
    if expected == actual {
        Ok(())
    } else {
        Err(ProgramRule::Width { expected, actual })
    }
}

/// `[outputs, inputs]` of a linear layer's weight.
fn matrix(v: &Variable) -> Result<[usize; 2], ProgramRule> {
    match v.shape[..] {
        [outputs, inputs] => Ok([outputs as usize, inputs as usize]),
        _ => Err(ProgramRule::Rank {
            expected: 2,
            actual: v.shape.len(),
        }),
    }
}
