#!/usr/bin/env python3
"""bench/multicore/loc.py: Table 4.5's shape (Kågström, Paper III): the
size and McCabe cyclomatic complexity of the application kernel (offload)
beside the executive on N CPUs in its two designs (giant and fine locks).

Tool: lizard (PyPI, `pip install lizard`), for both languages, so that C
and Rust are counted by one definition: NLOC is lines of code without
blanks and comments; a function's cyclomatic complexity (CCN) is 1 + its
decision points (if, for, while, each case or match arm after the
first, && and ||; in Rust also `?`, an early return, and `where`). pmccabe (Debian) reads only C: its traditional McCabe
total of the C files is printed beside lizard's as a cross-check.
rust-code-analysis-cli was the other candidate; lizard was chosen because
it is one pure-Python package that reads both languages with the same
counting rules (rust-code-analysis builds tree-sitter grammars for a
dozen languages, a long build on this shared 2-CPU machine).

What is counted (tests are not: a Rust file's `#[cfg(test)] mod tests`,
to the end of the file, is cut before counting):
  offload, C library     crates/offload/lib/offload.{c,h} (preloaded into
                         the application: the trap, the shared area, the
                         bootstrap thread)
  offload, Rust side     crates/offload/src/*.rs, crates/offload/build.rs,
                         crates/abi/src/offload.rs (the shared layout),
                         crates/cli/src/offload.rs (`mantle run --offload`)
  executive core         the serving loops of both paths and what they
                         share: crates/exec/src/executive.rs (protected),
                         fast.rs and fast/server.rs (fast path's server),
                         executor.rs, lockstat.rs; less the giant-only
                         functions below
  giant only             the functions that exist for the giant lock: each
                         path's `enter` (take the one lock on entry)
  fine only              none: in mantle the two designs are one code
                         path. The fine locks (run queue, guest, executive)
                         are taken in both designs, uncontended under the
                         giant lock, which is one lock more around them
                         (crate::lib's "Lock order"). So the giant executive
                         is the core plus `enter`, and the fine executive
                         is the core.
  (context) mantle-exec  every file of crates/exec/src and the fast path's
                         C stub (crates/exec/stub/stub.c, fast.h)

Usage: python3 bench/multicore/loc.py [--write]  (--write replaces the
"Table 4.5" section of bench/multicore/RESULTS.md with the table)
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

try:
    import lizard
except ImportError:
    sys.exit("loc.py: needs lizard (pip install lizard; bench/multicore/loc.sh installs it)")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GIANT_ONLY = {"enter"}


def files(patterns):
    out = []
    for p in patterns:
        out.extend(sorted(glob.glob(os.path.join(ROOT, p), recursive=True)))
    return out


def without_tests(path, tmp):
    """The file as counted: a Rust file without its test module."""
    if not path.endswith(".rs"):
        return path
    lines = open(path).read().split("\n")
    for i, l in enumerate(lines):
        if l.strip() == "#[cfg(test)]":
            nxt = next((x for x in lines[i + 1:] if x.strip()), "")
            if re.match(r"\s*(pub(\(crate\))?\s+)?mod tests\b", nxt):
                lines = lines[:i]
                break
    rel = os.path.relpath(path, ROOT).replace("/", "__")
    out = os.path.join(tmp, rel)
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    return out


def functions(paths, tmp):
    """(file, function, nloc, ccn) of every function, and each file's NLOC."""
    fns, nloc = [], 0
    for p in paths:
        fi = lizard.analyze_file(without_tests(p, tmp))
        nloc += fi.nloc
        rel = os.path.relpath(p, ROOT)
        for f in fi.function_list:
            fns.append((rel, f.name, f.nloc, f.cyclomatic_complexity))
    return fns, nloc


def pmccabe(paths):
    cs = [p for p in paths if p.endswith(".c")]
    if not cs or not shutil.which("pmccabe"):
        return None
    out = subprocess.run(["pmccabe"] + cs, capture_output=True, text=True).stdout
    return sum(int(l.split()[1]) for l in out.splitlines() if l.strip())


