//! Inserting into and removing from a fixed table, entry by entry.
//!
//! The device keeps its FIFOs and its arena's blocks in ordered tables. `heapless`'s
//! `insert` and `remove` shift the entries after the place with a `memmove`, whose
//! general code (1.6 KB) the firmware's flash has no room for; tables of a few dozen
//! entries, changed only when a program is prepared or a request allocates, shift as well
//! by swapping neighbours.

use heapless::Vec;

/// Puts `item` at `at` (at most the table's length), the entries from there one place
/// on; `Err(item)` when the table is full.
pub fn insert<T, const N: usize>(table: &mut Vec<T, N>, at: usize, item: T) -> Result<(), T> {
    table.push(item)?;
    for i in (at.min(table.len() - 1) + 1..table.len()).rev() {
        swap_back(table, i);
    }
    Ok(())
}

/// Takes the entry at `at` out, the entries after it one place back (`None` past the
/// end).
pub fn remove<T, const N: usize>(table: &mut Vec<T, N>, at: usize) -> Option<T> {
    if at >= table.len() {
        return None;
    }
    for i in at + 1..table.len() {
        swap_back(table, i);
    }
    table.pop()
}

/// Entries `i − 1` and `i` swapped, as two distinct places (`<[T]>::swap` allows the same
/// place twice, and moves through a `memmove` for it).
#[inline(never)]
fn swap_back<T>(table: &mut [T], i: usize) {
    let (before, from) = table.split_at_mut(i.min(table.len()));
    if let (Some(a), Some(b)) = (before.last_mut(), from.first_mut()) {
        core::mem::swap(a, b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches an entry shifted the wrong way or lost: every place of a table of four is
    /// inserted at and removed from, against `heapless`'s own `insert` and `remove`.
    #[test]
    fn every_place_shifts_as_heapless_does() {
        let start: Vec<u8, 8> = Vec::from_slice(&[1, 2, 3, 4]).unwrap();
        for at in 0..=4 {
            let (mut ours, mut theirs) = (start.clone(), start.clone());
            insert(&mut ours, at, 9).unwrap();
            theirs.insert(at, 9).unwrap();
            assert_eq!(ours, theirs, "insert at {at}");
            assert_eq!(remove(&mut ours, at), Some(9));
            assert_eq!(ours, start, "remove at {at}");
        }
        let mut full: Vec<u8, 4> = Vec::from_slice(&[1, 2, 3, 4]).unwrap();
        assert_eq!(insert(&mut full, 0, 9), Err(9));
        assert_eq!(remove(&mut full, 4), None);
        assert_eq!(full, [1, 2, 3, 4]);
    }
}
