//! Reading a checkpoint without trusting it.
//!
//! # Rules
//!
//! - **Only a regular file**, opened without blocking and read no further than its size
//!   ([`crate::input`]).
//! - **Every size is checked against the file before it is allocated**, by the reader of
//!   safetensors headers every file tessera reads shares ([`crate::input::safetensors`]):
//!   the header's length against the bytes after it (and safetensors' limit of 100 MB),
//!   each tensor's range against the data there is, the data's total against the file's
//!   size. A claim that does not fit is [`CheckpointError::Claim`], naming the part, the
//!   size claimed and the size there is; nothing of the claimed size is allocated.
//! - **With the program known** ([`Checkpoint::load_for`](super::Checkpoint::load_for)),
//!   the fingerprint and every tensor's name, type and shape are checked against the
//!   program from the header alone, before any tensor byte is read: no tensor is allocated
//!   larger than its variable, however large a (sparse) file agrees with its header.
//! - **The checksum before the values.** Values are read only from a file whose checksum
//!   matches; then a value that no run writes is refused ([`CheckpointError::Impossible`]):
//!   a step above [`MAX_STEP`], replicas outside `1..=MAX_REPLICAS`, an RNG state that is
//!   not [`RNG_WORDS`] per replica or is all zeros for a replica (a generator never reaches
//!   that state), a data record of no samples; and an `f32` tensor holding a value no run
//!   trains from ([`CheckpointError::BadValue`]: NaN, an infinity, a magnitude of 2^64 or
//!   more), naming the tensor and the value's index.
//! - **A summary keeps no tensor.** [`scan`] reads the tensor bytes through the checksum in
//!   pieces of [`PIECE`] bytes: `tessera inspect` holds no more than that at a time.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{mpsc, Arc};

use safetensors::tensor::{Metadata, TensorInfo};
use safetensors::Dtype;
use tessera_core::dtype::DataType;

use super::format::{Checksum, DATA_FINGERPRINT, DATA_SAMPLES};
use super::{Checkpoint, CheckpointError, DataRecord, Summary, FORMAT, MAX_STEP, VERSION};
use crate::array::HostArray;
use crate::input::safetensors::{self as safetensors_header, HeaderError};
use crate::input::Input;
use crate::runtime::{WeightsIo, MAX_REPLICAS, RNG_WORDS};

/// A tensor read from a file: its type, its shape and its bytes.
type Tensor = (Dtype, Vec<u32>, Arc<Vec<u8>>);

/// Bytes a [`scan`] holds at a time.
pub(super) const PIECE: usize = 1 << 20;

/// What the program needs the file to hold: its fingerprint, and every tensor's host shape
/// (all `f32`), by tensor name.
#[derive(Debug)]
pub(super) struct Expected {
    pub fingerprint: u64,
    pub tensors: BTreeMap<String, Vec<u32>>,
}

/// A checked header and the open file, positioned at the first tensor byte.
struct Header {
    input: Input,
    meta: BTreeMap<String, String>,
    /// Tensors in file order, each with its shape in 32 bits.
    tensors: Vec<(String, TensorInfo, Vec<u32>)>,
    /// Where the tensor data starts.
    data_start: u64,
    /// The checksum recorded in the metadata.
    recorded: u32,
}

/// The metadata values, checked.
struct Fields {
    fingerprint: u64,
    replicas: usize,
    step: u64,
    seed: u64,
    rng: Vec<u32>,
    layouts: BTreeMap<String, String>,
    data: Option<DataRecord>,
}

fn data_type(dtype: Dtype) -> DataType {
    match dtype {
        Dtype::F32 => DataType::F32,
        Dtype::F64 => DataType::F64,
        Dtype::I32 => DataType::I32,
        Dtype::I64 => DataType::I64,
        _ => DataType::U8,
    }
}

/// Reads and checks the header: sizes against the file ([`crate::input::safetensors`]), format,
/// version, the checksum's presence, and (with `expected`) the program's fingerprint and
/// tensors; the file is left at the first tensor byte.
fn read_header(path: &Path, expected: Option<&Expected>) -> Result<Header, CheckpointError> {
    let mut input = Input::open(path).map_err(CheckpointError::Input)?;
    let header = safetensors_header::Header::read(&input).map_err(|e| match e {
        HeaderError::Input(e) => CheckpointError::Input(e),
        HeaderError::Claim {
            path,
            part,
            claimed,
            actual,
        } => CheckpointError::Claim {
            path,
            field: part,
            claimed,
            actual,
        },
        HeaderError::Format { source, .. } => CheckpointError::Format(source),
    })?;
    let tensors = tensor_list(&header.metadata)?;
    let meta: BTreeMap<String, String> = header
        .metadata
        .metadata()
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let recorded = check_format(&meta)?;
    if let Some(expected) = expected {
        check_expected(&meta, &tensors, expected)?;
    }
    input
        .seek(header.data_start)
        .map_err(CheckpointError::Input)?;
    Ok(Header {
        input,
        meta,
        tensors,
        data_start: header.data_start,
        recorded,
    })
}

