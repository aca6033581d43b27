"""The rows of an Arrow IPC file or stream, counted from its batches' headers: pyarrow's own
count is the reference, for every layout its writers produce."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from click.testing import CliRunner

from segcli.cli import cli
from segcli.io.ipc_rows import ipc_counts, ipc_rows

WRITERS: dict[str, Callable[..., ipc.RecordBatchStreamWriter]] = {
    "file": ipc.new_file,
    "stream": ipc.new_stream,
}
OPTIONS = {
    "plain": {},
    "lz4": {"compression": "lz4"},
    "zstd": {"compression": "zstd"},
    "before Arrow 0.15": {"use_legacy_format": True},
}


def batch(rows: int, seed: int, dictionary: list[str] | None = None) -> pa.RecordBatch:
    """Values, ids, and a dictionary column (its own dictionary, or ``dictionary``)."""
    rng = np.random.default_rng(seed)
    codes = pa.array(rng.integers(0, 3, rows), pa.int32())
    words = pa.array(dictionary or [f"w{seed}", f"v{seed}", f"u{seed}"])
    return pa.record_batch(
        {
            "v": rng.standard_normal(rows),
            "s": rng.integers(0, 10, rows),
            "k": pa.DictionaryArray.from_arrays(codes, words),
        }
    )


def written(kind: str, batches: list[pa.RecordBatch], **options: object) -> bytes:
    sink = io.BytesIO()
    schema = batch(0, 0).schema
    with WRITERS[kind](sink, schema, options=ipc.IpcWriteOptions(**options)) as writer:
        for one in batches:
            writer.write_batch(one)
    return sink.getvalue()


def pyarrow_rows(data: bytes) -> int:
    if data.startswith(b"ARROW1"):
        return int(ipc.open_file(pa.BufferReader(data)).count_rows())
    return sum(one.num_rows for one in ipc.open_stream(pa.BufferReader(data)))


SAME_DICTIONARY = ["a", "b", "c"]
BATCHES = {
    "no batch": [],
    "an empty batch": [batch(0, 1, SAME_DICTIONARY)],
    "several": [batch(rows, i, SAME_DICTIONARY) for i, rows in enumerate([3, 0, 1000, 7])],
}


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
@pytest.mark.parametrize("batches", BATCHES.values(), ids=BATCHES.keys())
@pytest.mark.parametrize("kind", WRITERS)
def test_rows_are_pyarrows_count(kind, batches, options):
    data = written(kind, batches, **options)
    assert ipc_rows(io.BytesIO(data)) == pyarrow_rows(data) == sum(b.num_rows for b in batches)


@pytest.mark.parametrize("deltas", [False, True])
def test_a_streams_dictionary_batches_are_not_rows(deltas):
    # Each batch has a dictionary of its own: a stream replaces it, or adds a delta, between
    # record batches.
    data = written("stream", [batch(5, 1), batch(9, 2), batch(2, 3)], emit_dictionary_deltas=deltas)
    assert ipc_rows(io.BytesIO(data)) == pyarrow_rows(data) == 16


def test_a_stream_without_its_end_marker():
    data = written("stream", [batch(5, 1, SAME_DICTIONARY), batch(4, 2, SAME_DICTIONARY)])
    assert data.endswith(b"\xff\xff\xff\xff\x00\x00\x00\x00")
    assert ipc_rows(io.BytesIO(data[:-8])) == 9


def rows_or_error(data: bytes) -> int | None:
    """The rows counted, or None for a ValueError (any other exception propagates: it would
    be a traceback)."""
    try:
        return ipc_rows(io.BytesIO(data))
    except ValueError:
        return None


@pytest.mark.parametrize("kind", WRITERS)
def test_a_cut_or_damaged_file_is_a_value_error(kind):
    data = written(kind, [batch(rows, i, SAME_DICTIONARY) for i, rows in enumerate([6, 8])])
    cut = [rows_or_error(data[:n]) for n in range(len(data))]
    if kind == "file":  # its footer is at the end
        assert cut == [None] * len(data)
    else:  # a stream cut between two messages is a shorter stream
        assert set(cut) == {None, 0, 6, 14}
    rng = np.random.default_rng(5)
    for _ in range(300):
        damaged = bytearray(data)
        damaged[rng.integers(len(damaged))] = rng.integers(256)
        rows_or_error(bytes(damaged))


def test_a_stream_cut_inside_a_body_is_a_read_error(tmp_path: Path):
    data = written("stream", [batch(1000, 1, SAME_DICTIONARY), batch(1000, 2, SAME_DICTIONARY)])
    path = tmp_path / "cut.arrow"
    path.write_bytes(data[: len(data) - 5000])
    result = CliRunner().invoke(
        cli,
        ["sum", str(path), "--data-column", "v", "--ids-column", "s", "--chunk-rows", "100"],
    )
    assert result.exit_code == 3, result.output
    assert result.stderr.strip() == (
        f"Error: {path}: not a valid Arrow IPC file (a message's body lies beyond the end of "
        "the file)"
    )


def columns_of_every_kind(rows: int, seed: int) -> dict[str, pa.Array]:
    """A column of each layout, with nulls at every level that has them; the dictionaries of
    ``dn`` and ``dnull`` hold nulls, those of ``d`` and ``s.k`` none."""
    rng = np.random.default_rng(seed)

    def some_null(n: int, share: float = 0.2) -> np.ndarray:
        return rng.random(n) < share

    codes = pa.array(rng.integers(0, 3, rows).astype(np.int32), mask=some_null(rows))
    offsets = pa.array(np.arange(0, 2 * rows + 1, 2), pa.int32())
    items = pa.array(rng.integers(0, 5, 2 * rows), mask=some_null(2 * rows))
    flags = (np.arange(rows) % 2).astype(np.int8)
    return {
        "f": pa.array(rng.standard_normal(rows), mask=some_null(rows, 0.05)),
        "i": pa.array(rng.integers(0, 9, rows)),
        "b": pa.array(rng.random(rows) < 0.5, mask=some_null(rows)),
        "t": pa.array([f"w{i}" for i in range(rows)], mask=some_null(rows)),
        "lt": pa.array([f"w{i}" for i in range(rows)], pa.large_string(), mask=some_null(rows)),
        "v": pa.array([f"w{i}" for i in range(rows)], pa.string_view(), mask=some_null(rows)),
        "ts": pa.array(rng.integers(0, 10**9, rows), pa.timestamp("ms"), mask=some_null(rows)),
        "z": pa.nulls(rows),
        "l": pa.ListArray.from_arrays(offsets, items, mask=pa.array(some_null(rows))),
        "fl": pa.FixedSizeListArray.from_arrays(items, 2, mask=pa.array(some_null(rows))),
        "s": pa.StructArray.from_arrays(
            [
                pa.array(rng.standard_normal(rows), mask=some_null(rows)),
                pa.DictionaryArray.from_arrays(codes, pa.array(["x", "y", "z"])),
            ],
            ["x", "k"],
            mask=pa.array(some_null(rows)),
        ),
        "m": pa.array(
            [None if i % 3 == 0 else [("a", None if i % 2 else i)] for i in range(rows)],
            pa.map_(pa.string(), pa.int64()),
        ),
        "u": pa.UnionArray.from_sparse(
            pa.array(flags), [pa.array([None] * rows, pa.int64()), pa.array(["a"] * rows)]
        ),
        "r": pa.RunEndEncodedArray.from_arrays(
            pa.array(np.arange(1, rows + 1, dtype=np.int32)),
            pa.array([None, 1.0] * (rows // 2) + [None] * (rows % 2), pa.float64()),
        ),
        "d": pa.DictionaryArray.from_arrays(codes, pa.array(["a", "b", "c"])),
        "dn": pa.DictionaryArray.from_arrays(codes, pa.array(["a", None, "c"])),
        "dl": pa.DictionaryArray.from_arrays(codes, pa.array([[1], None, [None]])),
        "dnull": pa.DictionaryArray.from_arrays(codes, pa.nulls(3)),
    }


def kinds_batches(sizes: list[int]) -> list[pa.RecordBatch]:
    """Batches of ``sizes`` rows, slices of one batch (so they share a schema and offsets
    into their buffers)."""
    whole = pa.record_batch(columns_of_every_kind(sum(sizes), len(sizes)))
    starts = np.cumsum([0, *sizes])
    return [whole.slice(start, rows) for start, rows in zip(starts, sizes, strict=False)]


def own_dictionaries(entries: list[list[str | None]]) -> list[pa.RecordBatch]:
    """A batch per dictionary: a stream replaces it, or adds a delta to the last."""
    indices = pa.array([0, 1, None, 1], pa.int32())
    return [
        pa.record_batch(
            {"d": pa.DictionaryArray.from_arrays(indices, pa.array(words)), "x": [1, None, 3, 4]}
        )
        for words in entries
    ]


KINDS_BATCHES = {
    "no batch": [],
    "an empty batch": kinds_batches([0]),
    "several": kinds_batches([40, 0, 7, 300]),
}


def reference_nulls(column: pa.Array) -> int:
    """Rows that are null: a dictionary's rows whose entry is null too (as ``--by`` drops
    them)."""
    if pa.types.is_dictionary(column.type):
        return column.to_pylist().count(None)
    return int(column.null_count)


def described(tmp_path: Path, data: bytes) -> dict[str, Any]:
    path = tmp_path / "t.arrow"
    path.write_bytes(data)
    result = CliRunner().invoke(cli, ["info", str(path), "--json"])
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def pyarrow_described(data: bytes) -> tuple[str, int, int, list[int]]:
    """``info``'s facts read through pyarrow, every batch decoded: kind, rows, record batches,
    null rows of each column."""
    if data.startswith(b"ARROW1"):
        reader = ipc.open_file(pa.BufferReader(data))
        batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
    else:
        batches = list(ipc.open_stream(pa.BufferReader(data)))
    schema = ipc.read_schema(pa.BufferReader(data[8:] if data.startswith(b"ARROW1") else data))
    nulls = [sum(reference_nulls(b.column(i)) for b in batches) for i in range(len(schema))]
    kind = "file" if data.startswith(b"ARROW1") else "stream"
    return kind, sum(b.num_rows for b in batches), len(batches), nulls


def assert_described_as_pyarrow_reads_it(tmp_path: Path, data: bytes) -> None:
    facts = described(tmp_path, data)
    kind, rows, batches, nulls = pyarrow_described(data)
    assert (facts["ipc"], facts["rows"], facts["record_batches"]) == (kind, rows, batches)
    assert [column["nulls"] for column in facts["columns"]] == nulls


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
@pytest.mark.parametrize("batches", KINDS_BATCHES.values(), ids=KINDS_BATCHES.keys())
@pytest.mark.parametrize("kind", WRITERS)
def test_info_from_headers_is_what_pyarrow_reads(tmp_path, kind, batches, options):
    schema = (batches or kinds_batches([0]))[0].schema
    sink = io.BytesIO()
    with WRITERS[kind](sink, schema, options=ipc.IpcWriteOptions(**options)) as writer:
        for one in batches:
            writer.write_batch(one)
    assert_described_as_pyarrow_reads_it(tmp_path, sink.getvalue())


@pytest.mark.parametrize(
    "entries",
    [[["a", "b"], ["a", "b", "c"]], [["a", "b"], ["a", "b", None]], [["a", None], ["a", None]]],
    ids=["no null entry", "a later null entry", "a null entry"],
)
@pytest.mark.parametrize("deltas", [False, True])
@pytest.mark.parametrize("kind", WRITERS)
def test_info_counts_rows_on_a_replaced_or_grown_dictionarys_null_entry(
    tmp_path, kind, deltas, entries
):
    if kind == "file" and not deltas and entries[0] != entries[1]:
        pytest.skip("a file holds one dictionary, or deltas to it")
    sink = io.BytesIO()
    batches = own_dictionaries(entries)
    options = ipc.IpcWriteOptions(emit_dictionary_deltas=deltas)
    with WRITERS[kind](sink, batches[0].schema, options=options) as writer:
        for one in batches:
            writer.write_batch(one)
    assert_described_as_pyarrow_reads_it(tmp_path, sink.getvalue())


def garbled_bodies(data: bytes) -> bytes:
    """``data`` with its record batches' bodies overwritten by noise, their headers kept."""
    start = 8 if data.startswith(b"ARROW1") else 0  # a file's stream follows its magic
    stream = pa.BufferReader(data[start:])
    garbled = bytearray(data)
    rng = np.random.default_rng(0)
    while True:
        try:
            message = ipc.read_message(stream)
        except EOFError:  # the end marker
            return bytes(garbled)
        if message.type == "record batch":
            end = start + stream.tell()
            garbled[end - message.body.size : end] = rng.bytes(message.body.size)


