"""The rows of an Arrow IPC file or stream, counted from its batches' headers: pyarrow's own
count is the reference, for every layout its writers produce."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from click.testing import CliRunner

from segcli.cli import cli
from segcli.io.ipc_rows import ipc_rows

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
