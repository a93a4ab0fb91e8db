#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# bench/otel/screenshot.sh: the README's demo, exported by `mantle tags
# export` to a real Jaeger, photographed in Jaeger's web UI by headless
# Chromium: docs/img/otel-jaeger-demo.png, shown in docs/otel.md.
#
#   bash bench/otel/screenshot.sh [--ui-src SRC] [--mantle PATH] [--out PNG]
#                                               (as root, from the repo root)
#
# What it does, in order:
#  1. the UI: /usr/local/lib/mantle/jaeger-ui-1.76.0, or built there first
#     by bench/otel/jaeger-ui.sh from --ui-src SRC (a jaeger-ui clone: the
#     Jaeger built from Go modules has no UI; jaeger-ui.sh says why);
#     Debian's chromium (installed if missing);
#  2. Jaeger v1.76.0 (scripts/setup.sh builds it) on free loopback ports,
#     in-memory storage, the UI served from that directory
#     (`jaeger_query: ui: assets_path`);
#  3. the kernel side (loaded if it is not, unloaded at the end; holds
#     /run/mantle-kernel.lock), a tag `demo` with a lifeline, `mantle tags
#     export --otlp ... --tags demo` running, and the README's demo under
#     `mantle tag run demo`: an untagged socat server on a unix socket
#     running `tr`, and `printf | sed | socat` holding the tag;
#  4. the exporter stopped (SIGTERM: it sends what it holds), the trace
#     found through the query API (`/api/traces?service=sed`) with as many
#     spans as `tag lifeline --json` has receptions;
#  5. `chromium --headless --screenshot` of the trace view (/trace/ID).
# A minute once the UI is built. Temporary files go at the end.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MANTLE=$ROOT/target/release/mantle
OUT=$ROOT/docs/img/otel-jaeger-demo.png
UI=${MANTLE_JAEGER_UI:-/usr/local/lib/mantle/jaeger-ui-1.76.0}
JAEGER=/usr/local/lib/mantle/jaeger-1.76.0
UI_SRC=
TAG=demo
while (($#)); do
	case $1 in
	--ui-src) UI_SRC=$2; shift ;;
	--mantle) MANTLE=$2; shift ;;
	--out) OUT=$2; shift ;;
	*) echo "usage: $0 [--ui-src SRC] [--mantle PATH] [--out PNG]" >&2; exit 2 ;;
	esac
	shift
done
die() { echo "screenshot.sh: $*" >&2; exit 1; }
[[ $(id -u) == 0 ]] || die "needs root (the tags kernel side)"
[[ -x $MANTLE ]] || die "no $MANTLE (cargo build --release -p mantle-cli)"
[[ -x $JAEGER ]] || die "no $JAEGER (bash scripts/setup.sh builds it)"
if [[ ! -f $UI/index.html ]]; then
	[[ -n $UI_SRC ]] || die "no Jaeger UI in $UI: give --ui-src with a clone of the jaeger-ui repository (tag v1.76.0) to build it"
	bash "$ROOT/bench/otel/jaeger-ui.sh" "$UI_SRC"
fi
CHROMIUM=$(command -v chromium || true)
if [[ -z $CHROMIUM ]]; then
	echo "screenshot.sh: installing Debian's chromium"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
	CHROMIUM=$(command -v chromium)
fi

