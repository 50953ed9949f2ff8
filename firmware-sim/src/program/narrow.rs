//! A linear layer over a pass of *narrow* rows: inputs of fewer elements than
//! [`math::dot`]'s lanes (the default model's first layer has two).
//!
//! Row by row, such a layer is all overhead: [`math::linear`] calls a dot of two
//! elements per output, and [`math::linear_backward`] adds a row of two elements per
//! output per sample. Here a pass's rows are computed together, [`SIDE`] outputs side by
//! side, so each step of the inner loops is a vector operation over eight outputs. Each
//! width below [`LANES`] has a kernel of its own (`linear_of::<N>`), so the loop over a
//! row's inputs is unrolled and a whole block of outputs is stored in one fixed-size copy:
//! with two inputs, a general loop's per-row bookkeeping cost more than its arithmetic.
//!
//! # Same bits
//!
//! Every element is computed by the very operations, in the very order, of the row-by-row
//! kernels — only *which element is worked on next* changes:
//! - forward: output `o` of a row is `+0.0`, plus `w[o][0]·x[0]`, plus `w[o][1]·x[1]`, …
//!   in input order (a dot with no whole block of lanes is exactly that: its lanes sum to
//!   `+0.0`, then it adds the elements one by one);
//! - gradient: `dW[o][i]` gets `dy[r][o]·x[r][i]` added for row `r = 0, 1, …` in order,
//!   from the value it had.
//!
//! So a pass gives the bits of one micro-batch at a time, on every placement; the
//! firmware (its flash is full) keeps the row-by-row kernels ([`linear`] and
//! [`linear_backward`] fall back to them), and its bits are the same. The unit tests below
//! compare both ways bit for bit.
//!
//! Lengths are the caller's to get right, as in [`math`]: a pass of `rows` rows holds
//! `rows × n` inputs and `rows × m` outputs; a mismatch computes over what is there and
//! never panics.

use super::math::{self, LANES};

/// Outputs computed side by side.
pub const SIDE: usize = 8;

/// `y_r = W·x_r` for each of the pass's `rows` rows (`x`: rows × n, `y`: rows × m, `W`
/// row-major `[m, n]`).
pub fn linear(w: &[f32], x: &[f32], y: &mut [f32], rows: usize) {
    let (n, m) = (width(x, rows), width(y, rows));
    if !is_narrow(n) {
        for (x, y) in x.chunks_exact(n).zip(y.chunks_exact_mut(m)) {
            math::linear(w, x, y);
        }
        return;
    }
    // One kernel per width, so that its loops over the inputs are unrolled.
    match n {
        1 => linear_of::<1>(w, x, y, m),
        2 => linear_of::<2>(w, x, y, m),
        3 => linear_of::<3>(w, x, y, m),
        4 => linear_of::<4>(w, x, y, m),
        5 => linear_of::<5>(w, x, y, m),
        6 => linear_of::<6>(w, x, y, m),
        _ => linear_of::<7>(w, x, y, m),
    }
}

/// [`linear`] over rows of `N` inputs and `m` outputs.
fn linear_of<const N: usize>(w: &[f32], x: &[f32], y: &mut [f32], m: usize) {
    for (b, w_block) in w.chunks(SIDE * N).enumerate() {
        let o = b * SIDE;
        // `wt[i][k]`: input `i`'s weight into output `o + k` (0 past the last output).
        let mut wt = [[0f32; SIDE]; N];
        for (k, row) in w_block.chunks_exact(N).enumerate() {
            for (wt_i, &v) in wt.iter_mut().zip(row) {
                wt_i[k] = v;
            }
        }
        let outs = (w_block.len() / N).min(m.saturating_sub(o));
        for (x_r, y_r) in x.chunks_exact(N).zip(y.chunks_exact_mut(m.max(1))) {
            let mut acc = [0f32; SIDE];
            for (wt_i, &xi) in wt.iter().zip(x_r) {
                for k in 0..SIDE {
                    acc[k] += wt_i[k] * xi;
                }
            }
            store(y_r, o, outs, &acc);
        }
    }
}

