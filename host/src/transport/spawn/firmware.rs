//! What the QEMU placement needs before it starts anything: the firmware, a 32-bit
//! little-endian ARM ELF, and `qemu-system-arm` and `defmt-print` on the `PATH`.

use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use super::qemu::QEMU;

/// What is wrong with the firmware or the tools the QEMU placement needs.
#[derive(Debug)]
pub enum FirmwareError {
    /// The firmware file cannot be read.
    Unreadable {
        /// The path given.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The file is not a 32-bit little-endian ARM ELF executable.
    NotArmElf {
        /// The path given.
        path: PathBuf,
    },
    /// A program the placement runs is not on the `PATH`.
    MissingTool {
        /// Its name.
        tool: &'static str,
        /// How to get it.
        install: &'static str,
    },
}

/// How to build the firmware, for error messages.
const BUILD_FIRMWARE: &str =
    "build it with `cargo build -p tessera-firmware-sim --target thumbv7m-none-eabi --features firmware --profile firmware`";

impl fmt::Display for FirmwareError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unreadable { path, source } => write!(
                f,
                "cannot read the firmware {}: {source} ({BUILD_FIRMWARE})",
                path.display()
            ),
            Self::NotArmElf { path } => write!(
                f,
                "{} is not the device firmware: it is not a 32-bit ARM ELF executable ({BUILD_FIRMWARE})",
                path.display()
            ),
            Self::MissingTool { tool, install } => {
                write!(f, "the QEMU placement needs `{tool}` on the PATH ({install})")
            }
        }
    }
}

impl std::error::Error for FirmwareError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Unreadable { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Checks, before anything starts, that `firmware` is a 32-bit little-endian ARM ELF
/// executable and that `qemu-system-arm` and `defmt-print` can be found.
pub fn check_firmware(firmware: &Path) -> Result<(), FirmwareError> {
    let unreadable = |source| FirmwareError::Unreadable {
        path: firmware.to_path_buf(),
        source,
    };
    let mut header = [0u8; 20];
    File::open(firmware)
        .and_then(|mut file| file.read_exact(&mut header))
        .map_err(unreadable)?;
    // e_ident: magic, ELFCLASS32 (1), ELFDATA2LSB (1); e_type ET_EXEC (2); e_machine EM_ARM (40).
    let elf = header[..4] == *b"\x7fELF"
        && header[4] == 1
        && header[5] == 1
        && u16::from_le_bytes([header[16], header[17]]) == 2
        && u16::from_le_bytes([header[18], header[19]]) == 40;
    if !elf {
        return Err(FirmwareError::NotArmElf {
            path: firmware.to_path_buf(),
        });
    }
    for (tool, install) in [
        (QEMU, "apt-get install qemu-system-arm"),
        ("defmt-print", "cargo install --locked defmt-print"),
    ] {
        if !on_path(tool) {
            return Err(FirmwareError::MissingTool { tool, install });
        }
    }
    Ok(())
}

/// True when an executable file named `tool` is in a directory of `PATH`.
fn on_path(tool: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            fs::metadata(dir.join(tool))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}
