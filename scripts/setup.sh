#!/usr/bin/env bash
# Installs what mantle needs to build and run on Debian (run as root):
# clang/LLVM and libbpf headers for the eBPF programs, bpftool (for
# MANTLE_VMLINUX=running and the benchmarks), libelf/zlib for libbpf, socat for the demo, and the tools the
# tests and benchmarks drive (tcpdump for tags_net, go for `go tool pprof` and graphviz for its -svg, strace
# and matplotlib for bench/executive; g++ for the instrumenter's C++ fixture, rt-tests
# (cyclictest) for bench/sleep; PostgreSQL for the tags test on a real server
# (crates/cli/tests/tags_postgres.rs makes its own throwaway cluster, on a
# unix socket in a scratch directory); Jaeger (built from Go modules) for the OpenTelemetry tests:
# the tests themselves install nothing). Rust comes from the machine's rustup
# toolchain (mantle needs Rust >= 1.87); Debian's own rustc is too old.
set -euo pipefail
need=()
for p in clang llvm libbpf-dev bpftool libelf-dev zlib1g-dev pkg-config make gcc socat \
         iproute2 util-linux procps python3 xz-utils sqlite3 tcpdump strace g++ rt-tests graphviz \
         libc6-dbg postgresql postgresql-client; do
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
# Jaeger v2 for the OpenTelemetry tests (crates/cli/tests/otel.rs, docs/otel.md):
# built once from the Go module proxy (a few minutes; about 120 MB), kept at
# /usr/local/lib/mantle/jaeger-1.76.0. Its build has no web UI (the UI's
# assets are not in the Go module); the tests use its query API. The UI,
# for docs/otel.md's picture only, is built from the jaeger-ui sources by
# bench/otel/jaeger-ui.sh (npm), which bench/otel/screenshot.sh runs.
jaeger=/usr/local/lib/mantle/jaeger-1.76.0
if [ ! -x "$jaeger" ]; then
  gobin=/usr/local/go/bin/go
  [ -x "$gobin" ] || gobin=$(command -v go)
  work=$(mktemp -d)
  echo "setup: building Jaeger v1.76.0 (the tests' OpenTelemetry backend) with $gobin"
  if (cd "$work" && "$gobin" mod init mantle-jaeger >/dev/null 2>&1 \
        && "$gobin" get -tool github.com/jaegertracing/jaeger/cmd/jaeger@v1.76.0 >/dev/null 2>&1 \
        && "$gobin" build -o jaeger github.com/jaegertracing/jaeger/cmd/jaeger); then
    mkdir -p /usr/local/lib/mantle && mv "$work/jaeger" "$jaeger"
  else
    echo "setup: could not build Jaeger: the tests that need it (ignored unless asked for) will fail, saying so"
  fi
  rm -rf "$work"
fi
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
echo "setup: ok ($(cargo --version))"
