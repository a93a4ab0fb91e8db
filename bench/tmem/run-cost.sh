#!/bin/sh
# The TMEM policy's cost (bench/tmem/cost.rs), one command: builds, holds
# the shared bench lock, pins the process and the components it starts to
# CPU 0, writes cost.{txt,json} and cost.png. Root (FIFO load threads).
#   bench/tmem/run-cost.sh [REPS]
set -eu
cd "$(dirname "$0")/../.."
REPS=${1:-200}
cargo build --release -p mantle-comp --benches --bins >/dev/null
BIN=$(ls -t target/release/deps/tmem_cost-* | grep -v '\.d$' | head -1)
OUT=bench/tmem
TMEM_COST_REPS=$REPS TMEM_COST_JSON=$OUT/cost.json \
  flock /tmp/mantle-bench.lock taskset -c 0 "$BIN" | tee $OUT/cost.txt
python3 $OUT/plot_cost.py $OUT/cost.json $OUT/cost.png