/// `acc[..outs]` into `y[o..]`: a whole block as one fixed-size copy (no call).
fn store(y: &mut [f32], o: usize, outs: usize, acc: &[f32; SIDE]) {
    if outs == SIDE {
        if let Some(out) = y
            .get_mut(o..o + SIDE)
            .and_then(|s| <&mut [f32; SIDE]>::try_from(s).ok())
        {
            *out = *acc;
        }
    } else if let Some(out) = y.get_mut(o..o + outs) {
        out.copy_from_slice(acc.get(..outs).unwrap_or_default());
    }
}

/// `y[o..o + outs]` as a block, zero past `outs`: [`store`]'s way back.
fn load(y: &[f32], o: usize, outs: usize) -> [f32; SIDE] {
    let mut block = [0f32; SIDE];
    if outs == SIDE {
        if let Some(from) = y
            .get(o..o + SIDE)
            .and_then(|s| <&[f32; SIDE]>::try_from(s).ok())
        {
            block = *from;
        }
    } else if let (Some(to), Some(from)) = (block.get_mut(..outs), y.get(o..o + outs)) {
        to.copy_from_slice(from);
    }
    block
}

/// Adds `dW += Σ_r dy_rᵀ·x_r` over the pass's `rows` rows; when `dx` is given, sets
/// `dx_r = Wᵀ·dy_r` for each row (as [`math::linear_backward`] does row by row).
pub fn linear_backward(
    w: &[f32],
    x: &[f32],
    dy: &[f32],
    dw: &mut [f32],
    dx: Option<&mut [f32]>,
    rows: usize,
) {
    let (n, m) = (width(x, rows), width(dy, rows));
    if !is_narrow(n) {
        let mut dx = dx.map(|dx| dx.chunks_exact_mut(n));
        for (x, dy) in x.chunks_exact(n).zip(dy.chunks_exact(m)) {
            let dx = dx.as_mut().and_then(Iterator::next);
            math::linear_backward(w, x, dy, dw, dx);
        }
        return;
    }
    match n {
        1 => weight_gradient_of::<1>(x, dy, dw, m),
        2 => weight_gradient_of::<2>(x, dy, dw, m),
        3 => weight_gradient_of::<3>(x, dy, dw, m),
        4 => weight_gradient_of::<4>(x, dy, dw, m),
        5 => weight_gradient_of::<5>(x, dy, dw, m),
        6 => weight_gradient_of::<6>(x, dy, dw, m),
        _ => weight_gradient_of::<7>(x, dy, dw, m),
    }
    if let Some(dx) = dx {
        // The input's gradient row by row: each row's is a sum over outputs, already
        // computed a row's outputs at a time.
        for (dy, dx) in dy.chunks_exact(m).zip(dx.chunks_exact_mut(n)) {
            dx.fill(0.0);
            for (&d, row) in dy.iter().zip(w.chunks_exact(n)) {
                for (g, &wi) in dx.iter_mut().zip(row) {
                    *g += d * wi;
                }
            }
        }
    }
}

/// `dW += Σ_r dy_rᵀ·x_r` over rows of `N` inputs and `m` outputs.
fn weight_gradient_of<const N: usize>(x: &[f32], dy: &[f32], dw: &mut [f32], m: usize) {
    for (b, g_block) in dw.chunks_mut(SIDE * N).enumerate() {
        let o = b * SIDE;
        let outs = (g_block.len() / N).min(m.saturating_sub(o));
        // `acc[i][k]`: the gradient of input `i`'s weight into output `o + k`.
        let mut acc = [[0f32; SIDE]; N];
        for (k, row) in g_block.chunks_exact(N).take(outs).enumerate() {
            for (acc_i, &g) in acc.iter_mut().zip(row) {
                acc_i[k] = g;
            }
        }
        for (x_r, dy_r) in x.chunks_exact(N).zip(dy.chunks_exact(m.max(1))) {
            let d = load(dy_r, o, outs);
            for (acc_i, &xi) in acc.iter_mut().zip(x_r) {
                for k in 0..SIDE {
                    acc_i[k] += d[k] * xi;
                }
            }
        }
        for (k, row) in g_block.chunks_exact_mut(N).take(outs).enumerate() {
            for (g, acc_i) in row.iter_mut().zip(&acc) {
                *g = acc_i[k];
            }
        }
    }
}

