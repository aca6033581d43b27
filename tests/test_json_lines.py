"""JSON lines tables (``.jsonl``, ``.ndjson``) as inputs: ``--by`` keys, data and ids columns,
read whole or streamed, checked against pandas and NumPy; and their errors."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.entry import Ran, run_main
from tests.matrix import default_run
from tests.pipes import fifo_fed_with

pd = pytest.importorskip("pandas")

ROWS = 200


def ok(*args: Any) -> Ran:
    result = run_main(*args)
    assert result.exit_code == 0, result.stderr
    return result


def info_columns(path: Path) -> list[dict[str, Any]]:
    """The columns ``segcli info --json`` lists for ``path``."""
    columns: list[dict[str, Any]] = json.loads(ok("info", path, "--json").stdout)["columns"]
    return columns


def write_lines(path: Path, rows: list[dict[str, Any]]) -> Path:
    text = "".join(json.dumps(row) + "\n" for row in rows)
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def flights(seed: int = 0) -> list[dict[str, Any]]:
    """Rows as a log would hold them: a value missing now and then (null, or the field left
    out), a key left out now and then, and a field that only later lines have."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    for i in range(ROWS):
        row: dict[str, Any] = {
            "carrier": ["UA", "AA", "DL"][rng.integers(0, 3)],
            "origin": ["JFK", "LAX"][rng.integers(0, 2)],
            "delay": float(rng.integers(-20, 60)) / 4,
            "sensor": int(rng.integers(0, 5)),
        }
        if i % 17 == 0:
            row["delay"] = None
        if i % 23 == 0:
            del row["origin"]
        if i > ROWS // 2:
            row["note"] = "late field"
        rows.append(row)
    return rows


def pandas_means(rows: list[dict[str, Any]], by: list[str]) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    grouped = frame.groupby(by, dropna=True)["delay"]
    out = pd.DataFrame({"value": grouped.mean(), "present": grouped.count()}).reset_index()
    return out.sort_values(by, ignore_index=True)


@pytest.mark.parametrize("suffix", [".jsonl", ".ndjson", ".jsonl.gz"])
def test_by_keys_of_json_lines_give_pandas_groupby(tmp_path: Path, suffix: str) -> None:
    rows = flights()
    path = write_lines(tmp_path / f"f{suffix}", rows)
    out = tmp_path / "out.parquet"
    ok("mean", path, "--data-column", "delay", "--by", "carrier,origin", "--skipna", "-o", out)
    table = pq.read_table(out)
    want = pandas_means(rows, ["carrier", "origin"])
    assert table.column("carrier").to_pylist() == want["carrier"].tolist()
    assert table.column("origin").to_pylist() == want["origin"].tolist()
    np.testing.assert_allclose(table.column("value").to_numpy(), want["value"], rtol=1e-12)
    present = tmp_path / "present.parquet"
    args = ["--data-column", "delay", "--by", "carrier,origin", "--skipna", "-o", present]
    ok("count", path, *args)
    assert pq.read_table(present).column("value").to_pylist() == want["present"].tolist()


@pytest.mark.parametrize("rows", ["3", "64"])
def test_streamed_json_lines_give_the_bytes_of_the_whole_read(tmp_path: Path, rows: str) -> None:
    path = write_lines(tmp_path / "f.jsonl", flights(1))
    args = ["agg", path, "--data-column", "delay", "--by", "carrier", "--op", "sum,max,count"]
    ok(*args, "--skipna", "-o", tmp_path / "whole.parquet")
    ok(*args, "--skipna", "--chunk-rows", rows, "-o", tmp_path / "streamed.parquet")
    assert pq.read_table(tmp_path / "whole.parquet").equals(
        pq.read_table(tmp_path / "streamed.parquet")
    )


