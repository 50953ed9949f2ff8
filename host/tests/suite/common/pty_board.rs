//! A board on a pseudo-terminal, as a board on `/dev/ttyACM0` would be: the firmware under
//! `qemu-system-arm` (`mps2-an386`, Cortex-M4F) with UART0 on a pty (`-serial pty`), for
//! the serial placement to open. Semihosting stays on for QEMU's exit and the firmware's
//! logs only: QEMU runs in an empty folder of its own, so the firmware finds no bulk file
//! (it would open `bulk.bin` there), and the serial link never asks for one.
//!
//! QEMU says which pty it made — "char device redirected to /dev/pts/N (label serial0)" —
//! on stdout (QEMU 7) or stderr (later versions): both are read for it. A board that does
//! not start fails loudly (a test never skips). Dropping a [`PtyBoard`] kills its QEMU; a
//! reaper (a shell waiting on a pipe from this process) kills it if this process dies first.
//!
//! Also built into `benches/session.rs` (by path): nothing here uses the test suite's
//! other modules.
#![allow(dead_code)] // each user takes its part

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use tessera_host::runtime::Placement;
use tessera_host::transport::DEFAULT_BAUD;

/// How long QEMU may take to say which pty it made.
const START: Duration = Duration::from_secs(20);

/// The firmware under QEMU on a pty; killed on drop.
#[derive(Debug)]
pub struct PtyBoard {
    qemu: Child,
    /// The reaper and the pipe it waits on (closing it kills QEMU).
    reaper: Option<(Child, ChildStdin)>,
    port: PathBuf,
    dir: PathBuf,
}

impl PtyBoard {
    /// Starts `firmware` under QEMU with UART0 on a new pty.
    pub fn start(firmware: &Path) -> Self {
        static BOARDS: AtomicU32 = AtomicU32::new(0);
        let n = BOARDS.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("tessera-pty-board-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a folder for QEMU");
        let firmware = std::fs::canonicalize(firmware)
            .unwrap_or_else(|e| panic!("the firmware {}: {e}", firmware.display()));
        let mut qemu = Command::new("qemu-system-arm")
            .current_dir(&dir)
            .args(["-machine", "mps2-an386", "-cpu", "cortex-m4"])
            .args(["-display", "none", "-monitor", "none"])
            .args(["-semihosting-config", "enable=on,target=native"])
            .args(["-serial", "pty", "-kernel"])
            .arg(&firmware)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start qemu-system-arm: {e} (apt-get install qemu-system-arm)")
            });
        let reaper = reaper(qemu.id());
        let (found, pty) = mpsc::channel();
        for out in [
            Box::new(qemu.stdout.take().unwrap()) as Box<dyn Read + Send>,
            Box::new(qemu.stderr.take().unwrap()),
        ] {
            let found = found.clone();
            std::thread::spawn(move || watch(out, found));
        }
        let mut board = Self {
            qemu,
            reaper: Some(reaper),
            port: PathBuf::new(),
            dir,
        };
        board.port = match pty.recv_timeout(START) {
            Ok(port) => port,
            Err(_) => {
                let status = board.qemu.try_wait();
                panic!("QEMU did not say which pty it made within {START:?} (status {status:?})")
            }
        };
        board
    }

    /// The pty's path: the port the serial placement opens.
    pub fn port(&self) -> &Path {
        &self.port
    }
}

impl Drop for PtyBoard {
    fn drop(&mut self) {
        // The reaper first, while QEMU is not yet reaped: its process id cannot have been
        // reused by then.
        if let Some((mut reaper, pipe)) = self.reaper.take() {
            drop(pipe);
            let _ = reaper.wait();
        }
        let _ = self.qemu.kill();
        let _ = self.qemu.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `n` boards, started one after another.
pub fn boards(firmware: &Path, n: usize) -> Vec<PtyBoard> {
    (0..n).map(|_| PtyBoard::start(firmware)).collect()
}

/// The serial placement on `boards`' ports, at the default baud rate (a pty ignores it).
pub fn placement(boards: &[PtyBoard]) -> Placement {
    Placement::Serial {
        ports: boards.iter().map(|b| b.port().to_path_buf()).collect(),
        baud: DEFAULT_BAUD,
    }
}

/// Reads QEMU's output `out` for the pty's name, sent on `found`; the rest (the firmware's
/// defmt logs, binary) is read and dropped, so that QEMU never blocks on a full pipe.
fn watch(out: Box<dyn Read + Send>, found: mpsc::Sender<PathBuf>) {
    const SAID: &str = "char device redirected to ";
    let mut out = BufReader::new(out);
    let mut line = Vec::new();
    while let Ok(1..) = out.read_until(b'\n', &mut line) {
        let text = String::from_utf8_lossy(&line);
        if let Some(at) = text.find(SAID) {
            let rest = &text[at + SAID.len()..];
            let port = rest.split_whitespace().next().unwrap_or_default();
            let _ = found.send(PathBuf::from(port));
            break;
        }
        line.clear();
    }
    let _ = std::io::copy(&mut out, &mut std::io::sink());
}

/// A shell that kills `pid` once its stdin closes: when the board is dropped, or when this
/// process ends however it ends.
fn reaper(pid: u32) -> (Child, ChildStdin) {
    let mut reaper = Command::new("sh")
        .args([
            "-c",
            "read _; kill -KILL \"$1\" 2>/dev/null",
            "tessera-reaper",
        ])
        .arg(pid.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("sh runs");
    let pipe = reaper.stdin.take().expect("a piped stdin");
    (reaper, pipe)
}
