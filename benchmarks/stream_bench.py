"""Streaming benchmark (issue 4): bounded memory on a file larger than the budget, and
streaming throughput against the in-memory path on the same data, in one run.

    python benchmarks/stream_bench.py            # 2 billion rows: 8 GB float32 + 8 GB int32
    python benchmarks/stream_bench.py --rows 200000000 --quick

Peak memory is the child's maximum resident set size from ``/usr/bin/time -v`` (GNU time), so
it counts everything the process touched, libraries included. Writes
``benchmarks/STREAM_RESULTS.md`` and prints it. Files go to ``benchmarks/data/`` (git-ignored)
and are deleted at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from numpy.lib import format as npformat

HERE = Path(__file__).resolve().parent
DATA_DIR = HERE / "data"
SEGMENTS = 1000
BLOCK = 16_000_000  # rows generated at a time, so writing the files needs little memory


def write_npy(path: Path, rows: int, dtype: np.dtype, make_block) -> None:
    """Write a .npy of ``rows`` rows block by block (never the whole array in memory)."""
    with open(path, "wb") as f:
        npformat.write_array_header_2_0(
            f, {"descr": npformat.dtype_to_descr(dtype), "fortran_order": False, "shape": (rows,)}
        )
        for start in range(0, rows, BLOCK):
            make_block(start, min(BLOCK, rows - start)).astype(dtype, copy=False).tofile(f)


def make_files(rows: int) -> tuple[Path, Path]:
    DATA_DIR.mkdir(exist_ok=True)
    data, ids = DATA_DIR / f"stream-data-{rows}.npy", DATA_DIR / f"stream-ids-{rows}.npy"
    rng = np.random.default_rng(0)
    if not data.exists():
        write_npy(
            data, rows, np.dtype(np.float32), lambda start, n: rng.random(n, dtype=np.float32)
        )
    if not ids.exists():
        write_npy(
            ids,
            rows,
            np.dtype(np.int32),
            lambda start, n: rng.integers(0, SEGMENTS, n, dtype=np.int32),
        )
    return data, ids


def timed_run(args: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of one ``segcli`` run under GNU time."""
    command = ["/usr/bin/time", "-v", sys.executable, "-m", "segcli", *args]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"segcli failed: {done.stderr.strip()[-2000:]}")
    peak_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)[1])
    return wall, peak_kb * 1024


def median_run(args: list[str], repeats: int) -> tuple[float, int]:
    runs = [timed_run(args) for _ in range(repeats)]
    return statistics.median(r[0] for r in runs), max(r[1] for r in runs)


def sum_args(inputs: tuple[Path, Path], out: Path, engine: str) -> list[str]:
    """``segcli sum`` of the two input files into ``out``, quietly."""
    return ["sum", *map(str, inputs), "-n", str(SEGMENTS), "-q", "-o", str(out), "--engine", engine]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000_000)
    parser.add_argument(
        "--fit-rows",
        type=int,
        default=200_000_000,
        help="rows of the fitting data for the throughput comparison",
    )
    parser.add_argument("--memory-limit", default="256MB")
    parser.add_argument("--engine", default="auto")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat")
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    options = parser.parse_args()
    if options.quick:
        options.rows, options.fit_rows, options.repeats = 50_000_000, 20_000_000, 1
    out = DATA_DIR / "out.npy"
    lines = [
        "# Streaming benchmark",
        "",
        f"Machine: {os.cpu_count()} cores; engine `{options.engine}`; "
        f"float32 data, int32 ids uniform in [0, {SEGMENTS}); op sum.",
        "",
    ]
    try:
        big = make_files(options.rows)
        size = sum(p.stat().st_size for p in big)
        wall, peak = timed_run(
            [*sum_args(big, out, options.engine), "--memory-limit", options.memory_limit]
        )
        lines += [
            "## Bounded memory",
            "",
            "| rows | input bytes | --memory-limit | wall s | rows/s | peak RSS |",
            "|---:|---:|---:|---:|---:|---:|",
            f"| {options.rows:,} | {size / 1e9:.1f} GB | {options.memory_limit} | {wall:.1f} "
            f"| {options.rows / wall:,.0f} | {peak / 2**20:.0f} MiB |",
            "",
        ]
        fit = make_files(options.fit_rows)
        common = sum_args(fit, out, options.engine)
        # Warm the page cache once, so both paths read from memory rather than the disk.
        timed_run([*common, "--memory-limit", "64GB"])
        memory_wall, memory_peak = median_run([*common, "--memory-limit", "64GB"], options.repeats)
        # No option: files over 32 MB stream by default, in blocks of about 8 MB.
        stream_wall, stream_peak = median_run(common, options.repeats)
        lines += [
            "## Streaming vs in-memory, same data, same run",
            "",
            "| path | rows | median wall s | rows/s | peak RSS |",
            "|---|---:|---:|---:|---:|",
            f"| in-memory | {options.fit_rows:,} | {memory_wall:.2f} "
            f"| {options.fit_rows / memory_wall:,.0f} | {memory_peak / 2**20:.0f} MiB |",
            f"| streaming | {options.fit_rows:,} | {stream_wall:.2f} "
            f"| {options.fit_rows / stream_wall:,.0f} | {stream_peak / 2**20:.0f} MiB |",
            "",
            f"Streaming throughput = **{memory_wall / stream_wall:.0%}** of the in-memory path.",
            "",
        ]
    finally:
        if not options.keep:
            shutil.rmtree(DATA_DIR, ignore_errors=True)
    report = "\n".join(lines)
    print(report)
    if not options.quick:
        (HERE / "STREAM_RESULTS.md").write_text(report)


if __name__ == "__main__":
    main()
