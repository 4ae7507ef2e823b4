#!/usr/bin/env bash
# Man pages (one per subcommand) and bash/zsh/fish completions, generated from
# the clap definition so they never drift from the real command line.
#   scripts/gen-docs.sh [OUT_DIR]      (default target/docs)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run -q --example gen-docs -- "${1:-target/docs}"
