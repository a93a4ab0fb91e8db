#!/usr/bin/env bash
# Generates the checked-in vmlinux.h of one architecture, which every BPF
# build of mantle compiles against (crates/bpf-build): all the kernel's
# types, dumped as C by bpftool from a kernel's BTF. Run it once per
# architecture, and again only when the C needs a type or field that the
# header's kernel lacks; CO-RE relocations adapt the objects to the kernel
# they are loaded on, so the header need not match the machine.
#
#   scripts/gen-vmlinux.sh [ARCH [BTF [RELEASE]]]
#
#   ARCH     Rust's name of the architecture (CARGO_CFG_TARGET_ARCH:
#            x86_64, aarch64, ...); default: this machine's (uname -m).
#   BTF      a file bpftool reads BTF from: /sys/kernel/btf/vmlinux (the
#            default: the running kernel), a vmlinux ELF with a .BTF
#            section, or raw BTF.
#   RELEASE  the release of the kernel that BTF came from, recorded in the
#            header's first line; default: uname -r (right only for the
#            running kernel).
#
# Writes crates/bpf-build/vmlinux/ARCH/vmlinux.h. Needs bpftool.
set -euo pipefail
cd "$(dirname "$0")/.."

arch=${1:-$(uname -m)}
btf=${2:-/sys/kernel/btf/vmlinux}
release=${3:-$(uname -r)}
case "$arch" in
x86_64 | aarch64 | riscv64 | s390x | powerpc64 | loongarch64) ;;
*) echo "gen-vmlinux.sh: unexpected architecture '$arch' (use Rust's names: x86_64, aarch64, ...)" >&2; exit 2 ;;
esac
if [ "$btf" != /sys/kernel/btf/vmlinux ] && [ $# -lt 3 ]; then
	echo "gen-vmlinux.sh: give the kernel release of $btf as the third argument" >&2
	exit 2
fi

dir=crates/bpf-build/vmlinux/$arch
mkdir -p "$dir"
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
{
	echo "/* vmlinux.h for $arch: bpftool btf dump of Linux $release ($btf), $(date -u +%Y-%m-%d), by scripts/gen-vmlinux.sh. Generated: do not edit. */"
	bpftool btf dump file "$btf" format c
} >"$tmp"
chmod 644 "$tmp"
mv "$tmp" "$dir/vmlinux.h"
trap - EXIT
echo "wrote $dir/vmlinux.h ($(wc -c <"$dir/vmlinux.h") bytes, Linux $release)"
