"""Summarises bench/run_spread.sh: one Google Benchmark JSON file per run,
each holding the median of 3 repetitions per case. Prints a Markdown table:
min / median / max of the per-run medians (ms), max/min, and the 1 -> 2
thread speedup of the medians. Standard library only."""
import json
import re
import statistics
import sys
from collections import defaultdict


def main(paths):
    runs = defaultdict(list)  # (case, threads) -> [median ms per run]
    for p in paths:
        for b in json.load(open(p))["benchmarks"]:
            if b.get("aggregate_name") != "median":
                continue
            m = re.match(r"(.*)/threads:(\d+)/", b["run_name"])
            if m and "ms" in b:
                runs[(m.group(1), int(m.group(2)))].append(b["ms"])
    print(f"{len(paths)} runs; per run the median of 3 repetitions (ms)\n")
    print("| case | threads | min | median | max | max/min | 1->2 thr speedup |")
    print("|---|---|---|---|---|---|---|")
    for (case, t), xs in sorted(runs.items()):
        med = statistics.median(xs)
        one = runs.get((case, 1))
        speedup = ""
        if t == 2 and one:
            speedup = f"{statistics.median(one) / med:.2f}x"
        print(f"| {case} | {t} | {min(xs):.2f} | {med:.2f} | {max(xs):.2f} | "
              f"{max(xs) / min(xs):.2f} | {speedup} |")


if __name__ == "__main__":
    main(sys.argv[1:])
