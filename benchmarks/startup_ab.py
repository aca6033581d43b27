"""Start-up of whole ``segcli`` processes: this checkout against an older copy, interleaved.

    python benchmarks/startup_ab.py --against TREE [--rounds 7] [--big FILE | --big-rows N]

TREE is a folder holding an older ``segcli`` package, e.g.
``mkdir OLD && git archive REV segcli | tar -x -C OLD``. Each round runs every command once
from each tree, alternating, each a fresh ``python`` process; the medians of wall time and of
CPU (user + system of the child, the steadier figure on a shared machine) are printed, with
the new/old ratio. Tiny inputs (written to a temporary folder) make the run all start-up:

- ``sum`` of a 10-row ``.npy`` pair;
- ``mean --by carrier,origin --skipna`` of a 5-row Parquet file, Parquet out;
- ``agg --op sum,mean`` of the same file's value column by an integer id column, ``.npz`` out.

``--big FILE``: also the issue's ``--by`` run on FILE, a Parquet file with ``carrier``,
``origin`` and ``arr_delay`` columns. ``--big-rows N`` writes such a file first, as
``by_bench.py --skipna`` does (20 carriers x 3 origins, 2% of the values null; the issue's
figures use 30,000,000 rows, 259 MiB, some 20 s to write).

Both trees' modules are compiled first and the children may not write bytecode, so neither
pays for compiling. Every output of the two trees is compared byte for byte; a difference is
reported. Nothing is asserted otherwise; figures belong in ``BY_RESULTS.md``.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

#: Runs the ``segcli`` package of the first folder on PYTHONPATH (``-P``: no current folder
#: ahead of it), after checking that it is.
_FROM_TREE = (
    "import os, runpy, sys, segcli; "
    "assert segcli.__file__.startswith(os.environ['PYTHONPATH']), segcli.__file__; "
    "sys.argv = ['segcli', *sys.argv[1:]]; "
    "runpy.run_module('segcli', run_name='__main__')"
)


def write_inputs(folder: Path) -> None:
    np.save(folder / "data.npy", np.arange(10, dtype=np.float32))
    np.save(folder / "ids.npy", np.repeat(np.arange(5, dtype=np.int32), 2))
    table = pa.table(
        {
            "carrier": ["AA", "UA", "AA", "DL", "UA"],
            "origin": ["JFK", "JFK", "LAX", "SFO", "SFO"],
            "id": np.array([0, 1, 1, 2, 0], np.int64),
            "arr_delay": pa.array(np.array([1.0, 2.0, 3.0, 4.0, 5.0]), mask=np.arange(5) == 1),
        }
    )
    pq.write_table(table, folder / "tiny.parquet")


def write_flights(path: str, rows: int) -> None:
    """``by_bench.py``'s low-cardinality file, drawn the same way."""
    sys.path.insert(0, str(Path(__file__).parent))
    from by_bench import write_table

    rng = np.random.default_rng(1)
    carriers = np.array([f"C{i:02d}" for i in range(20)])
    origins = np.array(["JFK", "LAX", "ORD"])
    keys = {
        "carrier": carriers[rng.integers(0, 20, rows)],
        "origin": origins[rng.integers(0, 3, rows)],
    }
    write_table(path, rows, keys, nulls=True)


def commands(folder: Path, big: str | None) -> dict[str, list[str]]:
    by = ["--data-column", "arr_delay", "--by", "carrier,origin", "--skipna", "-q"]
    runs = {
        "sum, 10-row .npy": ["sum", f"{folder}/data.npy", f"{folder}/ids.npy", "-q"],
        "mean --by --skipna, 5 rows": ["mean", f"{folder}/tiny.parquet", *by],
        "agg sum,mean from Parquet, 5 rows": [
            *["agg", f"{folder}/tiny.parquet", "--data-column", "arr_delay"],
            *["--ids-column", "id", "--op", "sum,mean", "--skipna", "-q"],
        ],
    }
    suffixes = {"sum, 10-row .npy": "npy", "agg sum,mean from Parquet, 5 rows": "npz"}
    if big is not None:
        runs["mean --by --skipna, --big file"] = ["mean", big, *by]
    return {
        name: [*args, "-o", f"{folder}/{{tree}}-{index}.{suffixes.get(name, 'parquet')}"]
        for index, (name, args) in enumerate(runs.items())
    }


def run_once(tree: str, args: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one child process; its failure stops the benchmark."""
    environ = {**os.environ, "PYTHONPATH": tree, "PYTHONDONTWRITEBYTECODE": "1"}
    started = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-P", "-c", _FROM_TREE, *args], env=environ, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    assert child.stderr is not None
    if child.returncode:
        sys.exit(f"{tree}: segcli {' '.join(args)} failed: {child.stderr.read().decode()}")
    child.stderr.close()
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", metavar="TREE", required=True)
    parser.add_argument("--rounds", type=int, default=7)
    big = parser.add_mutually_exclusive_group()
    big.add_argument("--big", metavar="FILE")
    big.add_argument("--big-rows", type=int, metavar="N")
    args = parser.parse_args()
    trees = {"old": os.path.abspath(args.against), "new": str(Path(__file__).parents[1])}
    if not Path(trees["old"], "segcli", "__main__.py").is_file():
        sys.exit(f"--against {args.against}: no segcli package in that folder")
    for tree in trees.values():
        compileall.compile_dir(f"{tree}/segcli", quiet=1)
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(temp)
        write_inputs(folder)
        if args.big_rows:
            args.big = str(folder / "flights.parquet")
            write_flights(args.big, args.big_rows)
        runs = commands(folder, args.big)
        seen: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for _ in range(args.rounds):
            for name, command in runs.items():
                for label, tree in trees.items():
                    argv = [part.replace("{tree}", label) for part in command]
                    seen.setdefault((name, label), []).append(run_once(tree, argv))
        print(f"{args.rounds} rounds, medians, seconds; load average {os.getloadavg()[0]:.1f}")
        print("| run | old wall | new wall | old CPU | new CPU | new/old CPU |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, command in runs.items():
            old, new = (seen[(name, label)] for label in trees)
            walls = [statistics.median(w for w, _ in times) for times in (old, new)]
            cpus = [statistics.median(c for _, c in times) for times in (old, new)]
            ratio = cpus[1] / cpus[0]
            print(
                f"| {name} | {walls[0]:.3f} | {walls[1]:.3f} | {cpus[0]:.3f} | {cpus[1]:.3f} "
                f"| {ratio:.2f} |"
            )
            outputs = [Path(command[-1].replace("{tree}", label)) for label in trees]
            if contents(outputs[0]) != contents(outputs[1]):
                print(f"  outputs differ: {outputs[0].name} and {outputs[1].name}")


def contents(path: Path) -> object:
    """A file's bytes; an ``.npz`` file's arrays (its zip entries carry the time written)."""
    if path.suffix != ".npz":
        return path.read_bytes()
    with np.load(path) as arrays:
        return {name: (arrays[name].dtype.str, arrays[name].tobytes()) for name in arrays.files}


if __name__ == "__main__":
    main()