def test_data_and_ids_columns_of_one_json_lines_file(tmp_path: Path) -> None:
    rows = [{"sensor": i % 4, "reading": float(i) / 8} for i in range(50)]
    path = write_lines(tmp_path / "r.jsonl", rows)
    out = tmp_path / "out.npy"
    ok("sum", path, "--data-column", "reading", "--ids-column", "sensor", "-n", "5", "-o", out)
    ids = np.array([r["sensor"] for r in rows])
    values = np.array([r["reading"] for r in rows])
    want = np.array([values[ids == s].sum() for s in range(5)])
    np.testing.assert_array_equal(np.load(out), want)
    streamed = tmp_path / "streamed.npy"
    args = ["--data-column", "reading", "--ids-column", "sensor", "-n", "5", "--chunk-rows", "7"]
    ok("sum", path, *args, "-o", streamed)
    assert streamed.read_bytes() == out.read_bytes()


def test_keys_from_a_json_lines_file(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "f.jsonl", [row for row in flights(2) if row["delay"] is not None]
    )
    keys = write_lines(tmp_path / "keys.jsonl", [{"carrier": c} for c in ["DL", "ZZ", "AA", "UA"]])
    out = tmp_path / "out.parquet"
    ok("count", path, "--data-column", "delay", "--by", "carrier", "--keys-from", keys, "-o", out)
    table = pq.read_table(out)
    assert table.column("carrier").to_pylist() == ["DL", "ZZ", "AA", "UA"]
    assert table.column("value").to_pylist()[1] == 0  # ZZ: an empty group, filled


def test_info_lists_the_fields_of_a_json_lines_file(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "f.jsonl", flights())
    shown = ok("info", path).stdout
    assert "format: jsonl" in shown and "rows: 200" in shown
    for column in ("carrier: string", "delay: double, nulls 12", "sensor: int64", "note: string"):
        assert column in shown


def test_the_columns_are_the_fields_of_the_first_megabyte(tmp_path: Path) -> None:
    lines = [{"k": "a", "v": 1.0}] * 70_000 + [{"k": "b", "v": 2.0, "late": 3.0}]
    path = write_lines(tmp_path / "f.jsonl", lines)
    result = run_main("sum", path, "--data-column", "late", "--by", "k")
    assert result.exit_code == 2
    assert "no column 'late' (columns: k, v) (the fields of its first megabyte" in result.stderr


def test_a_streamed_key_that_changes_type_names_its_column(tmp_path: Path) -> None:
    """pyarrow's JSON message names the type (timestamp[s], brackets and all), not the column:
    the key column of that type is named, with the value."""
    lines = [{"d": f"2024-05-0{i % 9 + 1}", "x": i} for i in range(60_000)]
    lines.append({"d": "n/a", "x": 1})
    path = write_lines(tmp_path / "dates.jsonl", lines)
    result = run_main("sum", path, "--data-column", "x", "--by", "d", "--chunk-rows", "1000")
    assert result.exit_code == 3
    [line] = result.stderr.splitlines()
    assert (
        f"{path}: column 'd' holds 'n/a' after its first rows, which made it timestamp[s]" in line
    )


def test_a_later_value_that_does_not_fit_a_streamed_column_is_one_line(tmp_path: Path) -> None:
    # More than the first block of text (1 MiB) of whole numbers, then a fraction.
    lines = [{"k": f"k{i % 3}", "a": i} for i in range(60_000)] + [{"k": "k1", "a": 1.5}]
    path = write_lines(tmp_path / "late.jsonl", lines)
    out = tmp_path / "out.parquet"
    result = run_main(
        "sum", path, "--data-column", "a", "--by", "k", "--chunk-rows", "1000", "-o", out
    )
    assert result.exit_code == 3
    assert result.stderr.count("\n") == 1 and "holds '1.5' after its first rows" in result.stderr
    assert not out.exists()
    # Read whole, the column is double from the start: the sum is exact.
    ok("sum", path, "--data-column", "a", "--by", "k", "--memory-limit", "1GB", "-o", out)
    assert pq.read_table(out).column("value").to_pylist()[1] == sum(range(1, 60_000, 3)) + 1.5


