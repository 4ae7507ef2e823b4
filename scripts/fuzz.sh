#!/usr/bin/env bash
# Fuzz the parser and the gate (fuzz/fuzz_targets/gate.rs): no panic on any
# input, and a denied command placed where bash certainly runs it is never
# allowed. cargo-fuzz wants nightly flags; RUSTC_BOOTSTRAP lets the stable
# toolchain accept them (no sanitizer: `-s none`).
#   scripts/fuzz.sh [SECONDS]        (default 300; needs `cargo install cargo-fuzz`)
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
mkdir -p corpus/gate && cp -n seeds/* corpus/gate/ 2>/dev/null || true
RUSTC_BOOTSTRAP=1 cargo fuzz run gate -s none -- -max_total_time="${1:-300}" -max_len=512