/// The header's tensors in file order, each with its shape in 32 bits (their ranges were
/// checked against the file with the header).
fn tensor_list(
    metadata: &Metadata,
) -> Result<Vec<(String, TensorInfo, Vec<u32>)>, CheckpointError> {
    let mut tensors = Vec::new();
    for name in metadata.offset_keys() {
        let Some(info) = metadata.info(&name) else {
            continue;
        };
        let mut shape = Vec::with_capacity(info.shape.len());
        for &d in &info.shape {
            let d32 = u32::try_from(d).map_err(|_| CheckpointError::Dimension {
                tensor: name.clone(),
                dimension: d as u64,
            })?;
            shape.push(d32);
        }
        tensors.push((name, info.clone(), shape));
    }
    Ok(tensors)
}

/// The metadata's format and version, this code's; returns the checksum it records.
fn check_format(meta: &BTreeMap<String, String>) -> Result<u32, CheckpointError> {
    if entry(meta, "format")? != FORMAT {
        return Err(CheckpointError::NotACheckpoint { entry: "format" });
    }
    let version: u32 = parse(entry(meta, "version")?, "version")?;
    if version != VERSION {
        return Err(CheckpointError::Version {
            file: version,
            supported: VERSION,
        });
    }
    u32::from_str_radix(entry(meta, "checksum")?, 16)
        .map_err(|_| CheckpointError::NotACheckpoint { entry: "checksum" })
}

/// The header's fingerprint and tensors against the program's (see the module's rules).
fn check_expected(
    meta: &BTreeMap<String, String>,
    tensors: &[(String, TensorInfo, Vec<u32>)],
    expected: &Expected,
) -> Result<(), CheckpointError> {
    let file = hex64(entry(meta, "fingerprint")?, "fingerprint")?;
    if file != expected.fingerprint {
        return Err(CheckpointError::Program {
            file,
            program: expected.fingerprint,
        });
    }
    for (name, info, shape) in tensors {
        let Some(want) = expected.tensors.get(name) else {
            return Err(CheckpointError::Unexpected {
                tensor: name.clone(),
            });
        };
        if info.dtype != Dtype::F32 || shape != want {
            return Err(CheckpointError::Shape {
                tensor: name.clone(),
                expected: want.clone(),
                actual: shape.clone(),
                dtype: data_type(info.dtype),
            });
        }
    }
    for name in expected.tensors.keys() {
        if !tensors.iter().any(|(n, _, _)| n == name) {
            return Err(CheckpointError::Missing {
                tensor: name.clone(),
            });
        }
    }
    Ok(())
}

/// Reads the checkpoint in `path` (see the module's rules): each tensor straight into its
/// own array while a second thread computes the checksum, which is checked before any
/// value is used.
pub(super) fn load(
    path: &Path,
    expected: Option<&Expected>,
) -> Result<Checkpoint, CheckpointError> {
    let mut header = read_header(path, expected)?;
    let (read, computed) = read_tensors(path, &mut header)?;
    check_checksum(header.recorded, computed)?;
    let fields = fields(&header.meta)?;
    let (weights, optimizer) = arrays(read)?;
    Ok(Checkpoint {
        fingerprint: fields.fingerprint,
        replicas: fields.replicas,
        step: fields.step,
        seed: fields.seed,
        rng: fields.rng,
        weights,
        optimizer,
        layouts: fields.layouts,
        data: fields.data,
    })
}

