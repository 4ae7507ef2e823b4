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
# The C library functions the standard library declares weak (it checks them
# for null before a call) are pulled in for real: in a static link a weak
# reference nothing else pulls in stays at address 0, and code that calls one
# without that check (tether-exec did, statx) crashes.
weak_pulled_in="-C link-arg=-Wl,--undefined=statx -C link-arg=-Wl,--undefined=copy_file_range -C link-arg=-Wl,--undefined=gettid"
# shellcheck disable=SC2086
cargo rustc --release --bin tether-exec -q -- -C target-feature=+crt-static $weak_pulled_in
bin="$PWD/target/release/tether-exec"
if ! file -b "$bin" 2>/dev/null | grep -q 'static'; then
  ldd "$bin" 2>&1 | grep -qE 'not a dynamic executable|statically linked' || { echo "build-release: $bin is not static" >&2; exit 1; }
fi
if nm "$bin" 2>/dev/null | grep -qE ' w (statx|copy_file_range|gettid)$'; then
  echo "build-release: $bin still has a weak C library symbol at address 0" >&2; exit 1
fi
echo "$bin"
