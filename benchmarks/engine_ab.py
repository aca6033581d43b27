"""The NumPy engine against an older copy of itself, in one process, calls alternating.

    git show REV:segcli/engines/numpy_engine.py > old_numpy_engine.py
    python benchmarks/engine_ab.py old_numpy_engine.py [--rows N] [--ops a,b] [--repeat R]

On a shared machine, figures from runs minutes apart differ by 20% to 40%; two engines whose
calls alternate see the same machine. The workload is W1 (float32, 1,000 segments, unsorted
random ids); each figure is the engine's fold alone (new state, fold, finalize), best of
``R``. ``--readers-dtype`` builds the state from the dtype the streaming readers build
(``newbyteorder("=")``: equal to float32, another descriptor object), as a streamed run does.
Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from typing import Any

import numpy as np

from segcli import ops
from segcli.engines import numpy_engine

OPS = ("sum", "min", "var", "argmin", "argmax", "first", "last", "any", "all", "logsumexp")
SEGMENTS = 1000


def load(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("old_numpy_engine", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def fold(
    engine: Any, op: str, data: np.ndarray, ids: np.ndarray, dtype: np.dtype[Any]
) -> np.ndarray:
    state = ops.new_state(ops.OPS[op], SEGMENTS, (), dtype)
    engine.fold(state, data, ids, sorted_ids=False)
    return ops.finalize(state)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("old", help="an older segcli/engines/numpy_engine.py")
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--readers-dtype", action="store_true")
    args = parser.parse_args()
    engines = {"old": load(args.old).ENGINE, "new": numpy_engine.ENGINE}
    rng = np.random.default_rng(0)
    data = rng.standard_normal((args.rows, 1), dtype=np.float32)
    ids = rng.integers(0, SEGMENTS, args.rows)
    dtype = data.dtype.newbyteorder("=") if args.readers_dtype else data.dtype
    print(f"{'op':10} {'old (ms)':>9} {'new (ms)':>9}  same bytes")
    for op in args.ops.split(","):
        best = dict.fromkeys(engines, float("inf"))
        results = {}
        for _ in range(args.repeat):
            for name, engine in engines.items():
                started = time.perf_counter()
                results[name] = fold(engine, op, data, ids, dtype)
                best[name] = min(best[name], time.perf_counter() - started)
        same = results["old"].tobytes() == results["new"].tobytes()
        print(f"{op:10} {best['old'] * 1e3:9.1f} {best['new'] * 1e3:9.1f}  {same}", flush=True)


if __name__ == "__main__":
    main()
