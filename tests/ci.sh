#!/usr/bin/env bash
# The whole tessera test suite, runnable on a fresh machine: installs what is missing,
# then runs every check CI relies on. Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

# The toolchain the workspace declares as its minimum (rust-version in Cargo.toml).
msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)

step "install the bare-metal targets, llvm-tools, the rust-version toolchain, QEMU, defmt-print and OpenMPI"
rustup target add thumbv6m-none-eabi thumbv7m-none-eabi thumbv7em-none-eabihf \
    riscv32imac-unknown-none-elf riscv32imc-unknown-none-elf
# llvm-nm, for the firmware's per-function size report.
rustup component add llvm-tools
rustup toolchain install "$msrv" --profile minimal
if ! command -v qemu-system-arm >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq qemu-system-arm
fi
# qemu-system-riscv32 (the RISC-V board, virt) is in Debian's qemu-system-misc.
if ! command -v qemu-system-riscv32 >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq qemu-system-misc
fi
if ! command -v defmt-print >/dev/null; then
    cargo install --locked defmt-print
fi
# OpenMPI for the multi-instance suite; libclang for the `mpi` crate's bindings.
if ! command -v mpirun >/dev/null || ! dpkg -s libopenmpi-dev libclang-common-14-dev >/dev/null 2>&1; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends openmpi-bin libopenmpi-dev libclang1-14 \
        libclang-common-14-dev
fi
mpirun --version | head -n 1
qemu-system-arm --version | head -n 1
qemu-system-riscv32 --version | head -n 1
defmt-print --version
# The serial placement's tests put the firmware's UART0 on pseudo-terminals (QEMU's
# `-serial pty`) and open them as boards' ports: without /dev/ptmx they could not run.
if [ ! -c /dev/ptmx ]; then
    echo "error: no /dev/ptmx: the serial placement's tests need pseudo-terminals" >&2
    exit 1
fi

# The three QEMU boards: mps2-an386 (Cortex-M4F, hardware floats), the QEMU placement's
# default and the board the workspace tests run; mps2-an385 (Cortex-M3, no FPU) and
# RISC-V's virt (riscv32imac, no FPU): built, sized and self-tested too, and run through
# the QEMU placement below. The boards' code memory is larger than the budgets (memory.x,
# memory-riscv.x), so no linker would refuse a firmware over them; these checks do.
firmware_targets=(thumbv7em-none-eabihf thumbv7m-none-eabi riscv32imac-unknown-none-elf)
# check_text ELF LABEL BUDGET: the ELF's .text within BUDGET bytes, or fail naming it.
check_text() {
    size -A "$1" | awk -v t="$2" -v budget="$3" '
        $1 == ".text" {
            found = 1
            printf "%s .text: %d bytes (budget: at most %d)\n", t, $2, budget
            if ($2 > budget) {
                printf "error: %s is %d bytes over its flash budget\n", t, $2 - budget > "/dev/stderr"
                exit 1
            }
        }
        END { if (!found) { printf "error: no .text section in %s\n", t > "/dev/stderr"; exit 1 } }'
}

step "the firmware with the custom kernel example's kernel (feature custom-kernel), for the three boards, within 64 KiB"
# What a user's kernel costs: the custom kernel example's `double` (its own file,
# firmware-sim/examples/kernels/double.rs) searched before the built-ins, within the whole
# 64 KiB (65536 bytes) flash budget. Kept beside the firmware as tessera-firmware-custom-kernel
# (the plain firmware, built next, takes the usual name); the QEMU suite calls `double` on
# each board's (custom_kernel::double_runs_on_the_firmware_in_qemu).
for target in "${firmware_targets[@]}"; do
    cargo build -p tessera-firmware-sim --target "$target" --features custom-kernel --profile firmware --locked
    cp "target/$target/firmware/tessera-firmware" "target/$target/firmware/tessera-firmware-custom-kernel"
    check_text "target/$target/firmware/tessera-firmware-custom-kernel" "the $target firmware with the custom kernel" 65536
done

