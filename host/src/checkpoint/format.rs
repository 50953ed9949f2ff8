//! A checkpoint's bytes: safetensors with tessera's metadata, its checksum, and the atomic
//! write.
//!
//! Metadata entries (all text): `format` ([`FORMAT`]), `version`, `fingerprint` (16 hex
//! digits), `replicas`, `step`, `seed`, `rng` (the words in hex, comma-separated), one
//! `layout/NAME` per variable, and `checksum`: CRC-32 (ISO-HDLC) over every other entry
//! (`key=value\n`, keys in order) followed by every tensor (name, type, shape, length and
//! bytes, names in order).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::{mpsc, Arc};

use safetensors::tensor::{Metadata, TensorInfo};
use safetensors::{Dtype, SafeTensorError};
use tessera_core::dtype::DataType;

use super::{Checkpoint, CheckpointError, FORMAT, VERSION};
use crate::runtime::WeightsIo;
use crate::session::HostArray;

/// A tensor read from a file: its type, its shape and its bytes.
type Tensor = (Dtype, Vec<u32>, Arc<Vec<u8>>);

/// The largest header read (safetensors' own limit).
const MAX_HEADER: u64 = 100_000_000;

/// Sixteen-byte tables: the checksum runs at memory speed rather than byte by byte.
const CRC32: crc::Crc<u32, crc::Table<16>> =
    crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISO_HDLC);

/// The tensor holding variable `name`'s optimizer state.
pub(super) fn velocity_name(name: &str) -> String {
    format!("optimizer/{name}/velocity")
}

/// The metadata entries of `c`, the checksum aside.
fn entries(c: &Checkpoint) -> BTreeMap<String, String> {
    let mut meta = BTreeMap::new();
    meta.insert("format".to_string(), FORMAT.to_string());
    meta.insert("version".to_string(), VERSION.to_string());
    meta.insert("fingerprint".to_string(), format!("{:016x}", c.fingerprint));
    meta.insert("replicas".to_string(), c.replicas.to_string());
    meta.insert("step".to_string(), c.step.to_string());
    meta.insert("seed".to_string(), c.seed.to_string());
    let rng: Vec<String> = c.rng.iter().map(|w| format!("{w:08x}")).collect();
    meta.insert("rng".to_string(), rng.join(","));
    for (name, layout) in &c.layouts {
        meta.insert(format!("layout/{name}"), layout.clone());
    }
    meta
}

/// The safetensors header (its length, then its JSON padded to 8 bytes) for `tensors`,
/// laid out in name order, with `meta` and `checksum` as metadata. The checksum is written
/// as 8 hex digits, so every checksum gives a header of the same length.
fn header(
    meta: &BTreeMap<String, String>,
    tensors: &BTreeMap<String, &HostArray>,
    checksum: u32,
) -> Result<Vec<u8>, CheckpointError> {
    let mut at = 0;
    let infos = tensors
        .iter()
        .map(|(name, array)| {
            let len = array.bytes().len();
            let info = TensorInfo {
                dtype: Dtype::F32,
                shape: array.shape().iter().map(|&d| d as usize).collect(),
                data_offsets: (at, at + len),
            };
            at += len;
            (name.clone(), info)
        })
        .collect();
    let mut entries = meta.clone();
    entries.insert("checksum".to_string(), format!("{checksum:08x}"));
    let metadata = Metadata::new(Some(entries.into_iter().collect()), infos)
        .map_err(CheckpointError::Format)?;
    let mut json = serde_json::to_vec(&metadata)
        .map_err(|e| CheckpointError::Format(SafeTensorError::JsonError(e)))?;
    json.resize(json.len().next_multiple_of(8), b' ');
    let mut out = Vec::with_capacity(8 + json.len());
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(&json);
    Ok(out)
}

