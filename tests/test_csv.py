"""Table inputs as a user meets them: streamed CSV, NaN cells, delimiters, headerless files,
duplicate names, decimal and dictionary columns, crafted segcli metadata."""

from __future__ import annotations

import bz2
import gzip
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from segcli.cli import cli
from tests.peak import run_measured

SUM = ["sum", "--data-column", "v", "--ids-column", "s"]


def run(*args: Any) -> Any:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def one_error_line(result: Any, code: int, *parts: str) -> None:
    assert result.exit_code == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("Error: ") and "Traceback" not in result.stderr
    for part in parts:
        assert part in lines[-1]


# Streaming -----------------------------------------------------------------------------------


def peak_rss(*args: Any) -> int:
    """Peak resident memory (bytes) of ``segcli ARGS`` run in a fresh process."""
    measured = run_measured(*args)
    assert measured.returncode == 0, measured.stderr
    return measured.peak_bytes


def write_csv(path: Path, rows: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    values = rng.random(rows).round(6)
    pcsv.write_csv(pa.table({"v": values, "s": rng.integers(0, 1000, rows)}), path)


# Three runs over up to 48 MB of CSV, about 4.5 s of the default run: the full matrix holds it
# (CI runs both; tests/test_resources.py keeps a streamed peak test in the default run).
@pytest.mark.full_matrix
def test_streamed_csv_memory_does_not_grow_with_the_file(tmp_path: Path) -> None:
    small, large = tmp_path / "small.csv", tmp_path / "large.csv"
    write_csv(small, 1_200_000, seed=1)  # about 16 MB
    write_csv(large, 3_600_000, seed=2)  # about 48 MB: three times the small one, as run-to-run
    # peaks of the same streamed run differ by up to 15 MB here (the CSV reader's buffers)
    size = large.stat().st_size
    streamed_small = peak_rss(*SUM, small, "-q", "--chunk-rows", 100_000, "-o", tmp_path / "a.npy")
    streamed = peak_rss(*SUM, large, "-q", "--chunk-rows", 100_000, "-o", tmp_path / "b.npy")
    whole = peak_rss(*SUM, large, "-q", "--memory-limit", "4GB", "-o", tmp_path / "c.npy")
    # Read whole, the parsed file costs several times its size; streamed, a few blocks.
    assert whole - streamed > size, (whole, streamed, size)
    # Holding the rows read would cost well over the file size; the allowance is the noise.
    assert streamed - streamed_small < 0.75 * size, (streamed_small, streamed)
    np.testing.assert_array_equal(np.load(tmp_path / "b.npy"), np.load(tmp_path / "c.npy"))


@pytest.mark.parametrize("suffix", ["csv", "csv.gz", "tsv"])
def test_streamed_csv_equals_in_memory(tmp_path: Path, suffix: str) -> None:
    rng = np.random.default_rng(3)
    table = pa.table({"v": rng.standard_normal(5000), "s": rng.integers(0, 40, 5000)})
    text = tmp_path / "plain.txt"
    pcsv.write_csv(table, text, pcsv.WriteOptions(delimiter="\t" if suffix == "tsv" else ","))
    path = tmp_path / f"t.{suffix}"
    if suffix.endswith(".gz"):
        path.write_bytes(gzip.compress(text.read_bytes()))
    else:
        path.write_bytes(text.read_bytes())
    streamed = run(
        *SUM,
        path,
        "--chunk-rows",
        333,
        "-o",
        tmp_path / "s.npy",
        "--summary-json",
        tmp_path / "j.json",
    )
    assert streamed.exit_code == 0, streamed.stderr
    facts = json.loads((tmp_path / "j.json").read_text())
    assert facts["mode"] == "streaming" and facts["extra"]["chunks"] > 10
    assert facts["data"]["shape"] == [5000]
    whole = run(*SUM, path, "-q", "-o", tmp_path / "m.npy")
    assert whole.exit_code == 0, whole.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "s.npy"), np.load(tmp_path / "m.npy"))


def test_streamed_csv_value_past_the_first_block_of_another_type(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("v,s\n" + "1,0\n" * 300_000 + "1.5,0\n")
    result = run(*SUM, path, "--chunk-rows", 1000, "-o", tmp_path / "o.npy")
    one_error_line(result, 3, "t.csv: column 'v' holds '1.5' after its first rows", "int64")
    assert not (tmp_path / "o.npy").exists()


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
@pytest.mark.parametrize(
    "command", [SUM, ["agg", "--op", "sum", "--data-column", "w,v", "--ids-column", "s"]]
)
@pytest.mark.parametrize("chunks", [[], ["--chunk-rows", "7"]])
def test_a_text_value_column_counts_its_values_that_are_not_numbers(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    suffix: str,
    command: list[str],
    chunks: list[str],
) -> None:
    """Read whole or streamed (types from the first rows: here the first 64 bytes, so that a
    small file holds rows past them), the first value that is not a number is named, and every
    such value of the column counted, those past the first rows too."""
    from segcli.io import chunked, column_set

    monkeypatch.setattr(chunked, "CSV_HEAD_BYTES", 64)
    monkeypatch.setattr(column_set, "CSV_HEAD_BYTES", 64)
    v = [str(i) for i in range(60)]
    v[2], v[40], v[55] = "abc", "1,5", "n/a"
    rows = [{"w": 1.0, "v": text, "s": i % 3} for i, text in enumerate(v)]
    path = tmp_path / f"t{suffix}"
    if suffix == ".csv":
        path.write_text("w,v,s\n" + "".join(f'{r["w"]},"{r["v"]}",{r["s"]}\n' for r in rows))
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = run(*command, path, *chunks, "-o", tmp_path / "o.parquet")
    assert result.exit_code == 1, result.stderr
    assert result.stderr == (
        f"Error: {path}: column 'v' has type string, not a numeric type: row 2 holds 'abc' "
        "(3 values that are not numbers)\n"
    )
    assert not (tmp_path / "o.parquet").exists()


# NaN cells -----------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_own_csv_output_with_nan_and_inf_reads_back(tmp_path: Path, stream: bool) -> None:
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, np.array([np.nan, 1.0, np.inf, -np.inf, 2.5]))
    np.save(ids, np.array([0, 1, 2, 3, 4]))
    first = tmp_path / "r.csv"
    assert run("sum", data, ids, "-q", "-o", first).exit_code == 0
    assert "0,nan,1" in first.read_text()
    chunks = ["--chunk-rows", 2] if stream else []
    again = run(
        "sum",
        first,
        "--data-column",
        "value",
        "--ids-column",
        "segment",
        "-q",
        "-o",
        tmp_path / "b.npy",
        *chunks,
    )
    assert again.exit_code == 0, again.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "b.npy"), [np.nan, 1.0, np.inf, -np.inf, 2.5])


