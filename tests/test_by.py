"""``--by``: group by key columns through the command line, checked against pandas groupby.

Each case writes a small table, runs a command as a user would, and compares the keys, values
and counts with pandas' ``groupby`` on the same rows (groups ordered by key ascending, nulls
last, as SPEC says); streaming must give the bytes of the in-memory run for every block size.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import subprocess
import sys
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from tests.entry import Ran, run_main

pd = pytest.importorskip("pandas")

ROWS = 30


run = run_main


def ok(*args: Any) -> Ran:
    result = run(*args)
    assert result.exit_code == 0, result.stderr
    return result


def write_table(path: Path, table: pa.Table) -> Path:
    if path.suffix == ".parquet":
        pq.write_table(table, path, row_group_size=8)  # several row groups
    elif path.suffix == ".arrow":
        with ipc.new_file(path, table.schema) as writer:
            for batch in table.to_batches(max_chunksize=7):
                writer.write_batch(batch)
    else:
        pcsv.write_csv(
            table,
            path,
            pcsv.WriteOptions(delimiter="\t" if path.suffix == ".tsv" else ","),
        )
    return path


def plain(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else value


def nulls_last(key: tuple[Any, ...]) -> list[tuple[bool, Any]]:
    return [(v is None, 0 if v is None else v) for v in key]


def expected(table: pa.Table, by: list[str], op: str = "sum", dropna: bool = True) -> list[Any]:
    """(key, value, count) per group from pandas groupby, ordered as SPEC orders keys."""
    frame = table.to_pandas()
    for name in by:
        column = table.column(name).type
        if pa.types.is_dictionary(column):
            frame[name] = frame[name].astype(object)
    grouped = frame.groupby(by, sort=False, dropna=dropna)["v"]
    values = getattr(grouped, op)()
    counts = grouped.size()
    rows = []
    for (key, value), count in zip(values.items(), counts.to_numpy(), strict=True):
        key = key if isinstance(key, tuple) else (key,)
        rows.append((tuple(plain(_py(k)) for k in key), float(value), int(count)))
    return sorted(rows, key=lambda row: nulls_last(row[0]))


def _py(value: Any) -> Any:
    if value is None or value is pd.NaT:
        return None
    if isinstance(value, pd.Timestamp):
        return value.to_pydatetime()
    if isinstance(value, np.generic):
        return value.item()
    return value


def got(path: Path, by: list[str]) -> list[Any]:
    """(key, value, count) rows of a table output."""
    table = pq.read_table(path) if path.suffix == ".parquet" else ipc.open_file(path).read_all()
    keys = [table.column(name).to_pylist() for name in by]
    return [
        (tuple(plain(column[i]) for column in keys), value, count)
        for i, (value, count) in enumerate(
            zip(table.column("value").to_pylist(), table.column("count").to_pylist(), strict=True)
        )
    ]


def values_table(keys: dict[str, pa.Array], seed: int = 0) -> pa.Table:
    rows = len(next(iter(keys.values())))
    values = np.random.default_rng(seed).integers(0, 50, rows).astype(np.float64)
    return pa.table({**keys, "v": values})


def pick(pool: list[Any], seed: int, nulls: bool = True) -> list[Any]:
    rng = np.random.default_rng(seed)
    chosen = [pool[i] for i in rng.integers(0, len(pool), ROWS)]
    return [None if nulls and rng.random() < 0.15 else v for v in chosen]


UTC = dt.timezone.utc
KEY_KINDS = {
    "string": pa.array(pick(["b", "a", "é", "ab"], 1), pa.string()),
    "dictionary": pa.array(pick(["x", "w", "y"], 2)).dictionary_encode(),
    "int": pa.array(pick([3, -1, 7, 0], 3), pa.int32()),
    "bool": pa.array(pick([True, False], 4), pa.bool_()),
    "date": pa.array(pick([dt.date(2024, 1, 2), dt.date(1999, 5, 5)], 5), pa.date32()),
    "timestamp": pa.array(
        pick([dt.datetime(2024, 1, 1, 5, tzinfo=UTC), dt.datetime(2000, 1, 1, tzinfo=UTC)], 6),
        pa.timestamp("ms", "UTC"),
    ),
    "decimal": pa.array(pick([Decimal("1.50"), Decimal("-3.25")], 7), pa.decimal128(9, 2)),
    "float_nan": pa.array(pick([1.5, float("nan"), -0.5, 2.0], 8), pa.float64()),
    "large_string": pa.array(pick(["zz", "a", "b"], 9), pa.large_string()),
    "binary": pa.array(pick([b"\x00\xff", b"ab"], 10), pa.binary()),
    "fixed_binary": pa.array(pick([b"\xff\xfe", b"ab"], 11), pa.binary(2)),
    "decimal256": pa.array(pick([Decimal("1.50"), Decimal("-3.25")], 12), pa.decimal256(40, 2)),
    # An extension type groups by its stored values and comes out in its own type.
    "uuid": pa.array(
        pick([uuid.UUID(int=2**127 + 5).bytes, uuid.UUID(int=7).bytes], 13), pa.uuid()
    ),
}


@pytest.mark.parametrize("kind", list(KEY_KINDS))
def test_every_key_kind_like_pandas(tmp_path: Path, kind: str) -> None:
    table = values_table({"k": KEY_KINDS[kind]})
    path = write_table(tmp_path / "t.parquet", table)
    out = tmp_path / "out.parquet"
    ok("sum", path, "--by", "k", "--data-column", "v", "-o", out, "-q")
    written = pq.read_table(out)
    assert written.column_names == ["k", "value", "count"]
    assert written.schema.field("k").type == table.schema.field("k").type
    assert got(out, ["k"]) == expected(table, ["k"])
    streamed = tmp_path / "streamed.parquet"
    ok("sum", path, "--by", "k", "--data-column", "v", "-o", streamed, "-q", "--chunk-rows", 7)
    assert streamed.read_bytes() == out.read_bytes()


def _dictionary_of(values: pa.Array, seed: int) -> pa.Array:
    """A dictionary column of ``values`` (kinds whose dictionary_encode pyarrow lacks)."""
    rng = np.random.default_rng(seed)
    indices = [None if rng.random() < 0.15 else int(i) for i in rng.integers(0, len(values), ROWS)]
    return pa.DictionaryArray.from_arrays(pa.array(indices, pa.int8()), values)


# Kinds pyarrow has no hashing, take or cast kernel for: segcli widens them (decimal32/64 as
# decimal128) or gives a dictionary of views out as a dictionary of the plain type.
NARROW_KINDS = {
    "decimal32": (pa.array(pick([Decimal("1.5"), Decimal("-3.2")], 14), pa.decimal32(5, 1)), None),
    "decimal64": (
        pa.array(pick([Decimal("1.50"), Decimal("-3.25")], 15), pa.decimal64(12, 2)),
        None,
    ),
    "dictionary_decimal32": (
        _dictionary_of(pa.array([Decimal("2.5"), Decimal("-1.5")], pa.decimal32(4, 1)), 16),
        None,
    ),
    "dictionary_string_view": (
        _dictionary_of(pa.array(["x", "w", "y"], pa.string_view()), 17),
        pa.dictionary(pa.int8(), pa.string()),
    ),
    "dictionary_binary_view": (
        _dictionary_of(pa.array([b"\x00", b"ab"], pa.binary_view()), 18),
        pa.dictionary(pa.int8(), pa.binary()),
    ),
}


@pytest.mark.parametrize("kind", list(NARROW_KINDS))
def test_key_kinds_without_pyarrow_kernels(tmp_path: Path, kind: str) -> None:
    keys, out_type = NARROW_KINDS[kind]
    table = values_table({"k": keys})
    path = write_table(tmp_path / "t.arrow", table)
    out = tmp_path / "out.arrow"
    ok("sum", path, "--by", "k", "--data-column", "v", "-o", out, "-q")
    written = ipc.open_file(out).read_all()
    assert written.schema.field("k").type == (out_type or keys.type)
    values = table.column("k").to_pylist()
    sums: dict[Any, float] = {}
    for key, value in zip(values, table.column("v").to_pylist(), strict=True):
        if key is not None:
            sums[key] = sums.get(key, 0.0) + value
    assert written.column("k").to_pylist() == sorted(sums)
    assert written.column("value").to_pylist() == [sums[key] for key in sorted(sums)]
    streamed = tmp_path / "streamed.arrow"
    ok("sum", path, "--by", "k", "--data-column", "v", "-o", streamed, "-q", "--chunk-rows", 7)
    assert streamed.read_bytes() == out.read_bytes()


def test_several_keys_and_nulls_grouped(tmp_path: Path) -> None:
    table = values_table({"a": KEY_KINDS["string"], "b": KEY_KINDS["int"]})
    path = write_table(tmp_path / "t.parquet", table)
    out = tmp_path / "out.parquet"
    ok("sum", path, "--by", "a,b", "--data-column", "v", "-o", out, "-q")
    assert got(out, ["a", "b"]) == expected(table, ["a", "b"])
    ok("mean", path, "--by", "a,b", "--null-keys", "group", "-o", out, "-q")  # v: the only rest
    assert got(out, ["a", "b"]) == expected(table, ["a", "b"], "mean", dropna=False)


def test_missing_keys_are_counted_in_the_summary(tmp_path: Path) -> None:
    table = values_table({"k": KEY_KINDS["float_nan"]})
    path = write_table(tmp_path / "t.parquet", table)
    summary = tmp_path / "s.json"
    ok("sum", path, "--by", "k", "-o", tmp_path / "o.csv", "-q", "--summary-json", summary)
    facts = json.loads(summary.read_text())
    missing = sum(1 for v in table.column("k").to_pylist() if v is None or math.isnan(v))
    assert missing > 0
    assert facts["keys"] == {
        "columns": ["k"],
        "types": ["double"],
        "distinct": len(expected(table, ["k"])),
        "rows_dropped_missing_key": missing,
        "null_keys": "drop",
        "keys_from": None,
        "keys_out": None,
    }
    assert facts["rows_dropped_negative"] == missing
    plain_summary = run("sum", path, "--by", "k", "-o", tmp_path / "p.csv").stderr
    assert f"dropped: {missing} rows with a missing key" in plain_summary


@pytest.mark.parametrize("null_keys", ["drop", "group"])
@pytest.mark.parametrize("fmt", ["parquet", "arrow", "csv", "tsv"])
def test_streaming_gives_the_in_memory_bytes(tmp_path: Path, fmt: str, null_keys: str) -> None:
    table = values_table({"a": KEY_KINDS["dictionary"], "b": KEY_KINDS["string"]})
    path = write_table(tmp_path / f"t.{fmt}", table)
    outputs = []
    for chunk in (None, 1, 3, 7):
        out = tmp_path / f"out-{chunk}.parquet"
        text = tmp_path / f"out-{chunk}.csv"
        streaming = [] if chunk is None else ["--chunk-rows", chunk]
        for target in (out, text):
            result = ok(
                "mean", path, "--by", "a,b", "--null-keys", null_keys, "-o", target, *streaming
            )
            streamed = re.search(r"mode +streaming", result.stderr) is not None
            assert streamed == (chunk is not None)
        outputs.append((out.read_bytes(), text.read_bytes()))
    assert all(item == outputs[0] for item in outputs[1:])


def test_streamed_parquet_reads_data_and_keys_in_one_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each row group is decoded once for the data column and the key columns together.
    table = values_table({"a": KEY_KINDS["dictionary"], "b": KEY_KINDS["string"]})
    path = write_table(tmp_path / "t.parquet", table)
    whole = ok("mean", path, "--by", "a,b", "-q").stdout
    reads: list[list[str]] = []
    iter_batches = pq.ParquetFile.iter_batches

    def spy(self: pq.ParquetFile, *args: Any, **kwargs: Any) -> Any:
        reads.append(list(kwargs.get("columns") or []))
        return iter_batches(self, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    assert ok("mean", path, "--by", "a,b", "-q", "--chunk-rows", "5").stdout == whole
    assert [columns for columns in reads if "a" in columns] == [["v", "a", "b"]]


@pytest.mark.parametrize("streaming", [[], ["--chunk-rows", "5"]])
def test_parquet_key_reads_do_not_pre_buffer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, streaming: list[str]
) -> None:
    # Pre-buffering holds about the file's size in fresh buffers (and costs more system time
    # than decoding): the reads of rows for --by go page by page.
    path = write_table(tmp_path / "t.parquet", values_table({"a": KEY_KINDS["string"]}))
    opened: list[dict[str, Any]] = []
    init = pq.ParquetFile.__init__

    def spy(self: pq.ParquetFile, *args: Any, **kwargs: Any) -> None:
        opened.append(kwargs)
        init(self, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "__init__", spy)
    ok("mean", path, "--by", "a", "-q", *streaming)
    reading = [kwargs for kwargs in opened if "read_dictionary" in kwargs]
    assert reading
    assert all(kwargs.get("pre_buffer") is False for kwargs in reading)


def test_text_on_stdout_has_a_header_and_key_fields(tmp_path: Path) -> None:
    table = pa.table(
        {
            "city": pa.array(["b\tc", "", None, 'say "hi"', "b\tc"]),
            "v": pa.array([1.0, 2.0, 3.0, 4.0, 5.0]),
        }
    )
    path = write_table(tmp_path / "t.parquet", table)
    result = ok("sum", path, "--by", "city", "--null-keys", "group", "-q")
    assert result.stdout == 'city\tvalue\n""\t2.0\n"b\tc"\t6.0\n"say ""hi"""\t4.0\n\t3.0\n'
    assert result.stderr == ""


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
def test_csv_output_reads_back_with_nulls_apart_from_empty_strings(
    tmp_path: Path, fmt: str
) -> None:
    table = pa.table({"k": pa.array(["a", "", None, "a,b"]), "v": [1.0, 2.0, 3.0, 4.0]})
    path = write_table(tmp_path / "t.parquet", table)
    out = tmp_path / f"o.{fmt}"
    ok("sum", path, "--by", "k", "--null-keys", "group", "-o", out, "-q")
    back = pcsv.read_csv(
        out,
        parse_options=pcsv.ParseOptions(delimiter="\t" if fmt == "tsv" else ","),
        convert_options=pcsv.ConvertOptions(
            strings_can_be_null=True, quoted_strings_can_be_null=False
        ),
    )
    assert back.column_names == ["k", "value", "count"]
    assert back.column("k").to_pylist() == ["", "a", "a,b", None]
    assert back.column("value").to_pylist() == [2.0, 1.0, 4.0, 3.0]


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
def test_string_keys_spelled_like_null_read_back_as_keys_from(tmp_path: Path, fmt: str) -> None:
    # Unquoted, "NA" or "null" would read back as null: the keys table had two null keys.
    keys = ["NA", "null", "#N/A", "nan", None]
    table = pa.table({"k": pa.array(keys), "v": [1.0, 2.0, 3.0, 4.0, 5.0]})
    path = write_table(tmp_path / "t.parquet", table)
    out = tmp_path / f"o.{fmt}"
    ok("sum", path, "--by", "k", "--null-keys", "group", "-o", out, "-q")
    again = tmp_path / f"again.{fmt}"
    ok("sum", path, "--by", "k", "--null-keys", "group", "--keys-from", out, "-o", again, "-q")
    assert again.read_bytes() == out.read_bytes()
    sep = "\t" if fmt == "tsv" else ","
    assert out.read_text().splitlines()[1:] == [
        f'"#N/A"{sep}3.0{sep}1',
        f'"NA"{sep}1.0{sep}1',
        f"nan{sep}4.0{sep}1",
        f'"null"{sep}2.0{sep}1',
        f"{sep}5.0{sep}1",
    ]


