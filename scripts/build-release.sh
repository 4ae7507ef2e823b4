#!/usr/bin/env bash
# Build the release binary as it ships: a static PIE. Every agent command is
# a new tether-exec process, and a static binary starts ~0.4 ms sooner (no
# dynamic loader work, no libgcc_s constructor); see README "Measured".
# Prints the binary's path.
#   scripts/build-release.sh
# `cargo rustc` passes the flag to the final link only (proc-macros and build
# scripts cannot be built with crt-static). A later plain `cargo build
# --release` relinks the ordinary dynamic binary in the same place.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo rustc --release --bin tether-exec -q -- -C target-feature=+crt-static
bin="$PWD/target/release/tether-exec"
if ! file -b "$bin" 2>/dev/null | grep -q 'static'; then
  ldd "$bin" 2>&1 | grep -q 'not a dynamic executable' || { echo "build-release: $bin is not static" >&2; exit 1; }
fi
echo "$bin"