/// Every tensor of `header`, read in file order while a second thread digests them in name
/// order as they become ready; returns them by name, with the checksum computed.
fn read_tensors(
    path: &Path,
    header: &mut Header,
) -> Result<(BTreeMap<String, Tensor>, u32), CheckpointError> {
    let mut rest = header.meta.clone();
    rest.remove("checksum");
    let mut by_name: Vec<String> = header.tensors.iter().map(|(n, _, _)| n.clone()).collect();
    by_name.sort();
    let mut read: BTreeMap<String, Tensor> = BTreeMap::new();
    let (input, tensors) = (&mut header.input, &header.tensors);
    let computed = std::thread::scope(|scope| -> Result<u32, CheckpointError> {
        let (send, receive) = mpsc::channel::<(String, Tensor)>();
        let digest = scope.spawn(move || {
            let mut digest = Checksum::new(&rest);
            for (name, (dtype, shape, data)) in receive {
                digest.tensor(&name, dtype, &shape, &data);
            }
            digest.finish()
        });
        let mut next = 0;
        for (name, info, shape) in tensors {
            let data = read_tensor(path, input, info)?;
            read.insert(name.clone(), (info.dtype, shape.clone(), Arc::new(data)));
            while let Some((name, tensor)) = by_name.get(next).and_then(|n| Some((n, read.get(n)?)))
            {
                // The digest thread ends only when the channel closes: it is alive here.
                let _ = send.send((name.clone(), tensor.clone()));
                next += 1;
            }
        }
        drop(send);
        digest.join().map_err(|_| {
            CheckpointError::Input(crate::input::InputError::Io {
                path: path.to_owned(),
                source: std::io::Error::other("the checksum thread panicked"),
            })
        })
    })?;
    Ok((read, computed))
}

/// The bytes of the tensor `info` describes, read from where `input` stands.
fn read_tensor(
    path: &Path,
    input: &mut Input,
    info: &TensorInfo,
) -> Result<Vec<u8>, CheckpointError> {
    let (start, end) = info.data_offsets;
    // Within the file (checked with the header): read into spare capacity, no pass
    // zeroing the buffer first.
    let want = end - start;
    let mut data = Vec::new();
    data.try_reserve_exact(want).map_err(|_| {
        CheckpointError::Input(crate::input::InputError::TooLarge {
            path: path.to_owned(),
            size: want as u64,
            limit: isize::MAX as u64,
            what: "checkpoint tensor held in memory",
        })
    })?;
    input
        .read_into(want as u64, &mut data)
        .map_err(CheckpointError::Input)?;
    Ok(data)
}

/// The checksum the bytes gave against the one the file records.
fn check_checksum(recorded: u32, computed: u32) -> Result<(), CheckpointError> {
    if computed != recorded {
        return Err(CheckpointError::Checksum { recorded, computed });
    }
    Ok(())
}

/// The tensors read as arrays, each checked for values no run trains from: the weights by
/// name, and the optimizer's velocities (`optimizer/NAME/velocity`) by variable.
fn arrays(read: BTreeMap<String, Tensor>) -> Result<(WeightsIo, WeightsIo), CheckpointError> {
    let (mut weights, mut optimizer) = (WeightsIo::new(), WeightsIo::new());
    for (name, (dtype, shape, data)) in read {
        let array = HostArray::shared(data_type(dtype), &shape, data)
            .map_err(|_| CheckpointError::NotACheckpoint { entry: "tensors" })?;
        super::check_values(&name, &array)?;
        match name
            .strip_prefix("optimizer/")
            .and_then(|n| n.strip_suffix("/velocity"))
        {
            Some(variable) => optimizer.insert(variable.to_string(), array),
            None => weights.insert(name, array),
        };
    }
    Ok((weights, optimizer))
}

/// Checks the checkpoint in `path` as [`load`] does, holding no tensor: their bytes go
/// through the checksum [`PIECE`] bytes at a time, in name order.
pub(super) fn scan(path: &Path) -> Result<Summary, CheckpointError> {
    let mut header = read_header(path, None)?;
    let mut rest = header.meta.clone();
    rest.remove("checksum");
    let mut digest = Checksum::new(&rest);
    let mut by_name: Vec<&(String, TensorInfo, Vec<u32>)> = header.tensors.iter().collect();
    by_name.sort_by(|a, b| a.0.cmp(&b.0));
    let mut piece = vec![0u8; PIECE];
    for (name, info, shape) in by_name {
        let (start, end) = info.data_offsets;
        digest.tensor_head(name, info.dtype, shape, (end - start) as u64);
        header
            .input
            .seek(header.data_start + start as u64)
            .map_err(CheckpointError::Input)?;
        let mut left = end - start;
        while left > 0 {
            let n = left.min(PIECE);
            header
                .input
                .read_exact(&mut piece[..n])
                .map_err(CheckpointError::Input)?;
            digest.update(&piece[..n]);
            left -= n;
        }
    }
    check_checksum(header.recorded, digest.finish())?;
    let fields = fields(&header.meta)?;
    Ok(Summary {
        fingerprint: fields.fingerprint,
        replicas: fields.replicas,
        step: fields.step,
        seed: fields.seed,
        layouts: fields.layouts,
        data: fields.data,
        tensors: header
            .tensors
            .into_iter()
            .map(|(name, info, shape)| (name, data_type(info.dtype), shape))
            .collect(),
    })
}