/// Writes `c` to `path`, atomically and without a copy of its tensors: the header with a
/// zero checksum, every tensor straight from its array while a second thread computes the
/// checksum over the same arrays, then the header again with the checksum (the same
/// length); the file is then flushed and renamed over `path`.
pub(super) fn save(c: &Checkpoint, path: &Path) -> Result<(), CheckpointError> {
    let meta = entries(c);
    let mut tensors: BTreeMap<String, &HostArray> = BTreeMap::new();
    for (name, array) in &c.weights {
        tensors.insert(name.clone(), array);
    }
    for (name, array) in &c.optimizer {
        tensors.insert(velocity_name(name), array);
    }
    let placeholder = header(&meta, &tensors, 0)?;
    let mut error = None;
    let written = crate::atomic::replace_with(path, |file| {
        std::thread::scope(|scope| {
            let digest = scope.spawn(|| {
                let mut digest = Checksum::new(&meta);
                for (name, array) in &tensors {
                    digest.tensor(name, Dtype::F32, array.shape(), array.bytes());
                }
                digest.finish()
            });
            file.write_all(&placeholder)?;
            for array in tensors.values() {
                file.write_all(array.bytes())?;
            }
            let checksum = digest
                .join()
                .map_err(|_| std::io::Error::other("the checksum thread panicked"))?;
            match header(&meta, &tensors, checksum) {
                Ok(real) if real.len() == placeholder.len() => {
                    file.seek(SeekFrom::Start(0))?;
                    file.write_all(&real)
                }
                Ok(_) => Err(std::io::Error::other("the header changed length")),
                Err(e) => {
                    error = Some(e);
                    Err(std::io::Error::other("the header could not be encoded"))
                }
            }
        })
    });
    match (written, error) {
        (_, Some(e)) => Err(e),
        (Err(source), None) => Err(CheckpointError::Io {
            path: path.to_owned(),
            source,
        }),
        (Ok(()), None) => Ok(()),
    }
}

