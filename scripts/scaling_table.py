#!/usr/bin/env python3
"""The scaling table of scripts/gpu-multi.sh's part c from its log: scaling_table.py LOG STEPS.
Reads the warm request's JSON line of each degree ("warm tp N: {...}") and the rank's compute alone
("compute tp N: MS", the step benchmark's projection), prints a markdown table: step time, speed-up
and efficiency against tp 1, and the share of the step that is not the rank's own compute (the
all-reduces and waiting for the slowest rank)."""
import json
import re
import sys


def main():
    path, steps = sys.argv[1], int(sys.argv[2])
    rows, compute = {}, {}
    for line in open(path):
        line = line.strip()
        m = re.match(r"warm tp (\d+): (\{.*\})", line)
        if m:
            rows[int(m.group(1))] = json.loads(m.group(2))["timings"]
        m = re.match(r"compute tp (\d+): ([0-9.]+)", line)
        if m:
            compute[int(m.group(1))] = float(m.group(2))
    if 1 not in rows:
        print("no warm request at tp 1: no table")
        return
    base = rows[1]["denoise_seconds"] / steps
    print("| tp | request s | denoise s | ms a step | speed-up | efficiency | rank's compute alone | all-reduces + waiting |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for tp, t in sorted(rows.items()):
        step = t["denoise_seconds"] / steps
        c = compute.get(tp)
        alone = f"{c:.1f} ms" if c else "-"
        share = f"{100 * (1 - c / (step * 1e3)):.0f} %" if c else "-"
        print(f"| {tp} | {t['total_seconds']:.2f} | {t['denoise_seconds']:.2f} | {step * 1e3:.1f} | "
              f"{base / step:.2f}x | {100 * base / step / tp:.0f} % | {alone} | {share} |")


if __name__ == "__main__":
    main()
