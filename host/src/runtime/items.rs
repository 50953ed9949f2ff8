//! Moving a step's items between the user's arrays and a replica's bytes, in the order
//! core's splitter hands them out (`step_io`'s `SplitPlan`).
//!
//! # Rules
//!
//! - Item `i` of an array of `size`-byte items is its bytes `i·size .. (i+1)·size`. A
//!   replica's items are not next to each other in the user's array (replica `r`'s `j`-th
//!   is item `j·R + r`), so they move one item at a time.
//! - An item is a handful of bytes in the common cases (a sample of a few features, a loss,
//!   a row of class scores): one `memcpy` call each cost more than the bytes, and a step
//!   moved hundreds while every device waited. Items of the sizes `by_size!` lists
//!   move as fixed-size arrays (a load and a store); any other size as a slice.
//! - Both sides were sized from the same plan (`step_io` checks each array's length before
//!   a byte moves): a replica's bytes hold exactly its items. An index out of the array is
//!   a broken plan, not bad input.

/// Calls `$f::<N>` for the item sizes that move as arrays, else `$slow`.
macro_rules! by_size {
    ($size:expr, $f:ident($($arg:expr),*), $slow:expr) => {
        match $size {
            4 => $f::<4>($($arg),*),
            8 => $f::<8>($($arg),*),
            12 => $f::<12>($($arg),*),
            16 => $f::<16>($($arg),*),
            _ => $slow,
        }
    };
}

/// Fills `into` with the user's items `order` of `data` (items of `size` bytes), one after
/// another.
pub(super) fn gather(into: &mut [u8], data: &[u8], size: usize, order: &[usize]) {
    by_size!(size, gather_as(into, data, order), {
        for (item, &i) in into.chunks_exact_mut(size.max(1)).zip(order) {
            item.copy_from_slice(&data[i * size..(i + 1) * size]);
        }
    })
}

/// Puts `bytes`' items (of `size` bytes, one after another) into rows `rows` of `out`.
pub(super) fn scatter(out: &mut [u8], bytes: &[u8], size: usize, rows: &[usize]) {
    by_size!(size, scatter_as(out, bytes, rows), {
        for (item, &row) in bytes.chunks_exact(size.max(1)).zip(rows) {
            out[row * size..(row + 1) * size].copy_from_slice(item);
        }
    })
}

fn gather_as<const N: usize>(into: &mut [u8], data: &[u8], order: &[usize]) {
    let (items, _) = data.as_chunks::<N>();
    let (into, _) = into.as_chunks_mut::<N>();
    for (item, &i) in into.iter_mut().zip(order) {
        *item = items[i];
    }
}

fn scatter_as<const N: usize>(out: &mut [u8], bytes: &[u8], rows: &[usize]) {
    let (items, _) = bytes.as_chunks::<N>();
    let (out, _) = out.as_chunks_mut::<N>();
    for (item, &row) in items.iter().zip(rows) {
        out[row] = *item;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches a fixed-size path that moves other bytes than the slice path: every size,
    /// arrays or not, gathers and scatters the same items as an item-by-item copy.
    #[test]
    fn every_size_moves_the_items_the_plan_names() {
        for size in [1, 4, 8, 12, 16, 20] {
            let data: Vec<u8> = (0..10 * size).map(|b| b as u8).collect();
            let order = [7, 2, 9, 2];
            let mut into = vec![0u8; order.len() * size];
            gather(&mut into, &data, size, &order);
            let expected: Vec<u8> = (order.iter())
                .flat_map(|&i| data[i * size..(i + 1) * size].to_vec())
                .collect();
            assert_eq!(into, expected, "gather, {size}-byte items");

            let rows = [3, 0, 5, 1];
            let mut out = vec![0xAAu8; 6 * size];
            scatter(&mut out, &into, size, &rows);
            for (k, &row) in rows.iter().enumerate() {
                let item = &into[k * size..(k + 1) * size];
                assert_eq!(&out[row * size..(row + 1) * size], item, "scatter, {size}");
            }
            assert!(
                out[2 * size..3 * size].iter().all(|&b| b == 0xAA),
                "a row no item names is left alone ({size}-byte items)"
            );
        }
    }
}
