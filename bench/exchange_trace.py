#!/usr/bin/env python3
"""Where an evaluation's time goes, from a KFORGE_EXCHANGE_TRACE file.

    KFORGE_EXCHANGE_TRACE=/tmp/x.jsonl kforge eval ...   (or kforge run ...)
    bench/exchange_trace.py /tmp/x.jsonl [--top 12]

Each evaluation begins at its "wait for the refill" line. Per evaluation: its
span from that line to its last exchange, the traced seconds, and the (group,
op, phase) entries with the most seconds, with their counts.
"""
import argparse
import collections
import json
import sys


def evaluations(lines):
    current = []
    for entry in lines:
        if entry.get("op") == "wait for the refill" and current:
            yield current
            current = []
        current.append(entry)
    if current:
        yield current


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    lines = []
    with open(args.trace) as f:
        for number, text in enumerate(f, 1):
            try:
                lines.append(json.loads(text))
            except json.JSONDecodeError as e:
                sys.exit(f"{args.trace}:{number}: not a JSON line ({e})")
    for n, ev in enumerate(evaluations(lines), 1):
        start = min(e["t_s"] for e in ev)
        end = max(e["t_s"] + e["s"] for e in ev)
        sums = collections.defaultdict(lambda: [0.0, 0])
        for e in ev:
            key = (e["group"], e["op"].split(" ")[0] if e["op"].startswith("drive") else e["op"],
                   e["phase"])
            sums[key][0] += e["s"]
            sums[key][1] += 1
        traced = sum(e["s"] for e in ev)
        print(f"evaluation {n}: span {end - start:.3f} s, {len(ev)} exchanges, {traced:.3f} s traced")
        for (group, op, phase), (sec, count) in sorted(sums.items(), key=lambda kv: -kv[1][0])[:args.top]:
            print(f"  {sec:7.3f} s  x{count:<4d} {group:12s} {op:28s} {phase}")


if __name__ == "__main__":
    main()