@pytest.mark.parametrize(
    ("text", "args", "code", "message"),
    [
        ('{"a": 1, "k": "x"}\n{"a": 2, "k": \n', ["--by", "k"], 3, "cannot parse JSON lines"),
        ('{"a": 1, "k": "x"}\n', ["--by", "nope"], 2, "no column 'nope' (columns: a, k)"),
        ("", ["--by", "k"], 2, "no column 'k' (columns: none)"),
        ('{"a": 1, "k": {"z": 1}}\n', ["--by", "k"], 1, "t.jsonl: key column 'k' has type struct"),
        ('{"a": 1, "k": "x"}\n', ["--by", "k", "--engine", "dask"], 2, "not jsonl"),
        ('{"a": 1, "k": 0}\n', ["--ids-column", "k", "--engine", "dask"], 2, "not jsonl"),
    ],
)
def test_json_lines_errors_are_one_line_and_write_nothing(
    tmp_path: Path, text: str, args: list[str], code: int, message: str
) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    out = tmp_path / "out.parquet"
    result = run_main("sum", path, "--data-column", "a", *args, "-o", out)
    assert result.exit_code == code, result.stderr
    assert result.stderr.count("\n") == 1 and message in result.stderr
    assert list(tmp_path.iterdir()) == [path]


def test_json_lines_are_not_an_output_format(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "f.jsonl", flights())
    result = run_main("sum", path, "--data-column", "delay", "--by", "carrier", "-o", "o.jsonl")
    assert result.exit_code == 2 and "is an input format, not an output" in result.stderr


def test_sparse_and_sorting_ops_read_json_lines_as_parquet(tmp_path: Path) -> None:
    """The embedding bag of the README and a median by key: the same bytes from JSON lines
    as from the same rows in Parquet, whole or streamed."""
    sample = Path(__file__).resolve().parent.parent / "sample_data"
    bags = pq.read_table(sample / "bags.parquet")
    lines = write_lines(tmp_path / "bags.jsonl", bags.to_pylist())
    args = ["--ids-column", "bag", "--indices-column", "token", "--weights-column", "weight"]
    for source, name in ((sample / "bags.parquet", "p.npy"), (lines, "j.npy")):
        ok("mean", sample / "vocab.npy", source, *args, "-n", "5", "-o", tmp_path / name)
    assert (tmp_path / "p.npy").read_bytes() == (tmp_path / "j.npy").read_bytes()
    rows = flights(3)
    path = write_lines(tmp_path / "f.jsonl", rows)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "f.parquet")
    outs = []
    for source, extra in ((path, []), (path, ["--chunk-rows", "9"]), (tmp_path / "f.parquet", [])):
        out = tmp_path / f"m{len(outs)}.csv"
        ok(
            "median",
            source,
            "--data-column",
            "delay",
            "--by",
            "carrier",
            "--skipna",
            *extra,
            "-o",
            out,
        )
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] == outs[2]


