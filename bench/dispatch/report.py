"""Summarises dispatch.c runs (bench/dispatch/run.sh): per mechanism,
dispatch latency and wake-up lateness over every round of every
repetition, with the spread of the repetition medians."""
import argparse
import collections
import os
import platform
import statistics as st

NEVER = 2**64 - 1


def pct(xs, q):
    return xs[min(len(xs) - 1, max(0, int(round(q / 100 * len(xs) + 0.5)) - 1))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cmd", default="")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    runs = collections.defaultdict(list)
    hdr = ""
    for f in a.files:
        rows = []
        for line in open(f):
            if line.startswith("#"):
                hdr = line[2:].strip()
                mech = hdr.split()[1]
                continue
            lat, late, leak = (int(x) for x in line.split())
            rows.append((lat, late, leak))
        runs[mech].append(rows)
    print(f"command: {a.cmd}")
    print(f"kernel: {platform.release()}; last run: {hdr}")
    print("executive SCHED_FIFO 99 and guests on one CPU; ns; rep medians: min..max over repetitions")
    print(f"{'mechanism':9s} {'what':22s} {'mean':>8s} {'median':>8s} {'p99':>8s} {'max':>8s} "
          f"{'rep medians':>17s} {'late':>5s} {'leaks':>5s}")
    for mech in ("prio", "nice", "freeze", "stop"):
        reps = runs.get(mech)
        if not reps:
            continue
        for what, k in (("dispatch latency", 0), ("wake-up lateness", 1)):
            allx = sorted(r[k] for rows in reps for r in rows if r[k] != NEVER)
            never = sum(1 for rows in reps for r in rows if r[k] == NEVER)
            meds = [st.median([r[k] for r in rows if r[k] != NEVER]) for rows in reps]
            leaks = sum(r[2] for rows in reps for r in rows) if k == 0 else 0
            print(f"{mech:9s} {what:22s} {st.mean(allx):8.0f} {st.median(allx):8.0f} "
                  f"{pct(allx, 99):8.0f} {allx[-1]:8.0f} {min(meds):8.0f}..{max(meds):<8.0f} "
                  f"{never if k == 0 else '':>5} {leaks if k == 0 else '':>5}")
    print("late: rounds where the chosen guest did not run within its quantum; "
          "leaks: rounds where the leaving guest ran on 20 us after the switch")


if __name__ == "__main__":
    main()
