"""``segcli agg`` with six ops against ``sum`` alone, and against polars and duckdb.

    python benchmarks/agg_bench.py [--rows 100000000] [--rounds 3] [--ops sum,mean,...]
    python benchmarks/agg_bench.py --peak-rows 500000000   # + peak RSS over a 4 GB pair

The workload of issue 14: float32 values, int32 ids uniform in [0, 1000), written once as a
``.npy`` pair and as one Parquet file (columns ``id`` and ``v``, 1M-row row groups).

1. **Fresh processes** (each a whole ``python``; rounds interleave the commands; the median is
   printed): NumPy loading the pair and nothing else; ``segcli agg --op sum``; ``segcli agg``
   with every op, from the pair and from the Parquet file; polars and duckdb doing the same
   aggregations from the Parquet file and writing their result. segcli runs on its default
   engine and memory limit, as a user would. Each command's CPU seconds (every thread) are
   printed beside its wall seconds, and segcli's Parquet run over duckdb's as two ratios.
   segcli's bytecode is written first, as an install writes it.
2. **In process**: segcli's fold of every op at once (the combined op of ``segcli.multi``, in
   memory, the numpy and numba engines) against polars' and duckdb's group-by of the same
   columns already in memory; best of ``--rounds``.
3. ``--against TREE``: the segcli package in the folder TREE (an older copy, see
   ``older.py``) runs both ``agg`` commands too, in the same rounds: old against new.
4. ``--peak-rows N``: ``segcli agg`` over an N-row pair with ``--memory-limit 256MB``: its peak
   resident memory (VmHWM).

std is ``ddof=0`` everywhere (polars ``std(ddof=0)``, duckdb ``stddev_pop``). An op list that
``segcli agg`` refuses (exit 2) is reported, and the run goes on without the refused op.
Nothing is asserted; figures belong in ``STATS_RESULTS.md`` with the day they were measured.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from older import older_segcli

SEGMENTS = 1000
#: The child prints its own peak RSS (VmHWM, kB) on stderr as it exits.
_PEAK = """
import atexit, runpy, sys
def peak():
    with open("/proc/self/status") as status:
        print(next(l.split()[1] for l in status if l.startswith("VmHWM:")), file=sys.stderr)
atexit.register(peak)
sys.argv = ["segcli", *sys.argv[1:]]
runpy.run_module("segcli", run_name="__main__")
"""
_POLARS = {
    "sum": "pl.col('v').sum().alias('sum')",
    "mean": "pl.col('v').mean().alias('mean')",
    "min": "pl.col('v').min().alias('min')",
    "max": "pl.col('v').max().alias('max')",
    "std": "pl.col('v').std(ddof=0).alias('std')",
    "count": "pl.len().alias('count')",
}
_SQL = {
    "sum": "sum(v)",
    "mean": "avg(v)",
    "min": "min(v)",
    "max": "max(v)",
    "std": "stddev_pop(v)",
    "count": "count(*)",
}


def write_inputs(folder: str, rows: int, *, table: bool = True) -> tuple[str, str, str]:
    """The ``.npy`` pair and (with ``table``) the Parquet file, written a block at a time
    (bounded memory)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data_path, ids_path = os.path.join(folder, "v.npy"), os.path.join(folder, "id.npy")
    table_path = os.path.join(folder, "table.parquet")
    data = np.lib.format.open_memmap(data_path, "w+", np.float32, (rows,))
    ids = np.lib.format.open_memmap(ids_path, "w+", np.int32, (rows,))
    rng = np.random.default_rng(0)
    schema = pa.schema([("id", pa.int32()), ("v", pa.float32())])
    block = 1 << 22
    writer = pq.ParquetWriter(table_path, schema) if table else None
    for start in range(0, rows, block):
        stop = min(rows, start + block)
        data[start:stop] = rng.standard_normal(stop - start, dtype=np.float32)
        ids[start:stop] = rng.integers(0, SEGMENTS, stop - start, dtype=np.int32)
        if writer is not None:
            columns = [pa.array(ids[start:stop]), pa.array(data[start:stop])]
            writer.write_table(pa.Table.from_arrays(columns, schema=schema), 1 << 20)
    if writer is not None:
        writer.close()
    data.flush()
    ids.flush()
    del data, ids
    return data_path, ids_path, table_path


def segcli_agg(inputs: list[str], ops: str) -> list[str]:
    return [sys.executable, "-m", "segcli", "agg", *inputs, "-n", str(SEGMENTS), "--op", ops]


