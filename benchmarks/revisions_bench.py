"""The command line of two revisions side by side: the same files, interleaved rounds.

    python benchmarks/revisions_bench.py OLD_TREE [NEW_TREE] [--rows 20000000]

Each tree is a checkout of segcli (``git worktree add /tmp/old REV``); its package is run as
``python -m segcli`` with that tree first on ``PYTHONPATH``, so both use this environment's
NumPy, numba and pyarrow. Rounds alternate old and new so that the machine's drift hits both;
the median of the rounds is printed, with the ratio new / old. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent.parent

CASES = [
    (
        "sum, in memory",
        ["sum", "{data}", "{ids}", "-q", "-o", "{out}.npy", "--memory-limit", "64GB"],
    ),
    (
        "mean, in memory",
        ["mean", "{data}", "{ids}", "-q", "-o", "{out}.npy", "--memory-limit", "64GB"],
    ),
    (
        "min, in memory",
        ["min", "{data}", "{ids}", "-q", "-o", "{out}.npy", "--memory-limit", "64GB"],
    ),
    ("sum, streamed", ["sum", "{data}", "{ids}", "-q", "-o", "{out}.npy"]),
    ("sum, numba", ["sum", "{data}", "{ids}", "-q", "-o", "{out}.npy", "--engine", "numba"]),
    ("sum, sorted", ["sum", "{data}", "{sorted}", "--sorted", "-q", "-o", "{out}.npy"]),
    ("check", ["check", "{data}", "{ids}", "-q"]),
    ("sum, text out", ["sum", "{data}", "{ids}", "-q", "-n", "1000"]),
]


def run(tree: Path, argv: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "segcli", *argv], env=env, capture_output=True, check=False
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {' '.join(argv)} failed: {done.stderr.decode()[-500:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path, nargs="?", default=HERE)
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as folder:
        files = {
            "data": f"{folder}/data.npy",
            "ids": f"{folder}/ids.npy",
            "sorted": f"{folder}/sorted.npy",
            "out": f"{folder}/out",
        }
        ids = rng.integers(0, 1000, args.rows, dtype=np.int32)
        np.save(files["data"], rng.random(args.rows, dtype=np.float32))
        np.save(files["ids"], ids)
        np.save(files["sorted"], np.sort(ids))
        print(f"{args.rows:,} float32 rows, 1,000 segments, {args.rounds} rounds, median seconds")
        print("| case | old | new | new / old |\n|---|---:|---:|---:|")
        for name, template in CASES:
            argv = [part.format(**files) for part in template]
            for tree in (args.old, args.new):  # warm-up: kernels compiled, files cached
                run(tree, argv)
            times: dict[Path, list[float]] = {args.old: [], args.new: []}
            for _ in range(args.rounds):
                for tree in (args.old, args.new):
                    times[tree].append(run(tree, argv))
            old, new = (statistics.median(times[t]) for t in (args.old, args.new))
            print(f"| {name} | {old:.3f} | {new:.3f} | {new / old:.2f} |", flush=True)


if __name__ == "__main__":
    main()
