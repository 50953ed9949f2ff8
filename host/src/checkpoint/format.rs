//! A checkpoint's bytes: safetensors with tessera's metadata, its checksum, and the atomic
//! write.
//!
//! Metadata entries (all text): `format` ([`FORMAT`]), `version`, `fingerprint` (16 hex
//! digits), `replicas`, `step`, `seed`, `rng` (the words in hex, comma-separated), one
//! `layout/NAME` per variable, and `checksum`: CRC-32 (ISO-HDLC) over every other entry
//! (`key=value\n`, keys in order) followed by every tensor (name, type, shape and bytes,
//! names in order).

use std::collections::BTreeMap;

use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use tessera_core::dtype::DataType;

use super::{Checkpoint, CheckpointError, FORMAT, VERSION};
use crate::runtime::WeightsIo;
use crate::session::HostArray;

/// Sixteen-byte tables: the checksum runs at memory speed rather than byte by byte.
const CRC32: crc::Crc<u32, crc::Table<16>> =
    crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISO_HDLC);

/// The tensor holding variable `name`'s optimizer state.
pub(super) fn velocity_name(name: &str) -> String {
    format!("optimizer/{name}/velocity")
}

/// The file's bytes.
pub(super) fn encode(c: &Checkpoint) -> Result<Vec<u8>, CheckpointError> {
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
    let mut tensors: BTreeMap<String, &HostArray> = BTreeMap::new();
    for (name, array) in &c.weights {
        tensors.insert(name.clone(), array);
    }
    for (name, array) in &c.optimizer {
        tensors.insert(velocity_name(name), array);
    }
    let checksum = checksum(
        &meta,
        tensors
            .iter()
            .map(|(n, a)| (n.as_str(), a.shape(), a.bytes())),
    );
    meta.insert("checksum".to_string(), format!("{checksum:08x}"));
    let views = tensors
        .iter()
        .map(|(name, array)| {
            let shape = array.shape().iter().map(|&d| d as usize).collect();
            TensorView::new(Dtype::F32, shape, array.bytes()).map(|v| (name.clone(), v))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(CheckpointError::Format)?;
    safetensors::serialize(views, Some(meta.into_iter().collect())).map_err(CheckpointError::Format)
}

/// A checkpoint from the file's bytes, after its format, version and checksum checks.
pub(super) fn decode(bytes: &[u8]) -> Result<Checkpoint, CheckpointError> {
    let file = SafeTensors::deserialize(bytes).map_err(CheckpointError::Format)?;
    let (_, header) = SafeTensors::read_metadata(bytes).map_err(CheckpointError::Format)?;
    let meta: BTreeMap<String, String> = header
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
    let mut views: Vec<(String, TensorView<'_>)> = file.tensors();
    views.sort_by(|a, b| a.0.cmp(&b.0));
    let mut rest = meta.clone();
    rest.remove("checksum");
    let shapes: Vec<Vec<u32>> = views
        .iter()
        .map(|(_, v)| v.shape().iter().map(|&d| d as u32).collect())
        .collect();
    let computed = checksum(
        &rest,
        views
            .iter()
            .zip(&shapes)
            .map(|((n, v), s)| (n.as_str(), s.as_slice(), v.data())),
    );
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
    for ((name, view), shape) in views.iter().zip(&shapes) {
        let dtype = match view.dtype() {
            Dtype::F32 => DataType::F32,
            Dtype::F64 => DataType::F64,
            Dtype::I32 => DataType::I32,
            Dtype::I64 => DataType::I64,
            _ => DataType::U8,
        };
        let array = HostArray::new(dtype, shape, view.data().to_vec())
            .map_err(|_| CheckpointError::NotACheckpoint { entry: "tensors" })?;
        match name
            .strip_prefix("optimizer/")
            .and_then(|n| n.strip_suffix("/velocity"))
        {
            Some(variable) => optimizer.insert(variable.to_string(), array),
            None => weights.insert(name.clone(), array),
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

/// CRC-32 of the metadata entries and the tensors, both in name order.
fn checksum<'a>(
    meta: &BTreeMap<String, String>,
    tensors: impl Iterator<Item = (&'a str, &'a [u32], &'a [u8])>,
) -> u32 {
    let mut digest = CRC32.digest();
    for (key, value) in meta {
        digest.update(format!("{key}={value}\n").as_bytes());
    }
    for (name, shape, data) in tensors {
        digest.update(name.as_bytes());
        for d in shape {
            digest.update(&d.to_le_bytes());
        }
        digest.update(&(data.len() as u64).to_le_bytes());
        digest.update(data);
    }
    digest.finalize()
}