step "firmware for the three QEMU boards (built for size: cargo profile firmware), within 56 KiB"
# Each board's .text must stay within 56 KiB (57344 bytes), so that 8 KiB of the 64 KiB
# flash budget are left for users' kernels (the firmware with the custom kernel example's,
# built before). The size report before each check lists the largest functions, so that
# growth shows in every run.
for target in "${firmware_targets[@]}"; do
    cargo build -p tessera-firmware-sim --target "$target" --features firmware --profile firmware --locked
    bash firmware-sim/size-report.sh "target/$target/firmware/tessera-firmware" 25
    check_text "target/$target/firmware/tessera-firmware" "the $target firmware" 57344
done
firmware=target/thumbv7em-none-eabihf/firmware/tessera-firmware
riscv_firmware=target/riscv32imac-unknown-none-elf/firmware/tessera-firmware

step "on-target tests in QEMU, on the three boards"
for target in "${firmware_targets[@]}"; do
    bash firmware-sim/qemu-run.sh "target/$target/firmware/tessera-selftest" 60
done

step "formatting"
cargo fmt --all --check

step "workspace tests, the QEMU ones included (they run the firmware above, on QEMU's socket and on ptys as serial ports)"
TESSERA_FIRMWARE="$PWD/$firmware" \
    TESSERA_CUSTOM_FIRMWARE="$PWD/target/thumbv7em-none-eabihf/firmware/tessera-firmware-custom-kernel" \
    cargo test --workspace --locked -- --include-ignored

step "the Cortex-M3 board (no FPU) through the QEMU placement: parity with the reference, the custom kernel"
TESSERA_FIRMWARE="$PWD/target/thumbv7m-none-eabi/firmware/tessera-firmware" cargo test -p tessera-host \
    --test suite --locked -- --include-ignored --exact runtime_parity::parity::qemu_matches_the_reference
# …and the custom kernel example's `double` on its firmware with that kernel.
TESSERA_CUSTOM_FIRMWARE="$PWD/target/thumbv7m-none-eabi/firmware/tessera-firmware-custom-kernel" \
    cargo test -p tessera-host --test suite --locked -- --include-ignored --exact \
    custom_kernel::double_runs_on_the_firmware_in_qemu

step "the RISC-V board (QEMU virt) through the QEMU placement: every QEMU test of the suite"
# The same tests the Cortex-M4F firmware passes above, with the RISC-V firmware: parity
# with the reference, the default job's loss line byte for byte (the threads' line:
# `loss: 1.07970 at step 1, 0.18432 at step 40`), the session scenarios and session tests
# on QEMU, checkpoints, signals, step failures and the custom kernel. Each QEMU test has "qemu" in its name
# (the filter); about 30 s on two cores.
TESSERA_FIRMWARE="$PWD/$riscv_firmware" \
    TESSERA_CUSTOM_FIRMWARE="$PWD/target/riscv32imac-unknown-none-elf/firmware/tessera-firmware-custom-kernel" \
    cargo test -p tessera-host --test suite --locked -- --include-ignored qemu

step "the default training job on the RISC-V board, from the CLI: the threads' loss line, timed"
# What a user runs (`tessera train --placement qemu --firmware …`, a release build), held to
# the threads' loss line byte for byte; its wall time is printed for the record (about 6 s
# on two cores, as on the Cortex-M4F board).
cargo build -p tessera-host --release --locked
tessera=target/release/tessera
threads_loss=$("$tessera" train --placement thread | grep '^loss:')
started=$(date +%s%N)
riscv_loss=$("$tessera" train --placement qemu --firmware "$riscv_firmware" | grep '^loss:')
elapsed_ms=$((($(date +%s%N) - started) / 1000000))
printf 'default job on RISC-V (QEMU virt): %d.%03d s wall\n' $((elapsed_ms / 1000)) $((elapsed_ms % 1000))
echo "threads: $threads_loss"
echo "RISC-V:  $riscv_loss"
if [ "$riscv_loss" != "$threads_loss" ]; then
    echo "error: the RISC-V firmware's loss line differs from the threads'" >&2
    exit 1
fi

step "multi-instance suite: mpirun -np 2 and -np 4 against one process (feature mpi)"
cargo build -p tessera-host --features mpi --example mpi_panic --example session_across --locked
cargo test -p tessera-host --features mpi --test mpi --locked

