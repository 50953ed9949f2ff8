use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};

use super::port::open_port;
use super::*;

/// A pseudo-terminal: its master end, and the path of its slave end (the "port").
fn pty() -> (File, PathBuf) {
    let master: OwnedFd = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).unwrap();
    grantpt(&master).unwrap();
    unlockpt(&master).unwrap();
    let name = ptsname(&master, Vec::new()).unwrap();
    let path = PathBuf::from(OsString::from_vec(name.into_bytes()));
    (File::from(master), path)
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-serial-{name}-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// Catches a port refused without naming it or its rule, or a non-terminal taken as one: a
/// missing path, a regular file, a directory, a port given twice (by a second path to the
/// same device) and a baud rate of 0 are refused before anything opens; `/dev/null`, a
/// character device that is no terminal, when it is opened.
#[test]
fn a_port_is_a_terminal_given_once() {
    let dir = scratch("rules");
    let file = dir.join("not-a-port");
    fs::write(&file, b"hello").unwrap();
    let missing = dir.join("ttyACM9");
    let (_master, port) = pty();
    let again = dir.join("same-port");
    std::os::unix::fs::symlink(&port, &again).unwrap();
    let refused = |ports: &[PathBuf], baud| check_ports(ports, baud).unwrap_err();

    let e = refused(std::slice::from_ref(&missing), DEFAULT_BAUD);
    assert!(matches!(e, SerialError::Missing { .. }), "{e}");
    assert!(e.to_string().contains(&*missing.to_string_lossy()), "{e}");
    let e = refused(std::slice::from_ref(&file), DEFAULT_BAUD);
    assert!(
        e.to_string()
            .contains("it is a regular file, not a terminal"),
        "{e}"
    );
    assert_eq!(e.port(), Some(file.as_path()));
    let e = refused(std::slice::from_ref(&dir), DEFAULT_BAUD);
    assert!(e.to_string().contains("a directory"), "{e}");
    let e = refused(&[port.clone(), again.clone()], DEFAULT_BAUD);
    assert!(
        matches!(&e, SerialError::Twice { port } if *port == again),
        "{e}"
    );
    let e = refused(std::slice::from_ref(&port), 0);
    assert!(matches!(e, SerialError::Baud { baud: 0, .. }), "{e}");
    check_ports(std::slice::from_ref(&port), DEFAULT_BAUD).unwrap();

    let null = PathBuf::from("/dev/null");
    check_ports(std::slice::from_ref(&null), DEFAULT_BAUD).unwrap();
    let e = open_port(&null, DEFAULT_BAUD).err().unwrap();
    assert!(
        e.to_string()
            .contains("/dev/null: it is a character device that is not a terminal"),
        "{e}"
    );
    let e = open_port(&file, DEFAULT_BAUD).err().unwrap();
    assert!(matches!(e, SerialError::NotATerminal { .. }), "{e}");
    fs::remove_dir_all(&dir).unwrap();
}

/// Catches a port two links share (their frames interleaved on one line) and a port left
/// locked after its link closed: a port open is busy for a second opener, and free again
/// once the first has closed — its reader, blocked waiting for bytes, woken and gone.
#[test]
fn a_port_serves_one_link_at_a_time() {
    let (_master, port) = pty();
    let (writer, mut reader, closing) = open_port(&port, DEFAULT_BAUD).unwrap();
    let e = open_port(&port, DEFAULT_BAUD).err().unwrap();
    assert!(matches!(e, SerialError::Busy { .. }), "{e}");
    assert!(e.to_string().contains(&*port.to_string_lossy()), "{e}");
    let waiting = std::thread::spawn(move || {
        let mut buf = [0u8; 16];
        reader.read(&mut buf).unwrap()
    });
    std::thread::sleep(Duration::from_millis(50));
    drop(writer);
    let start = Instant::now();
    closing.close();
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(waiting.join().unwrap(), 0, "the end of the link");
    drop(open_port(&port, DEFAULT_BAUD).unwrap());
}

/// Catches a port left in a terminal's cooked mode: frames hold every byte value, and a
/// line discipline would swallow ^C and ^S, turn CR into LF, LF into CR LF, or hold bytes
/// until a newline. Every byte crosses unchanged both ways, at once.
#[test]
fn every_byte_crosses_unchanged() {
    let (mut master, port) = pty();
    let (mut writer, mut reader, closing) = open_port(&port, 9600).unwrap();
    let bytes: Vec<u8> = (0..=255u8).collect();
    master.write_all(&bytes).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    while got.len() < bytes.len() {
        let n = reader.read(&mut buf).unwrap();
        assert!(n > 0, "the link ended after {} bytes", got.len());
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got, bytes, "to the host");
    writer.write_all(&bytes).unwrap();
    let mut back = vec![0u8; bytes.len()];
    master.read_exact(&mut back).unwrap();
    assert_eq!(back, bytes, "to the board");
    drop((writer, reader));
    closing.close();
}

/// Catches a deadline shorter than a slow line takes to carry a request and its reply
/// (every request sent again while the first copy is still on the wire): the wire's time is
/// added to the usual deadline, and a fast line keeps about the usual one.
#[test]
fn the_deadline_allows_for_the_wire() {
    let limits = Limits {
        memory: 3 << 20,
        max_frame: 2048,
        replica: 0,
        lanes: 1,
        window: 8,
    };
    let at = |baud| wire_deadline(baud, &limits).as_millis();
    // 2 × 2 frames × 2048 bytes × 10 bits at 115200 baud: 0.71 s on the wire.
    assert_eq!(at(115_200), 500 + 711);
    assert_eq!(at(9600), 500 + 8533);
    assert!(at(12_000_000) < 510);
}
