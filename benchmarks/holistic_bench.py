"""Holistic ops benchmark (issue 14): median, quantile and nunique against one ``np.sort``.

    python benchmarks/holistic_bench.py                  # 20M rows, about 25 s on 2 cores
    python benchmarks/holistic_bench.py --rows 2000000   # a smoke test of the harness

Times the in-memory module (``segcli.holistic.reduce_holistic``) and the sorted-stream reducer
next to ``np.sort`` of the same data, interleaved round by round so that both see the same state
of a noisy machine; the ratio is the figure (issue 14: median on W1 within 3x of one sort).
Writes ``benchmarks/HOLISTIC_RESULTS.md`` and prints it. Nothing here is a test.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from segcli.holistic import SortedHolisticReducer, reduce_holistic

HERE = Path(__file__).resolve().parent
SEED = 0
BLOCK_ROWS = 1_000_000
NOTES = "<!-- notes: written by hand, kept by new runs -->"


def workloads(rows: int) -> dict[str, tuple[np.ndarray, np.ndarray, int]]:
    """W1, W2, W3, W5 of issue 3 (float32 unless stated), values as (rows, 1); W5 with normal
    float64 values (keys that do not pack); W4 with 16 columns instead of 64."""
    rng = np.random.default_rng(SEED)
    data = rng.random(rows, dtype=np.float32)
    ids_1k = rng.integers(0, 1000, rows).astype(np.int64)
    ids_1m = rng.integers(0, 1_000_000, rows).astype(np.int64)
    order = np.argsort(ids_1k, kind="stable")
    normal = rng.standard_normal(rows)
    wide_rows = rows // 16
    wide = rng.random((wide_rows, 16), dtype=np.float32)
    wide_ids = rng.integers(0, 10_000, wide_rows).astype(np.int64)
    return {
        "W1": (data[:, None], ids_1k, 1000),
        "W2": (data[:, None], ids_1m, 1_000_000),
        "W3": (data[order][:, None], ids_1k[order], 1000),
        "W5": (data.astype(np.float64)[:, None], ids_1k, 1000),
        "W5n": (normal[:, None], ids_1k, 1000),
        "W4": (wide, wide_ids, 10_000),
    }


def streamed(values: np.ndarray, ids: np.ndarray, n: int) -> np.ndarray:
    reducer = SortedHolisticReducer("median", n, 1, values.dtype)
    for start in range(0, len(ids), BLOCK_ROWS):
        reducer.push(values[start : start + BLOCK_ROWS], ids[start : start + BLOCK_ROWS])
    return reducer.finish()


def pandas_median(values: np.ndarray, ids: np.ndarray) -> Any:
    import pandas as pd

    return pd.Series(values[:, 0]).groupby(ids).median()


def jobs(
    w: dict[str, tuple[np.ndarray, np.ndarray, int]],
) -> list[tuple[str, str, Callable[[], Any]]]:
    """(name, the sort it is compared with, call)."""
    w1, w2, w3, w4, w5, w5n = w["W1"], w["W2"], w["W3"], w["W4"], w["W5"], w["W5n"]
    found = [
        ("np.sort float32 (W1 data)", "f32", lambda: np.sort(w1[0][:, 0])),
        ("median W1", "f32", lambda: reduce_holistic("median", *w1)),
        ("quantile 0.9 W1", "f32", lambda: reduce_holistic("quantile", *w1, q=0.9)),
        ("nunique W1", "f32", lambda: reduce_holistic("nunique", *w1)),
        ("median W2 (1M segments)", "f32", lambda: reduce_holistic("median", *w2)),
        ("median W3, sorted stream, 1M-row blocks", "f32", lambda: streamed(*w3)),
        ("np.sort float32 (W4 data, flat)", "w4", lambda: np.sort(w4[0].reshape(-1))),
        (
            "median W4 (rows/16 x 16 columns, 10,000 segments)",
            "w4",
            lambda: reduce_holistic("median", *w4),
        ),
        ("np.sort float64 (W5 data)", "f64", lambda: np.sort(w5[0][:, 0])),
        ("median W5 (float64 of float32 values)", "f64", lambda: reduce_holistic("median", *w5)),
        ("np.sort float64 (normal)", "f64n", lambda: np.sort(w5n[0][:, 0])),
        # 64-bit keys that do not pack with the group, even squeezed: sorted by high bits.
        ("median float64 normal, W1 ids", "f64n", lambda: reduce_holistic("median", *w5n)),
    ]

    def pandas_w1() -> Any:
        return pandas_median(*w1[:2])

    try:
        import pandas  # noqa: F401

        found.append(("pandas groupby median W1 (first round only)", "f32", pandas_w1))
    except ImportError:
        pass
    return found


def check(w: dict[str, tuple[np.ndarray, np.ndarray, int]]) -> str:
    """Every median against np.median on a few segments, and the stream against memory."""
    values, ids, n = w["W1"]
    got = reduce_holistic("median", values, ids, n)
    for segment in (0, 1, n // 2, n - 1):
        assert got[segment, 0] == np.median(values[ids == segment, 0]), segment
    assert streamed(*w["W3"]).tobytes() == reduce_holistic("median", *w["W3"]).tobytes()
    values, ids, n = w["W5"]
    got = reduce_holistic("median", values, ids, n)
    assert got[3, 0] == np.median(values[ids == 3, 0])
    return "medians of 4 segments equal np.median's; the stream's bytes equal the in-memory ones"


def peak_mb(call: Callable[[], Any]) -> float:
    tracemalloc.start()
    call()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE / "HOLISTIC_RESULTS.md")
    args = parser.parse_args()
    started = time.perf_counter()
    load_start = os.getloadavg()[0]
    w = workloads(args.rows)
    checked = check(w)
    found = jobs(w)
    times: dict[str, list[float]] = {name: [] for name, _, _ in found}
    for round_ in range(args.rounds):
        # Rotate the order so no job always runs right after the same neighbour.
        for name, _, call in found[round_ % len(found) :] + found[: round_ % len(found)]:
            if round_ and "first round only" in name:
                continue  # a peer for scale, not a ratio: once keeps the run short
            begin = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - begin)
    sorts = {key: name for name, key, _ in found if name.startswith("np.sort")}
    peaks = {
        "median W1": peak_mb(lambda: reduce_holistic("median", *w["W1"])),
        "median W2 (1M segments)": peak_mb(lambda: reduce_holistic("median", *w["W2"])),
        "median W3, sorted stream, 1M-row blocks": peak_mb(lambda: streamed(*w["W3"])),
    }
    lines = [
        "# Holistic ops: median, quantile, nunique (issue 14)",
        "",
        f"`python benchmarks/holistic_bench.py --rows {args.rows}` on {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, NumPy {np.__version__}; "
        f"load average {load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end "
        f"(other jobs share the machine). {args.rounds} interleaved rounds; "
        f"`x sort` divides by `np.sort` of the same data timed in the same rounds (medians by "
        f"medians, bests by bests). "
        f"Whole run {time.perf_counter() - started:.0f} s. Check: {checked}.",
        "",
        "| what | median s | best s | x sort (medians) | x sort (bests) | peak MB (tracemalloc) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, sort_key, _ in found:
        median, best = statistics.median(times[name]), min(times[name])
        ratio = median / statistics.median(times[sorts[sort_key]])
        best_ratio = best / min(times[sorts[sort_key]])
        peak = f"{peaks[name]:.0f}" if name in peaks else ""
        lines.append(
            f"| {name} | {median:.3f} | {best:.3f} | {ratio:.2f}x | {best_ratio:.2f}x | {peak} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    # Notes written by hand below the marker survive a new run.
    if args.out.exists() and NOTES in args.out.read_text():
        text += "\n" + NOTES + args.out.read_text().split(NOTES, 1)[1]
    args.out.write_text(text)


if __name__ == "__main__":
    main()
