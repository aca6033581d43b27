"""Key columns as text for CSV/TSV and stdout: binary keys as hex, read from the buffers, and
a text run that does not load pandas."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from segcli.io.keyed import key_strings
from tests.entry import run_main

VALUES = [b"\x00\xff", None, b"", b"ab\x10", None, b"z"]


def hexed(values: list[bytes | None]) -> list[str | None]:
    return [None if v is None else v.hex() for v in values]


@pytest.mark.parametrize("type_", [pa.binary(), pa.large_binary()], ids=["binary", "large"])
@pytest.mark.parametrize("offset", [0, 1, 3])
def test_binary_keys_are_hex_text(type_: pa.DataType, offset: int) -> None:
    column = pa.array(VALUES, type_).slice(offset)
    text = key_strings(column)
    assert text.type == pa.string()
    assert text.to_pylist() == hexed(VALUES[offset:])
    assert key_strings(column.slice(0, 2)).to_pylist() == hexed(VALUES[offset : offset + 2])
    text.validate(full=True)


def test_dictionary_chunked_and_empty_binary_keys() -> None:
    column = pa.array(VALUES, pa.binary())
    assert key_strings(column.dictionary_encode()).to_pylist() == hexed(VALUES)
    chunked = pa.chunked_array([column.slice(0, 2), column.slice(3)])
    assert key_strings(chunked).to_pylist() == hexed(VALUES[:2] + VALUES[3:])
    assert key_strings(pa.array([], pa.binary())).to_pylist() == []
    assert key_strings(pa.array([None, None], pa.binary())).to_pylist() == [None, None]


@pytest.mark.parametrize("type_", [pa.binary(2), pa.binary_view()], ids=["fixed", "view"])
def test_fixed_size_and_view_binary_keys_are_hex_text(type_: pa.DataType) -> None:
    values = [b"\xff\x00", None, b"ab", b"\x80\x01"]
    text = key_strings(pa.array(values, type_))
    assert text.type == pa.string()
    assert text.to_pylist() == hexed(values)


@pytest.mark.parametrize("fmt", ["csv", "json", "stdout"])
def test_fixed_size_binary_keys_that_are_not_utf8_are_written(tmp_path: Path, fmt: str) -> None:
    keys = pa.array([b"\xff\xfe", b"ab", None, b"ab"], pa.binary(2))
    table = pa.table({"k": keys, "x": pa.array([1.0, 2.0, 3.0, 4.0])})
    pq.write_table(table, tmp_path / "t.parquet")
    out = tmp_path / f"out.{fmt}"
    target = ["--format", "tsv", "-o", "-"] if fmt == "stdout" else ["-o", str(out)]
    argv = ["sum", tmp_path / "t.parquet", "--by", "k", "-q", "--null-keys", "group", *target]
    done = run_main(*argv)
    assert done.exit_code == 0, done.stderr
    text = done.stdout if fmt == "stdout" else out.read_text()
    if fmt == "json":
        assert json.loads(text)["keys"] == {"k": ["6162", "fffe", None]}
    else:
        sep = "\t" if fmt == "stdout" else ","
        assert [line.split(sep)[0] for line in text.splitlines()] == ["k", "6162", "fffe", ""]


def test_a_binary_key_run_writing_csv_loads_no_pandas(tmp_path: Path) -> None:
    table = pa.table({"k": pa.array([b"\x01", b"\xab", b"\x01"]), "x": pa.array([1.0, 2.0, 3.0])})
    pq.write_table(table, tmp_path / "t.parquet")
    code = (
        "import atexit, runpy, sys\n"
        "atexit.register(lambda: print('pandas' in sys.modules, file=sys.stderr))\n"
        "sys.argv = ['segcli', *sys.argv[1:]]\n"
        "runpy.run_module('segcli', run_name='__main__')\n"
    )
    out = tmp_path / "out.csv"
    argv = ["mean", str(tmp_path / "t.parquet"), "--by", "k", "-q", "-o", str(out)]
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "False"
    assert out.read_text().splitlines() == ["k,value,count", "01,2.0,2", "ab,2.0,1"]


@pytest.mark.parametrize(
    ("command", "target", "sep"),
    [
        (["sum"], "out.csv", ","),
        (["sum"], "out.tsv", "\t"),
        (["sum"], "-", "\t"),
        (["agg", "--op", "sum,max"], "out.csv", ","),
        (["agg", "--op", "sum,max"], "-", "\t"),
        (["sum"], "keys.tsv", "\t"),  # --keys-out of an .npy output
    ],
)
def test_key_names_with_quotes_or_the_separator_read_back(
    tmp_path: Path, command: list[str], target: str, sep: str
) -> None:
    import pyarrow.csv as pcsv

    names = ['say "hi"', "tab\there", "plain"]
    table = pa.table({**{name: ["a", "b", "a"] for name in names}, "x": [1.0, 2.0, 3.0]})
    pq.write_table(table, tmp_path / "t.parquet")
    out = tmp_path / target
    if target == "keys.tsv":
        where = ["-o", str(tmp_path / "r.npy"), "--keys-out", str(out)]
    else:  # "-": the text lines on stdout
        where = [] if target == "-" else ["-o", str(out)]
    by = ["--data-column", "x", "--by", ",".join(names), "-q"]
    done = run_main(*command, tmp_path / "t.parquet", *by, *where)
    assert done.exit_code == 0, done.stderr
    text = done.stdout.encode() if target == "-" else out.read_bytes()
    read = pcsv.read_csv(pa.BufferReader(text), parse_options=pcsv.ParseOptions(delimiter=sep))
    assert read.column_names[:3] == names
    assert read.column("plain").to_pylist() == ["a", "b"]