def row(name, paths, fns, nloc, pm=None):
    if paths is None:
        paths = sorted({f[0] for f in fns})
    ccn = sum(f[3] for f in fns)
    top = max(fns, key=lambda f: f[3]) if fns else None
    mean = ccn / len(fns) if fns else 0.0
    low = sum(1 for f in fns if f[3] < 10)
    return (f"| {name} | {len(paths)} | {nloc} | {len(fns)} | {ccn} | {mean:.2f} | "
            + (f"{100 * low / len(fns):.0f} %" if fns else "-") + " | "
            + (f"{top[3]} (`{top[1]}`, {top[0]})" if top else "-") + " | "
            + (str(pm) if pm is not None else "-") + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="mantle-loc-") as tmp:
        # site.h and sigemu.h are shared with the fast-path stub and compiled
        # into the offload library, so they count as the library's code.
        off_c = files(["crates/offload/lib/*.c", "crates/offload/lib/*.h",
                       "crates/exec/stub/site.h", "crates/exec/stub/sigemu.h"])
        off_rs = files(["crates/offload/src/*.rs", "crates/offload/build.rs",
                        "crates/abi/src/offload.rs", "crates/cli/src/offload.rs"])
        core = files(["crates/exec/src/executive.rs", "crates/exec/src/fast.rs",
                      "crates/exec/src/fast/server.rs", "crates/exec/src/executor.rs",
                      "crates/exec/src/lockstat.rs"])
        ctx = files(["crates/exec/src/**/*.rs", "crates/exec/stub/stub.c", "crates/exec/stub/*.h"])
        fc, nc = functions(off_c, tmp)
        fr, nr = functions(off_rs, tmp)
        fx, nx = functions(core, tmp)
        giant = [f for f in fx if f[1] in GIANT_ONLY]
        shared = [f for f in fx if f[1] not in GIANT_ONLY]
        ng = sum(f[2] for f in giant)
        fall, nall = functions(ctx, tmp)
        # the offload part against the executive's serving core (fine's
        # rows), in lines and in summed complexity
        r_loc = (nc + nr) / max(1, nx - ng)
        r_ccn = sum(f[3] for f in fc + fr) / max(1, sum(f[3] for f in shared))
        lines = [
            f"Table 4.5's shape at {commit} (`python3 bench/multicore/loc.py`; lizard "
            f"{lizard.version if hasattr(lizard, 'version') else ''}; tests not counted; "
            "NLOC: code lines without blanks and comments; CCN: McCabe cyclomatic complexity "
            "per function, summed; what each row holds: the script's docstring):",
            "",
            "| part | files | NLOC | functions | total CCN | mean CCN | functions with CCN < 10 | max CCN (function) | pmccabe total (C) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
            row("offload: C library", off_c, fc, nc, pmccabe(off_c)),
            row("offload: Rust side", off_rs, fr, nr),
            row("**offload (application kernel)**", off_c + off_rs, fc + fr, nc + nr, pmccabe(off_c)),
            row("executive core (both designs)", core, shared, nx - ng),
            row("giant only (`enter`)", None, giant, ng),
            row("fine only", [], [], 0),
            row("**giant executive** (core + giant only)", core, shared + giant, nx),
            row("**fine executive** (core)", core, shared, nx - ng),
            row("(context) all of mantle-exec + fast-path stub", ctx, fall, nall, pmccabe(ctx)),
            "",
            "The paper's Table 4.5 counts comment-free lines of its application kernel (2,400; "
            "Linux driver 360, libraries 920, bootstrap thread 260) and its Figure 4.8 shows "
            "most of its functions below a cyclomatic complexity of 10. Here the application "
            "kernel is one preloaded C library (its trap handler is also the bootstrap "
            f"side's dispatcher) and a thin Rust side: {r_loc:.2f}x the executive's serving "
            f"core in lines and {r_ccn:.2f}x in total complexity. The giant and fine executives are one code path "
            "(the docstring says why): the giant design costs one function per path, not a "
            "second executive; the designs differ at run time (nexec/RESULTS.md).",
        ]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.write:
        path = os.path.join(ROOT, "bench", "multicore", "RESULTS.md")
        body = open(path).read()
        head = "## Table 4.5: size and complexity\n\n"
        section = head + text
        m = re.search(r"^## Table 4\.5[^\n]*\n.*?(?=^## |\Z)", body, re.S | re.M)
        body = body[:m.start()] + section + "\n" + body[m.end():] if m else body.rstrip("\n") + "\n\n" + section
        with open(path, "w") as f:
            f.write(body)
        print(f"written into {os.path.relpath(path, ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
