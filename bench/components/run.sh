#!/bin/sh
# Table III of the TMEM paper (seeds/003 §VI-A) plus RPC baselines, one
# command. Holds the shared bench lock; pins the process (and every
# component it starts) to CPU 0; TABLE3_CROSS=1 adds rows with the servers
# on CPU 1. Run as root (the PI rows use a SCHED_FIFO caller).
#   bench/components/run.sh [REPS]
set -eu
cd "$(dirname "$0")/../.."
REPS=${1:-20000}
cargo build --release -p mantle-comp --benches >/dev/null
BIN=$(ls -t target/release/deps/table3-* | grep -v '\.d$' | head -1)
OUT=bench/components
TABLE3_REPS=$REPS TABLE3_CROSS=${TABLE3_CROSS:-1} TABLE3_JSON=$OUT/table3.json \
  flock /tmp/mantle-bench.lock taskset -c 0 "$BIN" | tee $OUT/table3.txt
python3 $OUT/plot.py $OUT/table3.json $OUT/table3.png