step "the session scenarios (QEMU ones too) and the sharded loader across 2 and 4 MPI ranks (feature mpi)"
TESSERA_FIRMWARE="$PWD/$firmware" cargo test -p tessera-host --features mpi --test suite --locked -- \
    --include-ignored session_scenarios::across_ranks
# The QEMU scenarios across ranks again on the RISC-V board (about a second).
TESSERA_FIRMWARE="$PWD/$riscv_firmware" cargo test -p tessera-host --features mpi --test suite --locked -- \
    --include-ignored --exact session_scenarios::across_ranks::qemu_scenarios_across_two_ranks

step "the Python package: one wheel with MPI, installed where no Rust is; its pytest suite, across 2 MPI ranks too"
# The build tool from PyPI, at the version this suite was last run with, in an environment
# of its own.
build_venv="$PWD/target/python-build-venv"
rm -rf "$build_venv"
python3 -m venv "$build_venv"
"$build_venv/bin/pip" install --quiet --disable-pip-version-check maturin==1.16.0
# The wheel is built once: a release build for every CPython from 3.9 (abi3), with the
# cargo feature `mpi`. It links this machine's OpenMPI, the one its mpirun starts, so it is
# tagged `linux` and left unrepaired (a repair would copy libmpi into the wheel).
wheels="$PWD/target/python-wheels"
rm -rf "$wheels"
"$build_venv/bin/maturin" build --release --locked -m host/python/Cargo.toml --features mpi \
    --compatibility linux --auditwheel skip --out "$wheels"
wheel=$(echo "$wheels"/tessera-*-cp39-abi3-linux_*.whl)
# Installed as a user without Rust installs it: a fresh virtual environment whose PATH has
# no cargo and no rustc (every directory holding one dropped; the QEMU tests' defmt-print,
# a decoder, not a toolchain, kept through a directory of its own).
tools="$PWD/target/python-tools"
rm -rf "$tools"
mkdir -p "$tools"
ln -s "$(command -v defmt-print)" "$tools/defmt-print"
no_rust=$(printf '%s\n' "$PATH" | tr ':' '\n' | while read -r dir; do
    if [ -n "$dir" ] && [ ! -e "$dir/cargo" ] && [ ! -e "$dir/rustc" ]; then printf '%s:' "$dir"; fi
done)
venv="$PWD/target/python-venv"
python_path="$venv/bin:$tools:${no_rust%:}"
rm -rf "$venv"
env PATH="$python_path" python3 -m venv "$venv"
for tool in cargo rustc; do
    if env PATH="$python_path" sh -c "command -v $tool"; then
        echo "error: $tool is on the PATH of the Python package's tests" >&2
        exit 1
    fi
done
env PATH="$python_path" "$venv/bin/pip" install --quiet --disable-pip-version-check \
    numpy==2.4.6 pytest==9.2.0 "$wheel"
# The QEMU tests (the serial placement's on ptys too) run the Cortex-M4F firmware built
# above, and the MPI tests (test_ranks.py: a session and a runtime across 2 ranks against
# one host's results, a killed rank, a killed remote device) run mpirun from this
# environment; both fail rather than skip.
env PATH="$python_path" TESSERA_FIRMWARE="$PWD/$firmware" TESSERA_PYTHON_QEMU=required \
    TESSERA_PYTHON_MPI=required "$venv/bin/python" -m pytest -q host/python/tests

step "clippy (warnings are errors), host and firmware"
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo clippy -p tessera-host --all-targets --features mpi --locked -- -D warnings
cargo clippy -p tessera-python --all-targets --features mpi --locked -- -D warnings
for target in "${firmware_targets[@]}"; do
    cargo clippy -p tessera-firmware-sim --target "$target" --features firmware --locked -- -D warnings
done

step "documentation (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked

step "the declared rust-version ($msrv) builds everything"
cargo "+$msrv" check --workspace --all-targets --locked

step "tessera-core on bare metal, with and without defmt"
# riscv32imc has no atomic instructions at all: the core must not need them.
for target in thumbv6m-none-eabi thumbv7m-none-eabi riscv32imac-unknown-none-elf riscv32imc-unknown-none-elf; do
    cargo build -p tessera-core --target "$target" --locked
    cargo build -p tessera-core --target "$target" --features defmt --locked
done

step "all checks passed"