@pytest.mark.parametrize("chunk", [[], ["--chunk-rows", "1"]])
def test_strings_that_are_not_utf8_are_one_line_naming_the_row(
    tmp_path: Path, chunk: list[str]
) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"k": "a", "v": 1}\n{"k": "caf\xe9", "v": 2}\n')
    out = tmp_path / "out.parquet"
    result = run_main("sum", path, "--data-column", "v", "--by", "k", *chunk, "-o", out)
    assert result.exit_code == 3, result.stderr
    assert result.stderr.count("\n") == 1
    assert "column 'k' row 1 holds b'caf\\xe9', which is not UTF-8" in result.stderr
    assert list(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize("chunk", [[], ["--chunk-rows", "1"], ["--chunk-rows", "3"]])
def test_a_streamed_list_column_keeps_its_inner_shape(tmp_path: Path, chunk: list[str]) -> None:
    rows = [{"k": i % 2, "v": [i, 2 * i]} for i in range(7)]
    path = write_lines(tmp_path / "t.jsonl", rows)
    out = tmp_path / "out.npy"
    ok("sum", path, "--data-column", "v", "--ids-column", "k", *chunk, "-o", out)
    values = np.array([r["v"] for r in rows])
    ids = np.array([r["k"] for r in rows])
    np.testing.assert_array_equal(np.load(out), [values[ids == 0].sum(0), values[ids == 1].sum(0)])


@pytest.mark.parametrize("chunk", [[], ["--chunk-rows", "1"]])
def test_a_list_that_starts_with_null_keeps_its_null(tmp_path: Path, chunk: list[str]) -> None:
    """pyarrow's type inference loses a list's nulls met before its item type is known (its
    offsets then run past its values); segcli reads such a file with the types inferred."""
    rows = [{"k": 0, "v": [None, 2.0]}, {"k": 1, "v": [1.0, 3.0]}, {"k": 0, "v": [4.0, None]}]
    path = write_lines(tmp_path / "t.jsonl", rows)
    out = tmp_path / "out.npy"
    ok("sum", path, "--data-column", "v", "--ids-column", "k", "--skipna", *chunk, "-o", out)
    np.testing.assert_array_equal(np.load(out), [[4.0, 2.0], [1.0, 3.0]])
    refused = run_main("sum", path, "--data-column", "v", "--ids-column", "k", *chunk, "-o", out)
    assert refused.exit_code == 1
    assert "column 'v' has 2 nulls inside its lists (first at row 0)" in refused.stderr
    assert "v: list<item: double>, nulls 0" in ok("info", path).stdout


@pytest.mark.parametrize("chunk", [[], ["--chunk-rows", "1"]])
@pytest.mark.parametrize("long_line", [0, 1])
def test_lines_longer_than_a_block_of_text_are_read(
    tmp_path: Path, chunk: list[str], long_line: int
) -> None:
    rows: list[dict[str, Any]] = [{"k": "a", "v": 1}, {"k": "b", "v": 2}, {"k": "a", "v": 4}]
    rows[long_line]["pad"] = "x" * (3 << 20)  # pyarrow reads 1 MiB blocks by default
    path = write_lines(tmp_path / "t.jsonl", rows)
    out = tmp_path / "out.parquet"
    ok("sum", path, "--data-column", "v", "--by", "k", *chunk, "-o", out)
    table = pq.read_table(out)
    assert table.column("k").to_pylist() == ["a", "b"]
    assert table.column("value").to_pylist() == [5, 2]


# Each bad line by key and by ids column in the default run; streamed in given blocks too in the
# full matrix (the rows are counted the same way).
@default_run(lambda chunk: not chunk)
@pytest.mark.parametrize("chunk", [[], ["--chunk-rows", "1000"]])
@pytest.mark.parametrize(
    ("last", "said"),
    [
        ('{"k": 1, "a": "oops"}', "field 'a' changes from number to string at row 60000;"),
        ('{"k": 1, "a": }', "(Invalid value at row 60000)"),
        ('{"k": 1, "a": 1, "a": 2}', "(field 'a' was specified twice at row 60000)"),
    ],
)
@pytest.mark.parametrize("by", [["--by", "k"], ["--ids-column", "k"]])
def test_a_bad_line_past_the_first_block_names_its_row_in_the_file(
    tmp_path: Path, chunk: list[str], last: str, said: str, by: list[str]
) -> None:
    # pyarrow's own row counts from its block's start, and a whole read parses blocks at once.
    lines = [{"k": i % 3, "a": i} for i in range(60_000)]
    path = write_lines(tmp_path / "t.jsonl", lines)
    with path.open("a") as text:
        text.write(last + "\n")
    out = tmp_path / "out.npy" if by[0] == "--ids-column" else tmp_path / "out.parquet"
    result = run_main("sum", path, "--data-column", "a", *by, *chunk, "-o", out)
    assert result.exit_code == 3, result.stderr
    assert result.stderr.count("\n") == 1
    assert "t.jsonl: cannot parse JSON lines (" in result.stderr and said in result.stderr
    assert list(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize("line", ["[1, 2]", "3", '"text"'])
def test_a_line_that_is_not_an_object_is_one_line(tmp_path: Path, line: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(f'{{"k": 1, "v": 2}}\n{line}\n')
    result = run_main("sum", path, "--data-column", "v", "--by", "k", "--chunk-rows", "1")
    assert result.exit_code == 3, result.stderr
    assert result.stderr.count("\n") == 1
    assert "a line at row 1 is a JSON " in result.stderr and ", not an object" in result.stderr


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="needs named pipes")
@pytest.mark.parametrize(
    "args",
    [
        ["--by", "carrier,origin"],
        ["--by", "carrier", "--chunk-rows", "1"],
        ["--ids-column", "sensor", "--chunk-rows", "3"],
    ],
)
def test_json_lines_from_a_pipe_are_found_by_their_bytes(tmp_path: Path, args: list[str]) -> None:
    """A pipe has no suffix: its first byte, '{', says JSON lines. It is read once, though the
    key columns and the data column are each opened (the second open found it empty)."""
    path = write_lines(tmp_path / "f.jsonl", flights(4))
    run = ["agg", "--data-column", "delay", "--op", "sum,max", "--skipna", *args, "-q"]
    want = ok(run[0], path, *run[1:]).stdout
    assert ok(run[0], fifo_fed_with(tmp_path, path.read_bytes()), *run[1:]).stdout == want
    shown = ok("info", fifo_fed_with(tmp_path, path.read_bytes())).stdout
    assert "format: jsonl" in shown and "rows: 200" in shown


def test_json_lines_on_stdin_and_json_input_are_refused_in_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = write_lines(tmp_path / "f.jsonl", flights())
    args = ["sum", "-", "--data-column", "delay", "--ids-column", "sensor", "--skipna"]
    ran = subprocess.run(
        [sys.executable, "-m", "segcli", *args],
        input=path.read_bytes(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 3 and ran.stderr.decode().count("\n") == 1
    assert "JSON lines are not read from '-'" in ran.stderr.decode()
    json_input = tmp_path / "f.json"
    json_input.write_bytes(path.read_bytes())
    result = run_main("sum", json_input, "--data-column", "delay", "--by", "carrier")
    assert result.exit_code == 3 and result.stderr.count("\n") == 1
    assert "f.json: .json is an output format" in result.stderr


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="needs named pipes")
@pytest.mark.parametrize("args", [["--by", "carrier"], ["--ids-column", "sensor"]])
def test_the_same_rows_as_parquet_from_a_pipe_stream_too(tmp_path: Path, args: list[str]) -> None:
    # Streamed, the Parquet reader was handed the pipe's bytes as if they were a path.
    rows = [row for row in flights(5) if row["delay"] is not None]
    path = write_lines(tmp_path / "f.jsonl", rows)
    parquet = tmp_path / "f.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    run = ["--data-column", "delay", *args, "--chunk-rows", "1", "-q"]
    want = ok("sum", path, *run).stdout
    assert ok("sum", fifo_fed_with(tmp_path, parquet.read_bytes()), *run).stdout == want


@pytest.mark.parametrize("by", [["--by", "k"], ["--ids-column", "k"]])
def test_a_long_line_met_while_streaming_starts_again_past_the_rows_given(
    tmp_path: Path, by: list[str]
) -> None:
    rows: list[dict[str, Any]] = [{"k": i % 3, "a": i} for i in range(40_000)]
    rows.append({"k": 1, "a": 7, "pad": "x" * (3 << 20)})
    rows += [{"k": i % 3, "a": i} for i in range(40_000)]
    path = write_lines(tmp_path / "t.jsonl", rows)
    shown = ok("agg", path, "--data-column", "a", "--op", "sum,count", *by, "--chunk-rows", "999")
    ids = np.array([row["k"] for row in rows])
    values = np.array([row["a"] for row in rows])
    want = [f"{k}\t{values[ids == k].sum()}\t{(ids == k).sum()}" for k in range(3)]
    assert shown.stdout.splitlines()[1:] == want  # after the header line


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="needs named pipes")
def test_a_named_pipe_made_again_is_read_again(tmp_path: Path) -> None:
    # Made again, a named pipe may get its old inode back: nothing of the last run's is kept.
    for rows in ([{"k": 1, "v": 1}], [{"k": 1, "v": 5}, {"k": 2, "v": 6}]):
        payload = "".join(json.dumps(row) + "\n" for row in rows).encode()
        shown = ok("sum", fifo_fed_with(tmp_path, payload), "--data-column", "v", "--by", "k")
        assert shown.stdout.splitlines()[1:] == [f"{r['k']}\t{r['v']}" for r in rows]


@pytest.mark.parametrize(
    "said",
    [
        "straddling object straddling block boundaries (try to increase block size?)",
        "JSON parse error: The document is empty.",
        "JSON parse error: Invalid value. in row 0",
    ],
)
def test_a_long_line_reads_again_in_larger_blocks_whatever_pyarrow_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, said: str
) -> None:
    """pyarrow's threads, meeting a line longer than a block, say one of several things
    depending on where a block starts inside it: the file's lines decide the retry."""
    import pyarrow.json as pjson

    from segcli.io import json_lines

    rows: list[dict[str, Any]] = [{"a": i} for i in range(5000)]
    rows.insert(2500, {"a": -1, "pad": "x" * 10_000})
    long_path = write_lines(tmp_path / "long.jsonl", rows)
    short_path = write_lines(tmp_path / "short.jsonl", [{"a": i} for i in range(5000)])
    real_open = pjson.open_json
    sizes: list[int] = []

    def first_one_fails(source: Any, read_options: Any, **kw: Any) -> Any:
        sizes.append(read_options.block_size)
        reader = real_open(source, read_options=read_options, **kw)
        if len(sizes) > 1:
            return reader

        def batches() -> Any:
            yield next(iter(reader))
            raise pa.ArrowInvalid(said)

        return batches()

    monkeypatch.setattr(pjson, "open_json", first_one_fails)
    schema = pa.schema([("a", pa.int64())])
    read = json_lines.open_batches(lambda: pa.OSFile(str(long_path)), schema, 4096)
    values = pa.Table.from_batches(list(read), schema).column("a").to_pylist()
    assert values == [row["a"] for row in rows]
    assert sizes == [4096, 4 * 4096]  # the first block that holds the 10 kB line
    # A file without such a line: the error is the text's, said at once.
    sizes.clear()
    read = json_lines.open_batches(lambda: pa.OSFile(str(short_path)), schema, 4096)
    with pytest.raises(pa.ArrowInvalid):
        list(read)
    assert sizes == [4096]
    # A line past the largest block is the file's error too.
    monkeypatch.setattr(json_lines, "_LARGEST_BLOCK_BYTES", 4096)
    sizes.clear()
    read = json_lines.open_batches(lambda: pa.OSFile(str(long_path)), schema, 4096)
    with pytest.raises(pa.ArrowInvalid):
        list(read)
    assert sizes == [4096]


@pytest.mark.parametrize("scan_bytes", [3, 7, 1 << 20])
def test_the_first_line_longer_than_a_block_is_found_across_reads(
    monkeypatch: pytest.MonkeyPatch, scan_bytes: int
) -> None:
    from segcli.io import json_lines

    monkeypatch.setattr(json_lines, "_SCAN_BYTES", scan_bytes)

    def longest(text: bytes, limit: int) -> int | None:
        return json_lines._first_line_longer_than(lambda: pa.BufferReader(text), limit)

    assert longest(b"ab\ncd\nef\n", 2) is None
    assert longest(b"ab\ncdefgh\nij\n", 5) == 6
    assert longest(b"ab\ncd\nefghijk", 5) == 7  # the last line, without its newline
    assert longest(b"abcdefgh\n", 7) == 8
    assert longest(b"", 0) is None


@pytest.mark.parametrize("chunk", [[], ["--chunk-rows", "1"]])
@pytest.mark.parametrize(
    ("values", "said"),
    [
        (["1", "2"], "row 0 holds the text '1' (2 values of text; a number in quotes is text)"),
        ([None, "n/a"], "row 1 holds 'n/a' (1 value that is not a number)"),
    ],
)
def test_a_text_value_column_names_its_first_value(
    tmp_path: Path, chunk: list[str], values: list[Any], said: str
) -> None:
    path = write_lines(tmp_path / "t.jsonl", [{"s": i, "v": v} for i, v in enumerate(values)])
    out = tmp_path / "out.npy"
    result = run_main("sum", path, "--data-column", "v", "--ids-column", "s", "-o", out, *chunk)
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"Error: {path}: column 'v' has type string, not a numeric type: {said}"
    ]
    assert not out.exists()


