//! What the QEMU placement needs before it starts anything: the firmware, a 32-bit
//! little-endian ELF executable for ARM or RISC-V, and its emulator (`qemu-system-arm` or
//! `qemu-system-riscv32`) and `defmt-print` on the `PATH`; and the board the firmware was
//! built for, read from its ELF header: a RISC-V build (`riscv32imac-unknown-none-elf`,
//! `e_machine` 243) runs on `virt` (an RV32 hart, floats in software routines); an ARM one
//! (`e_machine` 40) on `mps2-an386` (Cortex-M4F, floats in hardware) when it is a hard-float
//! build (`thumbv7em-none-eabihf`), on `mps2-an385` (Cortex-M3, floats in software routines)
//! otherwise.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::input::{Input, InputError};

/// The emulators the QEMU placement runs: one per architecture.
pub(in crate::transport) const QEMUS: [&str; 2] = ["qemu-system-arm", "qemu-system-riscv32"];

/// What is wrong with the firmware or the tools the QEMU placement needs.
#[derive(Debug, thiserror::Error)]
pub enum FirmwareError {
    /// The firmware file cannot be read.
    #[error(
        "cannot read the firmware {}: {source} ({BUILD_FIRMWARE})",
        .path.display()
    )]
    Unreadable {
        /// The path given.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The firmware file was refused (not a regular file) or could not be read.
    #[error("cannot read the firmware: {0} ({BUILD_FIRMWARE})")]
    Refused(#[source] InputError),
    /// The file is not a 32-bit little-endian ARM or RISC-V ELF executable.
    #[error(
        "{} is not the device firmware: it is not a 32-bit ARM or RISC-V ELF executable \
         ({BUILD_FIRMWARE})",
        .path.display()
    )]
    NotFirmwareElf {
        /// The path given.
        path: PathBuf,
    },
    /// The file is a 32-bit little-endian ELF executable, but for a machine no tessera
    /// board has (only ARM's and RISC-V's run the firmware).
    #[error(
        "{} is not the device firmware: it is an ELF executable for e_machine {machine}, \
         and QEMU runs tessera's firmware only for ARM (e_machine {EM_ARM}: mps2-an386, \
         mps2-an385) and RISC-V (e_machine {EM_RISCV}: virt) ({BUILD_FIRMWARE})",
        .path.display()
    )]
    NoBoardFor {
        /// The path given.
        path: PathBuf,
        /// Its ELF header's `e_machine`.
        machine: u16,
    },
    /// A program the placement runs is not on the `PATH`.
    #[error("the QEMU placement needs `{tool}` on the PATH ({install})")]
    MissingTool {
        /// Its name.
        tool: &'static str,
        /// How to get it.
        install: &'static str,
    },
}

/// How to build the firmware, for error messages.
const BUILD_FIRMWARE: &str =
    "build it with `cargo build -p tessera-firmware-sim --target thumbv7em-none-eabihf --features firmware --profile firmware`, \
     or `--target riscv32imac-unknown-none-elf` for QEMU's RISC-V virt board";

/// The QEMU board a firmware runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Board {
    /// `mps2-an386`: a Cortex-M4 with its FPU, for hard-float ARM builds.
    An386,
    /// `mps2-an385`: a Cortex-M3, no FPU.
    An385,
    /// `virt`: an RV32 hart (`riscv32imac`), no FPU; the ELF is loaded at 0x8000_0000 and
    /// started there, with no firmware of QEMU's own before it (`-bios none`).
    Virt,
}

impl Board {
    /// The emulator that runs it.
    pub fn qemu(self) -> &'static str {
        match self {
            Self::An386 | Self::An385 => QEMUS[0],
            Self::Virt => QEMUS[1],
        }
    }

    /// How to install [`Board::qemu`] (Debian's package).
    fn install(self) -> &'static str {
        match self {
            Self::An386 | Self::An385 => "apt-get install qemu-system-arm",
            Self::Virt => "apt-get install qemu-system-misc",
        }
    }

    /// QEMU's `-machine` and `-cpu` (or `-bios`) for it. On every board the first
    /// `-serial` is UART0, the firmware's link.
    pub fn qemu_args(self) -> [&'static str; 4] {
        match self {
            Self::An386 => ["-machine", "mps2-an386", "-cpu", "cortex-m4"],
            Self::An385 => ["-machine", "mps2-an385", "-cpu", "cortex-m3"],
            Self::Virt => ["-machine", "virt", "-bios", "none"],
        }
    }
}

/// `EM_ARM` in an ELF's `e_machine`: the mps2 boards.
const EM_ARM: u16 = 40;
/// `EM_RISCV` in an ELF's `e_machine`: RISC-V's `virt`.
const EM_RISCV: u16 = 243;
/// `EF_ARM_ABI_FLOAT_HARD` in an ARM ELF's `e_flags`: built for a hardware FPU.
const FLOAT_HARD: u32 = 0x400;

