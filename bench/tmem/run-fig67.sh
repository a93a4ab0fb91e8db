#!/bin/sh
# Figures 6 and 7 of the TMEM paper on mantle (bench/tmem/fig67.rs), one
# command: builds (release), holds the shared bench lock, runs every
# policy side by side (the components and real-time threads pin
# themselves to CPU 0, the policy loop to CPU 1), writes fig67.{txt,json},
# fig6.png, fig7.png and fig67-summary.txt. Root (SCHED_FIFO threads).
#   bench/tmem/run-fig67.sh            # about 5 minutes: 3 task sets x 3 s
#   TMEM_FIG_SETS=10 TMEM_FIG_SECS=60 bench/tmem/run-fig67.sh   # the paper's
set -eu
cd "$(dirname "$0")/../.."
cargo build --release -p mantle-comp --benches --bins >/dev/null 2>&1 ||
  cargo build --release -p mantle-comp --benches --bins
BIN=$(ls -t target/release/deps/tmem_fig67-* | grep -v '\.d$' | head -1)
OUT=bench/tmem
TMEM_FIG_JSON=$OUT/fig67.json flock /tmp/mantle-bench.lock "$BIN" | tee $OUT/fig67.txt
python3 $OUT/plot_fig67.py $OUT/fig67.json $OUT/fig6.png $OUT/fig7.png | tee $OUT/fig67-summary.txt
