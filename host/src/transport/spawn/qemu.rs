//! The firmware under QEMU (`qemu-system-arm` for the mps2 boards, `qemu-system-riscv32`
//! for RISC-V's `virt`): its UART0 (the first `-serial` on every board) on a Unix socket,
//! its bulk window a file in its working folder, its defmt logs decoded by `defmt-print`.

use std::fs::{self, File};
use std::io;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::firmware::{board_of, FirmwareError};
use super::reaper::reaper;
use super::{DeviceHandle, Link};
use crate::transport::children::{self, Adopted};
use crate::transport::shared::Window;
use crate::transport::TransportError;

/// How long QEMU's UART socket may take to appear.
const QEMU_START: Duration = Duration::from_secs(10);

/// Bytes of the bulk file of a QEMU device (its arena holds 3 MiB).
pub const QEMU_WINDOW_BYTES: usize = 2 << 20;
/// The bulk file's name in QEMU's working folder (the firmware opens it by this name).
const QEMU_BULK_FILE: &str = "bulk.bin";

/// The firmware ELF `firmware` under QEMU, on the board it was built for (see
/// [`board_of`]), its UART0 on a Unix socket, its defmt logs through `defmt-print` to stderr.
/// The firmware and the tools are the caller's to check
/// ([`check_firmware`](super::check_firmware)), once.
pub(in crate::transport) fn qemu(firmware: &Path, replica: u32) -> Result<Link, TransportError> {
    // QEMU runs in its own folder: name the firmware by its full path.
    let firmware = &fs::canonicalize(firmware).map_err(|source| FirmwareError::Unreadable {
        path: firmware.to_path_buf(),
        source,
    })?;
    static LAUNCHES: AtomicU32 = AtomicU32::new(0);
    let launch = LAUNCHES.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("tessera-qemu-{}-{launch}", std::process::id()));
    fs::create_dir_all(&dir)?;
    let socket = dir.join("uart0.sock");
    let chardev = format!(
        "socket,id=uart0,path={},server=on,wait=off",
        socket.display()
    );
    let bulk = bulk_file(&dir)?;
    let board = board_of(firmware)?;
    let program = board.qemu();
    let mut command = Command::new(program);
    command
        .current_dir(&dir)
        .args(board.qemu_args())
        .args(["-display", "none", "-monitor", "none"])
        .args(["-semihosting-config", "enable=on,target=native"])
        .args(["-chardev", &chardev, "-serial", "chardev:uart0", "-kernel"])
        .arg(firmware)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let (qemu, pipes) =
        children::spawn(&mut command, program).map_err(|source| TransportError::Spawn {
            replica,
            program: program.into(),
            source,
        })?;
    let decoder = match pipes.stdout {
        Some(logs) => Some(decoder(logs, firmware, replica)?),
        None => None,
    };
    let mut pids = vec![qemu.pid()];
    pids.extend(decoder.as_ref().map(Adopted::pid));
    let reaper = reaper(replica, &pids);
    // From here on, an early return stops QEMU through the handle's drop.
    let handle = DeviceHandle::Qemu {
        program,
        qemu: Some(qemu),
        decoder,
        reaper: Some(reaper?),
        dir,
    };
    let stream = connect_when_ready(&socket, &handle, replica)?;
    let reader = stream.try_clone()?;
    Ok(Link::Qemu {
        to: Box::new(stream),
        from: Box::new(reader),
        bulk: Window::File {
            file: bulk,
            len: QEMU_WINDOW_BYTES,
        },
        handle,
    })
}

/// The bulk file of a QEMU device, `QEMU_WINDOW_BYTES` long, in the folder `dir` QEMU runs
/// in (semihosting paths are relative to it).
fn bulk_file(dir: &Path) -> io::Result<File> {
    let bulk = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.join(QEMU_BULK_FILE))?;
    bulk.set_len(QEMU_WINDOW_BYTES as u64)?;
    Ok(bulk)
}

/// `defmt-print` decoding `logs`, QEMU's stdout, with the symbols of `firmware`, to stderr.
fn decoder(logs: ChildStdout, firmware: &Path, replica: u32) -> Result<Adopted, TransportError> {
    let mut command = Command::new("defmt-print");
    command
        .arg("-e")
        .arg(firmware)
        .stdin(logs)
        .stdout(Stdio::from(io::stderr()));
    let (decoder, _) =
        children::spawn(&mut command, "defmt-print").map_err(|source| TransportError::Spawn {
            replica,
            program: "defmt-print".into(),
            source,
        })?;
    Ok(decoder)
}

/// Connects to QEMU's UART socket, which appears a moment after QEMU starts.
fn connect_when_ready(
    socket: &Path,
    handle: &DeviceHandle,
    replica: u32,
) -> Result<UnixStream, TransportError> {
    let start = Instant::now();
    loop {
        match UnixStream::connect(socket) {
            Ok(stream) => return Ok(stream),
            Err(e) if start.elapsed() > QEMU_START => return Err(e.into()),
            Err(_) => {
                if let Some(status) = handle.exit_status(Duration::ZERO) {
                    return Err(TransportError::Exited {
                        replica,
                        program: handle.program(),
                        status,
                    });
                }
                thread::sleep(Duration::from_millis(10));
            }
        }
    }
}