@pytest.mark.parametrize("chunk", [[], ["--chunk-rows", "1"]])
@pytest.mark.parametrize("args", [["--ids-column", "s"], ["--by", "s"]])
def test_an_integer_beyond_int64_is_not_read_rounded(
    tmp_path: Path, chunk: list[str], args: list[str]
) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"s": 0, "v": 1.5}\n\n{"s": 1, "v": 18446744073709551615}\n{"s": 0, "v": 1e20}\n'
    )
    out = tmp_path / "out.parquet"
    result = run_main("sum", path, "--data-column", "v", *args, "-o", out, *chunk)
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"Error: {path}: column 'v' holds 18446744073709551615 at row 1, an integer beyond "
        "int64, which would be read rounded, as a float64 (1 such integer)"
    ]
    assert not out.exists()
    ok("info", path)  # described as pyarrow reads it


@pytest.mark.parametrize("chunk", [[], ["--chunk-rows", "1"]])
def test_large_floats_are_read(tmp_path: Path, chunk: list[str]) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"s": 0, "v": 1e20}\n{"s": 0, "v": 12345678901234567890.0}\n{"s": 1, "v": 1}\n'
    )
    result = ok("sum", path, "--data-column", "v", "--ids-column", "s", "-q", *chunk)
    assert result.stdout.splitlines() == [f"0\t{1e20 + 12345678901234567890.0!r}", "1\t1.0"]


