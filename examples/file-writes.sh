#!/usr/bin/env bash
# mTags Example 2 / Figure 2: tracing file writes. A two-threaded client,
# each thread with its own tag (set per thread from outside with
# `mantle tag set --tid`), and a file server process. Only the thread that
# writes through the server gives the server its tag. Neither program knows
# about mantle. Run as root on Debian: bash examples/file-writes.sh
source "$(dirname "$0")/lib.sh"
prepare
kernel_lock

W=$(mktemp -d /tmp/mantle-file-writes.XXXXXX); chmod 755 "$W"
SRC=$ROOT/examples/file-writes
cc -O1 -Wall -o "$W/client" "$SRC/client.c" -lpthread
cc -O1 -Wall -o "$W/fileserver" "$SRC/fileserver.c"
mkdir -p "$W/files" "$W/state"

say "load mantle; one tag per client thread (t_a: tau_a, t_b: tau_b)"
mantle_up
tag_create tau_a --lifeline 256
tag_create tau_b --lifeline 256
"$M" tag ls

say "start the file server (t_c), a log reader, and the two-threaded client (all untagged)"
bg "$W/fileserver" "$W/fs.sock" "$W/files"
mkfifo "$W/log.fifo"
bg sh -c "exec cat '$W/log.fifo' > '$W/log.txt'"
bg "$W/client" "$W/fs.sock" "$W/log.fifo" "$W/state"
for _ in $(seq 500); do [ -e "$W/state/tids" ] && [ -S "$W/fs.sock" ] && break; sleep 0.01; done
read -r TA TB < "$W/state/tids"
echo "client pid ${_PIDS[2]}: thread writer (t_a) tid $TA, thread logger (t_b) tid $TB; file server pid ${_PIDS[0]}"

say "tag each thread on its own: mantle tag set tau_a --tid $TA; mantle tag set tau_b --tid $TB"
"$M" tag set tau_a --tid "$TA"
"$M" tag set tau_b --tid "$TB"
touch "$W/state/go"
for _ in $(seq 1000); do [ -e "$W/state/done" ] && break; sleep 0.01; done
[ -e "$W/state/done" ] || { echo "error: the client did not finish" >&2; exit 1; }
echo "the server stored: $(cd "$W/files" && ls | tr '\n' ' ')"

say "LOOK: mantle tag threads tau_a  (t_a and the file server t_c: t_a wrote through it)"
"$M" tag threads tau_a
say "LOOK: mantle tag threads tau_b  (t_b and the log reader only: the file server is not there)"
"$M" tag threads tau_b
say "who received tau_a, when, over which IPC (mantle tag lifeline tau_a)"
"$M" tag lifeline tau_a
say "mantle tag lifeline tau_b"
"$M" tag lifeline tau_b

# The check the example makes: the server holds tau_a and not tau_b.
FS=${_PIDS[0]}
A_JSON=$("$M" tag threads tau_a --json); B_JSON=$("$M" tag threads tau_b --json)
held() { local j; j=$(tr -d ' \n' <<<"$1"); [[ $j == *"\"tid\":$2,"* || $j == *"\"tid\":$2}"* ]]; }
if held "$A_JSON" "$FS" && held "$A_JSON" "$TA" && held "$B_JSON" "$TB" && ! held "$B_JSON" "$FS"; then
  echo; echo "OK: the file server (pid $FS) holds tau_a only: only thread t_a wrote files through it."
else
  echo; echo "UNEXPECTED: the file server's tags: $("$M" tag get --tid "$FS")" >&2; exit 1
fi
touch "$W/state/quit"
rm -rf "$W"
