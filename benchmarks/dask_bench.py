"""Benchmark ``--engine dask``: 1 vs 2 local workers, and Dask vs the single-process stream.

Builds a Parquet dataset (float32 ``value``, int32 ``segment``; 64 files, about 2.2 GB by
default) under ``benchmarks/data/`` (git-ignored), times the reduction a few times each way,
writes ``benchmarks/DASK_RESULTS.md`` and deletes the data::

    python benchmarks/dask_bench.py                                    # the recorded run
    python benchmarks/dask_bench.py --rows 4000000 --files 8 --no-write   # a quick try

Every way reads the same files. The streaming path is
:func:`segcli.drivers.stream.reduce_stream` over the files chained one after another (what one
process does with them); the Dask runs use a ``LocalCluster`` started beforehand, whose
start-up is timed apart.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "dask_bench"
RESULTS = HERE / "DASK_RESULTS.md"


def build(root: Path, files: int, rows: int, segments: int, seed: int = 0) -> int:
    """Write ``files`` Parquet files of ``rows`` rows in all; return their bytes on disk."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    needed = rows * 8 * 2  # the files, plus room to spare
    free = shutil.disk_usage(root.parent if root.parent.exists() else HERE).free
    if free < needed:
        sys.exit(f"need {needed / 1e9:.1f} GB free for the data, have {free / 1e9:.1f} GB")
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    per_file = rows // files
    for k in range(files):
        table = pa.table(
            {
                "value": rng.standard_normal(per_file, dtype=np.float32),
                "segment": rng.integers(0, segments, per_file, dtype=np.int32),
            }
        )
        # Row groups of 1M rows (8 MB), as a Spark or pandas writer would make them.
        pq.write_table(table, root / f"part-{k:04d}.parquet", row_group_size=1 << 20)
    return sum(p.stat().st_size for p in root.glob("*.parquet"))


class ChainedChunks:
    """Several chunked sources read one after another, as one input (for the stream path)."""

    def __init__(self, sources: list[Any], label: str) -> None:
        self.sources = sources
        self.label = label
        self.shape = (sum(s.shape[0] for s in sources), *sources[0].shape[1:])
        self.dtype = sources[0].dtype

    def chunks(self, rows: int) -> Iterator[np.ndarray]:
        for source in self.sources:
            yield from source.chunks(rows)


def run_stream(files: list[Path], op: str, n: int) -> Any:
    """One single-process streaming run over the files, chained."""
    from segcli.drivers.stream import reduce_stream
    from segcli.io import open_chunked

    data = ChainedChunks([open_chunked(str(f), column="value") for f in files], "value")
    ids = ChainedChunks(
        [open_chunked(str(f), column="segment", role="ids") for f in files], "segment"
    )
    reduction, _ = reduce_stream(data, ids, n, op)
    return reduction


class DaskWay:
    """A LocalCluster of ``workers`` processes, started and warmed up, and a client of it."""

    def __init__(self, workers: int, request: Any) -> None:
        import distributed

        from segcli.drivers.dask import local_cluster

        started = time.perf_counter()
        self.cluster = local_cluster(workers)
        self.client = distributed.Client(self.cluster, set_as_default=False)
        self.client.wait_for_workers(workers)
        self.startup = time.perf_counter() - started
        self.request = request
        started = time.perf_counter()
        self.run()  # each worker process compiles (or loads) the numba kernels
        self.first = time.perf_counter() - started

    def run(self) -> tuple[Any, dict[str, Any]]:
        from segcli.drivers.dask import run

        done = run(self.request, client=self.client)
        return done.reduction, done.mode_facts

    def close(self) -> None:
        self.client.close()
        self.cluster.close()


def timed(run: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = run()
    return time.perf_counter() - started, result


@dataclass
class Measured:
    """Seconds per run of each way, and what the runs returned."""

    times: dict[str, list[float]] = field(default_factory=dict)
    ways: list[DaskWay] = field(default_factory=list)
    stream: Any = None
    dask: Any = None
    partitions: int = 0
    load: float = field(default_factory=lambda: os.getloadavg()[0])


def measure(files: list[Path], pattern: str, args: argparse.Namespace) -> Measured:
    """Time each way ``args.repeats`` times, round robin; check they agree."""
    from segcli.drivers.base import RunSpec

    request = RunSpec(
        op=args.op,
        data=pattern,
        data_column="value",
        ids_column="segment",
        num_segments=args.segments,
        engine="dask",
    )
    got = Measured(times={"stream": [], "1": [], "2": []})
    try:
        run_stream(files, args.op, args.segments)  # warms the page cache and the kernels
        got.ways = [DaskWay(1, request), DaskWay(2, request)]
        # Round robin, so that load from anything else on the machine hits every way alike.
        for repeat in range(args.repeats):
            took, got.stream = timed(lambda: run_stream(files, args.op, args.segments))
            got.times["stream"].append(took)
            for way, key in zip(got.ways, ("1", "2"), strict=True):
                took, (got.dask, extra) = timed(way.run)
                got.times[key].append(took)
                got.partitions = extra["partitions"]
                np.testing.assert_allclose(got.dask.result, got.stream.result, rtol=1e-5, atol=1e-3)
                np.testing.assert_array_equal(got.dask.counts, got.stream.counts)
            print(
                f"  run {repeat + 1}: "
                + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in got.times.items()),
                flush=True,
            )
    finally:
        for way in got.ways:
            way.close()
    return got


