#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# bench/dispatch/run.sh: issue 11's dispatch mechanisms measured side by
# side (dispatch.c's comment says what each is and what is timed): the
# dispatched guest raised to SCHED_FIFO 1 with the others at SCHED_IDLE,
# cgroup v2 freeze/thaw, SIGSTOP/SIGCONT. One CPU (--cpu, default 0) holds
# the executive (SCHED_FIFO 99) and the guests; R repetitions (default 3)
# of N quanta (default 2000) of Q us (default 1000) with G guests (default
# 2), mechanisms interleaved in each repetition. Prints per mechanism the
# dispatch latency (decision -> the chosen guest runs) and the executive's
# wake-up lateness at quantum end (mean, median, p99, max, and the spread
# of the repetition medians), rounds where the chosen guest did not run
# within its quantum, and rounds where the leaving guest kept running.
#
#   bash bench/dispatch/run.sh [-c CPU] [-n N] [-q Q] [-g G] [-r R]
#
# Then the same with mantle's executive: per guest, per thread (one guest
# of two spinning threads) and on two CPUs (four guests, partitioned).
# Last, bench/dispatch/promises.py: each guest's CPU time against its
# dispatched time under every policy, and reservations (edf 2ms/10ms,
# fifo 20, xz under edf) beside a CPU hog of the host's on the same CPU.
#
# As root. It creates cgroups under the cgroup v2 mount (removed after)
# and does not load mantle's kernel side.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE=$ROOT/bench/dispatch
OUT=$ROOT/bench/results/dispatch
mkdir -p "$OUT"
cpu=0 n=2000 q=1000 g=2 r=3
while getopts "c:n:q:g:r:" o; do
	case $o in
	c) cpu=$OPTARG ;; n) n=$OPTARG ;; q) q=$OPTARG ;; g) g=$OPTARG ;; r) r=$OPTARG ;;
	*) exit 2 ;;
	esac
done
cc -O2 -Wall -Wextra -o "$OUT/dispatch" "$HERE/dispatch.c"
CGROUP2=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/mounts)
export CGROUP2
stamp=$(date -u +%Y%m%dT%H%M%SZ)
for rep in $(seq 1 "$r"); do
	for m in prio nice freeze stop; do
		"$OUT/dispatch" "$m" -c "$cpu" -n "$n" -q "$q" -g "$g" -o "$OUT/$stamp-$m-$rep.txt"
	done
done
python3 "$HERE/report.py" --cmd "bash bench/dispatch/run.sh $*" "$OUT/$stamp"-*.txt | tee "$OUT/$stamp.txt"

# mantle's own executive doing the same: two CPU-bound guests on CPU $cpu,
# round robin with the quantum above, for 2 s per repetition; its
# `-v` summary gives the lateness at quantum end and the switch time
MANTLE=${MANTLE:-$ROOT/target/release/mantle}
if [[ -x $MANTLE ]]; then
	sys=$OUT/$stamp-mantle.toml
	{
		printf '[dispatch]\ncpus = [%s]\nquantum = "%sus"\n' "$cpu" "$q"
		for gname in a b; do
			printf '\n[[guest]]\nname = "%s"\ncommand = ["timeout", "2", "sh", "-c", "while :; do :; done"]\n' "$gname"
		done
	} >"$sys"
	# (mantle exits with its first guest's status: timeout's 124 here)
	echo "mantle's executive (SCHED_FIFO 99, guests frozen between turns, quantum ${q} us, 2 guests, 2 s):" | tee -a "$OUT/$stamp.txt"
	for rep in $(seq 1 "$r"); do
		{ "$MANTLE" run -v --system "$sys" 2>&1 || true; } | grep 'dispatch:' | sed "s/^mantle: /  rep $rep: /" | tee -a "$OUT/$stamp.txt"
	done
	# per thread: one guest of two CPU-bound threads (each thread a task
	# in a threaded cgroup of its own), the same quantum
	printf '#include <pthread.h>\nstatic void *spin(void *a) { for (;;) ; return a; }\nint main(void) { pthread_t t; pthread_create(&t, 0, spin, 0); spin(0); }\n' >"$OUT/spin2.c"
	cc -O2 -pthread -o "$OUT/spin2" "$OUT/spin2.c"
	tsys=$OUT/$stamp-mantle-threads.toml
	{
		printf '[dispatch]\ncpus = [%s]\nquantum = "%sus"\nper = "thread"\n' "$cpu" "$q"
		printf '\n[[guest]]\nname = "two"\ncommand = ["timeout", "2", "%s"]\n' "$OUT/spin2"
	} >"$tsys"
	echo "mantle's executive per thread (one guest, two CPU-bound threads, quantum ${q} us, 2 s):" | tee -a "$OUT/$stamp.txt"
	for rep in $(seq 1 "$r"); do
		{ "$MANTLE" run -v --system "$tsys" 2>&1 || true; } | grep 'dispatch:' | sed "s/^mantle: /  rep $rep: /" | tee -a "$OUT/$stamp.txt"
	done
	# two CPUs (when there are): four CPU-bound guests, partitioned two
	# per CPU
	if (($(nproc) >= 2)); then
		other=$(( cpu == 0 ? 1 : 0 ))
		csys=$OUT/$stamp-mantle-2cpu.toml
		{
			printf '[dispatch]\ncpus = [%s, %s]\nquantum = "%sus"\n' "$cpu" "$other" "$q"
			for gname in a b c d; do
				printf '\n[[guest]]\nname = "%s"\ncommand = ["timeout", "2", "sh", "-c", "while :; do :; done"]\n' "$gname"
			done
		} >"$csys"
		echo "mantle's executive on CPUs $cpu and $other (four guests, two per CPU, quantum ${q} us, 2 s):" | tee -a "$OUT/$stamp.txt"
		for rep in $(seq 1 "$r"); do
			{ "$MANTLE" run -v --system "$csys" 2>&1 || true; } | grep 'dispatch:' | sed "s/^mantle: /  rep $rep: /" | tee -a "$OUT/$stamp.txt"
		done
	fi
	# issue 29: does dispatching keep its promises? Each guest's CPU time
	# against its dispatched time under every policy, and reservations
	# beside a CPU hog of the host's (promises.py's comment)
	MANTLE=$MANTLE python3 "$HERE/promises.py" -c "$cpu" -r "$r" | tee -a "$OUT/$stamp.txt"
else
	echo "no mantle binary at $MANTLE (cargo build --release): its row is not measured" | tee -a "$OUT/$stamp.txt"
fi
