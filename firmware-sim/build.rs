//! Puts the board's memory layout where the runtime's linker script finds it, as
//! `memory.x` (bare-metal builds only): `memory.x` for the Arm boards (cortex-m-rt),
//! `memory-riscv.x` for QEMU virt (riscv-rt, which includes it through its `memory`
//! feature).

use std::{env, fs, path::PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=memory.x");
    println!("cargo:rerun-if-changed=memory-riscv.x");
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("none") {
        return;
    }
    let layout = match env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("riscv32") => "memory-riscv.x",
        _ => "memory.x",
    };
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    fs::copy(layout, out.join("memory.x")).expect("the layouts are next to Cargo.toml");
    println!("cargo:rustc-link-search={}", out.display());
}
