#!/usr/bin/env bash
# Prints where a firmware ELF's flash goes: its .text and .rodata sizes, then its COUNT
# largest functions (default 25), largest first, in bytes, with their Rust names demangled.
# CI prints it for every board's firmware, so that growth shows in every run's log.
# Needs llvm-nm from rustup's llvm-tools component (`rustup component add llvm-tools`).
# Usage: size-report.sh ELF [COUNT]
set -euo pipefail
elf=${1:?usage: size-report.sh ELF [COUNT]}
count=${2:-25}
host=$(rustc -vV | sed -n 's/^host: //p')
nm="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-nm"
if [ ! -x "$nm" ]; then
    echo "size-report.sh: no $nm: run 'rustup component add llvm-tools'" >&2
    exit 1
fi
"$nm" --print-size --radix=d "$elf" >/dev/null # fail here, not inside the pipeline below
printf '%s\n' "$elf"
size -A "$elf" | awk '$1 == ".text" || $1 == ".rodata" { printf "  %-8s %6d bytes\n", $1, $2 }'
printf '  largest functions (bytes):\n'
# llvm-nm -C turns the legacy mangling into paths but leaves its escapes ($LT$ for <, …)
# and the hash suffix: sed finishes the job.
"$nm" --print-size --size-sort --radix=d -C "$elf" |
    awk '$3 ~ /^[tTwW]$/ { size = $2 + 0; $1 = $2 = $3 = ""; sub(/^ +/, ""); print size "\t" $0 }' |
    sort -t "$(printf '\t')" -k1,1nr |
    # The first COUNT, reading to the end: `head` would quit early and, under pipefail,
    # sort's SIGPIPE would fail the script (and CI) at random.
    awk -v n="$count" 'NR <= n' |
    sed -e 's/::h[0-9a-f]\{16\}$//' -e 's/\$LT\$/</g' -e 's/\$GT\$/>/g' -e 's/\$RF\$/\&/g' \
        -e 's/\$BP\$/*/g' -e 's/\$C\$/,/g' -e 's/\$LP\$/(/g' -e 's/\$RP\$/)/g' \
        -e 's/\$u20\$/ /g' -e 's/\$u27\$/'"'"'/g' -e 's/\$u3b\$/;/g' -e 's/\$u5b\$/[/g' \
        -e 's/\$u5d\$/]/g' -e 's/\$u7b\$/{/g' -e 's/\$u7d\$/}/g' -e 's/\.\./::/g' \
        -e 's/^\([0-9]*\)\t_</\1\t</' -e 's/::_</::</g' |
    awk -F '\t' '{ printf "  %6d  %s\n", $1, $2 }'
