//! Value parsers that enforce each argument's documented range, so clap reports "invalid
//! value 'X' for `--arg <ARG>`: ..." (one line, exit status 2). The ranges are the library's
//! constants; `TrainJob::validate` and `Report::build` check the same bounds for library
//! callers.

use crate::layout::MAX_REPLICAS;
use crate::train::{MAX_LEARNING_RATE, MAX_TOLERANCE};
use tessera_core::program::AnchorTensor;
use tessera_core::stream::AnchorReturnType;

/// A whole number in `MIN..=MAX`.
pub(crate) fn count<const MIN: usize, const MAX: usize>(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (MIN..=MAX).contains(&n) => Ok(n),
        _ => Err(format!("expected a whole number in {MIN}..={MAX}")),
    }
}

/// A number that `ok` accepts; otherwise an error saying it must be `rule`.
pub(crate) fn number<T>(text: &str, ok: impl Fn(T) -> bool, rule: &str) -> Result<T, String>
where
    T: std::str::FromStr + Copy,
{
    match text.parse::<T>() {
        Ok(value) if ok(value) => Ok(value),
        _ => Err(format!("expected {rule}")),
    }
}

pub(crate) fn learning_rate(text: &str) -> Result<f32, String> {
    // "1e39" parses as an f32 infinity: refused like "inf".
    number(
        text,
        |v: f32| v.is_finite() && v > 0.0 && v <= MAX_LEARNING_RATE,
        &format!("a finite number in (0, {MAX_LEARNING_RATE}]"),
    )
}

/// A baud rate within the serial placement's [`BAUD`](crate::transport::BAUD).
pub(crate) fn baud(text: &str) -> Result<u32, String> {
    let range = crate::transport::BAUD;
    number(
        text,
        |v: u32| range.contains(&v),
        &format!("a whole number in {}..={}", range.start(), range.end()),
    )
}

pub(crate) fn momentum(text: &str) -> Result<f32, String> {
    number(text, |v: f32| (0.0..1.0).contains(&v), "a number in [0, 1)")
}

/// `loss=TYPE` or `output=TYPE`, TYPE an anchor return type.
pub(crate) fn anchor(text: &str) -> Result<(AnchorTensor, AnchorReturnType), String> {
    let rule = "expected NAME=TYPE: NAME loss or output, TYPE all, final, sum or everyn:P";
    let (name, kind) = text.split_once('=').ok_or(rule)?;
    let tensor = [AnchorTensor::Loss, AnchorTensor::Output]
        .into_iter()
        .find(|t| t.name() == name)
        .ok_or(rule)?;
    let kind = kind.parse().map_err(|e| format!("{rule} ({e})"))?;
    Ok((tensor, kind))
}

pub(crate) fn dropout(text: &str) -> Result<f32, String> {
    number(
        text,
        |v: f32| (0.0..1.0).contains(&v),
        "a probability in [0, 1)",
    )
}

pub(crate) fn tolerance(text: &str) -> Result<f64, String> {
    number(
        text,
        |v: f64| (0.0..=MAX_TOLERANCE).contains(&v),
        &format!("a finite number in [0, {MAX_TOLERANCE}]"),
    )
}

pub(crate) fn parse_stride_size(text: &str) -> Result<(usize, usize), String> {
    let rule = format!("expected STRIDE:SIZE, two whole numbers in 1..={MAX_REPLICAS}");
    let (stride, size) = text.split_once(':').ok_or(rule.clone())?;
    let part = |t: &str| count::<1, MAX_REPLICAS>(t).map_err(|_| rule.clone());
    Ok((part(stride)?, part(size)?))
}
