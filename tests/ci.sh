#!/usr/bin/env bash
# The whole tessera test suite, runnable on a fresh machine: installs what is missing,
# then runs every check CI relies on. Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "install the bare-metal targets"
rustup target add thumbv6m-none-eabi thumbv7m-none-eabi

step "workspace tests"
cargo test --workspace --locked

step "clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "tessera-core on bare metal, with and without defmt"
for target in thumbv6m-none-eabi thumbv7m-none-eabi; do
    cargo build -p tessera-core --target "$target" --locked
    cargo build -p tessera-core --target "$target" --features defmt --locked
done
cargo build -p tessera-firmware-sim --target thumbv7m-none-eabi --locked

step "all checks passed"
