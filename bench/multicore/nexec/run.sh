#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# bench/multicore/nexec/run.sh: the executive on N CPUs (Paper II, section
# 3.4, Table 3.1's shape): giant against fine locking, 1 and 2 CPUs, K
# swept 1 us..10 ms, and the lock model's prediction beyond 2 CPUs.
# Builds the release CLI and the model's predict example, then hands over
# to run.py, whose docstring is the documentation (pinning, repetitions,
# statistics, bar). It loads no kernel side (no eBPF), so it does not take
# /run/mantle-kernel.lock. About 2 minutes on an idle 2-CPU machine.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
(cd "$ROOT" && cargo build -q --release -p mantle-cli && \
	cargo build -q --release -p mantle-lockmodel --example predict)
exec python3 "$ROOT/bench/multicore/nexec/run.py" "$@"
