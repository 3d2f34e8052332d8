#!/usr/bin/env python3
"""Writes bench/RESULTS.md from the raw results under bench/results/<class>/.

Each machine class has a folder holding the files its table comes from:
the newest `YYYYMMDD-HHMMSS.json` (bench/run_benchmarks.sh: Google
Benchmark output with the machine peaks, mhagen on both backends, oneDNN
and OpenBLAS) and the newest `*-peers.jsonl` (bench/run_peers.sh: torch
SDPA and OpenVINO, run right after). `class.txt` names the class and the
machine in one line. Nothing else is read, so a table always says which
files it comes from.

    python3 bench/make_results.py            # rewrite bench/RESULTS.md
    python3 bench/make_results.py --check    # fail if it is out of date
"""
import glob
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
OUT = os.path.join(HERE, "RESULTS.md")
THREADS = 2

# (row label, benchmark family, peers' shape, peers' dtype)
ROWS = [
    ("S1 f32", "S1_f32", "S1", "f32"),
    ("S2 f32", "S2_f32", "S2", "f32"),
    ("S3 f32", "S3_f32", "S3", "f32"),
    ("S1 bf16", "S1_bf16", "S1", "bf16"),
    ("S2 bf16", "S2_bf16", "S2", "bf16"),
    ("S3 bf16", "S3_bf16", "S3", "bf16"),
    ("Decode f32", "Decode_f32", "Decode", "f32"),
    ("Decode, K/V bf16", "Decode_f32_kvbf16", None, None),
    ("Decode, K/V i8", "Decode_f32_kvi8", None, None),
    ("Decode, cold K/V", "DecodeCold_f32", None, None),
    ("SpecDecode f32", "SpecDecode_f32", "SpecDecode", "f32"),
    ("Layer f32", "Layer_f32", None, None),
]
# (column, benchmark implementation names tried in order)
BENCH_COLUMNS = [
    ("mhagen Halide", ["mhagen", "mhagen_fused"]),
    ("mhagen MLIR", ["mhagen_mlir"]),
    ("oneDNN unfused", ["onednn_unfused"]),
    ("OpenBLAS unfused", ["openblas_unfused"]),
]
PEER_COLUMNS = [
    ("torch SDPA", "torch_sdpa"),
    ("OpenVINO SDPA", "openvino_sdpa"),
]


def newest(pattern):
    files = sorted(glob.glob(pattern))
    return files[-1] if files else None


