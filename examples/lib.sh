# Sourced by the examples (bash). Gives them:
#   $ROOT $M        the repository and the mantle binary (built if missing)
#   $LIBDIR         where libmantle.so is (for cc -L/-rpath)
#   need PROG PKG   apt-get install PKG when PROG is missing
#   kernel_lock     take /run/mantle-kernel.lock for the rest of the script
#   mantle_up [--cluster FILE]   (re)load the kernel side; unloaded at exit
#   netns_add NAME  a network namespace, deleted at exit (with what runs in it)
#   in_ns NAME CMD  run CMD in a namespace (nsenter, which keeps /sys/fs/bpf)
#   bg CMD...       start CMD in the background; killed at exit (by pid)
#   say TEXT        a heading
# Everything an example starts or creates is undone by the EXIT trap.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
M=${MANTLE:-$ROOT/target/release/mantle}
LIBDIR=$(dirname "$M")
_PIDS=()
_NETNS=()
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
  exec 9>>/run/mantle-kernel.lock
  if ! flock -n 9; then
    echo "waiting for /run/mantle-kernel.lock (someone else is using mantle's kernel side)"
    flock 9
  fi
}

mantle_up() {
  "$M" tags down >/dev/null 2>&1 || true
  "$M" tags up "$@" >/dev/null
  _LOADED=1
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
  [ "$_LOADED" = 1 ] && "$M" tags down >/dev/null 2>&1 || true
}
trap _cleanup EXIT
trap 'exit 130' INT TERM