def commands(
    data: str,
    ids: str,
    table: str,
    ops: list[str],
    wanted: list[str],
    folder: str,
    against: str | None = None,
) -> dict[str, list[str]]:
    """The fresh-process commands: segcli folds ``ops`` in one run (and each refused op of
    ``wanted`` in a run of its own), the peers every op of ``wanted``; with ``against``, the
    older segcli in that folder runs both ``agg`` commands too."""
    listed = ",".join(ops)
    out = os.path.join(folder, "out")
    columns = ["--data-column", "v", "--ids-column", "id"]
    polars = (
        "import polars as pl; pl.read_parquet("
        f"{table!r}).group_by('id').agg([{', '.join(_POLARS[op] for op in wanted)}])"
        f".write_parquet({out + '.polars.parquet'!r})"
    )
    duck = (
        'import duckdb; duckdb.sql("COPY (SELECT id, '
        f"{', '.join(_SQL[op] for op in wanted)} FROM '{table}' GROUP BY id) "
        f"TO '{out}.duckdb.parquet' (FORMAT parquet)\")"
    )
    alone = {
        f"segcli {op} alone (.npy)": [
            sys.executable,
            "-m",
            "segcli",
            op,
            data,
            ids,
            "-n",
            str(SEGMENTS),
            "-q",
            "-o",
            f"{out}.{op}.npy",
        ]
        for op in wanted
        if op not in ops
    }
    older = {}
    if against is not None:
        older = {
            f"segcli {listed} (.npy, older)": older_segcli(
                against, ["agg", data, ids, "-n", str(SEGMENTS), "--op", listed, "-q", "-o",
                          out + ".older.npz"],
            ),
            f"segcli {listed} (Parquet, older)": older_segcli(
                against, ["agg", table, "-n", str(SEGMENTS), "--op", listed, *columns, "-q",
                          "-o", out + ".older.parquet"],
            ),
        }  # fmt: skip
    return {
        "numpy load only": [
            sys.executable,
            "-c",
            f"import numpy as np; np.load({data!r}); np.load({ids!r})",
        ],
        "segcli sum (.npy)": [
            *segcli_agg([data, ids], "sum"),
            "-q",
            "-o",
            out + ".sum.npz",
        ],
        f"segcli {listed} (.npy)": [
            *segcli_agg([data, ids], listed),
            "-q",
            "-o",
            out + ".npz",
        ],
        f"segcli {listed} (Parquet)": [
            *segcli_agg([table], listed),
            *columns,
            "-q",
            "-o",
            out + ".segcli.parquet",
        ],
        **older,
        **alone,
        "polars (Parquet)": [sys.executable, "-c", polars],
        "duckdb (Parquet)": [sys.executable, "-c", duck],
    }


def run(argv: list[str]) -> tuple[float, subprocess.CompletedProcess[bytes]]:
    return timed(argv)[:2]


def timed(argv: list[str]) -> tuple[float, subprocess.CompletedProcess[bytes], float]:
    """Wall seconds, the finished process, and its CPU seconds (user + system, every thread):
    on a shared machine the CPU seconds move less than the wall ones."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, done, cpu


def accepted_ops(ops: list[str], folder: str) -> list[str]:
    """The ops ``segcli agg`` folds beside ``sum`` (tried on a four-row pair): an op it refuses
    (exit 2) is left out, and said so."""
    data, ids = os.path.join(folder, "tiny_v.npy"), os.path.join(folder, "tiny_id.npy")
    np.save(data, np.arange(4, dtype=np.float32))
    np.save(ids, np.arange(4, dtype=np.int32))
    kept = []
    for op in ops:
        listed = "sum" if op == "sum" else f"sum,{op}"
        argv = [*segcli_agg([data, ids], listed), "-q", "-o", os.path.join(folder, "probe.npz")]
        done = run(argv)[1]
        if done.returncode == 0:
            kept.append(op)
        else:
            print(f"segcli agg refuses --op {listed} here: {done.stderr.decode().strip()}")
    return kept


def fresh_processes(
    commands_by_name: dict[str, list[str]], rounds: int
) -> dict[str, tuple[float, float]]:
    """Each command's median wall and CPU seconds over ``rounds`` interleaved rounds."""
    for name, argv in commands_by_name.items():  # warm: files cached, kernels compiled
        _, done = run(argv)
        if done.returncode != 0:
            raise SystemExit(f"{name} failed: {done.stderr.decode()[-400:]}")
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands_by_name}
    for _ in range(rounds):
        for name, argv in commands_by_name.items():
            wall, _, cpu = timed(argv)
            times[name].append((wall, cpu))
    return {
        name: (statistics.median(w for w, _ in values), statistics.median(c for _, c in values))
        for name, values in times.items()
    }


def best_of(rounds: int, call: Callable[[], Any]) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - started)
    return best


