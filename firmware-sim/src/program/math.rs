//! The layers' arithmetic on `f32` slices: forward, backward, losses. Lengths are the
//! caller's to get right (the scratch layout makes them agree); a mismatch computes over
//! the shorter length and never panics.

use tessera_core::rng::Rng;

/// Lanes of [`dot`].
pub const LANES: usize = 8;

/// `a · b` over the shorter length, in a fixed order: element `i` of each whole block of
/// `LANES` (8) is added to lane `i mod 8`, the lanes are then added pairwise
/// (`((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))`), and the elements past the last
/// whole block one by one. The lanes are independent sums, so the loop runs in vector
/// registers (one sum in order would wait on every addition); the order is fixed, so the
/// same inputs give the same bits on every placement.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (
        a.get(..n).unwrap_or_default(),
        b.get(..n).unwrap_or_default(),
    );
    let mut lanes = [0f32; LANES];
    // Blocks as arrays: their lanes are indexed without bounds checks.
    let ((blocks_a, tail_a), (blocks_b, tail_b)) = (a.as_chunks::<LANES>(), b.as_chunks::<LANES>());
    for (x, y) in blocks_a.iter().zip(blocks_b) {
        for k in 0..LANES {
            lanes[k] += x[k] * y[k];
        }
    }
    let [l0, l1, l2, l3, l4, l5, l6, l7] = lanes;
    let mut sum = ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7));
    for (x, y) in tail_a.iter().zip(tail_b) {
        sum += x * y;
    }
    sum
}

/// `y = W·x`, `W` row-major `[y.len(), x.len()]`; each output a [`dot`].
pub fn linear(w: &[f32], x: &[f32], y: &mut [f32]) {
    for (y_o, row) in y.iter_mut().zip(w.chunks_exact(x.len().max(1))) {
        *y_o = dot(row, x);
    }
}

/// Accumulates `dW += dy·xᵀ`; when `dx` is given, sets `dx = Wᵀ·dy`.
pub fn linear_backward(w: &[f32], x: &[f32], dy: &[f32], dw: &mut [f32], dx: Option<&mut [f32]>) {
    let n = x.len().max(1);
    for (&d, g_row) in dy.iter().zip(dw.chunks_exact_mut(n)) {
        for (g, &xi) in g_row.iter_mut().zip(x) {
            *g += d * xi;
        }
    }
    if let Some(dx) = dx {
        dx.fill(0.0);
        for (&d, row) in dy.iter().zip(w.chunks_exact(n)) {
            for (g, &wi) in dx.iter_mut().zip(row) {
                *g += d * wi;
            }
        }
    }
}

/// `y = x + b`.
pub fn bias(b: &[f32], x: &[f32], y: &mut [f32]) {
    for ((y, &x), &b) in y.iter_mut().zip(x).zip(b) {
        *y = x + b;
    }
}

/// `y = max(x, 0)`.
pub fn relu(x: &[f32], y: &mut [f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = if x > 0.0 { x } else { 0.0 };
    }
}

/// `dx = dy` where the output was positive, 0 elsewhere.
pub fn relu_backward(y: &[f32], dy: &[f32], dx: &mut [f32]) {
    for ((dx, &dy), &y) in dx.iter_mut().zip(dy).zip(y) {
        *dx = if y > 0.0 { dy } else { 0.0 };
    }
}

/// Draws the mask (0 with probability `rate`, `1/(1 − rate)` otherwise, one draw per
/// element in order) and sets `y = x · mask`.
pub fn dropout(rng: &mut Rng, rate: f32, x: &[f32], mask: &mut [f32], y: &mut [f32]) {
    let keep = 1.0 / (1.0 - rate);
    for ((y, &x), m) in y.iter_mut().zip(x).zip(mask.iter_mut()) {
        *m = if rng.next_f32() < rate { 0.0 } else { keep };
        *y = x * *m;
    }
}

/// `out = a · b`, elementwise (the backward pass of dropout).
pub fn multiply(a: &[f32], b: &[f32], out: &mut [f32]) {
    for ((o, &a), &b) in out.iter_mut().zip(a).zip(b) {
        *o = a * b;
    }
}

