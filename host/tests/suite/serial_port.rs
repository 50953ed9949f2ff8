//! The serial placement: boards on serial ports, here pseudo-terminals. Without QEMU, a
//! device thread of this process serves the other end of a pty (a board as far as the port
//! can tell); under QEMU (ignored by default: `tests/ci.sh` runs them), the firmware with
//! UART0 on a pty ([`common::pty_board`]), as a board on `/dev/ttyACM0` would be. The
//! default training job and the session scenarios over QEMU's ptys are in `loss_line` and
//! `session_scenarios`.
//!
//! Every error names the port and its rule: a missing port, a regular file, a port another
//! link holds, and a port whose other end answers nothing, garbage or another protocol
//! version (the hello's deadline or its refusal, naming the port).

use crate::common;

use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
use tessera_core::dtype::DataType;
use tessera_core::wire::{
    decode_body, encode_frame, Envelope, ErrorCode, FrameDecoder, FromDevice, RequestKind,
    Response, ToDevice, PROTOCOL_VERSION,
};
use tessera_host::runtime::{Placement, Runtime};
use tessera_host::session::collective::{ReduceOp, Scope};
use tessera_host::session::{CallArg, HostArray, Session, SessionError};
use tessera_host::transport::{run_device, Channel, SerialError, TransportError, DEFAULT_BAUD};

/// A pseudo-terminal: its master end (the board's side), and its slave's path (the port).
fn pty() -> (File, PathBuf) {
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("a pty");
    grantpt(&master).unwrap();
    unlockpt(&master).unwrap();
    let name = ptsname(&master, Vec::new()).unwrap();
    (
        File::from(master),
        PathBuf::from(OsString::from_vec(name.into_bytes())),
    )
}

/// A device thread (replica `replica`, 1 MiB) serving the board's side of a pty; it ends
/// when the host closes the port (the master's read fails then).
fn serve(master: &File, replica: u32) -> thread::JoinHandle<()> {
    let (reader, writer) = (master.try_clone().unwrap(), master.try_clone().unwrap());
    thread::spawn(move || {
        let _ = run_device(replica, 1 << 20, reader, writer);
    })
}

/// A pty whose other end is served by a device thread as replica `replica`.
fn pty_with_device(replica: u32) -> PathBuf {
    let (master, port) = pty();
    serve(&master, replica);
    port
}

fn serial(ports: &[&Path]) -> Placement {
    Placement::Serial {
        ports: ports.iter().map(|p| p.to_path_buf()).collect(),
        baud: DEFAULT_BAUD,
    }
}

/// The error of a session on `ports`, as text (it must fail).
fn refused(ports: &[&Path]) -> String {
    match Session::new(&serial(ports), ports.len(), 1, 0) {
        Ok(_) => panic!("a session on {ports:?} started"),
        Err(e) => e.to_string(),
    }
}

