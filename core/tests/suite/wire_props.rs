//! The wire layer on arbitrary input: random bytes never panic the decoder or the message
//! parser, every request survives a round trip, and damaged streams never produce a
//! message that was not sent.

use proptest::prelude::*;
use tessera_core::dtype::DataType;
use tessera_core::wire::frame::decode_body;
use tessera_core::wire::{
    encode_frame, Array, DataRequest, Envelope, FrameDecoder, FromDevice, KernelRequest,
    MemoryRequest, ProgramRequest, Request, Response, StreamRequest, Target, ToDevice, Value,
};

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        any::<u16>().prop_map(Target::Register),
        any::<u16>().prop_map(Target::Slot),
        any::<u16>().prop_map(Target::Fifo),
    ]
}

fn request(data: &[u8]) -> impl Strategy<Value = Request<'_>> {
    prop_oneof![
        (any::<u16>(), any::<u32>(), any::<u16>()).prop_map(|(version, replica, lanes)| {
            Request::Hello {
                version,
                replica,
                lanes,
            }
        }),
        (any::<bool>(), any::<bool>())
            .prop_map(|(fed, took)| Request::Program(ProgramRequest::RunStep { fed, took })),
        (any::<u16>(), any::<u32>())
            .prop_map(|(slot, bytes)| Request::Memory(MemoryRequest::AllocSlot { slot, bytes })),
        (any::<u16>(), any::<u32>(), any::<u16>()).prop_map(|(fifo, item_bytes, depth)| {
            Request::Streams(StreamRequest::CreateFifo {
                fifo,
                item_bytes,
                depth,
            })
        }),
        (target(), any::<u32>(), 0..=data.len()).prop_map(move |(target, offset, n)| {
            Request::Data(DataRequest::Write {
                target,
                offset,
                data: &data[..n],
            })
        }),
        (target(), any::<u32>(), any::<u32>(), any::<bool>()).prop_map(
            |(target, offset, len, read)| if read {
                Request::Data(DataRequest::Read {
                    target,
                    offset,
                    len,
                })
            } else {
                Request::Data(DataRequest::Wrote {
                    target,
                    offset,
                    len,
                })
            }
        ),
        any::<u64>().prop_map(|seed| Request::Program(ProgramRequest::SetSeed { seed })),
        (0..3u8, any::<u16>(), any::<[u32; 4]>()).prop_map(|(kind, lane, state)| match kind {
            0 => Request::Program(ProgramRequest::SetRngState { lane, state }),
            1 => Request::Program(ProgramRequest::GetRngState { lane }),
            _ => Request::Program(ProgramRequest::CycleCount { lane }),
        }),
        (any::<u16>(), any::<i64>()).prop_map(|(id, v)| Request::Kernels(
            KernelRequest::SetRegister {
                id,
                value: Value::Int(v)
            }
        )),
        (any::<u16>(), 0..=data.len()).prop_map(move |(id, n)| Request::Kernels(
            KernelRequest::SetRegister {
                id,
                value: Value::Array(Array {
                    dtype: DataType::U8,
                    shape: heapless::Vec::from_slice(&[n as u32]).unwrap(),
                    data: &data[..n]
                })
            }
        )),
    ]
}

const DATA: [u8; 200] = {
    let mut d = [0u8; 200];
    let mut i = 0;
    while i < 200 {
        d[i] = (i * 7 % 256) as u8;
        i += 1;
    }
    d
};

fn encode(msg: &Envelope<Request<'_>>) -> Vec<u8> {
    let (mut scratch, mut out) = ([0u8; 512], [0u8; 600]);
    let n = encode_frame(msg, &mut scratch, &mut out).unwrap();
    out[..n].to_vec()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        let mut decoder = FrameDecoder::<128>::new();
        for &b in &bytes {
            if let Some(Ok(body)) = decoder.push(b) {
                let _ = decode_body::<Envelope<Request<'_>>>(body);
                let _ = decode_body::<Envelope<Response<'_>>>(body);
                let _ = decode_body::<ToDevice<'_>>(body);
                let _ = decode_body::<FromDevice<'_>>(body);
            }
        }
        let _ = decode_body::<Envelope<Request<'_>>>(&bytes);
        let _ = decode_body::<Envelope<Response<'_>>>(&bytes);
        let _ = decode_body::<ToDevice<'_>>(&bytes);
        let _ = decode_body::<FromDevice<'_>>(&bytes);
    }

    #[test]
    fn requests_round_trip(seq in any::<u32>(), body in request(&DATA)) {
        let msg = Envelope { seq, body };
        let frame = encode(&msg);
        let mut decoder = FrameDecoder::<600>::new();
        let (used, got) = decoder.feed(&frame);
        prop_assert_eq!(used, frame.len());
        let body = got.expect("a whole frame").expect("a good frame");
        prop_assert_eq!(decode_body::<Envelope<Request<'_>>>(body).unwrap(), msg);
    }

    /// Flip, drop and cut bytes of a stream of frames: whatever decodes is one of the
    /// messages sent, and every frame after the damage decodes.
    #[test]
    fn damage_never_yields_a_message_not_sent(
        bodies in prop::collection::vec(request(&DATA), 1..8),
        damage in prop::collection::vec((any::<prop::sample::Index>(), 0u8..3, 1u8..=255), 0..4),
    ) {
        let sent: Vec<Envelope<Request<'_>>> =
            bodies.into_iter().enumerate().map(|(i, body)| Envelope { seq: i as u32, body }).collect();
        let mut stream: Vec<u8> = sent.iter().flat_map(encode).collect();
        let get_seed = Request::Program(ProgramRequest::GetSeed);
        let undamaged_tail = encode(&Envelope { seq: 999, body: get_seed });
        for (at, kind, mask) in damage {
            if stream.is_empty() { break; }
            let i = at.index(stream.len());
            match kind {
                0 => stream[i] ^= mask,
                1 => { stream.remove(i); }
                _ => stream.truncate(i),
            }
        }
        stream.extend_from_slice(&[0]);
        stream.extend_from_slice(&undamaged_tail);
        let mut decoder = FrameDecoder::<600>::new();
        let mut last = None;
        for &b in &stream {
            if let Some(Ok(body)) = decoder.push(b) {
                let msg: Envelope<Request<'_>> = decode_body(body).expect("a frame that passes its CRC is a message");
                prop_assert!(msg.seq == 999 || sent.contains(&msg), "undetected corruption: {:?}", msg);
                last = Some(msg.seq);
            }
        }
        prop_assert_eq!(last, Some(999), "the frame after the damage must decode");
    }
}