/// Elements of one of `rows` rows of `x` (at least 1).
fn width(x: &[f32], rows: usize) -> usize {
    (x.len() / rows.max(1)).max(1)
}

/// Rows of `n` inputs are computed side by side (not in the firmware: see the module doc).
fn is_narrow(n: usize) -> bool {
    cfg!(not(feature = "firmware")) && n < LANES
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::rng::Rng;

    /// Room for the largest case below.
    const ROOM: usize = 1024;

    /// Fills `x` with values of every kind a layer meets: signs, zeros of both signs,
    /// sizes far apart (so that the order of additions shows in the bits).
    fn fill(rng: &mut Rng, x: &mut [f32]) {
        for v in x {
            *v = match rng.next_u32() % 8 {
                0 => 0.0,
                1 => -0.0,
                2 => (rng.next_f32() - 0.5) * 1e7,
                _ => rng.next_f32() * 2.0 - 1.0,
            };
        }
    }

    fn same_bits(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
    }

    /// Catches a pass kernel whose bits differ from the row-by-row kernels' (an addition
    /// out of order, a lane past the last output stored, a gradient started from 0 instead
    /// of its value): narrow inputs of every width below [`LANES`] and wide ones, outputs a
    /// multiple of [`SIDE`] and not, one row and many.
    #[test]
    fn a_pass_gives_the_bits_of_its_rows_one_by_one() {
        let mut rng = Rng::from_seed(7);
        for (n, m, rows) in [
            (2, 24, 32),
            (1, 3, 5),
            (7, 9, 1),
            (3, 17, 4),
            (8, 3, 6),
            (24, 3, 2),
            // Every width has a kernel of its own: each is held to the row-by-row bits.
            (4, 8, 3),
            (5, 16, 2),
            (6, 11, 3),
        ] {
            let ([mut w, mut x, mut dy, mut g0], nine) = ([[0f32; ROOM]; 4], [9f32; ROOM]);
            let (w, x) = (&mut w[..m * n], &mut x[..rows * n]);
            let (dy, g0) = (&mut dy[..rows * m], &mut g0[..m * n]);
            for part in [&mut *w, &mut *x, &mut *dy, &mut *g0] {
                fill(&mut rng, part);
            }
            let (mut y, mut g, mut dx) = (nine, [0f32; ROOM], nine);
            let (y, g, dx) = (&mut y[..rows * m], &mut g[..m * n], &mut dx[..rows * n]);
            g.copy_from_slice(g0);
            linear(w, x, y, rows);
            linear_backward(w, x, dy, g, Some(dx), rows);
            let (mut y1, mut g1, mut dx1) = (nine, [0f32; ROOM], nine);
            let (y1, g1, dx1) = (&mut y1[..rows * m], &mut g1[..m * n], &mut dx1[..rows * n]);
            g1.copy_from_slice(g0);
            for r in 0..rows {
                let (xr, dyr) = (&x[r * n..][..n], &dy[r * m..][..m]);
                math::linear(w, xr, &mut y1[r * m..][..m]);
                math::linear_backward(w, xr, dyr, g1, Some(&mut dx1[r * n..][..n]));
            }
            assert!(same_bits(y, y1), "forward: n {n}, m {m}, rows {rows}");
            assert!(
                same_bits(g, g1),
                "weight gradient: n {n}, m {m}, rows {rows}"
            );
            assert!(
                same_bits(dx, dx1),
                "input gradient: n {n}, m {m}, rows {rows}"
            );
        }
    }

    /// Catches a pass kernel that panics or writes past its rows when the lengths do not
    /// agree (the module's contract: compute over what is there).
    #[test]
    fn mismatched_lengths_never_panic() {
        let w = [1.0f32; 10];
        for (x, y) in [(3usize, 7usize), (0, 4), (4, 0), (5, 5)] {
            let ([x_room, mut y_room, dy], mut g, mut dx) =
                ([[1f32; 8]; 3], [0.5f32; 7], [0f32; 3]);
            linear(&w, &x_room[..x], &mut y_room[..y], 2);
            linear_backward(&w, &x_room[..x], &dy[..y], &mut g, Some(&mut dx), 2);
        }
    }
}