@pytest.mark.parametrize("chunk", [[], ["--chunk-rows", "1000"]], ids=["whole", "streamed"])
def test_a_line_of_two_json_values_is_named_by_its_row(tmp_path: Path, chunk: list[str]) -> None:
    """pyarrow says "The document is empty" of ``{...},`` and names no row: segcli finds it."""
    lines = [json.dumps({"k": i % 3, "x": i}) for i in range(100_000)]
    lines[70_000] += ","
    path = tmp_path / "comma.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = run_main("sum", path, "--data-column", "x", "--ids-column", "k", *chunk)
    assert result.exit_code == 3
    assert result.stderr == (
        f"Error: {path}: cannot parse JSON lines (row 70000 is not one JSON value: "
        '\'{"k": 1, "x": 70000},\')\n'
    )


def test_info_merges_the_types_of_every_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """info reads a block of lines at a time and merges their types as a whole read does:
    integers meeting a fraction become doubles, an object's fields gather, a field of nulls
    takes the type met later."""
    import segcli.io.text_facts as text_facts

    monkeypatch.setattr(text_facts, "_JSON_BLOCK_BYTES", 64)
    rows = [{"v": 1, "o": {"x": 1}, "n": None, "l": [1]}] * 20
    rows += [{"v": 2.5, "o": {"y": "s"}, "n": "late", "l": [0.5]}] + [{"v": 3}] * 20
    path = write_lines(tmp_path / "f.jsonl", rows)
    columns = {c["name"]: (c["type"], c["nulls"]) for c in info_columns(path)}
    assert columns == {
        "v": ("double", 0),
        "o": ("struct<x: int64, y: string>", 20),
        "n": ("string", 40),
        "l": ("list<item: double>", 20),
    }


