#!/usr/bin/env bash
# mTags Figure 6 / section 5.3: a circular wait among three synchronous
# services, caught with a deadlock tag and no change to the services.
# Each service (deadlock/ring.py, unmodified Python, knows nothing of mantle)
# answers a request only after its own call to the next one is answered:
# A calls B, B calls C, and C calls A, which is still waiting for B.
#   1. unguarded: the three hang (shown for 2 s, then killed);
#   2. `mantle tag deadlock-guard --pid A`: C's TCP connect back to A is
#      refused with EDEADLK (a deny point exists on one host), the ring
#      unwinds with an error instead of hanging, and the guard prints the
#      participants in the order they were called;
#   3. B on another host (a network namespace over veth, as t_b in the
#      paper): the chain's tag crosses in TCP options (a global deadlock tag
#      from the cluster table) and C's connect back to A is refused again.
# Run as root on Debian: bash examples/deadlock.sh
source "$(dirname "$0")/lib.sh"
prepare
need python3 python3
kernel_lock
RING=$ROOT/examples/deadlock/ring.py
W=$(mktemp -d /tmp/mantle-deadlock.XXXXXX)

ring() {  # BASE A_ADDR B_ADDR C_ADDR [B_NETNS]: start C, B, then A (waits for "go" on its stdin)
  local base=$1 a=$2 b=$3 c=$4 bns=${5:-}
  bg python3 "$RING" $((base + 2)) "$a" "$base" > "$W/C.out"
  if [ -n "$bns" ]; then
    bg in_ns "$bns" python3 "$RING" $((base + 1)) "$c" $((base + 2)) > "$W/B.out"
  else
    bg python3 "$RING" $((base + 1)) "$c" $((base + 2)) > "$W/B.out"
  fi
  rm -f "$W/go"; mkfifo "$W/go"
  python3 "$RING" "$base" "$b" $((base + 1)) --start < "$W/go" > "$W/A.out" & A=$!; _PIDS+=("$A")
  exec 8>"$W/go"
  for f in A B C; do for _ in $(seq 300); do grep -q listening "$W/$f.out" 2>/dev/null && break; sleep 0.02; done; done
}
go() { echo go >&8; exec 8>&-; }
show() { for f in A B C; do sed "s/^/    $f: /" "$W/$f.out"; done; }
guarded() {  # TAG [GUARD ARGS]: guard A with TAG, let the ring go, show the report
  local tag=$1; shift
  "$M" tag deadlock-guard --pid "$A" "$@" --count 1 --timeout 10s > "$W/guard.out" 2>/dev/null & G=$!
  for _ in $(seq 300); do "$M" tag get --tid "$A" | grep -qw -- "$tag" && break; sleep 0.02; done
  go; wait "$G" || true; sleep 0.3
  sed 's/^/    /' "$W/guard.out"; show
}
stop_ring() { kill "${_PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true; _PIDS=(); }

CL=$W/cluster
printf '# deadlock example: one global deadlock tag\ndl deadlock\n' > "$CL"
mantle_up --cluster "$CL"

say "1. unguarded: A -> B -> C -> A on 127.0.0.1"
ring 7300 127.0.0.1 127.0.0.1 127.0.0.1
go; sleep 2; show
echo "LOOK: 2 s later nobody was answered: A waits for B, B for C, C for A."
stop_ring

say "2. the same ring, with: mantle tag deadlock-guard --pid A"
ring 7310 127.0.0.1 127.0.0.1 127.0.0.1
guarded "deadlock.$A"
echo "LOOK: the guard named A, B, C in call order; C's connect to A got EDEADLK"
echo "      (Errno 35), so C answered B with an error and the ring unwound."
stop_ring

say "3. B on another host (network namespace mtdl-b, veth 10.79.0.1 <-> 10.79.0.2)"
netns_add mtdl-b
ip link add mtdl0 type veth peer name mtdl1 netns mtdl-b
ip addr add 10.79.0.1/24 dev mtdl0; ip link set mtdl0 up
ip -n mtdl-b addr add 10.79.0.2/24 dev mtdl1; ip -n mtdl-b link set mtdl1 up
ring 7320 10.79.0.1 10.79.0.2 10.79.0.1 mtdl-b
guarded dl --name dl
echo "LOOK: B (on mtdl-b) got the global tag 'dl' in a TCP option and passed it on"
echo "      to C; C's connect back to A on this host was refused the same way."
stop_ring
ip link del mtdl0 2>/dev/null || true
rm -rf "$W"