def test_json_output_holds_the_keys(tmp_path: Path) -> None:
    table = values_table({"d": KEY_KINDS["date"], "s": KEY_KINDS["string"]})
    path = write_table(tmp_path / "t.parquet", table)
    out = tmp_path / "o.json"
    ok("count", path, "--by", "d,s", "-o", out, "-q")
    doc = json.loads(out.read_text())
    rows = expected(table, ["d", "s"], "count")
    assert doc["keys"] == {
        "d": [key[0].isoformat() for key, _, _ in rows],
        "s": [key[1] for key, _, _ in rows],
    }
    assert doc["values"] == [value for _, value, _ in rows]
    assert doc["counts"] == [count for _, _, count in rows]


@pytest.mark.parametrize("command", [["sum"], ["agg", "--op", "sum,max"]])
def test_infinite_float_keys_are_json_text_as_infinite_values_are(
    tmp_path: Path, command: list[str]
) -> None:
    """JSON has no number for infinity: the keys read ``"inf"``, as values do, and the
    document is strict JSON that reads back as the run's own golden file."""
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"f": [math.inf, 1.5, -math.inf, math.nan], "x": [1, 3, 2, 4]}), path)
    out = tmp_path / "o.json"
    ok(*command, path, "--data-column", "x", "--by", "f", "-o", out, "-q")
    doc = json.loads(out.read_text(), parse_constant=lambda name: pytest.fail(name))
    assert doc["keys"] == {"f": ["-inf", 1.5, "inf"]}
    ok(*command, path, "--data-column", "x", "--by", "f", "--expect", out, "-q")


@pytest.mark.parametrize("fmt", ["npy", "npz"])
@pytest.mark.parametrize("keys_fmt", ["parquet", "csv"])
def test_array_outputs_with_keys_out(tmp_path: Path, fmt: str, keys_fmt: str) -> None:
    table = values_table({"k": KEY_KINDS["int"]})
    path = write_table(tmp_path / "t.parquet", table)
    out, keys_out = tmp_path / f"o.{fmt}", tmp_path / f"k.{keys_fmt}"
    ok("sum", path, "--by", "k", "-o", out, "--keys-out", keys_out, "-q")
    rows = expected(table, ["k"])
    result = np.load(out)["result"] if fmt == "npz" else np.load(out)
    assert result.tolist() == [value for _, value, _ in rows]
    keys = pq.read_table(keys_out) if keys_fmt == "parquet" else pcsv.read_csv(keys_out)
    assert keys.column("k").to_pylist() == [key[0] for key, _, _ in rows]
    if keys_fmt == "parquet":
        assert keys.schema.field("k").type == pa.int32()


