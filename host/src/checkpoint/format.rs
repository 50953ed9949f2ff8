//! A checkpoint's bytes: safetensors with tessera's metadata, its checksum, and the atomic
//! write.
//!
//! Metadata entries (all text): `format` ([`FORMAT`]), `version`, `fingerprint` (16 hex
//! digits), `replicas`, `step`, `seed`, `rng` (the words in hex, comma-separated), one
//! `layout/NAME` per variable, `data/samples` and `data/fingerprint` (16 hex digits) when
//! the run recorded its data, and `checksum`: CRC-32 (ISO-HDLC) over every other entry
//! (`key=value\n`, keys in order) followed by every tensor (name, type, shape, length and
//! bytes, names in order).
//!
//! **Same state, same bytes.** The header's JSON is written with every key in order (the
//! metadata entries, then the tensors by name, each tensor's fields in order) and the
//! tensors' bytes follow in name order: two saves of one state are byte-identical, so a
//! file can be compared, hashed or deduplicated as bytes.

use std::collections::BTreeMap;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use safetensors::{Dtype, SafeTensorError};

use super::{Checkpoint, CheckpointError, FORMAT, VERSION};
use crate::array::HostArray;

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
    if let Some(data) = &c.data {
        meta.insert(DATA_SAMPLES.to_string(), data.samples.to_string());
        meta.insert(
            DATA_FINGERPRINT.to_string(),
            format!("{:016x}", data.fingerprint),
        );
    }
    meta
}

/// The metadata entry of the data's sample count.
pub(super) const DATA_SAMPLES: &str = "data/samples";
/// The metadata entry of the data's fingerprint.
pub(super) const DATA_FINGERPRINT: &str = "data/fingerprint";

/// The safetensors header (its length, then its JSON padded to 8 bytes) for `tensors`,
/// laid out in name order, with `meta` and `checksum` as metadata. The checksum is written
/// as 8 hex digits, so every checksum gives a header of the same length.
fn header(
    meta: &BTreeMap<String, String>,
    tensors: &BTreeMap<String, &HostArray>,
    checksum: u32,
) -> Result<Vec<u8>, CheckpointError> {
    // serde_json's map keeps its keys in order: the same state always gives the same JSON.
    let mut root = serde_json::Map::new();
    let mut entries: serde_json::Map<String, serde_json::Value> = meta
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::from(v.as_str())))
        .collect();
    entries.insert("checksum".to_string(), format!("{checksum:08x}").into());
    root.insert("__metadata__".to_string(), entries.into());
    let mut at = 0;
    for (name, array) in tensors {
        let len = array.bytes().len();
        let info = serde_json::json!({
            "dtype": "F32",
            "shape": array.shape(),
            "data_offsets": [at, at + len],
        });
        at += len;
        root.insert(name.clone(), info);
    }
    let mut json = serde_json::to_vec(&serde_json::Value::Object(root))
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
        (Err(e), None) => Err(CheckpointError::Save(e)),
        (Ok(()), None) => Ok(()),
    }
}

/// CRC-32 (ISO-HDLC) of the metadata entries (`key=value\n`, keys in order) and then of the
/// tensors (name, shape, length and bytes), fed in name order. Computed by `crc32fast`,
/// which uses the CPU's carry-less multiply where it has one: several bytes per cycle, so
/// the checksum keeps up with the file instead of setting the pace (a 16-byte table ran at
/// 1.5 GB/s, below a plain read of the file).
pub(super) struct Checksum(crc32fast::Hasher);

impl Checksum {
    pub(super) fn new(meta: &BTreeMap<String, String>) -> Self {
        let mut digest = crc32fast::Hasher::new();
        for (key, value) in meta {
            digest.update(format!("{key}={value}\n").as_bytes());
        }
        Self(digest)
    }

    pub(super) fn tensor(&mut self, name: &str, dtype: Dtype, shape: &[u32], data: &[u8]) {
        self.tensor_head(name, dtype, shape, data.len() as u64);
        self.0.update(data);
    }

    /// What precedes a tensor's bytes; they follow through [`update`](Self::update).
    pub(super) fn tensor_head(&mut self, name: &str, dtype: Dtype, shape: &[u32], len: u64) {
        self.0.update(name.as_bytes());
        self.0.update(format!("{dtype:?}").as_bytes());
        for d in shape {
            self.0.update(&d.to_le_bytes());
        }
        self.0.update(&len.to_le_bytes());
    }

    pub(super) fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    pub(super) fn finish(self) -> u32 {
        self.0.finalize()
    }
}

#[cfg(test)]
mod tests {
    /// Catches a checksum of another CRC-32 than the format's ISO-HDLC (what every
    /// checkpoint already written carries): the check value of "123456789".
    #[test]
    fn the_checksum_is_crc32_iso_hdlc() {
        let mut digest = super::Checksum(crc32fast::Hasher::new());
        digest.update(b"123456789");
        assert_eq!(digest.finish(), 0xCBF4_3926);
        let table = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        let mut digest = super::Checksum(crc32fast::Hasher::new());
        digest.update(&bytes);
        assert_eq!(digest.finish(), table.checksum(&bytes));
    }
}
