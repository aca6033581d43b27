"""Edges of ``--skipna``: a list column whose rows themselves are null (not their elements) is,
under ``--skipna``, a row of missing values for every op, in memory and streamed; and an
``--indices`` column holding a null and a float value fails with one error, whole or streamed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from segcli.cli import cli
from tests.matrix import default_run

NAN = float("nan")
#: Null rows first (the row that fixes a streamed list's length is the first one not null),
#: and a run of them filling a whole block of --chunk-rows 1 and 2.
LISTS: list[Any] = [
    None,
    [1.0, 2.0],
    None,
    None,
    [3.0, NAN],
    [None, 4.0],
    None,
    [5.0, 6.0],
    [7.0, -8.0],
    None,
    [2.0, 2.0],
]
IDS = [0, 0, 1, 1, 1, 2, 2, 0, 3, 1, 0]
OPS = "sum,mean,count,min,max,first,argmax,median,quantile,nunique"
CHUNKS = [[], ["--chunk-rows", "1"], ["--chunk-rows", "2"], ["--chunk-rows", "5"]]


def run(*args: Any) -> Any:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def list_type(kind: str, value: pa.DataType) -> pa.DataType:
    return pa.list_(value, 2) if kind == "fixed" else pa.list_(value)


def values(dtype: str, missing_row: list[Any] | None) -> list[Any]:
    """LISTS in ``dtype`` (NaN a null in integers), each null row replaced by ``missing_row``."""
    rows = [missing_row if row is None else row for row in LISTS]
    if dtype == "float64":
        return rows
    return [
        None if row is None else [None if v is None or v != v else int(v) for v in row]
        for row in rows
    ]


def write(path: Path, lists: list[Any], type_: pa.DataType) -> Path:
    table = pa.table({"v": pa.array(lists, type_), "k": pa.array(IDS, pa.int64())})
    if path.suffix == ".parquet":
        pq.write_table(table, path, row_group_size=3)
    else:
        feather.write_feather(table, path, chunksize=3)
    return path


def agg(path: Path, out: Path, *options: Any) -> Any:
    args = ["agg", path, "--data-column", "v", "--ids-column", "k", "--op", OPS, "--q", "0.5"]
    return run(*args, "--skipna", *options, "-o", out)


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
@pytest.mark.parametrize("kind", ["variable", "fixed"])
@pytest.mark.parametrize("dtype", ["float64", "int64"])
def test_a_null_list_is_a_row_of_missing_values(
    tmp_path: Path, suffix: str, kind: str, dtype: str
) -> None:
    type_ = list_type(kind, pa.from_numpy_dtype(dtype))
    # The oracle: the same rows, each null list written as a list of nulls.
    spelled = write(tmp_path / f"spelled{suffix}", values(dtype, [None, None]), type_)
    expected = tmp_path / "expected.parquet"
    assert agg(spelled, expected).exit_code == 0
    path = write(tmp_path / f"t{suffix}", values(dtype, None), type_)
    for i, chunks in enumerate(CHUNKS):
        out = tmp_path / f"out{i}.parquet"
        summary = tmp_path / f"summary{i}.json"
        result = agg(path, out, *chunks, "--summary-json", summary)
        assert result.exit_code == 0, result.output
        assert out.read_bytes() == expected.read_bytes(), chunks
        assert json.loads(summary.read_text())["skipped"]["values"] == 12  # 5 lists of 2, 2 more


@pytest.mark.parametrize("op", ["median", "nunique"])
def test_null_lists_through_tmp_dir_partitions(tmp_path: Path, op: str) -> None:
    rows = 400
    lists = [None if i % 7 in (0, 3) else [float(i % 13), float(-i)] for i in range(rows)]
    ids = [i % 11 for i in range(rows)]
    path = tmp_path / "t.parquet"
    table = pa.table({"v": pa.array(lists, pa.list_(pa.float32())), "k": ids})
    pq.write_table(table, path, row_group_size=50)
    common = [op, path, "--data-column", "v", "--ids-column", "k", "--skipna"]
    in_memory, partitioned = tmp_path / "a.npy", tmp_path / "b.npy"
    assert run(*common, "-o", in_memory).exit_code == 0
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    summary = tmp_path / "summary.json"
    limit = ["--memory-limit", "2KB", "--tmp-dir", scratch, "--summary-json", summary]
    result = run(*common, *limit, "-o", partitioned)
    assert result.exit_code == 0, result.output
    assert partitioned.read_bytes() == in_memory.read_bytes()
    assert json.loads(summary.read_text())["mode"] == "streaming"


@pytest.mark.parametrize("chunks", CHUNKS)
def test_without_skipna_a_null_list_stays_an_error(tmp_path: Path, chunks: list[str]) -> None:
    path = write(tmp_path / "t.parquet", values("float64", None), pa.list_(pa.float64()))
    out = tmp_path / "out.npy"
    result = run("sum", path, "--data-column", "v", "--ids-column", "k", *chunks, "-o", out)
    assert result.exit_code == 1
    # Every null counted, the first named, however the rows are read.
    message = "has 5 null lists and 1 null inside its lists (first at row 0)"
    assert result.stderr == f"Error: {path}: column 'v' {message}\n"
    assert not out.exists()


# --- an --indices column holding a null and a float value --------------------------------------

ROWS = 300_000  # beyond a text file's first block: its type is fixed from whole numbers


def indices_file(tmp_path: Path, suffix: str, null_row: int, float_row: int) -> Path:
    tokens: list[Any] = [i % 10 for i in range(ROWS)]
    tokens[null_row], tokens[float_row] = None, 3.5
    path = tmp_path / f"idx{suffix}"
    if suffix == ".parquet":
        pq.write_table(pa.table({"tok": pa.array(tokens, pa.float64())}), path, row_group_size=7000)
    elif suffix == ".csv":
        # Two columns: a line with one empty field would be an empty line, which CSV skips.
        rows = (f"{i},{'' if t is None else t}\n" for i, t in enumerate(tokens))
        path.write_text("row,tok\n" + "".join(rows))
    else:
        path.write_text("".join(json.dumps({"tok": t}) + "\n" for t in tokens))
    return path


# Each format either way round; with and without --skipna for Parquet (the other readers
# report their rows through the same check), the rest in the full matrix.
@default_run(lambda suffix, skipna: suffix == ".parquet" or not skipna)
@pytest.mark.parametrize("skipna", [[], ["--skipna"]])
@pytest.mark.parametrize(("null_row", "float_row"), [(5, 250_000), (250_000, 5)])
@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_indices_with_a_null_and_a_float_fail_alike_whole_and_streamed(
    tmp_path: Path, suffix: str, null_row: int, float_row: int, skipna: list[str]
) -> None:
    import numpy as np

    np.save(tmp_path / "data.npy", np.arange(20.0).reshape(10, 2))
    np.save(tmp_path / "ids.npy", np.arange(ROWS) // 2)
    path = indices_file(tmp_path, suffix, null_row, float_row)
    out = tmp_path / "out.npy"
    args = ["sum", tmp_path / "data.npy", tmp_path / "ids.npy", "--indices", path]
    args += ["--indices-column", "tok", *skipna, "-q", "-o", out]
    why = " (--skipna leaves out missing data values only)" if skipna else ""
    expected = (
        f"Error: {path}: column 'tok' has 1 null (first at row {null_row}): --indices needs an "
        f"index on every row{why}\n"
    )
    for how in (["--memory-limit", "64GB"], ["--chunk-rows", "1000"]):
        result = run(*args, *how)
        assert result.exit_code == 1
        assert result.stderr == expected, how
        assert not out.exists()
