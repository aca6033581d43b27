"""Side-by-side timing of ``segment_reduce`` for the op-table refactor: this tree against an
older copy of the package, in one process, so that both see the same machine load.

    python benchmarks/ops_bench.py [--old-path DIR] [--rows N] [--repeats R]

``--old-path`` is a folder holding a copy of an older ``segcli`` package renamed
``segcli_old`` (its imports rewritten to match); without it only this tree is timed. The
workload: float32 data, 1,000 segments, unsorted random ids and the same ids sorted; numpy
and numba engines; sum, mean, min and count. Each figure is the median of ``--repeats`` calls
after a warm-up, old and new alternating. Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

OPS = ("sum", "mean", "min", "count")
ENGINES = ("numpy", "numba")
SEGMENTS = 1000


def _timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--old-path")
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    versions = {"new": importlib.import_module("segcli")}
    if args.old_path:
        sys.path.insert(0, args.old_path)
        versions["old"] = importlib.import_module("segcli_old")
    rng = np.random.default_rng(0)
    data = rng.standard_normal(args.rows, dtype=np.float32)
    unsorted_ids = rng.integers(0, SEGMENTS, args.rows, dtype=np.int64)
    layouts = {"unsorted": unsorted_ids, "sorted": np.sort(unsorted_ids)}
    print(f"{args.rows:,} float32 rows, {SEGMENTS:,} segments, median of {args.repeats} (s)")
    print("layout    engine  op     " + "  ".join(f"{name:>7}" for name in versions))
    for layout, ids in layouts.items():
        is_sorted = layout == "sorted"
        for engine in ENGINES:
            for op in OPS:
                calls = {
                    name: partial(
                        module.segment_reduce,
                        data,
                        ids,
                        SEGMENTS,
                        op,
                        sorted=is_sorted,
                        engine=engine,
                    )
                    for name, module in versions.items()
                }
                results = {name: call() for name, call in calls.items()}  # warm-up
                if "old" in results and results["old"].tobytes() != results["new"].tobytes():
                    print(f"  {layout} {engine} {op}: old and new results differ")
                times: dict[str, list[float]] = {name: [] for name in versions}
                for _ in range(args.repeats):
                    for name, call in calls.items():
                        times[name].append(_timed(call))
                figures = "  ".join(f"{statistics.median(times[n]):7.3f}" for n in versions)
                print(f"{layout:9} {engine:7} {op:6} {figures}", flush=True)


if __name__ == "__main__":
    main()