/// Catches a serial link that is not the framed link every other byte placement has: a
/// session copies to worker 0 and back, calls a function and reduces, over two ptys.
#[test]
fn a_session_runs_on_two_ports() {
    let ports = [pty_with_device(0), pty_with_device(1)];
    let session = Session::new(&serial(&[&ports[0], &ports[1]]), 2, 1, 0).unwrap();
    let x = HostArray::from_f32(&[2, 3], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
    let on_w0 = session.copy_to_worker0(&x).unwrap();
    assert_eq!(session.copy_from_worker0(&on_w0).unwrap(), x);
    let add_one = session.get_function("add_one").unwrap();
    let y = session
        .call(&add_one, &[CallArg::Register(&on_w0)])
        .unwrap();
    let sum = session.empty(DataType::F32, &[2, 3]).unwrap();
    session
        .allreduce(&y, &sum, ReduceOp::Sum, Scope::Global)
        .unwrap();
    // Worker 1 got zeros of x's shape: the sum is (x + 1) + 1.
    let expected = HostArray::from_f32(&[2, 3], &[2.0, 3.0, 4.0, 5.0, 6.0, 7.0]).unwrap();
    assert_eq!(session.copy_from_worker0(&sum).unwrap(), expected);
}

/// Catches a serial link that moves bytes beside its messages (a board has no file the
/// host could write): a training step's inputs and anchors all cross in frames.
#[test]
fn a_board_moves_every_byte_in_frames() {
    let port = pty_with_device(0);
    let channel = Channel::serial(&port, DEFAULT_BAUD, 0).unwrap();
    assert!(!channel.carries_bulk() && !channel.shares_memory());
    let p = common::Model::linear(4, 2).program();
    let mut runtime = Runtime::prepare_on(p.clone(), vec![channel]).unwrap();
    runtime
        .weights_from_host(&common::initial_weights(&p, 1, 1))
        .unwrap();
    runtime.run(&common::step_io(&p, 1, 2)).unwrap();
    let moved = runtime.traffic().channels;
    assert_eq!((moved.bulk, moved.in_place), (0, 0), "{moved:?}");
    assert!(moved.framed > 0, "{moved:?}");
}

/// Catches a port error that does not say which port, or why: a missing port and a regular
/// file are refused by name before anything opens.
#[test]
fn a_missing_port_or_a_file_is_refused_by_name() {
    let missing = Path::new("/dev/tessera-no-such-port");
    let text = refused(&[missing]);
    assert!(
        text.contains("/dev/tessera-no-such-port: no such device"),
        "{text}"
    );
    let file = std::env::temp_dir().join(format!("tessera-serial-file-{}", std::process::id()));
    std::fs::write(&file, b"not a port").unwrap();
    let text = refused(&[&file]);
    assert!(
        text.contains(&format!(
            "{}: it is a regular file, not a terminal",
            file.display()
        )),
        "{text}"
    );
    std::fs::remove_file(&file).unwrap();
    let port = pty_with_device(0);
    let text = refused(&[&port, &port]);
    assert!(text.contains("is given twice"), "{text}");
    let text = match Session::new(&serial(&[&port]), 2, 1, 0) {
        Ok(_) => panic!("two workers on one port"),
        Err(e) => e.to_string(),
    };
    assert!(
        text.contains("one port per device: 2 devices, 1 ports"),
        "{text}"
    );
}

/// Catches two links on one port (their frames interleaved on one line): a port in use is
/// busy for a second session, and free again once the first has ended.
#[test]
fn a_port_in_use_is_busy() {
    let (master, port) = pty();
    let device = serve(&master, 0);
    let first = Session::new(&serial(&[&port]), 1, 1, 0).unwrap();
    let text = refused(&[&port]);
    assert!(
        text.contains(&format!("serial port {}: busy", port.display())),
        "{text}"
    );
    drop(first);
    // The port closed with the session: its device thread has seen it go, and another
    // serves the next session.
    device.join().unwrap();
    serve(&master, 0);
    let again = Session::new(&serial(&[&port]), 1, 1, 0).unwrap();
    assert_eq!(again.num_workers(), 1);
}

/// The error of a hello on a port whose other end is served by `answer` (given every byte
/// the host sends), and how long it took.
fn hello_refused(answer: impl FnMut(&[u8]) -> Vec<u8> + Send + 'static) -> (String, Duration) {
    let (mut master, port) = pty();
    let mut answer = answer;
    let mut reader = master.try_clone().unwrap();
    thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = reader.read(&mut buf) {
            let reply = answer(&buf[..n]);
            if master.write_all(&reply).is_err() {
                break;
            }
        }
    });
    let start = Instant::now();
    let e = Channel::serial(&port, DEFAULT_BAUD, 3).unwrap_err();
    let text = e.to_string();
    assert!(
        matches!(&e, TransportError::Serial(SerialError::Hello { replica: 3, port: p, .. }) if *p == port),
        "{text}"
    );
    assert!(
        text.contains(&format!("serial port {}", port.display())),
        "{text}"
    );
    (text, start.elapsed())
}

/// Catches a board that never answers hanging the host, or failing without naming its
/// port: its hello is sent again through every attempt, then reported.
#[test]
fn a_port_that_answers_nothing_is_reported() {
    let (text, took) = hello_refused(|_| Vec::new());
    assert!(
        text.contains("did not answer Hello after 8 attempts"),
        "{text}"
    );
    assert!(took < Duration::from_secs(30), "{took:?}");
}

/// Catches garbage taken for a reply (or a hang on it): a port whose other end answers
/// every byte with noise is silent as far as frames go, and reported as such.
#[test]
fn a_port_that_answers_garbage_is_reported() {
    let (text, _) = hello_refused(|got| {
        got.iter()
            .flat_map(|b| [b.wrapping_mul(7), 0x55, 0x00])
            .collect()
    });
    assert!(
        text.contains("did not answer Hello after 8 attempts"),
        "{text}"
    );
}

