"""Edges of median, quantile and nunique: signed zeros, --tmp-dir, nulls in int and bool list
columns under --skipna, --indices with int nulls, and repeated single-valued options."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from segcli.cli import cli


def run(*args: object) -> Any:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def error_lines(result: Any) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("Error:")]


# --- median of signed zeros ------------------------------------------------------------------

#: Each segment's middle values are zeros of both signs (or only -0.0): np.median gives +0.0.
ZERO_SEGMENTS = [[-0.0, 0.0], [0.0, -0.0], [-0.0], [-0.0, -0.0], [-1.0, -0.0, 0.0, 1.0]]

PATHS = {
    "numpy": ["--engine", "numpy"],
    "numba": ["--engine", "numba"],
    "sorted stream": ["--sorted", "--chunk-rows", "2"],
    "partitioned": ["--chunk-rows", "2", "--tmp-dir", "{scratch}"],
}


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("path", list(PATHS))
def test_median_of_signed_zeros_is_numpys(tmp_path: Path, dtype: str, path: str) -> None:
    data = np.concatenate([np.array(seg, dtype) for seg in ZERO_SEGMENTS])
    ids = np.repeat(np.arange(len(ZERO_SEGMENTS)), [len(seg) for seg in ZERO_SEGMENTS])
    np.save(tmp_path / "data.npy", data)
    np.save(tmp_path / "ids.npy", ids)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    options = [a.format(scratch=scratch) for a in PATHS[path]]
    out = tmp_path / "out.npy"
    result = run("median", tmp_path / "data.npy", tmp_path / "ids.npy", *options, "-o", out)
    assert result.exit_code == 0, result.stderr
    want = np.array([np.median(np.array(seg, dtype)) for seg in ZERO_SEGMENTS], dtype)
    got = np.load(out)
    assert got.tobytes() == want.tobytes()
    assert not np.signbit(got).any()


# --- --tmp-dir ----------------------------------------------------------------------------------


def _pair(tmp_path: Path, ids: np.ndarray) -> tuple[Path, Path]:
    np.save(tmp_path / "data.npy", np.arange(len(ids), dtype=np.float32))
    np.save(tmp_path / "ids.npy", ids)
    return tmp_path / "data.npy", tmp_path / "ids.npy"


@pytest.mark.parametrize("what", ["no such directory", "not a directory", "not writable"])
def test_a_bad_tmp_dir_is_one_line_and_exit_5(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    where = tmp_path / "scratch"
    if what == "not a directory":
        where.write_text("")
    elif what == "not writable":
        where.mkdir()
        where.chmod(0o555)
        real_access = os.access  # root may write anywhere: answer as for any other user
        monkeypatch.setattr(os, "access", lambda p, m: str(p) != str(where) and real_access(p, m))
    out = tmp_path / "out.npy"
    result = run(
        "median",
        *_pair(tmp_path, np.arange(20) % 3),
        "--chunk-rows",
        4,
        "--tmp-dir",
        where,
        "-o",
        out,
    )
    assert result.exit_code == 5
    assert error_lines(result) == [f"Error: --tmp-dir {where}: {what}"]
    assert not out.exists()


def test_partition_files_are_made_only_for_kept_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every id is negative, so no row goes to a partition: no directory is made at all."""
    import tempfile

    made: list[str] = []
    real_mkdtemp = tempfile.mkdtemp

    def mkdtemp(*args: Any, **kwargs: Any) -> str:
        made.append(real_mkdtemp(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    out = tmp_path / "out.npy"
    paths = _pair(tmp_path, np.full(20, -1))
    result = run("median", *paths, "-n", 2, "--chunk-rows", 4, "--tmp-dir", scratch, "-o", out)
    assert result.exit_code == 0, result.stderr
    assert made == [] and np.load(out).tolist() == [0.0, 0.0]
    result = run(
        "median",
        *_pair(tmp_path, np.arange(20) % 3),
        "--chunk-rows",
        4,
        "--tmp-dir",
        scratch,
        "-o",
        out,
    )
    assert result.exit_code == 0, result.stderr
    assert len(made) == 1 and list(scratch.iterdir()) == []


# --- --skipna over nulls inside integer and bool list columns ------------------------------------


def _reference(values: list[list[Any]], ids: np.ndarray, n: int, op: str) -> np.ndarray:
    """Each segment's op over its present values, element by element (a plain loop)."""
    width = len(values[0])
    out = np.zeros((n, width), np.int64 if op == "nunique" else np.float64)
    for s in range(n):
        for col in range(width):
            present = [values[r][col] for r in np.flatnonzero(ids == s)]
            present = [v for v in present if v is not None]
            if not present:
                continue
            if op == "nunique":
                out[s, col] = len(set(present))
            elif op == "median":
                out[s, col] = np.median(np.array(present, np.int64))
            else:
                out[s, col] = np.quantile(np.array(present, np.int64), 0.3)
    return out


@pytest.mark.parametrize(
    ("kind", "op"),
    [("int", "median"), ("int", "quantile"), ("int", "nunique"), ("bool", "nunique")],
)
@pytest.mark.parametrize("path", ["in memory", "partitioned", "sorted stream", "memory limit"])
def test_skipna_leaves_out_nulls_inside_integer_and_bool_lists(
    tmp_path: Path, kind: str, op: str, path: str
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(7)
    rows, n = 300, 9
    ids = np.sort(rng.integers(0, n, rows)) if path == "sorted stream" else rng.integers(0, n, rows)
    raw = rng.integers(-5, 6, (rows, 3))
    values: list[list[Any]] = [
        [None if rng.random() < 0.3 else (bool(v % 2) if kind == "bool" else int(v)) for v in row]
        for row in raw
    ]
    values[0] = [None, None, None]  # a row of only nulls
    arrow_type = pa.bool_() if kind == "bool" else pa.int64()
    table = pa.table({"x": pa.array(values, pa.list_(arrow_type)), "seg": ids})
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=40)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    options = {
        "in memory": [],
        "partitioned": ["--chunk-rows", 17, "--tmp-dir", scratch],
        "sorted stream": ["--sorted", "--chunk-rows", 17],
        "memory limit": ["--memory-limit", "2KB", "--tmp-dir", scratch],
    }[path]
    q = ["--q", 0.3] if op == "quantile" else []
    out = tmp_path / "out.npy"
    args = [tmp_path / "t.parquet", "--data-column", "x", "--ids-column", "seg", "--skipna"]
    result = run(op, *args, *q, "-n", n, *options, "-o", out)
    assert result.exit_code == 0, result.stderr
    np.testing.assert_array_equal(np.load(out), _reference(values, ids, n, op))
    assert list(scratch.iterdir()) == []


# --- --indices with --skipna over integer nulls -------------------------------------------------


@pytest.mark.parametrize("op", ["median", "quantile", "nunique"])
@pytest.mark.parametrize("layout", ["scalar", "list"])
@pytest.mark.parametrize("streamed", [False, True])
def test_indices_with_skipna_leave_out_integer_nulls(
    tmp_path: Path, op: str, layout: str, streamed: bool
) -> None:
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(11)
    rows, bags, n = 40, 120, 6
    if layout == "scalar":
        values: list[list[Any]] = [
            [None if rng.random() < 0.3 else int(v)] for v in rng.integers(-4, 5, rows)
        ]
        column = pa.array([row[0] for row in values], pa.int64())
    else:
        values = [
            [None if rng.random() < 0.3 else int(v) for v in row]
            for row in rng.integers(-4, 5, (rows, 2))
        ]
        column = pa.array(values, pa.list_(pa.int64()))
    pq.write_table(pa.table({"x": column}), tmp_path / "d.parquet")
    indices = rng.integers(0, rows, bags)  # rows gathered more than once, or never
    ids = np.sort(rng.integers(0, n, bags))
    np.save(tmp_path / "ids.npy", ids)
    np.save(tmp_path / "idx.npy", indices)
    gathered = [values[i] for i in indices]
    out, summary = tmp_path / "out.npy", tmp_path / "summary.json"
    result = run(
        op, tmp_path / "d.parquet", tmp_path / "ids.npy", "--indices", tmp_path / "idx.npy",
        "--data-column", "x", "--skipna", "-n", n, *(["--q", 0.3] if op == "quantile" else []),
        *(["--chunk-rows", 7] if streamed else []), "--summary-json", summary, "-o", out,
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    want = _reference(gathered, ids, n, op)
    np.testing.assert_array_equal(np.load(out).reshape(want.shape), want)
    facts = json.loads(summary.read_text())
    assert facts["mode"] == ("streaming" if streamed else "in-memory")
    assert facts["skipped"]["values"] == sum(v is None for row in gathered for v in row)


# --- an option that takes one value, given twice ----------------------------------------------


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["agg", "--op", "sum", "--op", "mean"],
            "Error: --op was given more than once (sum, mean); it takes one value (several "
            "in one: --op sum,mean) (see 'segcli agg --help')",
        ),
        (
            ["quantile", "--q", "0.1", "--q=0.5"],
            "Error: --q was given more than once (0.1, 0.5); it takes one value "
            "(see 'segcli quantile --help')",
        ),
        (
            ["agg", "--op", "quantile", "--q", "0.1", "--q", "0.5"],
            "Error: --q was given more than once (0.1, 0.5); it takes one value "
            "(see 'segcli agg --help')",
        ),
        (
            ["median", "-n", "4", "-n5"],
            "Error: --num-segments was given more than once (4, 5); it takes one value "
            "(see 'segcli median --help')",
        ),
    ],
)
def test_an_option_given_twice_is_refused(tmp_path: Path, args: list[str], line: str) -> None:
    from tests.entry import run_main

    out = tmp_path / "out.npy"
    command, *options = args
    result = run_main(command, "sample_data/data.npy", "sample_data/ids.npy", *options, "-o", out)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [line]
    assert not out.exists()


def test_flags_may_repeat(tmp_path: Path) -> None:
    out = tmp_path / "out.npy"
    result = run("median", "sample_data/data.npy", "sample_data/ids.npy", "-q", "-q", "-o", out)
    assert result.exit_code == 0, result.stderr
