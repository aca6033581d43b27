"""What a ``segcli`` process loads before it reads a row: start-up is a real part of a short run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

#: Runs the console script's entry point, then reports (at exit) what the process ended with.
_REPORT = """
import atexit, json, os, sys
def report():
    print(json.dumps({"blas": os.environ.get("OPENBLAS_NUM_THREADS"),
                      "purge": os.environ.get("MIMALLOC_PURGE_DELAY"),
                      "frozen": __import__("gc").get_freeze_count(),
                      "modules": sorted(sys.modules)}), file=sys.stderr)
atexit.register(report)
sys.argv = ["segcli", *sys.argv[1:]]
from segcli.__main__ import main
main()
"""


def _run(args: list[str], **env: str) -> tuple[int, dict[str, Any]]:
    ours = ("OPENBLAS_NUM_THREADS", "MIMALLOC_PURGE_DELAY")
    environ = {k: v for k, v in os.environ.items() if k not in ours}
    environ.update(env)
    done = subprocess.run(
        [sys.executable, "-c", _REPORT, *args], capture_output=True, text=True, env=environ
    )
    return done.returncode, json.loads(done.stderr.splitlines()[-1])


@pytest.fixture
def flights(tmp_path: Path) -> Path:
    path = tmp_path / "flights.parquet"
    table = pa.table(
        {"carrier": ["AA", "UA", "AA"], "origin": ["JFK", "JFK", "LAX"], "delay": [1.0, None, 3.0]}
    )
    pq.write_table(table, path)
    return path


def _by_run(path: Path) -> list[str]:
    out = str(path.with_name("out.parquet"))
    by = ["--by", "carrier,origin", "--skipna", "-q", "-o", out]
    return ["mean", str(path), "--data-column", "delay", *by]


def test_the_command_runs_numpy_with_one_blas_thread(flights: Path) -> None:
    code, seen = _run(_by_run(flights))
    assert code == 0
    assert seen["blas"] == "1"
    assert "numpy" in seen["modules"]  # numpy did load, after the setting


@pytest.mark.parametrize("good", [True, False], ids=["success", "error"])
def test_the_objects_of_a_run_are_left_out_of_the_collection_at_exit(
    flights: Path, good: bool
) -> None:
    """The interpreter's collection at exit would walk every object numba's import made; the
    command freezes them first, whatever the exit code, and its exit handlers still run."""
    args = _by_run(flights) if good else ["mean", str(flights), "--data-column", "nope"]
    code, seen = _run(args)
    assert code == (0 if good else 2)
    assert seen["frozen"] > 10_000


def test_a_users_blas_threads_are_kept(flights: Path) -> None:
    code, seen = _run(_by_run(flights), OPENBLAS_NUM_THREADS="3")
    assert code == 0
    assert seen["blas"] == "3"


def test_arrows_allocator_keeps_freed_blocks_unless_the_user_says_otherwise(
    flights: Path,
) -> None:
    code, seen = _run(_by_run(flights))
    assert code == 0 and seen["purge"] == "-1" and "pyarrow" in seen["modules"]
    code, seen = _run(_by_run(flights), MIMALLOC_PURGE_DELAY="100")
    assert code == 0 and seen["purge"] == "100"


def test_agg_of_mergeable_ops_loads_neither_the_sorting_ops_nor_the_keys(tmp_path: Path) -> None:
    """Modules a plain ``agg`` does not use stay unloaded (each costs start-up)."""
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": [0, 1, 1], "v": [1.0, 2.0, 3.0]}), path)
    out = str(tmp_path / "out.npz")
    args = ["agg", str(path), "--data-column", "v", "--ids-column", "id", "--op", "sum,mean"]
    code, seen = _run([*args, "-q", "-o", out])
    assert code == 0
    unused = {"segcli.holistic", "segcli.holistic_runs", "segcli.io.keys", "segcli.drivers.columns"}
    assert unused.isdisjoint(seen["modules"])
    code, seen = _run([*args[:-1], "sum,quantile", "--q", "0.5", "-q", "-o", out])
    assert code == 0 and "segcli.holistic_runs" in seen["modules"]  # quantile needs it


@pytest.mark.parametrize("columns", ["v", "v,w"])
def test_a_streamed_parquet_run_does_not_load_pandas(tmp_path: Path, columns: str) -> None:
    """pyarrow loads pandas (0.2 s) to build an array from a list: the streamed table reader
    makes its empty arrays without one."""
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": [0, 1, 1], "v": [1.0, 2.0, 3.0], "w": [1, 2, 3]}), path)
    out = str(tmp_path / "out.npz")
    args = ["agg", str(path), "--data-column", columns, "--ids-column", "id", "--op", "sum,max"]
    code, seen = _run([*args, "--chunk-rows", "2", "-q", "-o", out])
    assert code == 0
    assert "pandas" not in seen["modules"]


def test_a_plain_npy_run_does_not_load_numpy_ma(tmp_path: Path) -> None:
    """numpy.ma (about 8 ms) loads only where a masked array can exist."""
    import numpy as np

    np.save(tmp_path / "d.npy", np.arange(6, dtype=np.float32))
    np.save(tmp_path / "i.npy", np.array([0, 0, 1, 1, 2, 2], np.int32))
    args = ["sum", str(tmp_path / "d.npy"), str(tmp_path / "i.npy")]
    code, seen = _run([*args, "-q", "-o", str(tmp_path / "out.npy")])
    assert code == 0
    assert "numpy" in seen["modules"] and "numpy.ma" not in seen["modules"]


def test_a_plain_npy_run_loads_only_the_readers_and_writers_it_uses(tmp_path: Path) -> None:
    """segcli.io loads its modules as their names are used (about 6 ms of start-up)."""
    import numpy as np

    np.save(tmp_path / "d.npy", np.arange(6, dtype=np.float32))
    np.save(tmp_path / "i.npy", np.array([0, 0, 1, 1, 2, 2], np.int32))
    args = ["sum", str(tmp_path / "d.npy"), str(tmp_path / "i.npy")]
    code, seen = _run([*args, "-q", "-o", str(tmp_path / "out.npy")])
    assert code == 0 and "segcli.io.write" in seen["modules"]
    unused = {"segcli.io.chunked", "segcli.io.results", "segcli.io.atomic", "csv"}
    assert unused.isdisjoint(seen["modules"])


def test_the_io_names_load_on_first_use() -> None:
    from segcli import io
    from segcli.io.chunked import open_chunked
    from segcli.io.describe import describe

    assert io.open_chunked is open_chunked and io.describe is describe
    assert {name: getattr(io, name) for name in io.__all__}.keys() == set(io.__all__)
    with pytest.raises(AttributeError, match="no attribute 'bogus'"):
        io.bogus  # noqa: B018


@pytest.mark.parametrize("skipna", [[], ["--skipna"]], ids=["plain", "skipna"])
def test_a_parquet_agg_without_a_cast_does_not_load_pyarrow_compute(
    tmp_path: Path, skipna: list[str]
) -> None:
    """pyarrow.compute builds some 300 wrappers as it loads (about 25 ms): a column that needs
    no cast never loads it, and its nulls become NaN through the kernel called by name."""
    path = tmp_path / "t.parquet"
    values = [1.0, None, 3.0] if skipna else [1.0, 2.0, 3.0]
    pq.write_table(pa.table({"id": [0, 1, 1], "v": values}), path)
    args = ["agg", str(path), "--data-column", "v", "--ids-column", "id", "--op", "sum,mean"]
    code, seen = _run([*args, *skipna, "-q", "-o", str(tmp_path / "out.npz")])
    assert code == 0
    assert "pyarrow.compute" not in seen["modules"]
    assert {"pandas", "numpy.ma"}.isdisjoint(seen["modules"])


def test_decimal_and_dictionary_columns_cast_without_pyarrow_compute(tmp_path: Path) -> None:
    from decimal import Decimal

    import numpy as np
    import pyarrow.ipc as ipc

    path = tmp_path / "t.arrow"
    values = pa.array([Decimal("1.5"), Decimal("2"), Decimal("3")], pa.decimal128(5, 1))
    table = pa.table({"id": pa.array([0, 1, 1]).dictionary_encode(), "v": values})
    with ipc.new_file(path, table.schema) as writer:
        writer.write_table(table)
    out = tmp_path / "out.npy"
    args = ["sum", str(path), "--data-column", "v", "--ids-column", "id", "-q", "-o", str(out)]
    code, seen = _run(args)
    assert code == 0 and "pyarrow.compute" not in seen["modules"]
    assert np.load(out).tolist() == [1.5, 5.0]


def test_a_null_error_does_not_load_pandas(tmp_path: Path) -> None:
    """Finding the first null took pyarrow's index with a Python True, built through pandas."""
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": [0, 1, 1, 0], "v": [1.0, 2.0, None, None]}), path)
    out = tmp_path / "out.npy"
    args = ["sum", str(path), "--data-column", "v", "--ids-column", "id", "-q", "-o", str(out)]
    done = subprocess.run(
        [sys.executable, "-c", _REPORT, *args], capture_output=True, text=True, env=os.environ
    )
    lines = done.stderr.splitlines()
    assert done.returncode == 1 and not out.exists()
    assert lines[:-1] == [f"Error: {path}: column 'v' has 2 nulls (first at row 2)"]
    assert "pandas" not in json.loads(lines[-1])["modules"]


def test_a_command_builds_only_its_own_op_command(tmp_path: Path) -> None:
    """Each op command carries some 35 click options: only the one run is built."""
    import numpy as np

    np.save(tmp_path / "d.npy", np.arange(4, dtype=np.float32))
    np.save(tmp_path / "i.npy", np.array([0, 0, 1, 1], np.int32))
    args = ["sum", str(tmp_path / "d.npy"), str(tmp_path / "i.npy"), "-q"]
    done = subprocess.run(
        [sys.executable, "-c", _BUILT, *args, "-o", str(tmp_path / "o.npy")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0
    assert json.loads(done.stderr.splitlines()[-1]) == ["agg", "check", "info", "sum"]


#: Runs the entry point, then reports (at exit) the commands the group had built.
_BUILT = """
import atexit, json, sys
built = lambda: sorted(sys.modules["segcli.cli"].cli.commands)
atexit.register(lambda: print(json.dumps(built()), file=sys.stderr))
sys.argv = ["segcli", *sys.argv[1:]]
from segcli.__main__ import main
main()
"""
