#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# bench/executive/run.sh: the paper's Table 1 (Hijack, section 3.1) on this
# machine: a plain getppid, getppid interposed by ptrace, strace and
# mantle's executive (protected and fast paths), one-way traps, pipe RPC
# and guest<->guest RPC through the executive, side by side in one run, on
# one CPU and across two, with and without /dev/cpu_dma_latency held.
#
#   bash bench/executive/run.sh [--quick] [options]   (from the repo root, as root)
#
# This wrapper builds the three C programs with cc into
# bench/results/executive/bin and hands over to run.py, whose docstring is
# the documentation (rows, pinning, repetitions, statistics, bars, output,
# options: `bash bench/executive/run.sh --help`). See also README.md here.
#
# It does not load mantle's kernel side (no eBPF, no machine-wide state
# other than /dev/cpu_dma_latency, which it holds only while it runs), so it
# does NOT take /run/mantle-kernel.lock.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE=$ROOT/bench/executive
BIN=$ROOT/bench/results/executive/bin
mkdir -p "$BIN"
CC=${CC:-cc}
CFLAGS=${CFLAGS:--O2 -Wall -Wextra}
for prog in guest ptrace_interpose notif_floor; do
	if [[ ! -x $BIN/$prog || $HERE/$prog.c -nt $BIN/$prog ]]; then
		# shellcheck disable=SC2086
		$CC $CFLAGS -o "$BIN/$prog" "$HERE/$prog.c"
	fi
done
exec python3 "$HERE/run.py" --bin "$BIN" --argv0 "bash bench/executive/run.sh" "$@"
