#!/usr/bin/env bash
# Installs what mantle needs to build and run on Debian (run as root):
# clang/LLVM and libbpf headers for the eBPF programs, bpftool (for
# MANTLE_VMLINUX=running and the benchmarks), libelf/zlib for libbpf, socat for the demo, and the tools the
# tests and benchmarks drive (tcpdump for tags_net, go for `go tool pprof` and graphviz for its -svg, strace
# and matplotlib for bench/executive; g++ for the instrumenter's C++ fixture, rt-tests
# (cyclictest) for bench/sleep:
# the tests themselves install nothing). Rust comes from the machine's rustup
# toolchain (mantle needs Rust >= 1.87); Debian's own rustc is too old.
set -euo pipefail
need=()
for p in clang llvm libbpf-dev bpftool libelf-dev zlib1g-dev pkg-config make gcc socat \
         iproute2 util-linux procps python3 xz-utils sqlite3 tcpdump strace g++ rt-tests graphviz; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
# go: any install will do (the prof test also looks in /usr/local/go)
if ! command -v go >/dev/null 2>&1 && [ ! -x /usr/local/go/bin/go ]; then
  need+=(golang-go)
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
# matplotlib for the benchmarks' plots: Debian's package for Debian's
# python3, pip for another python3 first on PATH (pyenv)
if ! python3 -c 'import matplotlib' >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-matplotlib >/dev/null 2>&1 || true
  python3 -c 'import matplotlib' >/dev/null 2>&1 || python3 -m pip install --quiet matplotlib >/dev/null 2>&1 \
    || echo "setup: no matplotlib: benchmarks print their tables without plots"
fi
if ! command -v cargo >/dev/null 2>&1; then
  for d in "$HOME/.cargo/bin" /root/.cargo/bin /usr/local/cargo/bin; do
    [ -x "$d/cargo" ] && export PATH="$d:$PATH" && break
  done
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: no Rust toolchain found; installing Debian's (may be older than the 1.87 mantle needs)"
  apt-get install -y -qq cargo rustc >/dev/null
fi
# the lint gate (scripts/lint.sh) needs rustfmt and clippy
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  if command -v rustup >/dev/null 2>&1; then
    rustup component add rustfmt clippy >/dev/null
  else
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rustfmt rust-clippy >/dev/null
  fi
fi
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
echo "setup: ok ($(cargo --version))"
