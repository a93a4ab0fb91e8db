#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# bench/tags/otel.sh: does `mantle tags export` touch the hot path, and
# what does the exporter itself cost? (issue 36, docs/otel.md "Cost")
#
#   bash bench/tags/otel.sh [--reps N] [--budget SECONDS] [--mantle PATH]
#                                                       (as root, repo root)
#
# Two conditions side by side in one run, ABBA order over N repetitions
# (default 9):
#   lifeline  the micro cases (micro.c) tagged with a tag whose every
#             reception is recorded (--lifeline 65536), as run.sh's
#             `lifeline` condition
#   export    the same, while `mantle tags export --tags bench_otel --new
#             --poll 50ms` sends every reception to a collector on
#             loopback (a Python OTLP/HTTP sink that answers 200 and
#             discards). 50ms, not the default 200ms: a ping-pong records
#             up to about 200,000 receptions a second and the ring all
#             tags share holds 65,536, so at 200ms it could wrap between
#             two reads (counted as "lost in the ring")
# Pinning: the measured processes on CPU 1 (taskset), the exporter and the
# sink on CPU 0: the question is whether exporting slows the IPC path, not
# whether two processes share a CPU. Each row: median ns/op (micro's median
# of 5 segments per run) over the repetitions, MAD, min..max; the ratio of
# medians export / lifeline ("the same within noise": the spread of the
# per-repetition ratios says how wide noise is here). The exporter's own
# CPU (utime+stime from /proc, from after its start to before its stop) is
# reported per 10,000 receptions it read (each a span queued), with the
# spans it sent and dropped and the receptions lost in the ring.
#
# It prints the load average at its start and end and how long it took.
# --budget (default 150 s): no repetition starts once the time spent plus
# the last repetition's would pass it, so the run stays under 3 minutes
# with its set-up whatever the load; the repetitions done are printed (9
# fit with room to spare on an idle machine; on this VM at a load average
# of 28 one repetition took 27 s).
#
# Holds /run/mantle-kernel.lock; loads the kernel side if it is not loaded
# (and unloads it at the end), leaves other tags alone.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/bench/tags
MANTLE=$ROOT/target/release/mantle
REPS=9
BUDGET=150
while (($#)); do
	case $1 in
	--reps) REPS=$2; shift ;;
	--budget) BUDGET=$2; shift ;;
	--mantle) MANTLE=$2; shift ;;
	*) echo "usage: $0 [--reps N] [--budget SECONDS] [--mantle PATH]" >&2; exit 2 ;;
	esac
	shift
done
[[ $(id -u) == 0 ]] || { echo "otel.sh: needs root (the tags kernel side)" >&2; exit 1; }
[[ -x $MANTLE ]] || { echo "otel.sh: no $MANTLE (cargo build --release -p mantle-cli)" >&2; exit 1; }
BIN=$(mktemp -d /tmp/mantle-bench-otel.XXXXXX)
chmod 755 "$BIN"
cc -O2 -Wall -o "$BIN/micro" "$HERE/micro.c" -lrt
# run.sh's IPC ping-pongs, at its iteration counts: every reception of
# each is recorded, so the exporter has the most to read
CASES=(pipe_pingpong unix_pingpong eventfd_pingpong mq_pingpong)
declare -A ITERS=([pipe_pingpong]=15000 [unix_pingpong]=10000 [eventfd_pingpong]=15000 [mq_pingpong]=15000)

exec 9>>/run/mantle-kernel.lock
flock 9
LOADED_HERE=0
if [[ ! -e /sys/fs/bpf/mantle/tags/maps/ctl ]]; then
	# libmantle.so beside the binary, or the debug build's (tests build it)
	LIB=$(dirname "$MANTLE")/libmantle.so
	[[ -e $LIB ]] || LIB=$ROOT/target/debug/libmantle.so
	"$MANTLE" tags up --lib "$LIB" >/dev/null
	LOADED_HERE=1
fi
SINK_PID= EXP_PID=
cleanup() {
	[[ -n $EXP_PID ]] && kill "$EXP_PID" 2>/dev/null || true
	[[ -n $SINK_PID ]] && kill "$SINK_PID" 2>/dev/null || true
	"$MANTLE" tag delete bench_otel >/dev/null 2>&1 || true
	[[ $LOADED_HERE == 1 ]] && "$MANTLE" tags down >/dev/null 2>&1 || true
	rm -rf "$BIN"
}
trap cleanup EXIT
"$MANTLE" tag delete bench_otel >/dev/null 2>&1 || true
"$MANTLE" tag create bench_otel --lifeline 65536 >/dev/null

