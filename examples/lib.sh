# Sourced by the examples (bash). Gives them:
#   $ROOT $M        the repository and the mantle binary (built if missing)
#   $LIBDIR         where libmantle.so is (for cc -L/-rpath)
#   need PROG PKG   apt-get install PKG when PROG is missing
#   kernel_lock     take /run/mantle-kernel.lock for the rest of the script
#   mantle_up [--cluster FILE]   load the kernel side unless it is loaded;
#                   unloaded at exit only if this script loaded it
#   tag_create NAME [ARGS]       a tag of this script's, deleted at exit
#   own_tag NAME    a tag this script's programs create, deleted at exit
#   need_own_lib    the loaded kernel side must watch $LIBDIR/libmantle.so
#   netns_add NAME  a network namespace, deleted at exit (with what runs in it)
#   in_ns NAME CMD  run CMD in a namespace (nsenter, which keeps /sys/fs/bpf)
#   bg CMD...       start CMD in the background; killed at exit (by pid)
#   say TEXT        a heading
# Everything an example starts or creates is undone by the EXIT trap. The
# kernel side is machine-wide and may hold other users' tags: an example
# leaves one it did not load as it found it (loaded, their tags untouched).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
M=${MANTLE:-$ROOT/target/release/mantle}
LIBDIR=$(dirname "$M")
_PIDS=()
_NETNS=()
_TAGS=()
_LOADED=0

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

need() {
  command -v "$1" >/dev/null 2>&1 && return 0
  echo "installing $2 (for $1)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq "$2" >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq "$2" >/dev/null; }
  command -v "$1" >/dev/null 2>&1 || { echo "error: $1 still missing after apt-get install $2" >&2; exit 1; }
}

# Root, Debian tools, and a built mantle.
prepare() {
  [ "$(id -u)" = 0 ] || { echo "error: run as root (the examples load mantle's kernel side)" >&2; exit 1; }
  need cc gcc; need socat socat; need ip iproute2; need nsenter util-linux; need flock util-linux
  if [ ! -x "$M" ] || [ ! -e "$LIBDIR/libmantle.so" ]; then
    echo "building mantle (cargo build --release)"
    source "$ROOT/scripts/env.sh"
    bash "$ROOT/scripts/setup.sh"
    (cd "$ROOT" && cargo build --release --quiet)
  fi
  mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
}

# The kernel side is machine-wide: hold the lock for the whole example. If
# an ancestor already passed us a locked fd (flock LOCK cmd), reuse it.
kernel_lock() {
  local fd
  for fd in /proc/$$/fd/*; do
    if [ "$(readlink "$fd" 2>/dev/null)" = /run/mantle-kernel.lock ]; then
      flock -n "${fd##*/}" && return 0
    fi
  done
  # root's alone (0600): a lock anybody can open is one anybody can hold
  (umask 077; : >>/run/mantle-kernel.lock)
  exec 9>>/run/mantle-kernel.lock
  chmod 600 /run/mantle-kernel.lock
  if ! flock -n 9; then
    echo "waiting for /run/mantle-kernel.lock (someone else is using mantle's kernel side)"
    flock 9
  fi
}

mantle_up() {
  # (no `| grep -q`: under pipefail, grep's early exit kills mantle with
  # SIGPIPE and the pipeline fails although the text matched)
  if [[ $("$M" tags status) != "tags: loaded"* ]]; then
    "$M" tags up "$@" >/dev/null
    _LOADED=1
    return
  fi
  echo "mantle's kernel side is already loaded: using it as it is (it stays loaded)"
  if [ "${1:-}" = --cluster ]; then
    # A loaded kernel side takes no new global tags: it must have ours.
    local t
    for t in $(sed 's/#.*//' "$2" | awk 'NF { print $1 }'); do
      "$M" tag ls | awk -v t="$t" '$2 == t && $4 == "global" { f = 1 } END { exit !f }' || {
        echo "error: this example needs the global tag '$t' (cluster table $2), which the loaded" >&2
        echo "       kernel side lacks. If nobody else uses it, unload it (mantle tags down) and retry." >&2
        exit 1
      }
    done
  fi
}

# The self-operations of a program linked with $LIBDIR/libmantle.so reach
# the kernel side only if it watches that very file.
need_own_lib() {
  local ours watched
  ours=$(realpath "$LIBDIR/libmantle.so")
  watched=$(cat /run/mantle/tags.lib 2>/dev/null || true)
  [ "$_LOADED" = 1 ] || [ "$watched" = "$ours" ] || {
    echo "error: the loaded kernel side watches ${watched:-no} libmantle.so, not $ours, which this" >&2
    echo "       example's programs use. If nobody else uses it, unload it (mantle tags down) and retry." >&2
    exit 1
  }
}

tag_create() {
  "$M" tag create "$@" >/dev/null
  _TAGS+=("$1")
}

own_tag() {
  if "$M" tag ls | awk -v t="$1" '$2 == t { f = 1 } END { exit !f }'; then
    echo "error: a tag named $1 exists already (not this example's); this example makes and deletes its own" >&2
    exit 1
  fi
  _TAGS+=("$1")
}

netns_add() {
  ip netns add "$1"
  _NETNS+=("$1")
  ip -n "$1" link set lo up
}

in_ns() { local n=$1; shift; nsenter --net="/run/netns/$n" "$@"; }

bg() { "$@" & _PIDS+=($!); }

_cleanup() {
  local p n
  for p in "${_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for n in "${_NETNS[@]}"; do
    for p in $(ip netns pids "$n" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    ip netns del "$n" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  if [ "$_LOADED" = 1 ]; then
    "$M" tags down >/dev/null 2>&1 || true
  else
    for n in "${_TAGS[@]}"; do "$M" tag delete "$n" >/dev/null 2>&1 || true; done
  fi
}
trap _cleanup EXIT
trap 'exit 130' INT TERM
