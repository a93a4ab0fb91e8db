#!/usr/bin/env bash
# bench/tags/ab-branch.sh: the hot path's cost of a branch against its base
# (by default main), both kernel sides measured in ONE run, alternately,
# with the same pinning (issue 32: "bench/tags before and after, in one
# run").
#
#   bash bench/tags/ab-branch.sh [options]      (as root, from anywhere)
#
# Builds (release, -p mantle-cli -p mantle-api) the base commit in a
# temporary git worktree and the working tree as it is, copies each
# `mantle` and `libmantle.so` aside, then for every case runs
# bench/tags/ab.sh over the two builds: ROUNDS rounds, each loading the base
# and then the branch (so the host's slow and fast phases fall on both),
# TRIALS trials per load, every process on CPU --cpu (taskset), modes
# bystander, tagged and lifeline. Each case runs twice: with bpf_stats (ns
# per call of every program: mantle's own time, which the host's speed
# moves least) and without (--no-stats: the wall clock per operation that
# run.sh times). The figures to read are ratios branch / base of the same
# run; the load average is printed before and after each case, since other
# work on the machine moves both builds (bench/tags/HISTORY.md).
#
# Options:
#   --base REF        the commit to compare against (default main)
#   --base-dir DIR    use DIR's mantle and libmantle.so as the base instead
#                     of building REF (e.g. a main checkout's target/release)
#   --head-dir DIR    use DIR's build as the branch instead of building the
#                     working tree
#   --cases "C..."    micro.c cases (default "pipe_read pipe_pingpong
#                     unix_pingpong getpid")
#   --rounds N        rounds over the two builds (default 3)
#   --trials N        trials per load (default 3)
#   --cpu N           the CPU every measured process is pinned to (default 1)
#   --help            this text
#
# Output: ab.sh's per-trial lines and its summaries (min / median ns per
# call per build and mode), and a last table of branch / base ratios of
# the medians, per case, mode and column; all of it also in
# bench/results/tags-ab-branch-<date>.txt. Holds /run/mantle-kernel.lock
# while measuring (ab.sh takes it), removes its worktree and copies.
#
# Exit: 0 done; 1 an error (a build failed, ab.sh failed).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
die() { echo "ab-branch.sh: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

BASE=main BASE_DIR= HEAD_DIR= CASES="pipe_read pipe_pingpong unix_pingpong getpid"
ROUNDS=3 TRIALS=3 CPU=1
while [[ $# -gt 0 ]]; do
	case $1 in
	--base) BASE=$2; shift ;;
	--base-dir) BASE_DIR=$2; shift ;;
	--head-dir) HEAD_DIR=$2; shift ;;
	--cases) CASES=$2; shift ;;
	--rounds) ROUNDS=$2; shift ;;
	--trials) TRIALS=$2; shift ;;
	--cpu) CPU=$2; shift ;;
	-h | --help) usage; exit 0 ;;
	*) die "unknown argument $1 (--help)" ;;
	esac
	shift
done
[[ $(id -u) == 0 ]] || die "needs root (ab.sh loads and unloads the kernel side)"

WORK=$(mktemp -d /tmp/mantle-ab-branch.XXXXXX)
WT=
cleanup() {
	set +e
	[[ -n $WT ]] && git -C "$ROOT" worktree remove --force "$WT" >/dev/null 2>&1
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A build's two files, copied into $WORK/NAME (later rebuilds do not move them).
keep() { # NAME DIR
	mkdir -p "$WORK/$1"
	cp "$2/mantle" "$2/libmantle.so" "$WORK/$1/" || die "no mantle and libmantle.so in $2"
}
if [[ -n $BASE_DIR ]]; then
	keep base "$BASE_DIR"
	BASE_DESC="$BASE_DIR"
else
	WT="$WORK/base-src"
	git -C "$ROOT" worktree add --detach "$WT" "$BASE" >/dev/null || die "cannot check out $BASE"
	echo "ab-branch.sh: building $BASE ($(git -C "$WT" rev-parse --short HEAD)) in $WT"
	(cd "$WT" && cargo build --release -q -p mantle-cli -p mantle-api) || die "the build of $BASE failed"
	keep base "$WT/target/release"
	BASE_DESC="$BASE $(git -C "$WT" rev-parse --short HEAD)"
fi
if [[ -n $HEAD_DIR ]]; then
	keep branch "$HEAD_DIR"
	HEAD_DESC="$HEAD_DIR"
else
	echo "ab-branch.sh: building the working tree ($(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet || echo +changes))"
	(cd "$ROOT" && cargo build --release -q -p mantle-cli -p mantle-api) || die "the build of the working tree failed"
	keep branch "$ROOT/target/release"
	HEAD_DESC="$(git -C "$ROOT" rev-parse --abbrev-ref HEAD) $(git -C "$ROOT" rev-parse --short HEAD)"
fi

mkdir -p "$ROOT/bench/results"
OUT="$ROOT/bench/results/tags-ab-branch-$(date -u +%Y%m%d-%H%M%S).txt"
{
	echo "# ab-branch.sh: base = $BASE_DESC, branch = $HEAD_DESC; cpu $CPU, rounds $ROUNDS, trials $TRIALS; $(date -u '+%F %T UTC'); kernel $(uname -r)"
	for c in $CASES; do
		for stats in "" --no-stats; do
			echo "## case $c ${stats:-(bpf_stats)}; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
			bash "$HERE/ab.sh" --case "$c" --modes "bystander tagged lifeline" --rounds "$ROUNDS" \
				--trials "$TRIALS" --cpu "$CPU" $stats "$WORK/base" "$WORK/branch"
			echo "## load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
		done
	done
} 2>&1 | tee "$OUT"
# ab.sh's summary lines: "BUILD MODE COLUMN min / median ..." per build;
# the ratio of the branch's median to the base's, per case/mode/column.
python3 - "$OUT" <<'PY'
import re, sys
case = stats = None
med = {}
for line in open(sys.argv[1]):
    m = re.match(r"## case (\S+) (.*?);", line)
    if m:
        case, stats = m.group(1), m.group(2)
        continue
    # summary rows: "<name>#<i> <mode>  <col> <min>/<median> ..." (ab.sh)
    m = re.match(r"^(base|branch)#\d+\s+(\S+)\s+(.*)$", line.strip())
    if not m or case is None:
        continue
    build, mode, rest = m.groups()
    for col, mn, md in re.findall(r"(\S+) ([\d.]+)/([\d.]+)", rest):
        med[(case, stats, mode, col, build)] = float(md)
rows = sorted({k[:4] for k in med})
if rows:
    print("\n# branch / base, medians (1.00: the same; the machine's noise is several %)")
    for k in rows:
        a, b = med.get(k + ("base",)), med.get(k + ("branch",))
        if a and b:
            print(f"{k[0]:14} {k[1]:12} {k[2]:10} {k[3]:24} {a:10.1f} {b:10.1f} {b / a:6.3f}")
PY
echo "(also in $OUT)"
