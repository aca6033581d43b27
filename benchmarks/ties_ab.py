"""min/max on the NumPy engine against an older copy of it, in one process, calls alternating.

    git show REV:segcli/engines/numpy_engine.py > old_numpy_engine.py
    python benchmarks/ties_ab.py old_numpy_engine.py [--rows N] [--repeat R]

The tie rule of min and max (the later of 0.0 and -0.0, the first NaN) added a look at each
sorted run's result, and a pass over the rows where a result is zero or NaN, to the sorted
path; float16 folds in float32. Workload W1's shape: 20M rows, 1,000 segments, unsorted random
ids or the same ids sorted; ``relu`` data (half the values 0.0 or -0.0) makes every sorted
min a tie, the pass's worst case. Each figure is the fold alone (new state, fold, finalize),
the median of ``R`` alternating calls. Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np
from engine_ab import load

from segcli import ops
from segcli.engines import numpy_engine

SEGMENTS = 1000
CASES = (
    ("min", "float32", "normal"),
    ("max", "float32", "normal"),
    ("min", "float64", "normal"),
    ("max", "float64", "normal"),
    ("min", "float16", "normal"),
    ("min", "float32", "relu"),
)


def fold(engine: Any, op: str, data: np.ndarray, ids: np.ndarray, sorted_ids: bool) -> Any:
    state = ops.new_state(ops.OPS[op], SEGMENTS, (), data.dtype)
    engine.fold(state, data, ids, sorted_ids=sorted_ids)
    return ops.finalize(state)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("old", help="an older segcli/engines/numpy_engine.py")
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    engines = {"old": load(args.old).ENGINE, "new": numpy_engine.ENGINE}
    rng = np.random.default_rng(0)
    normal = rng.standard_normal((args.rows, 1))
    relu = np.where(normal > 0, normal, np.where(rng.random((args.rows, 1)) < 0.5, 0.0, -0.0))
    unsorted_ids = rng.integers(0, SEGMENTS, args.rows)
    sorted_ids = np.sort(unsorted_ids)
    print(f"{'op':4} {'dtype':8} {'data':7} {'ids':9} {'old ms':>8} {'new ms':>8} {'new/old':>8}")
    for op, dtype, kind in CASES:
        data = (normal if kind == "normal" else relu).astype(dtype)
        for label, ids in (("unsorted", unsorted_ids), ("sorted", sorted_ids)):
            times: dict[str, list[float]] = {name: [] for name in engines}
            for _ in range(args.repeat):
                for name, engine in engines.items():
                    started = time.perf_counter()
                    fold(engine, op, data, ids, label == "sorted")
                    times[name].append(time.perf_counter() - started)
            old, new = (statistics.median(times[name]) for name in ("old", "new"))
            print(
                f"{op:4} {dtype:8} {kind:7} {label:9} {old * 1e3:8.1f} {new * 1e3:8.1f}"
                f" {new / old:8.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
