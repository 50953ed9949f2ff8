//! Where a Python program's devices run: `"thread"`, `"process"`, `"qemu"` or `"serial"`,
//! and what each needs.
//!
//! - `"thread"`: device threads of the Python process.
//! - `"process"`: one child process per device, each running `tessera device` — the
//!   `tessera` command this package installs beside the interpreter (the `exe` argument,
//!   else `TESSERA_EXE`, else the `tessera` script in `sys.executable`'s directory, else
//!   the first `tessera` on `PATH`).
//! - `"qemu"`: the firmware under QEMU on the board its ELF was built for
//!   (`qemu-system-arm`, or `qemu-system-riscv32` for a RISC-V build; the `firmware`
//!   argument, else `TESSERA_FIRMWARE`).
//! - `"serial"`: boards flashed with the firmware on serial ports (the `ports` argument, one
//!   per device, at `baud`, 50 to 12000000: `tessera_host::transport::BAUD`). `ports` with
//!   any other placement is refused rather than ignored.
//!
//! A host-placed device's memory is 4 KiB to 1 GiB, the bounds of `tessera device
//! --memory`: checked here for every placement, so that an absurd size is a `ValueError`
//! rather than a device thread failing to allocate it (which would abort the process).

use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use tessera_host::placement::{Placement, DEVICE_MEMORY};
use tessera_host::transport::BAUD;

/// What a placement may need, as the keyword arguments that say it.
pub(crate) struct Needs {
    /// The `tessera` command, for `"process"`.
    pub exe: Option<PathBuf>,
    /// The firmware ELF, for `"qemu"`.
    pub firmware: Option<PathBuf>,
    /// The boards' serial ports, for `"serial"`.
    pub ports: Option<Vec<PathBuf>>,
    /// Their baud rate, for `"serial"`.
    pub baud: u32,
}

/// The placement Python names, with what it needs found.
pub(crate) fn placement(py: Python<'_>, name: &str, needs: Needs) -> PyResult<Placement> {
    let Needs {
        exe,
        firmware,
        ports,
        baud,
    } = needs;
    if ports.is_some() && name != "serial" {
        return Err(PyValueError::new_err(format!(
            "ports name boards' serial ports, for placement \"serial\" only (not {name:?})"
        )));
    }
    match name {
        "thread" => Ok(Placement::Thread),
        "process" => Ok(Placement::Process(match exe {
            Some(exe) => exe,
            None => tessera_command(py)?,
        })),
        "qemu" => match firmware.or_else(|| std::env::var_os("TESSERA_FIRMWARE").map(PathBuf::from))
        {
            Some(firmware) => Ok(Placement::Qemu(firmware)),
            None => Err(PyValueError::new_err(
                "placement \"qemu\" needs the firmware: pass firmware=PATH or set TESSERA_FIRMWARE",
            )),
        },
        "serial" => serial(ports.unwrap_or_default(), baud),
        other => Err(PyValueError::new_err(format!(
            "placement {other:?} is none of \"thread\", \"process\", \"qemu\", \"serial\""
        ))),
    }
}

/// The serial placement on `ports` at `baud`, once there are ports and `baud` is within
/// [`BAUD`] (the ports themselves are the Rust placement's to check: it names the port).
fn serial(ports: Vec<PathBuf>, baud: u32) -> PyResult<Placement> {
    if ports.is_empty() {
        return Err(PyValueError::new_err(
            "placement \"serial\" needs the boards' serial ports: pass ports=[PATH, ...], one \
             per device",
        ));
    }
    if !BAUD.contains(&baud) {
        return Err(PyValueError::new_err(format!(
            "a baud rate of {baud}: a port is set to {} to {} baud",
            BAUD.start(),
            BAUD.end()
        )));
    }
    Ok(Placement::Serial { ports, baud })
}

/// `memory` once it is within the bounds of a host-placed device's memory
/// ([`DEVICE_MEMORY`]).
pub(crate) fn device_memory(memory: usize) -> PyResult<usize> {
    if DEVICE_MEMORY.contains(&memory) {
        Ok(memory)
    } else {
        Err(PyValueError::new_err(format!(
            "a device's memory is 4096 to 1073741824 bytes, not {memory}"
        )))
    }
}

/// The `tessera` command that serves a child-process device (see the module doc).
fn tessera_command(py: Python<'_>) -> PyResult<PathBuf> {
    if let Some(exe) = std::env::var_os("TESSERA_EXE") {
        return Ok(exe.into());
    }
    let interpreter: PathBuf = py.import("sys")?.getattr("executable")?.extract()?;
    if let Some(beside) = interpreter.parent().map(|dir| dir.join("tessera")) {
        if beside.is_file() {
            return Ok(beside);
        }
    }
    let found: Option<PathBuf> = py
        .import("shutil")?
        .call_method1("which", ("tessera",))?
        .extract()?;
    found.ok_or_else(|| {
        PyValueError::new_err(
            "placement \"process\" needs the tessera command (installed with this package): \
             pass exe=PATH or set TESSERA_EXE",
        )
    })
}