/// Reads the checkpoint in `path`: its header first (format and version checked before
/// any tensor is read), then each tensor straight into its own array while a second thread
/// computes the checksum; the checksum is checked before the checkpoint is returned.
pub(super) fn load(path: &Path) -> Result<Checkpoint, CheckpointError> {
    let io = |source| CheckpointError::Io {
        path: path.to_owned(),
        source,
    };
    let mut file = File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    let mut prefix = [0u8; 8];
    if len < 8 {
        return Err(CheckpointError::Format(SafeTensorError::HeaderTooSmall));
    }
    file.read_exact(&mut prefix).map_err(io)?;
    let n = u64::from_le_bytes(prefix);
    if n > MAX_HEADER {
        return Err(CheckpointError::Format(SafeTensorError::HeaderTooLarge));
    }
    if n > len - 8 {
        return Err(CheckpointError::Format(
            SafeTensorError::InvalidHeaderLength,
        ));
    }
    let mut json = vec![0u8; n as usize]; // At most MAX_HEADER.
    file.read_exact(&mut json).map_err(io)?;
    let metadata: Metadata = serde_json::from_slice(&json)
        .map_err(|e| CheckpointError::Format(SafeTensorError::InvalidHeaderDeserialization(e)))?;
    if (8 + n).checked_add(metadata.data_len() as u64) != Some(len) {
        return Err(CheckpointError::Format(
            SafeTensorError::MetadataIncompleteBuffer,
        ));
    }
    let meta: BTreeMap<String, String> = metadata
        .metadata()
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let entry = |key: &'static str| {
        meta.get(key)
            .ok_or(CheckpointError::NotACheckpoint { entry: key })
    };
    if entry("format")? != FORMAT {
        return Err(CheckpointError::NotACheckpoint { entry: "format" });
    }
    let version: u32 = parse(entry("version")?, "version")?;
    if version != VERSION {
        return Err(CheckpointError::Version {
            file: version,
            supported: VERSION,
        });
    }
    let recorded = u32::from_str_radix(entry("checksum")?, 16)
        .map_err(|_| CheckpointError::NotACheckpoint { entry: "checksum" })?;
    let mut rest = meta.clone();
    rest.remove("checksum");

    // Tensors are read in file order and digested in name order, as they become ready.
    let mut by_offset: Vec<(String, TensorInfo)> = metadata
        .tensors()
        .into_iter()
        .map(|(name, info)| (name, info.clone()))
        .collect();
    by_offset.sort_by_key(|(_, info)| info.data_offsets);
    let mut by_name: Vec<String> = by_offset.iter().map(|(n, _)| n.clone()).collect();
    by_name.sort();
    let mut read: BTreeMap<String, Tensor> = BTreeMap::new();
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
        for (name, info) in &by_offset {
            let (start, end) = info.data_offsets;
            // Read into spare capacity: no pass zeroing the buffer first.
            let want = end - start;
            let mut data = Vec::with_capacity(want);
            (&mut file)
                .take(want as u64)
                .read_to_end(&mut data)
                .map_err(io)?;
            if data.len() != want {
                return Err(CheckpointError::Format(
                    SafeTensorError::MetadataIncompleteBuffer,
                ));
            }
            let shape = info.shape.iter().map(|&d| d as u32).collect();
            read.insert(name.clone(), (info.dtype, shape, Arc::new(data)));
            while let Some((name, tensor)) = by_name.get(next).and_then(|n| Some((n, read.get(n)?)))
            {
                // The digest thread ends only when the channel closes: it is alive here.
                let _ = send.send((name.clone(), tensor.clone()));
                next += 1;
            }
        }
        drop(send);
        digest
            .join()
            .map_err(|_| io(std::io::Error::other("the checksum thread panicked")))
    })?;
    if computed != recorded {
        return Err(CheckpointError::Checksum { recorded, computed });
    }
    let fingerprint = u64::from_str_radix(entry("fingerprint")?, 16).map_err(|_| {
        CheckpointError::NotACheckpoint {
            entry: "fingerprint",
        }
    })?;
    let rng = entry("rng")?
        .split(',')
        .filter(|w| !w.is_empty())
        .map(|w| u32::from_str_radix(w, 16))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| CheckpointError::NotACheckpoint { entry: "rng" })?;
    let (mut weights, mut optimizer) = (WeightsIo::new(), WeightsIo::new());
    for (name, (dtype, shape, data)) in read {
        let dtype = match dtype {
            Dtype::F32 => DataType::F32,
            Dtype::F64 => DataType::F64,
            Dtype::I32 => DataType::I32,
            Dtype::I64 => DataType::I64,
            _ => DataType::U8,
        };
        let array = HostArray::shared(dtype, &shape, data)
            .map_err(|_| CheckpointError::NotACheckpoint { entry: "tensors" })?;
        match name
            .strip_prefix("optimizer/")
            .and_then(|n| n.strip_suffix("/velocity"))
        {
            Some(variable) => optimizer.insert(variable.to_string(), array),
            None => weights.insert(name, array),
        };
    }
    Ok(Checkpoint {
        fingerprint,
        replicas: parse(entry("replicas")?, "replicas")?,
        step: parse(entry("step")?, "step")?,
        seed: parse(entry("seed")?, "seed")?,
        rng,
        weights,
        optimizer,
        layouts: meta
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("layout/")?.to_string(), v.clone())))
            .collect(),
    })
}

fn parse<T: std::str::FromStr>(text: &str, entry: &'static str) -> Result<T, CheckpointError> {
    text.parse()
        .map_err(|_| CheckpointError::NotACheckpoint { entry })
}

/// CRC-32 of the metadata entries (`key=value\n`, keys in order) and then of the tensors
/// (name, shape, length and bytes), fed in name order.
struct Checksum(crc::Digest<'static, u32, crc::Table<16>>);

impl Checksum {
    fn new(meta: &BTreeMap<String, String>) -> Self {
        let mut digest = CRC32.digest();
        for (key, value) in meta {
            digest.update(format!("{key}={value}\n").as_bytes());
        }
        Self(digest)
    }

    fn tensor(&mut self, name: &str, dtype: Dtype, shape: &[u32], data: &[u8]) {
        self.0.update(name.as_bytes());
        self.0.update(format!("{dtype:?}").as_bytes());
        for d in shape {
            self.0.update(&d.to_le_bytes());
        }
        self.0.update(&(data.len() as u64).to_le_bytes());
        self.0.update(data);
    }

    fn finish(self) -> u32 {
        self.0.finalize()
    }
}