def test_info_names_the_row_where_a_field_changes_type_in_a_later_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import segcli.io.text_facts as text_facts

    monkeypatch.setattr(text_facts, "_JSON_BLOCK_BYTES", 64)
    path = write_lines(tmp_path / "f.jsonl", [{"v": 1}] * 30 + [{"v": None}, {"v": "x"}])
    result = run_main("info", path)
    assert result.exit_code == 3
    assert "field 'v' changes from number to string at row 31" in result.stderr


def test_a_field_not_read_may_change_its_json_type_between_blocks(tmp_path: Path) -> None:
    """pyarrow's whole read fails where a field changes JSON type from one block (1 MiB) to
    the next, even a field no option names; the run reads its columns alone then, as a
    streamed run does (past the first megabyte, which gives the types), with the same bytes.
    A change in a column it reads is still an error."""
    pad = "x" * 1000
    rows = [{"v": float(i), "s": i % 3, "pad": pad} for i in range(1100)]
    rows[0]["t"], rows[1050]["t"] = True, "yes"  # the second past the first megabyte
    path = write_lines(tmp_path / "t.jsonl", rows)
    args = ["sum", path, "--data-column", "v", "--ids-column", "s", "-q"]
    ok(*args, "-o", tmp_path / "whole.npy")
    ok(*args, "--chunk-rows", "300", "-o", tmp_path / "streamed.npy")
    assert (tmp_path / "whole.npy").read_bytes() == (tmp_path / "streamed.npy").read_bytes()
    expected = [sum(float(i) for i in range(k, 1100, 3)) for k in range(3)]
    np.testing.assert_array_equal(np.load(tmp_path / "whole.npy"), expected)
    wrong = run_main("sum", path, "--data-column", "t", "--ids-column", "s", "-q")
    assert wrong.exit_code != 0 and wrong.stderr.count("\n") == 1


