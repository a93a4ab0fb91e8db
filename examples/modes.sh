#!/usr/bin/env bash
# mTags Example 4 / Listings 1-2 / Figure 5: a mode change that travels with
# the requests. The sender (the paper's ping) puts the mode tag HIPOW on
# itself (Listing 1); its requests go through intermediate programs that know
# nothing of modes (libnet and stack, unmodified, then socat over a unix
# socket) to a sink (the driver) that reads its own tags before each action
# (Listing 2): in the high mode it transmits at high power and deletes the
# tag, so the following requests are normal again. Then the same with the
# alternative, the mode as an explicit field changed into every interface,
# and Table 1 (lines changed) computed from the sources.
# Run as root on Debian: bash examples/modes.sh
source "$(dirname "$0")/lib.sh"
prepare
kernel_lock
D=$ROOT/examples/modes
W=$(mktemp -d /tmp/mantle-modes.XXXXXX); chmod 755 "$W"
for v in plain mtags interfaces; do
  mkdir -p "$W/$v"
  for c in sender libnet stack sink; do
    src=$D/$v/$c.c; [ -e "$src" ] || continue
    cc -O1 -Wall -Wextra -I"$ROOT/include" -o "$W/$v/$c" "$src" -L"$LIBDIR" -lmantle -Wl,-rpath,"$LIBDIR"
  done
done
mantle_up
need_own_lib
own_tag HIPOW   # the sender creates it, the sink deletes it

run_chain() {  # SINK SENDER LIBNET STACK LABEL
  local sink=$1 sender=$2 libnet=$3 stack=$4 sock=$W/radio0.sock
  rm -f "$sock" "$W/sink.out"
  "$sink" "$sock" > "$W/sink.out" 2>&1 & local sp=$!; _PIDS+=("$sp")
  for _ in $(seq 300); do [ -S "$sock" ] && break; sleep 0.01; done
  echo "\$ $5"
  "$sender" 4 | "$libnet" | "$stack" | socat -u - "UNIX-CONNECT:$sock"
  sleep 0.2
  kill "$sp"; wait "$sp" 2>/dev/null || true
  sed 's/^/    /' "$W/sink.out"
}

say "mTags: mtags/sender | libnet | stack | socat -> mtags/sink   (libnet, stack, socat unmodified)"
run_chain "$W/mtags/sink" "$W/mtags/sender" "$W/plain/libnet" "$W/plain/stack" \
  "mtags/sender 4 | plain/libnet | plain/stack | socat -u - UNIX-CONNECT:radio0.sock   (sink: mtags/sink)"
echo "LOOK: request 1 went out at HIGH power; the sink then deleted HIPOW, so 2-4 are normal."
TAGS_NOW=$("$M" tag ls)
echo "      HIPOW exists now? $([[ $TAGS_NOW == *" HIPOW "* ]] && echo yes || echo "no (deleted by the sink)")"

say "again: each run of the sender raises the mode once more"
run_chain "$W/mtags/sink" "$W/mtags/sender" "$W/plain/libnet" "$W/plain/stack" "mtags/sender 4 | ... (same chain)"

say "the unmodified sender through the same chain: the mTags sink stays normal"
run_chain "$W/mtags/sink" "$W/plain/sender" "$W/plain/libnet" "$W/plain/stack" "plain/sender 4 | ... (same chain)"

say "the alternative: the mode as a message field, every interface changed"
run_chain "$W/interfaces/sink" "$W/interfaces/sender" "$W/interfaces/libnet" "$W/interfaces/stack" \
  "interfaces/sender 4 | interfaces/libnet | interfaces/stack | socat ...   (sink: interfaces/sink)"

say "LOOK: Table 1 for this example (bash examples/modes/count.sh)"
bash "$D/count.sh"
rm -rf "$W"
