//! Planning a load: each file opened under the input rules and its header read, each
//! tensor checked under its rule (its element type, its shape, the rule's dimension and that
//! it divides), and where each worker's part lies in its file.

use std::path::Path;

use safetensors::tensor::TensorInfo;
use safetensors::Dtype;
use tessera_core::dtype::DataType;
use tessera_core::wire::Target;

use super::part::Cut;
use super::{LoadError, ShardRule};
use crate::array::{byte_len, ArrayError};
use crate::input::safetensors::{Header, HeaderError};
use crate::input::Input;
use crate::transport::group::{Place, Runs};
use crate::transport::Span;

/// One tensor, checked and ready to write.
pub(super) struct Planned {
    pub(super) name: String,
    pub(super) dtype: DataType,
    /// Each worker's register shape.
    pub(super) shape: Vec<u32>,
    pub(super) source: Source,
}

/// Where each worker's bytes lie.
pub(super) enum Source {
    /// Part `worker % cut.parts` of one tensor of the (first) file.
    Split { cut: Cut },
    /// Worker `w`'s bytes, the whole of its register, at offset `w` of file `w`.
    PerWorker(Vec<u64>),
}

impl Planned {
    /// Worker `worker`'s register (`id`): the part it holds, whole.
    pub(super) fn place(&self, worker: usize, id: u16) -> Place {
        // The shape's bytes were checked to fit when the tensor was planned.
        let len = byte_len(self.dtype, &self.shape).unwrap_or(0);
        Place {
            member: worker,
            span: Span {
                target: Target::Register(id),
                offset: 0,
                len,
            },
        }
    }

    /// Where worker `worker`'s part lies in its file.
    pub(super) fn runs(&self, worker: usize) -> Runs {
        match &self.source {
            Source::Split { cut } => cut.runs(worker % cut.parts.max(1)),
            Source::PerWorker(offsets) => {
                let len = byte_len(self.dtype, &self.shape).unwrap_or(0);
                Runs {
                    offset: offsets[worker % offsets.len().max(1)],
                    run: len,
                    stride: len,
                    rows: 1,
                }
            }
        }
    }
}

/// `file` opened under the input rules, and its tensors (sorted by name, so register ids
/// follow the names) as its checked header describes them.
pub(super) fn open(file: &Path) -> Result<(Input, Vec<(String, Described)>), LoadError> {
    let input = Input::open(file)?;
    let header = Header::read(&input).map_err(|e| match e {
        HeaderError::Input(e) => LoadError::Input(e),
        HeaderError::Claim {
            path,
            part,
            claimed,
            actual,
        } => LoadError::Claim {
            file: path,
            part,
            claimed,
            actual,
        },
        HeaderError::Format { path, source } => LoadError::Format { file: path, source },
    })?;
    let tensors = header
        .by_name()
        .into_iter()
        .map(|(name, info)| (name, Described::of(&header, info)))
        .collect();
    Ok((input, tensors))
}

/// The tessera type of a safetensors type.
pub(super) fn element_type(file: &Path, tensor: &str, dtype: Dtype) -> Result<DataType, LoadError> {
    Ok(match dtype {
        Dtype::BOOL => DataType::Bool,
        Dtype::U8 => DataType::U8,
        Dtype::I8 => DataType::I8,
        Dtype::F8_E5M2 => DataType::F8E5M2,
        Dtype::F8_E4M3 => DataType::F8E4M3,
        Dtype::I16 => DataType::I16,
        Dtype::U16 => DataType::U16,
        Dtype::F16 => DataType::F16,
        Dtype::BF16 => DataType::BF16,
        Dtype::I32 => DataType::I32,
        Dtype::U32 => DataType::U32,
        Dtype::F32 => DataType::F32,
        Dtype::F64 => DataType::F64,
        Dtype::I64 => DataType::I64,
        Dtype::U64 => DataType::U64,
        _ => {
            return Err(LoadError::Dtype {
                file: file.to_path_buf(),
                tensor: tensor.into(),
                dtype,
            })
        }
    })
}

/// What planning needs of a tensor: its type, its shape, where its data start in the file
/// and how long they are.
pub(super) struct Described {
    pub(super) dtype: Dtype,
    pub(super) shape: Vec<usize>,
    pub(super) offset: u64,
    pub(super) data_len: usize,
}

impl Described {
    fn of(header: &Header, info: &TensorInfo) -> Self {
        Self {
            dtype: info.dtype,
            shape: info.shape.clone(),
            offset: header.start_of(info),
            data_len: info.data_offsets.1 - info.data_offsets.0,
        }
    }
}

/// Checks tensor `name` under `rule` across `span` workers and plans its parts.
pub(super) fn plan_split(
    file: &Path,
    name: String,
    view: &Described,
    rule: ShardRule,
    span: usize,
) -> Result<Planned, LoadError> {
    let dtype = element_type(file, &name, view.dtype)?;
    let shape = view.shape.clone();
    let (dim, parts) = match rule {
        ShardRule::Replicate => (0, 1),
        ShardRule::Split { dim } => {
            let Some(&extent) = shape.get(dim) else {
                return Err(LoadError::NoDim {
                    file: file.to_path_buf(),
                    tensor: name,
                    shape,
                    rule,
                });
            };
            if extent % span != 0 {
                return Err(LoadError::Indivisible {
                    file: file.to_path_buf(),
                    tensor: name,
                    shape,
                    rule,
                    workers: span,
                });
            }
            (dim, span)
        }
    };
    let checked = shape
        .iter()
        .map(|&d| u32::try_from(d).map_err(|_| ArrayError::Overflow))
        .collect::<Result<Vec<u32>, _>>()
        .and_then(|whole| {
            let expected = byte_len(dtype, &whole)?;
            if view.data_len != expected {
                return Err(ArrayError::Length {
                    expected,
                    actual: view.data_len,
                });
            }
            Ok(whole)
        });
    let mut part_shape = match checked {
        Ok(whole) => whole,
        Err(source) => {
            return Err(LoadError::Shape {
                file: file.to_path_buf(),
                tensor: name,
                shape,
                source,
            })
        }
    };
    if let Some(extent) = part_shape.get_mut(dim) {
        // A part is no larger than the whole dimension, which fits u32 (checked above).
        *extent = (shape[dim] / parts) as u32;
    }
    Ok(Planned {
        name,
        dtype,
        shape: part_shape,
        source: Source::Split {
            cut: Cut {
                offset: view.offset,
                shape,
                size: dtype.size(),
                dim,
                parts,
            },
        },
    })
}