@pytest.mark.parametrize("keys_fmt", ["csv", "tsv"])
@pytest.mark.parametrize("kind", ["string", "int"])
def test_a_one_column_text_keys_out_keeps_the_null_key_row(
    tmp_path: Path, keys_fmt: str, kind: str
) -> None:
    # An empty field alone is an empty line, which CSV readers skip.
    keys = KEY_KINDS[kind] if kind == "int" else pa.array(["NA", "", None, "x", None])
    path = write_table(tmp_path / "t.parquet", values_table({"k": keys}))
    out, keys_out = tmp_path / "o.npy", tmp_path / f"k.{keys_fmt}"
    args = ["--by", "k", "--null-keys", "group", "-q"]
    ok("sum", path, *args, "-o", out, "--keys-out", keys_out)
    parse = pcsv.ParseOptions(delimiter="\t" if keys_fmt == "tsv" else ",")
    assert pcsv.read_csv(keys_out, parse_options=parse).num_rows == len(np.load(out))
    pd_keys = pd.read_csv(keys_out, sep=parse.delimiter, keep_default_na=False, na_values=["NA"])
    assert len(pd_keys) == len(np.load(out))
    # The key file fixes the same keys again: read back with its null and its "NA" string.
    table_out, again = tmp_path / "o.parquet", tmp_path / "again.parquet"
    ok("sum", path, *args, "-o", table_out)
    ok("sum", path, *args, "--keys-from", keys_out, "-o", again)
    assert pq.read_table(again) == pq.read_table(table_out)


def test_keys_from_fixes_keys_and_order_with_empty_groups(tmp_path: Path) -> None:
    table = pa.table({"sensor": ["s2", "s1", "s2", None], "v": [1.0, 2.0, 3.0, 4.0]})
    path = write_table(tmp_path / "t.parquet", table)
    sensors = write_table(tmp_path / "sensors.csv", pa.table({"sensor": ["s3", "s2", "s1"]}))
    out = tmp_path / "o.csv"
    ok("sum", path, "--by", "sensor", "--keys-from", sensors, "-o", out, "-q")
    assert out.read_text() == "sensor,value,count\ns3,0.0,0\ns2,4.0,2\ns1,2.0,1\n"


@pytest.mark.parametrize("streaming", [[], ["--chunk-rows", "1"]], ids=["memory", "stream"])
def test_keys_from_summary_counts_groups_and_the_distinct_keys_found_apart(
    tmp_path: Path, streaming: list[str]
) -> None:
    table = pa.table({"sensor": ["s2", "s1", "s2", None], "v": [1.0, 2.0, 3.0, 4.0]})
    path = write_table(tmp_path / "t.parquet", table)
    sensors = write_table(tmp_path / "sensors.csv", pa.table({"sensor": ["s3", "s2", "s1", "s4"]}))
    summary = tmp_path / "s.json"
    args = ["sum", path, "--by", "sensor", "--keys-from", sensors, "-o", tmp_path / "o.csv"]
    result = ok(*args, *streaming, "--no-progress", "--summary-json", summary)
    assert f"  groups        4 (from --keys-from {sensors}; null keys drop)\n" in result.stderr
    assert "  empty groups  2\n" in result.stderr
    facts = json.loads(summary.read_text())
    assert facts["num_segments"] == 4 and facts["empty_segments"] == 2
    assert facts["keys"]["distinct"] == 2 and facts["keys"]["rows_dropped_missing_key"] == 1


def test_a_key_not_in_keys_from_is_an_error(tmp_path: Path) -> None:
    table = pa.table({"sensor": ["s2", "s9", "s1"], "v": [1.0, 2.0, 3.0]})
    path = write_table(tmp_path / "t.parquet", table)
    sensors = write_table(tmp_path / "sensors.csv", pa.table({"sensor": ["s1", "s2"]}))
    out = tmp_path / "o.parquet"
    result = run("sum", path, "--by", "sensor", "--keys-from", sensors, "-o", out)
    assert result.exit_code == 1
    assert result.stderr == (
        f"Error: {path}: row 1 has key sensor='s9', which is not in --keys-from {sensors} "
        "(1 row with a key not in it)\n"
    )
    assert not out.exists()


@pytest.mark.parametrize("engine", ["numpy", "numba"])
@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("op", ["sum", "median"])
def test_a_key_not_in_keys_from_counts_every_such_row(
    tmp_path: Path, engine: str, streamed: bool, op: str
) -> None:
    # Like an id >= n: the first offender named, and the number of offenders, in every block.
    keys = ["s1", "s9", "s2", "s1", "s8", "s9", "s2", "s7"]
    table = pa.table({"sensor": keys, "v": np.arange(8.0)})
    path = write_table(tmp_path / "t.parquet", table)
    sensors = write_table(tmp_path / "sensors.csv", pa.table({"sensor": ["s1", "s2"]}))
    out = tmp_path / "o.parquet"
    chunks = ["--chunk-rows", "3"] if streamed else []
    args = [op, path, "--data-column", "v", "--by", "sensor", "--keys-from", sensors]
    result = run(*args, "--engine", engine, *chunks, "-o", out)
    assert (result.exit_code, result.stderr) == (
        1,
        f"Error: {path}: row 1 has key sensor='s9', which is not in --keys-from {sensors} "
        "(4 rows with a key not in it)\n",
    )
    assert not out.exists()


def test_check_every_sensor_reported(tmp_path: Path) -> None:
    table = pa.table({"sensor": ["s2", "s1", "s2"], "v": [1.0, 2.0, float("nan")]})
    path = write_table(tmp_path / "t.parquet", table)
    all_seen = write_table(tmp_path / "seen.csv", pa.table({"sensor": ["s1", "s2"]}))
    some_silent = write_table(tmp_path / "all.csv", pa.table({"sensor": ["s1", "s4", "s2", "s3"]}))
    args = ["check", path, "--by", "sensor", "--max-empty", "0", "-q"]
    assert run(*args, "--keys-from", all_seen).exit_code == 0
    for streaming in ([], ["--chunk-rows", "1"]):
        summary = tmp_path / "check.json"
        result = run(*args, "--keys-from", some_silent, *streaming, "--summary-json", summary)
        assert result.exit_code == 4
        assert result.stderr == (
            f"Error: 2 empty groups of --keys-from {some_silent}, more than --max-empty 0 "
            "(first empty: sensor='s4')\n"
        )
        facts = json.loads(summary.read_text())
        assert facts["empty_segments"] == 2 and facts["nan_values"] == 1
        # distinct counts the keys found in the data; the groups are num_segments.
        assert facts["keys"]["distinct"] == 2 and facts["num_segments"] == 4


USAGE_ERRORS = [
    (["IDS"], "--by cannot be used with IDS"),
    (["--ids-column", "v"], "--by cannot be used with --ids-column"),
    (["-n", "3"], "--by cannot be used with -n/--num-segments"),
    (["--sorted"], "--by cannot be used with --sorted"),
    (["-o", "OUT.npy"], "npy output holds no key columns: add --keys-out PATH"),
    (["-o", "OUT.npz"], "npz output holds no key columns: add --keys-out PATH"),
    (["-o", "OUT.csv", "--keys-out", "K.csv"], "--keys-out applies to .npy/.npz output"),
    (["-o", "OUT.npy", "--keys-out", "K.json"], "need a .parquet, .arrow, .csv or .tsv"),
    (["--by", "a,,b"], "need column names separated by commas"),
    (["--by", '"k,v'], "a quote that is never closed; a name holding a comma goes in double"),
    (["--keys-from", "-"], "Error: --keys-from reads a table file, not stdin"),
]


@pytest.mark.parametrize(("extra", "message"), USAGE_ERRORS)
def test_usage_errors(tmp_path: Path, extra: list[str], message: str) -> None:
    table = values_table({"k": KEY_KINDS["string"]})
    path = write_table(tmp_path / "t.parquet", table)
    ids = tmp_path / "ids.npy"
    np.save(ids, np.zeros(ROWS, np.int64))
    extra = [
        str(ids) if a == "IDS" else str(tmp_path / a) if a[:3] in ("OUT", "K.c", "K.j") else a
        for a in extra
    ]
    positional = [a for a in extra if a == str(ids)]
    options = [a for a in extra if a != str(ids)]
    by = [] if "--by" in options else ["--by", "k"]
    result = run("sum", path, *positional, *by, "--data-column", "v", *options)
    assert result.exit_code == 2, result.stderr
    assert message in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ids.npy", "t.parquet"]