@pytest.mark.parametrize("kind", WRITERS)
def test_info_reads_no_compressed_body(tmp_path, kind):
    """Counted from the headers, a compressed body is not decompressed: noise in every body
    is described as the whole file is (pyarrow's reader fails on it)."""
    data = written(kind, [batch(5000, i, SAME_DICTIONARY) for i in range(3)], compression="lz4")
    garbled = garbled_bodies(data)
    with pytest.raises(pa.ArrowException):
        pyarrow_described(garbled)
    assert described(tmp_path, garbled) == described(tmp_path, data)


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
@pytest.mark.parametrize("kind", WRITERS)
def test_counts_leave_to_the_data_only_dictionaries_holding_nulls(kind, options):
    batches = KINDS_BATCHES["several"]
    sink = io.BytesIO()
    with WRITERS[kind](sink, batches[0].schema, options=ipc.IpcWriteOptions(**options)) as writer:
        for one in batches:
            writer.write_batch(one)
    counts = ipc_counts(io.BytesIO(sink.getvalue()))
    names = batches[0].schema.names
    assert sorted(names[i] for i in counts.unsure) == ["dl", "dn", "dnull"]
    assert (counts.rows, counts.batches) == (347, 4)
    for i, name in enumerate(names):
        if i not in counts.unsure:
            assert counts.nulls[i] == sum(reference_nulls(b.column(i)) for b in batches), name
