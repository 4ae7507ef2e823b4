#!/usr/bin/env bash
# What starting a process costs on this machine before tether-exec does
# anything: a static C program that returns at once (the C library's own
# start-up, which asks the CPU for its features and caches with `cpuid`,
# an instruction a hypervisor traps), against one with no C library at all,
# and tether-exec's `--version`, each timed as a harness times a call.
#   scripts/process-floor.sh            (N=300 pairs by default)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${TETHER_EXEC_RELEASE_BIN:-$(scripts/build-release.sh)}
dir=$(mktemp -d /tmp/tether-floor.XXXXXX); trap 'rm -rf "$dir"' EXIT
printf 'int main(void){return 0;}\n' > "$dir/true.c"
printf 'void _start(void){__asm__ volatile("mov $60,%%eax; xor %%edi,%%edi; syscall");}\n' > "$dir/bare.c"
gcc -O2 -static -o "$dir/static-true" "$dir/true.c"
gcc -O2 -static -nostdlib -o "$dir/bare-true" "$dir/bare.c"
echo "static C (glibc start-up) vs no C library: A B A-B (ms)"
python3 scripts/paired.py -n "${N:-300}" --pipes ::A "$dir/static-true" ::B "$dir/bare-true"
echo "tether-exec --version vs static C: A B A-B (ms)"
python3 scripts/paired.py -n "${N:-300}" --pipes ::A "$bin" --version ::B "$dir/static-true"