/// The board `firmware` was built for, from its ELF header (which must be a 32-bit
/// little-endian ARM or RISC-V executable).
pub fn board_of(firmware: &Path) -> Result<Board, FirmwareError> {
    let not_firmware = || FirmwareError::NotFirmwareElf {
        path: firmware.to_path_buf(),
    };
    let mut header = [0u8; 40];
    let input = Input::open(firmware).map_err(FirmwareError::Refused)?;
    if input.len() < header.len() as u64 {
        return Err(not_firmware());
    }
    input
        .read_exact_at(&mut header, 0)
        .map_err(FirmwareError::Refused)?;
    // e_ident: magic, ELFCLASS32 (1), ELFDATA2LSB (1); e_type ET_EXEC (2).
    let elf = header[..4] == *b"\x7fELF"
        && header[4] == 1
        && header[5] == 1
        && u16::from_le_bytes([header[16], header[17]]) == 2;
    if !elf {
        return Err(not_firmware());
    }
    let flags = u32::from_le_bytes([header[36], header[37], header[38], header[39]]);
    match u16::from_le_bytes([header[18], header[19]]) {
        EM_RISCV => Ok(Board::Virt),
        EM_ARM if flags & FLOAT_HARD != 0 => Ok(Board::An386),
        EM_ARM => Ok(Board::An385),
        machine => Err(FirmwareError::NoBoardFor {
            path: firmware.to_path_buf(),
            machine,
        }),
    }
}

/// Checks, before anything starts, that `firmware` is a 32-bit little-endian ARM or RISC-V
/// ELF executable and that its emulator (`qemu-system-arm` or `qemu-system-riscv32`) and
/// `defmt-print` can be found.
pub fn check_firmware(firmware: &Path) -> Result<(), FirmwareError> {
    let board = board_of(firmware)?;
    for (tool, install) in [
        (board.qemu(), board.install()),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An ELF32 ARM executable header with `flags`.
    fn header(flags: u32) -> Vec<u8> {
        let mut h = vec![0u8; 52];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 1;
        h[5] = 1;
        h[16..18].copy_from_slice(&2u16.to_le_bytes());
        h[18..20].copy_from_slice(&EM_ARM.to_le_bytes());
        h[36..40].copy_from_slice(&flags.to_le_bytes());
        h
    }

    /// Catches a hard-float firmware started on the Cortex-M3 board (its first FPU
    /// instruction faults) and a soft-float one sent to the M4F board for no gain.
    #[test]
    fn the_board_follows_the_elf_float_abi() {
        let dir = std::env::temp_dir().join(format!("tessera-board-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let file = dir.join("fw.elf");
        fs::write(&file, header(0x0500_0400)).unwrap();
        assert_eq!(board_of(&file).unwrap(), Board::An386);
        fs::write(&file, header(0x0500_0200)).unwrap();
        assert_eq!(board_of(&file).unwrap(), Board::An385);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Catches an ELF for another machine (here x86-64, a host build of the firmware)
    /// handed to an emulator that cannot run it, or refused without saying which file and
    /// which machine it is built for.
    #[test]
    fn an_elf_for_another_machine_is_refused_naming_the_file_and_its_e_machine() {
        let dir = std::env::temp_dir().join(format!("tessera-board-x86-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let file = dir.join("fw.elf");
        let mut x86 = header(0);
        x86[18..20].copy_from_slice(&62u16.to_le_bytes()); // EM_X86_64
        fs::write(&file, x86).unwrap();
        let error = board_of(&file).unwrap_err();
        assert!(
            matches!(error, FirmwareError::NoBoardFor { machine: 62, .. }),
            "{error:?}"
        );
        let message = error.to_string();
        assert!(message.contains(&file.display().to_string()), "{message}");
        assert!(message.contains("e_machine 62"), "{message}");
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Catches a RISC-V firmware started on an Arm board (or refused), and the wrong
    /// emulator named for it: its e_flags (RVC, soft float: 0x1) mean nothing to ARM.
    #[test]
    fn a_risc_v_elf_runs_on_virt_under_qemu_system_riscv32() {
        let dir = std::env::temp_dir().join(format!("tessera-board-rv-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let file = dir.join("fw.elf");
        let mut riscv = header(0x1);
        riscv[18..20].copy_from_slice(&EM_RISCV.to_le_bytes());
        fs::write(&file, riscv).unwrap();
        let board = board_of(&file).unwrap();
        assert_eq!(board, Board::Virt);
        assert_eq!(board.qemu(), "qemu-system-riscv32");
        assert_eq!(board.qemu_args(), ["-machine", "virt", "-bios", "none"]);
        assert_eq!(Board::An386.qemu(), "qemu-system-arm");
        fs::remove_dir_all(&dir).unwrap();
    }
}
