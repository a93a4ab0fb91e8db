#!/usr/bin/env bash
# Every test: unit tests of the pure cores on any host, and integration
# tests with real processes and the real kernel side. Those need root and
# are marked #[ignore = "needs root ..."]: as root this script includes them
# (--include-ignored), and one whose requirement is unmet then fails naming
# it. Without root, plain `cargo test` lists them as ignored with the reason.
# With CI set (non-empty, not 0/false; .ci/run sets CI=1), running without
# root is an error: CI must run everything. Run as root on Debian.
# First the lint gate (scripts/lint.sh: fmt, clippy and rustdoc, warnings
# denied); its failure fails the run, after the tests have run too.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
ci=0
case "${CI:-}" in ''|0|false) ;; *) ci=1 ;; esac
if [ "$(id -u)" -eq 0 ]; then
  bash scripts/setup.sh
  include=(-- --include-ignored)
else
  if [ "$ci" = 1 ]; then
    echo "test.sh: CI is set but this is not root: the root tests would only be listed as ignored; run as root" >&2
    exit 1
  fi
  echo "test.sh: not root: the tests that need root are listed as ignored, with the reason (run as root to include them)" >&2
  include=()
fi
lint=0
bash scripts/lint.sh 2>&1 || lint=1
cargo build --workspace --quiet
# --no-fail-fast: one failing test binary must not hide the others' results
failed=0
cargo test --workspace --no-fail-fast "${include[@]}" 2>&1 || failed=1
# The executive's CLI tests once more under the other design on N CPUs
# (giant locking, a thread per allowed CPU; the workspace run above used
# the default: fine, one thread). crates/exec/tests/executive.rs runs
# every design itself.
MANTLE_EXEC_LOCKING=giant \
  MANTLE_EXEC_CPUS="$(awk '/^Cpus_allowed_list/{print $2}' /proc/self/status)" \
  cargo test -p mantle-cli --test exec --no-fail-fast "${include[@]}" 2>&1 || failed=1
if [ "$lint" = 1 ]; then
  echo "test.sh: the tests ran, but the lint gate failed (above; bash scripts/lint.sh)" >&2
  exit 1
fi
exit "$failed"
