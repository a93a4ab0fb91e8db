#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# bench/tags/run.sh: the cost of mantle tags, side by side in one run: the
# shape of the paper's Table 3 (system calls and IPC; here micro.c) and
# Table 2 (real programs; here unmodified Debian tools in a pipeline).
#
#   bash bench/tags/run.sh [--quick] [options]      (from the repo root, as root)
#
# What runs. Every case under each condition:
#   baseline   kernel side not loaded (`mantle tags down`)
#   floor      kernel side not loaded; instead an *empty* eBPF program on
#              every hook mantle attaches while a tag exists (sys_exit, the
#              socket and task tracepoints, sendmsg4/6, sockops with the
#              TCP option callbacks mantle turns on (writing on the
#              connect() side, parsing on both): `mantle-tags-floor up`, from
#              crates/tags/src/bpf/floor.bpf.c): the price of the hooks
#              themselves, which mantle cannot go below
#   loaded     `mantle tags up`, no tag exists (only the always-on hooks:
#              cgroup connect marking and the self-operation uprobe)
#   bystander  a tag exists (so the tagged hooks are attached machine-wide)
#              and another process holds it (`mantle tag run bench_t --
#              sleep`, started for the condition), but the measured
#              processes do not: the price every other process pays while
#              anybody uses tags (bar: <= floor x 1.03). The holder
#              matters: until some thread has held a tag, the hooks return
#              after one load (mt_held_any, docs/tags.md "Cost"), which
#              would make this row the floor and hide the real price
#   tagged     a tag exists and the measured processes hold it from their
#              first instruction (`mantle tag run TAG -- ...`; children
#              inherit, so both ends of every IPC are tagged)
#   lifeline   as tagged, the tag created with --lifeline 65536: every
#              reception is recorded
#   nofd       `mantle tags up --no-fd-channels`, the measured processes
#              tagged as in `tagged`: sys_exit is never attached, so pipes,
#              eventfd, queues and shared memory carry nothing (their hops/op
#              read 0); the whole programs' bar (<= 1.03) applies here too
# Micro cases (micro.c): unix_pingpong pipe_pingpong getpid fork_exit
# signal_rt devnull_write pipe_read eventfd_pingpong mq_pingpong shm_map
# selfread tcp_lo tcp_veth (see micro.c's header; --cases picks some;
# tcp_veth runs between two network namespaces over a veth pair that this
# script makes, mtb-c-PID and mtb-s-PID, 10.79.0.1 -> 10.79.0.2, and
# removes). Table 4 (tags across machines) is tcp_veth and tcp_lo under
# --cluster (below): a global tag, carried in a TCP header option. Whole
# programs, each one `sh -c` pipeline timed from outside by `micro time`,
# tagged as a whole in the tagged/lifeline conditions:
#   gzip    cat text | gzip -c | wc -c                  (16 MiB of text)
#   xz      cat text | xz -T1 -c | wc -c                (1.5 MiB: xz -6 takes ~1.3 s/MiB here)
#   sort    cat text | sort | wc -c                     (64 MiB)
#   sqlite  sqlite3 -readonly db < q.sql | wc -l        (1M-row table; group by,
#                                                        indexed join, 600k-row dump)
#   tar     3 x (tar cf - /usr/include | cat >/dev/null)   (130 MB, 8k files)
# Input data is generated deterministically (gendata.py, sqlite3 with a
# fixed formula) into $MANTLE_BENCH_DATA (default /var/tmp/mantle-bench-tags)
# once and reused.
#
# Order, repetitions, pinning. An untimed warm-up runs every case once. Then
# repetition r runs every condition once, each condition a block of all
# cases; the order of conditions alternates (baseline..lifeline, then
# lifeline..baseline: ABBA, cancels linear drift). Micro: 13 repetitions;
# each case run is one process: ITERS/5 untimed warm-up ops, then ITERS
# timed ops in 5 equal segments, and the run's value is the median segment's
# ns/op (~0.1-0.2 s a run; this VM has bursts of interference and ~10%
# run-to-run noise, so many short runs beat few long ones). Programs: 7
# repetitions (0.8-2.7 s each). Everything is pinned to CPU 1 with
# taskset (both ends of a ping-pong and all stages of a pipeline share it:
# cross-CPU wake-ups cost 33-70 us on these VMs). /dev/cpu_dma_latency is
# NOT held unless --dma-latency is given. Each table row gives the median,
# the MAD and the min..max over the repetitions, the ratio of medians to
# baseline, the range of per-repetition ratios to baseline ("paired"), a
# two-sided Mann-Whitney p against baseline (is the difference noise?), and
# the issue's bar with PASS/MISS on the ratio of medians (MISS is reported,
# not fatal):
#   loaded <= 1.02 on every case;
#   tagged, lifeline <= 1.15 on IPC micro cases (unix_pingpong pipe_pingpong
#     signal_rt pipe_read eventfd_pingpong mq_pingpong shm_map), <= 1.03 on
#     whole programs; other micro cases:
#     no bar (info);
#   selfread <= 100 ns absolute in every condition (its ratio is info: the
#     baseline times the "not loaded" early return);
#   bystander <= floor x 1.03, tagged and lifeline <= floor x 1.06 on the
#     IPC micro cases (issue 15; "xF" in the report: median over the
#     floor's median, "ns/sc": nanoseconds above the floor per system call).
# "hops/op" (tagged, lifeline) is how many deliveries the kernel side counted
# per operation: proof that the tags really travelled during the timed runs.
# After the timed runs (full mode) a profile pass runs each case once more
# with kernel.bpf_stats_enabled=1 and prints, per mt_* program, calls per op
# and ns per call (bpf_stats adds its own overhead, so it is never on while
# timing), and their sum as a share of the baseline: the time spent in
# mantle's programs, which noise does not blur. Results: stdout,
# bench/results/tags-<date>.txt and .json (`report.py --from-json` re-renders).
# To tell two builds apart by a few ns per call on a VM whose speed changes
# under a whole run, use bench/tags/ab.sh (builds loaded alternately); its
# --floor --no-stats gives one build's wall clock over the floor's, the
# two loaded alternately and compared on the trials in the host's fast
# state, where this script's medians span both states.
#
# The kernel side is machine-wide state: the script holds
# `flock /run/mantle-kernel.lock` (fd 9) from before its first change until
# it exits. It records what it found. On exit it leaves the kernel side
# unloaded if it was unloaded; if it was loaded, it loads it again (with the
# --lib it had, from /run/mantle/tags.lib, else the repository's
# target/release/libmantle.so) and re-creates the local tags it had (name,
# ttl, lifeline, class, replies, owner; not --expire); which threads held
# them cannot be restored. Also restored on exit: kernel.bpf_stats_enabled.
# While it runs, the kernel side is loaded from private copies of mantle and
# libmantle.so (others may rebuild target/ meanwhile).
#
# Options:
#   --quick            ~1 min smoke run: 3/2 repetitions, half the
#                      iterations, small inputs, no profile pass
#   --micro-only / --programs-only
#   --cases A,B,...    only these cases (micro or program names)
#   --up-args "ARGS"   extra arguments for `mantle tags up` in the loaded
#                      conditions (e.g. "--no-fd-channels")
#   --cluster          Table 4: load with a cluster table whose one global
#                      tag, bench_g, the tcp_* cases hold (with bench_t) in
#                      the tagged, lifeline and nofd conditions and the
#                      bystander's holder holds: segments then carry it in
#                      a TCP option, and every connection made while the
#                      table is loaded has the option callbacks on. The
#                      `loaded` row then has a (global) tag in the table
#   --reps-micro N / --reps-programs N
#   --cpu LIST         taskset CPU list (default 1; "0-1" = not pinned)
#   --dma-latency      hold /dev/cpu_dma_latency at 0 during the run
#   --no-profile       skip the bpf_stats profile pass
#   --max-wait S       before timing, wait up to S seconds (default 600)
#                      for the CPUs to be <= 15% busy with other people's
#                      work, and fail if they are not; 0 (the --quick
#                      default): do not wait. The busy share is reported
#   --gate PCT         time a run only while the host is in its fast state:
#                      before and after every timed run, a getpid probe
#                      (`micro getpid`, untagged, under the run's condition)
#                      must be within PCT% of the third fastest probe seen
#                      under that condition (each condition is first probed
#                      8 times, 1 s apart); before a run the script waits for
#                      such a probe (up to 120 s, then runs anyway and counts
#                      the run as ungated), and a run whose probe after it
#                      fails is measured again (up to 3 times); after the
#                      suites, a run whose slower probe is not within PCT%
#                      of its condition's reference after them (a reference
#                      calibrated while the host was slow starts loose) is
#                      measured again in its place, once. The probes
#                      are not the measured runs, so the gate selects on the
#                      host's speed, never on a condition's result. The
#                      report gives PCT, each condition's reference, and
#                      the runs redone, waited for, ungated, measured
#                      again after the references settled and kept outside
#                      them (each ungated
#                      run is also logged; every probe goes to
#                      tags-<date>.gate.tsv). 0 (default):
#                      no gate. On the CI VMs, whose host changes the guest's
#                      speed for tens of seconds at a time (getpid 163 <->
#                      230+ ns), 3 keeps the slow state out of the medians
#   --out DIR          results directory (default bench/results)
#   --mantle-dir DIR   measure the mantle and libmantle.so in DIR (e.g. a
#                      clean build of a commit) instead of target/release
# Exit status: 0 when every case ran (even with MISS rows), 1 on errors.