def row(name: str, times: list[float], rows: int, nbytes: int, base: float) -> str:
    median = statistics.median(times)
    runs = ", ".join(f"{t:.2f}" for t in times)
    return (
        f"| {name} | {median:.2f} | {runs} | {rows / median / 1e6:.0f} | "
        f"{nbytes / median / 1e9:.2f} | {base / median:.2f}x |"
    )


def render(got: Measured, args: argparse.Namespace, rows: int, on_disk: int) -> str:
    raw = rows * 8
    base = statistics.median(got.times["stream"])
    one, two = got.ways
    parts = got.partitions
    return "\n".join(
        [
            "# Dask engine benchmark",
            "",
            f"`python benchmarks/dask_bench.py` ({args.op}, {args.segments:,} segments given): "
            f"{rows:,} rows of float32 `value` + int32 `segment` in {args.files} Parquet files "
            f"(snappy, row groups of 1M rows), {on_disk / 1e9:.2f} GB on disk, {raw / 1e9:.2f} GB "
            "as arrays. Every way reads the same files from a warm page cache; times are seconds, "
            f"median of {args.repeats} runs taken round robin after an untimed warm-up of each.",
            "",
            f"Machine: {os.cpu_count()} cores ({platform.processor() or platform.machine()}), "
            f"{_memory_gb():.0f} GB, Python {platform.python_version()}, NumPy {np.__version__}. "
            f"Both paths fold with `{got.stream.engine}`; Dask partitions read with one thread "
            f"each. Load average when the run started: {got.load:.1f} (the machine is shared, so "
            "the runs spread).",
            "",
            "| way | median s | runs s | M rows/s | GB/s (arrays) | vs stream |",
            "|---|---|---|---|---|---|",
            row(
                "stream (one process, `reduce_stream` over the chained files)",
                got.times["stream"],
                rows,
                raw,
                base,
            ),
            row(
                f"dask, LocalCluster 1 worker ({parts} partitions)", got.times["1"], rows, raw, base
            ),
            row(
                f"dask, LocalCluster 2 workers ({parts} partitions)",
                got.times["2"],
                rows,
                raw,
                base,
            ),
            "",
            "Not in the times above, paid once by a CLI run without `--scheduler`: starting "
            f"the LocalCluster took {one.startup:.1f} s (1 worker) and {two.startup:.1f} s "
            f"(2 workers); the first run on a fresh cluster took {one.first:.1f} s and "
            f"{two.first:.1f} s (each worker process compiles or loads the numba kernels).",
            "",
            NOTES,
        ]
    )


NOTES = """\
How to read it: the streaming process already keeps both cores busy (pyarrow decodes on its
thread pool, numba folds on two threads), while a Dask task reads its partition on one thread so
that tasks, not threads, share the cores. One worker therefore lands near the stream, and
two workers on two cores are the ceiling of this machine. Dask pays off when partitions
spread over more machines: each task moves only its partial state (here 100,000 segments x 16
bytes) to the combine tree, never its rows.
"""


def _memory_gb() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=280_000_000)
    parser.add_argument("--files", type=int, default=64)
    parser.add_argument("--segments", type=int, default=100_000)
    parser.add_argument("--op", default="sum")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep benchmarks/data/ afterwards")
    parser.add_argument("--no-write", action="store_true", help="do not write DASK_RESULTS.md")
    args = parser.parse_args()

    print(f"building {args.files} files, {args.rows:,} rows ...", flush=True)
    started = time.perf_counter()
    on_disk = build(DATA, args.files, args.rows, args.segments)
    print(f"  {on_disk / 1e9:.2f} GB on disk in {time.perf_counter() - started:.0f} s", flush=True)
    try:
        got = measure(sorted(DATA.glob("*.parquet")), str(DATA / "*.parquet"), args)
    finally:
        if not args.keep:
            shutil.rmtree(DATA)
    text = render(got, args, (args.rows // args.files) * args.files, on_disk)
    print(text)
    if not args.no_write:
        RESULTS.write_text(text)


if __name__ == "__main__":  # worker processes are spawned: they re-import this file
    main()