@pytest.mark.parametrize("option", [["--null-keys", "group"], ["--keys-from", "x.csv"]])
def test_key_options_need_by(tmp_path: Path, option: list[str]) -> None:
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, np.ones(3))
    np.save(ids, np.zeros(3, np.int64))
    result = run("sum", data, ids, *option)
    assert result.exit_code == 2
    assert f"{option[0]} applies to --by only" in result.stderr
    result = run("sum", data, ids, "-o", tmp_path / "o.npy", "--keys-out", tmp_path / "k.csv")
    assert result.exit_code == 2 and "--keys-out applies to --by only" in result.stderr


def test_by_on_npy_input_says_to_use_ids(tmp_path: Path) -> None:
    data = tmp_path / "d.npy"
    np.save(data, np.ones(3))
    result = run("sum", data, "--by", "k")
    assert result.exit_code == 2
    assert "give the segment ids as IDS instead" in result.stderr
    assert "(Parquet, Arrow, CSV/TSV, JSON lines)" in result.stderr  # every table --by reads
    assert len(result.stderr.splitlines()) == 1


def test_a_missing_key_column_lists_the_columns(tmp_path: Path) -> None:
    path = write_table(tmp_path / "t.parquet", values_table({"k": KEY_KINDS["string"]}))
    result = run("sum", path, "--by", "k,city", "-o", tmp_path / "o.csv")
    assert result.exit_code == 2  # as a missing --data-column is reported
    assert result.stderr == (
        f"Error: {path}: no column 'city' (columns: k, v) (see 'segcli sum --help')\n"
    )
    assert not (tmp_path / "o.csv").exists()


def test_a_key_type_without_equality_is_refused(tmp_path: Path) -> None:
    table = pa.table({"k": pa.array([[1], [2]]), "v": [1.0, 2.0]})
    path = write_table(tmp_path / "t.parquet", table)
    result = run("sum", path, "--by", "k")
    assert result.exit_code == 1
    assert "key column 'k' has type list<element: int64>, which has no equality" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_keys_out_is_committed_with_the_output_or_not_at_all(tmp_path: Path) -> None:
    table = pa.table({"sensor": ["s9"], "v": [1.0]})
    path = write_table(tmp_path / "t.parquet", table)
    sensors = write_table(tmp_path / "sensors.csv", pa.table({"sensor": ["s1"]}))
    out, keys_out = tmp_path / "o.npy", tmp_path / "k.parquet"
    args = ["sum", path, "--by", "sensor", "-o", out, "--keys-out", keys_out]
    assert run(*args, "--keys-from", sensors).exit_code == 1
    assert not out.exists() and not keys_out.exists()
    ok(*args, "-q")
    assert out.exists() and keys_out.exists()


def test_key_text_of_other_types(tmp_path: Path) -> None:
    table = pa.table(
        {
            "ok": pa.array([True, False, True]),
            "day": pa.array([dt.date(2024, 5, 1), dt.date(2024, 5, 2), dt.date(2024, 5, 1)]),
            "price": pa.array([Decimal("12.50"), Decimal("-1.00"), Decimal("12.50")]),
            "v": [1.0, 2.0, 3.0],
        }
    )
    path = write_table(tmp_path / "t.parquet", table)
    result = ok("sum", path, "--by", "ok,day,price", "-q")
    assert (
        result.stdout
        == "ok\tday\tprice\tvalue\nfalse\t2024-05-02\t-1.00\t2.0\ntrue\t2024-05-01\t12.50\t4.0\n"
    )


def test_arrow_stream_file_in_memory_and_streamed(tmp_path: Path) -> None:
    table = values_table({"k": KEY_KINDS["dictionary"]})
    path = tmp_path / "t.arrow"
    with ipc.new_stream(path, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=4):
            writer.write_batch(batch)
    whole = ok("sum", path, "--by", "k", "-q").stdout
    assert whole == ok("sum", path, "--by", "k", "-q", "--chunk-rows", "3").stdout
    rows = expected(table, ["k"])
    assert whole.splitlines() == ["k\tvalue", *(f"{key[0]}\t{value}" for key, value, _ in rows)]


def test_keys_from_empty_groups_take_fill(tmp_path: Path) -> None:
    table = pa.table({"sensor": ["s1"], "v": [2.0]})
    path = write_table(tmp_path / "t.parquet", table)
    sensors = write_table(tmp_path / "sensors.csv", pa.table({"sensor": ["s1", "s2"]}))
    result = ok("max", path, "--by", "sensor", "--keys-from", sensors, "--fill", "nan", "-q")
    assert result.stdout == "sensor\tvalue\ns1\t2.0\ns2\tnan\n"


@pytest.mark.parametrize("streaming", [[], ["--chunk-rows", "2"]])
def test_keys_from_keys_come_out_in_the_data_key_types(
    tmp_path: Path, streaming: list[str]
) -> None:
    # As a run without --keys-from writes them: not the keys file's int64 and plain strings.
    city = pa.array(["b", "a", "b"]).dictionary_encode()
    table = pa.table({"n": pa.array([7, 8, 7], pa.int16()), "city": city, "v": [1.0, 2.0, 4.0]})
    path = write_table(tmp_path / "t.parquet", table)
    keys = write_table(
        tmp_path / "keys.parquet", pa.table({"n": [9, 7, 8], "city": ["c", "b", "a"]})
    )
    plain, fixed = tmp_path / "plain.parquet", tmp_path / "fixed.parquet"
    ok("sum", path, "--by", "n,city", "-o", plain, "-q", *streaming)
    ok("sum", path, "--by", "n,city", "--keys-from", keys, "-o", fixed, "-q", *streaming)
    assert pq.read_table(fixed).schema == pq.read_table(plain).schema
    assert pq.read_table(fixed).to_pydict() == {
        "n": [9, 7, 8],
        "city": ["c", "b", "a"],
        "value": [0.0, 5.0, 2.0],
        "count": [0, 2, 1],
    }


CSV_KEYS_IN_DATA_TYPES = {
    "digits": (pa.array(["007", "010", "007"]), ["010", "007", "003"]),
    "decimal": (
        pa.array([Decimal("1.50"), Decimal("2.25"), Decimal("1.50")], pa.decimal128(5, 2)),
        ["2.25", "1.50", "9"],
    ),
    # pyarrow's CSV reader converts no text to decimal256.
    "decimal256": (
        pa.array([Decimal("1.50"), Decimal("2.25"), Decimal("1.50")], pa.decimal256(40, 2)),
        ["2.25", "1.50", "9"],
    ),
    "zoned": (
        pa.array(
            [dt.datetime(2024, 1, 1, h) for h in (1, 2, 1)], pa.timestamp("us", "Europe/Paris")
        ),
        ["2024-01-01 02:00:00Z", "2024-01-01 02:00:00+01:00", "2024-01-02 00:00:00Z"],
    ),
}


@pytest.mark.parametrize("kind", list(CSV_KEYS_IN_DATA_TYPES))
@pytest.mark.parametrize("streaming", [[], ["--chunk-rows", "2"]])
def test_a_csv_keys_from_is_read_in_the_data_key_types(
    tmp_path: Path, kind: str, streaming: list[str]
) -> None:
    # Inferred types read sensor ids '007' as the integer 7 and decimals as doubles, which
    # never match the data's keys, and zoned timestamps would come out in UTC.
    keys, listed = CSV_KEYS_IN_DATA_TYPES[kind]
    path = write_table(tmp_path / "t.parquet", pa.table({"k": keys, "v": [1.0, 2.0, 4.0]}))
    key_file = tmp_path / "keys.csv"
    key_file.write_text("k\n" + "".join(f"{key}\n" for key in listed))
    out = tmp_path / "o.parquet"
    ok("sum", path, "--by", "k", "--keys-from", key_file, "-o", out, "-q", *streaming)
    result = pq.read_table(out)
    assert result.schema.field("k").type == keys.type
    assert result.column("value").to_pylist() == [2.0, 5.0, 0.0]
    assert result.column("count").to_pylist() == [1, 2, 0]


@pytest.mark.parametrize("keys_fmt", ["parquet", "arrow", "csv", "tsv"])
@pytest.mark.parametrize("command", [["sum"], ["agg", "--op", "sum"], ["check"]])
def test_a_keys_from_with_the_key_column_twice_is_a_read_error(
    tmp_path: Path, keys_fmt: str, command: list[str]
) -> None:
    # Arrow refused to select the name (an internal error); a CSV reader took the first one.
    path = write_table(tmp_path / "t.parquet", pa.table({"k": ["a", "b"], "v": [1.0, 2.0]}))
    keys = pa.Table.from_arrays([pa.array(["a", "b"]), pa.array(["b", "a"])], names=["k", "k"])
    keys_file = write_table(tmp_path / f"keys.{keys_fmt}", keys)
    result = run(*command, path, "--data-column", "v", "--by", "k", "--keys-from", keys_file)
    assert (result.exit_code, result.stdout, result.stderr) == (
        3,
        "",
        f"Error: --keys-from {keys_file}: 2 columns are named 'k'; cannot tell which one to "
        "read (rename them)\n",
    )


