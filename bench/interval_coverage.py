#!/usr/bin/env python3
"""How often a speedup's 95% interval holds the truth: the reference timed
against itself (true speedup 1), from KFORGE_TIMING_TRACE files.

    for i in $(seq 1 12); do
      KFORGE_TIMING_TRACE=/tmp/cov/spread-$i.jsonl kforge eval --task 001 \\
        --kernel tasks/001_allreduce/reference.cu --trusted --world 2 --json /tmp/cov/$i.json
    done
    bench/interval_coverage.py /tmp/cov

Per evaluation and bench size: the speedup (baseline median over candidate
median, every rank's slowest claim per call), its interval from the calls
alone (order statistics, as before blocks counted) and from the blocks
(kforge::BlockedMedianInterval: each side's interval widened to the median
-/+ t(k-1) sd(block medians)/sqrt(k)), both sides at their unfavourable
ends; then how many of each held 1.0, and the speedups' spread. The probe
(3 calls) is left out, as the evaluator leaves it out of a side; `kforge
eval` times its own baseline, so there is no confirmation block to leave out.

--blocks K keeps only the first K timed blocks of each phase of a side (the
reference before the candidate, the candidate, the reference after), as a
shorter timing cap would have stopped them: what the intervals and the spread
would have been at a fraction of the time. --side candidate truncates the
candidate's phase alone (a shorter cap for the candidate, the baseline, which
later evaluations reuse, timed in full).
"""
import argparse
import glob
import math
import os
import statistics

T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def t975(dof):
    return T975[dof - 1] if dof <= len(T975) else 1.96 + 2.4 / dof


def median_interval(v):
    v = sorted(v)
    n = len(v)
    half = 1.96 * math.sqrt(n) / 2
    r = max(1, math.floor((n + 1) / 2 - half))
    s = min(n, math.ceil((n + 1) / 2 + half))
    return v[r - 1], v[s - 1]


def blocked_interval(blocks):
    calls = [x for b in blocks for x in b]
    lo, hi = median_interval(calls)
    k = len(blocks)
    if k >= 2:
        meds = [statistics.median(b) for b in blocks]
        half = t975(k - 1) * statistics.stdev(meds) / math.sqrt(k)
        m = statistics.median(calls)
        lo, hi = min(lo, m - half), max(hi, m + half)
    return lo, hi


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="a folder of KFORGE_TIMING_TRACE files (*.jsonl)")
    ap.add_argument("--blocks", type=int, default=0,
                    help="keep the first K timed blocks of each phase of each side (0: all)")
    ap.add_argument("--side", choices=["both", "candidate"], default="both",
                    help="the sides --blocks truncates (default both)")
    args = ap.parse_args()
    import json
    held = {"calls": 0, "blocks": 0}
    entries = 0
    speedups = {}
    for path in sorted(glob.glob(os.path.join(args.dir, "*.jsonl"))):
        rows = [json.loads(line) for line in open(path)]
        for size in sorted({r["size"] for r in rows}):
            sides = {"reference": [], "candidate": []}
            phase, kept = None, 0
            for r in rows:
                if r["size"] != size or r["side"] not in sides:
                    continue
                calls = [max(c) for c in zip(*r["claimed_us"])]
                if len(calls) <= 3:  # the probe
                    continue
                if r["side"] != phase:
                    phase, kept = r["side"], 0
                kept += 1
                truncated = args.side == "both" or r["side"] == args.side
                if args.blocks <= 0 or kept <= args.blocks or not truncated:
                    sides[r["side"]].append(calls)
            if not sides["reference"] or not sides["candidate"]:
                continue
            b = [x for blk in sides["reference"] for x in blk]
            c = [x for blk in sides["candidate"] for x in blk]
            sp = statistics.median(b) / statistics.median(c)
            (bl, bh), (cl, ch) = median_interval(b), median_interval(c)
            (Bl, Bh), (Cl, Ch) = blocked_interval(sides["reference"]), blocked_interval(sides["candidate"])
            plain, blocked = (bl / ch, bh / cl), (Bl / Ch, Bh / Cl)
            entries += 1
            held["calls"] += plain[0] <= 1 <= plain[1]
            held["blocks"] += blocked[0] <= 1 <= blocked[1]
            speedups.setdefault(size, []).append(sp)
            print(f"{os.path.basename(path)} {size:>8} speedup {sp:.3f}  calls [{plain[0]:.3f}, "
                  f"{plain[1]:.3f}]  blocks [{blocked[0]:.3f}, {blocked[1]:.3f}] "
                  f"({len(sides['reference'])} and {len(sides['candidate'])} blocks)")
    print(f"1.0 held by the calls' interval in {held['calls']} of {entries}, by the blocked one in "
          f"{held['blocks']} of {entries}")
    for size, v in speedups.items():
        sd = statistics.stdev(v) if len(v) > 1 else 0
        within = sum(abs(x - 1) <= 0.02 for x in v)
        print(f"{size}: mean {statistics.mean(v):.3f} sd {sd:.3f} range {min(v):.3f}-{max(v):.3f}, "
              f"within +-0.02 in {within} of {len(v)}")


if __name__ == "__main__":
    main()
