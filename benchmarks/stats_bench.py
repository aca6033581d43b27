"""Each new mergeable op against ``sum`` on the same engine: one process, one run side by side.

    python benchmarks/stats_bench.py [--rows N] [--engine numpy|numba] [--ops a,b] [--repeat R]

The workload: float32 data, 1,000 segments, unsorted random ids, in memory. Each figure is the
best of ``R`` calls (default 3; the ops take turns, so a busy moment of a shared machine hits
every op alike) after a warm-up call on a small slice (numba's kernels load then). Nothing here
asserts a time.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import segcli

OPS = ("sum", "var", "std", "argmin", "argmax", "first", "last", "any", "all", "logsumexp")
SEGMENTS = 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--engine", default="numpy")
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    data = rng.standard_normal(args.rows, dtype=np.float32)
    ids = rng.integers(0, SEGMENTS, args.rows)
    chosen = args.ops.split(",")
    times = dict.fromkeys(chosen, float("inf"))
    for op in chosen:
        segcli.segment_reduce(data[:100_000], ids[:100_000], SEGMENTS, op, engine=args.engine)
    for _ in range(args.repeat):
        for op in chosen:
            started = time.perf_counter()
            segcli.segment_reduce(data, ids, SEGMENTS, op, engine=args.engine)
            times[op] = min(times[op], time.perf_counter() - started)
    base = times.get("sum")
    for op in chosen:
        ratio = f"{times[op] / base:5.2f}x sum" if base else ""
        print(f"{args.engine:6} {op:10} {times[op]:7.3f} s  {ratio}", flush=True)


if __name__ == "__main__":
    main()