@pytest.mark.parametrize("command", [["sum"], ["check", "--max-empty", "0"]])
def test_a_csv_keys_from_that_is_not_utf8_names_its_first_such_key(
    tmp_path: Path, command: list[str]
) -> None:
    # pyarrow's CSV reader named neither the column, the row nor the bytes.
    path = write_table(tmp_path / "t.parquet", pa.table({"k": ["x", "é"], "v": [1.0, 2.0]}))
    keys_file = tmp_path / "keys.csv"
    keys_file.write_bytes("k\nx\né\n".encode("latin-1"))
    result = run(*command, path, "--data-column", "v", "--by", "k", "--keys-from", keys_file)
    assert (result.exit_code, result.stdout, result.stderr) == (
        3,
        "",
        f"Error: --keys-from {keys_file}: column 'k' row 1 holds b'\\xe9', which is not UTF-8; "
        "convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)\n",
    )


@pytest.mark.parametrize("keys_fmt", ["csv", "parquet"])
@pytest.mark.parametrize("rows", ["", ",1.0\n,2.0\n"])
def test_keys_from_checks_a_csv_whose_key_column_is_all_empty(
    tmp_path: Path, keys_fmt: str, rows: str
) -> None:
    # No sensor reported: pyarrow reads the key column as type null, which was "values of
    # another kind" than the keys file's (exit 1) instead of empty groups (exit 4).
    path = tmp_path / "d.csv"
    path.write_text(f"k,v\n{rows}")
    keys_file = write_table(tmp_path / f"keys.{keys_fmt}", pa.table({"k": ["a", "b"]}))
    args = [path, "--data-column", "v", "--by", "k", "--keys-from", keys_file, "-q"]
    result = run("check", *args, "--max-empty", "0")
    assert (result.exit_code, result.stderr) == (
        4,
        f"Error: 2 empty groups of --keys-from {keys_file}, more than --max-empty 0 "
        "(first empty: k='a')\n",
    )
    for streaming in ([], ["--chunk-rows", "1"]):
        assert ok("sum", *args, *streaming).stdout.splitlines()[1:] == ["a\t0.0", "b\t0.0"]


UNFIT_KEYS = [
    # (the data's keys, the keys file's, the value named, its row, the data's key type)
    (pa.array([1, 2], pa.int8()), pa.array([1, 300, 2]), "300", 1, "int8"),
    (
        pa.array([5, 7], pa.timestamp("s")),
        pa.array([7000, 5001], pa.timestamp("ms")),
        "1970-01-01 00:00:05.001",
        1,
        "timestamp[s]",
    ),
    (pa.array([0.5, 1.0]), pa.array([2**53 + 1, 1]), "9007199254740993", 0, "double"),
]


@pytest.mark.parametrize(("data_keys", "file_keys", "value", "row", "type_"), UNFIT_KEYS)
def test_a_keys_from_key_the_data_key_type_cannot_hold_is_named_with_its_row(
    tmp_path: Path, data_keys: pa.Array, file_keys: pa.Array, value: str, row: int, type_: str
) -> None:
    # pyarrow's words named no row, and a timestamp by its integer: 'would lose data: 5001'.
    # Arrow, not Parquet: Parquet holds timestamp[s] in milliseconds.
    path = write_table(tmp_path / "t.arrow", pa.table({"k": data_keys, "v": [1.0, 2.0]}))
    keys_file = write_table(tmp_path / "keys.parquet", pa.table({"k": file_keys}))
    result = run("sum", path, "--data-column", "v", "--by", "k", "--keys-from", keys_file)
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == (
        f"Error: --keys-from {keys_file}: key column 'k' holds {value} at row {row}, which does "
        f"not fit {type_}, the key's type in the data (1 row with such a key)\n"
    )


SEMICOLONS = "a;b;v\nx;1;1.0\ny;2;2.0\nx;2;4.0\n"


@pytest.mark.parametrize("command", [["sum"], ["agg", "--op", "sum"]])
@pytest.mark.parametrize("streaming", [[], ["--chunk-rows", "2"]])
def test_a_csv_keys_from_is_read_as_keys_out_writes_it_whatever_the_data_delimiter(
    tmp_path: Path, command: list[str], streaming: list[str]
) -> None:
    path = tmp_path / "semi.csv"
    path.write_text(SEMICOLONS)
    args = [*command, path, "--delimiter", ";", "--data-column", "v", "--by", "a,b", "-q"]
    keys_out, plain = tmp_path / "k.csv", tmp_path / "plain.csv"
    ok(*args, "-o", tmp_path / "o.npy", "--keys-out", keys_out)
    ok(*args, "-o", plain)
    again = tmp_path / "again.csv"
    ok(*args, *streaming, "--keys-from", keys_out, "-o", again)
    assert again.read_text() == plain.read_text()


@pytest.mark.parametrize("keys_fmt", ["csv", "tsv"])
@pytest.mark.parametrize("streaming", [[], ["--chunk-rows", "2"]])
def test_a_keys_from_has_a_header_line_whatever_the_data_has(
    tmp_path: Path, keys_fmt: str, streaming: list[str]
) -> None:
    # Read with --no-input-header, the keys file's header line '1' was a key, an empty group.
    path = tmp_path / "no_header.csv"
    path.write_text("x,1.0\ny,2.0\nx,4.0\n")
    keys_file = tmp_path / f"keys.{keys_fmt}"
    keys_file.write_text("1\ny\nx\nz\n")
    args = ["sum", path, "--no-input-header", "--data-column", "2", "--by", "1", "-q"]
    result = ok(*args, *streaming, "--keys-from", keys_file)
    assert result.stdout == "1\tvalue\ny\t2.0\nx\t5.0\nz\t0.0\n"


@pytest.mark.parametrize("command", [["sum"], ["agg", "--op", "sum"], ["median"]])
def test_a_csv_keys_from_is_read_in_the_key_types_of_a_whole_read(
    tmp_path: Path, command: list[str]
) -> None:
    # Whole numbers through DATA's first megabyte, then a word: read whole, the key column is
    # text, and so is the keys file's 'x1' (it was read as int64, DATA's head's type).
    path = tmp_path / "late.csv"
    rows = "".join(f"{i % 3},1.0\n" for i in range(200_000))
    path.write_text(f"j,v\n{rows}x1,1.0\n")
    keys_file = tmp_path / "keys.csv"
    keys_file.write_text("j\nx1\n2\n1\n0\n")
    args = [*command, path, "--data-column", "v", "--by", "j", "--memory-limit", "4GB", "-q"]
    result = ok(*args, "--keys-from", keys_file)
    assert [line.split("\t")[0] for line in result.stdout.splitlines()] == [
        "j", "x1", "2", "1", "0"
    ]  # fmt: skip


@pytest.mark.parametrize("streaming", [[], ["--chunk-rows", "2"]])
def test_a_table_without_rows_gives_the_header_and_the_key_types(
    tmp_path: Path, streaming: list[str]
) -> None:
    table = pa.table({"k": pa.array([], pa.int16()), "v": pa.array([], pa.float64())})
    path = write_table(tmp_path / "t.parquet", table)
    out = tmp_path / "o.parquet"
    ok("sum", path, "--by", "k", "-o", out, "-q", *streaming)
    written = pq.read_table(out)
    assert written.schema.types == [pa.int16(), pa.float64(), pa.int64()]
    assert written.num_rows == 0
    assert ok("sum", path, "--by", "k", "-q", *streaming).stdout == "k\tvalue\n"


def test_the_data_column_may_be_a_key_too(tmp_path: Path) -> None:
    path = write_table(tmp_path / "t.parquet", pa.table({"v": [2.0, 1.0, 2.0]}))
    assert ok("count", path, "--by", "v", "--data-column", "v", "-q").stdout == (
        "v\tvalue\n1\t1\n2\t2\n"
    )


def test_check_max_dropped_counts_missing_keys(tmp_path: Path) -> None:
    table = pa.table({"k": ["a", None, None], "v": [1.0, 2.0, 3.0]})
    path = write_table(tmp_path / "t.parquet", table)
    result = run("check", path, "--by", "k", "--max-dropped", "1", "-q")
    assert result.exit_code == 4
    assert result.stderr == (
        f"Error: {path}:k: 2 dropped rows, more than --max-dropped 1 (2 with a missing key; "
        "first dropped: row 1)\n"
    )


TEXT_KEYS = {
    "string": pa.array(["b", None, "a", "", "c", "a"] * 500),
    "large_string": pa.array(["b", "a", "c", "a", "b", "d"] * 500, pa.large_string()),
    "binary": pa.array([b"\x01", b"", None, b"\x00", b"\x01", b"\x02"] * 500),
}


def text_keys_table(kind: str) -> pa.Table:
    return values_table({"k": TEXT_KEYS[kind], "j": pa.array(list(range(3)) * 1000)})


