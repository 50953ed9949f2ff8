//! The tests: every value encodes to its golden bytes and decodes back, every variant is
//! covered, and whole frames pin the framing.

use super::*;

// ---------------------------------------------------------------------------------------

/// A change to the bytes below is a protocol change: bump [`PROTOCOL_VERSION`] with it and
/// update this number together with the literals (20: requests nested by the device area
/// that serves them, each its area's position, then its own in the area).
#[test]
fn protocol_version_is_pinned() {
    assert_eq!(PROTOCOL_VERSION, 20);
}

#[test]
fn every_request_has_its_golden_bytes() {
    let cases = requests();
    check_golden!(Envelope<Request<'_>>, cases);
    let positions: Vec<(u32, u32)> = cases
        .iter()
        .map(|(_, e, _)| request_variant(&e.body))
        .collect();
    // Every area (a hello is one of its own), then every request of each area.
    let mut areas: Vec<u32> = positions.iter().map(|&(area, _)| area).collect();
    areas.sort_unstable();
    areas.dedup();
    assert_covers(
        "Request",
        areas,
        probed_variants(|b| decode_body::<Request<'_>>(b).is_ok()),
    );
    let in_area = |area: u32| -> Vec<u32> {
        positions
            .iter()
            .filter(|&&(a, _)| a == area)
            .map(|&(_, position)| position)
            .collect()
    };
    assert_covers("Hello", in_area(0), 1);
    assert_covers(
        "DataRequest",
        in_area(1),
        probed_variants(|b| decode_body::<DataRequest<'_>>(b).is_ok()),
    );
    assert_covers(
        "MemoryRequest",
        in_area(2),
        probed_variants(|b| decode_body::<MemoryRequest>(b).is_ok()),
    );
    assert_covers(
        "StreamRequest",
        in_area(3),
        probed_variants(|b| decode_body::<StreamRequest>(b).is_ok()),
    );
    assert_covers(
        "ProgramRequest",
        in_area(4),
        probed_variants(|b| decode_body::<ProgramRequest<'_>>(b).is_ok()),
    );
    assert_covers(
        "KernelRequest",
        in_area(5),
        probed_variants(|b| decode_body::<KernelRequest<'_>>(b).is_ok()),
    );
    // `kind()` is what error replies carry; each request reports its own kind.
    for (name, envelope, _) in &cases {
        assert_eq!(format!("{:?}", envelope.body.kind()), *name);
    }
}

#[test]
fn every_response_has_its_golden_bytes() {
    let cases = responses();
    check_golden!(Envelope<Response<'_>>, cases);
    assert_covers(
        "Response",
        cases
            .iter()
            .map(|(_, e, _)| response_variant(&e.body))
            .collect(),
        probed_variants(|b| decode_body::<Response<'_>>(b).is_ok()),
    );
}

#[test]
fn every_error_code_has_its_golden_bytes() {
    let cases = error_codes();
    check_golden!(ErrorCode, cases);
    assert_covers(
        "ErrorCode",
        cases.iter().map(|(_, c, _)| error_variant(c)).collect(),
        probed_variants(|b| decode_body::<ErrorCode>(b).is_ok()),
    );
}

#[test]
fn every_value_has_its_golden_bytes() {
    let cases = values();
    check_golden!(Value<'_>, cases);
    assert_covers(
        "Value",
        cases.iter().map(|(_, v, _)| value_variant(v)).collect(),
        probed_variants(|b| decode_body::<Value<'_>>(b).is_ok()),
    );
}

#[test]
fn every_value_kind_has_its_golden_bytes() {
    let cases = value_kinds();
    check_golden!(ValueKind, cases);
    assert_covers(
        "ValueKind",
        cases
            .iter()
            .map(|(_, k, _)| value_kind_variant(*k))
            .collect(),
        probed_variants(|b| decode_body::<ValueKind>(b).is_ok()),
    );
}

#[test]
fn every_arg_has_its_golden_bytes() {
    let cases = args();
    check_golden!(Arg<'_>, cases);
    assert_covers(
        "Arg",
        cases.iter().map(|(_, a, _)| arg_variant(a)).collect(),
        probed_variants(|b| decode_body::<Arg<'_>>(b).is_ok()),
    );
}

/// Every data type, and in the order of `DataType::ALL` (its position is its wire byte).
#[test]
fn every_data_type_has_its_golden_bytes() {
    let cases = data_types();
    check_golden!(DataType, cases);
    assert_covers(
        "DataType",
        cases
            .iter()
            .map(|(_, t, _)| data_type_variant(*t))
            .collect(),
        probed_variants(|b| decode_body::<DataType>(b).is_ok()),
    );
    let listed: Vec<DataType> = cases.iter().map(|(_, t, _)| *t).collect();
    assert_eq!(listed, DataType::ALL, "DataType::ALL is the wire order");
}

#[test]
fn every_request_kind_has_its_golden_bytes() {
    let cases = kinds();
    check_golden!(RequestKind, cases);
    assert_covers(
        "RequestKind",
        cases.iter().map(|(_, k, _)| kind_variant(*k)).collect(),
        probed_variants(|b| decode_body::<RequestKind>(b).is_ok()),
    );
}

#[test]
fn every_reduce_op_has_its_golden_bytes() {
    let cases = ops();
    check_golden!(ReduceOp, cases);
    assert_covers(
        "ReduceOp",
        cases.iter().map(|(_, o, _)| op_variant(*o)).collect(),
        probed_variants(|b| decode_body::<ReduceOp>(b).is_ok()),
    );
}

/// The plain structs on their own: field order and types.
#[test]
fn limits_program_and_array_have_their_golden_bytes() {
    check_golden!(Limits, [("Limits", limits(), "80 80 04 80 08 03 02 10")]);
    check_golden!(
        Array<'_>,
        [(
            "Array",
            array(),
            "05 02 02 03 0c 01 00 02 00 03 00 04 00 05 00 ff ff"
        )]
    );
    check_golden!(Program, [("Program", program(), GOLDEN_PROGRAM)]);
}

/// The golden bytes of [`program()`].
const GOLDEN_PROGRAM: &str = "01 01 77 02 02 03 02 00 01 02 01 01 02 01 78 02 01 02 00 01 74 06 \
    01 01 00 01 00 01 07 03 00 00 03 00 00 00 3f 04 01 00 07 08 03 01 00 00 00 3f 00 00 80 3e 01";

/// An `Option` is a tag byte (0: `None`; 1: `Some`, then the value). The `Described` case
/// above carries `Some`; this pins `None`, and an empty shape, as a device sends them for a
/// plain integer register.
#[test]
fn described_without_a_dtype_has_its_golden_bytes() {
    let env = |body| Envelope { seq: 5, body };
    check_golden!(
        Envelope<Response<'_>>,
        [(
            "Described (no dtype)",
            env(Response::Described {
                kind: ValueKind::Int,
                dtype: None,
                shape: heapless::Vec::new(),
                bytes: 0,
                at: 0,
            }),
            "05 08 00 00 00 00 00",
        )]
    );
}

/// Whole frames: `COBS(body ‖ CRC-32 little-endian) ‖ 00`. Catches a change of checksum,
/// byte order or stuffing, and an envelope whose sequence number is not a varint first.
#[test]
fn frames_have_their_golden_bytes() {
    let request = Envelope {
        seq: 0x0102_0304,
        body: Request::Data(DataRequest::Write {
            target: Target::Fifo(1),
            offset: 0,
            data: &[0, 0, 0],
        }),
    };
    let response = Envelope {
        seq: 0,
        body: Response::Done,
    };
    let golden_request = bytes("06 84 86 88 08 01 03 02 01 02 03 01 01 05 0c 2e a5 67 00");
    let golden_response = bytes("01 06 01 69 22 de 36 00");
    let (mut scratch, mut out) = ([0u8; 64], [0u8; 80]);
    let n = encode_frame(&request, &mut scratch, &mut out).unwrap();
    assert_eq!(hex(&out[..n]), hex(&golden_request), "request frame");
    let n = encode_frame(&response, &mut scratch, &mut out).unwrap();
    assert_eq!(hex(&out[..n]), hex(&golden_response), "response frame");

    let mut decoder = FrameDecoder::<80>::new();
    let (used, got) = decoder.feed(&golden_request);
    assert_eq!(used, golden_request.len());
    let body = got.expect("a whole frame").expect("a good frame");
    assert_eq!(decode_body::<Envelope<Request<'_>>>(body), Ok(request));
    let (_, got) = decoder.feed(&golden_response);
    let body = got.expect("a whole frame").expect("a good frame");
    assert_eq!(decode_body::<Envelope<Response<'_>>>(body), Ok(response));
}

/// Each direction's frame body is an enum whose first byte says what the message is: a
/// request or a combined result to a device, a reply or a contribution from it. Catches a
/// contribution that travels as a reply (or a combined result as a request) again, and a
/// reordering of the two kinds.
#[test]
fn both_directions_have_their_golden_bytes() {
    let to_device: Vec<(&str, ToDevice<'static>, &str)> = vec![
        (
            "Request",
            ToDevice::Request(Envelope {
                seq: 5,
                body: Request::Program(ProgramRequest::RunStep {
                    fed: false,
                    took: true,
                }),
            }),
            "00 05 04 06 00 01",
        ),
        (
            "Combined",
            ToDevice::Combined(Combined {
                step: 5,
                round: 2,
                data: ONE_F32,
            }),
            "01 05 02 04 00 00 80 3f",
        ),
    ];
    check_golden!(ToDevice<'_>, to_device);
    let from_device: Vec<(&str, FromDevice<'static>, &str)> = vec![
        (
            "Reply",
            FromDevice::Reply(Envelope {
                seq: 5,
                body: Response::Done,
            }),
            "00 05 01",
        ),
        (
            "Contribution",
            FromDevice::Contribution(Contribution {
                step: 5,
                round: 2,
                op: ReduceOp::Avg,
                data: ONE_F32,
            }),
            "01 05 02 01 04 00 00 80 3f",
        ),
    ];
    check_golden!(FromDevice<'_>, from_device);
    // Two kinds each way, no more: a third would need its golden case here.
    assert_covers(
        "ToDevice",
        vec![0, 1],
        probed_variants(|b| decode_body::<ToDevice<'_>>(b).is_ok()),
    );
    assert_covers(
        "FromDevice",
        vec![0, 1],
        probed_variants(|b| decode_body::<FromDevice<'_>>(b).is_ok()),
    );
}

/// The device's own decoders (by hand, without serde: `ToDevice::decode`,
/// `Program::decode`) read every golden request, both golden messages to a device and the
/// golden program as the values they pin. Catches a hand decoder that drifted from the
/// bytes the host writes.
#[test]
fn the_devices_decoders_read_the_golden_bytes() {
    for (name, envelope, golden) in requests() {
        // A request travels to a device as `ToDevice::Request`, at position 0.
        let body = [vec![0], bytes(golden)].concat();
        let message = ToDevice::Request(envelope);
        assert_eq!(ToDevice::decode(&body), Ok(message), "{name}");
    }
    let combined = bytes("01 05 02 04 00 00 80 3f");
    let expected = ToDevice::Combined(Combined {
        step: 5,
        round: 2,
        data: ONE_F32,
    });
    assert_eq!(ToDevice::decode(&combined), Ok(expected));
    assert_eq!(Program::decode(&bytes(GOLDEN_PROGRAM)), Ok(program()));
}

/// The device's own encoder (by hand, without serde: `FromDevice::encode`) writes every
/// golden response as a reply, and both golden messages from a device, as their golden
/// bytes. Catches a hand encoder that drifted from the bytes the host reads.
#[test]
fn the_devices_encoder_writes_the_golden_bytes() {
    let mut out = [0u8; 256];
    for (name, envelope, golden) in responses() {
        // A reply travels from a device as `FromDevice::Reply`, at position 0.
        let expected = [vec![0], bytes(golden)].concat();
        let n = FromDevice::Reply(envelope).encode(&mut out);
        assert_eq!(n.map(|n| hex(&out[..n])), Ok(hex(&expected)), "{name}");
    }
    let contribution = FromDevice::Contribution(Contribution {
        step: 5,
        round: 2,
        op: ReduceOp::Avg,
        data: ONE_F32,
    });
    let n = contribution.encode(&mut out);
    assert_eq!(
        n.map(|n| hex(&out[..n])),
        Ok("01 05 02 01 04 00 00 80 3f".into())
    );
}
