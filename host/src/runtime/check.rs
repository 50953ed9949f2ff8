//! The self-check: device values against the reference's, failing on NaN, infinity and a
//! length mismatch rather than passing them by accident; a run's comparisons tallied with
//! the step and tensor of the largest error ([`Tally`]).

use std::fmt;

/// Why device values cannot be compared with the reference: the self-check fails.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum CheckError {
    /// The device returned a different number of values than the reference computed.
    #[error("the device returned {device} values but the reference has {reference}")]
    LengthMismatch {
        /// Values from the device.
        device: usize,
        /// Values from the reference.
        reference: usize,
    },
    /// A NaN or an infinity on both sides: the run's arithmetic left `f32`'s range on the
    /// device and on the host alike (the values trained on, or the learning rate, made
    /// numbers too large), which says nothing about the accelerator. Still a failure.
    #[error(
        "value {index} left f32's range on the device and the host alike (device {}, reference \
         {}): the training overflowed, the accelerator agrees",
        Number(*.device),
        Number(*.reference)
    )]
    Overflowed {
        /// Position of the first such value.
        index: usize,
        /// The device's value there.
        device: f32,
        /// The reference's value there.
        reference: f64,
    },
    /// A NaN or an infinity on one side only.
    #[error(
        "value {index} is not finite (device {}, reference {})",
        Number(*.device),
        Number(*.reference)
    )]
    NotFinite {
        /// Position of the first such value.
        index: usize,
        /// The device's value there.
        device: f32,
        /// The reference's value there.
        reference: f64,
    },
}

/// A value as written for people: plain when moderate, in exponent form otherwise.
struct Number<T>(T);

impl<T: Copy + Into<f64> + fmt::Display + fmt::LowerExp> fmt::Display for Number<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        let x: f64 = v.into();
        if x == 0.0 || !x.is_finite() || (1e-4..1e9).contains(&x.abs()) {
            write!(f, "{v}")
        } else {
            write!(f, "{v:e}")
        }
    }
}

/// Largest relative difference between device values and the reference, relative to
/// `1 + |reference|` so that values near zero compare absolutely.
///
/// A length mismatch, or a NaN or infinity on either side, is an error rather than a
/// number: such results never pass a tolerance by accident.
pub fn max_relative_error(device: &[f32], reference: &[f64]) -> Result<f64, CheckError> {
    if device.len() != reference.len() {
        return Err(CheckError::LengthMismatch {
            device: device.len(),
            reference: reference.len(),
        });
    }
    let mut largest = 0.0f64;
    for (index, (&d, &r)) in device.iter().zip(reference).enumerate() {
        if !d.is_finite() && !r.is_finite() {
            return Err(CheckError::Overflowed {
                index,
                device: d,
                reference: r,
            });
        }
        if !d.is_finite() || !r.is_finite() {
            return Err(CheckError::NotFinite {
                index,
                device: d,
                reference: r,
            });
        }
        let error = (f64::from(d) - r).abs() / (1.0 + r.abs());
        // Finite inputs give a finite or infinite error, never NaN; `>` keeps an infinity.
        if error > largest {
            largest = error;
        }
    }
    Ok(largest)
}

/// A run's comparisons of one kind (its anchors, or its weights) with the reference: the
/// largest error so far and where it was — the step and the tensor — or the first
/// comparison that could not be made and where. A failure sticks: later comparisons
/// cannot undo it.
#[derive(Debug, Clone, PartialEq)]
pub struct Tally {
    /// The largest error, or the first failure.
    pub outcome: Result<f64, CheckError>,
    /// Where: the step after which the values were compared (counted from 1), and the
    /// tensor.
    pub at: Option<(usize, String)>,
}

impl Tally {
    /// No comparison yet.
    pub fn new() -> Self {
        Self {
            outcome: Ok(0.0),
            at: None,
        }
    }

    /// Compares `tensor`'s `device` values with the `reference`'s after step `step`.
    pub fn record(&mut self, step: usize, tensor: &str, device: &[f32], reference: &[f64]) {
        let Ok(largest) = self.outcome else {
            return;
        };
        match max_relative_error(device, reference) {
            Ok(error) if error > largest || self.at.is_none() => {
                self.outcome = Ok(error);
                self.at = Some((step, tensor.to_string()));
            }
            Ok(_) => {}
            Err(e) => {
                self.outcome = Err(e);
                self.at = Some((step, tensor.to_string()));
            }
        }
    }

    /// True when every comparison was made and the largest error is within `tolerance`.
    pub fn within(&self, tolerance: f64) -> bool {
        matches!(self.outcome, Ok(error) if error.is_finite() && error <= tolerance)
    }
}

