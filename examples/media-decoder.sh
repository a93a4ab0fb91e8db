#!/usr/bin/env bash
# mTags Example 3 / Figure 4: profiling a media decoder. A real decoder from
# Debian (lame, decoding an MP3 made here with sox + lame) reads a local file
# and writes its output into a "network share": a FIFO at mnt/out.wav, served
# by a share client (socat, the fs-cifs of the paper) that forwards it over
# TCP to a file server (socat) on another host (a network namespace) which
# stores it. The decoder runs under a global tag from a cluster table; the
# tag reaches the share client and, across the network, the file server.
# The lifeline plot (SVG, then PNG) shows the rhythm of the decoder's writes.
# Run as root on Debian: bash examples/media-decoder.sh [OUTDIR] [SECONDS (default 2)]
source "$(dirname "$0")/lib.sh"
OUT=${1:-/tmp/mantle-media-decoder}
SECS=${2:-2}
prepare
need lame lame; need sox sox; need rsvg-convert librsvg2-bin; need python3 python3
kernel_lock

mkdir -p "$OUT"; chmod 755 "$OUT"
W=$(mktemp -d /tmp/mantle-media.XXXXXX); chmod 755 "$W"
mkdir -p "$W/mnt" "$W/share"

say "make the input: $SECS s of stereo audio (sox synth), encoded to MP3 (lame)"
sox -n -r 44100 -c 2 -b 16 "$W/in.wav" synth "$SECS" sine 440 sine 660 fade 0.1 "$SECS" 0.1
lame --quiet -b 128 "$W/in.wav" "$W/in.mp3"
ls -l "$W/in.mp3"

say "two hosts: the workstation and the file server (network namespaces over a veth pair)"
WS=mdws$$; FSH=mdfs$$
netns_add "$WS"; netns_add "$FSH"
ip link add "v$WS" netns "$WS" type veth peer name "v$FSH" netns "$FSH"
ip -n "$WS" addr add 10.77.50.1/24 dev "v$WS"; ip -n "$WS" link set "v$WS" up
ip -n "$FSH" addr add 10.77.50.2/24 dev "v$FSH"; ip -n "$FSH" link set "v$FSH" up
echo "workstation $WS 10.77.50.1  <->  file server $FSH 10.77.50.2"

say "load mantle with a cluster table: the global tag 'decode' crosses hosts"
printf '# cluster table: the same file on every host\ndecode\n' > "$W/cluster"
mantle_up --cluster "$W/cluster"
"$M" tag ls

say "start the file server (on $FSH) and the share client (on $WS), untagged"
bg nsenter --net="/run/netns/$FSH" socat -u TCP-LISTEN:4450,reuseaddr "OPEN:$W/share/out.wav,creat,trunc"
for _ in $(seq 300); do in_ns "$FSH" ss -Hltn 'sport = :4450' | grep -q 4450 && break; sleep 0.01; done
mkfifo "$W/mnt/out.wav"
bg nsenter --net="/run/netns/$WS" socat -u "OPEN:$W/mnt/out.wav" TCP:10.77.50.2:4450

say "decode under the tag: mantle tag run decode -- lame --decode in.mp3 mnt/out.wav"
T0=$(date +%s.%N)
in_ns "$WS" "$M" tag run decode -- lame --quiet --decode "$W/in.mp3" "$W/mnt/out.wav"
T1=$(date +%s.%N)
for _ in $(seq 500); do [ -z "$(ip netns pids "$FSH")" ] && break; sleep 0.01; done
lame --quiet --decode "$W/in.mp3" "$W/local.wav"
echo "decoded in $(python3 -c "print(f'{$T1-$T0:.2f}')") s; the server stored $(stat -c %s "$W/share/out.wav") bytes (a local decode: $(stat -c %s "$W/local.wav"))"
# (lame cannot seek back in a FIFO to fill in the WAV header's lengths: compare the samples)
if cmp -s -i 44 "$W/share/out.wav" "$W/local.wav"; then echo "the samples on the server are identical to a local decode"
else echo "UNEXPECTED: the file on the server differs from a local decode" >&2; exit 1; fi

