#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# bench/rpc/run.sh: guest<->guest RPC over a mantle channel against pipe
# RPC, unix-socket RPC and RPC through the executive, side by side in one
# run, on one CPU, across two and unpinned (run.py's docstring is the
# documentation: `bash bench/rpc/run.sh --help`).
#
#   bash bench/rpc/run.sh [--quick] [run.py options]   (from anywhere)
#
# Builds the release mantle and libmantle, compiles rpcbench.c against
# libmantle into bench/results/rpc/bin, and hands over to run.py, which
# writes bench/rpc/results.{txt,json} and bench/rpc/rpc.png.
# Holds nothing machine-wide (not /dev/cpu_dma_latency, no eBPF).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE=$ROOT/bench/rpc
BIN=$ROOT/bench/results/rpc/bin
mkdir -p "$BIN"
(cd "$ROOT" && cargo build --release -q -p mantle-cli -p mantle-api)
REL=$ROOT/target/release
CC=${CC:-cc}
# shellcheck disable=SC2086
$CC ${CFLAGS:--O2 -Wall -Wextra} -I"$ROOT/include" -o "$BIN/rpcbench" "$HERE/rpcbench.c" \
	-L"$REL" -Wl,-rpath,"$REL" -lmantle
args=()
for a in "$@"; do
	if [[ $a == --quick ]]; then args+=(-n 5000 --warmup 500 -r 3); else args+=("$a"); fi
done
exec python3 "$HERE/run.py" --bin "$BIN" --mantle "$REL/mantle" --argv0 "bash bench/rpc/run.sh" "${args[@]}"
