#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# bench/multicore/run.sh: the application kernel (Paper III, Tables
# 4.2-4.5's shape): offloaded against native, side by side in one run.
# Builds the offload library (cargo build -p mantle-offload) and hands over
# to run.py, whose docstring is the documentation (rows, pinning,
# repetitions, statistics, bars): `bash bench/multicore/run.sh --help`.
# It loads no kernel side (no eBPF), so it does not take
# /run/mantle-kernel.lock. Needs xz, gzip, tar, find, grep; zstd
# is used when installed. Table 4.5 is loc.sh's.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [[ -z ${MANTLE_OFFLOAD_LIB:-} ]]; then
	(cd "$ROOT" && cargo build -q -p mantle-offload)
fi
exec python3 "$ROOT/bench/multicore/run.py" "$@"
