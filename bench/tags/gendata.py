#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""Deterministic input data for the whole-program cases of bench/tags.

    gendata.py text OUT MIB [SEED]   pseudo-English text, MIB MiB, one
                                     "sentence" per line (gzip/xz/sort input)

The text is made from a fixed seed only (no files of this machine), so every
machine and every run gets the same bytes: a vocabulary of 20 000 made-up
words drawn with Zipf-like frequencies, lines of 4-24 words with a number now
and then. It compresses like prose (gzip -6: about 3x), and its lines are
distinct enough for sort to do real work. Writes OUT.tmp, then renames.
"""
import os
import random
import sys


def vocabulary(rng, n):
    onsets = ["", "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v",
              "w", "br", "ch", "cl", "dr", "fl", "gr", "pl", "pr", "sh", "sl", "st", "th", "tr"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ea", "ee", "io", "ou", "y"]
    codas = ["", "", "n", "r", "s", "t", "l", "m", "nd", "ng", "st", "ck", "rt", "sh"]
    words = set()
    while len(words) < n:
        syl = rng.choice((1, 1, 2, 2, 2, 3, 3, 4))
        w = "".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas) for _ in range(syl))
        words.add(w)
    words = sorted(words)
    rng.shuffle(words)
    return words


def text(out, mib, seed):
    rng = random.Random(seed)
    words = vocabulary(rng, 20000)
    # Zipf-like: weight 1/(rank+2.7)
    cum, acc = [], 0.0
    for r in range(len(words)):
        acc += 1.0 / (r + 2.7)
        cum.append(acc)
    target = mib << 20
    done = 0
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="ascii") as f:
        buf = []
        blen = 0
        while done < target:
            k = rng.randint(4, 24)
            ws = rng.choices(words, cum_weights=cum, k=k)
            if rng.random() < 0.3:
                ws.insert(rng.randrange(k), str(rng.randrange(100000)))
            ws[0] = ws[0].capitalize()
            line = " ".join(ws) + ".\n"
            buf.append(line)
            blen += len(line)
            if blen >= 1 << 20:
                s = "".join(buf)
                s = s[: target - done] if done + len(s) > target else s
                f.write(s)
                done += len(s)
                buf, blen = [], 0
        # (the loop only exits after a full flush reached the target)
    os.replace(tmp, out)


def main():
    if len(sys.argv) < 4 or sys.argv[1] != "text":
        sys.stderr.write(__doc__)
        return 2
    out, mib = sys.argv[2], int(sys.argv[3])
    seed = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    text(out, mib, seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