/// Softmax cross-entropy of logits `z` against class `label`: returns the loss
/// `−log softmax(z)[label]` and sets `dz = softmax(z) − onehot(label)`. A label outside
/// the classes is refused (`None`).
pub fn softmax_cross_entropy(z: &[f32], label: i32, dz: &mut [f32]) -> Option<f32> {
    let label = usize::try_from(label).ok().filter(|&l| l < z.len())?;
    let max = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut total = 0.0f32;
    for (d, &v) in dz.iter_mut().zip(z) {
        *d = libm::expf(v - max);
        total += *d;
    }
    for d in dz.iter_mut() {
        *d /= total;
    }
    // `label` is one of `z`'s classes (checked above), and `dz` as long as `z` (the
    // caller's to get right): a shorter `dz` loses the subtraction, never panics.
    if let Some(d) = dz.get_mut(label) {
        *d -= 1.0;
    }
    Some(-(z.get(label)? - max - libm::logf(total)))
}

/// Mean-squared error `Σ(y − t)² / n`; sets `dy = 2(y − t)/n`.
pub fn mean_squared_error(y: &[f32], t: &[f32], dy: &mut [f32]) -> f32 {
    let n = y.len().max(1) as f32;
    let mut loss = 0.0f32;
    for ((d, &y), &t) in dy.iter_mut().zip(y).zip(t) {
        let e = y - t;
        loss += e * e;
        *d = 2.0 * e / n;
    }
    loss / n
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches a transposed weight: rows are outputs.
    #[test]
    fn linear_and_its_backward_agree_with_hand_results() {
        let w = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]; // [2, 3]
        let x = [1.0, 0.0, -1.0];
        let mut y = [0.0; 2];
        linear(&w, &x, &mut y);
        assert_eq!(y, [-2.0, -2.0]);
        let (mut dw, mut dx) = ([0.0; 6], [9.0; 3]);
        linear_backward(&w, &x, &[1.0, 2.0], &mut dw, Some(&mut dx));
        assert_eq!(dw, [1.0, 0.0, -1.0, 2.0, 0.0, -2.0]);
        assert_eq!(dx, [9.0, 12.0, 15.0]);
    }

    /// Catches lanes dropped or counted twice (a tail of 0, 1 and 7 elements past the
    /// blocks), and an order that is not the documented one: 1e8 + 1 − 1e8 in lanes 0, 1
    /// and 4 gives 0 only when lanes 0 and 4 are added before lane 1 joins.
    #[test]
    fn dot_sums_every_element_in_its_fixed_order() {
        for n in [0usize, 1, 7, 8, 9, 16, 23] {
            let a: [f32; 23] = core::array::from_fn(|i| i as f32 + 1.0);
            let expected: f32 = (1..=n).map(|i| (i * i) as f32).sum();
            assert_eq!(dot(&a[..n], &a[..n]), expected, "n = {n}");
        }
        let mut a = [0f32; 8];
        (a[0], a[1], a[4]) = (1e8, 1.0, -1e8);
        assert_eq!(dot(&a, &[1.0; 8]), 1.0, "(l0 + l4) first, then + l1");
        assert_eq!(dot(&a, &[1.0; 9]), 1.0, "the shorter length");
    }

    /// Catches a softmax that is not shifted (overflow to NaN) or a wrong gradient sign.
    #[test]
    fn softmax_cross_entropy_is_stable_and_its_gradient_sums_to_zero() {
        let z = [1000.0, 0.0, -1000.0];
        let mut dz = [0.0; 3];
        let loss = softmax_cross_entropy(&z, 0, &mut dz).unwrap();
        assert!(loss.abs() < 1e-6, "{loss}");
        assert!(dz.iter().sum::<f32>().abs() < 1e-6);
        let loss = softmax_cross_entropy(&[0.0, 0.0], 1, &mut dz[..2]).unwrap();
        assert!((loss - core::f32::consts::LN_2).abs() < 1e-6);
        assert_eq!(dz[..2], [0.5, -0.5]);
        assert_eq!(softmax_cross_entropy(&[0.0, 0.0], 2, &mut dz[..2]), None);
        assert_eq!(softmax_cross_entropy(&[0.0, 0.0], -1, &mut dz[..2]), None);
    }

    #[test]
    fn mean_squared_error_matches_its_definition() {
        let mut dy = [0.0; 2];
        assert_eq!(mean_squared_error(&[1.0, 3.0], &[0.0, 1.0], &mut dy), 2.5);
        assert_eq!(dy, [1.0, 2.0]);
    }
}
