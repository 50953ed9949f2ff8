#!/usr/bin/env bash
# Runs a tessera firmware ELF under QEMU on the board it was built for, as tessera's QEMU
# placement chooses from the ELF header: e_machine 243 (RISC-V) on `qemu-system-riscv32
# -machine virt` (loaded at 0x80000000, no firmware of QEMU's own before it); e_machine 40
# (ARM) on mps2-an386 (Cortex-M4F) for a hard-float ELF, mps2-an385 (Cortex-M3) otherwise.
# Decodes its defmt logs with defmt-print, and exits with QEMU's own status: the firmware's
# semihosting exit code, non-zero after a panic or a fault, 124 if it had to be stopped (a
# lockup is no pass). UART0 is not connected. Usage: qemu-run.sh ELF [SECONDS]
set -uo pipefail
elf=${1:?usage: qemu-run.sh ELF [SECONDS]}
limit=${2:-60}
# e_machine: bytes 18..20 of the ELF header.
machine=$(od -An -tu2 -j18 -N2 "$elf" | tr -d ' ')
case "$machine" in
    243)
        qemu=qemu-system-riscv32
        board=(-machine virt -bios none)
        ;;
    40)
        qemu=qemu-system-arm
        # e_flags (bytes 36..40 of an ELF32 header): EF_ARM_ABI_FLOAT_HARD (0x400) marks the
        # FPU build.
        flags=$(od -An -tu4 -j36 -N4 "$elf" | tr -d ' ')
        if (( flags & 0x400 )); then
            board=(-machine mps2-an386 -cpu cortex-m4)
        else
            board=(-machine mps2-an385 -cpu cortex-m3)
        fi
        ;;
    *)
        echo "qemu-run.sh: $elf is not a firmware ELF for a tessera board (e_machine $machine)" >&2
        exit 1
        ;;
esac
timeout --foreground "$limit" \
    "$qemu" "${board[@]}" -display none -monitor none \
    -serial null -semihosting-config enable=on,target=native -kernel "$elf" \
    | defmt-print -e "$elf"
status=("${PIPESTATUS[@]}")
if [ "${status[1]}" -ne 0 ]; then
    echo "qemu-run.sh: defmt-print failed with status ${status[1]}" >&2
    exit 1
fi
exit "${status[0]}"