def test_a_file_read_whole_is_one_block_of_the_parser(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In several blocks pyarrow merges their inferred types, which crashed the process
    (SIGSEGV, about one run in four) where a field changed JSON type between blocks: a file
    read whole is parsed as one block."""
    from segcli.io import json_lines

    sizes: list[int] = []
    read_all = json_lines._read_all

    def spy(open_source: Any, schema: Any = None, block_size: int = 1 << 20, offset: int = 0):
        sizes.append(block_size)
        return read_all(open_source, schema, block_size, offset)

    monkeypatch.setattr(json_lines, "_read_all", spy)
    rows = [{"v": float(i), "s": i % 3, "pad": "x" * 1000} for i in range(1100)]  # 1.1 MB
    path = write_lines(tmp_path / "t.jsonl", rows)
    ok("sum", path, "--data-column", "v", "--ids-column", "s", "-q", "-o", tmp_path / "o.npy")
    assert max(sizes) > path.stat().st_size  # the whole read (a head read comes first)


def test_info_reads_a_block_whose_lists_hold_only_nulls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyarrow infers ``[null, null]`` as list<null> and keeps one item of the two, read
    again in that type too: a block of lines whose lists hold nothing else read whole
    still takes the type of the lists met later (it failed with 'array slice would exceed
    array length'), within an object and a list of lists too."""
    import segcli.io.text_facts as text_facts

    monkeypatch.setattr(text_facts, "_JSON_BLOCK_BYTES", 64)
    empty = {"l": [None, None], "o": {"z": [None, None]}, "n": [[None, None]]}
    rows = [empty] * 20 + [{"l": [1.5], "o": {"z": [2]}, "n": [[None, 3]]}] + [empty] * 20
    path = write_lines(tmp_path / "f.jsonl", rows)
    columns = {c["name"]: (c["type"], c["nulls"]) for c in info_columns(path)}
    assert columns == {
        "l": ("list<item: double>", 0),
        "o": ("struct<z: list<item: int64>>", 0),
        "n": ("list<item: list<item: int64>>", 0),
    }
    alone = write_lines(tmp_path / "nulls.jsonl", [empty] * 3)
    assert [c["type"] for c in info_columns(alone)] == [
        "list<item: null>",
        "struct<z: list<item: null>>",
        "list<item: list<item: null>>",
    ]