# The sink: OTLP/HTTP that takes everything.
cat >"$BIN/sink.py" <<'EOF'
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
EOF
taskset -c 0 python3 "$BIN/sink.py" >"$BIN/sink.port" &
SINK_PID=$!
for _ in $(seq 50); do [[ -s $BIN/sink.port ]] && break; sleep 0.1; done
URL=http://127.0.0.1:$(cat "$BIN/sink.port")

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)
: >"$BIN/runs"     # cond case rep ns
: >"$BIN/exporter" # rep cpu_s queued sent dropped

run_case() { # cond case rep
	local ns
	ns=$(taskset -c 1 "$MANTLE" tag run bench_otel -- "$BIN/micro" "$2" "${ITERS[$2]}" </dev/null | awk '{print $2}')
	echo "$1 $2 $3 $ns" >>"$BIN/runs"
}

run_cond() { # cond rep
	if [[ $1 == export ]]; then
		taskset -c 0 "$MANTLE" tags export --otlp "$URL" --tags bench_otel --new --poll 50ms --json \
			>"$BIN/exp.json" 2>"$BIN/exp.err" </dev/null &
		EXP_PID=$!
		sleep 1 # started, the ring's backlog learned
		local t0
		t0=$(ticks "$EXP_PID")
	fi
	for c in "${CASES[@]}"; do run_case "$1" "$c" "$2"; done
	if [[ $1 == export ]]; then
		sleep 1.5 # the last polls and batches
		local t1
		t1=$(ticks "$EXP_PID")
		kill -TERM "$EXP_PID"
		wait "$EXP_PID" || { cat "$BIN/exp.err" >&2; exit 1; }
		EXP_PID=
		python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); q=r["queue"]
print(sys.argv[2], (int(sys.argv[4])-int(sys.argv[3]))/int(sys.argv[5]), q["queued"], q["sent"], q["dropped_full"]+q["dropped_expired"]+q["dropped_rejected"], r["lost_in_ring"])' \
			"$BIN/exp.json" "$2" "$t0" "$t1" "$HZ" >>"$BIN/exporter"
	fi
}

START=$(date +%s)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
# warm-up
for c in "${CASES[@]}"; do run_case warmup "$c" 0; done
DONE=0
for r in $(seq "$REPS"); do
	T0=$(date +%s)
	if ((r % 2)); then order=(lifeline export); else order=(export lifeline); fi
	for cond in "${order[@]}"; do run_cond "$cond" "$r"; done
	DONE=$r
	T1=$(date +%s)
	if ((r < REPS && T1 - START + (T1 - T0) > BUDGET)); then
		echo "otel.sh: stopped after $r of $REPS repetitions: the next would pass the ${BUDGET} s budget"
		break
	fi
done

LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)
echo "load average at the start: $LOAD0; at the end: $LOAD1; $(($(date +%s) - START)) s; $(nproc) CPUs; commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
python3 - "$BIN/runs" "$BIN/exporter" "$DONE" <<'EOF'
import statistics as st, sys
runs = [l.split() for l in open(sys.argv[1])]
exp = [l.split() for l in open(sys.argv[2])]
reps = int(sys.argv[3])
def med(xs): return st.median(xs)
def mad(xs):
    m = med(xs); return med([abs(x - m) for x in xs])
print(f"bench/tags/otel.sh: {reps} repetitions, ABBA; measured on CPU 1, exporter and sink on CPU 0")
print(f"{'case':<16}{'lifeline ns/op':>22}{'export ns/op':>22}{'export/lifeline':>17}  per-rep ratios")
for case in sorted({r[1] for r in runs if r[0] != 'warmup'}):
    a = {int(r[2]): float(r[3]) for r in runs if r[0] == 'lifeline' and r[1] == case}
    b = {int(r[2]): float(r[3]) for r in runs if r[0] == 'export' and r[1] == case}
    ra = [b[k] / a[k] for k in a if k in b]
    A, B = list(a.values()), list(b.values())
    print(f"{case:<16}{med(A):>9.0f} ±{mad(A):<4.0f}({min(A):.0f}..{max(A):.0f}){med(B):>7.0f} ±{mad(B):<4.0f}({min(B):.0f}..{max(B):.0f}){med(B)/med(A):>10.3f}      {min(ra):.3f}..{max(ra):.3f} (median {med(ra):.3f})")
cpu = [float(e[1]) for e in exp]; q = [int(e[2]) for e in exp]
sent = [int(e[3]) for e in exp]; drop = [int(e[4]) for e in exp]; lost = [int(e[5]) for e in exp]
per = [c / n * 1e4 * 1e3 for c, n in zip(cpu, q) if n]
print(f"exporter: {med(per):.1f} ms CPU per 10,000 receptions read (median of {len(per)}; {min(per):.1f}..{max(per):.1f}); "
      f"spans per run {med(q):.0f}, sent {sum(sent)} of {sum(q)}, dropped {sum(drop)}, lost in the ring {sum(lost)}")
EOF