def in_process(
    data_path: str, ids_path: str, ops: list[str], wanted: list[str], rounds: int
) -> dict[str, float]:
    """segcli's fold of ``ops`` at once plus each refused op of ``wanted`` alone; the peers'
    group-by of every op of ``wanted``."""
    import duckdb
    import polars as pl
    import pyarrow as pa

    import segcli
    from segcli import multi

    data, ids = np.load(data_path), np.load(ids_path)
    times = {}
    for engine in ("numpy", "numba"):
        combined = multi.combined_op(tuple(ops), data.dtype, ())
        calls = [combined, *(op for op in wanted if op not in ops)]
        for op in calls:
            segcli.segment_reduce(data[:1000], ids[:1000], SEGMENTS, op, engine=engine)
        times[f"segcli fold, {engine}"] = best_of(
            rounds,
            lambda engine=engine, calls=calls: [
                segcli.segment_reduce(data, ids, SEGMENTS, op, engine=engine) for op in calls
            ],
        )
    frame = pl.DataFrame({"id": ids, "v": data})
    polars_aggs = [eval(_POLARS[op], {"pl": pl}) for op in wanted]
    times["polars group_by (DataFrame)"] = best_of(
        rounds, lambda: frame.group_by("id").agg(polars_aggs)
    )
    arrow = pa.table({"id": ids, "v": data})
    sql = f"SELECT id, {', '.join(_SQL[op] for op in wanted)} FROM arrow GROUP BY id"
    connection = duckdb.connect()
    connection.register("arrow", arrow)
    times["duckdb GROUP BY (Arrow table)"] = best_of(rounds, lambda: connection.sql(sql).fetchall())
    return times


def peak(rows: int, ops: str, folder: str) -> None:
    data, ids, _ = write_inputs(folder, rows, table=False)
    size = (os.path.getsize(data) + os.path.getsize(ids)) / 2**30
    argv = [sys.executable, "-c", _PEAK, "agg", data, ids, "-n", str(SEGMENTS), "--op", ops]
    argv += ["--memory-limit", "256MB", "-q", "-o", os.path.join(folder, "peak.npz")]
    seconds, done = run(argv)
    if done.returncode != 0:
        raise SystemExit(f"peak run failed: {done.stderr.decode()[-400:]}")
    kb = int(done.stderr.decode().strip().splitlines()[-1])
    print(f"peak: agg --op {ops} over {size:.2f} GiB ({rows:,} rows), --memory-limit 256MB:")
    print(f"  {kb / 1024:,.0f} MiB VmHWM, {seconds:.1f} s")


def _against(times: dict[str, tuple[float, float]], peer: str) -> str:
    """segcli's every-op run from Parquet over ``peer``'s: wall and CPU ratios."""
    ours = next(v for name, v in times.items() if name.startswith("segcli") and "Parquet" in name)
    theirs = times[peer]
    return f"{ours[0] / theirs[0]:.2f}x wall, {ours[1] / theirs[1]:.2f}x CPU"


def compile_segcli() -> None:
    """Write segcli's bytecode, as pip does on installing it: with PYTHONDONTWRITEBYTECODE set
    (and an editable install) every segcli process would compile each changed module again
    (0.08 s of CPU, 1.27x, of a small `agg` run measured here)."""
    import compileall
    import importlib.util

    spec = importlib.util.find_spec("segcli")
    assert spec is not None and spec.submodule_search_locations is not None
    for folder in spec.submodule_search_locations:
        compileall.compile_dir(folder, quiet=1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ops", default="sum,mean,min,max,std,count")
    parser.add_argument("--peak-rows", type=int, default=0)
    parser.add_argument("--skip-in-process", action="store_true")
    parser.add_argument("--against", metavar="TREE", help="also run the segcli in TREE")
    args = parser.parse_args()
    wanted = args.ops.split(",")
    compile_segcli()
    with tempfile.TemporaryDirectory(prefix="agg-bench-") as folder:
        if args.rows:
            data, ids, table = write_inputs(folder, args.rows)
            ops = accepted_ops(wanted, folder)
            runs = commands(data, ids, table, ops, wanted, folder, args.against)
            times = fresh_processes(runs, args.rounds)
            base = times["segcli sum (.npy)"][0]
            print(f"fresh processes, {args.rows:,} rows, median of {args.rounds} rounds:")
            for name, (seconds, cpu) in times.items():
                print(f"  {name:45} {seconds:7.2f} s  {seconds / base:5.2f}x sum  {cpu:6.2f} s CPU")
            print(f"  Parquet, segcli / duckdb: {_against(times, 'duckdb (Parquet)')}")
            if not args.skip_in_process:
                print(f"in process, {args.rows:,} rows, best of {args.rounds}:")
                for name, seconds in in_process(data, ids, ops, wanted, args.rounds).items():
                    print(f"  {name:45} {seconds:7.3f} s")
            for path in (data, ids, table):
                os.remove(path)
        if args.peak_rows:
            peak(args.peak_rows, ",".join(accepted_ops(wanted, folder)), folder)


if __name__ == "__main__":
    main()