def write_dictionary_parquet(path: Path, table: pa.Table) -> Path:
    """Row groups of 1000 rows with few distinct keys: read as dictionaries (checked)."""
    from segcli.io.keys import dictionary_columns

    pq.write_table(table, path, row_group_size=1000)
    keys = pa.schema([table.schema.field("k"), table.schema.field("j")])
    assert dictionary_columns(pq.ParquetFile(path), keys) == ["k"]
    return path


@pytest.mark.parametrize("kind", list(TEXT_KEYS))
@pytest.mark.parametrize("streaming", [[], ["--chunk-rows", "500"]])
def test_parquet_text_keys_read_as_dictionaries_give_the_plain_bytes(
    tmp_path: Path, kind: str, streaming: list[str]
) -> None:
    # Parquet string keys are read in their dictionary encoding; the Arrow file holds them
    # plain. Output bytes and the summary's key facts (types, bytes as the file declares
    # them) must not tell the two apart.
    table = text_keys_table(kind)
    facts = []
    outputs = []
    write_dictionary_parquet(tmp_path / "t.parquet", table)
    write_table(tmp_path / "t.arrow", table)
    for suffix in ("parquet", "arrow"):
        path = tmp_path / f"t.{suffix}"
        out, summary = tmp_path / f"o.{suffix}.parquet", tmp_path / f"s.{suffix}.json"
        args = ["sum", path, "--by", "k,j", "--data-column", "v", "--null-keys", "group"]
        ok(*args, *streaming, "-o", out, "-q", "--summary-json", summary)
        outputs.append(out.read_bytes())
        facts.append(json.loads(summary.read_text()))
    assert outputs[0] == outputs[1]
    assert facts[0]["keys"] == facts[1]["keys"]
    assert facts[0]["ids"]["dtype"] == facts[1]["ids"]["dtype"] == f"{table['k'].type}, int64"
    # Row groups of 1000 rows: blocks of 500 rows are the plain batches of 500 rows.
    parquet = pq.ParquetFile(tmp_path / "t.parquet")
    blocks = parquet.iter_batches(batch_size=500, columns=["k", "j"]) if streaming else []
    plain = sum(b.nbytes for b in blocks) or parquet.read(columns=["k", "j"]).nbytes
    assert facts[0]["ids"]["bytes"] == plain


def test_a_by_run_on_parquet_does_not_import_pandas(tmp_path: Path) -> None:
    # pyarrow's to_numpy and pa.array import pandas when it is installed: a fifth of a second
    # of a run that never needs it.
    import subprocess
    import sys

    path = write_dictionary_parquet(tmp_path / "t.parquet", text_keys_table("string"))
    probe = (
        "import atexit, runpy, sys\n"
        "atexit.register(lambda: print('pandas' in sys.modules, file=sys.stderr))\n"
        "sys.argv = ['segcli', *sys.argv[1:]]\n"
        "runpy.run_module('segcli', run_name='__main__')\n"
    )
    for extra in ([], ["--chunk-rows", "7"]):
        argv = [sys.executable, "-c", probe, "mean", str(path), "--by", "k,j", "-q"]
        argv += ["--data-column", "v", "-o", str(tmp_path / "o.parquet"), *extra]
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stderr.splitlines() == ["False"]


@pytest.mark.parametrize("dtype", ["float64", "float16", "int32", "uint8", "bool", ">f8"])
def test_keyed_table_of_plain_results_is_result_tables_columns(dtype: str) -> None:
    from segcli.io.keyed import keyed_table
    from segcli.io.write import result_table

    result = np.array([3, 0, 1, 2], dtype=dtype)
    counts = np.array([4, 0, 1, 7], np.int64)
    keys = pa.table({"k": pa.array(["a", "b", "c", None])})
    values = result_table(result, counts)
    want = pa.Table.from_arrays(
        [keys.column("k"), values.column("value"), values.column("count")],
        names=["k", "value", "count"],
    )
    got = keyed_table(result, counts, keys)
    assert got.equals(want, check_metadata=True)
    assert keyed_table(result, None, keys).column_names == ["k", "value"]


def test_keys_of_many_distinct_values_are_read_plain(tmp_path: Path) -> None:
    # The writer gives up on a dictionary this large; the reader would then hash every row
    # itself, more slowly than the encoder does.
    from segcli.io.keys import dictionary_columns

    keys = pa.array([f"user-{i:07d}" for i in range(4000)])
    path = tmp_path / "t.parquet"
    pq.write_table(values_table({"k": keys}), path, row_group_size=1000)
    assert dictionary_columns(pq.ParquetFile(path), pa.schema([pa.field("k", pa.string())])) == []


@pytest.mark.parametrize(
    "column",
    [
        pa.array([1.5, 2.0, -3.0, 4.0]).slice(1, 2),
        pa.array([7, -8, 9], pa.int16()),
        pa.chunked_array([pa.array([1, 2], pa.uint32()), pa.array([3], pa.uint32())]),
        pa.array([True, False, True]),
    ],
    ids=["float64-sliced", "int16", "uint32-chunks", "bool"],
)
def test_numeric_columns_convert_as_to_numpy_does(column: Any) -> None:
    # Null-free numbers are read from the data buffer (to_numpy imports pandas): same values,
    # dtype and read-only view.
    from segcli.io.columns import ColumnRef, column_to_numpy

    got = column_to_numpy(column, ColumnRef("t.parquet", "v"))
    plain = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    want = plain.to_numpy(zero_copy_only=False)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    assert not got.flags.writeable or got.dtype == np.bool_


def test_the_budget_counts_what_reading_whole_holds_beyond_the_columns(tmp_path: Path) -> None:
    """Read whole, a --by run also holds the keys' encoding and an id per row: a table whose
    columns alone fit the budget, but not with those, streams."""
    rows = 40_000
    keys = [f"key-{i:07d}" for i in range(rows)]  # every key distinct: the dictionary is large
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"k": keys, "v": np.arange(rows, dtype=np.float64)}), path)
    columns = rows * (8 + 11 + 4)  # values, key text and offsets, as decoded
    summary = tmp_path / "s.json"
    args = ["sum", path, "--by", "k", "-o", tmp_path / "o.parquet", "-q"]
    ok(*args, "--memory-limit", str(int(columns * 1.5)), "--summary-json", summary)
    assert json.loads(summary.read_text())["mode"] == "streaming"
    ok(*args, "--memory-limit", str(columns * 5), "--summary-json", summary)
    assert json.loads(summary.read_text())["mode"] == "in-memory"


@pytest.mark.parametrize(
    ("keys", "text"),
    [
        (pa.array([dt.date(2024, 5, 1), dt.date(2024, 5, 2)]), "2024-05-02"),
        (pa.array([Decimal("1.50"), Decimal("12.50")], pa.decimal128(5, 2)), "12.50"),
    ],
)
def test_errors_name_a_key_as_the_output_writes_it(
    tmp_path: Path, keys: pa.Array, text: str
) -> None:
    # Not as Python objects: datetime.date(2024, 5, 2), Decimal('12.50').
    path = write_table(tmp_path / "t.parquet", pa.table({"k": keys, "v": [1.0, 2.0]}))
    first_only = write_table(tmp_path / "first.parquet", pa.table({"k": keys[:1]}))
    result = run("sum", path, "--by", "k", "--keys-from", first_only, "-q")
    assert (result.exit_code, result.stderr) == (
        1,
        f"Error: {path}: row 1 has key k={text}, which is not in --keys-from {first_only} "
        "(1 row with a key not in it)\n",
    )
    both = write_table(tmp_path / "both.parquet", pa.table({"k": keys}))
    first_row = write_table(tmp_path / "one.parquet", pa.table({"k": keys[:1], "v": [1.0]}))
    result = run("check", first_row, "--by", "k", "--keys-from", both, "--max-empty", "0", "-q")
    assert (result.exit_code, result.stderr) == (
        4,
        f"Error: 1 empty group of --keys-from {both}, more than --max-empty 0 "
        f"(first empty: k={text})\n",
    )


# ---------------------------------------------------------------------------------------------
# A key column named like an output column; --expect compares the key columns


def _named_like(column: str) -> str:
    return f"has the name of the output column '{column}', which follows the key columns: "


# The data is 1-D: a key named like an inner dimension's column is refused for another reason.
_INNER = (
    "is named like the columns value's inner dimensions flatten to (value_0, value_1, ...), "
    "which follow the key columns when the data has inner dimensions: refused whatever the "
    "data's shape"
)
_SEGMENT = (
    "has the name of the segment numbers' column, which a keyed output does not write but "
    "--expect reads back as segment numbers"
)
CLASHES = [
    # (command, key column, why it is refused, output options)
    (["count"], "count", _named_like("count"), ["-o", "OUT.parquet"]),
    (["sum"], "value", _named_like("value"), ["-o", "OUT.csv"]),
    (["sum"], "segment", _SEGMENT, []),
    (["mean"], "value_0", _INNER, ["-o", "OUT.json"]),
    (["sum"], "count", _named_like("count"), ["-o", "OUT.npy", "--keys-out", "K.parquet"]),
    (["agg", "--op", "mean,max"], "mean", _named_like("mean"), ["-o", "OUT.arrow"]),
    (
        ["agg", "--op", "mean", "--data-column", "x,v"],
        "x_mean",
        _named_like("x_mean"),
        ["-o", "OUT.tsv"],
    ),
    (["agg", "--op", "quantile", "--q", "0.9"], "q0.9", _named_like("q0.9"), ["-o", "OUT.parquet"]),
    (["agg", "--op", "count,sum", "--skipna"], "rows", _named_like("rows"), ["-o", "OUT.csv"]),
    (
        ["agg", "--op", "sum"],
        "count",
        _named_like("count"),
        ["-o", "OUT.npz", "--keys-out", "K.csv"],
    ),
]


