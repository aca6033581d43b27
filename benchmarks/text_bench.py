"""Text output speed: the old formatting (NumPy ``astype(str)`` and ``str.join``) against the
current one (Arrow's cast to string, patched to NumPy's text), side by side in one run.

    python benchmarks/text_bench.py            # 1M rows per case, best of 3: about 20 s on 2 cores
    python benchmarks/text_bench.py --rows 200000 --repeats 1

Writes ``TEXT_RESULTS.md`` next to this script and prints it. Each case formats a whole result
as the lines ``segment<TAB>value`` (what segcli prints without ``-o``; CSV and TSV differ only
in the separator and header) and checks both ways give the same bytes. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from segcli.io.text import text_blocks


def old_text(result: np.ndarray[Any, Any]) -> bytes:
    """The writer before: NumPy's str of every cell, joined row by row in Python."""
    out = []
    for start in range(0, len(result), 65536):
        block = result[start : start + 65536]
        segments = np.arange(start, start + len(block)).astype(str).tolist()
        values = block.astype(str).tolist()
        out.append(("\n".join(map("\t".join, zip(segments, values, strict=True))) + "\n").encode())
    return b"".join(out)


def new_text(result: np.ndarray[Any, Any]) -> bytes:
    return b"".join(text_blocks(result, "\t"))


def best_of(repeats: int, function: Callable[[], bytes]) -> tuple[float, bytes]:
    times, out = [], b""
    for _ in range(repeats):
        started = time.perf_counter()
        out = function()
        times.append(time.perf_counter() - started)
    return min(times), out


def cases(rows: int) -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(0)
    return {
        "float32 sums (magnitude < 1e4)": (rng.standard_normal(rows) * 1000).astype(np.float32),
        "float32 means (magnitude < 1)": rng.random(rows).astype(np.float32),
        "float32 large (about 1e7, exponent form)": (rng.random(rows) * 1e8).astype(np.float32),
        "float64 sums": rng.standard_normal(rows) * 1000,
        "int64 counts": rng.integers(0, 10**6, rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    lines = [
        "# Text output benchmark",
        "",
        f"Machine: {os.cpu_count()} cores, {platform.machine()}; "
        f"{args.rows:,} rows per case, best of {args.repeats}; `python benchmarks/text_bench.py`.",
        "Old = NumPy `astype(str)` + `str.join` (the writer before); new = `segcli.io.text`.",
        "",
        "| result | old s | old rows/s | new s | new rows/s | speed-up | same bytes |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    new_text(np.arange(10_000, dtype=np.float32))  # pyarrow's import is not formatting time
    for name, result in cases(args.rows).items():
        old_s, old_out = best_of(args.repeats, lambda r=result: old_text(r))
        new_s, new_out = best_of(args.repeats, lambda r=result: new_text(r))
        lines.append(
            f"| {name} | {old_s:.2f} | {args.rows / old_s:,.0f} | {new_s:.2f} | "
            f"{args.rows / new_s:,.0f} | {old_s / new_s:.1f}x | {old_out == new_out} |"
        )
    lines += [
        "",
        "Values NumPy prints in exponent form while Arrow prints them positionally (float32",
        "|x| >= 1e6 or < 1e-4) are rewritten with Arrow's regex kernels, the slow part of the",
        "third row; values whose text Arrow and NumPy agree on need only small fix-ups (`1` ->",
        "`1.0`, `1e-5` -> `1e-05`). These machines are shared: compare rows of one run only.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    (Path(__file__).parent / "TEXT_RESULTS.md").write_text(text)


if __name__ == "__main__":
    main()
