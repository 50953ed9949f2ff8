//! Several messages to one rank as one MPI message (a batch): what a command posts to each
//! rank — a request to each of its workers, a free before them — costs the receiving
//! office one receive and its workers one look each, not one receive and one look per
//! message.
//!
//! # Rules
//!
//! - **A batch is its parts in the order they were posted**, each a head — its tag (16
//!   bits) and its length (32 bits), little-endian — and its bytes; the receiver routes
//!   each as if it had come alone under its tag, so a link's bytes, a control message and
//!   a heartbeat keep their places among the rest.
//! - **Only small messages travel in one** (at most [`BATCH_BYTES`]): a larger one (bulk
//!   bytes) goes alone rather than being copied, after whatever was posted to its rank
//!   before it.
//! - **A damaged batch** (it cannot be, short of a bug: MPI delivers messages whole) is
//!   routed up to the damage; the rest is dropped, and the request protocol sends again
//!   what a link lost.

/// The largest message that travels in a batch.
pub const BATCH_BYTES: usize = 64 << 10;
/// A part's head: its tag (16 bits) and its length (32 bits).
const HEAD: usize = 6;

/// The batch of `parts` (tag, bytes), in order. Tags fit 16 bits (MPI tags of the offices
/// stay below 2¹⁵) and lengths 32 bits (at most [`BATCH_BYTES`]): a part that does not is
/// refused with its tag and length.
pub fn encode(parts: &[(i32, Vec<u8>)]) -> Result<Vec<u8>, (i32, usize)> {
    let size = parts.iter().map(|(_, bytes)| HEAD + bytes.len()).sum();
    let mut batch = Vec::with_capacity(size);
    for (tag, bytes) in parts {
        let (Ok(head_tag), Ok(len)) = (u16::try_from(*tag), u32::try_from(bytes.len())) else {
            return Err((*tag, bytes.len()));
        };
        batch.extend_from_slice(&head_tag.to_le_bytes());
        batch.extend_from_slice(&len.to_le_bytes());
        batch.extend_from_slice(bytes);
    }
    Ok(batch)
}

/// The parts of `batch` in order, each its tag and bytes; `Err(at)` for damage at byte
/// `at` (a head cut short, or a length past the end), after which there are none.
pub fn parts(batch: &[u8]) -> impl Iterator<Item = Result<(i32, &[u8]), usize>> {
    let mut rest = batch;
    let mut damaged = false;
    std::iter::from_fn(move || {
        if rest.is_empty() || damaged {
            return None;
        }
        let at = batch.len() - rest.len();
        let part = rest.split_first_chunk::<HEAD>().and_then(|(head, body)| {
            let tag = i32::from(u16::from_le_bytes([head[0], head[1]]));
            let len = u32::from_le_bytes([head[2], head[3], head[4], head[5]]) as usize;
            (body.len() >= len).then(|| (tag, body.split_at(len)))
        });
        match part {
            Some((tag, (bytes, after))) => {
                rest = after;
                Some(Ok((tag, bytes)))
            }
            None => {
                damaged = true;
                Some(Err(at))
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches a part dropped or reordered by its tag: a control message (whose tag lies
    /// above every link's) batched with a link's bytes and its end was once taken for
    /// damage on arrival, and the session's finish never reached the serving rank.
    #[test]
    fn every_part_comes_back_in_order_whatever_its_tag() {
        let sent = vec![
            (3, vec![0, 1, 2]),
            (32_767, b"finish".to_vec()),
            (3, vec![1]),
            (32_765, Vec::new()),
        ];
        let batch = encode(&sent).unwrap();
        let got: Vec<(i32, Vec<u8>)> = parts(&batch)
            .map(|part| part.map(|(tag, bytes)| (tag, bytes.to_vec())))
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(got, sent);
    }

    /// Catches a damaged batch read past its end or routed beyond the damage: a length
    /// cut short yields the parts before it, then the damage, then nothing.
    #[test]
    fn a_damaged_batch_is_routed_up_to_the_damage() {
        let batch = encode(&[(1, vec![9; 4]), (2, vec![8; 4])]).unwrap();
        let cut = &batch[..batch.len() - 1];
        let got: Vec<_> = parts(cut).collect();
        assert_eq!(got, vec![Ok((1, &[9u8; 4][..])), Err(10)]);
    }

    /// Catches a tag that does not fit a head silently cut to 16 bits (it would route
    /// the part to another link).
    #[test]
    fn a_tag_beyond_16_bits_is_refused() {
        assert_eq!(encode(&[(70_000, vec![1])]), Err((70_000, 1)));
    }
}
