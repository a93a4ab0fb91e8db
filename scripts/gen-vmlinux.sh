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
#   BTF      where the kernel's BTF is: /sys/kernel/btf/vmlinux (the
#            default: the running kernel), a vmlinux ELF with a .BTF
#            section, raw BTF, or an uncompressed kernel image (such as
#            arm64's Image, which distributions ship as vmlinuz and which is
#            not ELF): the BTF blob is then cut out of the image, found by
#            its header (magic 0xeb9f, version 1, header length 24).
#   RELEASE  the release of the kernel that BTF came from, recorded in the
#            header's first line; default: uname -r (right only for the
#            running kernel).
#
# Writes crates/bpf-build/vmlinux/ARCH/vmlinux.h. Needs bpftool (and
# python3 for a kernel image).
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
blob=$(mktemp)
trap 'rm -f "$tmp" "$blob"' EXIT
src=$btf
magic=$(head -c 4 "$btf" | od -An -tx1 | tr -d ' \n')
case "$magic" in
7f454c46 | 9feb01*) ;; # ELF, or raw BTF: bpftool reads either
*)
	# A kernel image: the .BTF contents sit in it unchanged. The header
	# gives the blob's length (hdr_len + the larger end of the type and
	# string sections); a BTF header appears once in a vmlinux.
	python3 - "$btf" "$blob" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
at = data.find(b"\x9f\xeb\x01\x00\x18\x00\x00\x00")
if at < 0:
    sys.exit(f"gen-vmlinux.sh: no BTF header in {sys.argv[1]}")
_, _, _, hdr, toff, tlen, soff, slen = struct.unpack_from("<HBBIIIII", data, at)
open(sys.argv[2], "wb").write(data[at:at + hdr + max(toff + tlen, soff + slen)])
PY
	src=$blob
	;;
esac
{
	echo "/* vmlinux.h for $arch: bpftool btf dump of Linux $release ($(case "$btf" in /sys/*) echo "$btf" ;; *) basename "$btf" ;; esac)), $(date -u +%Y-%m-%d), by scripts/gen-vmlinux.sh. Generated: do not edit. */"
	bpftool btf dump file "$src" format c
} >"$tmp"
chmod 644 "$tmp"
mv "$tmp" "$dir/vmlinux.h"
rm -f "$blob"
trap - EXIT
echo "wrote $dir/vmlinux.h ($(wc -c <"$dir/vmlinux.h") bytes, Linux $release)"