def bench_medians(path):
    """{(family, impl): (median ms, % of peak or None)}, and the peaks.

    A bf16 case's % is of the fastest bf16 unit (pct_bf16_peak; none in
    files from before it), an f32 case's of the FMA peak."""
    with open(path) as f:
        data = json.load(f)
    out, peaks = {}, {}
    for b in data["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        parts = b["name"].split("/")
        m = re.match(r"threads:(\d+)", parts[2]) if len(parts) > 2 else None
        if not m or int(m.group(1)) != THREADS:
            continue
        family, impl = parts[0], parts[1]
        if family == "Peak":
            peaks[impl] = b.get("gflops") or b.get("gbs") or b.get("gbps")
            continue
        ms = b.get("ms")
        if ms is None:  # older files: the manual time in the time unit
            scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
            ms = b["real_time"] * scale[b.get("time_unit", "ns")]
        pct = b.get("pct_bf16_peak" if "bf16" in family else "pct_fma_peak")
        out[(family, impl)] = (ms, pct)
    return out, peaks


def peer_medians(path):
    out = {}
    if not path:
        return out
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("threads") == THREADS:
                out[(r["peer"], r["shape"], r["dtype"])] = r["median_ms"]
    return out


def fmt(ms):
    if ms is None:
        return ""
    return f"{ms:.3g}" if ms < 100 else f"{ms:.0f}"


def class_table(folder):
    name = open(os.path.join(folder, "class.txt")).read().strip()
    bench = newest(os.path.join(folder, "[0-9]" * 8 + "-" + "[0-9]" * 6 +
                                ".json"))
    peers = newest(os.path.join(folder, "*-peers.jsonl"))
    if not bench:
        return []
    medians, peaks = bench_medians(bench)
    pm = peer_medians(peers)
    rel = lambda p: os.path.relpath(p, HERE) if p else None
    lines = [f"## {name}", ""]
    sources = [f"`{rel(bench)}`"] + ([f"`{rel(peers)}`"] if peers else [])
    lines.append(f"Raw: {', '.join(sources)}. Two threads, median ms per "
                 "call; the fastest in bold.")
    if peaks:
        bits = []
        if peaks.get("fma_f32"):
            bits.append(f"f32 FMA {peaks['fma_f32']:.0f} GFLOP/s")
        if peaks.get("dpbf16"):
            bits.append(f"`vdpbf16ps` {peaks['dpbf16']:.0f} GFLOP/s")
        if peaks.get("amx_bf16"):
            bits.append(f"AMX `tdpbf16ps` {peaks['amx_bf16']:.0f} GFLOP/s")
        if peaks.get("triad"):
            bits.append(f"triad {peaks['triad']:.1f} GB/s")
        lines.append("Peaks in the same run: " + ", ".join(bits) + ".")
    lines.append("")
    lines.append("% of peak: f32 rows of the FMA peak, bf16 rows of the "
                 "fastest unit that takes bf16 (AMX, `vdpbf16ps` or FMA).")
    lines.append("")
    cols = ["shape", "mhagen Halide", "% of peak"] + \
        [c for c, _ in BENCH_COLUMNS[1:]] + [c for c, _ in PEER_COLUMNS]
    lines.append("| " + " | ".join(cols) + " |")
    lines.append("|" + "---|" * len(cols))
    for label, family, pshape, pdtype in ROWS:
        cells = []
        for _, impls in BENCH_COLUMNS:
            v = next((medians[(family, i)] for i in impls
                      if (family, i) in medians), None)
            cells.append(v)
        peer_cells = [pm.get((p, pshape, pdtype)) if pshape else None
                      for _, p in PEER_COLUMNS]
        times = [c[0] for c in cells if c] + [p for p in peer_cells if p]
        if not cells[0]:
            continue
        best = min(times)
        show = lambda ms: (f"**{fmt(ms)}**" if ms == best else fmt(ms))
        pct = cells[0][1]
        row = [label, show(cells[0][0]),
               f"{pct:.0f} %" if pct and "Decode" not in label else ""]
        row += [show(c[0]) if c else "" for c in cells[1:]]
        row += [show(p) if p else "" for p in peer_cells]
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    return lines


def render():
    lines = [
        "# Benchmark results",
        "",
        "Generated by `bench/make_results.py` from the raw files it names;",
        "do not edit by hand. What limits each shape, and what was tried,",
        "is in [docs/performance.md](../docs/performance.md); older figures",
        "are in git history. To reproduce on your machine (peers need PyPI):",
        "",
        "    bash scripts/build.sh && bash bench/run_benchmarks.sh",
        "    bash bench/run_peers.sh",
        "    python3 bench/make_results.py",
        "",
        "Shapes: S1 = B1 T512 h32 kv8 dk128 causal; S2 = S1 at T2048; "
        "S3 = B4 T512 h12",
        "kv12 dk64, no mask; Decode = B1, one query, 4096 cached keys, h32 "
        "kv8 dk128;",
        "SpecDecode = 8 queries behind 4096 keys; Layer = the fused "
        "`op = layer`,",
        "B1 T512 d4096 h32 kv8 causal. % FMA peak: useful FLOPs (the "
        "visited pairs)",
        "against this run's f32 FMA peak.",
        "Peers run the same shape, dtype and thread count, in the same "
        "session.",
        "",
    ]
    for folder in sorted(glob.glob(os.path.join(RESULTS, "*", "class.txt"))):
        lines += class_table(os.path.dirname(folder))
    return "\n".join(lines)


def main():
    text = render()
    if "--check" in sys.argv:
        current = open(OUT).read() if os.path.exists(OUT) else ""
        if current != text:
            sys.exit("bench/RESULTS.md is out of date: run "
                     "python3 bench/make_results.py")
        return
    with open(OUT, "w") as f:
        f.write(text)
    print(f"wrote {OUT} ({text.count(chr(10)) + 1} lines)")


if __name__ == "__main__":
    main()