@pytest.mark.parametrize("mode", [[], ["--chunk-rows", "4"], ["--engine", "dask"]])
@pytest.mark.parametrize(("command", "key", "why", "output"), CLASHES)
def test_a_key_named_like_an_output_column_is_a_usage_error(
    tmp_path: Path, command: list[str], key: str, why: str, output: list[str], mode: list[str]
) -> None:
    # Parquet, Arrow and pandas cannot read back a table with two columns of one name.
    table = pa.table({key: ["a", "b", "a"], "x": [1.0, 2.0, 3.0], "v": [4.0, 5.0, 6.0]})
    path = write_table(tmp_path / "t.parquet", table)
    output = [str(tmp_path / a) if a[:3] in ("OUT", "K.p", "K.c") else a for a in output]
    data = [] if "--data-column" in command else ["--data-column", "v"]
    result = run(*command, path, "--by", key, *data, *output, *mode)
    assert result.exit_code == 2, result.stderr
    assert result.stderr.startswith(f"Error: --by: key column '{key}' {why}")
    assert "; rename the key column in the table" in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]


def test_a_key_named_like_an_output_column_is_checked_by_check(tmp_path: Path) -> None:
    # check writes no table: nothing to collide.
    table = pa.table({"count": ["a", "b", "a"], "v": [4.0, 5.0, 6.0]})
    path = write_table(tmp_path / "t.parquet", table)
    ok("check", path, "--by", "count", "--data-column", "v", "--max-empty", "0", "-q")


def test_keys_named_like_no_output_column_are_kept(tmp_path: Path) -> None:
    table = pa.table({"value_x": ["a", "b"], "counts": [1, 2], "v": [4.0, 5.0]})
    path = write_table(tmp_path / "t.parquet", table)
    out = tmp_path / "o.parquet"
    ok("sum", path, "--by", "value_x,counts", "--data-column", "v", "-o", out, "-q")
    assert pq.read_table(out).column_names == ["value_x", "counts", "value", "count"]


def golden_keys(tmp_path: Path, keys: list[str], name: str = "g") -> Path:
    """A table whose groups are ``keys`` (sorted: segcli writes them so), each of value 1."""
    return write_table(tmp_path / f"{name}.parquet", pa.table({"k": keys, "v": [1.0] * len(keys)}))


EXPECT_FORMATS = ["parquet", "arrow", "csv", "tsv", "json"]


@pytest.mark.parametrize("fmt", EXPECT_FORMATS)
def test_expect_compares_the_key_columns(tmp_path: Path, fmt: str) -> None:
    data = golden_keys(tmp_path, ["a", "b"], "data")
    other = golden_keys(tmp_path, ["c", "d"], "other")
    golden = tmp_path / f"golden.{fmt}"
    ok("sum", other, "--by", "k", "-o", golden, "-q")
    ok("sum", other, "--by", "k", "--expect", golden, "-q")
    # The same values, of other keys: it passed, comparing values by position only.
    result = run("sum", data, "--by", "k", "--expect", golden, "-q")
    assert (result.exit_code, result.stderr) == (
        4,
        f"Error: --expect {golden}: row 0 has key k='a', the golden file k='c' "
        "(the keys differ in 2 of 2 rows)\n",
    )
    assert result.stdout == ""


@pytest.mark.parametrize("fmt", EXPECT_FORMATS)
def test_expect_names_a_null_key_alike_in_every_golden(tmp_path: Path, fmt: str) -> None:
    path = write_table(
        tmp_path / "t.parquet", pa.table({"k": ["a", None], "j": [None, 2], "v": [1.0, 2.0]})
    )
    golden = tmp_path / f"golden.{fmt}"
    ok("sum", path, "--by", "k,j", "--null-keys", "group", "-o", golden, "-q")
    other = write_table(
        tmp_path / "o.parquet", pa.table({"k": ["b", None], "j": [None, 2], "v": [1.0, 2.0]})
    )
    result = run("sum", other, "--by", "k,j", "--null-keys", "group", "--expect", golden, "-q")
    assert result.exit_code == 4
    assert "row 0 has key k='b', j=null, the golden file k='a', j=null" in result.stderr


def test_expect_compares_the_key_order(tmp_path: Path) -> None:
    data = golden_keys(tmp_path, ["a", "b"], "data")
    golden = tmp_path / "golden.csv"
    golden.write_text("k,value,count\nb,1.0,1\na,1.0,1\n")
    result = run("sum", data, "--by", "k", "--expect", golden, "-q")
    assert (result.exit_code, result.stderr) == (
        4,
        f"Error: --expect {golden}: row 0 has key k='a', the golden file k='b' "
        "(the keys differ in 2 of 2 rows)\n",
    )


def test_expect_names_the_first_group_only_one_side_has(tmp_path: Path) -> None:
    data = golden_keys(tmp_path, ["a", "b"], "data")
    more = golden_keys(tmp_path, ["a", "b", "c"], "more")
    golden = tmp_path / "golden.tsv"
    ok("sum", more, "--by", "k", "-o", golden, "-q")
    result = run("sum", data, "--by", "k", "--expect", golden, "-q")
    assert (result.exit_code, result.stderr) == (
        4,
        f"Error: --expect {golden}: the result has 2 groups, the golden file 3; the first "
        "only the golden file has: row 2, key k='c'\n",
    )


def test_expect_without_the_key_columns_is_an_error(tmp_path: Path) -> None:
    data = golden_keys(tmp_path, ["a", "b"], "data")
    golden = tmp_path / "golden.csv"
    golden.write_text("segment,value,count\n0,1.0,1\n1,1.0,1\n")
    result = run("sum", data, "--by", "k", "--expect", golden, "-q")
    assert (result.exit_code, result.stderr) == (
        1,
        f"Error: --expect {golden}: no key column 'k' to compare with "
        "(columns: segment, value, count)\n",
    )


@pytest.mark.parametrize("fmt", ["parquet", "arrow", "csv", "tsv"])
@pytest.mark.parametrize("command", [["sum"], ["agg", "--op", "sum"]])
def test_a_golden_with_the_key_column_twice_is_a_read_error(
    tmp_path: Path, fmt: str, command: list[str]
) -> None:
    data = golden_keys(tmp_path, ["a", "b"], "data")
    keys = pa.array(["a", "b"])
    names = ["k", "k", "value" if command == ["sum"] else "sum"]
    table = pa.Table.from_arrays([keys, keys, pa.array([1.0, 1.0])], names=names)
    golden = write_table(tmp_path / f"golden.{fmt}", table)
    result = run(*command, data, "--by", "k", "--expect", golden, "-q")
    assert (result.exit_code, result.stderr) == (
        3,
        f"Error: --expect {golden}: 2 columns are named 'k'; cannot tell which one to read "
        "(rename them)\n",
    )


@pytest.mark.parametrize("fmt", [*EXPECT_FORMATS, "npy", "npz"])
@pytest.mark.parametrize("kind", list(KEY_KINDS))
def test_a_golden_segcli_wrote_passes_for_every_key_kind(
    tmp_path: Path, kind: str, fmt: str
) -> None:
    # CSV keys such as 007 (a string), 1.50 (a decimal) or hex bytes read back as the data's.
    path = write_table(tmp_path / "t.parquet", values_table({"k": KEY_KINDS[kind]}))
    keys_out = ["--keys-out", tmp_path / "k.csv"] if fmt in ("npy", "npz") else []
    args = ["--by", "k", "--null-keys", "group", "-q"]
    # agg --expect takes no JSON golden, and .npy one result column: "sum,mean" is two.
    commands = [["sum"], *([["agg", "--op", "sum,mean"]] if fmt not in ("json", "npy") else [])]
    for command in commands:
        golden = tmp_path / f"golden_{command[0]}.{fmt}"
        ok(*command, path, *args, "-o", golden, *keys_out)
        ok(*command, path, *args, "--expect", golden)