/// Catches a board of another protocol version taken for the host's: its refusal of the
/// hello names both versions and the port.
#[test]
fn a_board_of_another_protocol_version_is_refused() {
    let mut decoder = Box::new(FrameDecoder::<4096>::new());
    let (text, _) = hello_refused(move |mut got| {
        let mut out = Vec::new();
        while !got.is_empty() {
            let (used, frame) = decoder.feed(got);
            got = &got[used..];
            let Some(Ok(body)) = frame else { continue };
            let Ok(ToDevice::Request(Envelope { seq, .. })) = decode_body::<ToDevice<'_>>(body)
            else {
                continue;
            };
            let refusal = FromDevice::Reply(Envelope {
                seq,
                body: Response::Error {
                    request: RequestKind::Hello,
                    code: ErrorCode::Version {
                        device: PROTOCOL_VERSION + 1,
                    },
                },
            });
            let (mut scratch, mut frame) = ([0u8; 256], [0u8; 512]);
            let n = encode_frame(&refusal, &mut scratch, &mut frame).unwrap();
            out.extend_from_slice(&frame[..n]);
        }
        out
    });
    let versions = format!(
        "speaks protocol version {}, this host {PROTOCOL_VERSION}",
        PROTOCOL_VERSION + 1
    );
    assert!(text.contains(&versions), "{text}");
}

/// Catches a session error that hides the port's: the session's own error wraps it.
#[test]
fn a_session_names_the_port_it_could_not_open() {
    let e = Session::new(&serial(&[Path::new("/dev/tessera-gone")]), 1, 1, 0).unwrap_err();
    assert!(
        matches!(e, SessionError::Transport(TransportError::Serial(_))),
        "{e}"
    );
}

/// The traffic of one training step of a small model on `channel`'s device, and its
/// anchors' bytes.
fn one_step(channel: Channel) -> (tessera_host::transport::Traffic, Vec<u8>) {
    let p = common::Model::linear(4, 2).program();
    let mut runtime = Runtime::prepare_on(p.clone(), vec![channel]).unwrap();
    runtime
        .weights_from_host(&common::initial_weights(&p, 1, 1))
        .unwrap();
    let before = runtime.traffic().channels;
    let anchors = runtime.run(&common::step_io(&p, 1, 2)).unwrap();
    let after = runtime.traffic().channels;
    let moved = tessera_host::transport::Traffic {
        in_place: after.in_place - before.in_place,
        bulk: after.bulk - before.bulk,
        framed: after.framed - before.framed,
        staged: after.staged - before.staged,
        requests: after.requests - before.requests,
    };
    let bytes = anchors.values().flat_map(|a| a.bytes().to_vec()).collect();
    (moved, bytes)
}

/// Catches the one function that picks a path picking another on a board: the firmware
/// under QEMU moves a step's bytes through its bulk file on its socket, and in frames on a
/// pty (the serial placement) or on its socket without the file — the same anchors on all
/// three.
#[test]
#[ignore = "needs qemu-system-arm, defmt-print and the firmware: tests/ci.sh runs it (--include-ignored)"]
fn the_firmware_moves_frames_where_it_has_no_bulk_file() {
    let _exclusive = common::exclusive();
    let firmware = common::firmware();
    let (on_socket, anchors) = one_step(Channel::qemu(&firmware, 0).unwrap());
    assert!(on_socket.bulk > 0, "{on_socket:?}");
    let framed = Channel::qemu(&firmware, 0).unwrap().without_bulk().unwrap();
    assert!(!framed.carries_bulk());
    let board = common::pty_board::PtyBoard::start(&firmware);
    let serial = Channel::serial(board.port(), DEFAULT_BAUD, 0).unwrap();
    for (name, channel) in [("socket, no file", framed), ("pty", serial)] {
        let (moved, same) = one_step(channel);
        assert_eq!(same, anchors, "{name}");
        assert_eq!(moved.bulk, 0, "{name}: {moved:?}");
        assert_eq!(
            moved.framed,
            on_socket.framed + on_socket.bulk,
            "{name}: {moved:?}"
        );
    }
}
