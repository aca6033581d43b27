"""``segcli --by`` end to end against polars and duckdb: the same Parquet file, fresh processes.

    python benchmarks/by_bench.py [--rows 30000000] [--rounds 3] [--distinct 1000000] [--skipna]
                                  [--part low|high|both]

1. Low cardinality: N rows with two string keys (20 carriers x 3 origins) and a float64 value;
   the mean per (carrier, origin) written as Parquet, by segcli (in memory), polars and duckdb,
   each a whole ``python`` process; rounds interleave the tools; the median is printed. The
   "read floor" is a process that imports what segcli imports and decodes the same columns
   with pyarrow, nothing more: what any segcli run of this file costs before its own work.
2. The same segcli run streamed with ``--memory-limit 256MB``: its peak resident memory.
3. High cardinality: one string key of ``--distinct`` values over the same number of rows,
   then the peak resident memory of segcli's run of it (and of the older tree's).

``--part``: only 1 and 2 (``low``) or only 3 (``high``), to keep each run short. Each figure is
the median wall time; the CPU time (user + system) of the same runs follows it, as the fairer
measure on a machine other jobs share.

``--skipna``: the issue's workload: about 2% of the values are null and segcli runs with
``--skipna`` (polars' ``mean`` and duckdb's ``avg`` skip nulls by themselves).

``--against TREE``: also runs the segcli package found in the folder TREE (an older copy, e.g.
``git archive REV segcli | tar -x -C TREE``) as a fourth tool in the same interleaved rounds:
old against new on the same machine, as ``benchmarks/BY_RESULTS.md`` reports them.

The children run without ``PYTHONDONTWRITEBYTECODE``: the warm-up run compiles segcli's
modules once, as installing compiles the peers' (an editable install compiles nothing).

Nothing is asserted; figures belong in ``BY_RESULTS.md`` with the day they were measured.
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

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from older import FROM_TREE, older_segcli

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


#: The read floor: a process with segcli's start-up imports that decodes the columns a ``--by``
#: run reads (as dictionaries the key columns segcli reads so, on Arrow's threads) and does
#: nothing else: no key encoding, no fold, no output. ``argv``: the file, then the data column
#: and the keys.
_READ_FLOOR = """
import sys
import segcli.cli, segcli.pipeline
import pyarrow as pa, pyarrow.parquet as pq
from segcli.io.keys import dictionary_columns
path, columns = sys.argv[1], sys.argv[2:]
schema = pq.ParquetFile(path).schema_arrow
keys = pa.schema([schema.field(name) for name in columns[1:]])
coded = dictionary_columns(pq.ParquetFile(path), keys)
parquet = pq.ParquetFile(path, read_dictionary=coded, pre_buffer=False)
for _ in parquet.iter_batches(batch_size=1 << 19, columns=columns):
    pass
