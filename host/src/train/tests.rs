//! The job's rules, checked before any device starts, and the report's pass rule.

use tessera_core::grouping::CommGroup;

use super::*;
use crate::runtime::check::CheckError;

/// A small job: the default one with 16 hidden units, 4 batches of 2 micro-batches, 5
/// steps on 300 samples.
fn job() -> TrainJob {
    TrainJob {
        hidden: 16,
        batches_per_step: 4,
        accumulation: 2,
        steps: 5,
        learning_rate: 0.1,
        momentum: 0.5,
        data: DataSource::Spirals {
            samples: 300,
            classes: 3,
        },
        ..TrainJob::default()
    }
}

fn report(outcome: Result<f64, CheckError>) -> TrainReport {
    TrainReport {
        step_losses: vec![1.0],
        weight_check: Tally {
            outcome,
            at: Some((1, "w1".into())),
        },
        anchor_check: Tally::new(),
        accuracy: 0.5,
        samples: 10,
        cycles: vec![],
        samples_per_second: 0.0,
        trace: None,
    }
}

#[test]
fn the_default_job_is_valid() {
    assert!(job().validate().is_ok());
}

/// Catches a setting that reaches a device unchecked.
#[test]
fn out_of_range_settings_name_their_argument() {
    type Change = fn(&mut TrainJob);
    let cases: [(Change, &str); 15] = [
        (|j| j.replicas = 0, "--replicas"),
        (|j| j.replicas = 65, "--replicas"),
        (|j| j.hidden = 0, "--hidden"),
        (|j| j.hidden = 257, "--hidden"),
        (|j| j.batches_per_step = 0, "--batches-per-step"),
        (|j| j.accumulation = usize::MAX, "--accumulation"),
        (|j| j.steps = 0, "--steps"),
        (|j| j.learning_rate = f32::NAN, "--learning-rate"),
        (|j| j.learning_rate = 0.0, "--learning-rate"),
        (|j| j.momentum = 1.0, "--momentum"),
        (|j| j.dropout = 1.0, "--dropout"),
        (|j| j.tolerance = f64::NAN, "--tolerance"),
        (
            |j| {
                j.data = DataSource::Spirals {
                    samples: 300,
                    classes: 1,
                }
            },
            "--classes",
        ),
        (
            |j| {
                j.data = DataSource::Spirals {
                    samples: 2,
                    classes: 3,
                }
            },
            "--samples",
        ),
        (
            |j| j.output_comm = CommGroup::Consecutive(3),
            "--output-comm",
        ),
    ];
    for (change, argument) in cases {
        let mut j = job();
        change(&mut j);
        let text = j.validate().unwrap_err().to_string();
        assert!(text.starts_with(argument), "{argument}: {text}");
    }
}

#[test]
fn groupings_that_do_not_fit_name_both_arguments() {
    let mut j = job();
    j.replicas = 3;
    let text = j.validate().unwrap_err().to_string();
    assert!(
        text.contains("--output-comm consecutive:2") && text.contains("--replicas 3"),
        "{text}"
    );
}

/// Catches a job whose program breaks core's rules reaching the devices.
#[test]
fn an_anchor_period_that_does_not_divide_the_batches_is_refused_before_any_device() {
    let mut j = job();
    j.anchors = vec![(AnchorTensor::Loss, AnchorReturnType::EveryN(3))];
    j.placement = Placement::Qemu("/nonexistent/firmware".into());
    let err = train(&j).unwrap_err();
    assert!(
        matches!(err, TrainError::Job(JobError::Program(_))),
        "{err}"
    );
    assert!(err.to_string().contains("loss"), "{err}");
}

/// Catches steps too large for a device FIFO or for the step-size limit reaching a device.
#[test]
fn large_steps_are_refused_before_any_device_starts() {
    let mut j = job();
    (j.batches_per_step, j.accumulation) = (1024, 1024);
    assert!(matches!(j.validate(), Err(JobError::MicroBatches { .. })));
    let mut j = job();
    j.replicas = 64;
    (j.batches_per_step, j.accumulation) = (1024, 63);
    // Spirals have 2 features; a file of 4096 features makes the step 1024·63·64·4097·4
    // bytes, far above 64 MiB.
    assert!(j.check_step_bytes(2).is_ok());
    let err = j.check_step_bytes(4096).unwrap_err();
    assert!(matches!(err, JobError::StepTooLarge { .. }), "{err}");
}

#[test]
fn a_check_that_cannot_compare_never_passes() {
    assert!(report(Ok(1e-4)).passed(1e-3));
    assert!(!report(Ok(1e-2)).passed(1e-3));
    assert!(!report(Ok(f64::INFINITY)).passed(1e-3));
    let nan = CheckError::NotFinite {
        index: 0,
        device: f32::NAN,
        reference: 1.0,
    };
    assert!(!report(Err(nan)).passed(1.0));
    let mismatch = CheckError::LengthMismatch {
        device: 1,
        reference: 2,
    };
    assert!(!report(Err(mismatch)).passed(1.0));
}

/// The whole job in threads: it learns the spirals and matches the reference.
#[test]
fn a_short_job_in_threads_matches_the_reference_and_learns() {
    let mut j = job();
    j.steps = 40;
    let report = train(&j).unwrap();
    assert!(report.passed(j.tolerance), "{}", report.summary(&j));
    let (first, last) = (report.step_losses[0], *report.step_losses.last().unwrap());
    assert!(last < first, "{}", report.summary(&j));
    assert!(report.cycles.iter().all(|&c| c > 0));
}
