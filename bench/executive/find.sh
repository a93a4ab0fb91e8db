#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# bench/executive/find.sh: `find /usr -type f` natively, under mantle's
# protected and fast paths (a rare call denied; --count=all) and under
# strace, interleaved, pinned, in one run. find.py's docstring is the
# documentation (`bash bench/executive/find.sh --help`).
#
#   bash bench/executive/find.sh [--quick] [options]   (from the repo root)
#
# Needs the release mantle (cargo build --release -p mantle-cli), taskset,
# strace (its rows say "not installed" without it). Changes no machine-wide
# state; does not take /run/mantle-kernel.lock.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec python3 "$HERE/find.py" --argv0 "bash bench/executive/find.sh" "$@"