def test_nan_spellings_are_nan(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("v,s\nnan,0\n-nan,1\nNaN,2\ninf,3\n-inf,4\n1,5\n")
    result = run(*SUM, path, "-q")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "0\tnan\n1\tnan\n2\tnan\n3\tinf\n4\t-inf\n5\t1.0\n"


@pytest.mark.parametrize("chunks", [[], ["--chunk-rows", "2"]])
def test_empty_cell_is_still_a_null(tmp_path: Path, chunks: list[str]) -> None:
    path = tmp_path / "t.csv"
    path.write_text("v,s\n1,0\n,1\nnan,1\n")
    one_error_line(run(*SUM, path, *chunks), 1, "t.csv: column 'v' has 1 null (first at row 1)")


# --delimiter and --no-input-header ---------------------------------------------------------------


@pytest.mark.parametrize("chunks", [[], ["--chunk-rows", "1"]])
def test_delimiter_and_no_header(tmp_path: Path, chunks: list[str]) -> None:
    path = tmp_path / "t.csv"
    path.write_text("1.5;0\n2;0\nnan;2\n")
    result = run(
        "sum",
        path,
        "--delimiter",
        ";",
        "--no-input-header",
        "--data-column",
        "1",
        "--ids-column",
        "2",
        "-q",
        *chunks,
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "0\t3.5\n1\t0.0\n2\tnan\n"


def test_delimiter_tab_spelling_and_header(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("v\ts\n1\t0\n2\t1\n")
    result = run(*SUM, path, "--delimiter", "\\t", "-q")
    assert result.stdout == "0\t1\n1\t2\n"


def test_no_header_names_columns_from_one(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("1,0\n2,1\n")
    result = run("sum", path, "--no-input-header", "--data-column", "0", "--ids-column", "2")
    one_error_line(result, 2, "no column '0' (columns: 1, 2)", "numbered from 1")


@pytest.mark.parametrize("bad", [";;", "", '"'])
def test_bad_delimiter_is_a_usage_error(tmp_path: Path, bad: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text("v,s\n1,0\n")
    one_error_line(run(*SUM, path, "--delimiter", bad), 2, "--delimiter", "need one character")


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz"])
@pytest.mark.parametrize("chunk", [[], ["--memory-limit", "1MB"]], ids=["whole", "streamed"])
def test_a_line_of_other_fields_is_named_by_its_number(
    tmp_path: Path, chunk: list[str], suffix: str
) -> None:
    """pyarrow's threaded reader names no line: segcli reads the file again to find it."""
    lines = ["v,s", *[f"{i % 7},{i % 3}" for i in range(200_000)]]
    lines[150_001] = "1,2,9"
    text = ("\n".join(lines) + "\n").encode()
    path = tmp_path / f"t{suffix}"
    path.write_bytes(gzip.compress(text, compresslevel=1) if suffix.endswith(".gz") else text)
    out = tmp_path / "out.npy"
    result = run(*SUM, path, "-o", out, *chunk)
    one_error_line(result, 3, f"{path}: line 150002 has 3 fields, the header 2: 1,2,9")
    assert not out.exists()
    short = tmp_path / "short.csv"
    short.write_text("1,0\n2\n")
    result = run("sum", short, "--no-input-header", "--data-column", "1", "--ids-column", "2")
    one_error_line(result, 3, f"{short}: line 2 has 1 field, the first line 2: 2")


@pytest.mark.parametrize(
    ("suffix", "end"),
    [(".csv", "\n"), (".csv", "\r\n"), (".csv.gz", "\r\n")],
    ids=["lf", "crlf", "gz"],
)
@pytest.mark.parametrize(
    "chunk",
    [[], ["--memory-limit", "1MB"], ["--chunk-rows", "10000"]],
    ids=["whole", "streamed", "chunk-rows"],
)
def test_a_line_of_other_fields_after_quoted_line_breaks_is_its_physical_line(
    tmp_path: Path, chunk: list[str], suffix: str, end: str
) -> None:
    """pyarrow numbers records: one whose quoted field holds a line break spans two lines,
    and the line named was the record's number, not the line a text editor shows."""
    records = ["v,s,note", *[f'{i % 7},{i % 3},"one{end}two"' for i in range(80_000)], "1,2"]
    text = (end.join(records) + end).encode()
    path = tmp_path / f"t{suffix}"
    path.write_bytes(gzip.compress(text, compresslevel=1) if suffix.endswith(".gz") else text)
    result = run(*SUM, path, "-o", tmp_path / "out.npy", *chunk)
    # The header, two lines for each of 80,000 records, then the short one.
    one_error_line(result, 3, f"{path}: line 160002 has 2 fields, the header 3: 1,2")


@pytest.mark.parametrize(
    ("text", "line", "record"),
    [
        ('v,s\n1,0\n"a\nb",1\n2,1,x\n', 5, "2,1,x"),
        ("v,s\n1,0\n\n\n2,1,x\n", 5, "2,1,x"),  # pyarrow skips blank lines, and did not count them
        # The line the record starts on, and the record whole, its break written as \n.
        ('v,s\n1,0\n"x\ny",1,2\n', 3, '"x\\ny",1,2'),
    ],
    ids=["quoted", "blank", "own-break"],
)
@pytest.mark.parametrize("chunk", [[], ["--chunk-rows", "3"]], ids=["whole", "chunk-rows"])
def test_a_short_file_names_the_physical_line_of_other_fields(
    tmp_path: Path, text: str, line: int, record: str, chunk: list[str]
) -> None:
    path = tmp_path / "t.csv"
    path.write_text(text)
    result = run(*SUM, path, *chunk)
    one_error_line(result, 3, f"{path}: line {line} has 3 fields, the header 2: {record}")
    assert result.stderr.rstrip("\n").endswith(f": {record}")


def test_a_line_of_other_fields_that_is_not_utf8_is_named_by_its_number(tmp_path: Path) -> None:
    """pyarrow decodes such a line as UTF-8 before segcli's handler can count it: the decode
    error came out as an "Exception ignored" traceback, and the line went unnamed."""
    path, out = tmp_path / "t.csv", tmp_path / "out.npy"
    path.write_bytes('v,s\n1,0\n"caf\u00e9",1\n'.encode() + b"2,1,caf\xe9\n3,1\n")
    result = run(*SUM, path, "-o", out)
    one_error_line(result, 3, f"{path}: line 4 has 3 fields, the header 2: 2,1,caf")
    assert len(result.stderr.splitlines()) == 1
    assert not out.exists()


def test_a_delimiter_of_more_than_one_byte_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("v\u00a7s\n1\u00a70\n", encoding="utf-8")
    result = run(*SUM, path, "--delimiter", "\u00a7")
    one_error_line(result, 2, "--delimiter '\u00a7'", "need an ASCII character")


def test_csv_without_a_header_read_with_one_hints_at_the_option(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("1,0\n2,1\n")
    result = run("sum", path, "--data-column", "1", "--ids-column", "2")
    one_error_line(result, 2, "no column '2' (columns: 1, 0)", "--no-input-header")
    # --no-header is for the output's header line (SPEC's agg), not the CSV input's.
    headerless = run(
        "agg", path, "--op", "sum", "--no-input-header", "--no-header",
        "--data-column", "1", "--ids-column", "2",
    )  # fmt: skip
    assert headerless.exit_code == 0, headerless.stderr
    assert headerless.stdout.splitlines() == ["0\t1\t1", "1\t2\t1"]


def test_csv_options_refused_for_other_inputs(tmp_path: Path) -> None:
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, np.ones(2))
    np.save(ids, np.zeros(2, np.int64))
    one_error_line(
        run("sum", data, ids, "--no-input-header"),
        2,
        "--no-input-header applies to CSV/TSV inputs only",
    )
    one_error_line(run("sum", data, ids, "--delimiter", ";"), 2, "--delimiter applies to CSV/TSV")


# Duplicate names, decimals, dictionaries ----------------------------------------------------


def duplicate_table(tmp_path: Path, fmt: str) -> Path:
    path = tmp_path / f"dup.{fmt}"
    table = pa.table(
        [pa.array([1.0, 2.0]), pa.array([3.0, 4.0]), pa.array([0, 1])], names=["v", "v", "s"]
    )
    if fmt == "csv":
        path.write_text("v,v,s\n1,3,0\n2,4,1\n")
    elif fmt == "parquet":
        pq.write_table(table, path)
    else:
        feather.write_feather(table, path)
    return path


@pytest.mark.parametrize("fmt", ["csv", "parquet", "arrow"])
@pytest.mark.parametrize("chunks", [[], ["--chunk-rows", "1"]])
def test_duplicate_column_name_in_use(tmp_path: Path, fmt: str, chunks: list[str]) -> None:
    path = duplicate_table(tmp_path, fmt)
    result = run(*SUM, path, *chunks, "-o", tmp_path / "o.npy")
    one_error_line(result, 3, f"dup.{fmt}: 2 columns are named 'v'")
    assert not (tmp_path / "o.npy").exists()


@pytest.mark.parametrize("fmt", ["csv", "tsv", "parquet"])
def test_a_golden_with_the_value_column_twice_is_a_read_error(tmp_path: Path, fmt: str) -> None:
    # A CSV golden's columns went into a dict: the last 'value' was compared, the first not.
    data = tmp_path / "d.csv"
    data.write_text("s,v\n0,1.0\n1,2.0\n")
    golden = tmp_path / f"golden.{fmt}"
    table = pa.Table.from_arrays([pa.array([9.0, 9.0]), pa.array([1.0, 2.0])], ["value", "value"])
    if fmt == "parquet":
        pq.write_table(table, golden)
    else:
        pcsv.write_csv(table, golden, pcsv.WriteOptions(delimiter="\t" if fmt == "tsv" else ","))
    result = run(*SUM, data, "--expect", golden, "-q")
    one_error_line(result, 3, f"golden.{fmt}: 2 columns are named 'value'")


@pytest.mark.parametrize("end", ["\n", "\r\n"], ids=["lf", "crlf"])
def test_a_golden_line_of_other_fields_is_its_physical_line(tmp_path: Path, end: str) -> None:
    """A golden's rows were numbered as records: a quoted field holding a line break (a
    segment key, a note) spans two lines."""
    data, golden = tmp_path / "d.csv", tmp_path / "golden.csv"
    data.write_text("s,v\n0,1.0\n1,2.0\n")
    golden.write_bytes(end.join(["value,note", '1,"a', 'b"', "2,3,4", ""]).encode())
    result = run(*SUM, data, "--expect", golden, "-q")
    one_error_line(result, 3, f"{golden}: line 4 has 3 fields, the header 2")


@pytest.mark.parametrize("fmt", ["csv", "parquet", "arrow"])
def test_duplicate_column_name_not_in_use(tmp_path: Path, fmt: str) -> None:
    path = duplicate_table(tmp_path, fmt)
    result = run("count", path, "--data-column", "s", "--ids-column", "s", "-q")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "0\t1\n1\t1\n"


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
@pytest.mark.parametrize("chunks", [[], ["--chunk-rows", "2"]])
def test_decimal_column_read_as_float64(tmp_path: Path, fmt: str, chunks: list[str]) -> None:
    path = tmp_path / f"t.{fmt}"
    values = pa.array([Decimal("1.25"), Decimal("2.50"), Decimal("-3.00")], pa.decimal128(10, 2))
    table = pa.table({"v": values, "s": [0, 0, 1]})
    pq.write_table(table, path) if fmt == "parquet" else feather.write_feather(table, path)
    result = run(*SUM, path, *chunks, "--summary-json", tmp_path / "j.json")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "0\t3.75\n1\t-3.0\n"
    assert "note            data: decimal128(10, 2) read as float64" in result.stderr
    facts = json.loads((tmp_path / "j.json").read_text())
    assert facts["data"]["dtype"] == "float64"
    assert facts["data"]["note"] == "decimal128(10, 2) read as float64"


@pytest.mark.parametrize("chunks", [[], ["--chunk-rows", "2"]])
def test_arrow_dictionary_column_is_decoded(tmp_path: Path, chunks: list[str]) -> None:
    path = tmp_path / "t.arrow"
    values = pa.array([1.5, 2.5, 1.5, 4.0], pa.float32()).dictionary_encode()
    ids = pa.array([0, 1, 1, 0], pa.int32()).dictionary_encode()
    feather.write_feather(pa.table({"v": values, "s": ids}), path)
    result = run(*SUM, path, *chunks, "-q")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "0\t5.5\n1\t4.0\n"


# Crafted segcli metadata --------------------------------------------------------------------

CRAFTED = [
    (b"segcli.inner_shape", b"[1e400]"),
    (b"segcli.inner_shape", b"[-1]"),
    (b"segcli.inner_shape", b"[99999999999999999999]"),
    (b"segcli.inner_shape", b"[" * 100_000 + b"]" * 100_000),
    (b"segcli.inner_shape", b"not json"),
    (b"segcli.inner_shape", b'{"a": 1}'),
    (b"segcli.inner_shape", b"[true]"),
    (b"segcli.dtype", b"bogus"),
    (b"segcli.dtype", b"object"),
    (b"segcli.dtype", b"\xff\xfe"),
]


def crafted_file(tmp_path: Path, fmt: str, key: bytes, value: bytes) -> Path:
    table = pa.table({"segment": [0, 1], "value": [1.0, 2.0]})
    table = table.replace_schema_metadata({key: value})
    path = tmp_path / f"crafted.{fmt}"
    pq.write_table(table, path) if fmt == "parquet" else feather.write_feather(table, path)
    return path


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
@pytest.mark.parametrize(("key", "value"), CRAFTED, ids=range(len(CRAFTED)))
@pytest.mark.parametrize("use", ["input", "stream", "expect"])
def test_crafted_metadata(tmp_path: Path, fmt: str, key: bytes, value: bytes, use: str) -> None:
    path = crafted_file(tmp_path, fmt, key, value)
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, np.array([1.0, 2.0]))
    np.save(ids, np.array([0, 1]))
    if use == "expect":
        result = run("sum", data, ids, "--expect", path, "-o", tmp_path / "o.npy")
    else:
        chunks = ["--chunk-rows", "1"] if use == "stream" else []
        result = run(
            "sum",
            path,
            "--data-column",
            "value",
            "--ids-column",
            "segment",
            *chunks,
            "-o",
            tmp_path / "o.npy",
        )
    one_error_line(result, 3, f"crafted.{fmt}: bad {key.decode()} in the schema metadata")
    assert len(result.stderr.strip().splitlines()) == 1 and len(result.stderr) < 300
    assert not (tmp_path / "o.npy").exists()


@pytest.mark.parametrize("chunks", [[], ["--chunk-rows", "2"]])
def test_no_header_gzipped_tsv(tmp_path: Path, chunks: list[str]) -> None:
    path = tmp_path / "t.tsv.gz"
    path.write_bytes(gzip.compress(b"0\t1.5\n0\t2\n1\t-inf\n"))
    result = run(
        "sum", path, "--no-input-header", "--data-column", "2", "--ids-column", "1", "-q", *chunks
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "0\t3.5\n1\t-inf\n"


# Text as other tools write it ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text"),
    [("a.csv", "s,vál\n0,1\n"), ("a.jsonl", '{"s": 0, "vál": 1}\n')],
)
@pytest.mark.parametrize("command", ["sum", "info"])
def test_latin1_column_name_is_a_read_error(
    tmp_path: Path, name: str, text: str, command: str
) -> None:
    path, out = tmp_path / name, tmp_path / "out.npy"
    path.write_bytes(text.encode("latin-1"))
    args = [*SUM, path, "-q", "-o", out] if command == "sum" else ["info", path]
    one_error_line(run(*args), 3, name, "b'v\\xe1l' is not UTF-8", "iconv")
    assert not out.exists()


def expected_sums(path: Path) -> list[str]:
    """The sum of ``v`` per ``s``, as segcli prints it, by pandas."""
    import pandas as pd

    sums = pd.read_csv(path).groupby("s")["v"].sum()
    return [f"{s}\t{v}" for s, v in sums.items()]


STREAMS = [[], ["--chunk-rows", "1000"]]


@pytest.mark.parametrize("chunks", STREAMS)
def test_quoted_line_breaks_across_blocks(tmp_path: Path, chunks: list[str]) -> None:
    path = tmp_path / "notes.csv"
    rows = [f'{i % 3},"line one\nline {i}, ""quoted""",{i}' for i in range(60_000)]
    path.write_text("s,note,v\n" + "\n".join(rows) + "\n")
    assert path.stat().st_size > 2 << 20  # several blocks of text
    result = run(*SUM, path, "-q", *chunks)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == expected_sums(path)


@pytest.mark.parametrize("chunks", STREAMS)
def test_first_megabyte_ends_inside_a_quoted_line_break(tmp_path: Path, chunks: list[str]) -> None:
    """The column types come from the first megabyte's whole lines: a line break in a quoted
    field there does not end a line."""
    path = tmp_path / "cut.csv"
    plain = "0,plain,1\n" * ((1 << 20) // 10 - 20)
    path.write_text("s,note,v\n" + plain + '1,"first\n' + "x" * 400 + '",2\n' + "2,plain,3\n")
    result = run(*SUM, path, "-q", *chunks)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == expected_sums(path)


@pytest.mark.parametrize("chunks", STREAMS)
@pytest.mark.parametrize("long", ["header", "row"])
def test_line_longer_than_a_block(tmp_path: Path, chunks: list[str], long: str) -> None:
    path = tmp_path / "wide.csv"
    if long == "header":
        names = ",".join(f"{i}{'c' * 1000}" for i in range(1200))  # over a megabyte
        path.write_text(f"s,v,{names}\n0,1.5{',1' * 1200}\n1,2{',2' * 1200}\n")
    else:
        path.write_text(f"s,v,note\n0,1.5,a\n1,2,{'x' * (3 << 20)}\n0,3,b\n")
    result = run(*SUM, path, "-q", *chunks)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == expected_sums(path)


TEXTS = {".csv": "s,v\n0,1\n", ".tsv": "s\tv\n0\t1\n", ".jsonl": '{"s": 0, "v": 1}\n'}


@pytest.mark.parametrize(
    ("name", "compress", "said"),
    [
        ("a.csv", gzip.compress, "gzip"),
        ("a.tsv", bz2.compress, "bzip2"),
        ("a.jsonl", gzip.compress, "gzip"),
    ],
)
@pytest.mark.parametrize("chunks", [[], ["--chunk-rows", "1"]])
def test_compressed_file_without_its_suffix(
    tmp_path: Path, name: str, compress: Any, said: str, chunks: list[str]
) -> None:
    path, out = tmp_path / name, tmp_path / "out.npy"
    path.write_bytes(compress(TEXTS[path.suffix].encode()))
    one_error_line(run(*SUM, path, "-q", "-o", out, *chunks), 3, name, f"{said}-compressed")
    assert not out.exists()


def _binary_table(path: Path, fmt: str) -> None:
    """A table of columns ``s`` and ``v`` (one array for .npy) in ``fmt``, at ``path``."""
    table = pa.table({"s": [0, 1], "v": [1.0, 2.0]})
    if fmt == "npy":
        with path.open("wb") as f:
            np.save(f, np.array([1.0, 2.0]))
    elif fmt == "parquet":
        pq.write_table(table, path)
    else:
        feather.write_feather(table, path)


@pytest.mark.parametrize(
    ("name", "fmt", "said"),
    [
        ("a.csv", "npy", "a .npy file"),
        ("a.tsv", "parquet", "a Parquet file"),
        ("a.jsonl", "arrow", "an Arrow IPC file"),
        ("a.npy", "parquet", "a Parquet file"),
        ("a.parquet", "arrow", "an Arrow IPC file"),
    ],
)
def test_binary_file_named_as_another_format(
    tmp_path: Path, name: str, fmt: str, said: str
) -> None:
    """Read as its name says, a .npy named .csv met the CSV parser with binary bytes: a
    warning traceback, then an error quoting the bytes."""
    path, out = tmp_path / name, tmp_path / "out.npy"
    _binary_table(path, fmt)
    result = run(*SUM, path, "-q", "-o", out)
    one_error_line(result, 3, f"{name}: this is {said}, but its name ends in {path.suffix}")
    assert len(result.stderr.splitlines()) == 1
    assert not out.exists()


def test_header_starting_like_parquet_is_text(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text("PAR1,s,v\n1,0,2\n")
    result = run(*SUM, path, "-q")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "0\t2\n"


def test_header_starting_like_bzip2_is_text(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text("BZh,s,v\n1,0,2\n")
    result = run(*SUM, path, "-q")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "0\t2\n"


@pytest.mark.parametrize(
    ("cells", "said"),
    [
        (["1.5", "x"], "row 1 holds 'x' (1 value that is not a number)"),
        (['"1,000"', "2"], "row 0 holds '1,000' (1 value that is not a number; thousands"),
        (["1.5", '"2,5"'], "row 1 holds '2,5' (1 value that is not a number; thousands"),
    ],
)
@pytest.mark.parametrize("command", [SUM, ["agg", "--op", "sum,mean", "--data-column", "v,s"]])
@pytest.mark.parametrize("chunks", [[], ["--chunk-rows", "1"]])
def test_text_in_a_numeric_column_names_its_first_value(
    tmp_path: Path, cells: list[str], said: str, command: list[str], chunks: list[str]
) -> None:
    path, out = tmp_path / "t.csv", tmp_path / "out.csv"
    path.write_text("s,v\n" + "".join(f"{i},{cell}\n" for i, cell in enumerate(cells)))
    args = command if command == SUM else [*command, "--by", "s"]
    result = run(*args, path, "-q", "-o", out, *chunks)
    one_error_line(result, 1, "t.csv: column 'v' has type string", said)
    assert not out.exists()


@pytest.mark.parametrize("chunks", [[], ["--chunk-rows", "1"]])
@pytest.mark.parametrize(
    ("args", "column"),
    [
        (["--data-column", "v", "--ids-column", "s"], "v"),
        (["--data-column", "s", "--by", "k"], "k"),
        (["--op", "sum,max", "--data-column", "s", "--by", "k"], "k"),
    ],
)
def test_latin1_text_is_a_read_error_naming_its_row(
    tmp_path: Path, chunks: list[str], args: list[str], column: str
) -> None:
    path, out = tmp_path / "t.csv", tmp_path / "out.csv"
    path.write_bytes("s,v,k\n0,1,a\n1,2,b\n1,2°,café\n".encode("latin-1"))
    command = "agg" if "--op" in args else "sum"
    result = run(command, path, *args, "-o", out, *chunks)
    said = f"t.csv: column '{column}' row 2 holds b'"
    one_error_line(result, 3, said, "which is not UTF-8; convert the file to UTF-8")
    assert not out.exists()
    assert run("info", path).exit_code == 0  # described as pyarrow reads it: binary


@pytest.mark.parametrize(
    ("args", "column"),
    [
        (["count", "--data-column", "s", "--by", "k"], "k"),  # a key column
        (["sum", "--data-column", "v", "--ids-column", "s"], "v"),  # a number column
        (["sum", "--data-column", "v", "--by", "s"], "v"),
    ],
)
def test_text_not_utf8_past_the_first_megabyte_is_the_whole_reads_error(
    tmp_path: Path, args: list[str], column: str
) -> None:
    """Streamed, the column's type is fixed by the first megabyte, and pyarrow then fails on
    the bytes without naming them: the run names them as a whole read does."""
    path, out = tmp_path / "t.csv", tmp_path / "o.parquet"
    lines = ["k,v,s", *["a,1.5,0", "b,2.5,1"] * 75_000, "caf\xe9,1\xe9,0", "b,2.5,1"]
    path.write_bytes("\n".join(lines).encode("latin-1") + b"\n")
    whole = run(*args, path, "--memory-limit", "4GB", "-o", out)
    streamed = run(*args, path, "--chunk-rows", 1000, "-o", out)
    value = "b'caf\\xe9'" if column == "k" else "b'1\\xe9'"
    said = f"t.csv: column '{column}' row 150000 holds {value}, which is not UTF-8"
    one_error_line(whole, 3, said)
    assert (streamed.exit_code, streamed.stderr) == (whole.exit_code, whole.stderr)
    assert not out.exists()


@pytest.mark.parametrize(
    ("command", "column"),
    [
        (SUM, "v"),
        (["agg", "--op", "sum", "--data-column", "v", "--ids-column", "s"], "v"),
        (["agg", "--op", "sum", "--data-column", "w,v", "--ids-column", "s"], "v"),
        (["agg", "--op", "sum", "--data-column", "w,v", "--by", "s"], "v"),
    ],
)
@pytest.mark.parametrize(
    ("late", "said", "line_end"),
    [("1.5", "1.5", "\n"), ("abc", "abc", "\n"), ('" 2.5"', "2.5", "\r\n")],
)
def test_streamed_value_of_another_type_names_its_row(
    tmp_path: Path, command: list[str], column: str, late: str, said: str, line_end: str
) -> None:
    path, out = tmp_path / "t.csv", tmp_path / "o.parquet"
    lines = ["w,v,s", *["2,1,0"] * 200_000, *["2,1,1"] * 1000, f"2,{late},0", "2,7,1"]
    path.write_bytes((line_end.join(lines) + line_end).encode())
    result = run(*command, path, "--chunk-rows", 1000, "-o", out)
    assert not out.exists()
    if late == "abc":
        # No number at all: a whole read makes the column text and refuses it; the streamed
        # run gives that error, not a hint to read the file whole.
        whole = run(*command, path, "--memory-limit", "4GB", "-o", out)
        one_error_line(whole, 1, f"t.csv: column '{column}' has type string, not a numeric")
        assert result.stderr == whole.stderr
        assert result.exit_code == whole.exit_code and not out.exists()
        return
    said = f"t.csv: column '{column}' holds '{said}' after its first rows"
    one_error_line(result, 3, said, "(first at row 201000)")


@pytest.mark.parametrize(
    ("late", "code", "said"),
    [
        # a whole read refuses the text too: the streamed run says what it would say
        ('"a\nb",1', 1, "column 'v' has type string, not a numeric type: row 300000 holds 'a\\nb'"),
        ('1,"a\nb"', 3, "column 'k' holds 'a\\nb' after its first rows, which made it int64"),
    ],
    ids=["data", "key"],
)
def test_streamed_value_holding_a_line_break_names_its_column_and_row(
    tmp_path: Path, late: str, code: int, said: str
) -> None:
    """pyarrow quotes the value, line break and all: the error was cut at the break, and
    named neither the column nor the row."""
    path, out = tmp_path / "t.csv", tmp_path / "o.csv"
    path.write_text("\n".join(["v,k", *["1,0"] * 300_000, late, "2,1"]) + "\n")
    args = ["sum", path, "--data-column", "v", "--by", "k", "--chunk-rows", 1000, "-o", out]
    result = run(*args)
    one_error_line(result, code, f"t.csv: {said}", "row 300000")
    assert len(result.stderr.splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize("chunks", [[], ["--chunk-rows", "1"]])
@pytest.mark.parametrize(
    ("big", "args"),
    [
        ("18446744073709551615", ["--data-column", "v", "--ids-column", "s"]),
        ("-99999999999999999999", ["--data-column", "v", "--ids-column", "s"]),
        ("99999999999999999999", ["--data-column", "s", "--ids-column", "v"]),
        ("18446744073709551615", ["--data-column", "s", "--by", "v"]),
    ],
)
def test_integer_beyond_int64_is_not_read_rounded(
    tmp_path: Path, chunks: list[str], big: str, args: list[str]
) -> None:
    path, out = tmp_path / "t.csv", tmp_path / "out.parquet"
    path.write_text(f"s,v\n0,2.5\n1,{big}\n0,1\n")
    result = run("sum", path, *args, "-o", out, "-q", *chunks)
    one_error_line(
        result,
        1,
        f"t.csv: column 'v' holds {big} at row 1, an integer beyond int64, which would be read "
        "rounded, as a float64 (1 such integer)",
    )
    assert not out.exists()
    assert run("info", path).exit_code == 0  # described as pyarrow reads it


@pytest.mark.parametrize("suffix", ["csv", "jsonl"])
@pytest.mark.parametrize("chunks", [[], ["--chunk-rows", "1000"]])
def test_integers_beyond_int64_past_the_first_megabyte_are_counted(
    tmp_path: Path, chunks: list[str], suffix: str
) -> None:
    # Streamed, the first megabyte makes 'v' int64: the integers beyond it later are the
    # whole read's error (exit 1, with their count), not a type kept from the first rows.
    rows = 200_000
    big = {150_000: "99999999999999999999", 160_000: "-99999999999999999999"}
    values = [big.get(i, str(i)) for i in range(rows)]
    path = tmp_path / f"t.{suffix}"
    if suffix == "csv":
        path.write_text("s,v\n" + "".join(f"{i % 3},{v}\n" for i, v in enumerate(values)))
    else:
        path.write_text("".join(f'{{"s": {i % 3}, "v": {v}}}\n' for i, v in enumerate(values)))
    assert path.stat().st_size > 1 << 20
    result = run("sum", path, "--data-column", "v", "--ids-column", "s", "-q", *chunks)
    assert (result.exit_code, result.stderr) == (
        1,
        f"Error: {path}: column 'v' holds 99999999999999999999 at row 150000, an integer "
        "beyond int64, which would be read rounded, as a float64 (2 such integers)\n",
    )


@pytest.mark.parametrize("chunks", [[], ["--chunk-rows", "1"]])
def test_large_floats_and_int64_bounds_are_read(tmp_path: Path, chunks: list[str]) -> None:
    path = tmp_path / "t.csv"
    path.write_text("s,v\n0,1e20\n1,-9223372036854775808\n2,9223372036854775807\n0,1.5e19\n")
    result = run(*SUM, path, "-q", *chunks)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == expected_sums(path)


@pytest.mark.parametrize(
    ("header", "said"),
    [
        ("s, v", "(the header names it ' v', with blanks: ask for it so)"),
        ("s;v", "(the header is one field: split with --delimiter ';'?)"),
        ("s|v", "(the header is one field: split with --delimiter '|'?)"),
    ],
)
def test_a_header_that_lacks_the_column_says_why(tmp_path: Path, header: str, said: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(header + "\n")
    one_error_line(run(*SUM, path, "-q"), 2, "t.csv: no column 'v'", said)


@pytest.mark.parametrize("chunks", STREAMS)
def test_a_quote_inside_a_plain_field_is_a_character(tmp_path: Path, chunks: list[str]) -> None:
    """``12"`` (inches) opens no quoted field: the first megabyte's lines, and so the column
    types, are what pyarrow reads them to be."""
    path = tmp_path / "inches.csv"
    rows = [f"x,{i},{i % 3}" for i in range(200_000)]
    rows[5], rows[1000] = '12",5,2', "x,1000.5,1"
    path.write_text("a,v,s\n" + "\n".join(rows) + "\n")
    result = run(*SUM, path, "-q", *chunks)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == expected_sums(path)


@pytest.mark.parametrize("chunk", [[], ["--chunk-rows", "2"]], ids=["in-memory", "streamed"])
def test_a_header_only_table_says_its_ids_may_have_no_values(
    tmp_path: Path, chunk: list[str]
) -> None:
    path = tmp_path / "t.csv"
    path.write_text("v,id\n")
    out = tmp_path / "out.npy"
    result = run("sum", path, "--data-column", "v", "--ids-column", "id", "-o", out, *chunk)
    one_error_line(result, 1, f"{path}:id: segment_ids", "header-only table")
    assert not out.exists()


@pytest.mark.parametrize(
    "command",
    [SUM, ["sum", "--data-column", "v", "--by", "s"]],
    ids=["ids", "by"],
)
def test_the_whole_read_the_type_error_suggests_is_one(tmp_path: Path, command: list[str]) -> None:
    """The error's hint names a --memory-limit that does read the file whole, --by too (whose
    estimate counts the keys' codes and dictionaries besides the columns: 15 times the text
    still streams)."""
    path = tmp_path / "t.csv"
    lines = ["w,v,s", *["2,1,0"] * 200_000, "2,1.5,1"]
    path.write_text("\n".join(lines) + "\n")
    size = path.stat().st_size
    under = size * (15 if "--by" in command else 3)
    streamed = run(*command, path, "--memory-limit", under, "-o", tmp_path / "a.parquet")
    one_error_line(streamed, 3, "holds '1.5' after its first rows", "of 16 times its size or more")
    whole = run(*command, path, "--memory-limit", size * 16, "-o", tmp_path / "b.parquet")
    assert whole.exit_code == 0, whole.stderr
    packed = tmp_path / "t.csv.gz"
    packed.write_bytes(gzip.compress(path.read_bytes(), compresslevel=1))
    # A compressed file always streams: no memory limit reads it whole, so the hint says to
    # decompress it first.
    compressed = run(*command, packed, "--memory-limit", size * 100, "-o", tmp_path / "c.parquet")
    one_error_line(compressed, 3, "holds '1.5' after its first rows", "decompress it first")


def test_info_gives_the_types_a_whole_read_infers_past_the_first_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """info reads a block at a time: a value a column's first-block type cannot hold moves
    it on to the next type a whole read would try (after bool, which holds "true" but not
    "5", no type holds both but string), however many blocks it takes."""
    import segcli.io.text_facts as text_facts

    monkeypatch.setattr(text_facts, "_CSV_BLOCK_BYTES", 64)
    path = tmp_path / "t.csv"
    lines = ["1,true,,2020-01-01"] * 30 + ["1.5,5,5,2020-01-01T10:00:00"] + ["2,,,"] * 30
    path.write_text("a,b,c,d\n" + "\n".join(lines) + "\n")
    result = run("info", path, "--json")
    assert result.exit_code == 0, result.stderr
    facts = json.loads(result.stdout)
    whole = pcsv.read_csv(path)
    assert facts["rows"] == whole.num_rows == 61
    assert [(c["name"], c["type"]) for c in facts["columns"]] == [
        ("a", "double"),
        ("b", "string"),
        ("c", "int64"),
        ("d", "timestamp[s]"),
    ]
    assert [str(type_) for type_ in whole.schema.types] == [c["type"] for c in facts["columns"]]
    assert [c["nulls"] for c in facts["columns"]] == [0, 30, 60, 30]


def test_info_reads_a_file_whose_columns_all_change_type_late_twice_at_most(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the first block's types do not hold the file, info reads it again once, every
    column as text, and finds each column's type there: it read the file again for each
    column that changed (and each type tried), its time growing with the columns."""
    import segcli.io.text_facts as text_facts
    from segcli.io.tables import TableFile

    monkeypatch.setattr(text_facts, "_CSV_BLOCK_BYTES", 64)
    reads = []
    batches = TableFile.text_batches

    def counted(self: TableFile, *args: Any, **kwargs: Any) -> Any:
        reads.append(args)
        return batches(self, *args, **kwargs)

    monkeypatch.setattr(TableFile, "text_batches", counted)
    path = tmp_path / "t.csv"
    # e: a number, a time of day, a number: no type but text holds them all (float64, tried
    # for the last, does not hold the time).
    last = ["x", "1.5", "2020-01-01", "1", "12:00:00", "true"]
    first = ["1", "2", "2020-01-01", "", "1", "12:00:00"]
    lines = [",".join(first)] * 40 + [",".join(last)] + [",".join([*first[:3], "", "2", "1.5"])]
    path.write_text("a,b,c,d,e,f\n" + "\n".join(lines) + "\n")
    result = run("info", path, "--json")
    assert result.exit_code == 0, result.stderr
    facts = json.loads(result.stdout)
    whole = pcsv.read_csv(path)
    assert [c["type"] for c in facts["columns"]] == [str(type_) for type_ in whole.schema.types]
    assert [c["type"] for c in facts["columns"]] == [
        "string", "double", "date32[day]", "int64", "string", "string"
    ]  # fmt: skip
    assert facts["rows"] == whole.num_rows == 42
    assert [c["nulls"] for c in facts["columns"]] == [0, 0, 0, 41, 0, 0]
    assert len(reads) <= 2, reads


def test_info_reads_a_header_naming_a_column_twice_a_block_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CSV whose header names a column twice was read whole by info, which read the first
    of those columns for both (the second 'a' below was int64 with no nulls); now it is read
    a block at a time, also where its types change past the first block (types are given
    to columns by name: both are read as bytes, the one not UTF-8 aside)."""
    import segcli.io.text_facts as text_facts
    from segcli.io.tables import TableFile

    monkeypatch.setattr(text_facts, "_CSV_BLOCK_BYTES", 64)
    whole_reads = []
    read = TableFile.read

    def counted(self: TableFile, *args: Any, **kwargs: Any) -> Any:
        whole_reads.append(args)
        return read(self, *args, **kwargs)

    monkeypatch.setattr(TableFile, "read", counted)
    path = tmp_path / "t.csv"
    path.write_text("a,a,b\n" + "1,2.5,x\n" * 40 + "3,,\n")
    facts = json.loads(run("info", path, "--json").stdout)
    assert [(c["name"], c["type"], c["nulls"]) for c in facts["columns"]] == [
        ("a", "int64", 0), ("a", "double", 1), ("b", "string", 1)
    ]  # fmt: skip
    assert facts["rows"] == 41
    assert whole_reads == []
    path.write_bytes(b"a,a,b\n" + b"1,2.5,x\n" * 40 + b"x,,\n" + b"2,1,\xe9\n")
    facts = json.loads(run("info", path, "--json").stdout)
    assert [(c["type"], c["nulls"]) for c in facts["columns"]] == [
        ("string", 0), ("double", 1), ("binary", 1)
    ]  # fmt: skip
    assert whole_reads == []
    path.write_bytes(b"a,b,a\n" + b"1,x,2.5\n" * 40 + b"x,,\xe9\n")
    facts = json.loads(run("info", path, "--json").stdout)
    assert [(c["type"], c["nulls"]) for c in facts["columns"]] == [
        ("string", 0), ("string", 1), ("binary", 0)
    ]  # fmt: skip
    assert whole_reads == []