TMP=$(mktemp -d /tmp/mantle-otel-shot.XXXXXX)
chmod 755 "$TMP"
JPID= EPID= SPID= LOADED_HERE=0 TAG_MADE=0
cleanup() {
	[[ -n $EPID ]] && kill "$EPID" 2>/dev/null || true
	[[ -n $SPID ]] && kill "$SPID" 2>/dev/null || true
	[[ -n $JPID ]] && kill "$JPID" 2>/dev/null && wait "$JPID" 2>/dev/null || true
	[[ $TAG_MADE == 1 ]] && "$MANTLE" tag delete "$TAG" >/dev/null 2>&1 || true
	[[ $LOADED_HERE == 1 ]] && "$MANTLE" tags down >/dev/null 2>&1 || true
	rm -rf "$TMP"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
OTLP=$(free_port) QUERY=$(free_port) GRPC=$(free_port)
cat >"$TMP/jaeger.yaml" <<EOF
# as crates/cli/tests/otel/jaeger.yaml, with the UI
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memstore
    ui:
      assets_path: $UI
    http:
      endpoint: 127.0.0.1:$QUERY
    grpc:
      endpoint: 127.0.0.1:$GRPC
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 1000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:$OTLP
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
EOF
"$JAEGER" --config "$TMP/jaeger.yaml" >/dev/null 2>"$TMP/jaeger.log" &
JPID=$!
QURL=http://127.0.0.1:$QUERY
for _ in $(seq 300); do
	curl -sf "$QURL/api/services" >/dev/null 2>&1 && break
	kill -0 "$JPID" 2>/dev/null || { cat "$TMP/jaeger.log" >&2; die "Jaeger exited"; }
	sleep 0.1
done
INDEX=$(curl -sf "$QURL/" || true)
[[ $INDEX == *'<div id="jaeger-ui-root">'* ]] ||
	{ cat "$TMP/jaeger.log" >&2; die "Jaeger does not serve the UI from $UI"; }

exec 9>>/run/mantle-kernel.lock
flock 9
if [[ ! -e /sys/fs/bpf/mantle/tags/maps/ctl ]]; then
	LIB=$(dirname "$MANTLE")/libmantle.so
	[[ -e $LIB ]] || LIB=$ROOT/target/debug/libmantle.so
	[[ -e $LIB ]] || { (cd "$ROOT" && cargo build --release -q -p mantle-api --lib); LIB=$ROOT/target/release/libmantle.so; }
	"$MANTLE" tags up --lib "$LIB" >/dev/null
	LOADED_HERE=1
fi
"$MANTLE" tag create "$TAG" --lifeline 4096 >/dev/null ||
	die "cannot create the tag $TAG (does one exist? mantle tag delete $TAG)"
TAG_MADE=1

"$MANTLE" tags export --otlp "http://127.0.0.1:$OTLP" --tags "$TAG" --poll 100ms \
	>/dev/null 2>"$TMP/export.err" </dev/null &
EPID=$!
sleep 0.5

# The README's demo (scripts/demo.sh / `mantle demo`)
socat "UNIX-LISTEN:$TMP/demo.sock,fork" "SYSTEM:tr a-z A-Z" >/dev/null 2>&1 &
SPID=$!
for _ in $(seq 100); do [[ -S $TMP/demo.sock ]] && break; sleep 0.1; done
"$MANTLE" tag run "$TAG" -- sh -c "printf 'hello\\n' | sed 's/hello/HELLO/' | socat -t 2 - UNIX-CONNECT:$TMP/demo.sock" \
	</dev/null >"$TMP/demo.out"
grep -qx HELLO "$TMP/demo.out" || die "the demo printed $(cat "$TMP/demo.out")"
kill "$SPID"; wait "$SPID" 2>/dev/null || true; SPID=
sleep 0.5
kill -TERM "$EPID"
wait "$EPID" || { cat "$TMP/export.err" >&2; die "tags export failed"; }
EPID=
N=$("$MANTLE" tag lifeline "$TAG" --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')

# The trace, once Jaeger holds every span
TID=
for _ in $(seq 100); do
	TID=$(curl -sf "$QURL/api/traces?service=sed&lookback=1h" | python3 -c '
import json, sys
d = json.load(sys.stdin)["data"]
n = int(sys.argv[1])
t = [t for t in d if len(t["spans"]) == n]
print(t[0]["traceID"] if t else "")' "$N" || true)
	[[ -n $TID ]] && break
	sleep 0.2
done
[[ -n $TID ]] || die "Jaeger has no trace of $N spans for service sed: $(curl -s "$QURL/api/traces?service=sed&lookback=1h" | head -c 500)"
echo "screenshot.sh: trace $TID, $N spans; $QURL/trace/$TID"

mkdir -p "$(dirname "$OUT")"
# --virtual-time-budget: the page's fetches and rendering run to the end
# before the picture; the profile goes in the temporary directory.
"$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars \
	--user-data-dir="$TMP/chromium" --window-size=1400,520 \
	--virtual-time-budget=20000 --screenshot="$TMP/shot.png" \
	"$QURL/trace/$TID" >"$TMP/chromium.log" 2>&1 ||
	{ tail -20 "$TMP/chromium.log" >&2; die "chromium failed"; }
[[ -s $TMP/shot.png ]] || die "chromium made no picture"
cp "$TMP/shot.png" "$OUT"
echo "screenshot.sh: $OUT ($(stat -c %s "$OUT") bytes)"
