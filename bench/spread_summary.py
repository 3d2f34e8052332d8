"""Summarises bench/run_spread.sh: one Google Benchmark JSON file per run,
each holding the median of 3 repetitions per case. Prints a Markdown table:
min / median / max of the per-run medians (ms), max/min, and the 1 -> 2
thread speedup of the medians; where the runs report them, the median
share of the pool's threads left idle in the kernel's parallel loops
(par_idle_pct, Halide kernels), the most CPU time the hypervisor stole
in one run (steal_pct), and the range of the FMA rate measured right after
each run's case against the peak at its start (fma_now_pct). Standard
library only."""
import json
import re
import statistics
import sys
from collections import defaultdict


def main(paths):
    runs = defaultdict(list)  # (case, threads) -> [median ms per run]
    idle = defaultdict(list)  # (case, threads) -> [par_idle_pct per run]
    steal = defaultdict(list)  # (case, threads) -> [steal_pct per run]
    fma_now = defaultdict(list)  # (case, threads) -> [fma_now_pct per run]
    for p in paths:
        for b in json.load(open(p))["benchmarks"]:
            if b.get("aggregate_name") != "median":
                continue
            m = re.match(r"(.*)/threads:(\d+)/", b["run_name"])
            if m and "ms" in b:
                key = (m.group(1), int(m.group(2)))
                runs[key].append(b["ms"])
                if "par_idle_pct" in b:
                    idle[key].append(b["par_idle_pct"])
                if "steal_pct" in b:
                    steal[key].append(b["steal_pct"])
                if "fma_now_pct" in b:
                    fma_now[key].append(b["fma_now_pct"])
    print(f"{len(paths)} runs; per run the median of 3 repetitions (ms)\n")
    print("| case | threads | min | median | max | max/min | 1->2 thr speedup "
          "| idle % (median) | steal % (max) | FMA now % (min-max) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (case, t), xs in sorted(runs.items()):
        med = statistics.median(xs)
        one = runs.get((case, 1))
        speedup = ""
        if t == 2 and one:
            speedup = f"{statistics.median(one) / med:.2f}x"
        idle_col = f"{statistics.median(idle[(case, t)]):.2f}" \
            if idle[(case, t)] else ""
        steal_col = f"{max(steal[(case, t)]):.2f}" if steal[(case, t)] else ""
        now = fma_now[(case, t)]
        now_col = f"{min(now):.0f}-{max(now):.0f}" if now else ""
        print(f"| {case} | {t} | {min(xs):.2f} | {med:.2f} | {max(xs):.2f} | "
              f"{max(xs) / min(xs):.2f} | {speedup} | {idle_col} | "
              f"{steal_col} | {now_col} |")


if __name__ == "__main__":
    main(sys.argv[1:])