/// The metadata's values, each against the rule it must keep (see the module's rules).
fn fields(meta: &BTreeMap<String, String>) -> Result<Fields, CheckpointError> {
    let fingerprint = hex64(entry(meta, "fingerprint")?, "fingerprint")?;
    let replicas: usize = parse(entry(meta, "replicas")?, "replicas")?;
    if !(1..=MAX_REPLICAS).contains(&replicas) {
        let rule = format!("a run has 1 to {MAX_REPLICAS} replicas");
        return Err(impossible("replicas", &replicas, rule));
    }
    let step: u64 = parse(entry(meta, "step")?, "step")?;
    if step > MAX_STEP {
        let rule = format!("a step count is at most {MAX_STEP} (2^48)");
        return Err(impossible("step", &step, rule));
    }
    let seed = parse(entry(meta, "seed")?, "seed")?;
    Ok(Fields {
        fingerprint,
        replicas,
        step,
        seed,
        rng: rng_state(meta, replicas)?,
        layouts: meta
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("layout/")?.to_string(), v.clone())))
            .collect(),
        data: data_record(meta)?,
    })
}

/// A value no run writes, `value` of `entry`, refused for `rule`.
fn impossible(entry: &'static str, value: &dyn ToString, rule: String) -> CheckpointError {
    CheckpointError::Impossible {
        entry,
        value: value.to_string(),
        rule,
    }
}

/// The replicas' RNG state: [`RNG_WORDS`] words for each of `replicas`, none all zeros.
fn rng_state(
    meta: &BTreeMap<String, String>,
    replicas: usize,
) -> Result<Vec<u32>, CheckpointError> {
    let rng = entry(meta, "rng")?
        .split(',')
        .filter(|w| !w.is_empty())
        .map(|w| u32::from_str_radix(w, 16))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| CheckpointError::NotACheckpoint { entry: "rng" })?;
    // `replicas` is at most MAX_REPLICAS: no overflow.
    if rng.len() != RNG_WORDS * replicas {
        let rule = format!(
            "{RNG_WORDS} words per replica, {} for {replicas} replicas",
            RNG_WORDS * replicas
        );
        return Err(impossible("rng", &format!("{} words", rng.len()), rule));
    }
    if let Some(r) = rng
        .chunks(RNG_WORDS)
        .position(|s| s.iter().all(|&w| w == 0))
    {
        let rule = "a generator never reaches an all-zero state".to_string();
        return Err(impossible(
            "rng",
            &format!("all zeros for replica {r}"),
            rule,
        ));
    }
    Ok(rng)
}

/// The data record, when the metadata has one: both its entries, at least one sample.
fn data_record(meta: &BTreeMap<String, String>) -> Result<Option<DataRecord>, CheckpointError> {
    let (samples, fingerprint) = match (meta.get(DATA_SAMPLES), meta.get(DATA_FINGERPRINT)) {
        (None, None) => return Ok(None),
        pair => pair,
    };
    let samples: u64 = parse(
        samples.ok_or(CheckpointError::NotACheckpoint {
            entry: DATA_SAMPLES,
        })?,
        DATA_SAMPLES,
    )?;
    if samples == 0 {
        let rule = "a run trains on at least one sample".to_string();
        return Err(impossible(DATA_SAMPLES, &samples, rule));
    }
    let fingerprint = fingerprint.ok_or(CheckpointError::NotACheckpoint {
        entry: DATA_FINGERPRINT,
    })?;
    Ok(Some(DataRecord {
        samples,
        fingerprint: hex64(fingerprint, DATA_FINGERPRINT)?,
    }))
}

fn entry<'a>(
    meta: &'a BTreeMap<String, String>,
    key: &'static str,
) -> Result<&'a String, CheckpointError> {
    meta.get(key)
        .ok_or(CheckpointError::NotACheckpoint { entry: key })
}

fn hex64(text: &str, entry: &'static str) -> Result<u64, CheckpointError> {
    u64::from_str_radix(text, 16).map_err(|_| CheckpointError::NotACheckpoint { entry })
}

fn parse<T: std::str::FromStr>(text: &str, entry: &'static str) -> Result<T, CheckpointError> {
    text.parse()
        .map_err(|_| CheckpointError::NotACheckpoint { entry })
}