def test_a_parquet_golden_of_second_keys_passes(tmp_path: Path) -> None:
    # Parquet has no seconds: the golden holds the keys in milliseconds, the same instants.
    table = pa.table(
        {
            "t": pa.array([5, 1, 5], pa.timestamp("s")),
            "c": pa.array([7, 7, 2], pa.time32("s")),
            "v": [1.0, 2.0, 3.0],
        }
    )
    path = write_table(tmp_path / "t.arrow", table)
    golden = tmp_path / "golden.parquet"
    ok("sum", path, "--by", "t,c", "-o", golden, "-q")
    ok("sum", path, "--by", "t,c", "--expect", golden, "-q")
    # A golden key with a fraction of a second is another key.
    pq.write_table(
        pa.table({"t": pa.array([1000, 5000, 5001], pa.timestamp("ms"))}).append_column(
            "c", pa.array([7000, 2000, 7000], pa.time32("ms"))
        ),
        golden,
    )
    result = run("sum", path, "--by", "t,c", "--expect", golden, "-q")
    assert result.exit_code == 4
    assert "row 2 has key t=1970-01-01 00:00:05, c=00:00:07, the golden file " in result.stderr
    assert "t=1970-01-01 00:00:05.001, c=00:00:07 (the keys differ in 1 of 3 rows)" in result.stderr


def test_csv_golden_keys_compare_by_value_in_the_data_key_types(tmp_path: Path) -> None:
    table = pa.table(
        {
            "s": pa.array(["007", "", None]),
            "i": pa.array([1, 2, 3], pa.int16()),
            "v": [1.0, 2.0, 3.0],
        }
    )
    path = write_table(tmp_path / "t.parquet", table)
    golden = tmp_path / "golden.csv"
    # A zero-padded integer is the integer; a quoted "" the empty string, an empty field null.
    golden.write_text('s,i,value,count\n"",02,2.0,1\n007,1,1.0,1\n,3,3.0,1\n')
    ok("sum", path, "--by", "s,i", "--null-keys", "group", "--expect", golden, "-q")
    golden.write_text('s,i,value,count\n,02,2.0,1\n007,1,1.0,1\n"",3,3.0,1\n')
    result = run("sum", path, "--by", "s,i", "--null-keys", "group", "--expect", golden, "-q")
    assert (result.exit_code, result.stderr) == (
        4,
        f"Error: --expect {golden}: row 0 has key s='', i=2, the golden file s=null, i=2 "
        "(the keys differ in 2 of 3 rows)\n",
    )


def test_a_missing_or_corrupt_keys_from_file_is_named_with_its_option(tmp_path: Path) -> None:
    data = write_table(tmp_path / "d.parquet", pa.table({"s": ["a", None, "b"], "v": [1.0, 2, 4]}))
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    for name, said in (
        ("nofile.csv", "no such file"),
        ("bad.parquet", "not a valid Parquet file"),
    ):
        keys = tmp_path / name
        result = run("sum", data, "--data-column", "v", "--by", "s", "--keys-from", keys, "-q")
        assert result.exit_code == 3
        assert result.stderr.startswith(f"Error: --keys-from {keys}: {said}"), result.stderr
        assert result.stderr.count("\n") == 1


def test_a_null_key_is_named_null_in_messages(tmp_path: Path) -> None:
    data = write_table(tmp_path / "d.parquet", pa.table({"s": ["a", None, "a"], "v": [1.0, 2, 4]}))
    keys = write_table(tmp_path / "k.parquet", pa.table({"s": ["a"]}))
    args = ["--data-column", "v", "--by", "s", "--keys-from", keys, "--null-keys", "group"]
    result = run("sum", data, *args, "-q")
    assert result.exit_code == 1
    assert f"row 1 has key s=null, which is not in --keys-from {keys}" in result.stderr


@pytest.mark.parametrize("command", ["sum", "check"])
def test_a_null_key_in_keys_from_needs_null_keys_group(tmp_path: Path, command: str) -> None:
    """A --keys-from row with a null or NaN key names a group no row can reach while null keys
    are dropped: refused (exit 2) with both ways out; with --null-keys group it counts them."""
    data = tmp_path / "d.parquet"
    pq.write_table(pa.table({"k": ["a", None, "b", None], "v": [1.0, 2.0, 3.0, 4.0]}), data)
    keys = tmp_path / "keys.parquet"
    pq.write_table(pa.table({"k": ["b", None, "a"]}), keys)
    out = tmp_path / "out.csv"
    args = [command, data, "--data-column", "v", "--by", "k", "--keys-from", keys, "-q"]
    args += ["-o", out] if command == "sum" else ["--max-empty", "0"]
    refused = run(*args)
    assert refused.exit_code == 2, refused.stderr
    assert refused.stderr.splitlines()[0] == (
        f"Error: --keys-from {keys}: row 1 has a null key in column 'k', which no row can reach "
        "while null keys are dropped; give --null-keys group to count the rows of null keys "
        f"there, or remove the row (see 'segcli {command} --help')"
    )
    assert not out.exists()
    grouped = run(*args, "--null-keys", "group")
    assert grouped.exit_code == 0, grouped.stderr
    if command == "sum":
        assert out.read_text() == "k,value,count\nb,3.0,1\n,6.0,2\na,1.0,1\n"
    floats, float_keys = tmp_path / "f.parquet", tmp_path / "fk.parquet"
    pq.write_table(pa.table({"f": [1.0, 2.0], "v": [1.0, 2.0]}), floats)
    pq.write_table(pa.table({"f": [1.0, float("nan")]}), float_keys)
    nan = run("sum", floats, "--data-column", "v", "--by", "f", "--keys-from", float_keys, "-q")
    assert nan.exit_code == 2 and "row 1 has a NaN key in column 'f'" in nan.stderr


def test_the_summary_names_the_keys_out_file(tmp_path: Path) -> None:
    """A .npy/.npz output's key table goes to --keys-out: the summary says where, in its
    output line and in the JSON's keys."""
    data = tmp_path / "d.parquet"
    pq.write_table(pa.table({"k": ["a", "b", "a"], "v": [1.0, 2.0, 3.0]}), data)
    out, keys_out, summary = tmp_path / "out.npy", tmp_path / "keys.csv", tmp_path / "s.json"
    args = ["--data-column", "v", "--by", "k", "--summary-json", summary]
    for command in (["sum"], ["agg", "--op", "sum,max"]):
        target = out if command == ["sum"] else out.with_suffix(".npz")
        ran = ok(*command, data, *args, "-o", target, "--keys-out", keys_out)
        (line,) = (line for line in ran.stderr.splitlines() if line.lstrip().startswith("output"))
        assert line.endswith(f"; key table {keys_out}"), line
        assert json.loads(summary.read_text())["keys"]["keys_out"] == str(keys_out)
    ok("sum", data, *args, "-o", tmp_path / "out.csv", "-q")
    assert json.loads(summary.read_text())["keys"]["keys_out"] is None


def test_names_holding_commas_are_given_and_listed_in_quotes(tmp_path: Path) -> None:
    table = pa.table(
        {"city, state": ["a", "b", "a"], 'say "hi"': ["x", "x", "y"], "v": [1.0, 2.0, 4.0]}
    )
    path = write_table(tmp_path / "t.parquet", table)
    out = tmp_path / "out.parquet"
    by = '"city, state", "say ""hi"""'
    ok("sum", str(path), "--data-column", "v", "--by", by, "-o", str(out))
    assert got(out, ["city, state", 'say "hi"']) == expected(table, ["city, state", 'say "hi"'])
    # Unquoted, the comma splits: the listing shows how to give the name.
    wrong = run_main("sum", str(path), "--data-column", "v", "--by", "city, state")
    assert wrong.exit_code == 2
    listed = 'no column \'city\' (columns: "city, state", "say ""hi""", v)'
    assert listed in wrong.stderr


@pytest.mark.parametrize("command", [["sum"], ["check"], ["agg", "--op", "sum,max"]])
def test_stdin_is_read_through_its_path(tmp_path: Path, command: list[str]) -> None:
    """DATA '-' with --by: the table piped in is read as /dev/stdin, a file by its path."""
    table = pa.table({"k": ["b", "a", "b", None], "v": [1.0, 2.0, 4.0, 8.0]})
    path = write_table(tmp_path / "t.parquet", table)
    args = ["--data-column", "v", "--by", "k", "-q"]
    piped = subprocess.run(
        [sys.executable, "-m", "segcli", *command[:1], "-", *command[1:], *args],
        input=path.read_bytes(),
        capture_output=True,
        check=False,
    )
    assert piped.returncode == 0, piped.stderr
    named = subprocess.run(
        [sys.executable, "-m", "segcli", *command[:1], str(path), *command[1:], *args],
        capture_output=True,
        check=False,
    )
    assert piped.stdout == named.stdout
    if command == ["sum"]:
        assert piped.stdout.decode().splitlines() == ["k\tvalue", "a\t2.0", "b\t5.0"]


def test_stdin_without_a_path_to_read_it_by_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the system has no /dev/stdin, --by has no path to read DATA '-' by: one line."""
    import os.path

    exists = os.path.exists
    monkeypatch.setattr(os.path, "exists", lambda path: path != "/dev/stdin" and exists(path))
    result = run_main("sum", "-", "--data-column", "v", "--by", "k", "-q")
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "Error: --by reads key columns of a table file by its path, and stdin has none here"
    )
    assert result.stderr.count("\n") == 1
