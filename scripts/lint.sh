#!/usr/bin/env bash
# The lint gate, run by scripts/test.sh before the tests (so by .ci/run):
# unformatted code, any clippy warning (all targets, the workspace [lints]
# table included) and any rustdoc warning fail it. Fix, don't allow:
# an #[allow] needs a comment saying why.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
fail=0
cargo fmt --all --check || { echo "lint: cargo fmt --all would change the files above" >&2; fail=1; }
cargo clippy --workspace --all-targets --quiet -- -D warnings || { echo "lint: clippy warnings above" >&2; fail=1; }
RUSTDOCFLAGS=-Dwarnings cargo doc --workspace --no-deps --quiet || { echo "lint: rustdoc warnings above" >&2; fail=1; }
[ "$fail" = 0 ] && echo "lint: ok (fmt, clippy -D warnings, rustdoc -D warnings)"
exit "$fail"
