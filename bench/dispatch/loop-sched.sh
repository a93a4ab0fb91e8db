#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# bench/dispatch/loop-sched.sh: issue 29's stability check of the
# dispatcher's two guarantees, under competing load. Runs N rounds
# (default 50) of
#   every_policy_runs_a_guest_only_while_it_is_dispatched
#   an_edf_reservation_gets_its_share_beside_a_host_cpu_hog
# (crates/cli/tests/exec.rs) while, for the whole loop,
#   * two host CPU hogs (SCHED_OTHER, unpinned) spin, and
#   * a SCHED_FIFO 50 task pinned to CPU 0, the guests' CPU, spins
#     3 ms of every 10 ms (duty.c: 30% of CPU 0 of other real-time work,
#     at the priority of the dispatched reservations);
# on top of whatever else loads the machine. Prints each round's verdicts
# and the figures the tests print, then the pass counts and the load
# average. As root (the tests need cgroups and real-time priorities).
#
#   bash bench/dispatch/loop-sched.sh [-n ROUNDS] [-o LOG] [-L]
#     -L  no competing load of ours (the machine's own only)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
rounds=50 log="" load=1
while getopts "n:o:L" o; do
	case $o in
	n) rounds=$OPTARG ;; o) log=$OPTARG ;; L) load=0 ;;
	*) exit 2 ;;
	esac
done
tmp=$(mktemp -d /tmp/mantle-loop-sched.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
[[ -n $log ]] || log=$tmp/log
cd "$ROOT" || exit 1
bin=$(cargo test -p mantle-cli --test exec --no-run --message-format=json 2>/dev/null |
	python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "exec" and m.get("executable"): print(m["executable"])')
[[ -x $bin ]] || { echo "loop-sched: could not build the exec tests" >&2; exit 1; }
if ((load)); then
	cc -O2 -Wall -o "$tmp/duty" "$ROOT/bench/dispatch/duty.c" || exit 1
	for _ in 1 2; do
		sh -c 'while :; do :; done' &
		pids+=($!)
	done
	chrt -f 50 taskset -c 0 "$tmp/duty" 3000 10000 &
	pids+=($!)
	echo "load: 2 SCHED_OTHER spinners unpinned, SCHED_FIFO 50 3ms/10ms on CPU 0 (pids ${pids[*]})"
fi
declare -A pass=() runs=()
tests=(every_policy_runs_a_guest_only_while_it_is_dispatched an_edf_reservation_gets_its_share_beside_a_host_cpu_hog)
start=$(date -u +%H:%M:%S)
for r in $(seq 1 "$rounds"); do
	for t in "${tests[@]}"; do
		out=$("$bin" --include-ignored --exact "$t" --test-threads=1 --nocapture 2>&1)
		rc=$?
		runs[$t]=$((${runs[$t]:-0} + 1))
		if ((rc == 0)); then
			pass[$t]=$((${pass[$t]:-0} + 1))
			v=ok
		else
			v=FAILED
		fi
		{
			echo "== round $r $t: $v ($(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))"
			if ((rc == 0)); then
				grep -oE "(edf 2ms/10ms beside|fifo 20 beside|rrprio r2|edf e2) .*" <<<"$out"
			else
				echo "$out" | grep -vE '^(running|test result|$)|^ +[0-9]+: |^ +at '
				# who else ran real-time on the guests' CPU just after
				echo "real-time threads on CPU 0 now (pid tid class prio cpu% comm):"
				ps -eLo pid,tid,cls,rtprio,psr,pcpu,comm --no-headers |
					awk '$3 != "TS" && $3 != "IDL" && $5 == 0 && $6 > 0.5'
			fi
		} | tee -a "$log"
	done
done
echo "== $start-$(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$log"
for t in "${tests[@]}"; do
	echo "$t: ${pass[$t]:-0} of ${runs[$t]:-0} passed" | tee -a "$log"
done
