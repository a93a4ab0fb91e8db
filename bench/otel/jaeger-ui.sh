#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# bench/otel/jaeger-ui.sh: builds Jaeger's web UI (the jaeger-ui project,
# tag v1.76.0, the UI of Jaeger v1.76.0 / v2.13) from its sources into
# /usr/local/lib/mantle/jaeger-ui-1.76.0, for bench/otel/screenshot.sh.
#
#   bash bench/otel/jaeger-ui.sh SRC        (as root)
#
# Why a build: the Jaeger that scripts/setup.sh builds from the Go module
# proxy has no UI (its Go module embeds a placeholder page; the real assets
# are built from the jaeger-ui repository's npm project and shipped only in
# Jaeger's release archives and images). Jaeger's query extension serves a
# UI from a directory instead (`jaeger_query: ui: assets_path:`), so this
# builds one.
#
# SRC is a clone of the jaeger-ui repository (a bare one will do: the tag
# is read with `git archive`), or a directory holding its sources at
# v1.76.0. The registry's packages come through npm, exactly as the
# project's package-lock.json pins them (`npm ci`); then `npm run build`
# (plexus, then vite) makes packages/jaeger-ui/build. Node: the project
# asks for >= 24 (engine-strict); its v1.76.0 builds with the 20.x that
# Debian's nodesource package gives here, so the engine check is turned off
# (--engine-strict=false) and the build's result is checked instead
# (index.html and its script bundle must be there).
#
# About 1 GB of node_modules in a temporary directory, removed at the end;
# the result is 8.7 MB. Time: npm ci took 2.5 min and the vite build 20 min
# (1 min 44 s of CPU) on this 2-CPU VM at a load average of 20 to 38:
# minutes on an idle machine.
set -euo pipefail
TAG=v1.76.0
DEST=${MANTLE_JAEGER_UI:-/usr/local/lib/mantle/jaeger-ui-1.76.0}
[[ $# == 1 ]] || { echo "usage: $0 SRC (a jaeger-ui clone, bare or not, or its sources at $TAG)" >&2; exit 2; }
SRC=$1
command -v npm >/dev/null || {
	echo "jaeger-ui.sh: installing nodejs and npm"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
}
WORK=$(mktemp -d /tmp/mantle-jaeger-ui.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
if git --git-dir="$SRC" rev-parse --verify -q "$TAG^{commit}" >/dev/null 2>&1; then
	git --git-dir="$SRC" archive "$TAG" | tar -x -C "$WORK"
elif git -C "$SRC" rev-parse --verify -q "$TAG^{commit}" >/dev/null 2>&1; then
	git -C "$SRC" archive "$TAG" | tar -x -C "$WORK"
elif [[ -f $SRC/packages/jaeger-ui/package.json ]]; then
	cp -a "$SRC/." "$WORK/"
else
	echo "jaeger-ui.sh: $SRC is neither a jaeger-ui clone with the tag $TAG nor its sources" >&2
	exit 1
fi
grep -q '"version": "1.76.0"' "$WORK/packages/jaeger-ui/package.json" ||
	echo "jaeger-ui.sh: warning: $SRC is not jaeger-ui 1.76.0; building it anyway" >&2
cd "$WORK"
echo "jaeger-ui.sh: npm ci (node $(node --version))"
# a time limit: one npm ci here hung after extracting every package (no
# child process, 38 min in a futex wait) where the same command had taken
# 2.5 min before
timeout -k 10s 30m npm ci --engine-strict=false --no-audit --no-fund --loglevel=error \
	</dev/null >"$WORK/npm-ci.log" 2>&1 ||
	{ tail -30 "$WORK/npm-ci.log" >&2; exit 1; }
echo "jaeger-ui.sh: npm run build"
(cd packages/jaeger-ui && timeout -k 10s 60m npm run build </dev/null) >"$WORK/build.log" 2>&1 ||
	{ tail -30 "$WORK/build.log" >&2; exit 1; }
OUT=$WORK/packages/jaeger-ui/build
[[ -f $OUT/index.html ]] && ls "$OUT"/static/*.js >/dev/null 2>&1 ||
	{ echo "jaeger-ui.sh: the build made no index.html and script bundle in $OUT" >&2; exit 1; }
mkdir -p "$(dirname "$DEST")"
rm -rf "$DEST.new"
cp -a "$OUT" "$DEST.new"
rm -rf "$DEST"
mv "$DEST.new" "$DEST"
echo "jaeger-ui.sh: the UI is in $DEST ($(du -sh "$DEST" | cut -f1))"
