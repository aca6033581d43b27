"""A streamed run that meets a null names every null of the column, as a whole read does: the
rest of the input is counted (not folded) once the first null fails the run."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.feather as feather
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from segcli.cli import cli
from segcli.io import columns

ROWS = 30
CHUNKS = [["--chunk-rows", "1"], ["--chunk-rows", "4"], ["--chunk-rows", "7"]]


def run(*args: Any, stdin: bytes | None = None) -> Any:
    return CliRunner().invoke(cli, [str(a) for a in args], input=stdin, catch_exceptions=False)


def values() -> list[float | None]:
    """Ten nulls, the first at row 1, spread over every block of the chunk sizes above."""
    return [None if i % 3 == 1 else float(i) for i in range(ROWS)]


def ids() -> list[int | None]:
    """Six null ids, the first at row 2."""
    return [None if i % 5 == 2 else i % 4 for i in range(ROWS)]


def table(v: list[Any], k: list[Any], w: list[Any] | None = None) -> pa.Table:
    columns = {"v": pa.array(v, pa.float64()), "k": pa.array(k, pa.int64())}
    if w is not None:
        columns["w"] = pa.array(w, pa.float64())
    return pa.table(columns)


def write(t: pa.Table, path: Path) -> Path:
    if path.suffix == ".parquet":
        pq.write_table(t, path, row_group_size=5)  # row groups across the blocks
    elif path.suffix == ".arrow":
        feather.write_feather(t, path, chunksize=5)
    elif path.suffix == ".csv":
        pcsv.write_csv(t, path)
    else:
        rows = t.to_pylist()
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def one_error(result: Any, message: str, out: Path) -> None:
    assert result.exit_code == 1, result.output
    assert result.stderr == f"Error: {message}\n"
    assert not out.exists()


@pytest.mark.parametrize("suffix", [".parquet", ".arrow", ".csv", ".jsonl"])
@pytest.mark.parametrize("chunks", [[], *CHUNKS])
def test_streamed_data_nulls_are_all_counted(
    tmp_path: Path, suffix: str, chunks: list[str]
) -> None:
    path = write(table(values(), [i % 4 for i in range(ROWS)]), tmp_path / f"t{suffix}")
    out = tmp_path / "out.npy"
    result = run("sum", path, "--data-column", "v", "--ids-column", "k", *chunks, "-o", out)
    one_error(result, f"{path}: column 'v' has 10 nulls (first at row 1)", out)


@pytest.mark.parametrize("suffix", [".parquet", ".arrow", ".csv"])
@pytest.mark.parametrize("chunks", [[], *CHUNKS])
def test_streamed_id_nulls_are_all_counted(tmp_path: Path, suffix: str, chunks: list[str]) -> None:
    path = write(table([float(i) for i in range(ROWS)], ids()), tmp_path / f"t{suffix}")
    out = tmp_path / "out.npy"
    result = run("sum", path, "--data-column", "v", "--ids-column", "k", *chunks, "-o", out)
    one_error(result, f"{path}: column 'k' has 6 nulls (first at row 2)", out)


@pytest.mark.parametrize("chunks", [[], *CHUNKS])
def test_streamed_nulls_in_separate_files_are_all_counted(
    tmp_path: Path, chunks: list[str]
) -> None:
    data = write(table(values(), [0] * ROWS), tmp_path / "d.parquet")
    keys = write(table([0.0] * ROWS, [i % 4 for i in range(ROWS)]), tmp_path / "i.arrow")
    out = tmp_path / "out.npy"
    result = run("mean", data, keys, "--data-column", "v", "--ids-column", "k", *chunks, "-o", out)
    one_error(result, f"{data}: column 'v' has 10 nulls (first at row 1)", out)


def with_nulls(values: list[Any], rows: set[int]) -> list[Any]:
    return [None if i in rows else value for i, value in enumerate(values)]


# (DATA's null rows, IDS' null rows, the error): IDS' first null before DATA's, in a block
# before or the same; DATA's before IDS' in the same block (IDS' block is read first); a tie.
EARLIEST = [
    ({12, 25}, {10, 20}, "'k' has 2 nulls (first at row 10)"),
    ({9, 25}, {10, 20}, "'v' has 2 nulls (first at row 9)"),
    ({10, 25}, {10}, "'v' has 2 nulls (first at row 10)"),
]


@pytest.mark.parametrize(("data_nulls", "ids_nulls", "message"), EARLIEST)
@pytest.mark.parametrize("suffix", [".parquet", ".arrow", ".csv", ".jsonl"])
@pytest.mark.parametrize("chunks", [[], *CHUNKS])
def test_the_earliest_null_of_data_and_ids_is_named(
    tmp_path: Path,
    data_nulls: set[int],
    ids_nulls: set[int],
    message: str,
    suffix: str,
    chunks: list[str],
) -> None:
    """Whole or streamed, whatever the block size, the column of the first null row is named
    (DATA's on a tie), with every null of it counted."""
    v = with_nulls([float(i) for i in range(ROWS)], data_nulls)
    k = with_nulls([i % 4 for i in range(ROWS)], ids_nulls)
    path = write(table(v, k), tmp_path / f"t{suffix}")
    out = tmp_path / "out.npy"
    result = run("sum", path, "--data-column", "v", "--ids-column", "k", *chunks, "-o", out)
    one_error(result, f"{path}: column {message}", out)


@pytest.mark.parametrize(("data_nulls", "ids_nulls", "message"), EARLIEST[:2])
@pytest.mark.parametrize("chunks", [[], *CHUNKS])
def test_the_earliest_null_of_data_and_ids_files_is_named(
    tmp_path: Path, data_nulls: set[int], ids_nulls: set[int], message: str, chunks: list[str]
) -> None:
    v = with_nulls([float(i) for i in range(ROWS)], data_nulls)
    k = with_nulls([i % 4 for i in range(ROWS)], ids_nulls)
    data = write(table(v, [0] * ROWS), tmp_path / "d.parquet")
    keys = write(table([0.0] * ROWS, k), tmp_path / "i.arrow")
    out = tmp_path / "out.parquet"
    for command in (["sum"], ["agg", "--op", "sum,mean"]):
        result = run(
            *command, data, keys, "--data-column", "v", "--ids-column", "k", *chunks, "-o", out
        )
        named = data if message.startswith("'v'") else keys
        one_error(result, f"{named}: column {message}", out)


def agg_fails(path: Path, v: list[Any], w: list[Any], args: list[Any], message: str) -> None:
    """``agg --op OPS --data-column COLUMNS [CHUNKS]`` (``args``) over a table of ``v``, ids
    and ``w`` written to ``path`` fails naming ``message``'s column, and writes nothing."""
    path = write(table(v, [i % 4 for i in range(ROWS)], w), path)
    out = path.parent / "out.parquet"
    ops, columns, *chunks = args
    result = run(
        "agg", path, "--op", ops, "--data-column", columns, "--ids-column", "k", *chunks, "-o", out
    )
    one_error(result, f"{path}: column {message}", out)


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
@pytest.mark.parametrize("chunks", [[], *CHUNKS])
def test_agg_names_the_column_of_the_first_null(
    tmp_path: Path, suffix: str, chunks: list[str]
) -> None:
    """Several data columns: the later column's null comes first, in the same block."""
    v = with_nulls([float(i) for i in range(ROWS)], {10, 25})
    w = with_nulls([float(i) for i in range(ROWS)], {9, 20, 29})
    agg_fails(
        tmp_path / f"t{suffix}", v, w, ["sum", "v,w", *chunks], "'w' has 3 nulls (first at row 9)"
    )


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
@pytest.mark.parametrize("chunks", [[], *CHUNKS])
def test_agg_of_several_columns_counts_every_null(
    tmp_path: Path, suffix: str, chunks: list[str]
) -> None:
    w = [float(i) for i in range(ROWS)]
    args = ["sum,mean", "w,v", *chunks]
    agg_fails(tmp_path / f"t{suffix}", values(), w, args, "'v' has 10 nulls (first at row 1)")


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
@pytest.mark.parametrize("chunks", [[], *CHUNKS])
def test_a_null_in_the_first_row_is_counted_with_the_rest(
    tmp_path: Path, suffix: str, chunks: list[str]
) -> None:
    """A streamed column's first row fixes its shape and dtype; its null is counted with the
    column's others, not alone."""
    v = values()
    v[0] = None
    w = [1.0] * ROWS
    agg_fails(
        tmp_path / f"t{suffix}", v, w, ["sum", "w,v", *chunks], "'v' has 11 nulls (first at row 0)"
    )


@pytest.mark.parametrize("first_null", [0, 9])
@pytest.mark.parametrize("suffix", [".parquet", ".arrow", ".csv", ".jsonl"])
@pytest.mark.parametrize("chunks", [[], *CHUNKS])
def test_the_inputs_metadata_are_checked_before_their_nulls(
    tmp_path: Path, first_null: int, suffix: str, chunks: list[str]
) -> None:
    """A dtype the op refuses, or float ids, is found before any row is read: the error, read
    whole or streamed, wherever the first null is and whatever the format."""
    b = with_nulls([i % 2 == 0 for i in range(ROWS)], {first_null, 20})
    k = [i % 4 for i in range(ROWS)]
    path = write(pa.table({"b": pa.array(b, pa.bool_()), "k": k}), tmp_path / f"b{suffix}")
    out = tmp_path / "out.npy"
    accepted = "float16/32/64, signed and unsigned integers"
    for command, output, refused in (
        (["sum"], ["-o", out], f"sum (accepted: {accepted}, complex64/128)"),
        (["median"], ["-o", out], f"median (accepted: {accepted})"),
        (
            ["check"],
            [],
            f"sum (accepted: {accepted}, complex64/128); check validates for --op sum unless "
            "--op names the run's ops",
        ),
    ):
        result = run(*command, path, "--data-column", "b", "--ids-column", "k", *chunks, *output)
        one_error(result, f"{path}:b: bool data is not supported by {refused}", out)
    any_run = run("any", path, "--data-column", "b", "--ids-column", "k", *chunks, "-o", out)
    one_error(any_run, f"{path}: column 'b' has 2 nulls (first at row {first_null})", out)
    v = with_nulls([float(i) for i in range(ROWS)], {first_null})
    halves = pa.array([i + 0.5 for i in k])  # whole numbers would read back from CSV as integers
    path = write(table(v, k).set_column(1, "k", halves), tmp_path / f"f{suffix}")
    result = run("sum", path, "--data-column", "v", "--ids-column", "k", *chunks, "-o", out)
    assert result.exit_code == 1
    assert result.stderr.startswith(f"Error: {path}:k: segment_ids must be integers, got float64")
    assert not out.exists()


def list_table(lists: list[Any], fixed: bool) -> pa.Table:
    type_ = pa.list_(pa.float64(), 2) if fixed else pa.list_(pa.float64())
    return pa.table({"v": pa.array(lists, type_), "k": [i % 3 for i in range(ROWS)]})


@pytest.mark.parametrize("fixed", [False, True], ids=["lists", "fixed-size lists"])
@pytest.mark.parametrize("suffix", [".parquet", ".arrow", ".jsonl"])
@pytest.mark.parametrize("chunks", [[], *CHUNKS])
def test_the_first_row_holding_a_null_is_named_null_list_or_not(
    tmp_path: Path, fixed: bool, suffix: str, chunks: list[str]
) -> None:
    """Null lists and nulls inside lists are counted alike and the earliest row holding either
    is named, whole or streamed, whichever comes first and in whichever block."""
    lists: list[Any] = [[1.0, 2.0] for _ in range(ROWS)]
    lists[3], lists[5], lists[17], lists[26] = [None, 1.0], [2.0, None], None, None
    path = write(list_table(lists, fixed), tmp_path / f"l{suffix}")
    out = tmp_path / "out.npy"
    args = ("sum", path, "--data-column", "v", "--ids-column", "k", *chunks, "-o", out)
    message = "has 2 null lists and 2 nulls inside its lists (first at row 3)"
    one_error(run(*args), f"{path}: column 'v' {message}", out)
    lists[0], lists[3], lists[5], lists[20] = None, [3.0, 4.0], [None, None], [None, None]
    path.unlink()
    write(list_table(lists, fixed), path)
    message = "has 3 null lists and 4 nulls inside its lists (first at row 0)"
    one_error(run(*args), f"{path}: column 'v' {message}", out)
    lists[0] = lists[17] = lists[26] = [1.0, 2.0]
    path.unlink()
    write(list_table(lists, fixed), path)
    message = "has 4 nulls inside its lists (first at row 5)"
    one_error(run(*args), f"{path}: column 'v' {message}", out)


@pytest.mark.parametrize("chunks", [[], *CHUNKS])
def test_an_arrow_stream_on_stdin_counts_every_null(tmp_path: Path, chunks: list[str]) -> None:
    sink = pa.BufferOutputStream()
    t = table(values(), [i % 4 for i in range(ROWS)])
    with ipc.new_stream(sink, t.schema) as writer:
        for batch in t.to_batches(max_chunksize=5):
            writer.write_batch(batch)
    out = tmp_path / "out.npy"
    result = run(
        "sum", "-", "--data-column", "v", "--ids-column", "k", *chunks, "-o", out,
        stdin=sink.getvalue().to_pybytes(),
    )  # fmt: skip
    one_error(result, "<stdin>: column 'v' has 10 nulls (first at row 1)", out)


@pytest.mark.parametrize(("data_nulls", "ids_nulls", "message"), EARLIEST)
@pytest.mark.parametrize("chunks", [[], *CHUNKS])
def test_an_arrow_stream_on_stdin_names_the_earliest_null(
    tmp_path: Path, data_nulls: set[int], ids_nulls: set[int], message: str, chunks: list[str]
) -> None:
    v = with_nulls([float(i) for i in range(ROWS)], data_nulls)
    k = with_nulls([i % 4 for i in range(ROWS)], ids_nulls)
    sink = pa.BufferOutputStream()
    t = table(v, k)
    with ipc.new_stream(sink, t.schema) as writer:
        for batch in t.to_batches(max_chunksize=5):
            writer.write_batch(batch)
    out = tmp_path / "out.npy"
    result = run(
        "sum", "-", "--data-column", "v", "--ids-column", "k", *chunks, "-o", out,
        stdin=sink.getvalue().to_pybytes(),
    )  # fmt: skip
    one_error(result, f"<stdin>: column {message}", out)


@pytest.mark.parametrize("command", ["sum", "check"])
@pytest.mark.parametrize("chunks", [[], *CHUNKS])
def test_streamed_null_sorted_ids_are_all_counted(
    tmp_path: Path, command: str, chunks: list[str]
) -> None:
    """Under --skipna a null id drops its row, but sorted ids refuse it: every one counted."""
    path = write(table([float(i) for i in range(ROWS)], ids()), tmp_path / "t.parquet")
    out = tmp_path / "out.npy"
    output = ["-o", out] if command == "sum" else []
    result = run(
        command, path, "--data-column", "v", "--ids-column", "k", "--sorted", "--skipna",
        *chunks, *output,
    )  # fmt: skip
    message = (
        f"{path}:k: segment_ids[2] is null (6 null ids); --sorted ids cannot be null, as they "
        "cannot be negative"
    )
    one_error(result, message, out)


def test_null_sorted_ids_error_survives_pickling() -> None:
    """A Dask worker's error reaches the client pickled: its words and counts must survive."""
    error = columns.NullIdsError("i.npy", 4, 2)
    again = pickle.loads(pickle.dumps(error))
    assert (str(again), again.first, again.nulls) == (str(error), 4, 2)
    assert str(error.and_more(3)) == str(columns.NullIdsError("i.npy", 4, 5))
    nulls = columns.NullsError("t.parquet: column 'v' has 1 null (first at row 7)", 7)
    again_nulls = pickle.loads(pickle.dumps(nulls))
    assert (str(again_nulls), again_nulls.row) == (str(nulls), 7)


@pytest.mark.parametrize("command", [["sum"], ["median"], ["agg", "--op", "sum,median"]])
@pytest.mark.parametrize("chunks", [[], *CHUNKS])
def test_keyed_and_sorting_runs_count_every_null(
    tmp_path: Path, command: list[str], chunks: list[str]
) -> None:
    path = tmp_path / "t.parquet"
    keys = pa.array([str(i % 4) for i in range(ROWS)])
    pq.write_table(pa.table({"v": pa.array(values(), pa.float64()), "c": keys}), path, 5)
    out = tmp_path / "out.csv"
    result = run(*command, path, "--data-column", "v", "--by", "c", *chunks, "-o", out)
    one_error(result, f"{path}: column 'v' has 10 nulls (first at row 1)", out)
