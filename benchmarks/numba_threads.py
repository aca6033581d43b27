"""The numba engine's folds on W1: wall time, CPU time and the threads' critical path.

    python benchmarks/numba_threads.py [--rows N] [--ops sum,logsumexp] [--repeat R]

An older tree (a checkout of an earlier commit) runs the same script with
``PYTHONPATH=OLD_TREE``; take turns between the two in fresh processes.

On a loaded machine a second thread rarely finds a free core, so wall times show the work of
one thread, not what two threads give on a quiet one. The critical path estimates the latter
from CPU time, which waiting for a core does not count: each batch of tasks the engine runs
side by side (``numba_engine._run``) counts its longest task's CPU time, and the rest of the
calling thread's CPU time counts as it is. Medians of ``R`` calls (ops taking turns); each
ratio is to the first op of ``--ops`` in the same process. Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import segcli
from segcli.engines import numba_engine

SEGMENTS = 1000


class CriticalPath:
    """Wraps ``numba_engine._run`` to add up, per batch, the longest task's CPU time."""

    def __init__(self) -> None:
        self.batches = 0.0  # the longest task of each batch, added up
        self.inline = 0.0  # the calling thread's share of those batches
        self.run = numba_engine._run
        numba_engine._run = self.timed_run

    def timed_run(self, tasks: list[Callable[[], Any]]) -> list[Any]:
        spent = [0.0] * len(tasks)

        def timed(k: int, task: Callable[[], Any]) -> Any:
            started = time.thread_time()
            try:
                return task()
            finally:
                spent[k] = time.thread_time() - started

        results = self.run([lambda k=k, t=t: timed(k, t) for k, t in enumerate(tasks)])
        self.batches += max(spent, default=0.0)
        self.inline += spent[0] if spent else 0.0
        return results

    def measure(self, call: Callable[[], Any]) -> tuple[float, float, float]:
        """``(wall, process CPU, critical path)`` of one call, in seconds."""
        self.batches = self.inline = 0.0
        wall, cpu, own = time.perf_counter(), time.process_time(), time.thread_time()
        call()
        own = time.thread_time() - own
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        return wall, cpu, own - self.inline + self.batches


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--ops", default="sum,logsumexp")
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    data = rng.standard_normal(args.rows, dtype=np.float32)
    ids = rng.integers(0, SEGMENTS, args.rows)
    chosen = args.ops.split(",")
    for op in chosen:  # kernels load
        segcli.segment_reduce(data[:300_000], ids[:300_000], SEGMENTS, op, engine="numba")
    path = CriticalPath()
    figures: dict[str, list[tuple[float, float, float]]] = {op: [] for op in chosen}
    for _ in range(args.repeat):
        for op in chosen:
            call = lambda op=op: segcli.segment_reduce(data, ids, SEGMENTS, op, engine="numba")  # noqa: E731
            figures[op].append(path.measure(call))
    medians = {op: np.median(np.array(runs), axis=0) for op, runs in figures.items()}
    base = medians[chosen[0]]
    print(f"{'op':10} {'wall ms':>8} {'cpu ms':>8} {'path ms':>8}   ratios wall / cpu / path")
    for op in chosen:
        wall, cpu, crit = medians[op] * 1e3
        ratios = " / ".join(f"{x:.2f}" for x in medians[op] / base)
        print(f"{op:10} {wall:8.1f} {cpu:8.1f} {crit:8.1f}   {ratios}", flush=True)


if __name__ == "__main__":
    main()
