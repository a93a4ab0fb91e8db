#!/usr/bin/env bash
# bench/tags/ab.sh: compare builds of the tags kernel side by bpf_stats,
# loaded alternately (issue 15).
#
#   bash bench/tags/ab.sh [options] DIR_A DIR_B [DIR...]   (as root)
#
# Each DIR holds a `mantle` and its `libmantle.so` (copy target/release/
# aside before rebuilding). For every round and every DIR in turn: load
# that build, create the tags bench_t and bench_l (--lifeline 65536), start
# a holder of bench_t (so that bystanders run with the hooks attached),
# then run TRIALS trials. A trial first times getpid with the same hooks
# attached (the "probe": it shows which speed state the host gave the VM at
# that moment), then runs the case once per mode (bystander: not tagged;
# tagged: under bench_t; lifeline: under bench_l), each with
# kernel.bpf_stats_enabled=1, and prints per program the ns per call.
#
# Why: on the CI VMs the host changes the guest's speed for tens of seconds
# at a time (bench/tags/HISTORY.md), which moves a whole side-by-side run by
# more than the effect of one change. Alternating the builds in short loads,
# and comparing the fastest trials (or trials with matching probes), tells
# builds apart by a few ns per call where run.sh's medians cannot.
#
# A bystander run must receive nothing: the tool reads every case's output
# from a file (a pipe from a tagged case would tag the tool's shell and so
# every later bystander; the medians of bystanders before this check were
# such runs, bench/tags/HISTORY.md) and stops when the hops counter moves
# during a bystander run.
#
# Output: one line per trial and mode (build round trial mode probe_ns
# wall_ns_per_op program:ns_per_call...), then per build and mode the
# minimum and median ns per call of each program over the trials. The lines
# also go to bench/results/tags-ab-<date>.tsv.
#
# Options:
#   --case C        micro.c case (default pipe_read)
#   --iters N       iterations per trial (default 100000; ping-pongs and
#                   tcp_*: 20000)
#   --modes "M..."  among bystander tagged lifeline (default "tagged lifeline")
#   --rounds N      rounds over the builds (default 2)
#   --trials N      trials per load (default 3)
#   --cpu N         taskset CPU for every process (default 1)
#   --floor DIR     also measure the hooks' floor, as the first build of
#                   every round: DIR's mantle-tags-floor attaches empty
#                   programs to the same hooks (bench/tags/run.sh's floor
#                   condition); every mode then runs the case untagged.
#                   The summary gives each build's wall clock over the
#                   floor's (xF, of minimums and of medians)
#   --cluster       load with a cluster table whose one global tag, bench_g,
#                   every tagged run and the bystanders' holder hold too
#                   (Table 4: tcp_veth's segments then carry it in a TCP
#                   option). tcp_veth runs between two network namespaces
#                   over a veth pair that the tool makes and removes, as
#                   run.sh does
#   --no-stats      leave kernel.bpf_stats_enabled off: the wall clock is
#                   then what run.sh times (bpf_stats adds its own clock
#                   reads to every program call, ~40 ns here), and there
#                   are no per-program columns
#   --help          this text
#
# Example: compare the committed build with a working tree's:
#   cp target/release/{mantle,libmantle.so} /tmp/old/ && (edit, cargo build --release)
#   cp target/release/{mantle,libmantle.so} /tmp/new/
#   bash bench/tags/ab.sh --case pipe_pingpong --modes "tagged lifeline" /tmp/old /tmp/new
#
# Holds /run/mantle-kernel.lock for the whole run. Refuses to start when
# the tags kernel side is loaded (it would have to unload someone's tags);
# on exit it kills its holder, unloads its load and restores
# kernel.bpf_stats_enabled.
#
# Exit: 0 done; 1 an error (a build failed to load, bad arguments).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
die() { echo "ab.sh: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

CASE=pipe_read ITERS= MODES="tagged lifeline" ROUNDS=2 TRIALS=3 CPU=1 FLOOR= STATS=1 CLUSTER=0
DIRS=()
while [[ $# -gt 0 ]]; do
	case $1 in
	--case) CASE=$2; shift ;;
	--iters) ITERS=$2; shift ;;
	--modes) MODES=$2; shift ;;
	--rounds) ROUNDS=$2; shift ;;
	--trials) TRIALS=$2; shift ;;
	--cpu) CPU=$2; shift ;;
	--floor) FLOOR=$2; shift ;;
	--no-stats) STATS=0 ;;
	--cluster) CLUSTER=1 ;;
	-h | --help) usage; exit 0 ;;
	-*) die "unknown option $1 (--help)" ;;
	*) DIRS+=("$1") ;;
	esac
	shift