"""


def write_table(path: str, rows: int, keys: dict[str, np.ndarray], nulls: bool) -> None:
    rng = np.random.default_rng(0)
    columns = {name: pa.array(values) for name, values in keys.items()}
    mask = rng.random(rows) < 0.02 if nulls else None
    columns["arr_delay"] = pa.array(rng.normal(5.0, 20.0, rows), mask=mask)
    pq.write_table(pa.table(columns), path, row_group_size=1 << 20)


def tools(
    path: str, by: list[str], out: str, skipna: bool, against: str | None = None
) -> dict[str, list[str]]:
    keys = ", ".join(by)
    polars = (
        "import polars as pl, sys; "
        f"pl.read_parquet({path!r}).group_by({by!r}).agg(pl.col('arr_delay').mean())"
        f".sort({by!r}, nulls_last=True).write_parquet({out + '.polars.parquet'!r})"
    )
    duck = (
        'import duckdb; duckdb.sql("COPY (SELECT '
        f"{keys}, avg(arr_delay) AS value FROM '{path}' GROUP BY {keys} ORDER BY {keys}) "
        f"TO '{out}.duckdb.parquet' (FORMAT parquet)\")"
    )
    segcli = ["-m", "segcli", "mean", path, "--data-column", "arr_delay", "--by", ",".join(by)]
    segcli += ["--skipna"] if skipna else []
    commands = {
        "segcli": [sys.executable, *segcli, "-q", "-o", out + ".segcli.parquet"],
        "polars": [sys.executable, "-c", polars],
        "duckdb": [sys.executable, "-c", duck],
        "read floor": [sys.executable, "-c", _READ_FLOOR, path, "arr_delay", *by],
    }
    if against is not None:
        commands["segcli (older)"] = older_segcli(
            against, [*segcli[2:], "-q", "-o", out + ".older.parquet"]
        )
    return commands


#: The children's environment: bytecode written and reused (see the module text).
CHILD_ENV = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


def timed(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, check=False, env=CHILD_ENV)
    if done.returncode != 0:
        raise SystemExit(f"{argv[:4]} failed: {done.stderr.decode()[-400:]}")
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu


def compare(title: str, commands: dict[str, list[str]], rounds: int) -> None:
    for argv in commands.values():
        timed(argv)  # warm: files in the page cache, kernels compiled
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, argv in commands.items():
            times[name].append(timed(argv))
    wall = {name: statistics.median(w for w, _ in values) for name, values in times.items()}
    cpu = {name: statistics.median(c for _, c in values) for name, values in times.items()}
    fastest_wall = min(wall["polars"], wall["duckdb"])
    fastest_cpu = min(cpu["polars"], cpu["duckdb"])
    print(f"\n{title}: median of {rounds} interleaved rounds, seconds")
    print("| tool | wall | / faster peer | CPU | / least peer CPU |\n|---|---:|---:|---:|---:|")
    for name in commands:
        print(
            f"| {name} | {wall[name]:.2f} | {wall[name] / fastest_wall:.2f} "
            f"| {cpu[name]:.2f} | {cpu[name] / fastest_cpu:.2f} |"
        )
    print(f"load average after: {os.getloadavg()[0]:.1f}", flush=True)


def streamed_peak(path: str, by: list[str], out: str, skipna: bool) -> tuple[float, float]:
    argv = [sys.executable, "-c", _PEAK, "mean", path, "--data-column", "arr_delay"]
    argv += ["--by", ",".join(by), "--memory-limit", "256MB", "-q", "-o", out + ".s.parquet"]
    argv += ["--skipna"] if skipna else []
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=CHILD_ENV)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-400:])
    return time.perf_counter() - started, int(done.stderr.splitlines()[-1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=30_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--distinct", type=int, default=1_000_000)
    parser.add_argument("--skipna", action="store_true", help="null values, segcli --skipna")
    parser.add_argument("--part", choices=("low", "high", "both"), default="both")
    parser.add_argument("--against", metavar="TREE", help="also run the segcli in TREE")
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    carriers = np.array([f"C{i:02d}" for i in range(20)])
    origins = np.array(["JFK", "LAX", "ORD"])
    # Drawn whatever the part, so that the high-cardinality file is the same in every run.
    low_keys = {
        "carrier": carriers[rng.integers(0, 20, args.rows)],
        "origin": origins[rng.integers(0, 3, args.rows)],
    }
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as folder:
        if args.part != "high":
            low_part(f"{folder}/flights.parquet", low_keys, args, folder)
        del low_keys
        if args.part != "low":
            high = f"{folder}/high.parquet"
            names = np.array([f"user-{i:07d}" for i in range(args.distinct)])
            users = {"user": names[rng.integers(0, args.distinct, args.rows)]}
            write_table(high, args.rows, users, args.skipna)
            compare(
                f"mean by user ({args.distinct:,} distinct strings)",
                tools(high, ["user"], f"{folder}/h", args.skipna, args.against),
                args.rounds,
            )
            high_peaks(high, f"{folder}/h", args)


def high_peaks(path: str, out: str, args: argparse.Namespace) -> None:
    """Peak RSS of segcli's high-cardinality run (streamed: its decoded size is over the
    threshold), and of the older tree's with ``--against``, alternating."""
    argv = ["mean", path, "--data-column", "arr_delay", "--by", "user", "-q"]
    argv += ["--skipna"] if args.skipna else []
    runs = {"segcli": [sys.executable, "-c", _PEAK, *argv, "-o", out + ".p.parquet"]}
    if args.against is not None:
        older = _PEAK.replace('runpy.run_module("segcli", run_name="__main__")', FROM_TREE)
        runs["segcli (older)"] = older_segcli(
            args.against, [*argv, "-o", out + ".po.parquet"], code=older
        )
    peaks: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(2):
        for name, command in runs.items():
            done = subprocess.run(
                command, capture_output=True, text=True, check=False, env=CHILD_ENV
            )
            if done.returncode != 0:
                raise SystemExit(done.stderr[-400:])
            peaks[name].append(int(done.stderr.splitlines()[-1]) / 1024)
    for name, values in peaks.items():
        print(
            f"{name}: peak RSS {max(values):.0f} MiB (of 2 runs: {values[0]:.0f}, {values[1]:.0f})"
        )


def low_part(path: str, keys: dict[str, np.ndarray], args: argparse.Namespace, folder: str) -> None:
    write_table(path, args.rows, keys, args.skipna)
    print(f"{args.rows:,} rows; {os.path.getsize(path) / 2**20:.0f} MiB of Parquet", flush=True)
    by = ["carrier", "origin"]
    compare(
        "mean by carrier, origin (60 groups)",
        tools(path, by, f"{folder}/o", args.skipna, args.against),
        args.rounds,
    )
    seconds, peak = streamed_peak(path, by, f"{folder}/o", args.skipna)
    print(
        f"\nstreamed with --memory-limit 256MB: {seconds:.2f} s, peak RSS {peak:.0f} MiB",
        flush=True,
    )


if __name__ == "__main__":
    main()