impl Default for Tally {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = |f: &mut fmt::Formatter<'_>| match &self.at {
            Some((step, tensor)) => write!(f, " (`{tensor}` after step {step})"),
            None => Ok(()),
        };
        match &self.outcome {
            Ok(error) => {
                write!(f, "within {error:.1e}")?;
                at(f)
            }
            Err(e) => {
                f.write_str("not comparable")?;
                at(f)?;
                write!(f, ": {e}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches a summary that gives the largest error but not where it was: a failed check
    /// named neither the step nor the tensor.
    #[test]
    fn a_tally_names_the_step_and_tensor_of_its_largest_error() {
        let mut tally = Tally::new();
        tally.record(1, "loss", &[1.0], &[1.0]);
        tally.record(2, "output", &[3.0], &[1.0]);
        tally.record(3, "loss", &[1.5], &[1.0]);
        assert_eq!(tally.outcome, Ok(1.0));
        assert_eq!(tally.at, Some((2, "output".to_string())));
        assert_eq!(tally.to_string(), "within 1.0e0 (`output` after step 2)");
        assert!(!tally.within(0.5) && tally.within(1.0));
        // A failure sticks, with its place.
        tally.record(4, "w1", &[f32::NAN], &[1.0]);
        tally.record(5, "w2", &[1.0], &[1.0]);
        assert!(!tally.within(1e9));
        assert!(tally
            .to_string()
            .starts_with("not comparable (`w1` after step 4): value 0"));
    }

    #[test]
    fn nan_on_either_side_is_an_error() {
        // f64::max would drop the NaN and report 0.
        let err = max_relative_error(&[f32::NAN, 1.0], &[5.0, 1.0]).unwrap_err();
        assert!(
            matches!(err, CheckError::NotFinite { index: 0, device, reference }
                if device.is_nan() && reference == 5.0),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(text.contains("value 0") && text.contains("NaN") && text.contains('5'));
        let err = max_relative_error(&[1.0, 2.0], &[1.0, f64::NAN]).unwrap_err();
        assert!(
            matches!(err, CheckError::NotFinite { index: 1, .. }),
            "{err}"
        );
    }

    #[test]
    fn infinity_is_an_error() {
        let err = max_relative_error(&[1.0, f32::INFINITY], &[1.0, 2.0]).unwrap_err();
        assert!(matches!(
            err,
            CheckError::NotFinite {
                index: 1,
                reference,
                ..
            } if reference == 2.0
        ));
        assert!(err.to_string().contains("inf"), "{err}");
        let err = max_relative_error(&[f32::INFINITY], &[8.0e38]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "value 0 is not finite (device inf, reference 8e38)"
        );
        assert!(max_relative_error(&[1.0], &[f64::NEG_INFINITY]).is_err());
    }

    /// Caught: NaN on both sides read "the accelerator differs … (device NaN, reference
    /// NaN)" — the run overflowed on the host as on the device. Still a failure, said as
    /// what it is.
    #[test]
    fn nan_on_both_sides_is_an_overflow_not_a_difference() {
        let err = max_relative_error(&[1.0, f32::NAN], &[1.0, f64::INFINITY]).unwrap_err();
        assert!(
            matches!(err, CheckError::Overflowed { index: 1, .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("overflowed"), "{err}");
        let mut tally = Tally::new();
        tally.record(3, "w", &[f32::NAN], &[f64::NAN]);
        assert!(!tally.within(1e9));
    }

    #[test]
    fn length_mismatch_is_an_error() {
        let err = max_relative_error(&[1.0, 2.0, 3.0], &[1.0, 2.0]).unwrap_err();
        assert_eq!(
            err,
            CheckError::LengthMismatch {
                device: 3,
                reference: 2
            }
        );
        let text = err.to_string();
        assert!(text.contains('3') && text.contains('2'), "{text}");
        assert!(max_relative_error(&[], &[1.0]).is_err());
    }

    #[test]
    fn finite_values_give_the_largest_relative_error() {
        assert_eq!(max_relative_error(&[], &[]), Ok(0.0));
        assert_eq!(max_relative_error(&[1.0, 2.0], &[1.0, 2.0]), Ok(0.0));
        // |3 − 1| / (1 + 1) = 1 beats |0.5 − 0| / 1 = 0.5.
        assert_eq!(max_relative_error(&[0.5, 3.0], &[0.0, 1.0]), Ok(1.0));
        assert_eq!(max_relative_error(&[-1.0], &[1.0]), Ok(1.0));
    }
}
