//! Puts `memory.x` where the cortex-m-rt linker script finds it (bare-metal builds only).

use std::{env, fs, path::PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=memory.x");
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("none") {
        return;
    }
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    fs::copy("memory.x", out.join("memory.x")).expect("memory.x is next to Cargo.toml");
    println!("cargo:rustc-link-search={}", out.display());
}
