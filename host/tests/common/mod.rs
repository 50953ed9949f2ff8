//! What the host's end-to-end suites share.
#![allow(dead_code)] // each suite uses its own part

use std::path::{Path, PathBuf};

/// The firmware ELF: `$TESSERA_FIRMWARE`, or the release build in this workspace. A QEMU
/// test that cannot find it fails, never skips.
pub fn firmware() -> PathBuf {
    let path = std::env::var_os("TESSERA_FIRMWARE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../target/thumbv7m-none-eabi/firmware/tessera-firmware")
        });
    assert!(
        path.exists(),
        "the QEMU test cannot run: no firmware at {}; build it with `cargo build -p \
         tessera-firmware-sim --target thumbv7m-none-eabi --features firmware --profile firmware` \
         (tests/ci.sh does)",
        path.display()
    );
    path
}