set -euo pipefail

ARGS="$*"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE=$ROOT/bench/tags
QUICK=0
DO_MICRO=1
DO_PROGS=1
REPS_MICRO=13
REPS_PROGS=7
CPU=1
DMA=0
PROFILE=1
OUT=$ROOT/bench/results
DATA=${MANTLE_BENCH_DATA:-/var/tmp/mantle-bench-tags}
SETTLE=0.5
QUIET_PCT=15
MAX_WAIT=
MANTLE_DIR=
CASES_ONLY=
UP_ARGS=
CLUSTER=0
GATE=0
GATE_WAIT=120
GATE_REDO=3

usage() { sed -n '/^# Options:/,/^# Exit/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
	case $1 in
	--quick) QUICK=1 ;;
	--micro-only) DO_PROGS=0 ;;
	--cases) CASES_ONLY=$2; shift ;;
	--up-args) UP_ARGS=$2; shift ;;
	--cluster) CLUSTER=1 ;;
	--programs-only) DO_MICRO=0 ;;
	--reps-micro) REPS_MICRO=$2; shift ;;
	--reps-programs) REPS_PROGS=$2; shift ;;
	--cpu) CPU=$2; shift ;;
	--dma-latency) DMA=1 ;;
	--no-profile) PROFILE=0 ;;
	--max-wait) MAX_WAIT=$2; shift ;;
	--gate) GATE=$2; shift ;;
	--out) OUT=$2; shift ;;
	--mantle-dir) MANTLE_DIR=$2; shift ;;
	-h | --help) usage; exit 0 ;;
	*) echo "run.sh: unknown option $1" >&2; usage >&2; exit 1 ;;
	esac
	shift
