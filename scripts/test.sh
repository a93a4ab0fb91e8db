#!/usr/bin/env bash
# Every test: unit tests of the pure cores on any host, and integration
# tests with real processes and the real kernel side (root). With CI set,
# a missing kernel feature fails instead of skipping. Run as root on Debian.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
bash scripts/setup.sh
cargo build --workspace --quiet
# --no-fail-fast: one failing test binary must not hide the others' results
cargo test --workspace --no-fail-fast 2>&1