done
[[ ${#DIRS[@]} -ge 2 || ( -n $FLOOR && ${#DIRS[@]} -ge 1 ) ]] ||
	die "give two or more build directories, or --floor and one (--help)"
[[ $(id -u) == 0 ]] || die "needs root (loads and unloads the kernel side)"
for n in "$ROUNDS" "$TRIALS" "$CPU"; do [[ $n =~ ^[0-9]+$ ]] || die "not a number: $n"; done
[[ -z $ITERS || $ITERS =~ ^[0-9]+$ ]] || die "not a number: $ITERS"
for m in $MODES; do [[ $m =~ ^(bystander|tagged|lifeline)$ ]] || die "unknown mode $m"; done
[[ -n $ITERS ]] || { [[ $CASE == *pingpong || $CASE == tcp_* ]] && ITERS=20000 || ITERS=100000; }
command -v bpftool >/dev/null || die "needs bpftool (apt-get install bpftool)"

# Private copies: a rebuild of target/ while this runs must not change what
# is measured, and the self-operation uprobe is attached to the library
# file `tags up` is given.
BIN=$(mktemp -d /tmp/mantle-ab.XXXXXX)
names=()
for i in "${!DIRS[@]}"; do
	d=${DIRS[$i]}
	[[ -x $d/mantle && -f $d/libmantle.so ]] || { rm -rf "$BIN"; die "no mantle and libmantle.so in $d"; }
	mkdir "$BIN/$i" && cp "$d/mantle" "$d/libmantle.so" "$BIN/$i/"
	names+=("$(basename "$(cd "$d" && pwd)")#$i")
done
if [[ -n $FLOOR ]]; then
	[[ -x $FLOOR/mantle-tags-floor ]] || { rm -rf "$BIN"; die "no mantle-tags-floor in $FLOOR (cargo build --release -p mantle-tags --bin mantle-tags-floor)"; }
	cp "$FLOOR/mantle-tags-floor" "$BIN/"
fi
cc -O2 -Wall -Wextra -o "$BIN/micro" "$HERE/micro.c" -lrt

exec 9>/run/mantle-kernel.lock
flock 9
[[ -e /sys/fs/bpf/mantle/tags ]] && { rm -rf "$BIN"; die "the tags kernel side is loaded: unload it first (mantle tags down)"; }
STATS_BEFORE=$(sysctl -n kernel.bpf_stats_enabled)
HOLDER= CUR= FLOOR_UP=0 NETNS_MADE=0
NS_C=mtab-c-$$ NS_S=mtab-s-$$
cleanup() {
	set +e
	if [[ $NETNS_MADE == 1 ]]; then ip netns del "$NS_C" 2>/dev/null; ip netns del "$NS_S" 2>/dev/null; fi
	[[ -n $HOLDER ]] && kill "$HOLDER" 2>/dev/null && wait "$HOLDER" 2>/dev/null
	[[ -n $CUR ]] && "$CUR" tags down >/dev/null 2>&1
	[[ $FLOOR_UP == 1 ]] && "$BIN/mantle-tags-floor" down >/dev/null 2>&1
	sysctl -q -w kernel.bpf_stats_enabled="$STATS_BEFORE"
	rm -rf "$BIN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
sysctl -q -w kernel.bpf_stats_enabled=$STATS
if [[ $CASE == tcp_veth ]]; then
	# shellcheck source=veth.sh
	. "$HERE/veth.sh"
	NETNS_MADE=1 # the cleanup deletes what exists
	veth_hosts "$NS_C" "$NS_S" 10.79.1 || die "cannot make the network namespaces for tcp_veth (ip netns/veth)"
fi
UP_ARGS=() G=()
if [[ $CLUSTER == 1 ]]; then
	echo bench_g >"$BIN/cluster"
	UP_ARGS=(--cluster "$BIN/cluster") G=(bench_g)
fi

# run_cnt and run_time_ns of every mt_* (fl_*: the floor's) program, one
# "name ns calls" per line
stats() {
	[[ $STATS == 1 ]] || return 0
	bpftool prog show -j | python3 -c '
import json, sys
for p in json.load(sys.stdin):
    n = p.get("name", "")
    if n.startswith(("mt_", "fl_")) and "run_cnt" in p:
        print(n, p["run_time_ns"], p["run_cnt"])'
}
# deliveries counted by the loaded kernel side so far
hops() { "$1" tags status | awk '$1 == "hops:" { print $2 }'; }
mkdir -p "$ROOT/bench/results"
TSV=$ROOT/bench/results/tags-ab-$(date +%Y%m%d-%H%M%S).tsv
echo "# bench/tags/ab.sh case=$CASE iters=$ITERS cpu=$CPU rounds=$ROUNDS trials=$TRIALS builds=${FLOOR:+floor }${names[*]} bpf_stats=$STATS kernel=$(uname -r)" | tee "$TSV"
# one trial's line: build round trial mode probe wall program:ns...
line() {
	python3 - "$@" <<-'EOF' | tee -a "$TSV"
		import sys
		name, r, t, m, probe, w, a, z, iters = sys.argv[1:]
		a = {l.split()[0]: l.split()[1:] for l in a.splitlines()}
		out = []
		for l in z.splitlines():
		    n, ns, calls = l.split()
		    ns0, c0 = map(int, a.get(n, [0, 0]))
		    dc = int(calls) - c0
		    # programs that ran at least once per 100 operations
		    if dc * 100 >= int(iters):
		        out.append(f"{n}:{(int(ns) - ns0) / dc:.1f}")
		print("\t".join([name, r, t, m, probe, w.split()[1]] + sorted(out)))
	EOF
}
for r in $(seq "$ROUNDS"); do
	if [[ -n $FLOOR ]]; then
		"$BIN/mantle-tags-floor" up >/dev/null || die "the floor failed to attach"
		FLOOR_UP=1
		sleep 0.5
		for t in $(seq "$TRIALS"); do
			probe=$(taskset -c "$CPU" "$BIN/micro" getpid 1000000 | awk '{print $2}')
			for m in $MODES; do
				a=$(stats)
				taskset -c "$CPU" "$BIN/micro" "$CASE" "$ITERS" >"$BIN/out"
				z=$(stats)
				line floor "$r" "$t" "$m" "$probe" "$(cat "$BIN/out")" "$a" "$z" "$ITERS"
			done
		done
		"$BIN/mantle-tags-floor" down >/dev/null
		FLOOR_UP=0
	fi
	for i in "${!DIRS[@]}"; do
		M=$BIN/$i/mantle
		CUR=$M
		"$M" tags up "${UP_ARGS[@]}" --lib "$BIN/$i/libmantle.so" >/dev/null || die "build ${names[$i]} failed to load"
		"$M" tag create bench_t >/dev/null
		"$M" tag create bench_l --lifeline $((CLUSTER == 1 ? 32768 : 65536)) >/dev/null
		# the holder must not keep the lock's descriptor
		setsid "$M" tag run bench_t "${G[@]}" -- sleep 100000 >/dev/null 2>&1 9>&- &
		HOLDER=$!
		sleep 0.5
		for t in $(seq "$TRIALS"); do
			probe=$(taskset -c "$CPU" "$BIN/micro" getpid 1000000 | awk '{print $2}')
			for m in $MODES; do
				h0=$(hops "$M")
				a=$(stats)
				# Output to a file, never to a pipe this shell reads: reading
				# a tagged process's pipe gives this shell its tag, and every
				# later "bystander" (forked from it) would run tagged.
				case $m in
				bystander) taskset -c "$CPU" "$BIN/micro" "$CASE" "$ITERS" >"$BIN/out" ;;
				tagged) taskset -c "$CPU" "$M" tag run bench_t "${G[@]}" -- "$BIN/micro" "$CASE" "$ITERS" >"$BIN/out" ;;
				lifeline) taskset -c "$CPU" "$M" tag run bench_l "${G[@]}" -- "$BIN/micro" "$CASE" "$ITERS" >"$BIN/out" ;;
				esac
				z=$(stats)
				w=$(cat "$BIN/out")
				if [[ $m == bystander ]] && [[ $(hops "$M") != "$h0" ]]; then
					die "a bystander run received tags (hops $h0 -> $(hops "$M")): this shell or the case holds a tag"
				fi
				line "${names[$i]}" "$r" "$t" "$m" "$probe" "$w" "$a" "$z" "$ITERS"
			done
		done
		kill "$HOLDER"; wait "$HOLDER" 2>/dev/null || true
		HOLDER=
		"$M" tags down >/dev/null
		CUR=
	done
done
echo "# per build and mode, ns per call over $((ROUNDS * TRIALS)) trials: min / median (and the getpid probe's min / median);"
echo "# fast: the trials whose probe is within 3% of the fastest probe of the run (the host's fast state), their count and median wall;"
echo "# xF (with --floor): wall over the floor's (its trials of every mode pooled: it runs the case untagged in each), of minimums / of medians / of the fast trials' medians"
python3 - "$TSV" <<-'EOF'
	import statistics, sys
	from collections import defaultdict
	runs = defaultdict(lambda: defaultdict(list))
	order = []
	for l in open(sys.argv[1]):
	    if l.startswith("#"):
	        continue
	    f = l.rstrip("\n").split("\t")
	    key = (f[0], f[3])
	    if key not in order:
	        order.append(key)
	    runs[key]["probe"].append(float(f[4]))
	    runs[key]["wall"].append(float(f[5]))
	    for p in f[6:]:
	        n, v = p.split(":")
	        runs[key][n].append(float(v))
	# trials in the host's fast state: probe within 3% of the fastest probe
	pmin = min(p for r in runs.values() for p in r["probe"])
	def fast(r):
	    return [w for w, p in zip(r["wall"], r["probe"]) if p <= pmin * 1.03]
	for key in order:
	    cols = "  ".join(f"{n} {min(v):.1f}/{statistics.median(v):.1f}" for n, v in runs[key].items())
	    fw = fast(runs[key])
	    cols += f"  fast {len(fw)}: wall " + (f"{statistics.median(fw):.1f}" if fw else "-")
	    # the floor runs the same untagged case in every mode: pool them
	    fl = defaultdict(list)
	    for (b, _), r in runs.items():
	        if b == "floor":
	            for n in ("wall", "probe"):
	                fl[n].extend(r[n])
	    if fl and key[0] != "floor":
	        w, ff = runs[key]["wall"], fast(fl)
	        cols += (f"  xF {min(w) / min(fl['wall']):.3f}/"
	                 f"{statistics.median(w) / statistics.median(fl['wall']):.3f}")
	        if fw and ff:
	            cols += f" fast {statistics.median(fw) / statistics.median(ff):.3f}"
	    print(f"{key[0]:<16} {key[1]:<9} {cols}")
EOF
echo "(also in $TSV)"