done
if [[ $QUICK == 1 ]]; then
	[[ $REPS_MICRO == 13 ]] && REPS_MICRO=3
	[[ $REPS_PROGS == 7 ]] && REPS_PROGS=2
	PROFILE=0
	MAX_WAIT=${MAX_WAIT:-0}
fi
MAX_WAIT=${MAX_WAIT:-600}
[[ $GATE =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "run.sh: --gate $GATE: a percentage (e.g. 3)" >&2; exit 1; }

die() { echo "run.sh: $*" >&2; exit 1; }
log() { echo "[$(date +%T)] $*" >&2; }

[[ $(id -u) == 0 ]] || die "needs root (loads and unloads the kernel side)"

# ------------------------------------------------------------------ tools
need() { # command apt-package
	command -v "$1" >/dev/null 2>&1 && return 0
	log "installing $2 (for $1)"
	apt-get install -y "$2" >/dev/null || die "cannot install $2"
}
need cc gcc
need python3 python3
need gzip gzip
need xz xz-utils
need sort coreutils
need sqlite3 sqlite3
need tar tar
need taskset util-linux
need flock util-linux
need bpftool bpftool

# ------------------------------------------------------------------ build
cd "$ROOT"
if [[ -z $MANTLE_DIR ]]; then
	MANTLE_DIR=$ROOT/target/release
	# Always: cargo rebuilds only what changed, and a release build older
	# than the checkout would be measured under the checkout's name (it
	# happened: a run measured the code before a merge).
	log "building mantle (cargo build --release)"
	cargo build --release >&2
	cargo build --release -p mantle-tags --bin mantle-tags-floor >&2
fi
[[ -x $MANTLE_DIR/mantle-tags-floor ]] || die "no mantle-tags-floor in $MANTLE_DIR (cargo build --release -p mantle-tags --bin mantle-tags-floor)"
[[ -x $MANTLE_DIR/mantle && -f $MANTLE_DIR/libmantle.so ]] || die "no mantle and libmantle.so in $MANTLE_DIR"
# Private copies: other people may rebuild target/ while this runs, and the
# self-operation uprobe is attached to the library file `tags up` is given.
BIN=$(mktemp -d /tmp/mantle-bench-tags.XXXXXX)
trap 'rm -rf "$BIN"' EXIT # replaced by restore() once we hold the lock
trap 'exit 130' INT TERM
cp "$MANTLE_DIR/mantle" "$MANTLE_DIR/libmantle.so" "$MANTLE_DIR/mantle-tags-floor" "$BIN/"
MANTLE=$BIN/mantle
FLOOR=$BIN/mantle-tags-floor
cc -O2 -Wall -Wextra -o "$BIN/micro" "$HERE/micro.c" -lrt
cc -O2 -Wall -Wextra -DWITH_MANTLE -I"$ROOT/include" -o "$BIN/micro_mantle" "$HERE/micro.c" \
	-L"$BIN" -lmantle -Wl,-rpath,"$BIN" -lrt
GIT_REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$ROOT" diff --quiet HEAD -- crates include 2>/dev/null || GIT_REV="$GIT_REV+dirty(crates/include)"
MANTLE_SHA=$(sha256sum "$MANTLE" | cut -c1-12)

# ------------------------------------------------------------------ cases
MICRO_CASES=(unix_pingpong pipe_pingpong getpid fork_exit signal_rt devnull_write pipe_read
	eventfd_pingpong mq_pingpong shm_map selfread tcp_lo tcp_veth)
declare -A ITERS=([unix_pingpong]=10000 [pipe_pingpong]=15000 [getpid]=500000 [fork_exit]=800
	[signal_rt]=12000 [devnull_write]=250000 [pipe_read]=100000 [eventfd_pingpong]=15000
	[mq_pingpong]=15000 [shm_map]=100000 [selfread]=15000000 [tcp_lo]=8000 [tcp_veth]=8000)
if [[ $QUICK == 1 ]]; then
	for c in "${!ITERS[@]}"; do ITERS[$c]=$((ITERS[$c] / 2)); done
	MIB_GZ=4 KIB_XZ=512 MIB_SORT=16 TAR_LOOPS=1
else
	MIB_GZ=16 KIB_XZ=1536 MIB_SORT=64 TAR_LOOPS=3
fi
PROG_CASES=(gzip xz sort sqlite tar)
if [[ -n $CASES_ONLY ]]; then # --cases a,b: only these (micro or program)
	IFS=, read -r -a _only <<<"$CASES_ONLY"
	_keep() { local c o; for c in "$@"; do for o in "${_only[@]}"; do [[ $c == "$o" ]] && echo "$c"; done; done; }
	mapfile -t MICRO_CASES < <(_keep "${MICRO_CASES[@]}")
	mapfile -t PROG_CASES < <(_keep "${PROG_CASES[@]}")
	((${#MICRO_CASES[@]} + ${#PROG_CASES[@]})) || die "--cases $CASES_ONLY: no such case"
	((${#MICRO_CASES[@]})) || DO_MICRO=0
	((${#PROG_CASES[@]})) || DO_PROGS=0
fi
CONDS=(baseline floor loaded bystander tagged lifeline nofd)

# ------------------------------------------------------------------ data
DATA_VERSION=1
prepare_data() {
	mkdir -p "$DATA"
	if [[ $(cat "$DATA/version" 2>/dev/null) != "$DATA_VERSION" ]]; then
		rm -f "$DATA"/*
		log "generating input data in $DATA (once)"
		python3 "$HERE/gendata.py" text "$DATA/text64" 64 1
		sqlite3 "$DATA/db.tmp" "PRAGMA journal_mode=OFF;
			CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, v INTEGER, s TEXT);
			WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i < 1000000)
			INSERT INTO t SELECT i, (i*2654435761) % 100003, (i*40503) % 65536,
				printf('%08x-%d', (i*2246822519) % 4294967296, i % 977) FROM c;
			CREATE INDEX tk ON t(k);" >/dev/null
		mv "$DATA/db.tmp" "$DATA/db.sqlite"
		echo "$DATA_VERSION" >"$DATA/version"
	fi
	head -c $((MIB_GZ << 20)) "$DATA/text64" >"$DATA/gz.in"
	head -c $((KIB_XZ << 10)) "$DATA/text64" >"$DATA/xz.in"
	head -c $((MIB_SORT << 20)) "$DATA/text64" >"$DATA/sort.in"
	if [[ $QUICK == 1 ]]; then
		echo "SELECT k % 100, count(*), sum(v), max(s) FROM t GROUP BY 1 ORDER BY 3 DESC LIMIT 5;" >"$DATA/q.sql"
	else
		cat >"$DATA/q.sql" <<-'EOF'
			SELECT k % 100, count(*), sum(v), max(s) FROM t GROUP BY 1 ORDER BY 3 DESC LIMIT 5;
			SELECT count(*), sum(b.v) FROM t a JOIN t b ON b.k = a.v WHERE a.id % 40 = 0;
			SELECT id, k, v, s FROM t WHERE v < 40000 ORDER BY s;
		EOF
	fi
	# Warm the page cache (tar reads 130 MB of /usr/include).
	cat "$DATA"/* >/dev/null
	tar cf - /usr/include 2>/dev/null | cat >/dev/null
}

prog_cmd() {
	case $1 in
	gzip) echo "cat '$DATA/gz.in' | gzip -c | wc -c" ;;
	xz) echo "cat '$DATA/xz.in' | xz -T1 -c | wc -c" ;;
	sort) echo "cat '$DATA/sort.in' | sort | wc -c" ;;
	sqlite) echo "sqlite3 -readonly '$DATA/db.sqlite' < '$DATA/q.sql' | wc -l" ;;
	tar) echo "for i in \$(seq $TAR_LOOPS); do tar cf - /usr/include 2>/dev/null | cat > /dev/null; done" ;;
	esac
}

# ------------------------------------------------------------------ quiet
# Busy share (%) of all CPUs over one second, from /proc/stat.
busy_pct() {
	local a b
	a=$(awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $5+$6}' /proc/stat)
	sleep 1
	b=$(awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $5+$6}' /proc/stat)
	awk -v a="$a" -v b="$b" 'BEGIN { split(a, x, " "); split(b, y, " ");
		bu = y[1] - x[1]; id = y[2] - x[2]; printf "%d", (bu + id) ? 100 * bu / (bu + id) : 0 }'
}
# Other people's builds make this 2-CPU machine useless for timing: wait
# (up to --max-wait seconds) until it is quiet, and record what we saw.
wait_quiet() {
	local t0 b
	t0=$(date +%s)
	while :; do
		b=$(busy_pct)
		((b <= QUIET_PCT)) && break
		if ((MAX_WAIT == 0)); then
			log "machine busy (${b}% of the CPUs used by others): measuring anyway (--max-wait 0)"
			break
		fi
		if (($(date +%s) - t0 >= MAX_WAIT)); then
			die "machine still busy (${b}% of the CPUs used by others) after ${MAX_WAIT}s; timings would be noise. Rerun later, or pass --max-wait 0 to measure anyway"
		fi
		log "machine busy (${b}% of the CPUs used by others); waiting for <= ${QUIET_PCT}%"
		sleep 9
	done
	echo "$b"
}
[[ $DO_PROGS == 1 ]] && prepare_data
BUSY0=$(wait_quiet)

# ------------------------------------------------------------------ kernel state
# Take the machine-wide kernel-side lock before looking at or changing it
# (held through fd 9 until this script exits).
(umask 077; : >>/run/mantle-kernel.lock)   # root's alone: see examples/lib.sh
exec 9>>/run/mantle-kernel.lock
chmod 600 /run/mantle-kernel.lock
if ! flock -n 9; then
	log "waiting for /run/mantle-kernel.lock (someone else is using the kernel side)"
	flock 9
fi
log "holding /run/mantle-kernel.lock"
BUSY1=$(busy_pct) # whoever held the lock may have kept the machine busy

PIN=/sys/fs/bpf/mantle/tags
is_loaded() { [[ -e $PIN/maps/ctl ]]; }
WAS_LOADED=0
WAS_LIB=
is_loaded && WAS_LOADED=1
if [[ $WAS_LOADED == 1 ]]; then
	WAS_LIB=$(cat /run/mantle/tags.lib 2>/dev/null || true) # written by `mantle tags up`
	"$MANTLE" tag ls --json >"$BIN/tags-before.json"
	log "kernel side was loaded with $(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$BIN/tags-before.json") tag(s); restored on exit"
fi
STATS_BEFORE=$(sysctl -n kernel.bpf_stats_enabled)

# tcp_veth's two hosts: network namespaces joined by a veth pair.
NS_C=mtb-c-$$ NS_S=mtb-s-$$
NETNS_MADE=0
if [[ " ${MICRO_CASES[*]} " == *" tcp_veth "* && $DO_MICRO == 1 ]]; then
	# shellcheck source=veth.sh
	. "$HERE/veth.sh"
	NETNS_MADE=1 # restore() deletes what exists
	veth_hosts "$NS_C" "$NS_S" 10.79.0 || die "cannot make the network namespaces for tcp_veth (ip netns/veth)"
fi
CLUSTER_FILE=
if [[ $CLUSTER == 1 ]]; then
	CLUSTER_FILE=$BIN/cluster
	echo "bench_g" >"$CLUSTER_FILE"
	UP_ARGS="$UP_ARGS --cluster $CLUSTER_FILE"
fi

restore() {
	local rc=$?
	set +e
	[[ $DMA == 1 ]] && exec 8>&-
	[[ -n ${HOLDER:-} ]] && kill "$HOLDER" && wait "$HOLDER" 2>/dev/null
	"$FLOOR" down
	if [[ $NETNS_MADE == 1 ]]; then ip netns del "$NS_C" 2>/dev/null; ip netns del "$NS_S" 2>/dev/null; fi
	sysctl -q -w kernel.bpf_stats_enabled="$STATS_BEFORE" >/dev/null
	is_loaded && "$MANTLE" tags down >/dev/null
	if [[ $WAS_LOADED == 1 ]]; then
		# Prefer the repository's mantle (next to its libmantle.so, the
		# default --lib); fall back to our copy if that one cannot load.
		local m=$ROOT/target/release/mantle lib=$WAS_LIB
		[[ -n $lib && -f $lib ]] || lib=$ROOT/target/release/libmantle.so
		if ! "$m" tags up --lib "$lib" >/dev/null; then
			echo "run.sh: $m tags up failed; loading with the copy this run used" >&2
			m=$MANTLE
			"$m" tags up --lib "$lib" >/dev/null || echo "run.sh: could not re-load the kernel side" >&2
		fi
		python3 - "$BIN/tags-before.json" <<-'EOF' | while read -r -a args; do "$m" tag create "${args[@]}" >/dev/null || echo "run.sh: could not re-create tag ${args[0]}" >&2; done
			import json, sys
			for t in json.load(open(sys.argv[1])):
			    a = [t["name"]]
			    if t.get("ttl") is not None: a += ["--ttl", str(t["ttl"])]
			    if t.get("system"): a.append("--system")
			    if t.get("lifeline"): a += ["--lifeline", str(t["lifeline"])]
			    if t.get("replies"): a.append("--replies")
			    if t.get("scope", "local") != "local" or t.get("state") != "live":
			        sys.stderr.write("run.sh: not re-creating tag %s (%s, %s)\n" % (t["name"], t.get("scope"), t.get("state")))
			        continue
			    if t.get("owner_uid") is not None: a += ["--owner", str(t["owner_uid"])]
			    print(" ".join(a))
		EOF
		echo "run.sh: kernel side re-loaded, tags re-created (their holders are not restored)" >&2
	else
		echo "run.sh: kernel side left unloaded, as found" >&2
	fi
	rm -rf "$BIN"
	exit $rc
}
trap restore EXIT

# Current state, tracked here (we hold the lock: nobody else changes it).
CUR_LOADED=$WAS_LOADED
CUR_TAG=unknown
CUR_FLOOR=1 # unknown: `down` is harmless when it is not up
CUR_NOFD=0   # loaded with --no-fd-channels (the nofd condition)
HOLDER=
goto() {
	local cond=$1 want=
	if [[ -n $HOLDER ]]; then kill "$HOLDER"; wait "$HOLDER" 2>/dev/null || true; HOLDER=; fi
	if [[ $cond == floor ]]; then
		if [[ $CUR_LOADED == 1 ]]; then "$MANTLE" tags down >/dev/null; fi
		CUR_LOADED=0 CUR_TAG=
		[[ $CUR_FLOOR == 1 ]] && "$FLOOR" down
		"$FLOOR" up
		CUR_FLOOR=1
		sleep "$SETTLE"
		return
	fi
	if [[ $CUR_FLOOR == 1 ]]; then "$FLOOR" down; CUR_FLOOR=0; fi
	case $cond in
	baseline | loaded) want= ;;
	bystander | tagged | nofd) want=bench_t ;;
	lifeline) want=bench_ll ;;
	esac
	if [[ $cond == baseline ]]; then
		if [[ $CUR_LOADED == 1 ]]; then "$MANTLE" tags down >/dev/null; fi
		CUR_LOADED=0 CUR_TAG=
	else
		local nofd=0
		[[ $cond == nofd ]] && nofd=1
		if [[ $CUR_LOADED == 1 ]] && [[ $CUR_TAG == unknown || $CUR_NOFD != "$nofd" ]]; then "$MANTLE" tags down >/dev/null; CUR_LOADED=0; fi
		if [[ $CUR_LOADED == 0 ]]; then
			# shellcheck disable=SC2046
			"$MANTLE" tags up $UP_ARGS $([[ $nofd == 1 ]] && echo --no-fd-channels) --lib "$BIN/libmantle.so" >/dev/null
			CUR_LOADED=1 CUR_TAG="" CUR_NOFD=$nofd
		fi
		if [[ $CUR_TAG != "$want" ]]; then
			[[ -n $CUR_TAG ]] && "$MANTLE" tag delete "$CUR_TAG" >/dev/null
			if [[ $want == bench_ll ]]; then
				# the cluster table's tag takes lifeline records too
				"$MANTLE" tag create bench_ll --lifeline $((CLUSTER == 1 ? 32768 : 65536)) >/dev/null
			elif [[ -n $want ]]; then
				"$MANTLE" tag create "$want" >/dev/null
			fi
			CUR_TAG=$want
		fi
		if [[ $cond == bystander ]]; then
			# not a pipe this shell reads (see run_one)
			"$MANTLE" tag run bench_t $GTAG -- sleep 100000 </dev/null >/dev/null 2>&1 &
			HOLDER=$!
		fi
	fi
	sleep "$SETTLE"
	if [[ -n $HOLDER ]] && ! grep -q '^State:.*S' "/proc/$HOLDER/status" 2>/dev/null; then
		die "the bystander condition's holder (mantle tag run bench_t -- sleep) is not running"
	fi
}
# The command prefix of a condition (and case): pinning, then the tags for
# the run (with --cluster, the tcp_* cases hold the global tag too).
GTAG=
[[ $CLUSTER == 1 ]] && GTAG=bench_g
prefix() {
	local g=
	[[ ${2:-} == tcp_* ]] && g=$GTAG
	case $1 in
	tagged | nofd) echo "taskset -c $CPU $MANTLE tag run bench_t $g --" ;;
	lifeline) echo "taskset -c $CPU $MANTLE tag run bench_ll $g --" ;;
	*) echo "taskset -c $CPU" ;;
	esac
}
hops() { # deliveries counted by the kernel side so far (0 if not loaded)
	if [[ $CUR_LOADED == 1 ]]; then
		"$MANTLE" tags status | awk '$1 == "hops:" { print $2 }'
	else echo 0; fi
}

# ------------------------------------------------------------------ run
if [[ $DMA == 1 ]]; then
	exec 8>/dev/cpu_dma_latency
	echo 0 >&8
fi
STAMP=$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
RAW=$BIN/raw.tsv
: >"$RAW"
T_START=$(date +%s)

# The host-speed gate (--gate): probe and compare with the condition's
# reference, the third fastest probe seen under it (GPROBES: its five
# fastest). Not the fastest: a single probe can read ~7% under every other
# (seen: floor 251 ns among 266-271), and a gate on it passes nothing.
declare -A GPROBES=()
G_REDONE=0 G_WAITED=0 G_UNGATED=0 G_REGATED=0 G_KEPT=0 G_LAST="" G_PASSED=0
GATED=$BIN/gated.tsv # RAW line, kind, case, cond, rep, slower of its two probes
: >"$GATED"
gate_probe() { taskset -c "$CPU" "$BIN/micro" getpid 200000 | awk '{ print $2 }'; }
gate_ref() { # COND: its reference probe (- before the first)
	if [[ -n ${GPROBES[$1]:-} ]]; then printf '%s\n' ${GPROBES[$1]} | head -3 | tail -1; else echo -; fi
}
gate_fast() { # PROBE REF: 0 if PROBE is within GATE% of REF
	awk -v p="$1" -v b="$2" -v g="$GATE" 'BEGIN { exit !(p <= b * (1 + g / 100)) }'
}
gate_ok() { # COND: probe now; 0 if within GATE% of the condition's reference
	local c=$1 p b
	p=$(gate_probe)
	G_LAST=$p
	GPROBES[$c]=$(printf '%s\n' ${GPROBES[$c]:-} "$p" | sort -g | head -5 | tr '\n' ' ')
	b=$(gate_ref "$c")
	printf '%s\t%s\t%s\t%s\n' "$(date +%T)" "$c" "$p" "$b" >>"$BIN/gate.tsv"
	gate_fast "$p" "$b"
}
gate_calibrate() { # COND: 8 probes, 1 s apart, for its first reference
	local _
	for _ in 1 2 3 4 5 6 7 8; do gate_ok "$1" || true; sleep 1; done
	log "gate: $1: reference getpid probe $(gate_ref "$1") ns (third fastest of 8)"
}
gate_wait() { # COND: wait for a fast probe (up to GATE_WAIT s); 1 if none came
	local t0=$SECONDS
	until gate_ok "$1"; do
		if ((SECONDS - t0 >= GATE_WAIT)); then
			G_UNGATED=$((G_UNGATED + 1))
			return 1
		fi
		sleep 1
	done
	G_WAITED=$((G_WAITED + SECONDS - t0))
}

# run_one KIND CASE COND REP: one timed run, appends a row to $RAW.
# Output goes to files, never to a pipe this shell reads: reading from a
# tagged process's pipe would give the driver (and every later run) its tag.
run_one() {
	local tries=0 before
	G_PASSED=0
	if [[ $GATE == 0 || $4 == 0 ]]; then run_once "$@"; return; fi
	while :; do
		gate_wait "$3" || {
			log "gate: no fast probe under $3 in ${GATE_WAIT} s: $2 rep $4 taken ungated"
			run_once "$@"
			return
		}
		before=$G_LAST
		run_once "$@"
		if gate_ok "$3"; then
			G_PASSED=1
			printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$(wc -l <"$RAW")" "$1" "$2" "$3" "$4" \
				"$(printf '%s\n' "$before" "$G_LAST" | sort -g | tail -1)" >>"$GATED"
			return
		fi
		if ((++tries > GATE_REDO)); then
			log "gate: $2 rep $4 under $3: the host slowed during each of its $tries runs: the last kept, ungated"
			G_UNGATED=$((G_UNGATED + 1))
			return
		fi
		sed -i '$d' "$RAW" # the host slowed during the run: measure it again
		G_REDONE=$((G_REDONE + 1))
	done
}
run_once() {
	local kind=$1 case=$2 cond=$3 rep=$4 h0 h1 val ops note=
	local out=$BIN/out err=$BIN/err
	h0=$(hops)
	if [[ $kind == micro ]]; then
		local bin=$BIN/micro
		[[ $case == selfread ]] && bin=$BIN/micro_mantle
		# shellcheck disable=SC2046
		$(prefix "$cond" "$case") "$bin" "$case" "${ITERS[$case]}" >"$out" 2>"$err" ||
			die "micro $case under $cond failed: $(cat "$err")"
		val=$(awk -v c="$case" '$1 == c { print $2 }' "$out")
		ops=$((ITERS[$case] + ITERS[$case] / 5))
		if [[ $case == selfread ]]; then
			note=$(sed -n 's/^selfread: vector //p' "$err")
			if [[ $cond == tagged || $cond == lifeline || $cond == nofd ]] && [[ $note == 0 ]]; then
				die "selfread under $cond read an empty vector: the tag is not visible"
			fi
			if [[ $cond != tagged && $cond != lifeline && $cond != nofd && $note != 0 ]]; then
				die "selfread under $cond read vector $note: this run holds a tag it should not"
			fi
		fi
	else
		$(prefix "$cond") "$BIN/micro" time sh -c "$(prog_cmd "$case")" >"$out" 2>"$err" ||
			die "program $case under $cond failed: $(cat "$err")"
		val=$(awk '$1 == "time" { print $2 }' "$out")
		ops=1
	fi
	[[ -n $val ]] || die "$kind $case under $cond printed no result"
	h1=$(hops)
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$kind" "$case" "$cond" "$rep" "$val" \
		"$(awk -v a="$h0" -v b="$h1" -v n="$ops" 'BEGIN { printf "%.4f", (b - a) / n }')" "${note:--}" >>"$RAW"
}

# The gate's second look (--gate): a condition calibrated while the host
# was slow has a loose reference at first, which later probes tighten. A
# run whose slower probe is not within GATE% of its condition's reference
# after the suites (the second look's own probes may tighten it further)
# is measured again, in place (its row is replaced), once; if
# the new run cannot pass the gate either, the first is kept, and so are
# the condition's other runs (the host has not come back to its reference).
regate() { # FILE: the gated runs of the suites (GATED; sort reads it whole
	# before the loop starts, so the rows its runs add are not read again)
	local n kind case cond rep probe cur="" new ungated stuck=""
	while IFS=$'\t' read -r -u 3 n kind case cond rep probe; do
		gate_fast "$probe" "$(gate_ref "$cond")" && continue
		if [[ $cond == "$stuck" ]]; then G_KEPT=$((G_KEPT + 1)); continue; fi
		[[ $cond == "$cur" ]] || { goto "$cond"; cur=$cond; }
		log "gate: $kind $case rep $rep under $cond again: its probe $probe ns is not within $GATE% of the reference now, $(gate_ref "$cond") ns"
		ungated=$G_UNGATED
		run_one "$kind" "$case" "$cond" "$rep"
		new=$(tail -1 "$RAW")
		sed -i '$d' "$RAW"
		if [[ $G_PASSED == 0 ]]; then
			G_UNGATED=$ungated G_KEPT=$((G_KEPT + 1))
			log "gate: $kind $case rep $rep under $cond: no run passed the gate again; the first is kept, and so are the rest of $cond's"
			stuck=$cond
			continue
		fi
		awk -v n="$n" -v l="$new" 'NR == n { print l; next } { print }' "$RAW" >"$RAW.new"
		mv "$RAW.new" "$RAW"
		G_REGATED=$((G_REGATED + 1))
	done 3< <(sort -t$'\t' -k4,4 -s "$1")
}

conds_for_rep() { # ABBA order
	if (($1 % 2 == 1)); then printf '%s\n' "${CONDS[@]}"; else printf '%s\n' "${CONDS[@]}" | tac; fi
}

run_suite() { # KIND REPS CASES...
	local kind=$1 reps=$2 rep cond c
	shift 2
	for ((rep = 1; rep <= reps; rep++)); do
		for cond in $(conds_for_rep "$rep"); do
			goto "$cond"
			log "$kind rep $rep/$reps: $cond"
			for c in "$@"; do run_one "$kind" "$c" "$cond" "$rep"; done
		done
	done
}

# Warm-up: every case once, untimed, in the baseline state (page cache,
# binaries, the first run of anything is slower here).
goto baseline
log "warm-up pass (untimed)"
if [[ $DO_MICRO == 1 ]]; then for c in "${MICRO_CASES[@]}"; do run_one micro "$c" baseline 0; done; fi
if [[ $DO_PROGS == 1 ]]; then for c in "${PROG_CASES[@]}"; do run_one program "$c" baseline 0; done; fi
: >"$RAW"
if [[ $GATE != 0 ]]; then
	for cond in "${CONDS[@]}"; do goto "$cond"; gate_calibrate "$cond"; done
fi
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
[[ $DO_MICRO == 1 ]] && run_suite micro "$REPS_MICRO" "${MICRO_CASES[@]}"
T_MICRO=$(date +%s)
[[ $DO_PROGS == 1 ]] && run_suite program "$REPS_PROGS" "${PROG_CASES[@]}"
T_PROGS=$(date +%s)
[[ $GATE != 0 ]] && regate "$GATED"
T_END=$(date +%s)
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

# ------------------------------------------------------------------ profile
PROF=$BIN/profile.tsv
: >"$PROF"
prog_stats() { # name run_cnt run_time_ns, for every mt_* and fl_* program
	bpftool prog show --json | python3 -c '
import json, sys
for p in json.load(sys.stdin):
    n = p.get("name", "")
    if n.startswith(("mt_", "fl_")):
        print(n, p.get("run_cnt", 0), p.get("run_time_ns", 0))'
}
profile_one() { # KIND CASE COND
	local kind=$1 case=$2 cond=$3 ops
	prog_stats >"$BIN/s0"
	if [[ $kind == micro ]]; then
		local bin=$BIN/micro
		[[ $case == selfread ]] && bin=$BIN/micro_mantle
		$(prefix "$cond" "$case") "$bin" "$case" "${ITERS[$case]}" >/dev/null 2>&1 || die "profile: micro $case failed"
		ops=$((ITERS[$case] + ITERS[$case] / 5))
	else
		$(prefix "$cond") "$BIN/micro" time sh -c "$(prog_cmd "$case")" >/dev/null 2>&1 || die "profile: $case failed"
		ops=1
	fi
	prog_stats >"$BIN/s1"
	python3 - "$BIN/s0" "$BIN/s1" "$kind" "$case" "$cond" "$ops" >>"$PROF" <<-'EOF'
		import sys
		s0 = {l.split()[0]: l.split()[1:] for l in open(sys.argv[1])}
		for l in open(sys.argv[2]):
		    n, c, t = l.split()
		    c0, t0 = s0.get(n, ["0", "0"])
		    dc, dt = int(c) - int(c0), int(t) - int(t0)
		    if dc > 0:
		        print("\t".join([sys.argv[3], sys.argv[4], sys.argv[5], n, str(dc / float(sys.argv[6])), str(dt / dc)]))
	EOF
}
if [[ $PROFILE == 1 ]]; then
	sysctl -q -w kernel.bpf_stats_enabled=1 >/dev/null
	for cond in floor bystander tagged lifeline; do
		goto "$cond"
		log "profile pass (bpf_stats on): $cond"
		if [[ $DO_MICRO == 1 ]]; then for c in "${MICRO_CASES[@]}"; do profile_one micro "$c" "$cond"; done; fi
		if [[ $DO_PROGS == 1 && $cond == tagged ]]; then for c in "${PROG_CASES[@]}"; do profile_one program "$c" "$cond"; done; fi
	done
	sysctl -q -w kernel.bpf_stats_enabled="$STATS_BEFORE" >/dev/null
fi
goto baseline

# ------------------------------------------------------------------ report
META=$(python3 -c 'import json,sys; print(json.dumps(dict(a.split("=",1) for a in sys.argv[1:])))' \
	"date=$STAMP" "git=repository HEAD $GIT_REV" "mantle_sha256=$MANTLE_SHA" "mantle_dir=$MANTLE_DIR" "kernel=$(uname -r)" "cpus=$(nproc)" \
	"pinning=taskset -c $CPU (every process of every case)" \
	"cpu_dma_latency=$([[ $DMA == 1 ]] && echo 'held at 0' || echo 'not held')" \
	"reps_micro=$REPS_MICRO" "reps_programs=$REPS_PROGS" "quick=$QUICK" \
	"order=ABBA: odd reps baseline..lifeline, even reps reversed" \
	"iters=$(for c in "${MICRO_CASES[@]}"; do printf '%s:%s ' "$c" "${ITERS[$c]}"; done)" \
	"inputs=gzip ${MIB_GZ} MiB, xz ${KIB_XZ} KiB, sort ${MIB_SORT} MiB, sqlite 1M rows, tar /usr/include x${TAR_LOOPS}" \
	"loadavg_start=$LOAD0" "loadavg_end=$LOAD1" "busy_before_start=${BUSY0}% of all CPUs before taking the lock, ${BUSY1}% after" \
	"seconds_micro=$((T_MICRO - T_START))" "seconds_programs=$((T_PROGS - T_MICRO))" "seconds_second_look=$((T_END - T_PROGS))" \
	"gate=$([[ $GATE == 0 ]] && echo off || echo "$GATE% over each condition's third fastest getpid probe ($(for c in "${CONDS[@]}"; do printf '%s %s ns, ' "$c" "$(gate_ref "$c")"; done | sed 's/, $//')); runs measured again: $G_REDONE; seconds waited for the fast state: $G_WAITED; runs taken ungated: $G_UNGATED; runs measured again after the references settled: $G_REGATED, kept outside them: $G_KEPT")" \
	"command=bash bench/tags/run.sh $ARGS")
python3 "$HERE/report.py" "$RAW" "$PROF" "$META" "$OUT/tags-$STAMP"
if [[ $GATE != 0 ]]; then cp "$BIN/gate.tsv" "$OUT/tags-$STAMP.gate.tsv"; fi # time, condition, probe, reference
log "written $OUT/tags-$STAMP.txt and .json"