say "the lifeline: who received 'decode' (first lines)"
"$M" tag lifeline decode > "$OUT/decode.lifeline.txt"
head -12 "$OUT/decode.lifeline.txt"
"$M" tag lifeline decode --json > "$OUT/decode.lifeline.json"
"$M" tag lifeline decode --format chrome -o "$OUT/decode.trace.json"
"$M" tag lifeline decode --format svg -o "$OUT/decode.svg"
rsvg-convert -b white -o "$OUT/decode.png" "$OUT/decode.svg"
# The lifeline as each host would save it (--json, split by receiving host),
# plotted per host: one host's plot has real time across (the two-host plot
# above has the Lamport clock). The records are renamed decode.HOST, a tag
# this machine does not have, so that only the file counts (--merge adds the
# local lifeline of the tag it names) and the kernel side can stay loaded.
python3 - "$OUT/decode.lifeline.json" "$OUT" "$WS" "$FSH" <<'PY'
import json, sys
recs, out = json.load(open(sys.argv[1])), sys.argv[2]
for host, name in ((sys.argv[3], "workstation"), (sys.argv[4], "fileserver")):
    json.dump([dict(r, tag=f"decode.{name}") for r in recs if r["host"] == host],
              open(f"{out}/decode.{name}.json", "w"))
PY
for h in workstation fileserver; do
  "$M" tag lifeline "decode.$h" --merge "$OUT/decode.$h.json" --format svg -o "$OUT/decode.$h.svg"
  rsvg-convert -b white -o "$OUT/decode.$h.png" "$OUT/decode.$h.svg"
done

say "LOOK: the rhythm, per receiver (from $OUT/decode.lifeline.json)"
python3 - "$OUT/decode.lifeline.json" <<'PY'
import json, sys, statistics as st
recs = json.load(open(sys.argv[1]))
rows = {}
for r in recs:
    rows.setdefault((r["host"], r["rx_comm"], r["rx_pid"], r["via"]), []).append(r["ts_ns"])
t0 = min(r["ts_ns"] for r in recs)
print(f"{'host':10} {'receiver':18} {'via':6} {'receptions':>10} {'first ms':>9} {'last ms':>8} {'median gap us':>14} {'p10-p90 gap us':>15}")
for (h, comm, pid, via), ts in sorted(rows.items(), key=lambda kv: kv[1][0]):
    gaps = [(b - a) / 1e3 for a, b in zip(ts, ts[1:])]
    if gaps:
        q = st.quantiles(gaps, n=10) if len(gaps) > 1 else [gaps[0]] * 9
        med, spread = f"{st.median(gaps):.0f}", f"{q[0]:.0f}-{q[-1]:.0f}"
    else:
        med = spread = "-"
    print(f"{h:10} {comm + '[' + str(pid) + ']':18} {via:6} {len(ts):>10} {(ts[0]-t0)/1e6:>9.2f} {(ts[-1]-t0)/1e6:>8.2f} {med:>14} {spread:>15}")
remote = [r for r in recs if r["host"] != r["tx_host"]]
print(f"\n{len(recs)} receptions; {len(remote)} arrived across the network, e.g. lamport {remote[0]['lamport']} on {remote[0]['host']} from pid {remote[0]['tx_pid']} on {remote[0]['tx_host']}" if remote else "\nno reception across the network!")
PY
echo
echo "LOOK at the plots (one row per receiving thread, a mark per reception):"
echo "  $OUT/decode.workstation.png  real time on the workstation: the decoder (tag set) and the share client socat, one pipe reception per decoded frame"
echo "  $OUT/decode.fileserver.png   real time on the file server: its socat receiving the tag over TCP, same rhythm"
echo "  $OUT/decode.png              both hosts, Lamport clock across: each TCP reception follows the share client's pipe reception"
echo "  (SVGs beside them; Perfetto trace: $OUT/decode.trace.json)"
rm -rf "$W"
