//! The device's errors name what failed: the program rule, the missing prepare, a
//! program that does not decode, the protocol versions.

use tessera_core::dtype::DataType;
use tessera_core::grouping::{CommGroup, GroupingSpec, RetrievalMode};
use tessera_core::program::{
    Layer, Optimizer, Program, ProgramFault, ProgramPart, RuleKind, Sharding,
};
use tessera_core::wire::{
    ErrorCode, ProgramRequest, Request, RequestKind, Response, PROTOCOL_VERSION,
};
use tessera_firmware_sim::{CycleCounter, Device, LinkLimits};

const LINK: LinkLimits = LinkLimits {
    max_frame: 1024,
    window: 1,
};

fn with_device(f: impl FnOnce(&mut Device<'_>)) {
    let mut arena = &mut vec![0u8; 1 << 16][..];
    let cycles = CycleCounter::new();
    f(&mut Device::new(0, &mut arena, LINK, &cycles));
}

fn refusal(device: &mut Device<'_>, request: &Request<'_>) -> (RequestKind, ErrorCode) {
    match device.handle(request.clone()) {
        Response::Error { request, code } => (request, code),
        other => panic!("{request:?} was answered {other:?}"),
    }
}

/// A 2 → 2 linear model whose second variable has a zero dimension.
fn program_with_a_zero_dimension() -> Program {
    let mut p = Program::new(1, 1, Optimizer::Sgd { learning_rate: 0.1 });
    let none = GroupingSpec::Comm(CommGroup::None);
    let one = RetrievalMode::OnePerGroup;
    let x = p.add_stream("x", DataType::F32, &[2], false).unwrap();
    let t = p.add_stream("t", DataType::F32, &[2], false).unwrap();
    p.input = x;
    let w = p
        .add_variable("w", &[2, 2], none, one, Sharding::None)
        .unwrap();
    p.add_variable("zero", &[0, 2], none, one, Sharding::None)
        .unwrap();
    p.add_layer(Layer::Linear { weight: w }).unwrap();
    p.add_layer(Layer::MeanSquaredError { targets: t }).unwrap();
    p
}

/// Catches a device that answers a program breaking core's rules with a catch-all (it
/// answered `BadConfig`, whatever the rule): the reply must name the rule and the variable.
#[test]
fn a_program_rule_reaching_the_device_names_the_rule() {
    with_device(|d| {
        let program = program_with_a_zero_dimension();
        let expected = program.check(1).unwrap_err().fault(&program);
        assert_eq!(
            expected,
            ProgramFault {
                part: ProgramPart::Variable { index: 1 },
                rule: RuleKind::Dimensions,
            }
        );
        let program = crate::support::encoded(&program);
        let prepare = Request::Program(ProgramRequest::Prepare {
            replicas: 1,
            program: &program,
        });
        let (kind, code) = refusal(d, &prepare);
        assert_eq!(kind, RequestKind::Prepare);
        assert_eq!(code, ErrorCode::Program(expected));
        let text = code.to_string();
        assert!(
            text.contains("variable 1") && text.contains("dimensions"),
            "{text}"
        );
    });
}

/// Catches optimizer values from the host checked by a rule of the device's own (or not
/// at all): they break the program's optimizer rule and say so.
#[test]
fn optimizer_values_break_the_programs_rule() {
    with_device(|d| {
        let bad = Request::Program(ProgramRequest::SetOptimizer {
            learning_rate: f32::NAN,
            momentum: 0.5,
        });
        let (_, code) = refusal(d, &bad);
        assert_eq!(
            code,
            ErrorCode::Program(ProgramFault {
                part: ProgramPart::Program,
                rule: RuleKind::Optimizer,
            })
        );
    });
}

/// Catches a step (or reset-step) before any prepare answered as a generic
/// "not configured", indistinguishable from a device bug: it is `NotPrepared`.
#[test]
fn a_step_before_prepare_is_not_prepared() {
    with_device(|d| {
        for request in [
            Request::Program(ProgramRequest::RunStep {
                fed: false,
                took: false,
            }),
            Request::Program(ProgramRequest::ResetStep),
        ] {
            let (kind, code) = refusal(d, &request);
            assert_eq!((kind, code), (request.kind(), ErrorCode::NotPrepared));
        }
    });
}

/// Catches a device that prepares a program read from part of a `Prepare`'s bytes (one
/// byte more or one fewer than the program would prepare something else than the host
/// sent) or that loses the program it had: the request is `Malformed`, and the program
/// prepared before stays prepared.
#[test]
fn a_prepare_that_is_not_exactly_one_program_is_malformed() {
    with_device(|d| {
        let program = crate::support::linear_program(1, 1, CommGroup::None, 1, 1);
        let program = crate::support::encoded(&program);
        let prepare = |program| {
            Request::Program(ProgramRequest::Prepare {
                replicas: 1,
                program,
            })
        };
        assert!(matches!(d.handle(prepare(&program)), Response::Done));
        let mut padded = program.clone();
        padded.push(0);
        for bytes in [&padded[..], &program[..program.len() - 1], &[][..]] {
            let (kind, code) = refusal(d, &prepare(bytes));
            assert_eq!((kind, code), (RequestKind::Prepare, ErrorCode::Malformed));
        }
        // Without a prepared program this is refused `NotPrepared`.
        assert!(matches!(
            d.handle(Request::Program(ProgramRequest::ResetStep)),
            Response::Done
        ));
    });
}

/// Catches a device that runs a hello of another protocol version (its messages would be
/// misread byte for byte), or refuses it without saying which version it speaks.
#[test]
fn a_hello_of_another_version_is_refused_with_the_devices_version() {
    with_device(|d| {
        let hello = Request::Hello {
            version: PROTOCOL_VERSION - 1,
            replica: 0,
            lanes: 1,
        };
        let (kind, code) = refusal(d, &hello);
        assert_eq!(kind, RequestKind::Hello);
        assert_eq!(
            code,
            ErrorCode::Version {
                device: PROTOCOL_VERSION
            }
        );
    });
}
