#!/usr/bin/env bash
# Runs a tessera firmware ELF under QEMU (mps2-an385, Cortex-M3), decodes its defmt logs
# with defmt-print, and exits with QEMU's own status: the firmware's semihosting exit code,
# non-zero after a panic or HardFault, 124 if it had to be stopped (a lockup is no pass).
# UART0 is not connected. Usage: qemu-run.sh ELF [SECONDS]
set -uo pipefail
elf=${1:?usage: qemu-run.sh ELF [SECONDS]}
limit=${2:-60}
timeout --foreground "$limit" \
    qemu-system-arm -machine mps2-an385 -cpu cortex-m3 -display none -monitor none \
    -serial null -semihosting-config enable=on,target=native -kernel "$elf" \
    | defmt-print -e "$elf"
status=("${PIPESTATUS[@]}")
if [ "${status[1]}" -ne 0 ]; then
    echo "qemu-run.sh: defmt-print failed with status ${status[1]}" >&2
    exit 1
fi
exit "${status[0]}"
